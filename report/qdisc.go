package report

import (
	"math"
	"slices"
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
		st, ok := BottleneckStat(se)
		if !ok {
			continue
		}
		d := get(st.Host + ":" + st.Dev)
		if st.Counter {
			d.counters[st.Row] = append(d.counters[st.Row], run.Samples[se.Name])
		} else {
			ss := run.Samples[se.Name]
			if st.Row == "L queue delay" || st.Row == "C queue delay" {
				ss = unclamped(ss)
			}
			d.gauges[st.Row] = append(d.gauges[st.Row], ss)
		}
	}
	var rows []Row
	for name, d := range devs {
		for row, series := range d.counters {
			r := rowOf("Qdisc "+name+" "+row, "pkts/s", sumRates(series, from, to))
			r.Key = Key{Family: FamilyBottleneck, Dev: name, Stat: row}
			rows = append(rows, r)
		}
		for row, series := range d.gauges {
			label := "Qdisc " + name + " " + row
			if b, ok := strings.CutPrefix(row, "BQL "); ok {
				label = "BQL " + name + " " + b
			}
			units, scale, peak := gaugeRow(row)
			var vs []float64
			if peak {
				vs = peakGauges(series, from, to)
			} else {
				vs = sumGauges(series, from, to)
			}
			for i := range vs {
				vs[i] /= scale
			}
			r := rowOf(label, units, vs)
			r.Key = Key{Family: FamilyBottleneck, Dev: name, Stat: row}
			rows = append(rows, r)
		}
	}
	return rows
}

// unclamped reads dualpi2's queue delays as Flatten records them since it knew of
// the clamp (qdisc.DualPI2DelayClamped, the u32 dualpi2 prints for a negative
// delay, is a delay of 0; report reads files and imports nothing that talks to
// hosts, so the value is repeated here), for files recorded before: one such
// sample made a run's L queue delay avg 28,826 ms.
func unclamped(ss []datafile.Sample) []datafile.Sample {
	if !slices.ContainsFunc(ss, isClamped) {
		return ss
	}
	out := slices.Clone(ss)
	for i := range out {
		if isClamped(out[i]) {
			out[i].V = 0
		}
	}
	return out
}

func isClamped(s datafile.Sample) bool { return s.V == 1<<32-1 }

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

