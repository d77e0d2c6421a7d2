package chart

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/bloatbench/bloatbench/report"
)

// heading is a figure's title and subtitle: the runs' tests and what the layout
// shows; the hosts, and the cut.
func heading(rs []*runData, o Options, what string) (title, subtitle string) {
	var tests []string
	seen := map[string]bool{}
	for _, r := range rs {
		if t := r.run.Metadata.Test; t != "" && !seen[t] {
			seen[t] = true
			tests = append(tests, clean(t))
		}
	}
	title = what
	if len(tests) > 0 {
		title = strings.Join(tests, ", ") + ": " + what
	}
	var parts []string
	if h := hostsOf(rs); h != "" {
		parts = append(parts, h)
	}
	if c := o.Cut; c != nil {
		end := num(c[1]) + " s"
		if c[1] <= 0 {
			end = num(-c[1]) + " s before the end"
		}
		parts = append(parts, fmt.Sprintf("cut: from %s s to %s", num(c[0]), end))
	}
	if len(rs) > 1 {
		parts = append(parts, fmt.Sprintf("%d runs", len(rs)))
	}
	return title, strings.Join(parts, "; ")
}

// hostsOf names the runs' hosts by role: "client: a; server: b, c".
func hostsOf(rs []*runData) string {
	var roles []string
	names := map[string][]string{}
	seen := map[string]bool{}
	for _, r := range rs {
		for _, h := range r.run.Metadata.Hosts {
			name := h.Name
			if name == "" {
				name = h.Hostname
			}
			if name == "" || seen[h.Role+"\x00"+name] {
				continue
			}
			seen[h.Role+"\x00"+name] = true
			if names[h.Role] == nil {
				roles = append(roles, h.Role)
			}
			names[h.Role] = append(names[h.Role], clean(name))
		}
	}
	var parts []string
	for _, role := range roles {
		ns := names[role]
		if len(ns) > 4 {
			ns = append(ns[:4], fmt.Sprintf("and %d more", len(ns)-4))
		}
		label := clean(role)
		if label == "" {
			label = "host"
		}
		parts = append(parts, label+": "+strings.Join(ns, ", "))
	}
	return strings.Join(parts, "; ")
}

func num(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }

// window is the span of seconds into the runs a figure over time shows: the
// longest run, or the cut of it.
func window(rs []*runData, o Options) (lo, hi float64) {
	for _, r := range rs {
		hi = math.Max(hi, r.run.Metadata.TotalLength)
	}
	if o.Cut != nil {
		lo = o.Cut[0]
		if o.Cut[1] > 0 {
			hi = o.Cut[1]
		} else {
			hi += o.Cut[1]
		}
	}
	if !(hi > lo) || !finite(hi) {
		hi = lo + 1
	}
	return lo, hi
}

// styleIndex gives each series name its dash, in the order first seen.
type styleIndex struct {
	names []string
	index map[string]int
}

func (s *styleIndex) of(name string) int {
	if s.index == nil {
		s.index = map[string]int{}
	}
	i, ok := s.index[name]
	if !ok {
		i = len(s.names)
		s.index[name] = i
		s.names = append(s.names, name)
	}
	return i
}

// legendNames are the names of a panel's dashes, where it has more than one.
func (s *styleIndex) legendNames() []string {
	if len(s.names) < 2 {
		return nil
	}
	out := make([]string, len(s.names))
	for i, n := range s.names {
		out[i] = clean(n)
	}
	return out
}

func hasPoint(ls []line) bool {
	for _, l := range ls {
		for _, q := range l.pts {
			if finite(q.y) {
				return true
			}
		}
	}
	return false
}

