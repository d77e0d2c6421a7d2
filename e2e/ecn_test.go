package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
)

// TCP flows that ask for ECN get it: the run sets net.ipv4.tcp_ecn on every host
// for them, as a setup's sysctls, and puts it back after; the data file records
// what they negotiated. A setup that sets it to another value is refused before
// any host is touched. Flows that ask for what the kernel cannot negotiate
// (Accurate ECN before Linux 6.19, which refuses tcp_ecn 3) warn as the run
// goes, naming the flows, what they got and why.
func TestTCPFlowsGetTheECNTheyAskFor(t *testing.T) {
	invPath, lab := lab(t)
	inv, err := os.ReadFile(invPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(invPath, append(inv, "setups:\n  ecn: {sysctls: {net.ipv4.tcp_ecn: \"1\"}}\n  noecn: {sysctls: {net.ipv4.tcp_ecn: \"2\"}}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func(dir string) *datafile.Run {
		files, _ := filepath.Glob(filepath.Join(dir, "*.bb.json.gz"))
		if len(files) != 1 {
			t.Fatalf("want one data file in %s, have %v", dir, files)
		}
		run, err := datafile.Read(files[0])
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	tcpECN := func(role string) string {
		out, err := exec.Command("ip", "netns", "exec", lab.Testbed+"-"+role, "cat", "/proc/sys/net/ipv4/tcp_ecn").CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, role := range []string{"client", "server"} {
		if v := tcpECN(role); v != "2" {
			t.Fatalf("the lab's %s starts with net.ipv4.tcp_ecn %s, not the kernel's default 2", role, v)
		}
	}
	asked := "tcp-streams: 4 flows asked for ecn: on and negotiated "
	flows := "(TCP download::1, TCP download::2, TCP download::3, TCP download::4)"

	// No setup: the run sets tcp_ecn 1 on both hosts, and puts it back.
	for _, setup := range [][]string{nil, {"--setup", "ecn"}} {
		out := t.TempDir()
		r := bb(t, append(append([]string{"run", "-H", invPath}, setup...), "-l", "2", "-d", "1", "-o", out, "--te", "ecn=on", "tcp_4down")...)
		if r.err != nil {
			t.Fatalf("%v: %v\n%s", setup, r.err, r.stderr)
		}
		if strings.Contains(r.stderr, asked) {
			t.Errorf("%v: warned of the flows' ECN:\n%s", setup, r.stderr)
		}
		run := read(out)
		if !slices.ContainsFunc(run.Events, func(e datafile.Event) bool { return e.Message == asked+"ECN (RFC 3168) "+flows }) {
			t.Errorf("%v: the data file does not say the flows negotiated ECN: %+v", setup, run.Events)
		}
		if s := run.Metadata.Setup; s == nil || len(s.Devices) != 2 || !slices.Contains(s.Devices[0].Commands, "echo 1 > /proc/sys/net/ipv4/tcp_ecn") {
			t.Errorf("%v: the data file does not say the run set tcp_ecn: %+v", setup, s)
		}
		for _, role := range []string{"client", "server"} {
			if v := tcpECN(role); v != "2" {
				t.Errorf("%v: the run left the %s's net.ipv4.tcp_ecn at %s", setup, role, v)
			}
		}
	}

	// A setup that sets it otherwise: refused, nothing run.
	r := bb(t, "run", "-H", invPath, "--setup", "noecn", "-l", "2", "-d", "1", "-o", t.TempDir(), "--te", "ecn=on", "tcp_4down")
	if r.err == nil || !strings.Contains(r.stderr, "setup noecn sets net.ipv4.tcp_ecn to 2, and test tcp_4down's TCP download::1 to TCP download::4 (ecn: on) needs 1") {
		t.Errorf("a setup at odds with the flows: %v\n%s", r.err, r.stderr)
	}
	if strings.Contains(r.stderr, "connecting to") {
		t.Errorf("the refused run connected to the hosts:\n%s", r.stderr)
	}

	// Accurate ECN: this kernel either takes tcp_ecn 3 and negotiates it, or
	// refuses it, and then the run says so and the flows say what they got.
	out := t.TempDir()
	r = bb(t, "run", "-H", invPath, "-l", "2", "-d", "1", "-o", out, "--te", "ecn=accecn", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	accecn := "tcp-streams: 4 flows asked for ecn: accecn and negotiated "
	if kernelTakes(t, lab, "3") {
		if !slices.ContainsFunc(read(out).Events, func(e datafile.Event) bool { return e.Message == accecn+"Accurate ECN "+flows }) {
			t.Errorf("a kernel with Accurate ECN did not negotiate it:\n%s", r.stderr)
		}
	} else {
		for _, want := range []string{
			"net.ipv4.tcp_ecn = 3, which TCP download::1 to TCP download::4 (ecn: accecn) would like, was refused",
			accecn + "no ECN " + flows + ": the client's net.ipv4.tcp_ecn is 2, not the 3 the run sets for these flows: its kernel refused the value",
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("the run does not say %q:\n%s", want, r.stderr)
			}
		}
		if !slices.ContainsFunc(read(out).Events, func(e datafile.Event) bool {
			return e.Level == "warning" && strings.Contains(e.Message, "net.ipv4.tcp_ecn = 3") && strings.Contains(e.Message, "was refused")
		}) {
			t.Errorf("the data file has no warning of the refused sysctl")
		}
	}
	for _, role := range []string{"client", "server"} {
		if v := tcpECN(role); v != "2" {
			t.Errorf("the Accurate ECN run left the %s's net.ipv4.tcp_ecn at %s", role, v)
		}
	}
}

// kernelTakes says whether this kernel takes net.ipv4.tcp_ecn = v, tried in a
// namespace of its own (the value is per namespace).
func kernelTakes(t *testing.T, lab *inventory.Inventory, v string) bool {
	t.Helper()
	ns := lab.Testbed + "-ecntry"
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	return exec.Command("ip", "netns", "exec", ns, "sh", "-c", "echo "+v+" > /proc/sys/net/ipv4/tcp_ecn").Run() == nil
}