// peakGauges is the largest of gauge series sampled in the same step, within the
// window.
func peakGauges(series [][]datafile.Sample, from, to float64) []float64 {
	byT := map[float64]float64{}
	for _, ss := range series {
		for _, s := range ss {
			if s.T < from || s.T > to {
				continue
			}
			if v, ok := byT[s.T]; !ok || s.V > v {
				byT[s.T] = s.V
			}
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

// DevStat is what a bottleneck statistic series is for the reports: the device it
// was sampled on and the row it adds to.
type DevStat struct {
	Host, Dev string
	// Row is the statistic's row: "drops", "backlog", "ECN marks", "L4S pkts",
	// "classic pkts", "L queue delay", "C queue delay", "prob", "step marks",
	// "tin N peak delay", "tin N avg delay", "tin N backlog", "tin N drops",
	// "BQL inflight", "BQL limit".
	Row string
	// Counter says the row adds up per-step deltas (rates); else values as sampled.
	Counter bool
}

// placeOf is a device series' host, device and statistic ("1:1 new_flows_len",
// "inflight"): its fields, or in files from before them its name's words.
func placeOf(se datafile.Series) (host, dev, stat string) {
	host, dev, stat = se.Host, se.Dev, se.Stat
	if dev == "" || stat == "" {
		_, rest, _ := strings.Cut(se.Name, " ")
		hostDev, s, _ := strings.Cut(rest, " ")
		host, dev, _ = strings.Cut(hostDev, ":")
		stat = s
		if datafile.Classify(se).Role == datafile.RoleTxQueue {
			_, stat, _ = strings.Cut(s, " ") // "tx-0 inflight"
		}
	}
	return host, dev, stat
}

// FlowList classifies, for the plots, the lengths of a flow-queuing qdisc's
// lists (fq_codel's and fq_pie's new_flows_len and old_flows_len, of any qdisc
// on the device: mq's children add up): Row is "new flows" or "old flows". A
// flow that sends in bursts is new again after each and served ahead of the
// flows that keep a queue, which stay old; how many of each the qdisc holds is
// its picture over time, and no summary row.
func FlowList(se datafile.Series) (DevStat, bool) {
	if datafile.Classify(se).Role != datafile.RoleQdisc {
		return DevStat{}, false
	}
	host, dev, stat := placeOf(se)
	_, field, _ := strings.Cut(stat, " ")
	list := map[string]string{"new_flows_len": "new flows", "old_flows_len": "old flows"}[field]
	if list == "" || dev == "" {
		return DevStat{}, false
	}
	return DevStat{Host: host, Dev: dev, Row: list}, true
}

// BottleneckStat classifies a series for every report that shows the bottleneck
// (summary, compare, plot), so that they agree: a cake's ECN marks are its tins'
// (it has no total of its own), an fq_codel's its root's. Series carry their
// device and statistic (Dev, Queue, Stat); files from before those fields say the
// same in the name ("qdisc HOST:DEV WHERE FIELD", "bql HOST:DEV tx-N STAT").
func BottleneckStat(se datafile.Series) (DevStat, bool) {
	role := datafile.Classify(se).Role
	if role != datafile.RoleQdisc && role != datafile.RoleTxQueue {
		return DevStat{}, false
	}
	host, dev, stat := placeOf(se)
	st := DevStat{Host: host, Dev: dev}
	if role == datafile.RoleTxQueue {
		switch stat {
		case "inflight":
			st.Row = "BQL inflight"
		case "limit":
			st.Row = "BQL limit"
		default:
			return DevStat{}, false
		}
		return st, true
	}
	where, field, _ := strings.Cut(stat, " ")
	switch {
	case where == "root" && field == "drops":
		st.Row, st.Counter = "drops", true
	case where == "root" && field == "backlog":
		st.Row = "backlog"
	case strings.HasSuffix(field, "ecn_mark") || strings.HasSuffix(field, "ecn_marked_frames"):
		st.Row, st.Counter = "ECN marks", true
	case field == "pkts_in_l":
		st.Row, st.Counter = "L4S pkts", true
	case field == "pkts_in_c":
		st.Row, st.Counter = "classic pkts", true
	// dualpi2's two queues: each one's head-of-queue delay (µs), the base
	// probability its PI controller settled at (fq_pie and pie print "prob" too),
	// and the L queue's marks by its step threshold.
	case field == "delay_l":
		st.Row = "L queue delay"
	case field == "delay_c":
		st.Row = "C queue delay"
	case field == "prob":
		st.Row = "prob"
	case field == "step_mark" || field == "step_marks": // iproute2 7.2 prints step-mark
		st.Row, st.Counter = "step marks", true
	default:
		// cake's tins, each its own: "tin2.peak_delay_us" is tin 2's.
		tin, stat, ok := strings.Cut(field, ".")
		n, isTin := strings.CutPrefix(tin, "tin")
		if !ok || !isTin || n == "" || strings.Trim(n, "0123456789") != "" {
			return DevStat{}, false
		}
		switch stat {
		case "peak_delay_us":
			st.Row = "tin " + n + " peak delay"
		case "avg_delay_us":
			st.Row = "tin " + n + " avg delay"
		case "backlog_bytes":
			st.Row = "tin " + n + " backlog"
		case "drops":
			st.Row, st.Counter = "tin "+n+" drops", true
		default:
			return DevStat{}, false
		}
	}
	return st, true
}

// gaugeRow is how a gauge row puts its series (a device's qdiscs: an mq's
// children, cake's instances) together in a step, and in what units: bytes add
// up; a delay or a probability is the device's worst, since an idle child's zero
// is no part of the queue the packets met. Delays are printed in ms, as tc's
// µs divided by scale.
func gaugeRow(row string) (units string, scale float64, peak bool) {
	switch {
	case strings.HasSuffix(row, " delay"):
		return "ms", 1000, true
	case row == "prob":
		return "prob", 1, true
	}
	return "bytes", 1, false
}
