package report

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// rowsByName indexes a summary's rows.
func rowsByName(s Summary) map[string]Row {
	m := map[string]Row{}
	for _, r := range s.Rows {
		m[r.Name] = r
	}
	return m
}

// --flows summary folds the flows' rows into one per direction: the mean and
// median of the flows' averages, the flows as points; the sums stay.
func TestFoldFlows(t *testing.T) {
	run := syntheticRun(4, false)
	// TCP_INFO of flow 1 and 2, folded by statistic.
	for f, v := range map[int]float64{1: 20, 2: 30} {
		se := datafile.Series{Name: "TCP download::" + itoa(f) + " srtt", Kind: "tcpinfo", Units: "ms", Direction: "download", Stat: "srtt"}
		run.Series = append(run.Series, se)
		run.Samples[se.Name] = []datafile.Sample{{T: run.Metadata.T0 + 3, V: v}, {T: run.Metadata.T0 + 4, V: v}}
	}
	folded := rowsByName(SummarizeWith(run, Options{FoldFlows: true}))
	for _, gone := range []string{"TCP download::1", "TCP download::4", "TCP download::1 srtt"} {
		if _, ok := folded[gone]; ok {
			t.Errorf("row %q left in the folded summary", gone)
		}
	}
	// Flow f averages (5 + 49*(23+f))/50.
	var avgs []float64
	for f := 1; f <= 4; f++ {
		avgs = append(avgs, (5+49*(23+float64(f)))/50)
	}
	cases := []struct {
		name        string
		avg, median float64
		points      int
	}{
		{"TCP download flows", Mean(avgs), Median(avgs), 4},
		{"TCP download flows srtt", 25, 25, 2},
		{"TCP download sum", (20 + 49*(24+25+26+27.0)) / 50, 102, 50},
	}
	for _, c := range cases {
		r, ok := folded[c.name]
		if !ok || math.Abs(r.Avg-c.avg) > 1e-9 || math.Abs(r.Median-c.median) > 1e-9 || r.Points != c.points {
			t.Errorf("%s = %+v, want avg %v median %v points %d", c.name, r, c.avg, c.median, c.points)
		}
	}
}

// A series of a kind the report does not know gets a row of its own name from its
// raw samples, marked Own, and a test's aggregates are computed on the grid: a
// sum over a glob that leaves out what it excludes, and Jain's index.
func TestOwnRowsAndAggregates(t *testing.T) {
	run := syntheticRun(2, false)
	t0 := run.Metadata.T0
	rr := datafile.Series{Name: "TCP RR latency", Kind: "rr", Units: "ms"}
	run.Series = append(run.Series, rr)
	for k := 1; k <= 10; k++ {
		run.Samples[rr.Name] = append(run.Samples[rr.Name], datafile.Sample{T: t0 + 2 + float64(k)*0.2, Dur: 0.2, V: float64(k)})
	}
	run.Metadata.Aggregates = []datafile.Aggregate{
		{Name: "TCP totals", Op: "sum", Series: "TCP*", Exclude: []string{"TCP download sum", "TCP download avg", "TCP RR latency"}},
		{Name: "Fairness", Op: "fairness", Series: "TCP download::*"},
		{Name: "TCP download sum", Op: "sum", Series: "TCP download::*"}, // the grid's own
		{Name: "Balance", Op: "ratio", Series: "TCP download::1", Over: "TCP download::2"},
		{Name: "No divisor", Op: "ratio", Series: "TCP download::1", Over: "UDP*"},
		{Name: "One by glob", Op: "sum", Series: "TCP download::*", Exclude: []string{"*::2"}},
	}
	rows := rowsByName(Summarize(run))
	if r := rows["TCP RR latency"]; !r.Own || r.Points != 10 || r.Avg != 5.5 || r.Units != "ms" {
		t.Errorf("own row %+v", r)
	}
	if r := rows["TCP totals"]; !r.Own || r.Points != 50 || math.Abs(r.Avg-rows["TCP download sum"].Avg) > 1e-9 {
		t.Errorf("TCP totals %+v, want the download sum %+v", r, rows["TCP download sum"])
	}
	// Flows of 24 and 25 Mbit/s after the first step: (49)^2/(2*(24^2+25^2)).
	if r := rows["Fairness"]; math.Abs(r.Median-49.0*49/(2*(24*24+25*25))) > 1e-12 || r.Units != "" {
		t.Errorf("fairness %+v", r)
	}
	// 24 over 25 Mbit/s at every step but the first (5 over 5).
	if r := rows["Balance"]; !r.Own || r.Points != 50 || r.Median != 24.0/25 || math.Abs(r.Avg-(49*24.0/25+1)/50) > 1e-12 || r.Units != "" {
		t.Errorf("ratio %+v", r)
	}
	if r, one := rows["One by glob"], rows["TCP download::1"]; r.Median != one.Median || r.Avg != one.Avg {
		t.Errorf("a sum with ::2 excluded by a glob %+v, want flow 1's %+v", r, one)
	}
	if r := rows["No divisor"]; r.Points != 0 {
		t.Errorf("a ratio over nothing %+v", r)
	}
	if r := rows["TCP download sum"]; r.Own {
		t.Error("the grid's own sum was taken for the test's aggregate")
	}
	// compare shows the own rows' medians.
	ms := metricsFor([]Compared{{Summary: Summarize(run)}})
	found := map[string]bool{}
	for _, m := range ms {
		found[m.Name] = true
	}
	for _, want := range []string{"TCP RR latency median", "TCP totals median", "Fairness median"} {
		if !found[want] {
			t.Errorf("compare lacks %q", want)
		}
	}
}

