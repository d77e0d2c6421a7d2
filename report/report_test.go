package report

import (
	"bytes"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/golden"
)

func TestStats(t *testing.T) {
	cases := []struct {
		name             string
		xs               []float64
		mean, median, p9 float64
	}{
		{"empty", nil, math.NaN(), math.NaN(), math.NaN()},
		{"one", []float64{3}, 3, 3, 3},
		{"odd", []float64{5, 1, 3}, 3, 3, 4.6},
		{"even", []float64{4, 1, 3, 2}, 2.5, 2.5, 3.7},
		{"repeated", []float64{2, 2, 2, 9}, 3.75, 2, 6.9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, chk := range []struct {
				what      string
				got, want float64
			}{{"mean", Mean(c.xs), c.mean}, {"median", Median(c.xs), c.median}, {"p90", Percentile(c.xs, 90), c.p9}} {
				if !(math.IsNaN(chk.want) && math.IsNaN(chk.got)) && math.Abs(chk.got-chk.want) > 1e-9 {
					t.Errorf("%s = %v, want %v", chk.what, chk.got, chk.want)
				}
			}
		})
	}
	if xs := []float64{3, 1, 2}; Median(xs) != 2 || xs[0] != 3 {
		t.Errorf("Median must not reorder its input: %v", xs)
	}
}

func TestAlignIntervals(t *testing.T) {
	g := Grid{T0: 100, Step: 1, N: 6}
	s := []datafile.Sample{
		{T: 102.5, Dur: 1, V: 2},   // covers (101.5, 102.5]: point 102
		{T: 101.5, Dur: 1, V: 1},   // out of order on purpose: covers 101
		{T: 103.5, Dur: 1, V: 3},   // covers 103
		{T: 105.0, Dur: 0.5, V: 5}, // covers (104.5, 105]: 105 (its end is inclusive)
	}
	got := AlignIntervals(g, s)
	want := []float64{math.NaN(), 1, 2, 3, math.NaN(), 5}
	for k := range want {
		if !(math.IsNaN(want[k]) && math.IsNaN(got[k])) && got[k] != want[k] {
			t.Errorf("point %d = %v, want %v (all %v)", k, got[k], want[k], got)
		}
	}
}

func TestNaturalOrder(t *testing.T) {
	in := []string{"TCP download::10", "TCP download::2", "TCP download sum", "Ping (ms) ICMP idle", "Ping (ms) ICMP loaded",
		"TCP download avg", "Ping (ms) ICMP", "TCP download::1", "TCP upload::1"}
	want := []string{"Ping (ms) ICMP", "Ping (ms) ICMP idle", "Ping (ms) ICMP loaded", "TCP download avg", "TCP download sum",
		"TCP download::1", "TCP download::2", "TCP download::10", "TCP upload::1"}
	rows := make([]Row, len(in))
	for i, n := range in {
		rows[i].Name = n
	}
	sortRows(rows)
	for i := range want {
		if rows[i].Name != want[i] {
			t.Fatalf("order %v", rows)
		}
	}
}

// syntheticRun is a tcp_4down-like run with known values: idle ping 0.1 ms, loaded
// ping 20..24.8 ms, lead-out 0.5 ms; flow f carries 23+f Mbit/s with a dip.
func syntheticRun(flows int, incomplete bool) *datafile.Run {
	start := time.Date(2026, 11, 29, 18, 41, 47, 0, time.UTC)
	t0 := datafile.Unix(start)
	m := datafile.Metadata{Test: "tcp_4down", Title: "MQ + PFIFO", StartTime: start, T0: t0,
		Length: 10, Delay: 2, Step: 0.2, TotalLength: 14, Parameters: map[string]string{"download_streams": "4"}}
	run := &datafile.Run{Metadata: m, Samples: map[string][]datafile.Sample{}, Path: "x.bb.json.gz"}
	ping := datafile.Series{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms", Host: "client"}
	run.Series = append(run.Series, ping)
	for k := 0; k <= 70; k++ {
		sent := t0 + float64(k)*0.2 + 0.001
		v := 0.1
		switch {
		case sent > t0+12:
			v = 0.5
		case sent >= t0+2:
			v = 20 + float64(k%25)*0.2
		}
		smp := datafile.Sample{T: sent + v/1e3, V: v, Seq: k}
		if k == 30 {
			smp = datafile.Sample{T: sent, Seq: k, Lost: true}
		}
		run.Samples[ping.Name] = append(run.Samples[ping.Name], smp)
	}
	for f := 1; f <= flows; f++ {
		se := datafile.Series{Name: "TCP download::" + itoa(f), Kind: datafile.KindTCP, Units: "Mbits/s", Host: "client", Direction: "download", Flow: f}
		run.Series = append(run.Series, se)
		for k := 1; k <= 50; k++ {
			end := t0 + 2 + float64(k)*0.2 + 0.013
			v := 23 + float64(f)
			if k == 1 {
				v = 5 // slow start
			}
			run.Samples[se.Name] = append(run.Samples[se.Name], datafile.Sample{T: end, Dur: 0.2, V: v, Bytes: int64(v * 0.2 * 1e6 / 8)})
		}
	}
	if incomplete {
		run.Incomplete = true
		run.Error = "agent on host server (root@198.19.0.6): connection lost"
	}
	return run
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestSummaryGolden(t *testing.T) {
	sums := []Summary{Summarize(syntheticRun(4, false)), Summarize(syntheticRun(1, true))}
	// --cut 3,8 --p99: 3 s into the run is 1 s into the streams (delay 2).
	cut := []Summary{SummarizeWith(syntheticRun(4, false), Options{Cut: &[2]float64{3, 8}})}
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, format, sums, Columns{}); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, "summary."+format+".golden", b.Bytes())
			b.Reset()
			if err := Write(&b, format, cut, Columns{P99: true}); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, "summary-cut-p99."+format+".golden", b.Bytes())
		})
	}
}

