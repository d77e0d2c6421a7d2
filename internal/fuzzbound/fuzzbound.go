// Package fuzzbound holds fuzz targets to resource bounds: it measures what one call
// allocates and how long it takes, and checks that against a budget linear in the
// input (its bytes, and the values of the step grid it declares). A data file is
// untrusted input, so "no panic" is not enough of a property: a small file that
// makes a report allocate gigabytes, or compute for minutes, is a bug too.
//
// It is for tests only.
package fuzzbound

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"testing"
	"time"
)

// allocsMetric is the heap's cumulative allocation in bytes. Allocation, rather
// than the peak of the live heap, is what is measured and bounded:
//
//   - it is deterministic: the same call allocates the same bytes whenever the
//     garbage collector runs, where a sampled live heap depends on GC timing (and
//     on how often it is sampled);
//   - it bounds the peak: what a call adds to the live heap at any moment is at
//     most what it has allocated, so a bound on allocation is a bound on the
//     memory a call can make a process hold;
//   - and it also catches the churn (copies, per-point garbage) that costs time.
//
// The runtime counts a span's free slots as allocated when a P takes the span, so
// the figure is off by the spans the call's Ps take: usually some hundreds of KB,
// but when a garbage collection flushes the caches during the call, up to one span
// of each span class (2 x 68 size classes, 2.6 MiB in all with Go 1.26's classes) a
// P. A budget's Constant must cover that: 4 MiB or more (1 MiB failed in CI on a
// 4 KB file that allocates nothing on its own).
const allocsMetric = "/gc/heap/allocs:bytes"

// Usage is what one call cost.
type Usage struct {
	Allocated uint64        // bytes allocated on the heap while it ran (by any goroutine)
	Elapsed   time.Duration // wall-clock time
}

func (u Usage) String() string {
	return fmt.Sprintf("%d bytes allocated in %v", u.Allocated, u.Elapsed.Round(time.Microsecond))
}

// Measure runs f once and returns what it cost. Allocations of other goroutines
// during f are counted too: a test measures with nothing else running, and what
// f starts (goroutines of its own) is its cost.
func Measure(f func()) Usage {
	s := []metrics.Sample{{Name: allocsMetric}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	start := time.Now()
	f()
	elapsed := time.Since(start)
	metrics.Read(s)
	return Usage{Allocated: s[0].Value.Uint64() - before, Elapsed: elapsed}
}

// Budget is what a call may cost: bytes allocated and time, each linear in its
// input. Linear, because what a report does with a data file should be: a
// constant is wrong for files of any size, and a bound that grows faster than the
// input lets a small file cost without bound.
type Budget struct {
	// PerInputByte is the bytes a call may allocate per byte of its input (for a
	// data file, of its JSON, decompressed).
	PerInputByte float64
	// PerGridValue is the bytes a call may allocate per value of the step grid it
	// builds (points x series put on it): 8 is one float64 each.
	PerGridValue float64
	// Constant is allocation any call may make (buffers, tables, the page's
	// inlined script), whatever its input.
	Constant uint64

	// Time, NsPerInputByte and NsPerGridValue bound the wall-clock time of one
	// call likewise: Time, plus so many nanoseconds per input byte and per grid
	// value. Time is checked only while fuzzing (Fuzzing): a plain test run must
	// not depend on the machine's speed or load. A zero Time is no bound.
	Time                           time.Duration
	NsPerInputByte, NsPerGridValue float64
}

// Limit is the bytes b lets a call allocate for inputBytes of input and a grid of
// gridValues values (float64: a grid is checked before it is built, and a product
// of counts may not fit an int).
func (b Budget) Limit(inputBytes int, gridValues float64) float64 {
	return b.PerInputByte*float64(inputBytes) + b.PerGridValue*gridValues + float64(b.Constant)
}

// TimeLimit is the time b lets a call take for inputBytes of input and a grid of
// gridValues values; 0 is no bound.
func (b Budget) TimeLimit(inputBytes int, gridValues float64) time.Duration {
	if b.Time <= 0 {
		return 0
	}
	return b.Time + time.Duration(b.NsPerInputByte*float64(inputBytes)+b.NsPerGridValue*gridValues)
}

// Check says whether u is within b for inputBytes of input and a grid of
// gridValues values: nil if so, else an error giving the numbers (what was used,
// what the budget allowed, and how the allowance was made up).
func (b Budget) Check(u Usage, inputBytes int, gridValues float64) error {
	if limit := b.Limit(inputBytes, gridValues); float64(u.Allocated) > limit {
		return fmt.Errorf("allocated %d bytes (%.1fx the budget): the budget is %.0f = %g/input byte x %d bytes + %g/grid value x %.0f values + %d",
			u.Allocated, float64(u.Allocated)/limit, limit, b.PerInputByte, inputBytes, b.PerGridValue, gridValues, b.Constant)
	}
	if limit := b.TimeLimit(inputBytes, gridValues); limit > 0 && Fuzzing() && u.Elapsed > limit {
		return fmt.Errorf("took %v (%.1fx the budget): the budget is %v = %v + %g ns/input byte x %d bytes + %g ns/grid value x %.0f values (%d bytes allocated)",
			u.Elapsed, float64(u.Elapsed)/float64(limit), limit, b.Time, b.NsPerInputByte, inputBytes, b.NsPerGridValue, gridValues, u.Allocated)
	}
	return nil
}

// Fuzzing says whether the test binary runs with -test.fuzz (go test -fuzz), in the
// coordinator or a worker (which gets the same flags): only then are times checked.
// Plain go test runs the fuzz targets' corpora as unit tests, and those must pass on
// a slow or loaded machine.
func Fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

// Verbose says whether the environment asks the fuzz targets to log every
// input's usage against its budget (FUZZBOUND_LOG=1 go test -v -run FuzzX): that
// is how the budgets were measured.
func Verbose() bool { return os.Getenv("FUZZBOUND_LOG") != "" }

// KeepSeeds keeps generated seeds in a fuzz target's corpus folder dir
// (testdata/fuzz/FuzzX), each as the file hostile-NAME: it fails t where a file
// is missing or differs from what the generator makes now, and with
// BLOATBENCH_WRITE_SEEDS=1 in the environment writes the files instead. Seeds that
// stand for crafted files are generated by code, so that what each one is stays
// readable beside the target, and committed, so that plain go test runs them.
func KeepSeeds(t testing.TB, dir string, seeds map[string][]byte) {
	t.Helper()
	for name, data := range seeds {
		path := filepath.Join(dir, "hostile-"+name)
		want := CorpusFile(data)
		if os.Getenv("BLOATBENCH_WRITE_SEEDS") != "" {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not the seed the test makes (%v): BLOATBENCH_WRITE_SEEDS=1 go test -run %s writes it", path, err, t.Name())
		}
	}
}

// CorpusFile is data as a file of go test's fuzz corpus (testdata/fuzz/FuzzX/NAME)
// for a target of one []byte argument, as go test writes one: for seeds generated
// by code rather than typed.
func CorpusFile(data []byte) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", data)
}
