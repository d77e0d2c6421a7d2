package report

import (
	"math"
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
