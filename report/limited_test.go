package report

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/golden"
)

// addLimits gives a run's flow its TCP_INFO time counters as the sampler
// writes them: each step's busy time and its limited times (ms), at the
// step's end, from t0 + delay + 0.2 to the load's end at 0.2 s steps. A
// callback may change any step's values.
func addLimits(run *datafile.Run, flow, pair string, busy, rwnd, sndbuf float64, edit func(k int, b, r, s *float64)) {
	m := run.Metadata
	stats := []string{datafile.StatBusyTime, datafile.StatRwndLimited, datafile.StatSndbufLimited}
	for _, stat := range stats {
		se := datafile.Series{Name: datafile.PairName(flow+" "+stat, pair), Kind: datafile.KindTCPInfo, Units: "ms/step",
			Host: "server", Direction: "download", Stat: stat, Pair: pair}
		run.Series = append(run.Series, se)
	}
	for k := 1; k <= int(math.Round(m.Length/m.Step)); k++ {
		b, r, s := busy, rwnd, sndbuf
		if edit != nil {
			edit(k, &b, &r, &s)
		}
		t := m.T0 + m.Delay + float64(k)*m.Step + 0.003
		for i, v := range []float64{b, r, s} {
			name := datafile.PairName(flow+" "+stats[i], pair)
			run.Samples[name] = append(run.Samples[name], datafile.Sample{T: t, V: v})
		}
	}
}

func TestWindowLimits(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(k int, b, r, s *float64)
		// the window, seconds after the load's start; zero: the whole load
		from, to            float64
		busy, rwnd, sndbuf  float64 // ms
		rwndShare, sndShare float64
	}{
		{name: "every step", busy: 10000, rwnd: 1000, sndbuf: 500, rwndShare: 0.1, sndShare: 0.05},
		{name: "a window of the load", from: 2, to: 4, busy: 2000, rwnd: 200, sndbuf: 100, rwndShare: 0.1, sndShare: 0.05},
		{
			// A file whose writer took differences of a counter that went
			// backwards: no step takes negative time, and the step's other
			// counters go with it, or the share would tip.
			name: "a step that went backwards",
			edit: func(k int, b, r, s *float64) {
				if k == 10 {
					*r = -4e6
				}
			},
			busy: 9800, rwnd: 980, sndbuf: 490, rwndShare: 0.1, sndShare: 0.05,
		},
		{
			name: "NaN and infinite steps",
			edit: func(k int, b, r, s *float64) {
				switch k {
				case 3:
					*b = math.NaN()
				case 4:
					*s = math.Inf(1)
				}
			},
			busy: 9600, rwnd: 960, sndbuf: 480, rwndShare: 0.1, sndShare: 0.05,
		},
		{
			// Read at one instant, they cannot, but a file may say anything.
			name: "more limited than busy",
			edit: func(k int, b, r, s *float64) { *r = 300 },
			busy: 10000, rwnd: 15000, sndbuf: 500, rwndShare: 1, sndShare: 0.05,
		},
		{
			name: "a counter that started over counts from there",
			edit: func(k int, b, r, s *float64) {
				if k == 25 {
					*b, *r = 40, 40 // the sampler's first step after a wrap: what the counter holds
				}
			},
			busy: 9840, rwnd: 1020, sndbuf: 500, rwndShare: 1020.0 / 9840, sndShare: 500.0 / 9840,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := syntheticRun(1, false)
			addLimits(run, "TCP download::1", "", 200, 20, 10, c.edit)
			m := run.Metadata
			from, to := m.T0+m.Delay, m.T0+m.Delay+m.Length
			if c.to > 0 {
				from, to = m.T0+m.Delay+c.from, m.T0+m.Delay+c.to
			}
			// Steps end 3 ms past the grid: a window of whole steps.
			fl := WindowLimits(run, from+0.01, to+0.01)
			if len(fl) != 1 || fl[0].Flow != "TCP download::1" || !fl[0].HasRwnd || !fl[0].HasSndbuf {
				t.Fatalf("flows %+v", fl)
			}
			f := fl[0]
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
			if !near(f.BusyMs, c.busy) || !near(f.RwndMs, c.rwnd) || !near(f.SndbufMs, c.sndbuf) {
				t.Errorf("busy %v rwnd %v sndbuf %v ms, want %v %v %v", f.BusyMs, f.RwndMs, f.SndbufMs, c.busy, c.rwnd, c.sndbuf)
			}
			if !near(f.RwndShare(), c.rwndShare) || !near(f.SndbufShare(), c.sndShare) {
				t.Errorf("shares %v %v, want %v %v", f.RwndShare(), f.SndbufShare(), c.rwndShare, c.sndShare)
			}
		})
	}
}

