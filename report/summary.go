// Package report turns data files into what people read: summary tables in the
// layout of flent's (the one kernel cover letters carry), as text, markdown, CSV or
// JSON. It reads data files only and never talks to hosts.
package report

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/bloatbench/bloatbench/datafile"
)

// Row is one line of a summary. Avg, Median and P99 are NaN when there are no points.
type Row struct {
	Name   string
	Avg    float64
	Median float64
	P99    float64
	Points int
	Units  string
	// Own says the row is of a series a test declared beyond the throughput,
	// ping and bottleneck rows every comparison has (a request/response latency,
	// a CPU share, an aggregate): a comparison shows its median.
	Own bool
	// Flow says the row is one TCP flow's: Jain's fairness is taken over these.
	Flow bool
	// Key is what the row is, beside its printed name: compare, verdicts and
	// history select rows by it.
	Key Key
}

// Key says what a summary row is. Two rows of one summary have different keys.
type Key struct {
	Family Family
	// Series is the series a probe's, a flow's or a test's own row is of (its
	// name in the run, before the pair); an aggregate's name.
	Series string
	// Direction is a flow's, or the flows' of a sum or average ("download").
	Direction string
	// Phase is a probe row's part of the run: "", LoadedPhase or IdlePhase.
	Phase string
	// Stat is a computed row's statistic: "sum", "avg", "flows", "flows srtt"
	// (flows), or a bottleneck row's ("drops", "ECN marks", "backlog", "BQL
	// inflight", "sojourn", "ICMP sojourn", "drain rate", "L queue delay", ...).
	Stat string
	// Pair is the pair a row is of; "" for the run's (pairs pooled).
	Pair string
	// Dev is a bottleneck row's device, "host:dev".
	Dev string
}

// Family is the kind of row a Key is.
type Family uint8

const (
	FamilyOwn        Family = iota // a test's own series, or an aggregate
	FamilyProbe                    // a probe's round trips (Series, Phase)
	FamilyFlow                     // one flow's throughput (Series)
	FamilyFlows                    // the flows of a direction: sum, avg, folded (Direction, Stat)
	FamilyBottleneck               // a bottleneck device's (Dev, Stat)
)

// Phases of a probe's rows (Key.Phase).
const (
	LoadedPhase = "loaded"
	IdlePhase   = "idle"
)

// Summary of one run.
type Summary struct {
	Test  string
	Title string
	Time  string // the run's start, as "2006-01-02 15:04:05" (flent's text layout)
	// Start is the run's start with its zone, which the machine-read formats
	// (JSON, CSV) carry as RFC 3339.
	Start      time.Time
	File       string
	Incomplete bool
	Error      string
	// Cut is the window the summary was limited to, seconds into the run; nil = all.
	Cut  *[2]float64
	Rows []Row
	// Warnings name the series that miss more than MaxGridMiss of their grid,
	// the flows held back by a window for more than MaxWindowLimited of their
	// time, a run whose qdiscs under test were not where its delay was, a queue
	// that drained slower than its configured rate, and a probe that shared no
	// tx queue with the flows it is compared with.
	Warnings []string
	// LimitWarnings are the window-limited flows' alone: what a run says on
	// stderr too, as the queue's.
	LimitWarnings []string
	// QueueWarnings are the last three kinds alone: what a run says on stderr too.
	QueueWarnings []string
	// Delay says where the loaded ping's delay went; nil without ping or bottleneck
	// statistics.
	Delay *DelayAttribution
	// Queues are the tx queues each probe and flow went through; nil without
	// the tracer's counts (queues.go).
	Queues []QueueUse
}

// Options change what a summary covers.
type Options struct {
	// Cut keeps only the data from Cut[0] to Cut[1] seconds into the run, as flent's
	// --data-cutoff does (see CutWindow); nil keeps everything.
	Cut *[2]float64
	// FoldFlows replaces the rows of single TCP flows (and their TCP_INFO) by one
	// row per direction and statistic over the flows (--flows summary): 128 flows
	// must not drown the table.
	FoldFlows bool
}

