package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
)

// binHash is the short hash the agent of the binary under test is cached by.
func binHash(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// eventTime is when the data file's controller log says what happened.
func eventTime(t *testing.T, run *datafile.Run, message string) float64 {
	t.Helper()
	for _, e := range run.Events {
		if e.Message == message {
			return e.T
		}
	}
	t.Fatalf("no %q in the data file's events %+v", message, run.Events)
	return 0
}

// A login shell that takes 2 s (as one running pyenv, conda or nvm can) costs a
// command with several setups and repeats one shell start per host, says so, and
// changes nothing else: every later command goes through the agent.
func TestSlowLoginShell(t *testing.T) {
	invPath, inv := setupLab(t)
	starts := filepath.Join(labHome(inv), "shell-starts")
	setBashrc(t, inv, `echo start >> "$HOME/shell-starts"; sleep 2`+"\n")
	out := t.TempDir()
	r := bbEnv(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "run", "-H", invPath, "--setup", "mq+pfifo", "--setup", "htb+bfifo",
		"--repeat", "2", "-l", "2", "-d", "1", "-o", out, "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	b, _ := os.ReadFile(starts)
	if n := strings.Count(string(b), "start"); n != 2 {
		t.Errorf("the login shell started %d times for 4 runs on 2 hosts, want 2 (one per host):\n%s", n, r.stderr)
	}
	for _, host := range []string{"client", "server"} {
		if !strings.Contains(r.stderr, "warning: host "+host+": its login shell took 2.") {
			t.Errorf("no warning about %s's slow login shell:\n%s", host, r.stderr)
		}
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.bb.json.gz"))
	if len(files) != 4 {
		t.Fatalf("data files %v", files)
	}
	for _, f := range files {
		run := readRun(t, f)
		warned := 0
		for _, e := range run.Events {
			if e.Level == "warning" && strings.Contains(e.Message, "login shell took") {
				warned++
			}
		}
		if warned != 2 {
			t.Errorf("%s: %d slow-shell warnings in the data file, want one per host", f, warned)
		}
	}
	// The lab's sessions have a HOME of their own: nothing of the run in root's.
	home, _ := os.UserHomeDir()
	if _, err := os.Stat(filepath.Join(home, ".cache", "bloatbench", "agent-"+binHash(t))); err == nil {
		t.Errorf("the agent was installed in %s's cache, not the lab's", home)
	}
	if _, err := os.Stat(filepath.Join(labHome(inv), ".cache", "bloatbench", "agent-"+binHash(t))); err != nil {
		t.Errorf("the agent is not in the lab's cache: %v", err)
	}
}

// A login shell that hangs (a stale pyenv lock makes every start wait 60 s) fails
// the run at the host's connect timeout, naming the host and the shell.
func TestHungLoginShell(t *testing.T) {
	functional(t)
	_, inv := lab(t)
	setBashrc(t, inv, "sleep 60\n")
	for _, h := range inv.Hosts {
		h.ConnectTimeout = inventory.Duration(3 * time.Second)
	}
	p := filepath.Join(t.TempDir(), "slow.yaml")
	if err := inv.Write(p, ""); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := bb(t, "run", "-H", p, "-l", "2", "-d", "0", "-o", t.TempDir(), "tcp_4down")
	took := time.Since(start)
	if r.err == nil {
		t.Fatalf("the run succeeded:\n%s", r.stderr)
	}
	for _, want := range []string{"host client", "host server", "the login shell did not run a command within 3s", "~/.bashrc", "ssh root@"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the error lacks %q:\n%s", want, r.stderr)
		}
	}
	// Well before the shell's 60 s: the bound is the test's, not the machine's speed.
	if took > 30*time.Second {
		t.Errorf("the run took %v to give up on a hung shell", took)
	}
}

// With no delay the streams start with the ping, not after it: checked against the
// controller's own record of when it started them, in the data file.
func TestZeroDelayStartsStreamsAtOnce(t *testing.T) {
	invPath, inv := lab(t, "--rate", "200mbit")
	// A slow login shell must not matter: it is paid before t0.
	setBashrc(t, inv, "sleep 2\n")
	out := t.TempDir()
	r := bb(t, "run", "-H", invPath, "-l", "3", "-d", "0", "-o", out, "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	run := dataFile(t, out)
	t0 := run.Metadata.T0
	pingAt, streamsAt := eventTime(t, run, "ping started"), eventTime(t, run, "streams started")
	if streamsAt < pingAt {
		t.Errorf("streams started %.3f s before the ping", pingAt-streamsAt)
	}
	if streamsAt-t0 > 1 {
		t.Errorf("streams started %.2f s after t0 with no delay", streamsAt-t0)
	}
	first := run.Samples["TCP download::1"]
	if len(first) < 12 {
		t.Fatalf("flow 1: %d samples of a 3 s run at 0.2 s", len(first))
	}
	if began := first[0].T - first[0].Dur; began-streamsAt > 1 {
		t.Errorf("flow 1's first sample began %.2f s after the streams were started", began-streamsAt)
	}
}

// Installing a new agent removes the ones no controller used for a week, and only
// those.
func TestOldAgentsPruned(t *testing.T) {
	functional(t)
	invPath, inv := lab(t)
	cache := filepath.Join(labHome(inv), ".cache", "bloatbench")
	current := filepath.Join(cache, "agent-"+binHash(t))
	old, recent := filepath.Join(cache, "agent-0ld0ld0ld0ld0ld0"), filepath.Join(cache, "agent-4ecent4ecent4ec")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{old, recent} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ten := time.Now().Add(-10 * 24 * time.Hour)
	os.Chtimes(old, ten, ten)
	r := bb(t, "run", "-H", invPath, "-l", "1", "-d", "0", "-o", t.TempDir(), "tcp_nup")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	if !strings.Contains(r.stderr, "copied the agent to") {
		t.Errorf("the run's log does not say it copied the agent:\n%s", r.stderr)
	}
	if _, err := os.Stat(current); err != nil {
		t.Errorf("the agent was not installed: %v", err)
	}
	if _, err := os.Stat(old); err == nil {
		t.Errorf("%s, unused for 10 days, is still there", old)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("%s, used today, was removed: %v", recent, err)
	}
	// A second run finds it and copies nothing.
	r = bb(t, "run", "-H", invPath, "-l", "1", "-d", "0", "-o", t.TempDir(), "tcp_nup")
	if r.err != nil || strings.Contains(r.stderr, "copied the agent") {
		t.Errorf("second run: %v\n%s", r.err, r.stderr)
	}
}
