package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/internal/e2eutil"
	"github.com/bloatbench/bloatbench/inventory"
)

// labHome is the HOME the lab's sshd gives its sessions: its .bashrc is the login
// shell's, and the agent's cache lives under it.
func labHome(inv *inventory.Inventory) string {
	return filepath.Join("/run/bloatbench/labs", inv.Testbed, "home")
}

// setBashrc writes the lab's login shell start-up file (both hosts share it).
func setBashrc(t *testing.T, inv *inventory.Inventory, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(labHome(inv), ".bashrc"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// roleState is everything a setup may change on one end of the test link.
func roleState(t *testing.T, inv *inventory.Inventory, role string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", inv.Testbed+"-"+role, "sh", "-c",
		`tc qdisc show dev test0; tc class show dev test0; tc filter show dev test0; cat /sys/class/net/test0/queues/tx-*/byte_queue_limits/limit_* 2>/dev/null; ethtool -k test0 | grep -E "^(generic|tcp|tx-tcp)"`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return directStat.ReplaceAllString(string(out), "")
}

// running is a bloatbench run in the background whose log the test reads as it goes.
type running struct {
	cmd    *exec.Cmd
	stderr *e2eutil.LockedBuffer
	stdout *e2eutil.LockedBuffer
	exited chan error
}

func startRun(t *testing.T, env []string, args ...string) *running {
	t.Helper()
	return startCmd(t, env, bin, args...)
}

// startCmd is startRun of another command line (bloatbench inside a namespace).
func startCmd(t *testing.T, env []string, name string, args ...string) *running {
	t.Helper()
	r := &running{cmd: exec.Command(name, args...), stderr: &e2eutil.LockedBuffer{}, stdout: &e2eutil.LockedBuffer{}, exited: make(chan error, 1)}
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.exited
		r.exited <- nil
	})
	return r
}