func TestWindowLimitsFlows(t *testing.T) {
	run := syntheticRun(2, false)
	addLimits(run, "TCP download::1", "2", 200, 20, 0, nil)
	// A flow with busy_time alone says nothing of what limited it.
	run.Series = append(run.Series, datafile.Series{Name: "TCP download::2 busy_time", Kind: datafile.KindTCPInfo, Units: "ms/step", Direction: "download", Stat: datafile.StatBusyTime})
	run.Samples["TCP download::2 busy_time"] = []datafile.Sample{{T: run.Metadata.T0 + 3, V: 200}}
	// Another kind's series of that stat is not a flow's counter.
	run.Series = append(run.Series, datafile.Series{Name: "x rwnd_limited", Kind: datafile.KindRR, Stat: datafile.StatRwndLimited})
	// A run made in memory may hold a time no file would: it is no step.
	busy := "TCP download::1 busy_time (pair 2)"
	run.Samples[busy] = append(run.Samples[busy], datafile.Sample{T: math.NaN(), V: 200})
	fl := WindowLimits(run, math.Inf(-1), math.Inf(1))
	if len(fl) != 1 || fl[0].Flow != "TCP download::1 (pair 2)" || fl[0].BusyMs != 10000 || fl[0].RwndMs != 1000 {
		t.Fatalf("flows %+v", fl)
	}
	if s := (FlowLimits{}).RwndShare(); !math.IsNaN(s) {
		t.Errorf("no busy time: share %v", s)
	}
}

func TestLimitWarnings(t *testing.T) {
	flow := func(name string, busy, rwnd, sndbuf float64) FlowLimits {
		return FlowLimits{Flow: name, BusyMs: busy, RwndMs: rwnd, SndbufMs: sndbuf, HasRwnd: true, HasSndbuf: true}
	}
	many := func(n int) []FlowLimits {
		var out []FlowLimits
		for i := n; i >= 1; i-- { // out of order: the warning sorts them
			out = append(out, flow(fmt.Sprintf("TCP download::%d", i), 10000, float64(300+10*i), 0))
		}
		return out
	}
	for _, c := range []struct {
		name  string
		flows []FlowLimits
		want  []string // substrings, one list per warning, in order
	}{
		{name: "none limited", flows: []FlowLimits{flow("TCP download::1", 10000, 0, 0), flow("TCP download::2", 10000, 12, 0)}},
		{name: "at the threshold", flows: []FlowLimits{flow("TCP download::1", 10000, 100, 100)}},
		{name: "too little busy time to judge", flows: []FlowLimits{flow("TCP download::1", 400, 400, 400)}},
		{
			// The netperf run that raised this: three flows of four held to the
			// receiver's window.
			name: "three of four",
			flows: []FlowLimits{flow("TCP download::1", 10000, 40, 0), flow("TCP download::2", 10000, 570, 0),
				flow("TCP download::3", 10000, 530, 0), flow("TCP download::4", 10000, 490, 0)},
			want: []string{"window-limited flows: TCP download::2 5.7%, TCP download::3 5.3%, TCP download::4 4.9% of their sending time under load stopped by the receiver's window (tcp_info's rwnd_limited over busy_time, more than 1%: ",
				"They sent what the receiver's window allowed, not what the bottleneck would take, so the queue, and the ping's delay, is shallower than an autotuned application's would be: a receiver with a fixed socket buffer does this (netperf"},
		},
		{
			name:  "send buffer",
			flows: []FlowLimits{flow("TCP upload::1", 10000, 0, 2500)},
			want:  []string{"send-buffer-limited flows: TCP upload::1 25.0% of their sending time under load stopped by their own send buffer (tcp_info's sndbuf_limited over busy_time", "SO_SNDBUF", "net.ipv4.tcp_wmem"},
		},
		{
			name:  "both, each its own warning",
			flows: []FlowLimits{flow("TCP download::1", 10000, 1000, 0), flow("TCP download::2", 10000, 0, 1000)},
			want:  []string{"window-limited flows: TCP download::1 10.0% of", "\x00", "send-buffer-limited flows: TCP download::2 10.0% of"},
		},
		{
			name:  "many flows: eight named, the rest counted",
			flows: many(11),
			want:  []string{"window-limited flows: TCP download::1 3.1%, TCP download::2 3.2%, TCP download::3 3.3%, TCP download::4 3.4%, TCP download::5 3.5%, TCP download::6 3.6%, TCP download::7 3.7%, TCP download::8 3.8%, and 3 more flows (3.9% to 4.1%) of their"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := limitWarnings(c.flows)
			// "\x00" in want starts the next warning.
			var wants [][]string
			if len(c.want) > 0 {
				wants = [][]string{nil}
			}
			for _, w := range c.want {
				if w == "\x00" {
					wants = append(wants, nil)
					continue
				}
				wants[len(wants)-1] = append(wants[len(wants)-1], w)
			}
			if len(got) != len(wants) {
				t.Fatalf("%d warnings, want %d: %q", len(got), len(wants), got)
			}
			for i, ws := range wants {
				for _, w := range ws {
					if !strings.Contains(got[i], w) {
						t.Errorf("warning %d %q lacks %q", i, got[i], w)
					}
				}
			}
		})
	}
}

