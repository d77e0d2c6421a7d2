package htmlreport

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
)

// Trend is one metric of one test and setup across batches: per batch the median of
// its runs and their spread, and the baseline batch's band (the range of its runs).
type Trend struct {
	Metric, Units string
	// Medians, Lo and Hi are per batch, in the order of History.Batches; NaN where a
	// batch has no run of the test and setup.
	Medians, Lo, Hi []float64
	// BaseLo and BaseHi bound the baseline's runs; NaN without a baseline.
	BaseLo, BaseHi float64
}

// History is one chart: a test and setup over batches.
type History struct {
	Test, Setup string
	Batches     []string // the x axis: each batch's name
	Trends      []Trend  // on the chart's left axis those in ms, on the right the others
}

// WriteHistory renders one page with a chart per test and setup.
func WriteHistory(w io.Writer, title string, hs []History) error {
	if len(hs) == 0 {
		return fmt.Errorf("history: no batch has a complete run")
	}
	var cs []named
	for i, h := range hs {
		id := fmt.Sprintf("hist%d", i)
		cs = append(cs, named{id, historyChart(id, h)})
	}
	return writePage(w, title, cs)
}

func historyChart(id string, h History) *charts.Line {
	line := charts.NewLine()
	left, right := "ms", ""
	for _, t := range h.Trends {
		if t.Units != "ms" && right == "" {
			right = t.Units
		}
	}
	line.SetGlobalOptions(append(common(h.Test+": "+h.Setup, "median of each batch's runs (thin lines: their range); dashed: the baseline's range"),
		initOpts(id),
		charts.WithXAxisOpts(opts.XAxis{Type: "category"}),
		charts.WithYAxisOpts(opts.YAxis{Name: left, Type: "value"}))...)
	line.ExtendYAxis(opts.YAxis{Name: right, Type: "value"})
	line.SetXAxis(h.Batches)
	for _, t := range h.Trends {
		axis := 0
		if t.Units != "ms" {
			axis = 1
		}
		name := t.Metric
		// A metric named for a flent row may carry its units already: "Ping (ms) ICMP".
		if t.Units != "" && !strings.Contains(name, "("+t.Units+")") {
			name += " (" + t.Units + ")"
		}
		line.AddSeries(name, category(t.Medians), charts.WithLineChartOpts(opts.LineChart{YAxisIndex: axis, ShowSymbol: opts.Bool(true)}))
		line.AddSeries(name+" low", category(t.Lo), charts.WithLineChartOpts(opts.LineChart{YAxisIndex: axis}),
			charts.WithLineStyleOpts(opts.LineStyle{Width: 1, Opacity: opts.Float(0.4)}))
		line.AddSeries(name+" high", category(t.Hi), charts.WithLineChartOpts(opts.LineChart{YAxisIndex: axis}),
			charts.WithLineStyleOpts(opts.LineStyle{Width: 1, Opacity: opts.Float(0.4)}))
		if finite(t.BaseLo) && finite(t.BaseHi) {
			lo, hi := make([]float64, len(h.Batches)), make([]float64, len(h.Batches))
			for i := range lo {
				lo[i], hi[i] = t.BaseLo, t.BaseHi
			}
			for _, b := range []struct {
				what string
				vs   []float64
			}{{"baseline low", lo}, {"baseline high", hi}} {
				line.AddSeries(name+" "+b.what, category(b.vs), charts.WithLineChartOpts(opts.LineChart{YAxisIndex: axis}),
					charts.WithLineStyleOpts(opts.LineStyle{Type: "dashed", Width: 1}))
			}
		}
	}
	return line
}

// category is one value per batch; a batch without one leaves a gap.
func category(vs []float64) []opts.LineData {
	out := make([]opts.LineData, len(vs))
	for i, v := range vs {
		if finite(v) {
			out[i] = opts.LineData{Value: round(v)}
		} else {
			out[i] = opts.LineData{Value: "-"} // ECharts' gap
		}
	}
	return out
}

// Spread is the median, minimum and maximum of xs; NaN for none.
func Spread(xs []float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	lo, hi = s[0], s[len(s)-1]
	if len(s)%2 == 1 {
		return s[len(s)/2], lo, hi
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, lo, hi
}
