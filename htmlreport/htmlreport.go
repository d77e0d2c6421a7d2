// Package htmlreport draws runs as one self-contained HTML page of ECharts charts
// (through go-echarts): per run, every flow, the sum and the ping over time, and the
// bottleneck's queue; across runs, the ping CDF, box plots of ping and throughput per
// setup, and the mean throughput per setup. ECharts itself is inlined, so the page
// works offline and in a mail attachment.
package htmlreport

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/components"
	"github.com/go-echarts/go-echarts/v2/opts"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

//go:embed assets/echarts.min.js
var echartsJS []byte

// inlineHost stands in for go-echarts' assets host; Write swaps the script tag that
// names it for the script itself.
const inlineHost = "bloatbench-inline/"

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

// Write renders the page.
func Write(w io.Writer, title string, runs []Run) error {
	if len(runs) == 0 {
		return fmt.Errorf("plot: no runs to draw")
	}
	page := components.NewPage()
	page.PageTitle = title
	page.SetAssetsHost(inlineHost)
	for i, r := range runs {
		name := fmt.Sprintf("%s: %s (%s)", r.Data.Metadata.Test, r.Setup, runTime(r.Data))
		page.AddCharts(timeseries(fmt.Sprintf("ts%d", i), name, r.Data))
		if c := bottleneck(fmt.Sprintf("bn%d", i), name, r.Data); c != nil {
			page.AddCharts(c)
		}
	}
	if len(runs) > 1 {
		groups := bySetup(runs)
		page.AddCharts(pingCDF(groups), pingBox(groups), throughputBox(groups), throughputBar(groups))
	}
	var b bytes.Buffer
	if err := page.Render(&b); err != nil {
		return fmt.Errorf("render the report: %w", err)
	}
	tag := fmt.Sprintf(`<script src="%s%s"></script>`, inlineHost, opts.EchartsJS)
	html := b.String()
	if !strings.Contains(html, tag) {
		return fmt.Errorf("render the report: go-echarts no longer writes %s; the page would need the network", tag)
	}
	html = strings.Replace(html, tag, "<script>\n"+string(echartsJS)+"\n</script>", 1)
	_, err := io.WriteString(w, html)
	return err
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

func points(t0 float64, ts, vs []float64) []opts.LineData {
	out := make([]opts.LineData, 0, len(ts))
	for i := range ts {
		if math.IsNaN(vs[i]) {
			continue
		}
		out = append(out, opts.LineData{Value: []any{round(ts[i] - t0), round(vs[i])}})
	}
	return out
}

// round keeps the page small: 0.001 of a second, of a ms, of a Mbit/s is plenty.
func round(x float64) float64 { return math.Round(x*1000) / 1000 }

// overTime is a chart of seconds into the run against two value axes.
func overTime(id, title, subtitle, y1, y2 string) *charts.Line {
	line := charts.NewLine()
	line.SetGlobalOptions(append(common(title, subtitle),
		initOpts(id),
		charts.WithXAxisOpts(opts.XAxis{Name: "s", Type: "value"}),
		charts.WithYAxisOpts(opts.YAxis{Name: y1, Type: "value"}))...)
	line.ExtendYAxis(opts.YAxis{Name: y2, Type: "value"})
	return line
}

// timeseries draws every flow, the sums and the ping of one run over time, ping on a
// second axis.
func timeseries(id, name string, d *datafile.Run) *charts.Line {
	m := d.Metadata
	grid := report.GridOf(m)
	line := overTime(id, "Throughput and ping over time", name, "Mbit/s", "ping (ms)")
	times := make([]float64, grid.N)
	for k := range times {
		times[k] = grid.Time(k)
	}
	for _, g := range report.Throughput(d) {
		if strings.HasSuffix(g.Name, " avg") {
			continue // the sum says it with the flows
		}
		width := 1.0
		if strings.HasSuffix(g.Name, " sum") {
			width = 2.5
		}
		line.AddSeries(g.Name+" (Mbit/s)", points(m.T0, times, g.Values), charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}),
			charts.WithLineStyleOpts(opts.LineStyle{Width: float32(width)}))
	}
	for _, se := range d.Series {
		if se.Kind != datafile.KindPing {
			continue
		}
		var ts, vs []float64
		for _, s := range d.Samples[se.Name] {
			if !s.Lost {
				ts, vs = append(ts, s.T), append(vs, s.V)
			}
		}
		line.AddSeries(se.Name, points(m.T0, ts, vs), charts.WithLineChartOpts(opts.LineChart{YAxisIndex: 1, ShowSymbol: opts.Bool(false)}))
	}
	return line
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
	for _, se := range d.Series {
		kind, rest, _ := strings.Cut(se.Name, " ")
		dev, stat, _ := strings.Cut(rest, " ")
		ss := d.Samples[se.Name]
		switch {
		case kind == datafile.KindQdisc && stat == "root backlog":
			for _, s := range ss {
				add(gauges, dev+" backlog (bytes)", s.T, s.V)
			}
		case kind == datafile.KindBQL && strings.HasSuffix(stat, " inflight"):
			for _, s := range ss {
				add(gauges, dev+" BQL inflight (bytes)", s.T, s.V)
			}
		case kind == datafile.KindQdisc && (stat == "root drops" || strings.HasSuffix(stat, "ecn_mark")) && !strings.Contains(stat, "tin"):
			label := dev + " drops/s"
			if stat != "root drops" {
				label = dev + " ECN marks/s"
			}
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
	line := overTime(id, "Bottleneck queue over time", name, "bytes", "pkts/s")
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

// loadedPing is every ping reply received while the streams ran.
func loadedPing(d *datafile.Run) []float64 {
	m := d.Metadata
	var out []float64
	for _, se := range d.Series {
		if se.Kind != datafile.KindPing {
			continue
		}
		for _, s := range d.Samples[se.Name] {
			if !s.Lost && s.T >= m.T0+m.Delay && s.T <= m.T0+m.Delay+m.Length {
				out = append(out, s.V)
			}
		}
	}
	return out
}

// sumPerStep is the total throughput of each step while the streams ran.
func sumPerStep(d *datafile.Run) []float64 {
	var out []float64
	for _, g := range report.Throughput(d) {
		if strings.HasSuffix(g.Name, " sum") {
			for _, v := range g.Values {
				if !math.IsNaN(v) {
					out = append(out, v)
				}
			}
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
	return []float64{round(report.Percentile(xs, 0)), round(report.Percentile(xs, 25)), round(report.Percentile(xs, 50)),
		round(report.Percentile(xs, 75)), round(report.Percentile(xs, 100))}
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
		data = append(data, opts.BarData{Name: g.name, Value: round(report.Mean(g.all(sumPerStep)))})
	}
	bar.SetXAxis(names).AddSeries("mean total throughput (Mbit/s)", data)
	return bar
}
