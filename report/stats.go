package report

import (
	"math"
	"sort"
)

// Mean of xs; NaN when empty.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Median of xs (the mean of the two middle values for an even count); NaN when empty.
func Median(xs []float64) float64 {
	return Percentile(xs, 50)
}

// Percentile p (0..100) of xs with linear interpolation between closest ranks, the
// method numpy uses by default (and so flent); NaN when empty.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	if lo == hi {
		return s[lo]
	}
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}
