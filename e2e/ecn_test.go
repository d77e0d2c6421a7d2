package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// TCP flows that ask for ECN say what their connections negotiated. On the
// local lab's hosts net.ipv4.tcp_ecn is the kernel's default, 2 (accept ECN, never
// ask for it): tcp_4down with ecn=on warns as it runs, naming the flows, what
// they got and the sysctl to set. With a setup that sets net.ipv4.tcp_ecn to 1
// on the hosts, the flows negotiate ECN, nothing is warned of, and the data file
// records what they got.
func TestTCPFlowsSayWhatECNTheyNegotiated(t *testing.T) {
	invPath, _ := lab(t)
	inv, err := os.ReadFile(invPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(invPath, append(inv, "setups:\n  ecn: {sysctls: {net.ipv4.tcp_ecn: \"1\"}}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	events := func(dir string) []datafile.Event {
		files, _ := filepath.Glob(filepath.Join(dir, "*.bb.json.gz"))
		if len(files) != 1 {
			t.Fatalf("want one data file in %s, have %v", dir, files)
		}
		run, err := datafile.Read(files[0])
		if err != nil {
			t.Fatal(err)
		}
		return run.Events
	}
	asked := "tcp-streams: 4 flows asked for ecn: on and negotiated "
	flows := "(TCP download::1, TCP download::2, TCP download::3, TCP download::4)"

	out := t.TempDir()
	r := bb(t, "run", "-H", invPath, "-l", "2", "-d", "1", "-o", out, "--te", "ecn=on", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	want := "warning: client (root@"
	line := ""
	for l := range strings.Lines(r.stderr) {
		if strings.HasPrefix(l, want) && strings.Contains(l, asked) {
			line = l
		}
	}
	if !strings.Contains(line, asked+"no ECN "+flows+": the client's net.ipv4.tcp_ecn is 2; a setup's sysctls: {net.ipv4.tcp_ecn: \"1\"}") {
		t.Errorf("the run did not warn that the flows negotiated no ECN, naming them and the sysctl:\n%s", r.stderr)
	}
	if !slices.ContainsFunc(events(out), func(e datafile.Event) bool { return strings.HasPrefix(e.Message, asked+"no ECN") }) {
		t.Errorf("the data file has no event of the flows' ECN")
	}

	out = t.TempDir()
	r = bb(t, "run", "-H", invPath, "--setup", "ecn", "-l", "2", "-d", "1", "-o", out, "--te", "ecn=on", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	if strings.Contains(r.stderr, asked) {
		t.Errorf("warned of the flows' ECN with net.ipv4.tcp_ecn 1:\n%s", r.stderr)
	}
	if !slices.ContainsFunc(events(out), func(e datafile.Event) bool { return e.Message == asked+"ECN (RFC 3168) "+flows }) {
		t.Errorf("the data file does not say the flows negotiated ECN: %+v", events(out))
	}
}
