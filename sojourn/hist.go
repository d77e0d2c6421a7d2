package sojourn

import (
	"math"
	"math/bits"
	"sort"
)

// The buckets of bpf/sojourn.c: times below 2^subBits ns exact, then 2^subBits
// buckets per power of two up to 2^maxExp ns, the last bucket holding everything
// longer. A bucket is at most 1/32 of its lower bound wide, so its midpoint is
// within 1/64 (1.6%) of any time in it: p50, p99 and max within 5% as asked.
const (
	subBits = 5
	subs    = 1 << subBits
	maxExp  = 36
	// Buckets is the number of buckets, as bpf/sojourn.c has it.
	Buckets = (maxExp - subBits + 1) * subs
)

// BucketOf is the bucket of a sojourn of ns nanoseconds, as the BPF program
// computes it.
func BucketOf(ns uint64) int {
	if ns < subs {
		return int(ns)
	}
	e := bits.Len64(ns) - 1
	if e >= maxExp {
		return Buckets - 1
	}
	return (e-subBits+1)*subs + int((ns>>(e-subBits))&(subs-1))
}

// Bounds are the times a bucket holds, in ns: from lo to below hi.
func Bounds(b int) (lo, hi float64) {
	if b < subs {
		return float64(b), float64(b + 1)
	}
	e := b/subs + subBits - 1
	m := b % subs
	width := math.Ldexp(1, e-subBits)
	lo = float64(subs+m) * width
	return lo, lo + width
}

// Mid is a bucket's representative time in ns: its midpoint.
func Mid(b int) float64 {
	lo, hi := Bounds(b)
	return (lo + hi) / 2
}

// Counts are a histogram's non-empty buckets: bucket index to packets.
type Counts map[int]uint64

// Add adds o into c.
func (c Counts) Add(o Counts) {
	for b, n := range o {
		c[b] += n
	}
}

// Total is the number of packets in c.
func (c Counts) Total() uint64 {
	var t uint64
	for _, n := range c {
		t += n
	}
	return t
}

// Quantile is the time (ns, a bucket's midpoint) below which a fraction q of the
// packets fall: the bucket holding the ceil(q*total)-th packet. NaN for none.
func (c Counts) Quantile(q float64) float64 {
	total := c.Total()
	if total == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	var seen uint64
	for _, b := range c.sorted() {
		seen += c[b]
		if seen >= rank {
			return Mid(b)
		}
	}
	return Mid(c.sorted()[len(c)-1])
}

// Mean is the packets' mean time in ns from the buckets' midpoints; NaN for none.
func (c Counts) Mean() float64 {
	var sum float64
	var n uint64
	for b, k := range c {
		sum += Mid(b) * float64(k)
		n += k
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func (c Counts) sorted() []int {
	bs := make([]int, 0, len(c))
	for b := range c {
		bs = append(bs, b)
	}
	sort.Ints(bs)
	return bs
}
