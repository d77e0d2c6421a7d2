package report

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/golden"
)

// setupRun makes a tcp_4down run of a setup: ping around pingMs, flows at the given
// rates, drops at dropRate per second; rep varies the numbers a little.
func setupRun(setup string, pingMs float64, rates []float64, dropRate float64, rep int) *datafile.Run {
	start := time.Date(2026, 11, 29, 18, 41, 47+rep, 0, time.UTC)
	t0 := datafile.Unix(start)
	m := datafile.Metadata{Test: "tcp_4down", Title: setup, StartTime: start, T0: t0,
		Length: 10, Delay: 2, Step: 0.2, TotalLength: 14, Setup: &datafile.Setup{Name: strings.ToLower(setup), Title: setup}}
	run := &datafile.Run{Metadata: m, Samples: map[string][]datafile.Sample{}}
	jitter := float64(rep%6) * 0.01 // each repetition differs, by less than setups do
	ping := datafile.Series{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms", Host: "client"}
	run.Series = append(run.Series, ping)
	for k := 0; k <= 70; k++ {
		sent := t0 + float64(k)*0.2 + 0.001
		v := 0.1 + jitter
		if k >= 10 && k <= 60 { // the steps from delay to delay+length
			v = pingMs*(1+jitter) + float64(k%10)*0.1
		}
		run.Samples[ping.Name] = append(run.Samples[ping.Name], datafile.Sample{T: sent + v/1e3, V: v, Seq: k})
	}
	for f, rate := range rates {
		se := datafile.Series{Name: fmt.Sprintf("TCP download::%d", f+1), Kind: datafile.KindTCP, Units: "Mbits/s", Host: "client", Direction: "download", Flow: f + 1}
		run.Series = append(run.Series, se)
		for k := 1; k <= 50; k++ {
			v := rate * (1 + jitter)
			run.Samples[se.Name] = append(run.Samples[se.Name], datafile.Sample{T: t0 + 2 + float64(k)*0.2, Dur: 0.2, V: v})
		}
	}
	drops := datafile.Series{Name: "qdisc server:eth0 root drops", Kind: datafile.KindQdisc, Counter: true}
	run.Series = append(run.Series, drops)
	for k := 0; k <= 70; k++ {
		run.Samples[drops.Name] = append(run.Samples[drops.Name], datafile.Sample{T: t0 + float64(k)*0.2, V: math.Floor(dropRate * (1 + jitter) * float64(k) * 0.2)})
	}
	return run
}

func compared(runs ...*datafile.Run) []Compared {
	var out []Compared
	for _, r := range runs {
		out = append(out, CompareInput(r, Options{}))
	}
	return out
}

func TestCompareGolden(t *testing.T) {
	// One run each, as in the dualpi2 cover letter.
	single := Compare(compared(
		setupRun("MQ + FQ_CODEL", 1.2, []float64{235, 235, 236, 234}, 0, 0),
		setupRun("MQ + FQ_PIE", 1.2, []float64{232, 232, 233, 243}, 0, 0),
		setupRun("MQ + DUALPI2", 1.2, []float64{235, 235, 236, 234}, 0, 0),
	), "Unshaped 1gigE")
	// Six runs each (the fewest with a 95% interval): DUALPI2's ping is far below PFIFO's (significant), FQ_CODEL's
	// throughput is the same as PFIFO's (not significant).
	var reps []*datafile.Run
	for rep := 0; rep < 6; rep++ {
		reps = append(reps,
			setupRun("PFIFO", 40, []float64{25, 25, 25, 25}, 8, rep),
			setupRun("FQ_CODEL", 5, []float64{25, 25, 25, 25}, 3, rep),
			setupRun("DUALPI2", 2, []float64{30, 20, 25, 25}, 0, rep))
	}
	repeated := Compare(compared(reps...), "htb 100mbit")
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			for name, cs := range map[string][]Comparison{"compare": single, "compare-repeated": repeated} {
				var b bytes.Buffer
				if err := WriteCompare(&b, format, cs, Columns{}); err != nil {
					t.Fatal(err)
				}
				golden.Check(t, name+"."+format+".golden", b.Bytes())
				if format == "text" {
					for _, l := range strings.Split(b.String(), "\n") {
						if strings.Contains(l, "\t") || len([]rune(l)) > 78 {
							t.Errorf("%s: line not fit for email (tab, or %d columns): %q", name, len([]rune(l)), l)
						}
					}
				}
			}
		})
	}
}

