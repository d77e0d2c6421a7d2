package sojourn

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestBucketOf(t *testing.T) {
	for _, c := range []struct {
		ns   uint64
		want int
	}{
		{0, 0}, {1, 1}, {31, 31},
		{32, 32}, {33, 33}, {63, 63}, // 2^5: one bucket per ns
		{64, 64}, {65, 64}, {66, 65}, {127, 95}, // 2^6: two ns a bucket
		{128, 96},
		{1 << 20, (20-subBits+1)*subs + 0},
		{1<<20 + 1<<15, (20-subBits+1)*subs + 1},
		{1<<maxExp - 1, Buckets - 1},
		{1 << maxExp, Buckets - 1}, {math.MaxUint64, Buckets - 1},
	} {
		if got := BucketOf(c.ns); got != c.want {
			t.Errorf("BucketOf(%d) = %d, want %d", c.ns, got, c.want)
		}
	}
}

// Every time falls in its bucket's bounds, a bucket is at most 1/32 of its lower
// bound wide, and its midpoint is within 1/64 of any time in it; buckets tile the
// line with no gap.
func TestBucketBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		ns := r.Uint64N(1 << maxExp)
		if r.IntN(4) == 0 {
			ns = r.Uint64N(4096)
		}
		b := BucketOf(ns)
		lo, hi := Bounds(b)
		if float64(ns) < lo || float64(ns) >= hi {
			t.Fatalf("%d ns in bucket %d [%v, %v)", ns, b, lo, hi)
		}
		if ns >= subs {
			if (hi-lo)/lo > 1.0/32+1e-12 {
				t.Fatalf("bucket %d [%v, %v) wider than 1/32", b, lo, hi)
			}
			if m := Mid(b); math.Abs(m-float64(ns))/float64(ns) > 1.0/64+1e-12 {
				t.Fatalf("%d ns: midpoint %v of bucket %d is %.3f%% off", ns, m, b, 100*math.Abs(m-float64(ns))/float64(ns))
			}
		}
	}
	for b := 1; b < Buckets; b++ {
		_, hi := Bounds(b - 1)
		if lo, _ := Bounds(b); lo != hi {
			t.Fatalf("bucket %d starts at %v, bucket %d ends at %v", b, lo, b-1, hi)
		}
	}
}

func TestCountsStatistics(t *testing.T) {
	ms := func(v float64) int { return BucketOf(uint64(v * 1e6)) }
	for _, c := range []struct {
		name                string
		counts              Counts
		p50, p99, mean, tol float64 // ms
		total               uint64
	}{
		{"none", Counts{}, math.NaN(), math.NaN(), math.NaN(), 0, 0},
		{"one bucket", Counts{ms(10): 7}, 10, 10, 10, 0.016, 7},
		{"two halves", Counts{ms(1): 50, ms(20): 50}, 1, 20, 10.5, 0.016, 100},
		{"a tail", Counts{ms(2): 98, ms(50): 1, ms(100): 1}, 2, 50, 3.46, 0.016, 100},
		{"median on the boundary", Counts{ms(3): 1, ms(5): 1}, 3, 5, 4, 0.016, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.counts.Total(); got != c.total {
				t.Errorf("total %d, want %d", got, c.total)
			}
			for _, q := range []struct {
				what      string
				got, want float64
			}{{"p50", c.counts.Quantile(0.5) / 1e6, c.p50}, {"p99", c.counts.Quantile(0.99) / 1e6, c.p99}, {"mean", c.counts.Mean() / 1e6, c.mean}} {
				if math.IsNaN(q.want) != math.IsNaN(q.got) || !math.IsNaN(q.want) && math.Abs(q.got-q.want) > q.want*c.tol {
					t.Errorf("%s %v ms, want %v", q.what, q.got, q.want)
				}
			}
		})
	}
	a := Counts{1: 2, 40: 1}
	a.Add(Counts{40: 3, 90: 1})
	if a[1] != 2 || a[40] != 4 || a[90] != 1 || a.Total() != 7 {
		t.Errorf("Add: %v", a)
	}
}

// The traced devices are constants of the programs, MaxDevices of them at most:
// more is refused before anything is loaded, saying so.
func TestOpenRefusesMoreDevicesThanItTraces(t *testing.T) {
	devs := make([]string, MaxDevices+1)
	for i := range devs {
		devs[i] = "lo"
	}
	_, err := Open(devs, nil)
	if err == nil || !strings.Contains(err.Error(), "at most 16 devices") {
		t.Fatalf("Open of %d devices: %v", len(devs), err)
	}
}
