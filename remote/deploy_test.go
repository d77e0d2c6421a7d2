package remote

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// execServer is an in-process SSH server that runs exec requests as sshd does:
// through a "login shell", here `sh -c` of login (what an rc file would run) and the
// command, with HOME set to home. It stands in for a host in the bootstrap's tests.
func execServer(t *testing.T, home, login string) (addr string, hostKey ssh.Signer) {
	t.Helper()
	hostKey = newSigner(t, "ed25519")
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(hostKey)
	return serveSSH(t, cfg, func(nch ssh.NewChannel) {
		if nch.ChannelType() != "session" {
			nch.Reject(ssh.UnknownChannelType, "session only")
			return
		}
		if ch, creqs, err := nch.Accept(); err == nil {
			go serveSession(ch, creqs, home, login)
		}
	}), hostKey
}

func serveSession(ch ssh.Channel, reqs <-chan *ssh.Request, home, login string) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			req.Reply(false, nil)
			continue
		}
		var p struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &p); err != nil {
			req.Reply(false, nil)
			return
		}
		req.Reply(true, nil)
		cmd := exec.Command("sh", "-c", login+"\n"+p.Command)
		cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		stdin, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			return
		}
		// Not waited for: the command may end before the client closes its side.
		go func() {
			io.Copy(stdin, ch)
			stdin.Close()
		}()
		status := 0
		if err := cmd.Wait(); err != nil {
			status = 255
			if ee, ok := err.(*exec.ExitError); ok {
				status = ee.ExitCode()
			}
		}
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
		return
	}
}

// fakeAgent is a stand-in for the agent binary: it says it started, with its
// arguments, and then echoes its input, as the protocol would run over it.
const fakeAgent = "#!/bin/sh\necho \"fake agent started: $*\"\nexec cat\n"

type bootstrapHost struct {
	home string
	conn *Conn
	opts AgentOptions
	warn []string
}

