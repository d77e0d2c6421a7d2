package report

import (
	"reflect"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

func runWithFacts(facts map[string]map[string]string) *datafile.Run {
	r := &datafile.Run{}
	for _, name := range []string{"client", "server"} {
		if f, ok := facts[name]; ok {
			r.Metadata.Hosts = append(r.Metadata.Hosts, datafile.Host{Name: name, Facts: f})
		}
	}
	return r
}

func TestFactDiffs(t *testing.T) {
	same := map[string]string{"kernel.release": "6.1", "sysctl.net.ipv4.tcp_ecn": "2"}
	runs := []*datafile.Run{
		runWithFacts(map[string]map[string]string{"client": same, "server": {"kernel.release": "6.1", "sysctl.net.ipv4.tcp_ecn": "1"}}),
		runWithFacts(map[string]map[string]string{"client": same, "server": {"kernel.release": "6.1", "sysctl.net.ipv4.tcp_ecn": "1"}}),
		runWithFacts(map[string]map[string]string{"client": same, "server": {"kernel.release": "7.3", "sysctl.net.ipv4.tcp_ecn": "1", "error": "x"}}),
		runWithFacts(map[string]map[string]string{"client": same, "server": {"kernel.release": "6.1"}}),
		{}, // a file from before facts: left out
	}
	want := []string{
		`server: kernel.release: "6.1" (runs 1-2, 4), "7.3" (run 3)`,
		`server: sysctl.net.ipv4.tcp_ecn: "1" (runs 1-3), "(none)" (run 4)`,
	}
	if got := FactDiffs(runs); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	var b strings.Builder
	WriteFactDiffs(&b, runs[:2], false)
	if b.Len() != 0 {
		t.Errorf("alike runs printed %q", b.String())
	}
	WriteFactDiffs(&b, runs, true)
	if !strings.Contains(b.String(), "**The runs' hosts differ**") || !strings.Contains(b.String(), `- server: sysctl.net.ipv4.tcp\_ecn`) {
		t.Errorf("markdown %q", b.String())
	}
}
