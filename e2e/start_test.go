package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// Every series starts at t0, the instant the controller sent ahead to every agent:
// with -d 2 -s 0.2 the idle ping row has its 10 points, the first probe went within
// a step of t0, and the summary warns of no series missing its grid.
func TestEverySeriesFromT0(t *testing.T) {
	invPath, _ := lab(t, "--rate", "100mbit")
	const delay, step = 2.0, 0.2
	out := t.TempDir()
	r := bb(t, "run", "-H", invPath, "-l", "3", "-d", fmt.Sprint(delay), "-s", fmt.Sprint(step), "-o", out, "--format", "json", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	s := parseJSONSummary(t, r.stdout)
	if n := s.points["Ping (ms) ICMP idle"]; n != int(delay/step) {
		t.Errorf("idle ping row has %d points, want %d", n, int(delay/step))
	}
	if len(s.warnings) > 0 {
		t.Errorf("summary warnings: %q", s.warnings)
	}
	run := dataFile(t, out)
	m := run.Metadata
	var ping *datafile.Series
	for i := range run.Series {
		if run.Series[i].Kind == datafile.KindPing {
			ping = &run.Series[i]
		}
	}
	if ping == nil || ping.Timestamps != datafile.StampsKernel {
		t.Errorf("ping series %+v: want kernel timestamps", ping)
	}
	first := math.Inf(1)
	for _, x := range run.Samples["Ping (ms) ICMP"] {
		sent := x.T
		if !x.Lost {
			sent -= x.V / 1e3
		}
		first = math.Min(first, sent)
	}
	t.Logf("first probe sent %+.2f ms from t0; idle points %d", (first-m.T0)*1e3, s.points["Ping (ms) ICMP idle"])
	if math.Abs(first-m.T0) > step {
		t.Errorf("first probe sent %.3f s from t0, more than a step", first-m.T0)
	}
	// The streams' first interval begins at t0 + delay, within a step.
	for _, x := range run.Samples["TCP download::1"][:1] {
		if began := x.T - x.Dur - m.T0; math.Abs(began-delay) > step {
			t.Errorf("flow 1's first interval began %.3f s after t0, want %g", began, delay)
		}
	}
	// The samplers too: the first qdisc sample within a step of t0.
	for _, se := range run.Series {
		if se.Kind == datafile.KindQdisc {
			if x := run.Samples[se.Name]; len(x) == 0 || math.Abs(x[0].T-m.T0) > step {
				t.Errorf("%s: first sample %v, t0 %.3f", se.Name, x, m.T0)
			}
			break
		}
	}
}

type summaryPoints struct {
	points   map[string]int
	warnings []string
}

// parseJSONSummary reads run --format json's points per row and warnings.
func parseJSONSummary(t *testing.T, out string) summaryPoints {
	t.Helper()
	var s struct {
		Runs []struct {
			Rows []struct {
				Name   string `json:"name"`
				Points int    `json:"points"`
			} `json:"rows"`
			Warnings []string `json:"warnings"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || len(s.Runs) != 1 {
		t.Fatalf("summary JSON: %v\n%s", err, out)
	}
	sp := summaryPoints{points: map[string]int{}, warnings: s.Runs[0].Warnings}
	for _, r := range s.Runs[0].Rows {
		sp.points[r.Name] = r.Points
	}
	return sp
}
