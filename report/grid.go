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

// GridOf returns the run's grid, covering its total length.
func GridOf(m datafile.Metadata) Grid {
	step := m.Step
	if step <= 0 {
		step = 0.2
	}
	return Grid{T0: m.T0, Step: step, N: int(math.Round(m.TotalLength/step)) + 1}
}

// Time of point k.
func (g Grid) Time(k int) float64 { return g.T0 + float64(k)*g.Step }

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
