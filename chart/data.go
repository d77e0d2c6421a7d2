package chart

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/htmlreport"
	"github.com/bloatbench/bloatbench/report"
)

// The series a figure draws are read off a run the way the summary reads them, so
// that a bar, a box or a line says what the summary's row of it says:
//
//   - throughput is report.Throughput's step grid (each flow by AlignIntervals, the
//     per-direction sums over the flows that have a value at a step); the totals'
//     bars are the summary's rows themselves;
//   - latency is the raw replies of the run's ping series (those of kind ping; a
//     series a file of another tool has on its grid only, flent's "Ping (ms) avg",
//     only when the run has no other), every reply over time, and for the CDF, the
//     totals and the boxes those of probes sent while the streams ran
//     (report.PingPhaseOf), as the summary's loaded row counts them;
//   - a cut keeps what the summary's cut keeps (report.CutWindow, both ends out; a
//     series on the grid only by grid point, both ends in);
//   - the bottleneck's backlog, drops and ECN marks are the series
//     report.BottleneckStat classifies for the summary, per device, counters as the
//     rates of their deltas, added up per sample time as the summary adds them; its
//     sojourn time is the sojourn sampler's series (each step's median), and the
//     delays qdiscs report of themselves (pie's, dualpi2's, cake's tins').

// runData is one run as the figures see it.
type runData struct {
	run   *datafile.Run
	label string
	color int // index into the palette
	grid  report.Grid
	// from and to are the cut's window in the run's clock (CutWindow).
	from, to float64
	cut      *[2]float64
	tput     []report.GridSeries // report.Throughput's, once
}

// throughput is report.Throughput of the run, computed once.
func (r *runData) throughput() []report.GridSeries {
	if r.tput == nil {
		r.tput = report.Throughput(r.run)
		if r.tput == nil {
			r.tput = []report.GridSeries{}
		}
	}
	return r.tput
}

// in says the summary's cut keeps a raw sample taken at t.
func (r *runData) in(t float64) bool { return t > r.from && t < r.to }

// inGrid says the summary's cut keeps grid point k of a series a file has on its
// grid only (flent's cut: from START to END, both included).
func (r *runData) inGrid(k int) bool {
	if r.cut == nil {
		return true
	}
	end := r.cut[1]
	if end <= 0 {
		end += r.run.Metadata.TotalLength
	}
	x := float64(k) * r.grid.Step
	return x >= r.cut[0] && x <= end
}

// xy is a point of a line: seconds into the run (or a value, for a CDF) and a value.
type xy struct{ x, y float64 }

// line is one series of one run in a panel. Points with a NaN y break the line.
type line struct {
	run   int    // index of the run
	name  string // the series', as the panel's style legend names it; "" = the run's own
	pts   []xy
	thin  bool // a flow beside the sums
	style int  // dash index
}

func prepare(runs []*datafile.Run, o Options) []*runData {
	out := make([]*runData, len(runs))
	for i, d := range runs {
		from, to := report.CutWindow(d.Metadata, o.Cut)
		out[i] = &runData{run: d, color: i, grid: report.GridOf(d.Metadata), from: from, to: to, cut: o.Cut}
	}
	labels := labelsOf(runs, o.Labels)
	for i := range out {
		out[i].label = clean(labels[i])
	}
	return out
}

// labelsOf names each run in the legend: the caller's labels, else the setup's title
// as compare and the HTML page group runs (htmlreport.RunOf), told apart, where
// several runs share one, by their start times or, failing those, by number.
func labelsOf(runs []*datafile.Run, given []string) []string {
	out := make([]string, len(runs))
	for i, d := range runs {
		if i < len(given) && given[i] != "" {
			out[i] = given[i]
			continue
		}
		out[i] = htmlreport.RunOf(d).Setup
		if out[i] == "" {
			out[i] = d.Metadata.Test
		}
		if out[i] == "" {
			out[i] = "run"
		}
	}
	same := map[string][]int{}
	for i := range out {
		if i >= len(given) || given[i] == "" {
			same[out[i]] = append(same[out[i]], i)
		}
	}
	for name, idx := range same {
		if len(idx) < 2 {
			continue
		}
		times := map[string]bool{}
		for _, i := range idx {
			times[startOf(runs[i])] = true
		}
		distinct := len(times) == len(idx) && !times[""]
		for n, i := range idx {
			if distinct {
				out[i] = name + " (" + startOf(runs[i]) + ")"
			} else {
				out[i] = name + " #" + strconv.Itoa(n+1)
			}
		}
	}
	return out
}

func startOf(d *datafile.Run) string {
	if d.Metadata.StartTime.IsZero() {
		return ""
	}
	return d.Metadata.StartTime.UTC().Format(time.DateTime)
}