// newBootstrapHost is a host behind execServer whose login shell runs login, and a
// connection to it with the given connect timeout.
func newBootstrapHost(t *testing.T, login string, connectTimeout time.Duration) *bootstrapHost {
	t.Helper()
	h := &bootstrapHost{home: t.TempDir()}
	addr, key := execServer(t, h.home, login)
	self := filepath.Join(t.TempDir(), "bloatbench")
	if err := os.WriteFile(self, []byte(fakeAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	hash, err := FileHash(self)
	if err != nil {
		t.Fatal(err)
	}
	h.opts = AgentOptions{Self: self, SelfHash: hash, Warn: func(m string) { h.warn = append(h.warn, m) }}
	target := clientTarget(t, addr, knownhosts.Line([]string{knownhosts.Normalize(addr)}, key.PublicKey()))
	target.ConnectTimeout = connectTimeout
	conn, err := (&Dialer{Home: t.TempDir()}).DialTarget(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.conn = conn
	return h
}

// start starts the agent and checks it runs and speaks over the session's pipes.
func (h *bootstrapHost) start(t *testing.T) *Agent {
	t.Helper()
	a, err := h.conn.StartAgent(context.Background(), h.opts)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(a.Stdout)
	line, err := r.ReadString('\n')
	if err != nil || line != "fake agent started: agent\n" {
		t.Fatalf("the agent's first line %q, %v; stderr %q", line, err, a.StderrTail())
	}
	io.WriteString(a.Stdin, "ping\n")
	if echo, err := r.ReadString('\n'); err != nil || echo != "ping\n" {
		t.Fatalf("the agent's stdin does not reach it: %q, %v", echo, err)
	}
	a.Stdin.Close()
	a.Wait()
	return a
}

func TestStartAgentInstallsThenReuses(t *testing.T) {
	// A login shell that greets: its lines come before the bootstrap's and are skipped.
	h := newBootstrapHost(t, `echo "Welcome to the lab"; echo "bloatbench-bootstrap-startle"`, 10*time.Second)
	cache := filepath.Join(h.home, ".cache", "bloatbench")
	os.MkdirAll(cache, 0o755)
	old, recent := filepath.Join(cache, "agent-0ld0ld0ld0ld0ld0"), filepath.Join(cache, "agent-4ecent4ecent4ec")
	oldStamp := filepath.Join(cache, "checked-0ld0ld0ld0ld0ld0")
	for _, p := range []string{old, recent, oldStamp} {
		os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
	}
	ten := time.Now().Add(-10 * 24 * time.Hour)
	os.Chtimes(old, ten, ten)
	os.Chtimes(oldStamp, ten, ten)

	a := h.start(t)
	want := filepath.Join(cache, "agent-"+h.opts.SelfHash[:16])
	if !a.Installed || a.Path != want {
		t.Errorf("first start: installed=%v path %q, want %q", a.Installed, a.Path, want)
	}
	if _, err := os.Stat(old); err == nil {
		t.Error("an agent unused for 10 days was not pruned")
	}
	if _, err := os.Stat(recent); err != nil {
		t.Error("an agent used today was pruned")
	}
	if _, err := os.Stat(oldStamp); err == nil {
		t.Error("the stamp of an agent unused for 10 days was not pruned")
	}
	if _, err := os.Stat(filepath.Join(cache, "checked-"+h.opts.SelfHash[:16])); err != nil {
		t.Errorf("the installed agent's stamp: %v", err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(cache, "*.tmp")); len(tmp) != 0 {
		t.Errorf("uploads left behind: %v", tmp)
	}
	if a := h.start(t); a.Installed {
		t.Error("second start copied the agent again")
	}
	if len(h.warn) != 0 {
		t.Errorf("warnings for a fast shell: %v", h.warn)
	}
}

// The cached agent's hash is checked when it is installed and then once a day, its
// size, inode and mtime kept beside it in between; a file written since (same size)
// is checked again, and replaced.
func TestStartAgentHashesOnceADay(t *testing.T) {
	real, err := exec.LookPath("sha256sum")
	if err != nil {
		t.Fatal(err)
	}
	bin, calls := t.TempDir(), filepath.Join(t.TempDir(), "calls")
	os.WriteFile(filepath.Join(bin, "sha256sum"), []byte("#!/bin/sh\necho hashed >> "+calls+"\nexec "+real+" \"$@\"\n"), 0o755)
	h := newBootstrapHost(t, "PATH="+bin+":$PATH", 10*time.Second)
	hashes := func() int {
		b, _ := os.ReadFile(calls)
		os.Remove(calls)
		return strings.Count(string(b), "hashed")
	}
	agentPath := filepath.Join(h.home, ".cache", "bloatbench", "agent-"+h.opts.SelfHash[:16])
	if a := h.start(t); !a.Installed {
		t.Fatal("the first start did not install the agent")
	}
	hashes()
	for i := range 2 {
		if a := h.start(t); a.Installed {
			t.Fatalf("start %d copied the agent again", i+2)
		}
		if n := hashes(); n != 0 {
			t.Errorf("start %d hashed the agent %d times, with its stamp as written", i+2, n)
		}
	}
	// Last checked two days ago: checked again, and stamped as used.
	two := time.Now().Add(-48 * time.Hour)
	os.Chtimes(agentPath, two, two)
	st, err := exec.Command("stat", "-c", "%s %i %y %Y", agentPath).Output()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(filepath.Dir(agentPath), "checked-"+h.opts.SelfHash[:16]), fmt.Appendf(nil, "%s %s", h.opts.SelfHash, st), 0o644)
	if a := h.start(t); a.Installed {
		t.Error("a day-old agent was copied again")
	}
	if n := hashes(); n != 1 {
		t.Errorf("a day-old agent was hashed %d times, want 1", n)
	}
	if fi, err := os.Stat(agentPath); err != nil || time.Since(fi.ModTime()) > time.Hour {
		t.Errorf("the day-old agent was not stamped as used: %v, %v", fi.ModTime(), err)
	}
	// Rewritten in place with other bytes of the same size: its mtime tells.
	b, _ := os.ReadFile(agentPath)
	os.WriteFile(agentPath, append([]byte("#!/bin/sh\necho tampered\nexit 1\n#"), b[29:]...)[:len(b)], 0o755)
	if a := h.start(t); !a.Installed {
		t.Error("an agent written over in place was run")
	}
}

// A cached file with the agent's name but other content is replaced, not run.
func TestStartAgentReplacesAWrongFile(t *testing.T) {
	h := newBootstrapHost(t, "", 10*time.Second)
	cache := filepath.Join(h.home, ".cache", "bloatbench")
	os.MkdirAll(cache, 0o755)
	os.WriteFile(filepath.Join(cache, "agent-"+h.opts.SelfHash[:16]), []byte("#!/bin/sh\necho tampered\n"), 0o755)
	if a := h.start(t); !a.Installed {
		t.Error("a file with the wrong hash was run as the agent")
	}
}

func TestStartAgentSlowShellWarns(t *testing.T) {
	h := newBootstrapHost(t, "sleep 1.5", 10*time.Second)
	a := h.start(t)
	if a.ShellStart < 1500*time.Millisecond {
		t.Errorf("shell start measured %v, the shell slept 1.5 s", a.ShellStart)
	}
	if len(h.warn) != 1 || !strings.Contains(h.warn[0], "host server: its login shell took 1.") || !strings.Contains(h.warn[0], "~/.bashrc") {
		t.Errorf("warnings %q", h.warn)
	}
}

func TestStartAgentHungShellFailsAtConnectTimeout(t *testing.T) {
	h := newBootstrapHost(t, "sleep 30", time.Second)
	start := time.Now()
	_, err := h.conn.StartAgent(context.Background(), h.opts)
	if err == nil {
		t.Fatal("started through a shell that hangs")
	}
	for _, want := range []string{"host server", "the login shell did not run a command within 1s", "~/.bashrc", "pyenv", "connect_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("gave up after %v, the shell hangs for 30 s", took)
	}
}

func TestStartAgentPath(t *testing.T) {
	h := newBootstrapHost(t, "", 10*time.Second)
	h.opts.AgentPath = h.opts.Self
	if a := h.start(t); a.Installed || a.Path != h.opts.Self {
		t.Errorf("agent_path: installed=%v path %q", a.Installed, a.Path)
	}
	h.opts.AgentPath = "/nonexistent/bloatbench"
	_, err := h.conn.StartAgent(context.Background(), h.opts)
	if err == nil || !strings.Contains(err.Error(), "agent_path /nonexistent/bloatbench does not run") || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a missing agent_path: %v", err)
	}
}

func TestStartAgentCancelled(t *testing.T) {
	h := newBootstrapHost(t, "sleep 30", 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := h.conn.StartAgent(ctx, h.opts)
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("cancelled start: %v", err)
	}
}

// The bootstrap goes to the login shell as one argument of sh -c, single-quoted: it
// must hold no single quote (which would end the word) nor backslash (which fish
// reads inside single quotes).
func TestBootstrapScriptsQuoteAsOneWord(t *testing.T) {
	for name, s := range map[string]string{"bootstrapScript": bootstrapScript, "bootstrapPathScript": bootstrapPathScript} {
		if strings.ContainsAny(s, `'\`) {
			t.Errorf("%s holds a single quote or a backslash", name)
		}
	}
}