func TestCompareStatistics(t *testing.T) {
	var reps []*datafile.Run
	for rep := 0; rep < 5; rep++ {
		reps = append(reps, setupRun("A", 40, []float64{25, 25}, 0, rep), setupRun("B", 5, []float64{25, 25}, 0, rep))
	}
	cs := Compare(compared(reps...), "")
	if len(cs) != 1 || len(cs[0].Setups) != 2 {
		t.Fatalf("want one comparison of two setups, got %+v", cs)
	}
	c := cs[0]
	get := func(name string) int {
		for i, m := range c.Metrics {
			if m.Name == name {
				return i
			}
		}
		t.Fatalf("no metric %q", name)
		return -1
	}
	ping := c.Deltas[get("Ping (ms) ICMP loaded median")][0]
	if !ping.Significant() || ping.P > 0.05 || !strings.HasPrefix(ping.Text, "-") {
		t.Errorf("ping 40 -> 5 ms over 5 runs each: want a significant decrease, got %s p=%.3f", ping.Text, ping.P)
	}
	tput := c.Deltas[get("TCP download sum")][0]
	if tput.Significant() {
		t.Errorf("same throughput: want ~, got %s p=%.3f", tput.Text, tput.P)
	}
	if j := c.Cells[get("Jain's fairness")][0].Center; math.Abs(j-1) > 1e-9 {
		t.Errorf("equal flows: Jain's index %g, want 1", j)
	}
	// Three runs each can never be significant at 0.05 (the U test's smallest p is 0.1).
	three := Compare(compared(reps[:6]...), "")
	d := three[0].Deltas[get("Ping (ms) ICMP loaded median")][0]
	if d.Significant() || len(d.Warnings) == 0 {
		t.Errorf("3+3 runs: want ~ with a warning, got %s %v", d.Text, d.Warnings)
	}
}

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		rates []float64
		want  float64
	}{{[]float64{10, 10, 10, 10}, 1}, {[]float64{40, 0, 0, 0}, 0.25}, {[]float64{30, 10}, 0.8}} {
		var s Summary
		for i, r := range tc.rates {
			s.Rows = append(s.Rows, Row{Name: fmt.Sprintf("TCP download::%d", i+1), Avg: r})
		}
		s.Rows = append(s.Rows, Row{Name: "TCP download sum", Avg: 99})
		if got := jain(s); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("jain(%v) = %g, want %g", tc.rates, got, tc.want)
		}
	}
}

// The ping metrics are named for the rows they read; their former names still find
// them (batch files written before say "Ping loaded median").
func TestLookupMetric(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"Ping (ms) ICMP loaded median", "Ping (ms) ICMP loaded median"},
		{"Ping loaded median", "Ping (ms) ICMP loaded median"},
		{"Ping loaded avg", "Ping (ms) ICMP loaded avg"},
		{"Ping loaded p99", "Ping (ms) ICMP loaded p99"},
		{"Ping idle median", "Ping (ms) ICMP idle median"},
		{"TCP download sum", "TCP download sum"},
		{"Ping (ms) ICMP median", ""},
	} {
		m, ok := LookupMetric(tc.name)
		if ok != (tc.want != "") || m.Name != tc.want {
			t.Errorf("LookupMetric(%q) = %q, %v; want %q", tc.name, m.Name, ok, tc.want)
		}
	}
	// The side-by-side shows the loaded row, not flent's whole-run row.
	s := Summary{Rows: []Row{{Name: "Ping (ms) ICMP", Median: 1, Key: Key{Family: FamilyProbe, Series: PingRow}},
		{Name: "Ping (ms) ICMP loaded", Median: 20, Key: Key{Family: FamilyProbe, Series: PingRow, Phase: LoadedPhase}}}}
	if m, _ := LookupMetric("Ping (ms) ICMP loaded median"); m.Value(s) != 20 {
		t.Errorf("loaded median reads %v, want the loaded row's 20", m.Value(s))
	}
}

// BQL inflight in the side-by-side is the sum of every bottleneck's BQL row, and
// absent from runs that sampled no BQL.
func TestBQLInflightMetric(t *testing.T) {
	m, ok := LookupMetric("BQL inflight")
	if !ok || m.Units != "bytes" {
		t.Fatalf("metric %+v, found %v", m, ok)
	}
	s := Summary{Rows: []Row{
		{Name: "BQL router:test0 inflight", Avg: 6056, Key: Key{Family: FamilyBottleneck, Dev: "router:test0", Stat: "BQL inflight"}},
		{Name: "BQL router:test1 inflight", Avg: 1514, Key: Key{Family: FamilyBottleneck, Dev: "router:test1", Stat: "BQL inflight"}},
		{Name: "BQL router:test0 limit", Avg: 99999, Key: Key{Family: FamilyBottleneck, Dev: "router:test0", Stat: "BQL limit"}},
		{Name: "Qdisc router:test0 backlog", Avg: 5, Key: Key{Family: FamilyBottleneck, Dev: "router:test0", Stat: "backlog"}},
	}}
	if got := m.Value(s); got != 7570 {
		t.Errorf("BQL inflight %v, want 7570", got)
	}
	if got := m.Value(Summary{}); !math.IsNaN(got) {
		t.Errorf("a run without BQL: %v, want NaN", got)
	}
}