// A ping series gives three rows. The series' own name is flent's row: every reply
// of the run, lead-in and lead-out included, as flent counts it. The suffixed rows
// are bloatbench's own split of it.
const (
	// LoadedSuffix names the ping row taken while the streams run.
	LoadedSuffix = " loaded"
	// IdleSuffix names the ping row taken before the streams start.
	IdleSuffix = " idle"
)

// CutWindow is the span of a cut as flent's --data-cutoff applies it to raw values
// (flent 2.1.1, combiners.RawReducer): from START to END seconds after t0, both ends
// excluded; a START of 0 reaches back to t0 - 1 s, so that t0 itself is in; an END of
// 0 or less counts back from the end of the run (TOTAL_LENGTH), so "5,-5" leaves out
// 5 s at either end. Without a cut, the window is everything.
func CutWindow(m datafile.Metadata, cut *[2]float64) (from, to float64) {
	if cut == nil {
		return math.Inf(-1), math.Inf(1)
	}
	from, to = m.T0+cut[0], m.T0+cut[1]
	if cut[0] == 0 {
		from = m.T0 - 1
	}
	if cut[1] <= 0 {
		to += m.TotalLength
	}
	return from, to
}

// Phase is the part of a run a ping probe belongs to.
type Phase int

// The parts of a run: the lead-in before the load, the load, the lead-out.
const (
	Idle Phase = iota
	Loaded
	After
)

// PingPhaseOf says which part of the run a ping sample's probe belongs to, by the
// time the probe was sent (a reply's time less its round trip; a lost probe's time
// is its send time): a probe sent in [t0+delay, t0+delay+length) is the load's.
// One sent within a millisecond (or a quarter step, if less) before either bound
// counts as sent at it. A probe schedule starts at t0, so with the delay a whole
// number of steps one probe goes exactly where the load starts and one where it
// ends; the clocks' offset, which is known to a tenth of a millisecond, and the
// probe's own wake-up put its stamp a little either side, and that must not move
// it between rows (with -d 2 -s 0.2 the idle row has its 10 points, every time).
func PingPhaseOf(m datafile.Metadata, x datafile.Sample) Phase {
	sent := sentAt(x)
	slack := 1e-3
	if m.Step > 0 {
		slack = math.Min(slack, m.Step/4)
	}
	switch {
	case sent < m.T0+m.Delay-slack:
		return Idle
	case sent < m.T0+m.Delay+m.Length-slack:
		return Loaded
	}
	return After
}

// sentAt is when a round trip sample's probe went: its reply's time less the
// round trip (a lost probe's time is when it went), or for an interval's mean
// (a request/response client's, Dur set) the interval's middle.
func sentAt(x datafile.Sample) float64 {
	switch {
	case x.Dur > 0:
		return x.T - x.Dur/2
	case x.Lost:
		return x.T
	}
	return x.T - x.V/1e3
}

// Summarize computes a run's summary.
//
// Ping is summarised from the raw replies, as flent summarises it: the row of the
// series' own name over the whole run (flent's "Ping (ms) ICMP"), the loaded row over
// the probes sent while the streams run (delay .. delay+length, PingPhaseOf), the
// idle row over those of the lead-in before it; the lead-out, while queues drain, is
// only in the whole-run row.
// Throughput is put on the step grid first, so the computed series (sum and avg over
// flows) have true medians.
func Summarize(run *datafile.Run) Summary { return SummarizeWith(run, Options{}) }