func TestSummaryValues(t *testing.T) {
	s := Summarize(syntheticRun(4, false))
	byName := map[string]Row{}
	for _, r := range s.Rows {
		byName[r.Name] = r
	}
	check := func(name string, avg, median float64, points int) {
		t.Helper()
		r, ok := byName[name]
		if !ok {
			t.Fatalf("no row %q in %v", name, s.Rows)
		}
		if math.Abs(r.Avg-avg) > 1e-6 || math.Abs(r.Median-median) > 1e-6 || r.Points != points {
			t.Errorf("%s = avg %v median %v points %d, want %v %v %d", name, r.Avg, r.Median, r.Points, avg, median, points)
		}
	}
	check("Ping (ms) ICMP idle", 0.1, 0.1, 10)
	// 50 loaded replies, one lost.
	if r := byName["Ping (ms) ICMP loaded"]; r.Points != 49 {
		t.Errorf("loaded ping points %d, want 49", r.Points)
	}
	// flent's row: the whole run, 71 probes with one lost: 10 idle at 0.1 ms, the 49
	// loaded ones, and 11 of the lead-out at 0.5 ms.
	loadedSum := 0.0
	for _, x := range syntheticRun(0, false).Samples["Ping (ms) ICMP"][10:60] {
		if !x.Lost {
			loadedSum += x.V
		}
	}
	check("Ping (ms) ICMP", (10*0.1+loadedSum+11*0.5)/70, 21.4, 70)
	// 50 intervals on the grid: the first at 5 Mbit/s, then 49 at 23+f.
	check("TCP download::1", (5+49*24.0)/50, 24, 50)
	check("TCP download sum", (20+49*(24+25+26+27.0))/50, 102, 50)
	check("TCP download avg", (5+49*25.5)/50, 25.5, 50)
}

func TestBottleneckRows(t *testing.T) {
	run := syntheticRun(1, false)
	t0 := run.Metadata.T0
	add := func(name string, counter bool, vals ...float64) {
		kind := datafile.KindQdisc
		if name[:3] == "bql" {
			kind = datafile.KindBQL
		}
		run.Series = append(run.Series, datafile.Series{Name: name, Kind: kind, Counter: counter})
		for i, v := range vals {
			run.Samples[name] = append(run.Samples[name], datafile.Sample{T: t0 + 2 + float64(i)*0.5, V: v})
		}
	}
	// drops: +10 per 0.5 s = 20/s, with a reset (qdisc replaced) that is skipped.
	add("qdisc server:eth0 root drops", true, 0, 10, 20, 30, 5, 15)
	add("qdisc server:eth0 root backlog", false, 1000, 3000, 2000, 2000, 2000, 2000)
	add("qdisc server:eth0 1:1 ecn_mark", true, 0, 1, 2, 3, 4, 5)
	add("qdisc server:eth0 1:2 ecn_mark", true, 0, 1, 2, 3, 4, 5)
	add("qdisc server:eth0 1:1 pkts_in_c", true, 0, 50, 100, 150, 200, 250)
	add("qdisc server:eth0 1:1 pkts_in_l", true, 0, 25, 50, 75, 100, 125)
	add("bql server:eth0 tx-0 inflight", false, 100, 100, 100, 100, 100, 100)
	add("bql server:eth0 tx-1 inflight", false, 50, 50, 50, 50, 50, 50)
	add("bql server:eth0 tx-0 limit", false, 3000, 3000, 4542, 4542, 4542, 4542)
	add("bql server:eth0 tx-1 limit", false, 1514, 1514, 1514, 1514, 1514, 1514)
	s := Summarize(run)
	byName := map[string]Row{}
	for _, r := range s.Rows {
		byName[r.Name] = r
	}
	for name, want := range map[string]struct {
		median float64
		points int
		units  string
	}{
		"Qdisc server:eth0 drops":        {20, 4, "pkts/s"},
		"Qdisc server:eth0 ECN marks":    {4, 5, "pkts/s"},
		"Qdisc server:eth0 backlog":      {2000, 6, "bytes"},
		"BQL server:eth0 inflight":       {150, 6, "bytes"},
		"BQL server:eth0 limit":          {6056, 6, "bytes"},
		"Qdisc server:eth0 classic pkts": {100, 5, "pkts/s"},
		"Qdisc server:eth0 L4S pkts":     {50, 5, "pkts/s"},
	} {
		r, ok := byName[name]
		if !ok || r.Median != want.median || r.Points != want.points || r.Units != want.units {
			t.Errorf("%s = %+v (present %v), want median %v points %d %s", name, r, ok, want.median, want.points, want.units)
		}
	}
}