// One classifier for the bottleneck's series, from their fields or, in files from
// before the fields, from their names; both give the same.
func TestBottleneckStat(t *testing.T) {
	cases := []struct {
		se   datafile.Series
		want DevStat
		ok   bool
	}{
		{datafile.Series{Name: "qdisc r:eth1 root drops", Kind: "qdisc", Host: "r", Dev: "eth1", Stat: "root drops"}, DevStat{"r", "eth1", "drops", true}, true},
		{datafile.Series{Name: "qdisc r:eth1 root drops", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "drops", true}, true},
		{datafile.Series{Name: "qdisc r:eth1 root tin2.ecn_mark", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "ECN marks", true}, true},
		{datafile.Series{Name: "qdisc r:eth1 root ecn_mark", Kind: "qdisc", Host: "r", Dev: "eth1", Stat: "root ecn_mark"}, DevStat{"r", "eth1", "ECN marks", true}, true},
		{datafile.Series{Name: "qdisc r:eth1 1:3 backlog", Kind: "qdisc", Host: "r"}, DevStat{}, false},
		{datafile.Series{Name: "qdisc r:eth1 root backlog", Kind: "qdisc"}, DevStat{"r", "eth1", "backlog", false}, true},
		{datafile.Series{Name: "qdisc r:eth1 root pkts_in_l", Kind: "qdisc"}, DevStat{"r", "eth1", "L4S pkts", true}, true},
		{datafile.Series{Name: "qdisc r:eth1 1:3 delay_l", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "L queue delay", false}, true},
		{datafile.Series{Name: "qdisc r:eth1 root delay_c", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "C queue delay", false}, true},
		{datafile.Series{Name: "qdisc r:eth1 1:2 prob", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "prob", false}, true},
		{datafile.Series{Name: "qdisc r:eth1 1:2 step_marks", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "step marks", true}, true},
		{datafile.Series{Name: "qdisc r:eth1 1:2 step_mark", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "step marks", true}, true},
		{datafile.Series{Name: "qdisc r:eth1 root tin2.peak_delay_us", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "tin 2 peak delay", false}, true},
		{datafile.Series{Name: "qdisc r:eth1 root tin0.avg_delay_us", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "tin 0 avg delay", false}, true},
		{datafile.Series{Name: "qdisc r:eth1 root tin1.backlog_bytes", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "tin 1 backlog", false}, true},
		{datafile.Series{Name: "qdisc r:eth1 root tin1.drops", Kind: "qdisc", Host: "r"}, DevStat{"r", "eth1", "tin 1 drops", true}, true},
		{datafile.Series{Name: "qdisc r:eth1 root tin1.sent_packets", Kind: "qdisc", Host: "r"}, DevStat{}, false},
		{datafile.Series{Name: "qdisc r:eth1 root tinx.drops", Kind: "qdisc", Host: "r"}, DevStat{}, false},
		{datafile.Series{Name: "qdisc r:eth1 root tin.drops", Kind: "qdisc", Host: "r"}, DevStat{}, false},
		{datafile.Series{Name: "bql r:eth1 tx-3 inflight", Kind: "bql", Host: "r"}, DevStat{"r", "eth1", "BQL inflight", false}, true},
		{datafile.Series{Name: "bql r:eth1 tx-3 limit", Kind: "bql", Host: "r", Dev: "eth1", Queue: "tx-3", Stat: "limit"}, DevStat{"r", "eth1", "BQL limit", false}, true},
		{datafile.Series{Name: "bql r:eth1 tx-3 limit_max", Kind: "bql"}, DevStat{}, false},
		{datafile.Series{Name: "TCP download::1", Kind: "tcp"}, DevStat{}, false},
	}
	for _, c := range cases {
		got, ok := BottleneckStat(c.se)
		if ok != c.ok || got != c.want {
			t.Errorf("%+v: %+v %v, want %+v %v", c.se, got, ok, c.want, c.ok)
		}
	}
}