// SummarizeWith computes a run's summary with options. A cut narrows every window:
// the loaded and idle ping, the grid points of the throughput and the bottleneck's.
func SummarizeWith(run *datafile.Run, o Options) Summary {
	m := run.Metadata
	s := Summary{
		Test: m.Test, Title: m.Title, File: run.Path,
		Incomplete: run.Incomplete, Error: run.Error, Cut: o.Cut,
	}
	if !m.StartTime.IsZero() {
		s.Time, s.Start = m.StartTime.Format("2006-01-02 15:04:05"), m.StartTime
	}
	loadStart, loadEnd := m.T0+m.Delay, m.T0+m.Delay+m.Length
	from, to := CutWindow(m, o.Cut)
	// A cut excludes its ends, as flent's --data-cutoff does for raw values.
	in := func(t float64) bool { return t > from && t < to }
	grid := GridOf(m)
	type pingRows struct {
		units               string
		whole, loaded, idle []float64
		own                 bool
	}
	// In a run with several pairs, each pair's ping has its rows, and the pairs'
	// replies together have the rows of the name the test gave the series: what
	// compare and batch read.
	pooled := map[string]*pingRows{}
	var pooledOrder []string
	for _, se := range run.Series {
		if !datafile.IsRTT(se) {
			continue
		}
		var p pingRows
		for _, x := range run.Samples[se.Name] {
			keep, phase := in(x.T), x
			if run.GridCut[se.Name] {
				// A ping series a file of another tool has on its grid only
				// (flent's "Ping (ms) avg"): cut by grid point, as flent cuts it,
				// and its points are times, not replies to probes sent earlier.
				keep = inGrid(m, o.Cut, grid, x.Seq)
				phase = datafile.Sample{T: x.T, Lost: true}
			}
			if x.Lost || !keep {
				continue
			}
			p.whole = append(p.whole, x.V)
			switch PingPhaseOf(m, phase) {
			case Idle:
				p.idle = append(p.idle, x.V)
			case Loaded:
				p.loaded = append(p.loaded, x.V)
			}
		}
		// A probe of a kind of its own (a UDP probe's round trips) is a test's
		// own series: a comparison shows its rows' medians, as it did when the
		// probe had one row. ICMP ping has the comparison's fixed rows.
		own := !datafile.Classify(se).ICMP
		s.Rows = append(s.Rows, probeRows(se.Name, se.Units, Key{Family: FamilyProbe, Series: datafile.BaseName(se.Name, se.Pair), Pair: se.Pair}, own, p.whole, p.loaded, p.idle)...)
		if se.Pair == "" {
			continue
		}
		base := datafile.BaseName(se.Name, se.Pair)
		all := pooled[base]
		if all == nil {
			all = &pingRows{units: se.Units, own: own}
			pooled[base] = all
			pooledOrder = append(pooledOrder, base)
		}
		all.whole, all.loaded, all.idle = append(all.whole, p.whole...), append(all.loaded, p.loaded...), append(all.idle, p.idle...)
	}
	for _, base := range pooledOrder {
		p := pooled[base]
		s.Rows = append(s.Rows, probeRows(base, p.units, Key{Family: FamilyProbe, Series: base}, p.own, p.whole, p.loaded, p.idle)...)
	}
	flows := map[string]bool{}
	for _, se := range run.Series {
		flows[se.Name] = datafile.Classify(se).Role == datafile.RoleFlow
	}
	for _, g := range Throughput(run) {
		vs := g.Values
		for k := range vs {
			keep := in(grid.Time(k))
			if run.GridCut[g.Name] {
				keep = inGrid(m, o.Cut, grid, k)
			}
			if !keep {
				vs[k] = math.NaN()
			}
		}
		r := rowOf(g.Name, g.Units, defined(vs))
		if raw, ok := run.Raw[g.Name]; ok {
			// A flow a file of another tool has raw values of: its row is those,
			// cut by time as flent cuts them; the grid stays for the sum and average.
			r = rawRow(raw, in, r)
		}
		r.Flow = flows[g.Name]
		r.Key = Key{Family: FamilyFlows, Direction: g.Direction, Stat: g.Stat, Pair: g.Pair}
		if g.Stat == "" {
			r.Key = Key{Family: FamilyFlow, Series: datafile.BaseName(g.Name, g.Pair), Direction: g.Direction, Pair: g.Pair}
		}
		s.Rows = append(s.Rows, r)
	}
	// Series of other kinds (request/response latency, CPU shares) get a row of
	// their own name over the run, as flent summarises a series from its raw values.
	for _, se := range run.Series {
		switch datafile.Classify(se).Role {
		case datafile.RoleOwn, datafile.RoleFlowStat:
		default:
			// Flows and probes have their rows above, the bottleneck's series
			// theirs (the shaper's rate is each device's configured rate row,
			// delayRows).
			continue
		}
		var xs []float64
		for _, x := range run.Samples[se.Name] {
			keep := in(x.T)
			if run.GridCut[se.Name] {
				keep = inGrid(m, o.Cut, grid, x.Seq)
			}
			if !x.Lost && keep {
				xs = append(xs, x.V)
			}
		}
		r := rowOf(se.Name, se.Units, xs)
		if raw, ok := run.Raw[se.Name]; ok {
			r = rawRow(raw, in, r)
		} else if none := func(v float64) bool { return math.IsNaN(v) || v == 0 }; !run.GridCut[se.Name] && (none(r.Avg) || none(r.Median) || none(r.P99)) {
			// A flent export carries these samples as the series' raw values and
			// on its grid, and flent takes a raw statistic of 0 as none and
			// prints the grid's (rawRow): a CE fraction of 0 all run long counts
			// the grid's points. So does this row, as flent's summary of the
			// export reads. (A series a file of another tool has on its grid only
			// is its grid already.)
			g := gridRow(run, se, func(k int) bool { return in(grid.Time(k)) })
			r = rawRow(run.Samples[se.Name], in, g)
		}
		r.Own = true
		r.Key = Key{Family: FamilyOwn, Series: datafile.BaseName(se.Name, se.Pair), Pair: se.Pair}
		s.Rows = append(s.Rows, r)
	}
	if len(m.Aggregates) > 0 {
		for _, g := range Aggregates(run, OnGrid(run)) {
			var xs []float64
			for k, v := range g.Values {
				if !math.IsNaN(v) && in(grid.Time(k)) {
					xs = append(xs, v)
				}
			}
			r := rowOf(g.Name, g.Units, xs)
			r.Own = true
			r.Key = Key{Family: FamilyOwn, Series: g.Name}
			s.Rows = append(s.Rows, r)
		}
	}
	lf, lt := math.Max(loadStart, from), math.Min(loadEnd, to)
	s.Rows = append(s.Rows, bottleneckRows(run, lf, lt)...)
	devs, devOrder := deviceSeries(run)
	rates := rateMap(m.Rates)
	s.Rows = append(s.Rows, delayRows(devs, devOrder, rates, lf, lt)...)
	if o.Cut == nil {
		// Without a cut flent prints the mean its runner reported and counts its grid
		// (a cut makes it count the values): a row of a series' own name does too.
		for i, r := range s.Rows {
			if rm, ok := run.Reported[r.Name]; ok {
				s.Rows[i].Avg, s.Rows[i].Points = rm.Mean, rm.Points
			}
		}
	}
	if o.FoldFlows {
		s.Rows = foldFlows(run, s.Rows)
	}
	sortRows(s.Rows)
	s.Warnings = GridWarnings(run, from, to)
	// Over the load, as the bottleneck's rows: the flows' window-limited time is
	// what explains a queue (and a ping) shallower than the bottleneck's.
	s.LimitWarnings = limitWarnings(WindowLimits(run, lf, lt))
	s.Warnings = append(s.Warnings, s.LimitWarnings...)
	s.Delay = attribute(s.Rows, devs, devOrder, lf, lt)
	if w := s.Delay.Warning(); w != "" {
		s.QueueWarnings = append(s.QueueWarnings, w)
	}
	s.QueueWarnings = append(s.QueueWarnings, slowDrains(devs, devOrder, rates, lf, lt)...)
	s.Queues = QueueUses(run)
	s.QueueWarnings = append(s.QueueWarnings, ProbeQueueWarnings(s.Queues)...)
	s.Warnings = append(s.Warnings, s.QueueWarnings...)
	return s
}

