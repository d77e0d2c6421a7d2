package report

import (
	"math"
	"sort"
	"strings"

	"github.com/bloatbench/bloatbench/datafile"
)

// bottleneckRows summarises each bottleneck device's statistics over the window when
// the streams run: drops and ECN marks as rates of their per-step counter deltas,
// backlog as sampled, BQL inflight and limit summed over the tx queues (seed 003
// quotes the limit BQL settles at), and for dualpi2 the L4S and classic packet
// rates.
func bottleneckRows(run *datafile.Run, from, to float64) []Row {
	type dev struct {
		counters map[string][][]datafile.Sample // row -> series that add up to it
		gauges   map[string][][]datafile.Sample
	}
	devs := map[string]*dev{}
	get := func(name string) *dev {
		d := devs[name]
		if d == nil {
			d = &dev{counters: map[string][][]datafile.Sample{}, gauges: map[string][][]datafile.Sample{}}
			devs[name] = d
		}
		return d
	}
	for _, se := range run.Series {
		kind, rest, _ := strings.Cut(se.Name, " ")
		hostDev, stat, _ := strings.Cut(rest, " ")
		ss := run.Samples[se.Name]
		switch kind {
		case datafile.KindQdisc:
			where, field, _ := strings.Cut(stat, " ")
			d := get(hostDev)
			switch {
			case where == "root" && field == "drops":
				d.counters["drops"] = append(d.counters["drops"], ss)
			case where == "root" && field == "backlog":
				d.gauges["backlog"] = append(d.gauges["backlog"], ss)
			case strings.HasSuffix(field, "ecn_mark") || strings.HasSuffix(field, "ecn_marked_frames"):
				d.counters["ECN marks"] = append(d.counters["ECN marks"], ss)
			case field == "pkts_in_l":
				d.counters["L4S pkts"] = append(d.counters["L4S pkts"], ss)
			case field == "pkts_in_c":
				d.counters["classic pkts"] = append(d.counters["classic pkts"], ss)
			}
		case datafile.KindBQL:
			switch {
			case strings.HasSuffix(stat, " inflight"):
				get(hostDev).gauges["BQL inflight"] = append(get(hostDev).gauges["BQL inflight"], ss)
			case strings.HasSuffix(stat, " limit"):
				get(hostDev).gauges["BQL limit"] = append(get(hostDev).gauges["BQL limit"], ss)
			}
		}
	}
	var rows []Row
	for name, d := range devs {
		for row, series := range d.counters {
			rows = append(rows, rowOf("Qdisc "+name+" "+row, "pkts/s", sumRates(series, from, to)))
		}
		for row, series := range d.gauges {
			label := "Qdisc " + name + " " + row
			if b, ok := strings.CutPrefix(row, "BQL "); ok {
				label = "BQL " + name + " " + b
			}
			rows = append(rows, rowOf(label, "bytes", sumGauges(series, from, to)))
		}
	}
	return rows
}

// sumRates turns each counter series into per-interval rates (a counter that went
// down was reset: that interval is skipped) and adds the series up per sample time.
func sumRates(series [][]datafile.Sample, from, to float64) []float64 {
	byT := map[float64]float64{}
	for _, ss := range series {
		for i := 1; i < len(ss); i++ {
			dt := ss[i].T - ss[i-1].T
			dv := ss[i].V - ss[i-1].V
			if dt <= 0 || dv < 0 || ss[i].T < from || ss[i].T > to {
				continue
			}
			byT[ss[i].T] += dv / dt
		}
	}
	return sortedValues(byT)
}

// sumGauges adds gauge series sampled in the same step (one agent tick stamps them
// alike) within the window.
func sumGauges(series [][]datafile.Sample, from, to float64) []float64 {
	byT := map[float64]float64{}
	for _, ss := range series {
		for _, s := range ss {
			if s.T >= from && s.T <= to {
				byT[s.T] += s.V
			}
		}
	}
	return sortedValues(byT)
}

func sortedValues(m map[float64]float64) []float64 {
	ts := make([]float64, 0, len(m))
	for t := range m {
		ts = append(ts, t)
	}
	sort.Float64s(ts)
	out := make([]float64, 0, len(ts))
	for _, t := range ts {
		if !math.IsNaN(m[t]) {
			out = append(out, m[t])
		}
	}
	return out
}
