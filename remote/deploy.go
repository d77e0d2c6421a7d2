package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// unameArch maps `uname -m` to Go's GOARCH for the architectures worth naming.
var unameArch = map[string]string{"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386", "riscv64": "riscv64", "ppc64le": "ppc64le", "s390x": "s390x"}

// FileHash is the SHA-256 of a file, hex.
func FileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// EnsureAgent makes sure the host has this bloatbench binary and returns the remote
// path to run. With agentPath (the inventory's agent_path) it uses that binary as is.
// Otherwise the controller's own executable (self, with hash selfHash) is copied to
// ~/.cache/bloatbench/agent-HASH on the host, unless a file with that hash is there
// already; the name carries the hash, so hosts sharing a home never race on it.
func (c *Conn) EnsureAgent(ctx context.Context, self, selfHash, agentPath string) (string, error) {
	name := c.Target.Name
	if agentPath != "" {
		if _, err := c.Output(ctx, Command(agentPath, "version"), nil); err != nil {
			return "", fmt.Errorf("host %s: agent_path %s does not run: %w", name, agentPath, err)
		}
		return agentPath, nil
	}
	out, err := c.Output(ctx, "uname -sm", nil)
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || !strings.EqualFold(f[0], runtime.GOOS) || unameArch[f[1]] != runtime.GOARCH {
		return "", fmt.Errorf("host %s is %s, but this bloatbench is built for %s/%s: build one for the host (GOOS=linux GOARCH=... go build ./cmd/bloatbench), copy it there, and set agent_path for the host in the inventory",
			name, strings.TrimSpace(string(out)), runtime.GOOS, runtime.GOARCH)
	}
	// The remote path is relative to the login directory: sshd starts commands there.
	path := ".cache/bloatbench/agent-" + selfHash[:16]
	// A use refreshes the file's time, which is what pruning goes by.
	check := fmt.Sprintf("if [ -x %[1]s ] && [ \"$(sha256sum < %[1]s)\" = %[2]s ]; then touch %[1]s; echo present; else echo absent; fi",
		Quote(path), Quote(selfHash+"  -"))
	out, err = c.Output(ctx, check, nil)
	if err != nil {
		return "", fmt.Errorf("host %s: look for the agent: %w", name, err)
	}
	if strings.TrimSpace(string(out)) == "present" {
		return path, nil
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		return "", fmt.Errorf("read own executable: %w", err)
	}
	// Hosts may share a home directory (the local lab's namespaces do): each upload
	// writes its own temporary file and renames it into place.
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := fmt.Sprintf("%s.%s.tmp", path, hex.EncodeToString(rnd[:]))
	install := fmt.Sprintf("mkdir -p .cache/bloatbench && cat > %[1]s && chmod 755 %[1]s && [ \"$(sha256sum < %[1]s)\" = %[2]s ] && mv -f %[1]s %[3]s",
		Quote(tmp), Quote(selfHash+"  -"), Quote(path))
	if _, err := c.Output(ctx, install, bytes.NewReader(bin)); err != nil {
		c.Output(ctx, Command("rm", "-f", tmp), nil)
		return "", fmt.Errorf("host %s: copy the agent there: %w", name, err)
	}
	// A new version arrived: agents (and uploads cut short) no controller has used
	// for a week go. A week, not at once: other controllers, of other versions, may
	// share this host and be about to start theirs.
	prune := fmt.Sprintf("find .cache/bloatbench -maxdepth 1 -type f -name 'agent-*' ! -name %s -mtime +%d -exec rm -f {} +",
		Quote(strings.TrimPrefix(path, ".cache/bloatbench/")), AgentKeepDays)
	c.Output(ctx, prune, nil) // best effort: an old file left is no harm
	return path, nil
}

// AgentKeepDays is how long an agent binary no controller uses stays on a host.
const AgentKeepDays = 7
