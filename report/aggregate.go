package report

import (
	"math"
	"path"
	"slices"

	"github.com/bloatbench/bloatbench/datafile"
)

// OnGrid puts every measured series of a run on the step grid, by name: throughput
// flows and their per-direction sums and averages (Throughput), ping replies in
// the step they arrived in (PingSlots), and any other series of interval samples
// (a request/response rate, a CPU share) as AlignIntervals puts them. Bottleneck
// statistics are left out: they are the bottleneck's, not the test's.
func OnGrid(run *datafile.Run) map[string]GridSeries {
	grid := GridOf(run.Metadata)
	out := map[string]GridSeries{}
	for _, g := range Throughput(run) {
		out[g.Name] = g
	}
	for _, se := range run.Series {
		if role := datafile.Classify(se).Role; role == datafile.RoleFlow || role.Bottleneck() || role.Attribution() {
			continue
		}
		out[se.Name] = GridSeries{Name: se.Name, Units: se.Units, Values: gridValues(grid, run.Samples[se.Name])}
	}
	return out
}

// gridValues puts a series' samples on the grid: interval samples as
// AlignIntervals puts them, instants (ping replies) in their PingSlots.
func gridValues(grid Grid, samples []datafile.Sample) []float64 {
	if intervals(samples) {
		return AlignIntervals(grid, samples)
	}
	values := make([]float64, grid.N)
	for k := range values {
		values[k] = math.NaN()
	}
	for i, k := range PingSlots(grid, samples) {
		if k >= 0 {
			values[k] = samples[i].V
		}
	}
	return values
}

// intervals says whether a series' samples each cover an interval (they carry
// its length) rather than an instant.
func intervals(samples []datafile.Sample) bool {
	for _, s := range samples {
		if !s.Lost {
			return s.Dur > 0
		}
	}
	return false
}

// Aggregates computes the run's aggregates (the test's, in its metadata) on the
// grid, in the order the test lists them; one may take in those before it. An
// aggregate of a name the grid has already (Throughput's "TCP upload sum") is the
// grid's.
//
// An aggregate takes in the run's series and the aggregates before it, matched by
// the names the test gave them (datafile.BaseName): not Throughput's sums and
// averages, which are the flows again. In a run with several pairs it is computed
// over every pair's series, and again over each pair's as "NAME (pair K)".
func Aggregates(run *datafile.Run, grid map[string]GridSeries) []GridSeries {
	n := GridOf(run.Metadata).N
	type member struct {
		base, pair string
		agg        bool
	}
	eligible := map[string]member{}
	var pairs []string // in the order the run's series first name them
	for _, se := range run.Series {
		eligible[se.Name] = member{base: datafile.BaseName(se.Name, se.Pair), pair: se.Pair}
		if se.Pair != "" && !slices.Contains(pairs, se.Pair) {
			pairs = append(pairs, se.Pair)
		}
	}
	var out []GridSeries
	for _, a := range run.Metadata.Aggregates {
		if _, ok := grid[a.Name]; ok {
			continue
		}
		// "" is every pair's; an aggregate before this one counts in the version of
		// the same pair only, or each pair's would count twice.
		for _, pair := range append([]string{""}, pairs...) {
			name := datafile.PairName(a.Name, pair)
			match := func(glob string) []GridSeries {
				var members []GridSeries
				for _, gname := range sortedNames(grid) {
					m, ok := eligible[gname]
					if !ok || m.base == a.Name || (m.agg || pair != "") && m.pair != pair {
						continue
					}
					if ok, _ := path.Match(glob, m.base); ok && !excluded(a.Exclude, m.base) {
						members = append(members, grid[gname])
					}
				}
				return members
			}
			at := func(members []GridSeries, k int) []float64 {
				var xs []float64
				for _, m := range members {
					if k < len(m.Values) && !math.IsNaN(m.Values[k]) {
						xs = append(xs, m.Values[k])
					}
				}
				return xs
			}
			members := match(a.Series)
			var over []GridSeries
			if a.Op == "ratio" {
				over = match(a.Over)
			}
			g := GridSeries{Name: name, Values: make([]float64, n)}
			if len(members) > 0 && a.Op != "fairness" && a.Op != "ratio" {
				g.Units = members[0].Units
			}
			for k := range g.Values {
				if a.Op == "ratio" {
					// A step where either side has no value, or the divisor
					// sums to 0, has no ratio.
					num, den := at(members, k), at(over, k)
					g.Values[k] = math.NaN()
					if len(num) > 0 && len(den) > 0 {
						if d := combine("sum", den); d > 0 {
							g.Values[k] = combine("sum", num) / d
						}
					}
					continue
				}
				g.Values[k] = combine(a.Op, at(members, k))
			}
			grid[name] = g
			eligible[name] = member{base: a.Name, pair: pair, agg: true}
			out = append(out, g)
		}
	}
	return out
}

// excluded says whether an aggregate's exclude list leaves name out: a name
// it lists, or one a glob of it matches ("* sent").
func excluded(exclude []string, name string) bool {
	return slices.ContainsFunc(exclude, func(x string) bool {
		ok, _ := path.Match(x, name)
		return x == name || ok
	})
}

// combine is an aggregate's value at one step; NaN where no member has one.
func combine(op string, xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	switch op {
	case "sum":
		return sum
	case "avg":
		return sum / float64(len(xs))
	case "fairness":
		// Jain's index: 1 when every member has the same, 1/n when one has all.
		if sq == 0 {
			return math.NaN()
		}
		return sum * sum / (float64(len(xs)) * sq)
	}
	return math.NaN()
}

func sortedNames(m map[string]GridSeries) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case naturalLess(a, b):
			return -1
		case naturalLess(b, a):
			return 1
		}
		return 0
	})
	return names
}
