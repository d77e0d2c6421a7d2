package datafile

import (
	"errors"
	"fmt"
	"io"
	"math"
)

// Limits of what a reader accepts. Data files travel (people mail them to each
// other), so a reader must not trust one: these bound what a file can make a reader
// or a report allocate, far above anything a run of bloatbench writes.
const (
	// MaxDecompressed bounds the JSON a reader reads of one data file, whatever its
	// compressed size (a gzip bomb): a file that holds more is read up to there and
	// marked incomplete. Real files are far smaller: a 60 s run of 1024 streams is
	// about 20 MB, and a run sampling mq+fq_codel on 4 tx queues writes about 3 KB a
	// step, so 512 MiB holds some 9 hours of it at the default step. MaxSamples
	// bounds what it becomes in memory.
	MaxDecompressed = 512 << 20

	// MaxRecord bounds one record (one line). The writer keeps every record far
	// below it (it chunks samples and truncates texts); a longer record in a file is
	// left out, and the records around it are read.
	MaxRecord = 16 << 20

	// MaxSamples bounds the samples a reader keeps of one file (48 bytes each in
	// memory, so 288 MB at most): a file with more is read up to the record that
	// passes it, and marked incomplete. It is about 20 minutes of 1024 streams
	// (5,000 samples a second), or 9 hours of a 4-stream rrul with its qdisc sampled; the
	// bound is on objects because the JSON of a sample can be as short as "{}",
	// 16 times smaller than the sample.
	MaxSamples = 6_000_000

	// MaxSeries bounds the series a file declares (a 1024-stream run with its
	// flows' tcp_info and its bottleneck's queues has a few thousand).
	MaxSeries = 20_000

	// MaxAggregates bounds the aggregates a header declares (a test has a handful).
	MaxAggregates = 1000

	// MaxEvents and MaxEventBytes bound the events a reader keeps (warnings, hosts'
	// errors and logs); later ones are counted and left out.
	MaxEvents     = 100_000
	MaxEventBytes = 64 << 20

	// MaxStateBytes bounds the bottlenecks' before and after statistics a reader
	// keeps (tc -s -j output, about 20 KB per device with many classes).
	MaxStateBytes = 64 << 20

	// MaxGridPoints bounds a run's step grid, total_length/step points, which reports
	// put the samples on: 10 million is 23 days at the default step (0.2 s) and 27
	// hours at the shortest (10 ms).
	MaxGridPoints = 10_000_000

	// MaxGridValues bounds the grid's points times the series reports put on it
	// (GridValues): 20 million float64 are 160 MB. A real file has a sample for about
	// every value, and MaxSamples holds 6 million: only a file that declares series
	// or aggregates it has no samples for comes near this.
	MaxGridValues = 20_000_000

	// MaxTime bounds times (t0 and sample times, Unix seconds) and durations: year
	// 33658, far beyond any clock.
	MaxTime = 1e12

	// MaxValue bounds a sample's value: beyond any 64-bit counter tc prints (1.8e19)
	// by ten orders, and small enough that the sums, squares and rates reports
	// compute over a run stay finite.
	MaxValue = 1e30
)

// GridValues is how many series reports may put on a run's step grid: every series
// (a flent export puts even the bottleneck's on it), a sum and an average per TCP
// direction and pair, and each aggregate once for the whole run and once per pair.
func GridValues(run *Run) int {
	type key struct{ dir, pair string }
	sums := map[key]bool{}
	pairs := map[string]bool{}
	for _, se := range run.Series {
		if se.Kind == KindTCP {
			sums[key{se.Direction, ""}] = true
			sums[key{se.Direction, se.Pair}] = true
		}
		if se.Pair != "" {
			pairs[se.Pair] = true
		}
	}
	return len(run.Series) + 2*len(sums) + len(run.Metadata.Aggregates)*(len(pairs)+1)
}

// GridPoints is the number of points of the step grid covering total seconds:
// point k at t0 + k*step, k from 0 to total/step. It is a float64 so that absurd
// headers can be checked before anything is allocated for them.
func GridPoints(total, step float64) float64 { return math.Round(total/step) + 1 }

// CheckGrid refuses a step grid that reports cannot build: the step and the total
// length must be positive and finite, the grid at most MaxGridPoints points and,
// with series (the series put on it, GridValues), at most MaxGridValues values.
// stepKey and totalKey name the keys in errors as the file spells them.
func CheckGrid(stepKey string, step float64, totalKey string, total float64, series int) error {
	switch {
	case !(step > 0) || math.IsInf(step, 0):
		return fmt.Errorf("%s is %v: must be more than 0 seconds", stepKey, step)
	case !(total > 0) || total > MaxTime:
		return fmt.Errorf("%s is %v: must be more than 0 seconds and at most %g", totalKey, total, float64(MaxTime))
	}
	points := GridPoints(total, step)
	if points > MaxGridPoints {
		return fmt.Errorf("%s %v with %s %v is %.0f grid points: bloatbench reads at most %d (27 hours at a 10 ms step)",
			totalKey, total, stepKey, step, points, MaxGridPoints)
	}
	if values := points * float64(series); series > 0 && values > MaxGridValues {
		return fmt.Errorf("%d series, sums and aggregates on a grid of %.0f points (%s %v / %s %v) are %.0f values: reports build at most %d",
			series, points, totalKey, total, stepKey, step, values, MaxGridValues)
	}
	return nil
}

// CheckSample refuses a sample no run records: a time or duration beyond MaxTime, a
// negative duration, a value beyond MaxValue. key names the sample in errors.
func CheckSample(key string, s Sample) error {
	switch {
	case !(math.Abs(s.T) <= MaxTime):
		return fmt.Errorf("%s.t is %v: not a time (Unix seconds up to %g)", key, s.T, float64(MaxTime))
	case !(s.Dur >= 0 && s.Dur <= MaxTime):
		return fmt.Errorf("%s.dur is %v: must be from 0 to %g seconds", key, s.Dur, float64(MaxTime))
	case !(math.Abs(s.V) <= MaxValue):
		return fmt.Errorf("%s.v is %v: beyond any value bloatbench records (%g)", key, s.V, float64(MaxValue))
	}
	return nil
}

// checkMetadata refuses a header whose numbers no run writes.
func checkMetadata(m *Metadata) error {
	for _, f := range []struct {
		key string
		v   float64
	}{{"length", m.Length}, {"delay", m.Delay}} {
		if !(f.v >= 0 && f.v <= MaxTime) {
			return fmt.Errorf("metadata.%s is %v: must be from 0 to %g seconds", f.key, f.v, float64(MaxTime))
		}
	}
	if !(math.Abs(m.T0) <= MaxTime) {
		return fmt.Errorf("metadata.t0 is %v: not a time (Unix seconds up to %g)", m.T0, float64(MaxTime))
	}
	return CheckGrid("metadata.step", m.Step, "metadata.total_length", m.TotalLength, 0)
}

// ErrTooLarge is what a Capped reader returns past its cap.
var ErrTooLarge = errors.New("more data than the reader's cap")

// Capped reads r up to limit bytes, then fails with ErrTooLarge if r has more:
// the decompressed side of a gzip reader, against gzip bombs.
func Capped(r io.Reader, limit int64) io.Reader { return &capped{r: r, left: limit} }

type capped struct {
	r    io.Reader
	left int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// At the cap: only the end of the stream is fine.
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			return 0, ErrTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
