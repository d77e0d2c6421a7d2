// Package htmlreport draws runs as one self-contained HTML page of ECharts charts
// (through go-echarts): per run, every flow, the sum and the ping over time, and the
// bottleneck's queue; across runs, the ping CDF, box plots of ping and throughput per
// setup, and the mean throughput per setup; and each flow's mean throughput per run
// with Jain's fairness index. Every run's ping is drawn on one scale, as is every
// series of one unit, so that two setups' charts compare at a glance. ECharts itself
// is inlined, so the page works offline and in a mail attachment.
package htmlreport

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

//go:embed assets/echarts.min.js
var echartsJS []byte

const (
	width  = "1100px"
	height = "420px"
)

// Run is one run to draw, with the setup it belongs to.
type Run struct {
	Data  *datafile.Run
	Setup string // the setup's title, or the run's title without one
}

// RunOf pairs a run with its setup's name, as compare groups them.
func RunOf(d *datafile.Run) Run {
	r := Run{Data: d, Setup: d.Metadata.Title}
	if d.Metadata.Setup != nil && d.Metadata.Setup.Title != "" {
		r.Setup = d.Metadata.Setup.Title
	}
	return r
}

// chart is what the page needs of a go-echarts chart: its options, complete.
type chart interface {
	Validate()
	JSON() map[string]any
}

// pageTemplate is the page. Data files travel by mail, and every title, setup and
// series name in one reaches the page, so the page is made by html/template, not by
// go-echarts' renderer: go-echarts writes each chart's options into a script
// unescaped (a title of "</script><script>..." would run) and turns any string
// holding "__f__" into code. Here the options are JSON in a data block, escaped so
// that no "<", ">" or "&" appears in it (encoding/json's HTML escaping), read with
// JSON.parse: text stays text.
var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<script>{{.ECharts}}</script>
<style>.container {margin-top:30px; display:flex; justify-content:center; align-items:center;} .item {margin:auto;}</style>
</head>
<body>
{{- range .Charts}}
<div class="container"><div class="item" id="{{.ID}}" style="width:{{.Width}};height:{{.Height}};"></div></div>
<script type="application/json" id="{{.ID}}-option">{{.Option}}</script>
<script>
"use strict";
echarts.init(document.getElementById({{.ID}}), "white", {renderer: "canvas"})
	.setOption(JSON.parse(document.getElementById({{.ID}} + "-option").textContent));