// Jain's fairness in compare is taken over the rows of single flows, whatever
// their names (rrul's "TCP upload BK"): not over sums, averages or other rows.
func TestJainOverFlowRows(t *testing.T) {
	run := syntheticRun(0, false)
	t0 := run.Metadata.T0
	for i, name := range []string{"TCP upload BE", "TCP upload BK"} {
		se := datafile.Series{Name: name, Kind: datafile.KindTCP, Units: "Mbits/s", Direction: "upload"}
		run.Series = append(run.Series, se)
		for k := 1; k <= 10; k++ {
			run.Samples[name] = append(run.Samples[name], datafile.Sample{T: t0 + 2 + float64(k)*0.2, Dur: 0.2, V: float64(10 * (i + 1))})
		}
	}
	s := Summarize(run)
	// 10 and 20 Mbit/s: (30)^2 / (2 * 500).
	if got := jain(s); math.Abs(got-0.9) > 1e-12 {
		t.Errorf("jain = %v, want 0.9", got)
	}
}

// In a run with several pairs, the direction's sum is over every pair's flows and
// each pair gets a sum of its own (and a fold of its own with --flows summary).
func TestPairSums(t *testing.T) {
	run := syntheticRun(4, false)
	for i := range run.Series {
		se := &run.Series[i]
		if se.Kind != datafile.KindTCP {
			continue
		}
		pair := "1"
		if se.Flow > 2 {
			pair = "2"
		}
		old := se.Name
		se.Name, se.Pair = datafile.PairName(old, pair), pair
		run.Samples[se.Name] = run.Samples[old]
		delete(run.Samples, old)
	}
	// Each pair pings: pair 2's replies 10 ms above pair 1's.
	ping := run.Series[0]
	one := run.Samples[ping.Name]
	delete(run.Samples, ping.Name)
	run.Series[0].Name, run.Series[0].Pair = datafile.PairName(ping.Name, "1"), "1"
	run.Samples[run.Series[0].Name] = one
	two := datafile.Series{Name: datafile.PairName(ping.Name, "2"), Kind: datafile.KindPing, Units: "ms", Pair: "2"}
	run.Series = append(run.Series, two)
	for _, x := range one {
		x.V += 10
		x.T += 0.010 // the reply 10 ms later, to the same probe
		run.Samples[two.Name] = append(run.Samples[two.Name], x)
	}
	// A test's aggregate over "TCP*": every pair's flows once, not their sums too,
	// and each pair's own.
	run.Metadata.Aggregates = []datafile.Aggregate{{Name: "TCP totals", Op: "sum", Series: "TCP*"}}
	rows := rowsByName(Summarize(run))
	// Flow f runs at 23+f after a first step at 5: pair 1 has flows 1 and 2.
	for name, median := range map[string]float64{
		"TCP download sum":          24 + 25 + 26 + 27,
		"TCP download sum (pair 1)": 24 + 25,
		"TCP download sum (pair 2)": 26 + 27,
		"TCP download avg (pair 2)": 26.5,
		"TCP download::3 (pair 2)":  26,
		"TCP totals":                24 + 25 + 26 + 27,
		"TCP totals (pair 1)":       24 + 25,
		"TCP totals (pair 2)":       26 + 27,
	} {
		if r, ok := rows[name]; !ok || math.Abs(r.Median-median) > 1e-9 || r.Points != 50 {
			t.Errorf("%s = %+v, want median %v over 50 points", name, r, median)
		}
	}
	// The pairs' replies together have the rows compare reads.
	p1, p2, all := rows["Ping (ms) ICMP (pair 1) loaded"], rows["Ping (ms) ICMP (pair 2) loaded"], rows["Ping (ms) ICMP loaded"]
	if all.Points != p1.Points+p2.Points || math.Abs(all.Avg-(p1.Avg+p2.Avg)/2) > 1e-9 || p2.Avg-p1.Avg < 9.99 {
		t.Errorf("pooled loaded ping %+v from pair 1 %+v and pair 2 %+v", all, p1, p2)
	}
	if _, ok := rows["Ping (ms) ICMP idle"]; !ok {
		t.Error("no pooled idle ping row")
	}
	if m, _ := LookupMetric("Ping (ms) ICMP loaded median"); math.IsNaN(m.Value(Summarize(run))) {
		t.Error("compare's loaded ping metric is NaN in a run with pairs")
	}
	uniqueKeys(t, Summarize(run))
	uniqueKeys(t, SummarizeWith(run, Options{FoldFlows: true}))
	folded := rowsByName(SummarizeWith(run, Options{FoldFlows: true}))
	for name, points := range map[string]int{"TCP download flows (pair 1)": 2, "TCP download flows (pair 2)": 2, "TCP download sum": 50} {
		if r, ok := folded[name]; !ok || r.Points != points {
			t.Errorf("folded %s = %+v, want %d points", name, r, points)
		}
	}
}

