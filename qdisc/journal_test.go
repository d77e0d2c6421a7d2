package qdisc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
)

// An inventory given as hosts.yaml names its key files relative to the working
// directory: the journal holds them absolute, so that `restore` works from anywhere.
func TestJournalPathsAbsolute(t *testing.T) {
	wd, _ := os.Getwd()
	h := &inventory.Host{Name: "lab", SSH: "root@10.0.0.1", IdentityFile: "keys/id_ed25519", KnownHosts: "keys/known_hosts"}
	j := &Journal{Version: 1, PID: os.Getpid(), Created: time.Now(), Inventory: "hosts.yaml", Hosts: map[string]*inventory.Host{"lab": h}}
	if err := j.Save(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	got, err := LoadJournal(j.Path())
	if err != nil {
		t.Fatal(err)
	}
	g := got.Hosts["lab"]
	if g.IdentityFile != filepath.Join(wd, "keys/id_ed25519") || g.KnownHosts != filepath.Join(wd, "keys/known_hosts") || got.Inventory != filepath.Join(wd, "hosts.yaml") {
		t.Errorf("journal has %q, %q, %q", g.IdentityFile, g.KnownHosts, got.Inventory)
	}
	if h.IdentityFile != "keys/id_ed25519" {
		t.Errorf("Save changed the inventory's host: %q", h.IdentityFile)
	}
}

// A journal must survive a power cut right after the controller changed a host: its
// data is synced before the rename that publishes it, and the folder after.
func TestJournalSaveFsyncs(t *testing.T) {
	if dir := os.Getenv("BB_JOURNAL_SAVE_DIR"); dir != "" {
		j := &Journal{Version: 1, PID: os.Getpid(), Created: time.Now(), Hosts: map[string]*inventory.Host{}}
		if err := j.Save(dir); err != nil {
			t.Fatal(err)
		}
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		// make deps installs it; without it this check would pass unseen.
		t.Fatal("needs strace to see the fsync calls: apt-get install strace (scripts/install-deps does)")
	}
	dir, trace := t.TempDir(), filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-y", "-o", trace, "-e", "trace=openat,fsync,fdatasync,rename,renameat,renameat2",
		os.Args[0], "-test.run=^TestJournalSaveFsyncs$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BB_JOURNAL_SAVE_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b, _ := os.ReadFile(trace)
	var lines []string
	for _, l := range joinResumed(strings.Split(string(b), "\n")) {
		if strings.Contains(l, dir) {
			lines = append(lines, l)
		}
	}
	text := strings.Join(lines, "\n")
	order := []*regexp.Regexp{
		// renameio's temporary file: "." + the journal's name + digits, beside it
		regexp.MustCompile(`fsync\(\d+<` + regexp.QuoteMeta(dir) + `/\.[^/>]*\.json\d+>\) = 0`),
		regexp.MustCompile(`rename\w*\(.*/\.[^/"]*\.json\d+".*\.json"`),
		regexp.MustCompile(`fsync\(\d+<` + regexp.QuoteMeta(dir) + `>\) = 0`),
	}
	at := 0
	for _, re := range order {
		loc := re.FindStringIndex(text[at:])
		if loc == nil {
			t.Fatalf("no %s after offset %d in the trace:\n%s", re, at, text)
		}
		at += loc[1]
	}
}

// joinResumed makes each call strace -f split in two, when another thread's call
// came between ("PID  fsync(5</dir> <unfinished ...>", then "PID  <... fsync
// resumed>) = 0"), one line again, where the call began.
func joinResumed(lines []string) []string {
	unfinished := map[string]int{} // pid: the call's index in out
	var out []string
	for _, l := range lines {
		pid, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimLeft(rest, " ")
		if head, ok := strings.CutSuffix(rest, " <unfinished ...>"); ok {
			unfinished[pid] = len(out)
			out = append(out, pid+"  "+head)
			continue
		}
		if strings.HasPrefix(rest, "<... ") {
			if i, ok := unfinished[pid]; ok {
				if _, tail, ok := strings.Cut(rest, " resumed>"); ok {
					out[i] += tail
					delete(unfinished, pid)
					continue
				}
			}
		}
		out = append(out, l)
	}
	return out
}

// Two holders with descriptors of their own contend for one bottleneck: the second is
// refused with who holds it, and gets it once the first lets go.
func TestDeviceLockContended(t *testing.T) {
	dir := t.TempDir()
	started := time.Now()
	first, err := LockDevice(dir, "lab", "10.0.0.1:22", "eth1", "run of setup mq+pfifo")
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan error)
	go func() {
		l, err := LockDevice(dir, "lab2", "10.0.0.1:22", "eth1", "run of setup cake")
		l.Unlock()
		results <- err
	}()
	err = <-results
	hn, _ := os.Hostname()
	for _, want := range []string{"host lab2 (10.0.0.1:22)", "device eth1", fmt.Sprintf("pid %d", os.Getpid()), "controller " + hn, "run of setup mq+pfifo", started.Format("2006-01-02 15:04:05")} {
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	// Another device of the host, or the same name on another host, is free.
	for _, k := range [][2]string{{"10.0.0.1:22", "eth2"}, {"10.0.0.2:22", "eth1"}} {
		l, err := LockDevice(dir, "lab", k[0], k[1], "run")
		if err != nil {
			t.Errorf("%v: %v", k, err)
		}
		l.Unlock()
	}
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	go func() {
		l, err := LockDevice(dir, "lab", "10.0.0.1:22", "eth1", "restore")
		l.Unlock()
		results <- err
	}()
	if err := <-results; err != nil {
		t.Errorf("after the first let go: %v", err)
	}
}

// A controller killed outright (SIGKILL) holds no lock: the kernel drops it with the
// process, and `restore` takes it at once.
func TestDeviceLockGoesWithItsProcess(t *testing.T) {
	if dir := os.Getenv("BB_LOCK_HOLD_DIR"); dir != "" {
		if _, err := LockDevice(dir, "lab", "[fe80::1]:22", "v;id>x", "run of setup htb-100"); err != nil {
			t.Fatal(err)
		}
		fmt.Println("locked")
		time.Sleep(time.Minute)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeviceLockGoesWithItsProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BB_LOCK_HOLD_DIR="+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("holder said %q: %v", line, err)
	}
	_, err = LockDevice(dir, "lab", "[fe80::1]:22", "v;id>x", "restore")
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) || !strings.Contains(err.Error(), "run of setup htb-100") {
		t.Fatalf("while held: %v", err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	l, err := LockDevice(dir, "lab", "[fe80::1]:22", "v;id>x", "restore")
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	l.Unlock()
}

// restore holds the lock of the journal's devices, and stands down when the run it
// raced removed its journal after putting the hosts back.
func TestLockForRestore(t *testing.T) {
	dir := t.TempDir()
	j := NewJournal("mq+pfifo", "hosts.yaml")
	j.Hosts["lab"] = &inventory.Host{Name: "lab", SSH: "root@10.0.0.1"}
	st := &State{Host: "lab", Dev: "eth1"}
	j.States = append(j.States, st)
	if err := j.Save(dir); err != nil {
		t.Fatal(err)
	}
	run, err := LockDevice(dir, "lab", "10.0.0.1:22", "eth1", "run of setup mq+pfifo")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadJournal(j.Path())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loaded.LockForRestore(st, "10.0.0.1:22"); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "run of setup mq+pfifo") {
		t.Errorf("restore while the run is live: %v", err)
	}
	j.Remove()
	run.Unlock()
	if _, err := loaded.LockForRestore(st, "10.0.0.1:22"); !errors.Is(err, ErrJournalGone) {
		t.Errorf("restore after the run removed its journal: %v", err)
	}
}

func TestJoinResumed(t *testing.T) {
	in := []string{
		`7269  openat(AT_FDCWD</q>, "/d/x.tmp", O_WRONLY) = 5</d/x.tmp>`,
		`7267  fsync(5</d> <unfinished ...>`,
		`7269  renameat(AT_FDCWD</q>, "/d/x.tmp", AT_FDCWD</q>, "/d/x") = 0`,
		`7267  <... fsync resumed>) = 0`,
		`7268  <... futex resumed>) = 1`,
	}
	want := []string{
		`7269  openat(AT_FDCWD</q>, "/d/x.tmp", O_WRONLY) = 5</d/x.tmp>`,
		`7267  fsync(5</d>) = 0`,
		`7269  renameat(AT_FDCWD</q>, "/d/x.tmp", AT_FDCWD</q>, "/d/x") = 0`,
		`7268  <... futex resumed>) = 1`,
	}
	if got := joinResumed(in); !slices.Equal(got, want) {
		t.Errorf("joinResumed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