</script>
{{- end}}
</body>
</html>
`))

type pageChart struct {
	ID, Width, Height string
	Option            template.JS
}

// Write renders the page.
func Write(w io.Writer, title string, runs []Run) error {
	if len(runs) == 0 {
		return fmt.Errorf("plot: no runs to draw")
	}
	var cs []named
	sc := scalesOf(runs)
	for i, r := range runs {
		name := fmt.Sprintf("%s: %s (%s)", r.Data.Metadata.Test, r.Setup, runTime(r.Data))
		id := fmt.Sprintf("ts%d", i)
		cs = append(cs, named{id, timeseries(id, name, r.Data, sc)})
		id = fmt.Sprintf("bn%d", i)
		if c := bottleneck(id, name, r.Data); c != nil {
			cs = append(cs, named{id, c})
		}
		id = fmt.Sprintf("qi%d", i)
		if c := insideQdisc(id, name, r.Data); c != nil {
			cs = append(cs, named{id, c})
		}
		for k, c := range others(fmt.Sprintf("ot%d-", i), name, r.Data, sc) {
			cs = append(cs, named{fmt.Sprintf("ot%d-%d", i, k), c})
		}
	}
	if len(runs) > 1 {
		groups := bySetup(runs)
		cs = append(cs, named{"pingcdf", pingCDF(groups)}, named{"pingbox", pingBox(groups)},
			named{"tputbox", throughputBox(groups)}, named{"tputbar", throughputBar(groups)})
	}
	if c := fairness("fairness", runs); c != nil {
		cs = append(cs, named{"fairness", c})
	}
	return writePage(w, title, cs)
}

// named is a chart with its element id.
type named struct {
	id string
	c  chart
}

// writePage renders charts into one page.
func writePage(w io.Writer, title string, cs []named) error {
	data := struct {
		Title   string
		ECharts template.JS
		Charts  []pageChart
	}{Title: title, ECharts: template.JS(string(echartsJS))}
	for _, c := range cs {
		c.c.Validate() // fills in go-echarts' defaults, as its page does
		// json.Marshal escapes <, > and & as \u003c, \u003e and \u0026: the data
		// block cannot be closed from inside a string.
		b, err := json.Marshal(c.c.JSON())
		if err != nil {
			return fmt.Errorf("plot: chart %s: %w", c.id, err)
		}
		data.Charts = append(data.Charts, pageChart{ID: c.id, Width: width, Height: height, Option: template.JS(b)})
	}
	if err := pageTemplate.Execute(w, data); err != nil {
		return fmt.Errorf("plot: write the page: %w", err)
	}
	return nil
}

func runTime(d *datafile.Run) string {
	if d.Metadata.StartTime.IsZero() {
		return "no start time"
	}
	return d.Metadata.StartTime.Format("2006-01-02 15:04:05")
}

func initOpts(id string) charts.GlobalOpts {
	return charts.WithInitializationOpts(opts.Initialization{ChartID: id, Width: width, Height: height})
}

func common(title, subtitle string) []charts.GlobalOpts {
	return []charts.GlobalOpts{
		charts.WithTitleOpts(opts.Title{Title: title, Subtitle: subtitle}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Type: "scroll", Top: "bottom"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithGridOpts(opts.Grid{Top: "70", Bottom: "70"}),
		charts.WithAnimation(false),
	}
}

// maxDrawn bounds the points of one line. A chart is 1100 px wide: past a few
// points a pixel more draw nothing, and each costs the page some 20 bytes and the
// drawing some 250 bytes of memory, so a line on the grid of a long run (or of a
// file that declares one: 6 million points, in a file of 500 bytes) made a page of
// hundreds of MB and took GBs and a minute to draw. 20,000 keeps every point of an
// hour at the 0.2 s step.
const maxDrawn = 20_000

// points are a line's (time since t0, value) pairs, those that can be drawn
// (finite). A line of more than maxDrawn is drawn in maxDrawn/2 runs of
// consecutive points, each by its lowest and highest (in their order): the line's
// envelope, so that no peak and no dip is lost.
func points(t0 float64, ts, vs []float64) []opts.LineData {
	n := 0
	for i := range ts {
		if finite(ts[i]) && finite(vs[i]) {
			n++
		}
	}
	per := 1 // points a run, each drawn when 1
	if n > maxDrawn {
		per = (n + maxDrawn/2 - 1) / (maxDrawn / 2)
	}
	out := make([]opts.LineData, 0, min(n, maxDrawn))
	add := func(i int) { out = append(out, opts.LineData{Value: [2]float64{round(ts[i] - t0), round(vs[i])}}) }
	lo, hi, seen := -1, -1, 0
	for i := range ts {
		if !finite(ts[i]) || !finite(vs[i]) {
			continue // no value there, or one JSON cannot carry
		}
		if per == 1 {
			add(i)
			continue
		}
		if lo < 0 || vs[i] < vs[lo] {
			lo = i
		}
		if hi < 0 || vs[i] > vs[hi] {
			hi = i
		}
		if seen++; seen%per == 0 || seen == n {
			add(min(lo, hi))
			if lo != hi {
				add(max(lo, hi))
			}
			lo, hi = -1, -1
		}
	}
	return out
}

// round keeps the page small: 0.001 of a second, of a ms, of a Mbit/s is plenty.
// Numbers too large for that to matter are kept as they are (x*1000 could overflow).
func round(x float64) float64 {
	if math.Abs(x) > 1e15 {
		return x
	}
	return math.Round(x*1000) / 1000
}

// finite says whether x can be drawn: NaN marks no value, and an infinity (a sum of
// values near float64's limit, from a file made by hand) has no JSON form.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// finiteOnly drops what finite refuses.
func finiteOnly(xs []float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, x := range xs {
		if finite(x) {
			out = append(out, x)
		}
	}
	return out
}

// overTime is a chart of seconds into the run against two value axes, each from 0
// to its max if that is more than 0 (the scale shared by every run of the page),
// else scaled to the chart's own data.
func overTime(id, title, subtitle, y1 string, max1 float64, y2 string, max2 float64) *charts.Line {
	line := charts.NewLine()
	line.SetGlobalOptions(append(common(title, subtitle),
		initOpts(id),
		charts.WithXAxisOpts(opts.XAxis{Name: "s", Type: "value"}),
		charts.WithYAxisOpts(valueAxis(y1, max1)))...)
	line.ExtendYAxis(valueAxis(y2, max2))
	return line
}

func valueAxis(name string, top float64) opts.YAxis {
	a := opts.YAxis{Name: name, Type: "value"}
	if top > 0 {
		a.Min, a.Max = 0, top
	}
	return a
}

// scales are the axis scales every run of a page shares: the ping's, and each
// unit's of the series drawn by unit (others), so that one setup's 5 ms looks
// small beside another's 80 ms (each chart scaled to its own data, the two looked
// alike). Each is the largest value drawn rounded up to 1, 2, 2.5 or 5 times a
// power of ten; 0 where no run draws one (or only values near float64's limit).
type scales struct {
	ping   float64
	byUnit map[string]float64
}

func scalesOf(runs []Run) scales {
	sc := scales{byUnit: map[string]float64{}}
	for _, r := range runs {
		for _, se := range r.Data.Series {
			top := 0.0
			for _, s := range r.Data.Samples[se.Name] {
				if !s.Lost && finite(s.V) {
					top = math.Max(top, s.V)
				}
			}
			switch datafile.Classify(se).Role {
			case datafile.RoleProbe:
				sc.ping = math.Max(sc.ping, top)
			case datafile.RoleOwn, datafile.RoleFlowStat:
				sc.byUnit[se.Units] = math.Max(sc.byUnit[se.Units], top)
			}
		}
	}
	sc.ping = niceCeil(sc.ping)
	for u, v := range sc.byUnit {
		sc.byUnit[u] = niceCeil(v)
	}
	return sc
}

// niceCeil rounds x up to 1, 2, 2.5 or 5 times a power of ten, where ECharts ticks
// an axis evenly; 0 for what has none (0 or less, or past float64's range).
func niceCeil(x float64) float64 {
	if !(x > 0) || !finite(x) {
		return 0
	}
	e := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		// A hair of tolerance: 40.0000001 (a float's noise) stays 40's axis.
		if v := m * e; v >= x*(1-1e-9) {
			if !finite(v) {
				return 0
			}
			return v
		}
	}
	return 0
}

// timeseries draws every flow, the sums and the ping of one run over time, ping on a
// second axis, on the page's ping scale.
func timeseries(id, name string, d *datafile.Run, sc scales) *charts.Line {
	m := d.Metadata
	grid := report.GridOf(m)
	line := overTime(id, "Throughput and ping over time", name, "Mbit/s", 0, "ping (ms)", sc.ping)
	times := make([]float64, grid.N)
	for k := range times {
		times[k] = grid.Time(k)
	}
	for _, g := range report.Throughput(d) {
		if g.Stat == "avg" {
			continue // the sum says it with the flows
		}
		width := 1.0
		if g.Stat == "sum" {
			width = 2.5
		}
		line.AddSeries(g.Name+" (Mbit/s)", points(m.T0, times, g.Values), charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}),
			charts.WithLineStyleOpts(opts.LineStyle{Width: float32(width)}))
	}
	// A rate schedule's rate, dashed, on the throughput's axis: what the flows
	// had to follow.
	for _, se := range d.Series {
		if datafile.Classify(se).Role != datafile.RoleShaper {
			continue
		}
		ts, vs := answered(d, se.Name)
		line.AddSeries(se.Name+" (Mbit/s)", points(m.T0, ts, vs), charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false), Step: "end"}),
			charts.WithLineStyleOpts(opts.LineStyle{Width: 1.5, Type: "dashed"}))
	}
	// Every probe's round trips (ICMP's, a UDP probe's classes) on the latency axis.
	for _, se := range d.Series {
		if !datafile.IsRTT(se) {
			continue
		}
		ts, vs := answered(d, se.Name)
		line.AddSeries(se.Name, points(m.T0, ts, vs), charts.WithLineChartOpts(opts.LineChart{YAxisIndex: 1, ShowSymbol: opts.Bool(false)}))
	}
	return line
}

// answered are a series' samples but its lost probes: their times and values.
func answered(d *datafile.Run, name string) (ts, vs []float64) {
	for _, s := range d.Samples[name] {
		if !s.Lost {
			ts, vs = append(ts, s.T), append(vs, s.V)
		}
	}
	return ts, vs
}

// others draws a run's series of every other kind (request/response latency, UDP
// rates, CPU shares, TCP_INFO), one chart per unit, in the order the run declared
// them, on the page's scale of the unit. They are drawn from their samples: no kind
// needs code of its own here.
func others(idPrefix, name string, d *datafile.Run, sc scales) []*charts.Line {
	var units []string
	byUnits := map[string][]datafile.Series{}
	for _, se := range d.Series {
		if role := datafile.Classify(se).Role; role != datafile.RoleOwn && role != datafile.RoleFlowStat {
			continue // drawn with the throughput, the latency or the bottleneck
		}
		if byUnits[se.Units] == nil {
			units = append(units, se.Units)
		}
		byUnits[se.Units] = append(byUnits[se.Units], se)
	}
	var out []*charts.Line
	for k, u := range units {
		line := overTime(fmt.Sprintf("%s%d", idPrefix, k), "Series in "+u+" over time", name, u, sc.byUnit[u], "", 0)
		for _, se := range byUnits[u] {
			ts, vs := answered(d, se.Name)
			line.AddSeries(se.Name, points(d.Metadata.T0, ts, vs), charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}))
		}
		out = append(out, line)
	}
	return out
}

// bottleneck draws the bottleneck's backlog and BQL inflight (bytes) and its drops
// and ECN marks (per second, second axis), per device; nil when none was recorded.
func bottleneck(id, name string, d *datafile.Run) *charts.Line {
	type acc struct {
		byT map[float64]float64
	}
	gauges, counters := map[string]*acc{}, map[string]*acc{}
	add := func(m map[string]*acc, key string, t, v float64) {
		a := m[key]
		if a == nil {
			a = &acc{byT: map[float64]float64{}}
			m[key] = a
		}
		a.byT[t] += v
	}
	// The summary's classifier: the page and the table count the same series.
	for _, se := range d.Series {
		st, ok := report.BottleneckStat(se)
		ss := d.Samples[se.Name]
		switch {
		case !ok:
		case st.Row == "backlog" || st.Row == "BQL inflight":
			for _, s := range ss {
				add(gauges, st.Host+":"+st.Dev+" "+st.Row+" (bytes)", s.T, s.V)
			}
		case st.Row == "drops" || st.Row == "ECN marks":
			label := st.Host + ":" + st.Dev + " " + st.Row + "/s"
			for i := 1; i < len(ss); i++ {
				if dt := ss[i].T - ss[i-1].T; dt > 0 && ss[i].V >= ss[i-1].V {
					add(counters, label, ss[i].T, (ss[i].V-ss[i-1].V)/dt)
				}
			}
		}
	}
	if len(gauges) == 0 && len(counters) == 0 {
		return nil
	}
	line := overTime(id, "Bottleneck queue over time", name, "bytes", 0, "pkts/s", 0)
	draw := func(m map[string]*acc, axis int) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			var ts, vs []float64
			for t := range m[k].byT {
				ts = append(ts, t)
			}
			sort.Float64s(ts)
			for _, t := range ts {
				vs = append(vs, m[k].byT[t])
			}
			line.AddSeries(k, points(d.Metadata.T0, ts, vs), charts.WithLineChartOpts(opts.LineChart{YAxisIndex: axis, ShowSymbol: opts.Bool(false)}))
		}
	}
	draw(gauges, 0)
	draw(counters, 1)
	return line
}

// insideQdisc draws what the qdiscs say of their own queues: each step's median
// sojourn per qdisc, from the kernel's histograms (ms), and fq_codel's and
// fq_pie's new and old flow lists per device (flows, second axis); nil when the
// run recorded neither.
func insideQdisc(id, name string, d *datafile.Run) *charts.Line {
	sojourn, lists := map[string]map[float64]float64{}, map[string]map[float64]float64{}
	at := func(m map[string]map[float64]float64, k string) map[float64]float64 {
		if m[k] == nil {
			m[k] = map[float64]float64{}
		}
		return m[k]
	}
	for _, se := range d.Series {
		ss := d.Samples[se.Name]
		if datafile.Classify(se).Role == datafile.RoleSojourn {
			byStep := map[float64][]datafile.Sample{}
			for _, s := range ss {
				byStep[s.T] = append(byStep[s.T], s)
			}
			m := at(sojourn, se.Name+" median (ms)")
			for t, buckets := range byStep {
				m[t] = report.HistQuantile(buckets, 0.5)
			}
			continue
		}
		if st, ok := report.FlowList(se); ok {
			m := at(lists, st.Host+":"+st.Dev+" "+st.Row)
			for _, s := range ss {
				m[s.T] += s.V
			}
		}
	}
	if len(sojourn) == 0 && len(lists) == 0 {
		return nil
	}
	line := overTime(id, "Inside the qdiscs over time", name, "ms", 0, "flows", 0)
	draw := func(m map[string]map[float64]float64, axis int) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ts := make([]float64, 0, len(m[k]))
			for t := range m[k] {
				ts = append(ts, t)
			}
			sort.Float64s(ts)
			vs := make([]float64, len(ts))
			for i, t := range ts {
				vs[i] = m[k][t]
			}
			line.AddSeries(k, points(d.Metadata.T0, ts, vs), charts.WithLineChartOpts(opts.LineChart{YAxisIndex: axis, ShowSymbol: opts.Bool(false)}))
		}
	}
	draw(sojourn, 0)
	draw(lists, 1)
	return line
}

// setupGroup is one setup's runs, in the order setups first appear.
type setupGroup struct {
	name string
	runs []*datafile.Run
}

// all gathers values over every run of the group.
func (g setupGroup) all(values func(*datafile.Run) []float64) []float64 {
	var out []float64
	for _, r := range g.runs {
		out = append(out, values(r)...)
	}
	return out
}

func bySetup(runs []Run) []setupGroup {
	var out []setupGroup
	index := map[string]int{}
	for _, r := range runs {
		i, ok := index[r.Setup]
		if !ok {
			out = append(out, setupGroup{name: r.Setup})
			i = len(out) - 1
			index[r.Setup] = i
		}
		out[i].runs = append(out[i].runs, r.Data)
	}
	return out
}

// loadedPing is every ICMP ping reply to a probe sent while the streams ran: one
// distribution a setup's runs share (a UDP probe's classes each have their own).
func loadedPing(d *datafile.Run) []float64 {
	var out []float64
	for _, se := range d.Series {
		if !datafile.Classify(se).ICMP {
			continue
		}
		for _, s := range d.Samples[se.Name] {
			if !s.Lost && report.PingPhaseOf(d.Metadata, s) == report.Loaded {
				out = append(out, s.V)
			}
		}
	}
	return finiteOnly(out)
}

// sumPerStep is the total throughput of each step while the streams ran (over
// every pair: each pair's own sums are left out).
func sumPerStep(d *datafile.Run) []float64 {
	var out []float64
	for _, g := range report.Throughput(d) {
		if g.Stat == "sum" && g.Pair == "" {
			out = append(out, finiteOnly(g.Values)...)
		}
	}
	return out
}

func pingCDF(groups []setupGroup) *charts.Line {
	line := charts.NewLine()
	line.SetGlobalOptions(append(common("Loaded ping, CDF per setup", "every reply while the streams ran, all runs of a setup"),
		initOpts("pingcdf"),
		charts.WithXAxisOpts(opts.XAxis{Name: "ping (ms)", Type: "value"}),
		charts.WithYAxisOpts(opts.YAxis{Name: "fraction of replies", Type: "value", Max: 1}))...)
	for _, g := range groups {
		all := g.all(loadedPing)
		sort.Float64s(all)
		data := make([]opts.LineData, 0, len(all))
		for i, v := range all {
			data = append(data, opts.LineData{Value: []any{round(v), round(float64(i+1) / float64(len(all)))}})
		}
		line.AddSeries(g.name, data, charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false), Step: "end"}))
	}
	return line
}

// box is min, lower quartile, median, upper quartile and max.
func box(xs []float64) []float64 {
	if len(xs) == 0 {
		return nil
	}
	out := []float64{round(report.Percentile(xs, 0)), round(report.Percentile(xs, 25)), round(report.Percentile(xs, 50)),
		round(report.Percentile(xs, 75)), round(report.Percentile(xs, 100))}
	for _, x := range out {
		if !finite(x) {
			return nil // interpolating between huge values overflowed: no box
		}
	}
	return out
}

func boxplot(id, title, subtitle, units string, groups []setupGroup, values func(*datafile.Run) []float64) *charts.BoxPlot {
	bp := charts.NewBoxPlot()
	bp.SetGlobalOptions(append(common(title, subtitle),
		initOpts(id),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "item"}),
		charts.WithYAxisOpts(opts.YAxis{Name: units, Type: "value"}))...)
	var names []string
	var data []opts.BoxPlotData
	for _, g := range groups {
		names = append(names, fmt.Sprintf("%s (n=%d)", g.name, len(g.runs)))
		data = append(data, opts.BoxPlotData{Name: g.name, Value: box(g.all(values))})
	}
	bp.SetXAxis(names).AddSeries(title, data)
	return bp
}

func pingBox(groups []setupGroup) *charts.BoxPlot {
	return boxplot("pingbox", "Loaded ping per setup", "min, quartiles, max of every reply while the streams ran", "ms", groups, loadedPing)
}

func throughputBox(groups []setupGroup) *charts.BoxPlot {
	return boxplot("tputbox", "Total throughput per setup", "min, quartiles, max of the sum over flows, per step", "Mbit/s", groups, sumPerStep)
}

func throughputBar(groups []setupGroup) *charts.Bar {
	bar := charts.NewBar()
	bar.SetGlobalOptions(append(common("Mean total throughput per setup", "mean over steps and runs of the sum over flows"),
		initOpts("tputbar"),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "item"}),
		charts.WithYAxisOpts(opts.YAxis{Name: "Mbit/s", Type: "value"}))...)
	var names []string
	var data []opts.BarData
	for _, g := range groups {
		names = append(names, g.name)
		var mean any // none: no bar
		if m := report.Mean(g.all(sumPerStep)); finite(m) {
			mean = round(m)
		}
		data = append(data, opts.BarData{Name: g.name, Value: mean})
	}
	bar.SetXAxis(names).AddSeries("mean total throughput (Mbit/s)", data)
	return bar
}

// fairness draws each flow's mean throughput in each run (the summary's row of the
// flow), bars grouped by run, and the run's Jain's fairness index over its flows as
// compare computes it (report's "Jain's fairness" metric), on an axis from 0 to 1;
// nil when no run has a flow.
func fairness(id string, runs []Run) *charts.Bar {
	jain, ok := report.LookupMetric("Jain's fairness")
	var names []string // the runs
	var flows []string // the flows, in the order the runs first name them
	means := map[string][]any{}
	jains := make([]opts.LineData, len(runs))
	found := false
	for i, r := range runs {
		names = append(names, fmt.Sprintf("%s (%s)", r.Setup, runTime(r.Data)))
		s := report.Summarize(r.Data)
		for _, row := range s.Rows {
			if !row.Flow || !finite(row.Avg) {
				continue
			}
			if means[row.Name] == nil {
				flows = append(flows, row.Name)
				means[row.Name] = make([]any, len(runs))
			}
			means[row.Name][i] = round(row.Avg)
			found = true
		}
		jains[i] = opts.LineData{Value: "-"} // ECharts' no value
		if ok {
			if j := jain.Value(s); finite(j) {
				jains[i] = opts.LineData{Value: math.Round(j*1e4) / 1e4} // compare's 4 decimals
			}
		}
	}
	if !found {
		return nil
	}
	bar := charts.NewBar()
	bar.SetGlobalOptions(append(common("Per-flow mean throughput and Jain's fairness index", "each flow's mean over the run (its summary row); Jain's index over the run's flows, as compare computes it"),
		initOpts(id),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithYAxisOpts(opts.YAxis{Name: "Mbit/s", Type: "value"}))...)
	bar.ExtendYAxis(opts.YAxis{Name: "Jain's index", Type: "value", Min: 0, Max: 1})
	bar.SetXAxis(names)
	for _, f := range flows {
		data := make([]opts.BarData, len(runs))
		for i, v := range means[f] {
			data[i] = opts.BarData{Value: v}
		}
		bar.AddSeries(f+" (Mbit/s)", data)
	}
	line := charts.NewLine()
	line.AddSeries("Jain's fairness index", jains, charts.WithLineChartOpts(opts.LineChart{YAxisIndex: 1}))
	bar.Overlap(line)
	return bar
}