// dualpi2's queues under mq, each a row of the device: a delay is the worst of
// its children each step (an idle child's zero is no queue a packet met), in ms
// from tc's µs; marks by the step threshold are a rate; and compare has a line for
// each queue's delay.
func TestDualPI2ClassRows(t *testing.T) {
	run := syntheticRun(1, false)
	t0 := run.Metadata.T0
	add := func(where, field string, v func(k int) float64) {
		se := datafile.Series{Name: "qdisc r:eth1 " + where + " " + field, Kind: datafile.KindQdisc, Host: "r", Dev: "eth1", Stat: where + " " + field}
		run.Series = append(run.Series, se)
		for k := 0; k <= 70; k++ {
			run.Samples[se.Name] = append(run.Samples[se.Name], datafile.Sample{T: t0 + float64(k)*0.2, V: v(k)})
		}
	}
	// Two children: 1:1 carries the flows, 1:2 little.
	// The worst each step: 2 ms, not their sum (2.5) nor their mean (1.25).
	// A file recorded before the clamp was known: dualpi2's u32 for a negative
	// delay (a head stamped after the dump read the clock) is no delay of 71 minutes.
	add("1:1", "delay_l", func(k int) float64 {
		if k == 30 {
			return 1<<32 - 1
		}
		return 2000
	})
	add("1:2", "delay_l", func(int) float64 { return 500 })
	add("1:1", "delay_c", func(int) float64 { return 15000 })
	add("1:2", "delay_c", func(int) float64 { return 0 })
	add("1:1", "prob", func(int) float64 { return 0.25 })
	add("1:2", "prob", func(int) float64 { return 0 })
	add("1:1", "step_mark", func(k int) float64 { return float64(k) * 10 }) // 50 marks/s (iproute2 7.2's name)
	add("1:2", "step_marks", func(k int) float64 { return float64(k) * 2 }) // 10 marks/s
	sum := Summarize(run)
	rows := map[string]Row{}
	for _, r := range sum.Rows {
		rows[r.Name] = r
	}
	for _, c := range []struct {
		row, units string
		median     float64
	}{
		{"Qdisc r:eth1 L queue delay", "ms", 2},
		{"Qdisc r:eth1 C queue delay", "ms", 15},
		{"Qdisc r:eth1 prob", "prob", 0.25},
		{"Qdisc r:eth1 step marks", "pkts/s", 60},
	} {
		r, ok := rows[c.row]
		if !ok {
			t.Errorf("no row %q", c.row)
			continue
		}
		if r.Units != c.units || math.Abs(r.Median-c.median) > 1e-6*c.median {
			t.Errorf("%s: median %g %s, want %g %s", c.row, r.Median, r.Units, c.median, c.units)
		}
		// The clamped step is 1:1's 0, so the worst child's is 1:2's 0.5 ms.
		if want := (float64(r.Points-1)*2 + 0.5) / float64(r.Points); c.row == "Qdisc r:eth1 L queue delay" && (math.Abs(r.Avg-want) > 1e-9 || r.P99 != 2) {
			t.Errorf("%s: avg %g, p99 %g, want %g and 2: the clamped sample counted", c.row, r.Avg, r.P99, want)
		}
	}
	for name, want := range map[string]float64{"L queue delay median": 2, "C queue delay median": 15} {
		found := false
		for _, m := range AllMetrics() {
			if m.Name == name {
				found = true
				if got := m.Value(sum); math.Abs(got-want) > 1e-9 {
					t.Errorf("compare's %s: %g, want %g", name, got, want)
				}
			}
		}
		if !found {
			t.Errorf("compare has no metric %q", name)
		}
	}
}

