package batch

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"golang.org/x/perf/benchmath"

	"github.com/bloatbench/bloatbench/report"
)

// MetricNames are the metrics a threshold may name: the rows of compare's
// side-by-side table.
func MetricNames() []string {
	var out []string
	for _, m := range report.AllMetrics() {
		out = append(out, m.Name)
	}
	return out
}

// knownMetric accepts a metric's name, or the name it had before the ping metrics
// were named for their summary rows ("Ping loaded median"), so batch files written
// then still read.
func knownMetric(name string) bool {
	_, ok := report.LookupMetric(name)
	return ok
}

func metric(name string) report.Metric {
	if m, ok := report.LookupMetric(name); ok {
		return m
	}
	panic("batch: unknown metric " + name) // names are checked when the file is read
}

// Check is one threshold applied to one test and setup: the baseline's median
// against this batch's, over their runs.
type Check struct {
	Test     string  `json:"test"`
	Streams  string  `json:"streams,omitempty"`
	Setup    string  `json:"setup"`
	Metric   string  `json:"metric"`
	Units    string  `json:"units,omitempty"`
	Baseline float64 `json:"baseline"`
	Current  float64 `json:"current"`
	// Change is (current - baseline) / baseline.
	Change    float64 `json:"change"`
	Threshold string  `json:"threshold"`
	// P is the Mann-Whitney U test's p-value; 1 when there are too few runs.
	P            float64 `json:"p"`
	BaselineRuns int     `json:"baseline_runs"`
	CurrentRuns  int     `json:"current_runs"`
	Regression   bool    `json:"regression"`
	Note         string  `json:"note,omitempty"`
}

// MarshalJSON writes a value the batches could not give as null: JSON has no NaN.
func (c Check) MarshalJSON() ([]byte, error) {
	type plain Check
	return json.Marshal(struct {
		plain
		Baseline *float64 `json:"baseline"`
		Current  *float64 `json:"current"`
		Change   *float64 `json:"change"`
	}{plain(c), finite(c.Baseline), finite(c.Current), finite(c.Change)})
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// group is one test and setup's runs, as compare groups them.
type group struct {
	test, streams, setup string
	runs                 []report.Summary
}

func groupKey(c report.Compared) string {
	return c.Summary.Test + "\x00" + c.Streams + "\x00" + c.Setup
}

func groups(in []report.Compared) (map[string]*group, []string) {
	m := map[string]*group{}
	var order []string
	for _, c := range in {
		k := groupKey(c)
		g := m[k]
		if g == nil {
			g = &group{test: c.Summary.Test, streams: c.Streams, setup: c.Setup}
			m[k] = g
			order = append(order, k)
		}
		g.runs = append(g.runs, c.Summary)
	}
	return m, order
}

// alpha is the significance level of "significant: true".
const alpha = 0.05

// Judge applies every limit to every test and setup both batches ran. A test and
// setup only one batch ran is noted, not judged.
func Judge(baseline, current []report.Compared, limits []ParsedLimit) []Check {
	base, _ := groups(baseline)
	cur, order := groups(current)
	var out []Check
	for _, k := range order {
		g := cur[k]
		b := base[k]
		for _, l := range limits {
			m := metric(l.Metric)
			c := Check{Test: g.test, Streams: g.streams, Setup: g.setup, Metric: m.Name, Units: m.Units, Threshold: l.Worse, P: 1,
				Baseline: math.NaN(), Current: math.NaN(), Change: math.NaN()}
			curVals := values(m, g.runs)
			c.CurrentRuns = len(curVals)
			if b == nil {
				c.Note = "the baseline has no run of this test and setup"
				out = append(out, c)
				continue
			}
			baseVals := values(m, b.runs)
			c.BaselineRuns = len(baseVals)
			if len(curVals) == 0 || len(baseVals) == 0 {
				c.Note = "no value in one of the batches"
				out = append(out, c)
				continue
			}
			c.Baseline, c.Current = median(baseVals), median(curVals)
			if c.Baseline != 0 {
				c.Change = (c.Current - c.Baseline) / math.Abs(c.Baseline)
			} else if c.Current != 0 {
				c.Change = math.Copysign(math.Inf(1), c.Current)
			} else {
				c.Change = 0
			}
			cmp := benchmath.AssumeNothing.Compare(benchmath.NewSample(baseVals, &benchmath.DefaultThresholds),
				benchmath.NewSample(curVals, &benchmath.DefaultThresholds))
			c.P = cmp.P
			worse := (l.Change >= 0 && c.Change > l.Change) || (l.Change < 0 && c.Change < l.Change)
			c.Regression = worse && (!l.Significant || c.P < alpha)
			if worse && !c.Regression {
				c.Note = fmt.Sprintf("past the threshold, but not significant (p=%.3f, %d+%d runs)", c.P, len(baseVals), len(curVals))
			}
			out = append(out, c)
		}
	}
	return out
}

func values(m report.Metric, runs []report.Summary) []float64 {
	var vs []float64
	for _, r := range runs {
		if v := m.Value(r); !math.IsNaN(v) && !math.IsInf(v, 0) {
			vs = append(vs, v)
		}
	}
	return vs
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Regressions counts the checks that are regressions.
func Regressions(cs []Check) int {
	n := 0
	for _, c := range cs {
		if c.Regression {
			n++
		}
	}
	return n
}

// VerdictMarkdown is the verdict as a markdown table, for summary.md and the mail.
func VerdictMarkdown(cs []Check, baselineDir string) string {
	var b strings.Builder
	n := Regressions(cs)
	switch n {
	case 0:
		fmt.Fprintf(&b, "Verdict against %s: no regression.\n\n", baselineDir)
	default:
		fmt.Fprintf(&b, "Verdict against %s: **%d regression%s**.\n\n", baselineDir, n, map[bool]string{true: "s"}[n != 1])
	}
	b.WriteString("| test | setup | metric | baseline | now | change | threshold | p | verdict |\n|---|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, c := range cs {
		verdict := "ok"
		switch {
		case c.Regression:
			verdict = "**REGRESSION**"
		case c.Note != "":
			verdict = c.Note
		}
		test := c.Test
		if c.Streams != "" {
			test += " (" + c.Streams + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %.3f | %s |\n", md(test), md(c.Setup), md(metricLabel(c)),
			num(c.Baseline), num(c.Current), pct(c.Change), c.Threshold, c.P, md(verdict))
	}
	return b.String()
}

func metricLabel(c Check) string {
	// A metric named for a flent row may carry its units already: "Ping (ms) ICMP".
	if c.Units == "" || strings.Contains(c.Metric, "("+c.Units+")") {
		return c.Metric
	}
	return c.Metric + " (" + c.Units + ")"
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", v*100)
}

// md keeps a cell's text from breaking the table.
func md(s string) string { return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s) }