// throughputLines are a direction's lines of a run over time: its sum over every
// flow (over every pair), and with flows each flow thin.
func (r *runData) throughputLines(dir string, flows bool) []line {
	dirOf := map[string]string{}
	for _, se := range r.run.Series {
		if datafile.Classify(se).Role == datafile.RoleFlow {
			dirOf[se.Name] = se.Direction
		}
	}
	var out []line
	for _, g := range r.throughput() {
		switch {
		case g.Stat == "sum" && g.Pair == "" && g.Name == "TCP "+dir+" sum":
			out = append(out, line{name: "", pts: r.onGrid(g.Values)})
		case flows && g.Stat == "" && dirOf[g.Name] == dir:
			out = append(out, line{name: g.Name, pts: r.onGrid(g.Values), thin: true})
		}
	}
	// The sum over the flows last, on top of them.
	sort.SliceStable(out, func(i, j int) bool { return out[i].thin && !out[j].thin })
	return out
}

// onGrid are a grid series' points, seconds into the run.
func (r *runData) onGrid(vs []float64) []xy {
	out := make([]xy, len(vs))
	for k, v := range vs {
		out[k] = xy{float64(k) * r.grid.Step, v}
	}
	return out
}

// latencySeries are the run's ping series the figures draw: those of its replies;
// those it has on its grid only (flent's average over its pings) when it has none
// of replies.
func (r *runData) latencySeries() []datafile.Series {
	var raw, gridOnly []datafile.Series
	for _, se := range r.run.Series {
		if !datafile.Classify(se).ICMP {
			continue // flent's layouts draw its ping series
		}
		if r.run.GridCut[se.Name] {
			gridOnly = append(gridOnly, se)
		} else {
			raw = append(raw, se)
		}
	}
	if len(raw) > 0 {
		return raw
	}
	return gridOnly
}

// latencyLines are every reply of each ping series over time, by arrival.
func (r *runData) latencyLines() []line {
	var out []line
	for _, se := range r.latencySeries() {
		var pts []xy
		for _, s := range r.run.Samples[se.Name] {
			if !s.Lost {
				pts = append(pts, xy{s.T - r.run.Metadata.T0, s.V})
			}
		}
		sort.SliceStable(pts, func(i, j int) bool { return pts[i].x < pts[j].x })
		out = append(out, line{name: se.Name, pts: pts})
	}
	return out
}

// loadedLatency is, per ping series, the replies the summary's loaded row counts:
// to probes sent while the streams ran, within the cut.
func (r *runData) loadedLatency() map[string][]float64 {
	m := r.run.Metadata
	out := map[string][]float64{}
	for _, se := range r.latencySeries() {
		xs := []float64{}
		for _, x := range r.run.Samples[se.Name] {
			keep, phase := r.in(x.T), x
			if r.run.GridCut[se.Name] {
				// On the grid only: cut by grid point, and its points are times,
				// not replies to probes sent earlier (as the summary takes them).
				keep = r.inGrid(x.Seq)
				phase = datafile.Sample{T: x.T, Lost: true}
			}
			if !x.Lost && keep && report.PingPhaseOf(m, phase) == report.Loaded {
				xs = append(xs, x.V)
			}
		}
		out[se.Name] = xs
	}
	return out
}

// pooledLatency is every loaded reply of the run, over its ping series: with one
// series (or a series per pair), the values of the summary's loaded row.
func (r *runData) pooledLatency() []float64 {
	var out []float64
	loaded := r.loadedLatency()
	for _, se := range r.latencySeries() {
		out = append(out, loaded[se.Name]...)
	}
	return finiteOnly(out)
}

// stepValues are the values at each step the summary's row of a throughput sum
// counts: the grid points the cut keeps that have a value.
func (r *runData) stepValues(name string) []float64 {
	for _, g := range r.throughput() {
		if g.Name != name {
			continue
		}
		var out []float64
		for k, v := range g.Values {
			keep := r.in(r.grid.Time(k))
			if r.run.GridCut[g.Name] {
				keep = r.inGrid(k)
			}
			if keep && !math.IsNaN(v) {
				out = append(out, v)
			}
		}
		return finiteOnly(out)
	}
	return nil
}

// summaryAvg is the average the summary prints for a row of the run.
func (r *runData) summaryAvg(s report.Summary, name string) float64 {
	for _, row := range s.Rows {
		if row.Name == name {
			return row.Avg
		}
	}
	return math.NaN()
}

// The bottleneck's panels.
const (
	qBacklog = "backlog"
	qDrops   = "drops"
	qMarks   = "ECN marks"
	qSojourn = "sojourn"
	qFlows   = "flows"
)

// sojournSeries names a sojourn series' line: its device, the qdisc (its parent,
// where not the root) and the statistic, the step's median.
func sojournSeries(se datafile.Series) (name string, ok bool) {
	// Each step's histogram of the times packets spent in a qdisc, a sample a
	// bucket (V its time in ms, N its packets); a line shows each step's median.
	if datafile.Classify(se).Role != datafile.RoleSojourn {
		return "", false
	}
	name = devOf(se)
	if se.Stat != "" && se.Stat != "root" {
		name += " " + se.Stat
	}
	return name + " median", true
}