// A cut is flent's --data-cutoff: ends excluded, a start of 0 reaching back to t0 - 1
// (so t0 is in), an end of 0 or less counted back from the end of the run.
func TestCutWindow(t *testing.T) {
	m := datafile.Metadata{T0: 1000, TotalLength: 14}
	for _, tc := range []struct {
		name     string
		cut      *[2]float64
		from, to float64
	}{
		{"none", nil, math.Inf(-1), math.Inf(1)},
		{"plain", &[2]float64{3, 8}, 1003, 1008},
		{"from the start", &[2]float64{0, 8}, 999, 1008},
		{"to the end", &[2]float64{2, 0}, 1002, 1014},
		{"back from the end", &[2]float64{2, -2}, 1002, 1012},
		{"everything", &[2]float64{0, 0}, 999, 1014},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := CutWindow(m, tc.cut)
			if from != tc.from || to != tc.to {
				t.Errorf("CutWindow(%v) = %v, %v; want %v, %v", tc.cut, from, to, tc.from, tc.to)
			}
		})
	}
}

// The same cut written from the end and from the start gives the same rows, and a
// cut from 0 keeps a reply at t0 itself (flent's raw cut reaches back to t0 - 1).
func TestCutRows(t *testing.T) {
	rows := func(run *datafile.Run, cut [2]float64) map[string]Row {
		out := map[string]Row{}
		for _, r := range SummarizeWith(run, Options{Cut: &cut}).Rows {
			out[r.Name] = r
		}
		return out
	}
	fromEnd, fromStart := rows(syntheticRun(4, false), [2]float64{3, -2}), rows(syntheticRun(4, false), [2]float64{3, 12})
	for name, r := range fromStart {
		if o := fromEnd[name]; o.Points != r.Points || o.Avg != r.Avg && !(math.IsNaN(o.Avg) && math.IsNaN(r.Avg)) {
			t.Errorf("%s: 3,-2 gives %+v, 3,12 gives %+v", name, o, r)
		}
	}
	run := syntheticRun(1, false)
	run.Samples["Ping (ms) ICMP"][0].T = run.Metadata.T0
	if n := rows(run, [2]float64{0, 1})["Ping (ms) ICMP"].Points; n != 5 {
		t.Errorf("cut 0,1 keeps %d replies, want 5 (t0's among them)", n)
	}
}

// A series a file has on its grid only is cut by grid point, both ends in, as flent
// cuts one; the same series with raw values would lose both ends.
func TestInGrid(t *testing.T) {
	m := datafile.Metadata{T0: 1000, TotalLength: 4, Step: 0.2}
	g := GridOf(m)
	for _, tc := range []struct {
		cut  *[2]float64
		want []int // the points kept, of 0..20
	}{
		{nil, []int{0, 20}},
		{&[2]float64{1, 3}, []int{5, 15}},
		{&[2]float64{0.6, -1}, []int{3, 15}},
		{&[2]float64{0, 0}, []int{0, 20}},
	} {
		var kept []int
		for k := 0; k < g.N; k++ {
			if inGrid(m, tc.cut, g, k) {
				kept = append(kept, k)
			}
		}
		if len(kept) == 0 || kept[0] != tc.want[0] || kept[len(kept)-1] != tc.want[1] || len(kept) != tc.want[1]-tc.want[0]+1 {
			t.Errorf("cut %v keeps %v, want %d..%d", tc.cut, kept, tc.want[0], tc.want[1])
		}
	}
}

// The heading says the cut as given, an END of 0 or less as time before the end.
func TestHeadingCut(t *testing.T) {
	for _, tc := range []struct {
		cut  [2]float64
		want string
	}{
		{[2]float64{3, 8}, " from 3s to 8s:"},
		{[2]float64{5, -5}, " from 5s to 5s before the end:"},
		{[2]float64{0, 0}, " from 0s to the end:"},
	} {
		cut := tc.cut
		if got := heading(Summary{Test: "tcp_4down", Title: "x", Cut: &cut}); got != "Summary of tcp_4down run 'x'"+tc.want {
			t.Errorf("cut %v: %q", tc.cut, got)
		}
	}
}
