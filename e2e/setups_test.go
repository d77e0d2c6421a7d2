package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/inventory"
)

const labSetups = `setups:
  mq+pfifo: {title: "MQ + PFIFO", mq: {kind: pfifo, params: {limit: "50"}}}
  htb+bfifo: {title: "HTB + BFIFO", rate: 50mbit, root: {kind: bfifo, params: {limit: "100000"}}}
`

// setupLab is a lab shaped by hand (htb 200mbit with a pfifo, GSO off), so restoring
// means rebuilding a tree with a class, with the setups above in its inventory.
func setupLab(t *testing.T) (string, *inventory.Inventory) {
	invPath, inv := lab(t, "--rate", "200mbit", "--queue", "pfifo:1000", "--gso", "off")
	appendSetups(t, invPath, labSetups)
	return invPath, inv
}

// labState is everything a setup may change on both ends of the test link.
func labState(t *testing.T, inv *inventory.Inventory) string {
	t.Helper()
	return "client:\n" + roleState(t, inv, "client") + "server:\n" + roleState(t, inv, "server")
}

var directStat = regexp.MustCompile(`direct_packets_stat \d+ `)

func TestSetupsApplySampleRestore(t *testing.T) {
	invPath, inv := setupLab(t)
	before := labState(t, inv)
	out := t.TempDir()
	r := bbEnv(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "run", "-H", invPath, "--setup", "mq+pfifo", "--setup", "htb+bfifo",
		"-l", "6", "-d", "1", "-o", out, "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	if after := labState(t, inv); after != before {
		t.Errorf("not restored:\nbefore\n%s\nafter\n%s", before, after)
	}
	for _, title := range []string{"Summary of tcp_4down run 'MQ + PFIFO'", "Summary of tcp_4down run 'HTB + BFIFO'", "Qdisc server:test0 drops", "Qdisc server:test0 backlog"} {
		if !strings.Contains(r.stdout, title) {
			t.Errorf("no %q in\n%s", title, r.stdout)
		}
	}
	files, _ := filepath.Glob(filepath.Join(out, "*"))
	if len(files) != 2 {
		t.Fatalf("data files %v", files)
	}
	for _, f := range files {
		run := readRun(t, f)
		m := run.Metadata
		if m.Setup == nil || len(m.Setup.Devices) != 2 || len(m.Setup.Devices[0].Commands) == 0 || len(m.Setup.Devices[0].ReadBack) == 0 {
			t.Errorf("%s: setup metadata %+v", f, m.Setup)
			continue
		}
		if len(run.States) != 4 {
			t.Errorf("%s: %d tc state records, want pre and post for two devices", f, len(run.States))
		}
		maxOf := func(name string) float64 {
			v := 0.0
			for _, s := range run.Samples[name] {
				v = max(v, s.V)
			}
			return v
		}
		switch m.Setup.Name {
		case "htb+bfifo":
			// 4 streams into 50 Mbit/s: the bfifo fills and drops.
			if maxOf("qdisc server:test0 root backlog") == 0 || maxOf("qdisc server:test0 root drops") == 0 {
				t.Errorf("htb+bfifo: backlog %v, drops %v under load", maxOf("qdisc server:test0 root backlog"), maxOf("qdisc server:test0 root drops"))
			}
		case "mq+pfifo":
			// veth here never pushes back on its qdisc, so an unshaped pfifo holds no
			// backlog; every child must still count the traffic through it.
			for _, child := range []string{"1:1", "1:2", "1:3", "1:4"} {
				if len(run.Samples["qdisc server:test0 "+child+" packets"]) < 10 {
					t.Errorf("mq+pfifo: child %s was not sampled", child)
				}
			}
			if maxOf("qdisc server:test0 root packets") < 10000 {
				t.Errorf("mq+pfifo: %v packets through the root", maxOf("qdisc server:test0 root packets"))
			}
		}
	}
}

func killAgent(t *testing.T, ns string) {
	t.Helper()
	pids, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, p := range strings.Fields(string(pids)) {
		cl, _ := os.ReadFile("/proc/" + p + "/cmdline")
		if bytes.Contains(cl, []byte("agent")) && !bytes.Contains(cl, []byte("sshd")) {
			exec.Command("kill", "-9", p).Run()
			return
		}
	}
	t.Fatalf("no agent in %s", ns)
}

