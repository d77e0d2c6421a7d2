package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/bloatbench/bloatbench/datafile"
)

// MaxGridMiss is the share of its grid a series may miss before the summary warns:
// every series of a run starts at t0 (the streams at t0 + delay) and has a point
// each step, so a series that misses more started late, stalled or lost its agent.
const MaxGridMiss = 0.05

// GridWarnings says which series of a complete run miss more than MaxGridMiss of
// their grid within the window [from, to) (seconds on the run's clock; infinities
// for the whole run). Each series is checked over its job's window (the series'
// Start and Duration; in files from before them the streams' for flows, the whole
// run for the rest): probes' round trips (ICMP's, a UDP probe's; a lost probe is
// a point: the network lost it, the prober did not), qdisc and BQL samples, TCP
// flows. A request/response client's are not: its samples come as transactions
// complete, and a step with none is what a queue longer than a step does. Only series an agent measured
// are checked (flent's files name no host, and their runners start when they
// start); an incomplete run is not checked.
func GridWarnings(run *datafile.Run, from, to float64) []string {
	if run.Incomplete {
		return nil
	}
	m := run.Metadata
	g := GridOf(m)
	end := m.T0 + m.TotalLength
	loadStart, loadEnd := m.T0+m.Delay, m.T0+m.Delay+m.Length
	type miss struct {
		name          string
		missing, want int
	}
	var misses []miss
	for _, se := range run.Series {
		if se.Host == "" {
			continue
		}
		ss := run.Samples[se.Name]
		var have []bool
		// first and last are the window's points, by index; a point counts when
		// its time is within [from, to) too.
		var first, last int
		role := datafile.Classify(se).Role
		if role.Attribution() {
			// Counts, sampled as they change, or none: no grid to cover.
			continue
		}
		// The job's window: what the series says, else (files from before it)
		// the streams' for flows and the whole run for the rest.
		ws, we := m.T0, end
		switch {
		case se.Duration > 0:
			ws, we = m.T0+se.Start, m.T0+se.Start+se.Duration
		case role == datafile.RoleFlow:
			ws, we = loadStart, loadEnd
		}
		switch {
		case role == datafile.RoleProbe && intervals(ss):
			// A request/response client's samples come as its transactions
			// complete: behind a queue longer than a step (pfifo_fast's, in the
			// VM lab's seed tests, near a second) a step has none, and that is
			// the measurement, not a stall.
			continue
		case role == datafile.RoleFlow:
			// A flow's intervals cover (start, end]: the point at the window's
			// start has none.
			first, last = g.Index(ws)+1, g.Index(we)
			vs := AlignIntervals(g, ss)
			have = make([]bool, g.N)
			for k, v := range vs {
				have[k] = !math.IsNaN(v)
			}
		case role == datafile.RoleProbe:
			// Probe k goes at the window's start + k*step: the last point, at its
			// end, has none.
			first, last = g.Index(ws), g.Index(we)-1
			have = make([]bool, g.N)
			for _, s := range ss {
				if k := g.Index(sentAt(s)); k >= 0 && k < g.N {
					have[k] = true
				}
			}
		case role == datafile.RoleQdisc || role == datafile.RoleTxQueue:
			first, last = g.Index(ws), g.Index(we)-1
			have = make([]bool, g.N)
			for _, s := range ss {
				if k := g.Index(s.T); k >= 0 && k < g.N {
					have[k] = true
				}
			}
		default:
			continue
		}
		mi := miss{name: se.Name}
		for k := max(first, 0); k <= min(last, g.N-1); k++ {
			if t := g.Time(k); t < from || t >= to {
				continue
			}
			mi.want++
			if !have[k] {
				mi.missing++
			}
		}
		if mi.want > 0 && float64(mi.missing) > MaxGridMiss*float64(mi.want) {
			misses = append(misses, mi)
		}
	}
	var out []string
	for _, mi := range misses {
		out = append(out, fmt.Sprintf("%s has %d of its %d grid points (misses %.0f%%, more than %.0f%%): it started late or stopped sampling",
			mi.name, mi.want-mi.missing, mi.want, 100*float64(mi.missing)/float64(mi.want), 100*MaxGridMiss))
	}
	// A device's statistics are sampled together: when many miss alike, say it once.
	const most = 6
	if len(out) > most {
		names := make([]string, 0, len(misses)-most+1)
		for _, mi := range misses[most-1:] {
			names = append(names, mi.name)
		}
		// Name a few: a device's many statistics would fill a screen.
		const named = 8
		list := strings.Join(names, ", ")
		if len(names) > named {
			list = strings.Join(names[:named], ", ") + fmt.Sprintf(" and %d others", len(names)-named)
		}
		out = append(out[:most-1], fmt.Sprintf("and %d more series miss more than %.0f%% of their grid: %s", len(names), 100*MaxGridMiss, list))
	}
	return out
}