// A series of any kind that says its samples are probes' round trips (a UDP
// probe's) gets the rows a ping series gets, idle and loaded included, with the
// same numbers for the same samples; its one-way series keep one row each.
func TestProbeRTTRowsAreAPing(t *testing.T) {
	run := syntheticRun(1, false)
	ping := run.Samples["Ping (ms) ICMP"]
	l4s := datafile.Series{Name: "Ping (ms) UDP L4S RTT", Kind: "udpprobe", Units: "ms", Measure: datafile.MeasureRTT, Marking: "ECT(1)"}
	down := datafile.Series{Name: "Ping (ms) UDP L4S down", Kind: "udpprobe", Units: "ms"}
	run.Series = append(run.Series, l4s, down)
	run.Samples[l4s.Name] = ping
	run.Samples[down.Name] = ping
	rows := rowsByName(Summarize(run))
	for _, suffix := range []string{"", LoadedSuffix, IdleSuffix} {
		want, got := rows["Ping (ms) ICMP"+suffix], rows[l4s.Name+suffix]
		if got.Points == 0 || got.Avg != want.Avg || got.Median != want.Median || got.Points != want.Points || !got.Own || want.Own {
			t.Errorf("row %q %+v, want ping's %+v, and a row of the test's own", l4s.Name+suffix, got, want)
		}
	}
	// compare shows their medians, as it did the probe's one row.
	found := map[string]bool{}
	for _, m := range metricsFor([]Compared{{Summary: Summarize(run)}}) {
		found[m.Name] = true
	}
	for _, want := range []string{"Ping (ms) UDP L4S RTT median", "Ping (ms) UDP L4S RTT loaded median", "Ping (ms) UDP L4S RTT idle median"} {
		if !found[want] {
			t.Errorf("compare lacks %q", want)
		}
	}
	if _, ok := rows[down.Name+LoadedSuffix]; ok || rows[down.Name].Points == 0 {
		t.Errorf("the one-way series: %+v, %+v", rows[down.Name], rows[down.Name+LoadedSuffix])
	}
}

