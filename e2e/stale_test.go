package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// killedRun starts a run with setup htb+bfifo and SIGKILLs it once its streams run:
// the setup stays on both ends, and the journal in state says what they were.
func killedRun(t *testing.T, invPath, state string) string {
	t.Helper()
	r := startRun(t, []string{"XDG_STATE_HOME=" + state}, "run", "-H", invPath, "--setup", "htb+bfifo", "-l", "30", "-d", "1", "-o", t.TempDir(), "tcp_4down")
	r.waitLog(t, "streams started")
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.wait(t)
	j, _ := filepath.Glob(filepath.Join(state, "bloatbench", "journal", "*.json"))
	if len(j) != 1 {
		t.Fatalf("journals after the kill: %v", j)
	}
	return j[0]
}

// After a run killed outright, the next run on the same bottlenecks refuses, naming
// the journal and the fix, and changes nothing; with --restore-stale it restores
// first, says so, and leaves the lab as before the first run. A device changed by
// hand after a crash is left alone and named by restore, until --force.
func TestStaleJournalAfterSIGKILL(t *testing.T) {
	functional(t)
	invPath, inv := setupLab(t)
	before := labState(t, inv)
	state := t.TempDir()
	journal := killedRun(t, invPath, state)
	left := labState(t, inv)
	if left == before {
		t.Fatal("the killed run left no setup: nothing to test")
	}

	r := bbEnv(t, []string{"XDG_STATE_HOME=" + state}, "run", "-H", invPath, "--setup", "mq+pfifo", "-l", "2", "-d", "1", "-o", t.TempDir(), "tcp_4down")
	if r.err == nil {
		t.Fatalf("the second run ran over the stale journal:\n%s", r.stderr)
	}
	t.Logf("the refusal: %s", r.stderr)
	for _, want := range []string{journal, "client:test0", "server:test0", "bloatbench restore", "--restore-stale"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, r.stderr)
		}
	}
	if now := labState(t, inv); now != left {
		t.Errorf("the refused run changed the lab:\nbefore\n%s\nafter\n%s", left, now)
	}

	// A controller with another journal folder sees the journal through the hosts'
	// marks, and restores it from where it is.
	other := t.TempDir()
	r = bbEnv(t, []string{"XDG_STATE_HOME=" + other}, "run", "-H", invPath, "-l", "2", "-d", "1", "-o", t.TempDir(), "tcp_4down")
	if r.err == nil || !strings.Contains(r.stderr, journal) || !strings.Contains(r.stderr, "another journal folder") {
		t.Fatalf("a run with another XDG_STATE_HOME was not refused by the hosts' marks: %v\n%s", r.err, r.stderr)
	}
	r = bbEnv(t, []string{"XDG_STATE_HOME=" + other}, "run", "--restore-stale", "-H", invPath, "--setup", "mq+pfifo", "-l", "2", "-d", "1", "-o", t.TempDir(), "tcp_4down")
	if r.err != nil {
		t.Fatalf("run --restore-stale: %v\n%s", r.err, r.stderr)
	}
	if !strings.Contains(r.stderr, "--restore-stale: restoring") || !strings.Contains(r.stdout, "restored client:test0") || !strings.Contains(r.stdout, "restored server:test0") {
		t.Errorf("--restore-stale did not say it restored first:\n%s\n%s", r.stdout, r.stderr)
	}
	if now := labState(t, inv); now != before {
		t.Errorf("not as before the first run:\nbefore\n%s\nafter\n%s", before, now)
	}
	if j, _ := filepath.Glob(filepath.Join(state, "bloatbench", "journal", "*.json")); len(j) != 0 {
		t.Errorf("journals left: %v", j)
	}

	// Crashed again; then the server's device is changed by hand.
	journal = killedRun(t, invPath, state)
	if out, err := exec.Command("ip", "netns", "exec", inv.Testbed+"-server", "sh", "-c",
		"tc qdisc del dev test0 root && tc qdisc add dev test0 root handle 5: pfifo limit 77").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	byHand := roleState(t, inv, "server")
	rr := bbEnv(t, []string{"XDG_STATE_HOME=" + state}, "restore")
	t.Logf("restore over a device changed by hand: %v\n%s%s", rr.err, rr.stdout, rr.stderr)
	if rr.err == nil {
		t.Fatalf("restore said all was well over a device changed by hand:\n%s", rr.stdout)
	}
	if !strings.Contains(rr.stdout, "restored client:test0") {
		t.Errorf("restore did not restore the client:\n%s%s", rr.stdout, rr.stderr)
	}
	for _, want := range []string{"host server", "test0", "changed since the run left it", "--force", journal} {
		if !strings.Contains(rr.stderr, want) {
			t.Errorf("restore's error lacks %q:\n%s", want, rr.stderr)
		}
	}
	if now := roleState(t, inv, "server"); now != byHand {
		t.Errorf("restore clobbered the hand's change:\nby hand\n%s\nafter\n%s", byHand, now)
	}
	if now := roleState(t, inv, "client"); !strings.Contains(before, now) {
		t.Errorf("client not as before:\n%s\nvs\n%s", before, now)
	}
	rr = bbEnv(t, []string{"XDG_STATE_HOME=" + state}, "restore", "--force")
	if rr.err != nil {
		t.Fatalf("restore --force: %v\n%s%s", rr.err, rr.stdout, rr.stderr)
	}
	if now := labState(t, inv); now != before {
		t.Errorf("not as before after restore --force:\nbefore\n%s\nafter\n%s", before, now)
	}
	if j, _ := filepath.Glob(filepath.Join(state, "bloatbench", "journal", "*.json")); len(j) != 0 {
		t.Errorf("journals left: %v", j)
	}
}