// The summary warns over the load, whatever the cut, names the flows in every
// format (escaped, as anything from a file), and keeps the warning when the
// flows are folded into one row.
func TestSummaryWindowLimited(t *testing.T) {
	run := syntheticRun(2, false)
	addLimits(run, "TCP download::1", "", 200, 30, 0, nil)
	addLimits(run, "TCP download::2", "", 200, 0, 0, nil)
	// Limited only in the lead-out, after its stream: not the load's.
	addLimits(run, "TCP download::3", "", 200, 0, 0, nil)
	for k := 1; k <= 5; k++ {
		t := run.Metadata.T0 + run.Metadata.Delay + run.Metadata.Length + float64(k)*0.2
		run.Samples["TCP download::3 busy_time"] = append(run.Samples["TCP download::3 busy_time"], datafile.Sample{T: t, V: 200})
		run.Samples["TCP download::3 rwnd_limited"] = append(run.Samples["TCP download::3 rwnd_limited"], datafile.Sample{T: t, V: 200})
		run.Samples["TCP download::3 sndbuf_limited"] = append(run.Samples["TCP download::3 sndbuf_limited"], datafile.Sample{T: t, V: 0})
	}
	s := Summarize(run)
	if len(s.LimitWarnings) != 1 || !strings.Contains(s.LimitWarnings[0], "TCP download::1 15.0%") || strings.Contains(s.LimitWarnings[0], "::2") || strings.Contains(s.LimitWarnings[0], "::3") {
		t.Fatalf("limit warnings %q", s.LimitWarnings)
	}
	if !strings.Contains(strings.Join(s.Warnings, "\n"), s.LimitWarnings[0]) {
		t.Errorf("warnings %q lack the window-limited flows", s.Warnings)
	}
	for _, o := range []Options{{FoldFlows: true}, {Cut: &[2]float64{3, 8}}} {
		if got := SummarizeWith(run, o).LimitWarnings; len(got) != 1 {
			t.Errorf("%+v: limit warnings %q", o, got)
		}
	}
	// Rows of the counters, each the flow's ms a step.
	for _, r := range s.Rows {
		if r.Name == "TCP download::1 rwnd_limited" && (r.Avg != 30 || r.Units != "ms/step" || r.Points != 50) {
			t.Errorf("row %+v", r)
		}
	}

	// A name from a file reaches the output escaped.
	limited := syntheticRun(1, false)
	addLimits(limited, "TCP download::1 <b>|\x1b[31m", "", 200, 200, 0, nil)
	ls := Summarize(limited)
	for _, format := range []string{"text", "markdown", "json"} {
		var b bytes.Buffer
		if err := Write(&b, format, []Summary{ls}, Columns{}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if !strings.Contains(out, "window-limited flows: TCP download::1 ") {
			t.Errorf("%s: no warning:\n%s", format, out)
		}
		if strings.Contains(out, "\x1b") || (format == "markdown" && strings.Contains(out, "<b>|")) {
			t.Errorf("%s: unescaped name:\n%q", format, out)
		}
	}
}

// A comparison of a setup whose flows a fixed receive window held back, as
// netperf's are, against autotuned flows: the warning under its run's block,
// and with repetitions, which later runs have theirs.
func TestCompareWindowLimitedGolden(t *testing.T) {
	mk := func(setup string, pingMs float64, rates []float64, rep int, limited bool) *datafile.Run {
		run := setupRun(setup, pingMs, rates, 0, rep)
		for f := range rates {
			rwnd := 0.0
			if limited && f > 0 {
				rwnd = 11 + float64(f)
			}
			addLimits(run, fmt.Sprintf("TCP download::%d", f+1), "", 200, rwnd, 0, nil)
		}
		return run
	}
	single := Compare(compared(
		mk("fixed rmem 81920", 14, []float64{40, 19, 19, 18}, 0, true),
		mk("autotuned", 16.5, []float64{24, 24, 24, 24}, 0, false),
	), "htb 100mbit")
	var reps []*datafile.Run
	for rep := 0; rep < 3; rep++ {
		reps = append(reps, mk("fixed rmem 81920", 14, []float64{40, 19, 19, 18}, rep, rep != 0),
			mk("autotuned", 16.5, []float64{24, 24, 24, 24}, rep, false))
	}
	repeated := Compare(compared(reps...), "htb 100mbit")
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			for name, cs := range map[string][]Comparison{"compare-window-limited": single, "compare-window-limited-repeated": repeated} {
				var b bytes.Buffer
				if err := WriteCompare(&b, format, cs, Columns{}); err != nil {
					t.Fatal(err)
				}
				golden.Check(t, name+"."+format+".golden", b.Bytes())
			}
		})
	}
}

func TestLaterWarnings(t *testing.T) {
	w := Summary{Warnings: []string{"x"}}
	for _, c := range []struct {
		runs []Summary
		want string
	}{
		{[]Summary{w, {}}, ""},
		{[]Summary{{}, w}, "run 2 has warnings of its own (bloatbench summary prints them)"},
		{[]Summary{{}, w, {}, w, w}, "runs 2, 4 and 5 have warnings of their own (bloatbench summary prints them)"},
	} {
		if got := laterWarnings(c.runs); got != c.want {
			t.Errorf("%d runs: %q, want %q", len(c.runs), got, c.want)
		}
	}
}