// timePanel is a panel of lines over the window, scaled to the top percentile of
// the values in it; fixedMax, if more than 0, is its top.
func timePanel(id, ylabel string, rs []*runData, lines []line, styles *styleIndex, lo, hi, top, fixedMax float64) *panel {
	pa := newPanel(id)
	var ys []float64
	for _, l := range lines {
		pa.addLine(l, rs)
		for _, q := range l.pts {
			if q.x >= lo && q.x <= hi {
				ys = append(ys, q.y)
			}
		}
	}
	pa.p.Y.Min, pa.p.Y.Max = valueRange(ys, top)
	if fixedMax > 0 {
		pa.p.Y.Min, pa.p.Y.Max = 0, fixedMax
	}
	pa.p.X.Min, pa.p.X.Max = lo, hi
	pa.p.Y.Label.Text = ylabel
	if styles != nil {
		pa.styles = styles.legendNames()
	}
	return pa
}

// scaledTop is the percentile all_scaled's axes end at (valueRange).
const scaledTop = 99

// overTime is all_scaled (top scaledTop) and all (top 100): the download and upload sums
// (and with Flows each flow) and every ping reply, over time, in stacked panels.
func overTime(rs []*runData, o Options, top float64) (*figure, error) {
	lo, hi := window(rs, o)
	f := &figure{}
	what := "download, upload and latency"
	if top < 100 {
		what += " (scaled)"
	}
	f.title, f.subtitle = heading(rs, o, what)
	for _, dir := range []string{"download", "upload"} {
		var lines []line
		for i, r := range rs {
			for _, l := range r.throughputLines(dir, o.Flows) {
				l.run = i
				lines = append(lines, l)
			}
		}
		if !hasPoint(lines) {
			continue
		}
		label := strings.ToUpper(dir[:1]) + dir[1:] + " (Mbit/s)"
		f.panels = append(f.panels, timePanel(dir, label, rs, lines, nil, lo, hi, top, 0))
	}
	var lines []line
	var styles styleIndex
	for i, r := range rs {
		for _, l := range r.latencyLines() {
			l.run, l.style = i, styles.of(l.name)
			lines = append(lines, l)
		}
	}
	if hasPoint(lines) {
		f.panels = append(f.panels, timePanel("latency", "Latency (ms)", rs, lines, &styles, lo, hi, top, o.LatencyMax))
	}
	shareTimeAxis(f.panels)
	return f, nil
}

// shareTimeAxis labels the time axis of the lowest of stacked panels only.
func shareTimeAxis(ps []*panel) {
	for i, pa := range ps {
		if i < len(ps)-1 {
			pa.add(reserveX{ticker: pa.p.X.Tick.Marker, sty: pa.p.X.Tick.Label})
			pa.p.X.Tick.Marker = blankTicks{pa.p.X.Tick.Marker}
			continue
		}
		pa.p.X.Label.Text = "Time (s)"
	}
}

// pingCDF is every run's latency under load as a CDF, a line per ping series.
func pingCDF(rs []*runData, o Options) (*figure, error) {
	f := &figure{}
	f.title, f.subtitle = heading(rs, o, "latency under load, CDF")
	pa := newPanel("cdf")
	var styles styleIndex
	vmin, vmax := math.Inf(1), math.Inf(-1)
	found := false
	for i, r := range rs {
		loaded := r.loadedLatency()
		for _, se := range r.latencySeries() {
			vs := finiteOnly(loaded[se.Name])
			if o.LogLatency {
				vs = positive(vs)
			}
			if len(vs) == 0 {
				continue
			}
			sort.Float64s(vs)
			vmin, vmax = math.Min(vmin, vs[0]), math.Max(vmax, vs[len(vs)-1])
			pa.addCDF(i, styles.of(se.Name), vs, rs)
			found = true
		}
	}
	if !found {
		return f, nil
	}
	p := pa.p
	p.X.Label.Text = "Latency (ms)"
	p.Y.Label.Text = "Cumulative probability"
	p.Y.Min, p.Y.Max = 0, 1
	if o.LogLatency {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logTicks{}
		p.X.Min = math.Max(vmin*0.9, 1e-3)
		p.X.Max = math.Max(vmax*1.1, p.X.Min*10)
		p.X.Label.Text += ", log scale"
	} else {
		p.X.Min, p.X.Max = 0, vmax*1.02
		if !(p.X.Max > 0) {
			p.X.Max = 1
		}
	}
	if o.LatencyMax > 0 {
		p.X.Max = math.Max(o.LatencyMax, p.X.Min*1.01)
	}
	pa.styles = styles.legendNames()
	f.panels = []*panel{pa}
	return f, nil
}