// A setup whose qdisc this kernel lacks fails before any traffic, in preflight and
// in hosts check, naming the host, the qdisc and the fix; nothing changes.
func TestMissingQdiscFailsBeforeTraffic(t *testing.T) {
	functional(t)
	invPath, inv := setupLab(t)
	if out, _ := exec.Command("tc", "qdisc", "add", "dev", "lo", "root", "fq_codel").CombinedOutput(); !strings.Contains(string(out), "unknown") {
		exec.Command("tc", "qdisc", "del", "dev", "lo", "root").Run()
		t.Fatalf("this test needs a kernel without fq_codel, as testbed-facts.md says this machine's is: %s", out)
	}
	before := labState(t, inv)
	out := t.TempDir()
	state := t.TempDir()
	r := bbEnv(t, []string{"XDG_STATE_HOME=" + state}, "run", "-H", invPath, "--setup", "fq_codel", "-l", "5", "-o", out, "tcp_4down")
	for _, want := range []string{"host server", "no fq_codel qdisc", "modprobe sch_fq_codel", "nothing was run"} {
		if r.err == nil || !strings.Contains(r.stderr, want) {
			t.Errorf("run: %v, stderr lacks %q:\n%s", r.err, want, r.stderr)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(out, "*")); len(files) != 0 {
		t.Errorf("a data file was made: %v", files)
	}
	// Preflight runs on the run's own connections: past it would come the clocks and
	// the setup.
	if strings.Contains(r.stderr, "clock of") || strings.Contains(r.stderr, "applied on") {
		t.Errorf("the run went past preflight:\n%s", r.stderr)
	}
	c := bb(t, "hosts", "check", "-H", invPath, "--setup", "fq_codel", "--setup", "htb+bfifo")
	if c.err == nil || !strings.Contains(c.stdout, "FAIL client") || !strings.Contains(c.stdout, "no fq_codel qdisc") || !strings.Contains(c.stdout, "setup htb+bfifo can be applied") {
		t.Errorf("hosts check: %v\n%s%s", c.err, c.stdout, c.stderr)
	}
	if after := labState(t, inv); after != before {
		t.Errorf("the host was changed:\n%s\nvs\n%s", before, after)
	}
}

// Ingress shaping through the whole run path on real veth and a real IFB: htb on
// the client's IFB holds the downloads to its rate, the IFB's qdisc is sampled, and
// after the run the IFB, the ingress qdisc and its redirect are gone from both ends.
func TestIngressShapingOnTheLocalLab(t *testing.T) {
	invPath, inv := lab(t, "--gso", "off")
	appendSetups(t, invPath, "setups:\n  ingress-50: {title: \"50 Mbit/s ingress\", ingress: {rate: 50mbit, root: {kind: bfifo, params: {limit: \"150000\"}}}}\n")
	before := labState(t, inv)
	out := t.TempDir()
	r := bbEnv(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "run", "-H", invPath, "--setup", "ingress-50", "-l", "12", "-d", "1", "-o", out, "--format", "json", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	if after := labState(t, inv); after != before {
		t.Errorf("not restored:\nbefore\n%s\nafter\n%s", before, after)
	}
	for _, role := range []string{"client", "server"} {
		got, err := exec.Command("ip", "netns", "exec", inv.Testbed+"-"+role, "sh", "-c", "ip -o link show type ifb; tc qdisc show dev test0 ingress; tc filter show dev test0 ingress").CombinedOutput()
		if err != nil || len(bytes.TrimSpace(got)) > 0 {
			t.Errorf("%s after the run: %v\n%s", role, err, got)
		}
	}
	rows := parseSummary(t, r.stdout)
	// The flows' sum held to what the IFB's htb passed, and htb to 80-105% of its
	// 50 Mbit/s (see checkTCPDownload): a fixed 5% of 50 Mbit/s failed in CI at 43.40
	// on a loaded machine. The IFB's counter, not the busiest: the server's egress
	// passed what the IFB then dropped.
	checkTCPDownloadOn(t, dataFile(t, out), "qdisc client:ifb4test0 root bytes", rows["TCP download sum"], 50e6)
	if _, ok := rows["Qdisc client:ifb4test0 backlog"]; !ok {
		t.Errorf("no row for the IFB's qdisc: %v", rows)
	}
	for name := range rows {
		if strings.HasPrefix(name, "BQL") && strings.Contains(name, "ifb4") {
			t.Errorf("a BQL row for an IFB: %s", name)
		}
	}
	run := dataFile(t, out)
	if s := run.Metadata.Setup; s == nil || len(s.Devices) != 2 || !strings.Contains(strings.Join(s.Devices[0].Commands, "\n"), "mirred egress redirect dev ifb4test0") {
		t.Errorf("setup record %+v", run.Metadata.Setup)
	}
}
