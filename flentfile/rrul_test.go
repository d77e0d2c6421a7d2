package flentfile

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

// rrulRun is an rrul run as the controller records it: flows named as flent names
// them, UDP round trips of kind rr (interval samples), the test's aggregates.
func rrulRun() *datafile.Run {
	run := syntheticRun()
	run.Metadata.Test = "rrul"
	run.Metadata.Parameters = map[string]string{"cc": ""}
	t0 := run.Metadata.T0
	run.Series = run.Series[:1] // the ping
	for i, name := range []string{"TCP upload BE", "TCP upload EF", "TCP download BE", "TCP download EF"} {
		dir := "upload"
		if i >= 2 {
			dir = "download"
		}
		se := datafile.Series{Name: name, Kind: datafile.KindTCP, Units: "Mbits/s", Direction: dir, Flow: i%2 + 1, Marking: "EF"}
		run.Series = append(run.Series, se)
		for k := 1; k <= 4; k++ {
			run.Samples[name] = append(run.Samples[name], datafile.Sample{T: t0 + 1 + float64(k)*0.5, Dur: 0.5, V: float64(5*i + k)})
		}
	}
	rr := datafile.Series{Name: "Ping (ms) UDP EF", Kind: "rr", Units: "ms"}
	run.Series = append(run.Series, rr)
	for k := 1; k <= 8; k++ {
		run.Samples[rr.Name] = append(run.Samples[rr.Name], datafile.Sample{T: t0 + float64(k)*0.5, Dur: 0.5, V: 2 + float64(k%4)})
	}
	run.Metadata.Aggregates = []datafile.Aggregate{
		{Name: "TCP totals", Op: "sum", Series: "TCP*", Exclude: []string{"TCP download avg", "TCP download sum", "TCP upload avg", "TCP upload sum"}},
		{Name: "Ping (ms) avg", Op: "avg", Series: "Ping (ms)*"},
	}
	return run
}

// An rrul run exports under flent's test name with every series flent's rrul has,
// and reads back with the same rows: flows, UDP round trips and aggregates.
func TestRRULRoundTrip(t *testing.T) {
	run := rrulRun()
	if name, _ := flentName(run); name != "rrul" {
		t.Errorf("exported as %q", name)
	}
	path := filepath.Join(t.TempDir(), "rrul"+Ext)
	if _, err := Export(run, path); err != nil {
		t.Fatal(err)
	}
	back, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want, got := map[string]report.Row{}, map[string]report.Row{}
	for _, r := range report.Summarize(run).Rows {
		want[r.Name] = r
	}
	for _, r := range report.Summarize(back).Rows {
		got[r.Name] = r
	}
	for _, name := range []string{"TCP upload BE", "TCP download EF", "TCP upload sum", "TCP download avg", "TCP totals",
		"Ping (ms) UDP EF", "Ping (ms) avg", "Ping (ms) ICMP"} {
		w, g := want[name], got[name]
		if _, ok := want[name]; !ok {
			t.Errorf("%s: no row in the run's own summary", name)
			continue
		}
		if math.Abs(g.Avg-w.Avg) > 1e-9 || math.Abs(g.Median-w.Median) > 1e-9 || g.Points != w.Points {
			t.Errorf("%s after a round trip: %+v, want %+v", name, g, w)
		}
	}
	for _, se := range back.Series {
		if se.Name == "TCP upload EF" && (se.Kind != datafile.KindTCP || se.Direction != "upload") {
			t.Errorf("%s read back as %+v", se.Name, se)
		}
	}
}

func TestFlowOf(t *testing.T) {
	cases := map[string]string{
		"TCP upload BK": "upload", "TCP download": "download", "TCP stream 2": "upload", "TCP download::3": "download",
		"TCP upload sum": "", "TCP download avg": "", "TCP upload::x": "", "TCPupload": "", "TCP totals": "",
		"TCP upload BE 10.9.0.3": "upload", "TCP upload fairness": "", "TCP upload::1::tcp_cwnd": "",
	}
	for name, want := range cases {
		got, ok := flowOf(name)
		if got != want || ok != (want != "") {
			t.Errorf("flowOf(%q) = %q %v, want %q", name, got, ok, want)
		}
	}
	// What the reader computes itself, and so leaves out of a file.
	for name, want := range map[string]bool{"TCP upload sum": true, "TCP download avg": true, "TCP download sum (pair 2)": true,
		"TCP upload fairness": false, "TCP totals": false, "TCP upload::1::tcp_cwnd": false, "TCP download summary": false} {
		if got := flowSum.MatchString(name); got != want {
			t.Errorf("flowSum(%q) = %v, want %v", name, got, want)
		}
	}
}
