package qdisc

import (
	"path/filepath"
	"strings"
	"testing"
)

// With neither XDG_STATE_HOME nor HOME there is no journal folder: a run's journal
// and locks, and restore's search, are refused naming both variables, instead of
// landing in (or reading) the working directory, where a later restore would not
// look.
func TestJournalDirWithoutHome(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "")
	t.Chdir(t.TempDir())
	if d := JournalDir(); d != "" {
		t.Errorf("JournalDir without HOME = %q, want \"\"", d)
	}
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s without HOME: no error", what)
			return
		}
		for _, want := range []string{"XDG_STATE_HOME", "HOME", "Environment=HOME="} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", what, err, want)
			}
		}
	}
	_, err := FindJournalDir()
	check("FindJournalDir", err)
	_, err = Journals(JournalDir())
	check("Journals", err)
	_, err = LockDevice(JournalDir(), "lab", "10.0.0.1:22", "eth1", "run")
	check("LockDevice", err)
	check("Save", NewJournal("mq+pfifo", "hosts.yaml").Save(JournalDir()))
	if m, _ := filepath.Glob("*"); len(m) > 0 {
		t.Errorf("the working directory got %v", m)
	}

	t.Setenv("HOME", "/home/ann")
	if d, err := FindJournalDir(); err != nil || d != "/home/ann/.local/state/bloatbench/journal" {
		t.Errorf("with HOME: %q, %v", d, err)
	}
	t.Setenv("XDG_STATE_HOME", "/var/lib/lab")
	if d := JournalDir(); d != "/var/lib/lab/bloatbench/journal" {
		t.Errorf("with XDG_STATE_HOME: %q", d)
	}
}
