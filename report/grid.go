package report

import (
	"math"
	"sort"

	"github.com/bloatbench/bloatbench/datafile"
)

// Grid is the step grid of a run: point k is at T0 + k*Step.
type Grid struct {
	T0, Step float64
	N        int
}

// GridOf returns the run's grid, covering its total length (or its GridLength,
// where a file's grid reaches further).
func GridOf(m datafile.Metadata) Grid {
	step := m.Step
	if !(step > 0) || math.IsInf(step, 0) {
		step = 0.2
	}
	// Readers refuse files whose grid is out of these bounds (datafile.CheckGrid); a
	// run made in code is held to them too, rather than allocating without bound or
	// panicking on a negative length.
	n := datafile.GridPoints(max(m.TotalLength, m.GridLength), step)
	switch {
	case !(n >= 1):
		n = 1
	case n > datafile.MaxGridPoints:
		n = datafile.MaxGridPoints
	}
	return Grid{T0: m.T0, Step: step, N: int(n)}
}

// Time of point k.
func (g Grid) Time(k int) float64 { return g.T0 + float64(k)*g.Step }

// Index of the point nearest to t.
func (g Grid) Index(t float64) int { return int(math.Round((t - g.T0) / g.Step)) }

// AlignIntervals puts interval samples (throughput: each covers (T-Dur, T]) on the
// grid: a point takes the value of the interval that contains it, NaN where none does.
// Samples are kept raw in the file; this is the one place they meet the grid.
func AlignIntervals(g Grid, samples []datafile.Sample) []float64 {
	out := make([]float64, g.N)
	for i := range out {
		out[i] = math.NaN()
	}
	s := append([]datafile.Sample(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i].T < s[j].T })
	j := 0
	for k := 0; k < g.N; k++ {
		t := g.Time(k)
		for j < len(s) && s[j].T < t {
			j++
		}
		if j == len(s) {
			break
		}
		if t > s[j].T-s[j].Dur {
			out[k] = s[j].V
		}
	}
	return out
}

// defined returns the non-NaN values.
func defined(xs []float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			out = append(out, x)
		}
	}
	return out
}

// PingSlots gives each ping reply its step: the grid point nearest to when it
// arrived, or the next free one when an earlier reply took it (the delay jumped by
// more than a step). Lost probes and replies off the grid get -1. The summary counts
// A flent export stores replies there, on flent's grid (its plots read the grid; its
// summaries read the raw replies).
func PingSlots(g Grid, samples []datafile.Sample) []int {
	order := make([]int, len(samples))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return samples[order[a]].T < samples[order[b]].T })
	// In arrival order each reply's nearest point is at or after the one before's,
	// and every point from there to the last one taken is taken: so the next free
	// point is the nearest or the one after the last taken, whichever is later. One
	// pass, where a search from the nearest point for each was quadratic (200,000
	// replies at t0 took 7.6 s).
	slots := make([]int, len(samples))
	last := -1
	for _, i := range order {
		slots[i] = -1
		if samples[i].Lost {
			continue
		}
		if k := max(g.Index(samples[i].T), 0, last+1); k < g.N {
			slots[i], last = k, k
		}
	}
	return slots
}