// gridRow is the row of a series' values on the run's grid (as OnGrid puts
// them, and a flent export writes them) at the points keep keeps.
func gridRow(run *datafile.Run, se datafile.Series, keep func(k int) bool) Row {
	values := gridValues(GridOf(run.Metadata), run.Samples[se.Name])
	for k := range values {
		if !keep(k) {
			values[k] = math.NaN()
		}
	}
	return rowOf(se.Name, se.Units, defined(values))
}

// rawRow is the row of a series a file of another tool has raw values of besides
// its grid (flent's): each statistic of the raw values kept by the cut (by time, as
// flent cuts them), and, as flent 2.1.1 falls back (combiners.TryReducer takes any
// false value, 0 included, as none), the grid row's where that is none or 0. The
// count goes with the average, as flent's does.
func rawRow(raw []datafile.Sample, in func(float64) bool, grid Row) Row {
	var xs []float64
	for _, x := range raw {
		if !x.Lost && in(x.T) {
			xs = append(xs, x.V)
		}
	}
	r := rowOf(grid.Name, grid.Units, xs)
	none := func(v float64) bool { return math.IsNaN(v) || v == 0 }
	if none(r.Avg) {
		r.Avg, r.Points = grid.Avg, grid.Points
	}
	if none(r.Median) {
		r.Median = grid.Median
	}
	if none(r.P99) {
		r.P99 = grid.P99
	}
	return r
}

