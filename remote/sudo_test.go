package remote

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeSudo stands in for sudo: -n -l succeeds when the file ALLOW exists beside it
// (as a NOPASSWD rule for the agent would), else it says what sudo says; without
// -l it runs the command.
const fakeSudo = `#!/bin/sh
[ "$1" = -n ] || { echo "fake sudo: not -n" >&2; exit 9; }
shift
if [ "$1" = -l ]; then
  [ -e "$(dirname "$0")/ALLOW" ] && exit 0
  echo "sudo: a password is required" >&2
  exit 1
fi
exec "$@"
`

// sudoHost is a bootstrap host whose PATH starts with a folder holding fakeSudo.
func sudoHost(t *testing.T, allow bool) *bootstrapHost {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sudo"), []byte(fakeSudo), 0o755); err != nil {
		t.Fatal(err)
	}
	if allow {
		os.WriteFile(filepath.Join(dir, "ALLOW"), nil, 0o644)
	}
	h := newBootstrapHost(t, "PATH="+dir+":$PATH; export PATH", 5*time.Second)
	h.opts.Sudo = true
	return h
}

func TestStartAgentThroughSudo(t *testing.T) {
	h := sudoHost(t, true)
	a := h.start(t)
	if !a.Sudo || !a.Installed {
		t.Errorf("sudo=%v installed=%v", a.Sudo, a.Installed)
	}
	// The cache stays the login user's.
	if !strings.HasPrefix(a.Path, filepath.Join(h.home, ".cache", "bloatbench")+"/") {
		t.Errorf("agent at %s", a.Path)
	}
	h.start(t) // from the cache
}

func TestStartAgentSudoRefusedNamesTheRule(t *testing.T) {
	h := sudoHost(t, false)
	_, err := h.conn.StartAgent(t.Context(), h.opts)
	if !errors.Is(err, ErrNoSudo) {
		t.Fatalf("want ErrNoSudo, got %v", err)
	}
	user := os.Getenv("USER")
	for _, want := range []string{"host " + h.conn.Target.Name + ": ", "sudo said: sudo: a password is required", "Nothing was changed",
		"NOPASSWD: " + filepath.Join(h.home, ".cache", "bloatbench") + "/agent-* agent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error says no %q: %v (user %s)", want, err, user)
		}
	}
}

func TestSudoersLine(t *testing.T) {
	if got := SudoersLine("ann", "/home/ann/.cache/bloatbench/agent-0123456789abcdef", false); got != "ann ALL=(root) NOPASSWD: /home/ann/.cache/bloatbench/agent-* agent" {
		t.Errorf("cache: %s", got)
	}
	if got := SudoersLine("ann", "/opt/bloatbench", true); got != "ann ALL=(root) NOPASSWD: /opt/bloatbench agent" {
		t.Errorf("agent_path: %s", got)
	}
}
