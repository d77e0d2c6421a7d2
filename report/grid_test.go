package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// A run made in code (not read from a file, whose reader refuses such headers) with
// a total length or step no run has gets a bounded grid: no panic, no gigabytes.
func TestGridOfAbsurdMetadata(t *testing.T) {
	for _, m := range []datafile.Metadata{
		{T0: 1000, Step: 0.2, TotalLength: -14},
		{T0: 1000, Step: 0.2, TotalLength: math.NaN()},
		{T0: 1000, Step: math.Inf(1), TotalLength: 14},
		{T0: 1000, Step: -1, TotalLength: 14},
		{T0: 1000, Step: 1e-9, TotalLength: 60},
		{T0: 1000, Step: 0.2, TotalLength: math.Inf(1)},
	} {
		g := GridOf(m)
		if g.N < 1 || g.N > datafile.MaxGridPoints || !(g.Step > 0) || math.IsInf(g.Step, 0) {
			t.Errorf("GridOf(step %v, total %v) = %+v", m.Step, m.TotalLength, g)
			continue
		}
		run := &datafile.Run{Metadata: m, Samples: map[string][]datafile.Sample{
			"TCP download::1": {{T: 1001, V: 5, Dur: 0.2}}, "Ping (ms) ICMP": {{T: 1001, V: 1}}}}
		run.Series = []datafile.Series{{Name: "TCP download::1", Kind: datafile.KindTCP, Direction: "download"},
			{Name: "Ping (ms) ICMP", Kind: datafile.KindPing}}
		SummarizeWith(run, Options{})
		PingSlots(g, run.Samples["Ping (ms) ICMP"])
	}
}

// pingSlotsByScan is PingSlots as it was first written: for each reply in arrival
// order, a search from its nearest point for the first free one. The one pass must
// give the same slots.
func pingSlotsByScan(g Grid, samples []datafile.Sample) []int {
	order := make([]int, len(samples))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return samples[order[a]].T < samples[order[b]].T })
	taken := make([]bool, g.N)
	slots := make([]int, len(samples))
	for _, i := range order {
		slots[i] = -1
		if samples[i].Lost {
			continue
		}
		for k := max(g.Index(samples[i].T), 0); k < g.N; k++ {
			if !taken[k] {
				taken[k], slots[i] = true, k
				break
			}
		}
	}
	return slots
}

func TestPingSlotsAsTheScanGives(t *testing.T) {
	g := Grid{T0: 1000, Step: 0.2, N: 50}
	rng := rand.New(rand.NewPCG(1, 2))
	cases := map[string][]datafile.Sample{
		"none":                          nil,
		"on the grid":                   {{T: 1000}, {T: 1000.2}, {T: 1000.4}},
		"two in one step":               {{T: 1000.21}, {T: 1000.19}, {T: 1000.4}},
		"before t0":                     {{T: 990}, {T: 999.9}, {T: 1000}},
		"past the end":                  {{T: 1009.8}, {T: 1009.8}, {T: 1020}},
		"lost among them":               {{T: 1000.2, Lost: true}, {T: 1000.2}, {T: 1000.2}},
		"all at t0, more than the grid": make([]datafile.Sample, 80),
	}
	for k := range cases["all at t0, more than the grid"] {
		cases["all at t0, more than the grid"][k].T = 1000
	}
	for n := range 20 {
		var ss []datafile.Sample
		for range rng.IntN(120) {
			ss = append(ss, datafile.Sample{T: 998 + rng.Float64()*14, Lost: rng.IntN(10) == 0})
		}
		cases[fmt.Sprintf("random %d", n)] = ss
	}
	for name, ss := range cases {
		if got, want := PingSlots(g, ss), pingSlotsByScan(g, ss); !slices.Equal(got, want) {
			t.Errorf("%s: slots %v, want %v", name, got, want)
		}
	}
}

// 200,000 replies at t0 (a crafted file) take the grid's points in turn and leave
// the rest off the grid: one pass, not a search per reply.
func TestPingSlotsOfManyRepliesAtT0(t *testing.T) {
	g := Grid{T0: 1000, Step: 0.2, N: 71}
	ss := make([]datafile.Sample, 200_000)
	for i := range ss {
		ss[i].T = 1000
	}
	slots := PingSlots(g, ss)
	for i, k := range slots {
		if want := -1; i < g.N && k != i || i >= g.N && k != want {
			t.Fatalf("reply %d in slot %d", i, k)
		}
	}
}