// foldFlows replaces the rows of the run's per-flow series (TCP throughput, its
// TCP_INFO) by one row per direction and statistic: "TCP download flows" (and
// "TCP download flows srtt"), whose average and median are those of the flows'
// averages and whose points are the flows. bloatbench's own rows: flent has none.
func foldFlows(run *datafile.Run, rows []Row) []Row {
	type group struct {
		name, units string
		key         Key
		avgs        []float64
	}
	perFlow := map[string]string{} // a flow's row name to its group's
	var order []string
	groups := map[string]*group{}
	for _, se := range run.Series {
		role := datafile.Classify(se).Role
		if se.Direction == "" || (role != datafile.RoleFlow && role != datafile.RoleFlowStat) {
			continue
		}
		stat := "flows"
		if role == datafile.RoleFlowStat {
			stat += " " + se.Stat
		}
		name := datafile.PairName("TCP "+se.Direction+" "+stat, se.Pair)
		perFlow[se.Name] = name
		if groups[name] == nil {
			groups[name] = &group{name: name, units: se.Units, key: Key{Family: FamilyFlows, Direction: se.Direction, Stat: stat, Pair: se.Pair}}
			order = append(order, name)
		}
	}
	var out []Row
	for _, r := range rows {
		g, ok := perFlow[r.Name]
		if !ok {
			out = append(out, r)
			continue
		}
		if !math.IsNaN(r.Avg) {
			groups[g].avgs = append(groups[g].avgs, r.Avg)
		}
	}
	for _, name := range order {
		g := groups[name]
		out = append(out, Row{Name: g.name, Units: g.units, Avg: Mean(g.avgs), Median: Median(g.avgs), P99: Percentile(g.avgs, 99), Points: len(g.avgs), Key: g.key})
	}
	return out
}

// inGrid says whether a cut keeps grid point k of a series that has no raw values,
// as flent 2.1.1 cuts one (combiners.Reducer: bisect on x_values from START to END,
// both included, an END of 0 or less counted back from TOTAL_LENGTH). No cut keeps
// every point.
func inGrid(m datafile.Metadata, cut *[2]float64, g Grid, k int) bool {
	if cut == nil {
		return true
	}
	end := cut[1]
	if end <= 0 {
		end += m.TotalLength
	}
	x := float64(k) * g.Step
	return x >= cut[0] && x <= end
}

// GridSeries is one throughput series on the run's step grid, NaN where it has no
// value.
type GridSeries struct {
	Name   string
	Units  string
	Values []float64
	// Stat is "sum" or "avg" for what Throughput computes over flows, "" for a
	// series of the run's own; Pair is the pair it is of ("" for all of them),
	// Direction the flows' ("" for what is not a flow's).
	Stat, Pair, Direction string
}

