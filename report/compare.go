package report

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"golang.org/x/perf/benchmath"

	"github.com/bloatbench/bloatbench/datafile"
)

// Compared is one run as compare sees it: its summary and who it belongs to.
type Compared struct {
	Summary Summary
	Setup   string // the setup's title, or the run's title without one
	Streams string // "4 download streams", for the heading
}

// CompareInput makes a Compared of a run.
func CompareInput(run *datafile.Run, o Options) Compared {
	c := Compared{Summary: SummarizeWith(run, o), Setup: run.Metadata.Title}
	if run.Metadata.Setup != nil && run.Metadata.Setup.Title != "" {
		c.Setup = run.Metadata.Setup.Title
	}
	dirs := map[string]int{}
	var order []string
	for _, se := range run.Series {
		if datafile.Classify(se).Role == datafile.RoleFlow {
			if dirs[se.Direction] == 0 {
				order = append(order, se.Direction)
			}
			dirs[se.Direction]++
		}
	}
	var parts []string
	for _, d := range order {
		parts = append(parts, fmt.Sprintf("%d %s stream%s", dirs[d], d, plural(dirs[d])))
	}
	c.Streams = strings.Join(parts, " and ")
	return c
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Metric is one row of the side-by-side table.
type Metric struct {
	Name     string
	Units    string
	Decimals int
	// Value reads the metric off one run's summary; NaN when the run lacks it.
	Value func(Summary) float64
}

// rowValue reads pick off the row of key k; NaN when the run has none.
func rowValue(k Key, pick func(Row) float64) func(Summary) float64 {
	return func(s Summary) float64 {
		for _, r := range s.Rows {
			if r.Key == k {
				return pick(r)
			}
		}
		return math.NaN()
	}
}

func avgOf(r Row) float64    { return r.Avg }
func medianOf(r Row) float64 { return r.Median }
func p99Of(r Row) float64    { return r.P99 }

// jain is Jain's fairness index over the flows' average throughputs: 1 when all are
// equal, 1/n when one flow has everything.
func jain(s Summary) float64 {
	sum, sq, n := 0.0, 0.0, 0
	for _, r := range s.Rows {
		if r.Flow && !math.IsNaN(r.Avg) {
			sum += r.Avg
			sq += r.Avg * r.Avg
			n++
		}
	}
	if n == 0 || sq == 0 {
		return math.NaN()
	}
	return sum * sum / (float64(n) * sq)
}

// bottleneckSum adds the averages of every bottleneck device's row of statistic
// stat (one per device); NaN when the run recorded none.
func bottleneckSum(stat string) func(Summary) float64 {
	return func(s Summary) float64 {
		sum, found := 0.0, false
		for _, r := range s.Rows {
			if r.Key.Family == FamilyBottleneck && r.Key.Stat == stat && !math.IsNaN(r.Avg) {
				sum += r.Avg
				found = true
			}
		}
		if !found {
			return math.NaN()
		}
		return sum
	}
}

// PingRow is the ping series of bloatbench's tests, and flent's row for it.
const PingRow = "Ping (ms) ICMP"

// AllMetrics are the rows the side-by-side table can have, in its order. A metric
// read off a summary row is named for that row and the statistic, so the table says
// which row it shows: A/B comparisons want the ping under load, the loaded row, not
// flent's whole-run row (which mixes in the idle lead-in and lead-out).
func AllMetrics() []Metric {
	loaded, idle := PingRow+LoadedSuffix, PingRow+IdleSuffix
	ping := Key{Family: FamilyProbe, Series: PingRow}
	loadedKey, idleKey := ping, ping
	loadedKey.Phase, idleKey.Phase = LoadedPhase, IdlePhase
	ms := []Metric{
		{loaded + " avg", "ms", 2, rowValue(loadedKey, avgOf)},
		{loaded + " median", "ms", 2, rowValue(loadedKey, medianOf)},
		{loaded + " p99", "ms", 2, rowValue(loadedKey, p99Of)},
		{idle + " median", "ms", 2, rowValue(idleKey, medianOf)},
	}
	for _, dir := range []string{"download", "upload"} {
		ms = append(ms,
			Metric{"TCP " + dir + " sum", "Mbit/s", 2, rowValue(Key{Family: FamilyFlows, Direction: dir, Stat: "sum"}, avgOf)},
			Metric{"TCP " + dir + " per flow", "Mbit/s", 2, rowValue(Key{Family: FamilyFlows, Direction: dir, Stat: "avg"}, avgOf)})
	}
	ms = append(ms,
		// Fairness differences live in the third and fourth decimal.
		Metric{"Jain's fairness", "", 4, jain},
		Metric{"Drops", "pkts/s", 2, bottleneckSum("drops")},
		Metric{"ECN marks", "pkts/s", 2, bottleneckSum("ECN marks")},
		// What BQL lets into the driver's ring, summed over the bottlenecks: the
		// queue a setup's limit_max moves out of the qdisc (seeds 000 and 003).
		Metric{"BQL inflight", "bytes", 0, bottleneckSum("BQL inflight")},
		// The kernel's per-packet sojourn in the busiest qdisc under test, and the
		// share of the loaded ping's excess the qdiscs under test held.
		Metric{"Qdisc sojourn median", "ms", 2, worstRow(SojournStat)},
		// dualpi2's two queues, each its own line: an L4S patch is judged by both.
		Metric{"L queue delay median", "ms", 2, worstRow("L queue delay")},
		Metric{"C queue delay median", "ms", 2, worstRow("C queue delay")},
		Metric{"Qdisc share of the delay", "", 2, qdiscShare})
	return ms
}

// worstRow is the largest median of the run's bottleneck rows of statistic stat,
// over its devices (every packet's sojourn: not the echo packets' row, a
// statistic of its own); NaN without one.
func worstRow(stat string) func(Summary) float64 {
	return func(s Summary) float64 {
		worst := math.NaN()
		for _, r := range s.Rows {
			if r.Key.Family == FamilyBottleneck && r.Key.Stat == stat && !math.IsNaN(r.Median) {
				if math.IsNaN(worst) || r.Median > worst {
					worst = r.Median
				}
			}
		}
		return worst
	}
}

// qdiscShare is the run's delay attribution's share; NaN without one.
func qdiscShare(s Summary) float64 {
	if s.Delay == nil {
		return math.NaN()
	}
	return s.Delay.QdiscShare
}

// MetricAliases are the names the ping metrics had before they were named for their
// rows (batch files and scripts written then still use them).
var MetricAliases = map[string]string{
	"Ping loaded avg":    PingRow + LoadedSuffix + " avg",
	"Ping loaded median": PingRow + LoadedSuffix + " median",
	"Ping loaded p99":    PingRow + LoadedSuffix + " p99",
	"Ping idle median":   PingRow + IdleSuffix + " median",
}

// LookupMetric finds a side-by-side metric by its name or a former name.
func LookupMetric(name string) (Metric, bool) {
	if n, ok := MetricAliases[name]; ok {
		name = n
	}
	for _, m := range AllMetrics() {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// metricsFor lists the side-by-side rows, those with data in at least one run:
// the fixed metrics, then the median of every row of a test's own series
// (Row.Own), in the summary's order.
func metricsFor(runs []Compared) []Metric {
	var out []Metric
	for _, m := range AllMetrics() {
		for _, r := range runs {
			if !math.IsNaN(m.Value(r.Summary)) {
				out = append(out, m)
				break
			}
		}
	}
	seen := map[Key]bool{}
	for _, r := range runs {
		for _, row := range r.Summary.Rows {
			if row.Own && !seen[row.Key] {
				seen[row.Key] = true
				out = append(out, Metric{row.Name + " median", row.Units, 2, rowValue(row.Key, medianOf)})
			}
		}
	}
	return out
}

// Cell is one metric of one setup over its runs: the median with a 95% confidence
// interval (distribution-free, as benchstat computes it).
type Cell struct {
	Values []float64
	benchmath.Summary
}

// Delta compares setup B against setup A on one metric with a Mann-Whitney U test.
type Delta struct {
	A, B int
	benchmath.Comparison
	Text string // "+12.34%", or "~" when the difference is not significant
}

// Significant says whether the test rejects "same distribution".
func (d Delta) Significant() bool { return d.Text != "~" && d.Text != "?" }

// SetupRuns is one setup's runs of one comparison.
type SetupRuns struct {
	Name string
	Runs []Summary
}

// Comparison is one test under one condition: its setups side by side.
type Comparison struct {
	Heading string
	Test    string
	Setups  []SetupRuns
	Metrics []Metric
	Cells   [][]Cell  // [metric][setup]
	Deltas  [][]Delta // [metric][pair], pairs in the order of Pairs
	Pairs   [][2]int
}

// confidence of the intervals, as benchstat's default.
const confidence = 0.95

var thresholds = benchmath.DefaultThresholds

// Compare groups runs by test and streams (keeping the order they came in), and
// within a group by setup. heading names the condition ("Unshaped 1gigE"); empty
// uses the test's name.
func Compare(runs []Compared, heading string) []Comparison {
	var out []Comparison
	index := map[string]int{}
	for _, r := range runs {
		key := r.Summary.Test + "\x00" + r.Streams
		i, ok := index[key]
		if !ok {
			cond := heading
			if cond == "" {
				cond = r.Summary.Test
			}
			h := cond + " test:"
			if r.Streams != "" {
				h = fmt.Sprintf("%s with %s test:", cond, r.Streams)
			}
			out = append(out, Comparison{Heading: h, Test: r.Summary.Test})
			i = len(out) - 1
			index[key] = i
		}
		c := &out[i]
		j := -1
		for k, s := range c.Setups {
			if s.Name == r.Setup {
				j = k
			}
		}
		if j < 0 {
			c.Setups = append(c.Setups, SetupRuns{Name: r.Setup})
			j = len(c.Setups) - 1
		}
		c.Setups[j].Runs = append(c.Setups[j].Runs, r.Summary)
	}
	for i := range out {
		out[i].compute()
	}
	return out
}

func (c *Comparison) compute() {
	var mine []Compared
	for _, s := range c.Setups {
		for _, r := range s.Runs {
			mine = append(mine, Compared{Summary: r})
		}
	}
	c.Metrics = metricsFor(mine)
	for a := 0; a < len(c.Setups); a++ {
		for b := a + 1; b < len(c.Setups); b++ {
			c.Pairs = append(c.Pairs, [2]int{a, b})
		}
	}
	for _, m := range c.Metrics {
		var cells []Cell
		var samples []*benchmath.Sample
		for _, s := range c.Setups {
			var vs []float64
			for _, r := range s.Runs {
				if v := m.Value(r); !math.IsNaN(v) {
					vs = append(vs, v)
				}
			}
			sample := benchmath.NewSample(append([]float64(nil), vs...), &thresholds)
			samples = append(samples, sample)
			cell := Cell{Values: vs}
			if len(vs) > 0 {
				cell.Summary = benchmath.AssumeNothing.Summary(sample, confidence)
			} else {
				cell.Center, cell.Lo, cell.Hi = math.NaN(), math.NaN(), math.NaN()
			}
			cells = append(cells, cell)
		}
		c.Cells = append(c.Cells, cells)
		var deltas []Delta
		for _, p := range c.Pairs {
			d := Delta{A: p[0], B: p[1]}
			if len(samples[p[0]].Values) > 0 && len(samples[p[1]].Values) > 0 {
				d.Comparison = benchmath.AssumeNothing.Compare(samples[p[0]], samples[p[1]])
				d.Text = d.FormatDelta(cells[p[0]].Center, cells[p[1]].Center)
			} else {
				d.Text = "?"
			}
			deltas = append(deltas, d)
		}
		c.Deltas = append(c.Deltas, deltas)
	}
}

// Repeated says whether any setup has more than one run: then cells carry intervals
// and the deltas table is worth printing.
func (c Comparison) Repeated() bool {
	for _, s := range c.Setups {
		if len(s.Runs) > 1 {
			return true
		}
	}
	return false
}

// notes collects the statistics' warnings (too few runs for an interval or a test),
// each once, numbered for footnotes.
type notes struct {
	list  []string
	index map[string]int
}

func (n *notes) mark(errs []error) string {
	if len(errs) == 0 {
		return ""
	}
	if n.index == nil {
		n.index = map[string]int{}
	}
	var marks []string
	for _, e := range errs {
		k, ok := n.index[e.Error()]
		if !ok {
			n.list = append(n.list, e.Error())
			k = len(n.list)
			n.index[e.Error()] = k
		}
		marks = append(marks, fmt.Sprintf("[%d]", k))
	}
	sort.Strings(marks)
	return strings.Join(marks, "")
}