func positive(xs []float64) []float64 {
	out := xs[:0:0]
	for _, x := range xs {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

// addCDF draws sorted values as their empirical CDF: a step up of 1/n at each.
// Many values are drawn at maxDrawn of their quantiles.
func (pa *panel) addCDF(run, style int, sorted []float64, rs []*runData) {
	n := len(sorted)
	idx := make([]int, 0, min(n, maxDrawn))
	if n <= maxDrawn {
		for i := range n {
			idx = append(idx, i)
		}
	} else {
		for k := range maxDrawn {
			idx = append(idx, int(math.Round(float64(k)*float64(n-1)/float64(maxDrawn-1))))
		}
	}
	// A step function: along at the fraction below a value, up at it.
	pts := []xy{{sorted[0], 0}}
	for _, i := range idx {
		if len(pts) > 0 {
			pts = append(pts, xy{sorted[i], pts[len(pts)-1].y})
		}
		pts = append(pts, xy{sorted[i], float64(i+1) / float64(n)})
	}
	pa.addLine(line{run: run, style: style, pts: pts}, rs)
}

// sums are the throughput rows totals and box_totals show, with their category.
var sums = []struct{ row, category string }{
	{"TCP download sum", "Download"},
	{"TCP upload sum", "Upload"},
}

// sideBySide sets a figure's panels side by side, weighted by their categories.
func sideBySide(f *figure, ps []*panel, cats []int) {
	f.panels, f.sideBySide = ps, true
	for _, c := range cats {
		f.weights = append(f.weights, float64(c)+0.6)
	}
}

// panelWidths estimates the plotting width of each panel side by side, to size bars
// and boxes by.
func panelWidths(width vg.Length, cats []int) []vg.Length {
	total := 0.0
	for _, c := range cats {
		total += float64(c) + 0.6
	}
	avail := width - vg.Points(2*margin) - vg.Points(24)*vg.Length(len(cats)-1)
	out := make([]vg.Length, len(cats))
	for i, c := range cats {
		out[i] = avail*vg.Length((float64(c)+0.6)/total) - vg.Points(70)
	}
	return out
}

// totals is flent's totals as bars per run: the summary's average of the download
// and upload sums (its rows, cut as it cuts them) and the mean latency under load
// (the replies of its loaded row), on an axis of their own.
func totals(rs []*runData, o Options, width vg.Length) (*figure, error) {
	f := &figure{}
	f.title, f.subtitle = heading(rs, o, "mean throughput and latency under load")
	var cats []string
	tput := make([][]float64, len(rs))
	ping := make([][]float64, len(rs))
	sumsOf := make([]report.Summary, len(rs))
	for i, r := range rs {
		sumsOf[i] = report.SummarizeWith(r.run, report.Options{Cut: o.Cut})
		ping[i] = []float64{report.Mean(r.pooledLatency())}
	}
	for _, s := range sums {
		vals := make([]float64, len(rs))
		found := false
		for i, r := range rs {
			vals[i] = r.summaryAvg(sumsOf[i], s.row)
			found = found || finite(vals[i])
		}
		if !found {
			continue
		}
		cats = append(cats, s.category)
		for i := range rs {
			tput[i] = append(tput[i], vals[i])
		}
	}
	var ps []*panel
	var ncats []int
	if len(cats) > 0 {
		ps, ncats = append(ps, nil), append(ncats, len(cats))
	}
	if anyFinite(ping) {
		ps, ncats = append(ps, nil), append(ncats, 1)
	}
	if len(ps) == 0 {
		return f, nil
	}
	widths := panelWidths(width, ncats)
	k := 0
	if len(cats) > 0 {
		ps[k] = barPanel("throughput", "Mean throughput (Mbit/s)", cats, tput, rs, widths[k], 0)
		k++
	}
	if anyFinite(ping) {
		ps[k] = barPanel("latency", "Mean latency under load (ms)", []string{"Latency"}, ping, rs, widths[k], o.LatencyMax)
	}
	sideBySide(f, ps, ncats)
	return f, nil
}

func anyFinite(vs [][]float64) bool {
	for _, row := range vs {
		for _, v := range row {
			if finite(v) {
				return true
			}
		}
	}
	return false
}

// boxTotals is flent's box_totals: per run, a box of the download and upload sums'
// values per step (those the summary's rows count) and of the replies under load.
func boxTotals(rs []*runData, o Options, width vg.Length) (*figure, error) {
	f := &figure{}
	f.title, f.subtitle = heading(rs, o, "throughput per step and latency under load")
	var cats []string
	tput := make([][][]float64, len(rs)) // [run][category] values
	ping := make([][][]float64, len(rs))
	anyPing := false
	for i, r := range rs {
		ping[i] = [][]float64{r.pooledLatency()}
		anyPing = anyPing || len(ping[i][0]) > 0
	}
	for _, s := range sums {
		vals := make([][]float64, len(rs))
		found := false
		for i, r := range rs {
			vals[i] = r.stepValues(s.row)
			found = found || len(vals[i]) > 0
		}
		if !found {
			continue
		}
		cats = append(cats, s.category)
		for i := range rs {
			tput[i] = append(tput[i], vals[i])
		}
	}
	var ncats []int
	if len(cats) > 0 {
		ncats = append(ncats, len(cats))
	}
	if anyPing {
		ncats = append(ncats, 1)
	}
	if len(ncats) == 0 {
		return f, nil
	}
	widths := panelWidths(width, ncats)
	var ps []*panel
	if len(cats) > 0 {
		ps = append(ps, boxPanel("throughput", "Throughput per step (Mbit/s)", cats, tput, rs, widths[0], 0))
	}
	if anyPing {
		ps = append(ps, boxPanel("latency", "Latency under load (ms)", []string{"Latency"}, ping, rs, widths[len(widths)-1], o.LatencyMax))
	}
	sideBySide(f, ps, ncats)
	return f, nil
}

// qdiscPanels are the bottleneck's panels, in order.
var qdiscPanels = []struct{ id, label string }{
	{qBacklog, "Backlog (bytes)"},
	{qDrops, "Drops (pkts/s)"},
	{qMarks, "ECN marks (pkts/s)"},
	{qSojourn, "Sojourn (ms)"},
	{qFlows, "Flow lists (flows)"},
}

// qdiscFigure is the bottleneck over time: a panel per statistic any run recorded,
// a line per run and device (and sojourn statistic).
func qdiscFigure(rs []*runData, o Options) (*figure, error) {
	lo, hi := window(rs, o)
	f := &figure{}
	f.title, f.subtitle = heading(rs, o, "bottleneck queue")
	for _, q := range qdiscPanels {
		var lines []line
		var styles styleIndex
		for i, r := range rs {
			for _, l := range r.qdiscLines(q.id) {
				l.run, l.style = i, styles.of(l.name)
				lines = append(lines, l)
			}
		}
		if !hasPoint(lines) {
			continue
		}
		id := q.id
		if id == qMarks {
			id = "marks"
		}
		f.panels = append(f.panels, timePanel(id, q.label, rs, lines, &styles, lo, hi, 100, 0))
	}
	shareTimeAxis(f.panels)
	return f, nil
}