// Throughput puts every TCP flow of a run on the step grid, followed by, per
// direction, the sum and the average over the flows that have a value at each point,
// and in a run with several pairs each pair's sum and average ("TCP download sum
// (pair 2)"). Computed this way the sum and average have true medians (flent's
// print N/A).
func Throughput(run *datafile.Run) []GridSeries {
	grid := GridOf(run.Metadata)
	type key struct{ dir, pair string }
	type group struct {
		key
		units string
		flows [][]float64
	}
	var out []GridSeries
	var groups []*group
	byKey := map[key]*group{}
	for _, se := range run.Series {
		if datafile.Classify(se).Role != datafile.RoleFlow {
			continue
		}
		aligned := AlignIntervals(grid, run.Samples[se.Name])
		out = append(out, GridSeries{Name: se.Name, Units: se.Units, Values: aligned, Pair: se.Pair, Direction: se.Direction})
		// The sum over every pair, and in a run with several, each pair's own.
		keys := []key{{se.Direction, ""}}
		if se.Pair != "" {
			keys = append(keys, key{se.Direction, se.Pair})
		}
		for _, k := range keys {
			g := byKey[k]
			if g == nil {
				g = &group{key: k, units: se.Units}
				byKey[k] = g
				groups = append(groups, g)
			}
			g.flows = append(g.flows, aligned)
		}
	}
	for _, g := range groups {
		name := func(stat string) string { return datafile.PairName("TCP "+g.dir+" "+stat, g.pair) }
		sums, avgs := make([]float64, grid.N), make([]float64, grid.N)
		for k := 0; k < grid.N; k++ {
			sum, n := 0.0, 0
			for _, f := range g.flows {
				if !math.IsNaN(f[k]) {
					sum += f[k]
					n++
				}
			}
			sums[k], avgs[k] = math.NaN(), math.NaN()
			if n > 0 {
				sums[k], avgs[k] = sum, sum/float64(n)
			}
		}
		out = append(out, GridSeries{Name: name("sum"), Units: g.units, Values: sums, Stat: "sum", Pair: g.pair, Direction: g.dir},
			GridSeries{Name: name("avg"), Units: g.units, Values: avgs, Stat: "avg", Pair: g.pair, Direction: g.dir})
	}
	return out
}

func sortRows(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool { return naturalLess(rows[i].Name, rows[j].Name) })
}

// probeRows are a probe's rows: the whole run's, the loaded and the idle. A test's
// own probe has no row of a phase it did not run in (a request/response client
// that runs while the streams do has no idle replies); ICMP ping's rows are
// always there, as compare and batches read them by name, and a probe that had no
// reply at all keeps all three, empty, to say so.
func probeRows(name, units string, key Key, own bool, whole, loaded, idle []float64) []Row {
	rows := []Row{rowOf(name, units, whole)}
	rows[0].Key = key
	for _, ph := range []struct {
		suffix, phase string
		xs            []float64
	}{{LoadedSuffix, LoadedPhase, loaded}, {IdleSuffix, IdlePhase, idle}} {
		if len(ph.xs) > 0 || len(whole) == 0 || !own {
			r := rowOf(name+ph.suffix, units, ph.xs)
			r.Key = key
			r.Key.Phase = ph.phase
			rows = append(rows, r)
		}
	}
	for i := range rows {
		rows[i].Own = own
	}
	return rows
}

func rowOf(name, units string, xs []float64) Row {
	return Row{Name: name, Units: units, Avg: Mean(xs), Median: Median(xs), P99: Percentile(xs, 99), Points: len(xs)}
}

// naturalLess orders names as flent does (by name), but with runs of digits compared
// as numbers, so that flow 10 follows flow 9.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da != "" && db != "" {
			na, _ := strconv.Atoi(da)
			nb, _ := strconv.Atoi(db)
			if na != nb {
				return na < nb
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitPrefix(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) })
	if i < 0 {
		return s
	}
	return s[:i]
}
