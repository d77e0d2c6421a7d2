package remote

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/inventory"
)

// Blocks the parser cannot read, or would read as something else, are skipped with
// a warning naming the file and line; the rest of the file still applies.
func TestSSHConfigSkipsMatchBlocks(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	path := filepath.Join(home, ".ssh", "config")
	os.MkdirAll(filepath.Dir(path), 0o700)
	inc := filepath.Join(home, ".ssh", "broken.conf")
	os.WriteFile(inc, []byte("Match user bob\n  User nobody\n"), 0o600)
	cfg := `# a laptop's config

Match host foo exec "ip route | grep -q 10.1.0.0"
  ProxyJump bastion
  User vpnuser

Host lab
  HostName 192.0.2.20
  User admin

Match exec "test -f /etc/at-work"
  User worker
Match originalhost bar
  Port 2200

Match host db1,db?.example,!db9.example
  User dba

Include ` + inc + `

Match all
  Port 2222

Host after
  HostName 192.0.2.30
Host *
  User everyone
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var warn bytes.Buffer
	d, err := NewDialer(false, &warn)
	if err != nil {
		t.Fatalf("NewDialer with an unreadable Match block: %v", err)
	}
	resolve := func(dest string) Target {
		t.Helper()
		tg, err := d.Resolve(&inventory.Host{Name: "h", SSH: dest})
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	for dest, want := range map[string]string{
		"lab":             "admin@192.0.2.20:2222",
		"after":           "everyone@192.0.2.30:2222",
		"foo":             "everyone@foo:2222", // the exec block applies to no host
		"bar":             "everyone@bar:2222",
		"db1":             "dba@db1:2222", // Match host takes a comma-separated list
		"db2.example":     "dba@db2.example:2222",
		"db9.example":     "everyone@db9.example:2222",
		"someone@db1:22":  "someone@db1:22",
		"elsewhere.local": "everyone@elsewhere.local:2222",
	} {
		tg := resolve(dest)
		if got := tg.User + "@" + tg.Addr; got != want {
			t.Errorf("%s resolves to %s, want %s", dest, got, want)
		}
		if len(tg.ProxyJump) != 0 {
			t.Errorf("%s got ProxyJump %v from the skipped exec block", dest, tg.ProxyJump)
		}
	}
	w := warn.String()
	for _, want := range []string{path + ":3: ", path + ":11: ", path + ":13: ", path + ":19: ", "exec", "originalhost", inc} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings do not say %q:\n%s", want, w)
		}
	}
	if n := strings.Count(w, "\n"); n != 4 {
		t.Errorf("%d warnings, want 4 (one per skipped block or line):\n%s", n, w)
	}
	t.Logf("warnings:\n%s", w)
}

func TestSSHConfigAbsentOrUnusable(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	var warn bytes.Buffer
	d, err := NewDialer(true, &warn)
	if err != nil || d.Config != nil || warn.Len() != 0 || !d.AcceptNew {
		t.Fatalf("no ~/.ssh/config: %+v, %v, %q", d, err, warn.String())
	}
	// A file that includes itself: the parser's error names no line, so the file
	// is left out, saying so, and commands go on without it.
	path := filepath.Join(home, ".ssh", "config")
	os.MkdirAll(filepath.Dir(path), 0o700)
	os.WriteFile(path, []byte("Host lab\n  User admin\nInclude "+path+"\n"), 0o600)
	d, err = NewDialer(false, &warn)
	if err != nil || d.Config != nil || !strings.Contains(warn.String(), path+": ") || !strings.Contains(warn.String(), "without the file") {
		t.Fatalf("self-including config: %+v, %v, %q", d, err, warn.String())
	}
	os.Remove(path)
	// A file that is a folder cannot be read at all: that is an error to fix, not
	// a config to guess at.
	os.MkdirAll(filepath.Join(home, ".ssh", "config"), 0o700)
	if _, err := NewDialer(false, &warn); err == nil || !strings.Contains(err.Error(), filepath.Join(home, ".ssh", "config")) {
		t.Fatalf("unreadable config: %v", err)
	}
}