// waitLog waits until the controller's log shows line. The controller's own log,
// not the time since the process started, says where a run is: SSH set-up takes
// what it takes.
func (r *running) waitLog(t *testing.T, line string) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(r.stderr.String(), line) {
		select {
		case err := <-r.exited:
			r.exited <- err
			t.Fatalf("the run ended (%v) before its log showed %q:\n%s", err, line, r.stderr.String())
		case <-deadline:
			t.Fatalf("the run's log never showed %q:\n%s", line, r.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.exited:
		r.exited <- err
		return err
	case <-time.After(3 * time.Minute):
		t.Fatalf("the run did not end:\n%s", r.stderr.String())
		return nil
	}
}

// sshdSessions are the pids of the sshd processes serving connections on a host of
// the lab: every sshd in its namespace but the listener.
func sshdSessions(inv *inventory.Inventory, role string) []int {
	b, _ := os.ReadFile(filepath.Join("/run/bloatbench/labs", inv.Testbed, role+"_sshd.pid"))
	listener := strings.TrimSpace(string(b))
	pids, _ := exec.Command("ip", "netns", "pids", inv.Testbed+"-"+role).Output()
	var out []int
	for _, p := range strings.Fields(string(pids)) {
		comm, _ := os.ReadFile("/proc/" + p + "/comm")
		if p != listener && strings.HasPrefix(string(comm), "sshd") {
			n, _ := strconv.Atoi(p)
			out = append(out, n)
		}
	}
	return out
}

// The fault matrix: each fault, injected into a run with a setup in place, must
// leave both hosts as they were found (in the run, or with `restore` when the run
// could not reach a host, which it must then name), and keep the data gathered.
func TestFaults(t *testing.T) {
	functional(t)
	invPath, inv := setupLab(t)
	before := map[string]string{"client": roleState(t, inv, "client"), "server": roleState(t, inv, "server")}
	mgmt := func(role string) string { return fmt.Sprintf("%sm%c", inv.Testbed, role[0]) }
	cases := []struct {
		name  string
		setup string
		// prepare runs before the run; inject when the log shows at ("" = never).
		prepare func(t *testing.T)
		at      string
		inject  func(t *testing.T, r *running)
		// wantErr are in the run's error; unreached hosts are left for `restore`
		// after recover has undone the fault.
		wantErr   []string
		unreached []string
		recover   func(t *testing.T)
		// noData: the fault comes before the data file exists.
		noData bool
		out    func(t *testing.T) string
	}{
		{name: "client agent killed", at: "streams started", inject: func(t *testing.T, r *running) {
			time.Sleep(time.Second) // some data first
			killAgent(t, inv.Testbed+"-client")
		}, wantErr: []string{"agent on host client"}},
		{name: "server agent killed", at: "streams started", inject: func(t *testing.T, r *running) {
			time.Sleep(time.Second)
			killAgent(t, inv.Testbed+"-server")
		}, wantErr: []string{"agent on host server"}},
		{name: "SIGINT", at: "streams started", inject: func(t *testing.T, r *running) {
			time.Sleep(time.Second)
			r.cmd.Process.Signal(syscall.SIGINT)
		}, wantErr: []string{"interrupted"}},
		{name: "SIGTERM", at: "streams started", inject: func(t *testing.T, r *running) {
			time.Sleep(time.Second)
			r.cmd.Process.Signal(syscall.SIGTERM)
		}, wantErr: []string{"interrupted"}},
		{name: "SIGINT while applying", at: "setup htb+bfifo applied on client", inject: func(t *testing.T, r *running) {
			r.cmd.Process.Signal(syscall.SIGINT)
		}, wantErr: []string{"interrupted"}, noData: true}, // the signal may come as the file is made
		{name: "SIGKILL then restore", at: "streams started", inject: func(t *testing.T, r *running) {
			// The writer closes a gzip member each second: what a SIGKILL can lose.
			time.Sleep(2500 * time.Millisecond)
			r.cmd.Process.Kill()
		}, unreached: []string{"client", "server"}},
		{name: "management link down", at: "streams started", inject: func(t *testing.T, r *running) {
			time.Sleep(time.Second)
			if out, err := exec.Command("ip", "link", "set", mgmt("server"), "down").CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
		}, wantErr: []string{"host server", "answered no SSH keepalive", "restore --journal"}, unreached: []string{"server"},
			recover: func(t *testing.T) {
				if out, err := exec.Command("ip", "link", "set", mgmt("server"), "up").CombinedOutput(); err != nil {
					t.Fatalf("%v: %s", err, out)
				}
			}},
		{name: "frozen host and Ctrl-C", at: "streams started", inject: func(t *testing.T, r *running) {
			time.Sleep(time.Second)
			frozen := sshdSessions(inv, "server")
			if len(frozen) == 0 {
				t.Fatal("no sshd session on the server to freeze")
			}
			for _, pid := range frozen {
				syscall.Kill(pid, syscall.SIGSTOP)
			}
			t.Cleanup(func() {
				for _, pid := range frozen {
					syscall.Kill(pid, syscall.SIGCONT)
				}
			})
			time.Sleep(time.Second)
			r.cmd.Process.Signal(syscall.SIGINT)
			// Seconds, not the command timeout (a minute) per command on the frozen host.
			select {
			case err := <-r.exited:
				r.exited <- err
			case <-time.After(30 * time.Second):
				t.Errorf("the run did not end within 30 s of Ctrl-C with a frozen host:\n%s", r.stderr.String())
			}
			// The frozen session's host is restored through a new connection.
		}, wantErr: []string{"interrupted", "host server", "connecting again to restore it"}},
		{name: "tc fails on apply", setup: "mq+pfifo", prepare: func(t *testing.T) {
			// A tc that refuses the third child on the real device (not the
			// preflight's scratch one), after the root and two children went in:
			// typed alone, or as a line of a batch, which then stops there as tc's
			// does (the lines before it applied, the failed one named).
			dir := filepath.Join(labHome(inv), "bin")
			os.MkdirAll(dir, 0o755)
			tc, _ := exec.LookPath("tc")
			wrapper := strings.ReplaceAll(`#!/bin/sh
case "$*" in *"dev test0 parent 1:3 "*) echo 'RTNETLINK answers: injected failure' >&2; exit 2;; esac
case "$*" in *-batch*)
	n=0 ok=""
	while IFS= read -r l; do
		n=$((n+1))
		case "$l " in *"dev test0 parent 1:3 "*)
			printf '%s' "$ok" | TC "$@" || exit
			echo 'RTNETLINK answers: injected failure' >&2
			echo "Command failed -:$n" >&2
			exit 1;;
		esac
		ok="$ok$l
"
	done
	printf '%s' "$ok" | exec TC "$@";;
esac
exec TC "$@"
`, "TC", tc)
			if err := os.WriteFile(filepath.Join(dir, "tc"), []byte(wrapper), 0o755); err != nil {
				t.Fatal(err)
			}
			setBashrc(t, inv, "export PATH="+dir+":$PATH\n")
			t.Cleanup(func() { setBashrc(t, inv, "") })
		}, wantErr: []string{"injected failure", "host client"}, noData: true},
		{name: "disk full", out: func(t *testing.T) string {
			dir := t.TempDir()
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", dir).CombinedOutput(); err != nil {
				t.Fatalf("mount a small tmpfs: %v: %s", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", dir).Run() })
			return dir
		}, wantErr: []string{"no space left on device"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.prepare != nil {
				c.prepare(t)
			}
			state := t.TempDir()
			out := t.TempDir()
			if c.out != nil {
				out = c.out(t)
			}
			setup := c.setup
			if setup == "" {
				setup = "htb+bfifo"
			}
			r := startRun(t, []string{"XDG_STATE_HOME=" + state}, "run", "-H", invPath, "--setup", setup, "-l", "30", "-d", "1", "-o", out, "tcp_4down")
			if c.at != "" {
				r.waitLog(t, c.at)
				c.inject(t, r)
			}
			err := r.wait(t)
			log := r.stderr.String()
			if err == nil {
				t.Fatalf("the run succeeded:\n%s", log)
			}
			lines := strings.Split(strings.TrimSpace(log), "\n")
			t.Logf("the run's last words: %s", strings.Join(lines[max(0, len(lines)-3):], "\n"))
			for _, want := range c.wantErr {
				if !strings.Contains(log, want) {
					t.Errorf("the run's error lacks %q:\n%s", want, log)
				}
			}
			unreached := map[string]bool{}
			for _, role := range c.unreached {
				unreached[role] = true
			}
			for _, role := range []string{"client", "server"} {
				if !unreached[role] {
					if now := roleState(t, inv, role); now != before[role] {
						t.Errorf("%s not restored:\nbefore\n%s\nafter\n%s\n%s", role, before[role], now, log)
					}
				}
			}
			if len(c.unreached) > 0 {
				if c.recover != nil {
					c.recover(t)
				}
				rr := bbEnv(t, []string{"XDG_STATE_HOME=" + state}, "restore")
				if rr.err != nil {
					t.Fatalf("restore: %v\n%s%s", rr.err, rr.stdout, rr.stderr)
				}
				for _, role := range c.unreached {
					if !strings.Contains(rr.stdout, "restored "+role+":test0") {
						t.Errorf("restore did not name %s:\n%s", role, rr.stdout)
					}
					if now := roleState(t, inv, role); now != before[role] {
						t.Errorf("%s not restored by restore:\nbefore\n%s\nafter\n%s", role, before[role], now)
					}
				}
			}
			if j, _ := filepath.Glob(filepath.Join(state, "bloatbench", "journal", "*.json")); len(j) != 0 {
				t.Errorf("journal left: %v", j)
			}
			files, _ := filepath.Glob(filepath.Join(out, "*.bb.json.gz"))
			if c.noData {
				return
			}
			if len(files) != 1 {
				t.Fatalf("data files %v", files)
			}
			run := readRun(t, files[0])
			if !run.Incomplete {
				t.Errorf("data file not marked incomplete")
			}
			if n := len(run.Samples["Ping (ms) ICMP"]); n == 0 {
				t.Errorf("data file kept no ping sample")
			}
			if c.name != "disk full" && len(run.Samples["TCP download::1"]) == 0 {
				t.Errorf("data file kept no sample of flow 1")
			}
		})
	}
}

// An agent that dies in one run of several is started again for the next: the
// session's other runs go on, and only the run it died in fails.
func TestAgentStartedAgainForNextRun(t *testing.T) {
	functional(t)
	invPath, inv := setupLab(t)
	before := labState(t, inv)
	out := t.TempDir()
	// The agent is killed a second into the first run's streams: 10 s leave room
	// for a slow kill (make test runs this at idle priority), which must land in
	// the first run, not the second.
	r := startRun(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "run", "-H", invPath, "--setup", "htb+bfifo", "--setup", "mq+pfifo",
		"-l", "10", "-d", "1", "-o", out, "tcp_4down")
	r.waitLog(t, "streams started")
	time.Sleep(time.Second)
	killAgent(t, inv.Testbed+"-server")
	err := r.wait(t)
	log := r.stderr.String()
	if err == nil || !strings.Contains(log, "1 of 2 runs failed") {
		t.Fatalf("want the first of two runs failed: %v\n%s", err, log)
	}
	// Started again for the first run's restore, or else before the second run.
	if !strings.Contains(log, "connecting again to restore it") && !strings.Contains(log, "starting the agent on server") {
		t.Errorf("the server's agent was not started again:\n%s", log)
	}
	if !strings.Contains(r.stdout.String(), "Summary of tcp_4down run 'MQ + PFIFO'") {
		t.Errorf("the second run printed no summary:\n%s", r.stdout.String())
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.bb.json.gz"))
	if len(files) != 2 {
		t.Fatalf("data files %v", files)
	}
	for _, f := range files {
		run := readRun(t, f)
		if (run.Metadata.Setup.Name == "mq+pfifo") == run.Incomplete {
			t.Errorf("%s (%s): incomplete=%v %s", f, run.Metadata.Setup.Name, run.Incomplete, run.Error)
		}
	}
	if after := labState(t, inv); after != before {
		t.Errorf("not restored:\n%s\nvs\n%s", before, after)
	}
}