// sojournStat says whether a qdisc statistic is a queueing delay, and names it:
// pie's and fq_pie's current delay, dualpi2's classic and L4S queue delays, and each
// cake tin's average delay. All are in microseconds (tcstats.Units). The summary has
// no row of them.
func sojournStat(se datafile.Series) (name string, ok bool) {
	where, field, f, ok := qdiscField(se)
	if !ok {
		return "", false
	}
	switch f {
	case "delay", "delay_c", "delay_l", "avg_delay_us":
		if where == "root" {
			return field, true
		}
		return where + " " + field, true
	}
	return "", false
}

// qdiscField splits a qdisc statistic into where it was read ("root", "1:1"),
// its field as recorded ("delay_c", "tins.0.avg_delay_us") and the field's last
// part; ok is false for other series.
func qdiscField(se datafile.Series) (where, field, last string, ok bool) {
	if datafile.Classify(se).Role != datafile.RoleQdisc {
		return "", "", "", false
	}
	stat := se.Stat
	if se.Dev == "" || stat == "" {
		// "qdisc HOST:DEV WHERE FIELD", as files before those fields name it.
		parts := strings.SplitN(se.Name, " ", 3)
		if len(parts) < 3 {
			return "", "", "", false
		}
		stat = parts[2]
	}
	where, field, _ = strings.Cut(stat, " ")
	last = field
	if i := strings.LastIndexByte(last, '.'); i >= 0 {
		last = last[i+1:]
	}
	return where, field, last, true
}

// devOf is the host:dev a bottleneck series was sampled on.
func devOf(se datafile.Series) string {
	if se.Dev != "" {
		return se.Host + ":" + se.Dev
	}
	_, rest, _ := strings.Cut(se.Name, " ")
	hostDev, _, _ := strings.Cut(rest, " ")
	return hostDev
}

// qdiscLines are the run's lines of one bottleneck panel, one per device (and, for
// the sojourn, per statistic), in the order of their names.
func (r *runData) qdiscLines(panel string) []line {
	t0 := r.run.Metadata.T0
	type acc struct {
		byT     map[float64]float64
		counter bool
	}
	byName := map[string]*acc{}
	get := func(name string, counter bool) *acc {
		a := byName[name]
		if a == nil {
			a = &acc{byT: map[float64]float64{}, counter: counter}
			byName[name] = a
		}
		return a
	}
	for _, se := range r.run.Series {
		ss := r.run.Samples[se.Name]
		if panel == qFlows {
			// Every child's lists together: a device's flows, as its qdiscs
			// (mq's children) hold them.
			if st, ok := report.FlowList(se); ok {
				a := get(st.Host+":"+st.Dev+" "+st.Row, false)
				for _, s := range ss {
					a.byT[s.T] += s.V
				}
			}
			continue
		}
		if panel == qSojourn {
			if stat, ok := sojournStat(se); ok {
				a := get(devOf(se)+" "+stat, false)
				for _, s := range ss {
					a.byT[s.T] += s.V / 1e3 // us to ms
				}
			}
			if name, ok := sojournSeries(se); ok {
				a := get(name, false)
				byStep := map[float64][]datafile.Sample{}
				for _, s := range ss {
					byStep[s.T] = append(byStep[s.T], s)
				}
				for t, buckets := range byStep {
					a.byT[t] = report.HistQuantile(buckets, 0.5) // ms already
				}
			}
			continue
		}
		st, ok := report.BottleneckStat(se)
		if !ok || st.Row != panel {
			continue
		}
		a := get(st.Host+":"+st.Dev, st.Counter)
		if !st.Counter {
			for _, s := range ss {
				a.byT[s.T] += s.V
			}
			continue
		}
		// As the summary's sumRates: a rate over each interval, a counter that
		// went down (reset) skipped, added up per sample time.
		for i := 1; i < len(ss); i++ {
			if dt, dv := ss[i].T-ss[i-1].T, ss[i].V-ss[i-1].V; dt > 0 && dv >= 0 {
				a.byT[ss[i].T] += dv / dt
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []line
	for _, n := range names {
		a := byName[n]
		ts := make([]float64, 0, len(a.byT))
		for t := range a.byT {
			ts = append(ts, t)
		}
		sort.Float64s(ts)
		pts := make([]xy, len(ts))
		for i, t := range ts {
			pts[i] = xy{t - t0, a.byT[t]}
		}
		out = append(out, line{name: n, pts: pts})
	}
	return out
}

// finiteOnly drops NaN and the infinities (a sum of values near float64's limit).
func finiteOnly(xs []float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, x := range xs {
		if finite(x) {
			out = append(out, x)
		}
	}
	return out
}

// drawable bounds what is drawn: beyond it, no axis can be scaled or ticked
// (a sum of values near float64's limit, from a file made by hand).
const drawable = 1e300

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) && math.Abs(x) <= drawable }