// An own series whose raw statistic is 0 (a CE fraction of 0 all run long) has
// the row of its grid, as flent prints it for the export (it takes a raw 0 as
// none): here the grid has one point more than the samples, as the first sample
// covers two.
func TestOwnRowOfZerosIsTheGrids(t *testing.T) {
	run := syntheticRun(1, false)
	t0 := run.Metadata.T0
	ce := datafile.Series{Name: "L4S CE fraction", Kind: "udp", Units: "%"}
	some := datafile.Series{Name: "L4S RTT", Kind: "udp", Units: "ms"}
	run.Series = append(run.Series, ce, some)
	for k := 1; k <= 10; k++ {
		dur := 0.2
		if k == 1 {
			dur = 0.25
		}
		run.Samples[ce.Name] = append(run.Samples[ce.Name], datafile.Sample{T: t0 + 2 + float64(k)*0.2, Dur: dur, V: 0})
		run.Samples[some.Name] = append(run.Samples[some.Name], datafile.Sample{T: t0 + 2 + float64(k)*0.2, Dur: dur, V: float64(k)})
	}
	rows := rowsByName(Summarize(run))
	if r := rows[ce.Name]; r.Points != 11 || r.Avg != 0 || r.Median != 0 {
		t.Errorf("zeros: %+v, want the grid's 11 points of 0", r)
	}
	if r := rows[some.Name]; r.Points != 10 || r.Avg != 5.5 {
		t.Errorf("values: %+v, want the 10 samples'", r)
	}
}

// A request/response client's latency is a round trip: it has a loaded row beside
// its whole-run row (the row flent's name carries, as flent prints it: the mean
// of the samples), and no idle row when the client ran only while the streams did.
func TestRRLatencyRowsAreAProbe(t *testing.T) {
	run := syntheticRun(1, false)
	addRR(run, true, nil)
	rows := rowsByName(Summarize(run))
	whole, loaded := rows["TCP RR latency"], rows["TCP RR latency"+LoadedSuffix]
	if whole.Points != 50 || math.Abs(whole.Avg-0.3) > 1e-9 || !whole.Own {
		t.Errorf("whole-run row %+v, want 50 points of 0.3 ms, the test's own", whole)
	}
	if loaded.Points != 50 || loaded.Median != 0.3 || !loaded.Own {
		t.Errorf("loaded row %+v, want the 50 intervals of the streams' time", loaded)
	}
	if r, ok := rows["TCP RR latency"+IdleSuffix]; ok {
		t.Errorf("an idle row %+v for a client that did not run idle", r)
	}
	if r := rows["Ping (ms) ICMP"+IdleSuffix]; r.Points == 0 {
		t.Errorf("ping's idle row %+v lost", r)
	}
}

// uniqueKeys fails when two rows of a summary share a key, or a row has none
// that says what it is: compare, verdicts and history select rows by it.
func uniqueKeys(t *testing.T, s Summary) {
	t.Helper()
	seen := map[Key]string{}
	for _, r := range s.Rows {
		if r.Key.Series == "" && r.Key.Stat == "" {
			t.Errorf("row %q has no key: %+v", r.Name, r.Key)
		}
		if other, ok := seen[r.Key]; ok {
			t.Errorf("rows %q and %q share the key %+v", other, r.Name, r.Key)
		}
		seen[r.Key] = r.Name
	}
}

// compare's metrics read rows by key, not by the names they print: renamed rows
// give the same values.
func TestMetricsReadKeysNotNames(t *testing.T) {
	run := withEcho(delayRun(10, delayDev{"server", "eth1", 125000, 0, 8}), "server", "eth1", 8)
	s := Summarize(run)
	uniqueKeys(t, s)
	renamed := s
	renamed.Rows = slices.Clone(s.Rows)
	for i := range renamed.Rows {
		renamed.Rows[i].Name = fmt.Sprintf("row %d", i)
	}
	found := 0
	for _, m := range AllMetrics() {
		a, b := m.Value(s), m.Value(renamed)
		if !math.IsNaN(a) {
			found++
		}
		if a != b && !(math.IsNaN(a) && math.IsNaN(b)) {
			t.Errorf("%s: %v by the printed names, %v renamed", m.Name, a, b)
		}
	}
	if found < 5 {
		t.Errorf("only %d metrics have a value in the run", found)
	}
}