// Two crashed runs on one device (the second in another journal folder, with the
// hosts' marks gone, as from a bloatbench before marks), then `restore` of both: the
// newer journal is undone first, and the lab ends as first found.
func TestTwoCrashedRunsRestoredNewestFirst(t *testing.T) {
	functional(t)
	invPath, inv := setupLab(t)
	before := labState(t, inv)
	stateA, stateB := t.TempDir(), t.TempDir()
	a := killedRun(t, invPath, stateA)
	dropMarks := func() {
		marks, _ := filepath.Glob("/run/bloatbench/journal/*.json")
		for _, m := range marks {
			if b, err := os.ReadFile(m); err == nil && strings.Contains(string(b), a) {
				os.Remove(m)
			}
		}
	}
	dropMarks()
	r := startRun(t, []string{"XDG_STATE_HOME=" + stateB}, "run", "-H", invPath, "--setup", "mq+pfifo", "-l", "30", "-d", "1", "-o", t.TempDir(), "tcp_4down")
	r.waitLog(t, "streams started")
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.wait(t)
	b, _ := filepath.Glob(filepath.Join(stateB, "bloatbench", "journal", "*.json"))
	if len(b) != 1 {
		t.Fatalf("journals of the second run: %v", b)
	}
	// Listed oldest first: restore orders them itself.
	rr := bbEnv(t, nil, "restore", "--journal", a, "--journal", b[0])
	if rr.err != nil {
		t.Fatalf("restore: %v\n%s%s", rr.err, rr.stdout, rr.stderr)
	}
	t.Logf("restore: %s", rr.stdout)
	if first, second := strings.Index(rr.stdout, "setup mq+pfifo"), strings.Index(rr.stdout, "setup htb+bfifo"); first < 0 || second < first {
		t.Errorf("not newest first:\n%s", rr.stdout)
	}
	if now := labState(t, inv); now != before {
		t.Errorf("not as first found:\nbefore\n%s\nafter\n%s", before, now)
	}
	for _, st := range []string{stateA, stateB} {
		if j, _ := filepath.Glob(filepath.Join(st, "bloatbench", "journal", "*.json")); len(j) != 0 {
			t.Errorf("journals left: %v", j)
		}
	}
}

// A nightly batch after a crashed run: the batch refuses before its first run,
// naming the journal, rather than fail every run; with --restore-stale it restores
// first and runs, and the lab ends as before the crash.
func TestBatchAfterACrashedRun(t *testing.T) {
	functional(t)
	invPath, inv := setupLab(t)
	before := labState(t, inv)
	state := t.TempDir()
	journal := killedRun(t, invPath, state)
	dir := t.TempDir()
	file := filepath.Join(dir, "nightly.yaml")
	body := fmt.Sprintf("name: nightly\ninventory: %s\noutput: %s\nlength: 2\ndelay: 0.5\nrepetitions: 1\ntests: [{test: tcp_4down}]\nsetups: [htb+bfifo]\n",
		invPath, filepath.Join(dir, "results"))
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_STATE_HOME=" + state}
	r := bbEnv(t, env, "batch", file)
	if r.err == nil || !strings.Contains(r.stderr, journal) || !strings.Contains(r.stderr, "--restore-stale") {
		t.Fatalf("batch over a stale journal: %v; want a refusal naming %s:\n%s", r.err, journal, r.stderr)
	}
	if runs, _ := filepath.Glob(filepath.Join(dir, "results", "*", "*"+datafile.Ext)); len(runs) != 0 {
		t.Errorf("the refused batch ran: %v", runs)
	}
	r = bbEnv(t, env, "batch", "--restore-stale", file)
	if r.err != nil {
		t.Fatalf("batch --restore-stale: %v\n%s", r.err, r.stderr)
	}
	if !strings.Contains(r.stderr, "--restore-stale: restoring") || !strings.Contains(r.stdout, "1 of 1 runs complete") {
		t.Errorf("batch --restore-stale did not restore first and run:\n%s\n%s", r.stdout, r.stderr)
	}
	if now := labState(t, inv); now != before {
		t.Errorf("not as before the crash:\nbefore\n%s\nafter\n%s", before, now)
	}
}
