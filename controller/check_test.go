package controller

import (
	"os/exec"
	"strings"
	"testing"
)

func TestReadAccess(t *testing.T) {
	out := `user ann 1000
sudo no sudo: a password is required
addr test0 inet 198.18.0.1/24
addr test0 inet6 2001:2:0:0::1/64
addr eth0 inet 10.1.1.1/24
pinggroups 0 2147483647 groups 1000 27
netem no Error: Specified qdisc kind is unknown.
ifb module
`
	a := readAccess(out, "2001:2::1")
	want := "user ann; sudo without a password: no (sudo: a password is required); test_ip 2001:2::1 (ipv6) on test0, which has ipv4 and ipv6; " +
		"ping without root: yes (net.ipv4.ping_group_range 0 2147483647); netem: no: Error: Specified qdisc kind is unknown.; ifb: module present (not tried: needs root)"
	if a.String() != want || a.sudoOK {
		t.Errorf("got  %s\nwant %s", a, want)
	}
	a = readAccess("user ann 0\nsudo via\npinggroups 1 0 groups 0\nnetem yes\nifb yes\n", "10.9.9.9")
	if !a.sudoOK || !strings.Contains(a.String(), "10.9.9.9 (ipv4) is not an address of the host") || !strings.Contains(a.String(), "ping without root: not needed") ||
		!strings.Contains(a.String(), "netem: yes (tried in a scratch namespace)") {
		t.Errorf("root through sudo: %s", a)
	}
	if p := pingWithoutRoot("1000", []string{"1", "0", "groups", "1000"}); !strings.HasPrefix(p, "no: net.ipv4.ping_group_range is 1 0") {
		t.Errorf("closed range: %s", p)
	}
}

// A run's preflight that needs neither netem nor ifb leaves them untried: the
// script makes no scratch namespace, and the line says why.
func TestAccessScriptSkipsModules(t *testing.T) {
	out, err := exec.Command("sh", "-c", accessScript, "sh", "/nonexistent/agent", "", "bbchk-test", "skip").Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "netem skip\nifb skip\n") {
		t.Fatalf("the script tried the modules:\n%s", out)
	}
	a := readAccess(string(out), "10.9.9.9").String()
	for _, want := range []string{"netem: not tried (this run uses no netem path and no ingress shaping)", "ifb: not tried"} {
		if !strings.Contains(a, want) {
			t.Errorf("%s lacks %q", a, want)
		}
	}
}
