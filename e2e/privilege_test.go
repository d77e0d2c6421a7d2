package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
)

// labUser is the lab's login that is not root (made by testbed up when missing,
// removed by testbed down when it made it).
const labUser = "bblab"

// bothStates is roleState of both ends of the test link.
func bothStates(t *testing.T, inv *inventory.Inventory) string {
	t.Helper()
	return "client:\n" + roleState(t, inv, "client") + "server:\n" + roleState(t, inv, "server")
}

// journals lists the undo journals under XDG_STATE_HOME (the device locks stay).
func journals(t *testing.T, stateHome string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(stateHome, "bloatbench", "journal", "*.json"))
	return files
}

// A login that is not root with passwordless sudo for the agent: a setup run applies
// and restores through an agent that runs as root; with no setup the agents run as
// the user, and ping (ICMP sockets) and streams need no root.
func TestSudoUserAppliesAndRestores(t *testing.T) {
	// Registered first, so it runs after the lab is down.
	var sudoers string
	t.Cleanup(func() {
		if _, err := os.Stat(sudoers); sudoers != "" && err == nil {
			t.Errorf("testbed down left %s", sudoers)
		}
	})
	invPath, inv := lab(t, "--rate", "200mbit", "--queue", "pfifo:1000", "--gso", "off", "--user", labUser, "--sudo")
	sudoers = "/etc/sudoers.d/bloatbench-" + inv.Testbed
	appendSetups(t, invPath, labSetups)
	if !strings.HasPrefix(inv.Hosts["client"].SSH, labUser+"@") {
		t.Fatalf("the lab's inventory logs in as %s", inv.Hosts["client"].SSH)
	}
	rule, err := os.ReadFile(sudoers)
	if err != nil || !strings.Contains(string(rule), labUser+" ALL=(root) NOPASSWD: "+labHome(inv)+"/.cache/bloatbench/agent-* agent") {
		t.Fatalf("the lab's sudoers rule: %v %s", err, rule)
	}
	before := bothStates(t, inv)

	c := bb(t, "hosts", "check", "-H", invPath, "--setup", "htb+bfifo")
	if c.err != nil {
		t.Fatalf("hosts check: %v\n%s\n%s", c.err, c.stdout, c.stderr)
	}
	for _, want := range []string{"user " + labUser, "sudo without a password: yes (the agent runs as root through sudo -n)",
		"test_ip " + inv.Hosts["server"].TestIP + " (ipv4) on test0", "netem: ", "ifb: "} {
		if !strings.Contains(c.stdout, want) {
			t.Errorf("hosts check says no %q:\n%s", want, c.stdout)
		}
	}

	state := t.TempDir()
	out := t.TempDir()
	r := bbEnv(t, []string{"XDG_STATE_HOME=" + state}, "run", "-H", invPath, "--setup", "htb+bfifo", "-l", "4", "-d", "1", "-o", out, "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	if !strings.Contains(r.stderr, "runs as root (sudo -n, login "+labUser+")") {
		t.Errorf("the agents did not run through sudo:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "setup htb+bfifo applied on server:test0") || !strings.Contains(r.stdout, "Qdisc server:test0 backlog") {
		t.Errorf("the setup was not applied:\n%s\n%s", r.stdout, r.stderr)
	}
	if after := bothStates(t, inv); after != before {
		t.Errorf("not restored:\nbefore\n%s\nafter\n%s", before, after)
	}
	if j := journals(t, state); len(j) != 0 {
		t.Errorf("journals left: %v", j)
	}
	// The agent's cache is the login user's, in the lab's home.
	agents, _ := filepath.Glob(filepath.Join(labHome(inv), ".cache", "bloatbench", "agent-*"))
	if len(agents) != 1 {
		t.Fatalf("agents in the lab's home: %v", agents)
	}
	if fi, err := os.Stat(agents[0]); err != nil || fi.Sys().(*syscall.Stat_t).Uid == 0 {
		t.Errorf("the agent %s is root's, not %s's", agents[0], labUser)
	}

	// A controller killed outright: restore puts both ends back through agents it
	// starts with sudo, as the run did.
	state2 := t.TempDir()
	k := startRun(t, []string{"XDG_STATE_HOME=" + state2}, "run", "-H", invPath, "--setup", "htb+bfifo", "-l", "30", "-d", "1", "-o", t.TempDir(), "tcp_4down")
	k.waitLog(t, "streams started")
	time.Sleep(1500 * time.Millisecond)
	k.cmd.Process.Kill()
	k.wait(t)
	if bothStates(t, inv) == before {
		t.Fatal("the setup was not in place when the controller was killed")
	}
	rr := bbEnv(t, []string{"XDG_STATE_HOME=" + state2}, "restore")
	if rr.err != nil || !strings.Contains(rr.stdout, "restored client:test0") || !strings.Contains(rr.stdout, "restored server:test0") {
		t.Fatalf("restore: %v\n%s\n%s", rr.err, rr.stdout, rr.stderr)
	}
	if after := bothStates(t, inv); after != before {
		t.Errorf("not restored by restore:\nbefore\n%s\nafter\n%s", before, after)
	}
	if j := journals(t, state2); len(j) != 0 {
		t.Errorf("journals left after restore: %v", j)
	}

	// No setup: no sudo, and the run works all the same.
	out2 := t.TempDir()
	r = bb(t, "run", "-H", invPath, "-l", "3", "-d", "1", "-o", out2, "--format", "json", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	if strings.Contains(r.stderr, "sudo -n") || !strings.Contains(r.stderr, "runs as "+labUser) {
		t.Errorf("a run without a setup used sudo:\n%s", r.stderr)
	}
	m := parseSummary(t, r.stdout)
	if m["Ping (ms) ICMP loaded"] <= 0 || m["TCP download sum"] <= 0 {
		t.Errorf("rows %v", m)
	}
}

// The same user without sudo rights: a setup run fails before anything changes,
// naming the host and the sudoers line that would allow the agent.
func TestNoSudoFailsBeforeAnyChange(t *testing.T) {
	invPath, inv := lab(t, "--rate", "200mbit", "--queue", "pfifo:1000", "--gso", "off", "--user", labUser)
	appendSetups(t, invPath, labSetups)
	if _, err := os.Stat("/etc/sudoers.d/bloatbench-" + inv.Testbed); err == nil {
		t.Fatal("a lab without --sudo has a sudoers rule")
	}
	before := bothStates(t, inv)
	state := t.TempDir()
	r := bbEnv(t, []string{"XDG_STATE_HOME=" + state}, "run", "-H", invPath, "--setup", "htb+bfifo", "-l", "4", "-d", "1", "-o", t.TempDir(), "tcp_4down")
	if r.err == nil {
		t.Fatalf("a run whose setup needs root went through without sudo rights:\n%s", r.stderr)
	}
	for _, want := range []string{"host client", "host server", "sudo refused the agent", "(the host logs in as " + labUser,
		"Nothing was changed on any host", labUser + " ALL=(root) NOPASSWD: " + labHome(inv) + "/.cache/bloatbench/agent-* agent"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the error says no %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "applied") {
		t.Errorf("something was applied:\n%s", r.stderr)
	}
	if after := bothStates(t, inv); after != before {
		t.Errorf("the hosts changed:\nbefore\n%s\nafter\n%s", before, after)
	}
	if j := journals(t, state); len(j) != 0 {
		t.Errorf("journals written: %v", j)
	}

	// hosts check says so, and that ping needs no root here.
	c := bb(t, "hosts", "check", "-H", invPath)
	for _, want := range []string{"user " + labUser, "sudo without a password: no (", "ping without root: yes"} {
		if !strings.Contains(c.stdout, want) {
			t.Errorf("hosts check says no %q:\n%s\n%s", want, c.stdout, c.stderr)
		}
	}
	// Without a setup nothing needs root: ping and streams run as the user.
	out := t.TempDir()
	r = bb(t, "run", "-H", invPath, "-l", "3", "-d", "1", "-o", out, "--format", "json", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	m := parseSummary(t, r.stdout)
	if m["Ping (ms) ICMP loaded"] <= 0 || m["TCP download sum"] <= 0 {
		t.Errorf("rows %v", m)
	}
}

// tcp_4down over IPv6 on a dual-stack lab shaped to 100 Mbit/s: the shaped rate, the
// ping rows, and the family in the data file.
func TestIPv6Lab(t *testing.T) {
	invPath, inv := lab(t, "--rate", "100mbit", "--gso", "off", "--ipv6")
	if !strings.Contains(inv.Hosts["server"].TestIP, ":") {
		t.Fatalf("test_ip %s is not IPv6", inv.Hosts["server"].TestIP)
	}
	c := bb(t, "hosts", "check", "-H", invPath)
	if want := "test_ip " + inv.Hosts["server"].TestIP + " (ipv6) on test0, which has ipv4 and ipv6"; !strings.Contains(c.stdout, want) {
		t.Errorf("hosts check says no %q:\n%s\n%s", want, c.stdout, c.stderr)
	}
	out := t.TempDir()
	r := bb(t, "run", "-H", invPath, "-l", "10", "-d", "2", "-o", out, "--format", "json", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	m := parseSummary(t, r.stdout)
	t.Logf("medians over IPv6: %v", m)
	run := dataFile(t, out)
	// The flows' sum is held to what htb passed, as IPv6 payload (1428 of each
	// 1514-byte frame), and htb to its rate: a fixed 90 Mbit/s floor failed in CI
	// at 88.96 Mbit/s on a loaded machine (see checkTCPDownload).
	checkTCPDownload(t, run, m["TCP download sum"], 100e6)
	if m["Ping (ms) ICMP loaded"] <= 0 || m["Ping (ms) ICMP idle"] <= 0 {
		t.Errorf("ping rows %v", m)
	}
	if run.Metadata.Family != "ipv6" {
		t.Errorf("data file family %q", run.Metadata.Family)
	}
	// ICMPv6 to the server's IPv6 test_ip; the log says where the prober's times
	// came from.
	for _, sr := range run.Series {
		if sr.Kind == datafile.KindPing {
			t.Logf("ping %s to %s: timestamps %q", sr.Name, sr.Target, sr.Timestamps)
			if sr.Target != inv.Hosts["server"].TestIP {
				t.Errorf("ping series %+v", sr)
			}
		}
	}
}
