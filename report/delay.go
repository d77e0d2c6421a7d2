package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/bloatbench/bloatbench/datafile"
)

// Where a run's delay went: the qdiscs under test measured from inside (the
// kernel's per-packet sojourn, or their backlog over the rate they drained at), the
// driver's ring behind them (BQL inflight over that rate), and what the loaded
// ping's excess over idle has beyond both. The most common failure of AQM tests
// is a queue that builds somewhere other than the qdisc under test; this says so.

// SojournSuffix, DrainSuffix name a bottleneck device's own rows:
// "Qdisc HOST:DEV sojourn" (ms) and "Qdisc HOST:DEV drain rate" (Mbit/s).
const (
	SojournSuffix = " sojourn"
	// EchoSojournSuffix ends the row of the ICMP echo packets' own sojourn.
	EchoSojournSuffix = " ICMP sojourn"
	// EchoSuffix ends the Stat of a sojourn series of the echo packets alone
	// (runners.EchoSuffix).
	EchoSuffix  = " echo"
	DrainSuffix = " drain rate"
)

// The Stat of those rows' keys: their names' suffixes without the space.
const (
	SojournStat     = "sojourn"
	EchoSojournStat = "ICMP sojourn"
	DrainStat       = "drain rate"
	ConfiguredStat  = "configured rate"
)

// keyed is r with its key.
func keyed(r Row, k Key) Row {
	r.Key = k
	return r
}

// MinQdiscShare is the share of the loaded ping's excess delay below which a run's
// qdiscs under test were not its bottleneck: the run is warned of it.
const MinQdiscShare = 0.5

// DelayAttribution splits the loaded ping's median excess over idle.
type DelayAttribution struct {
	ExcessMs float64 `json:"excess_ms"`
	QdiscMs  float64 `json:"qdisc_ms"`
	RingMs   float64 `json:"ring_ms"`
	// OtherMs is the excess neither holds: a queue elsewhere (upstream, the
	// other direction, the receiver), never below 0.
	OtherMs float64 `json:"other_ms"`
	// QdiscShare is QdiscMs over ExcessMs, at most 1.
	QdiscShare float64 `json:"qdisc_share"`
	// Source says how QdiscMs was had: "sojourn" (the kernel's, every device: the
	// ping's own packets' where the tracer counted them apart),
	// "backlog" (backlog over drain rate, every device) or "mixed".
	Source string `json:"source"`
	// Devices are the devices under test, HOST:DEV, with each one's delay.
	Devices []DeviceDelay `json:"devices"`
}

// DeviceDelay is one device's part.
type DeviceDelay struct {
	Dev     string  `json:"dev"`
	QdiscMs float64 `json:"qdisc_ms"`
	RingMs  float64 `json:"ring_ms"`
	// Source is "ICMP sojourn" (the ping's own packets' median wait in the
	// qdisc), "sojourn" (every packet's: files from before the echo packets were
	// counted apart) or "backlog".
	Source string `json:"source"`
}

// Warning is the run's warning when its qdiscs held less than MinQdiscShare of
// the excess; "" otherwise.
func (d *DelayAttribution) Warning() string {
	if d == nil || d.QdiscShare >= MinQdiscShare || d.ExcessMs < minExcessMs {
		return ""
	}
	devs := make([]string, len(d.Devices))
	for i, dd := range d.Devices {
		devs[i] = dd.Dev
	}
	return fmt.Sprintf("the qdiscs under test (%s) held %.0f%% of the loaded ping's %.2f ms over idle (%.2f ms; the driver's ring %.2f ms, elsewhere %.2f ms): the queue that delayed it is not the one under test",
		strings.Join(devs, ", "), 100*d.QdiscShare, d.ExcessMs, d.QdiscMs, d.RingMs, d.OtherMs)
}

// minExcessMs is the least excess worth attributing: below it the split is noise.
const minExcessMs = 1.0

// devSeries are a bottleneck device's series for the attribution.
type devSeries struct {
	sojourn  [][]datafile.Sample
	echo     [][]datafile.Sample // the ICMP echo packets' own sojourn
	bytes    []datafile.Sample   // the root qdisc's byte counter
	backlog  []datafile.Sample
	inflight [][]datafile.Sample
	// shaper is the rate its shaper was set to, step by step, under a setup's
	// rate schedule (Mbit/s); nil when the rate stayed as configured.
	shaper []datafile.Sample
}

// scheduled is a rate schedule's samples, in time order, with when each
// sample's rate came into force (the first of the run of equal samples it ends).
type scheduled struct {
	xs    []datafile.Sample
	since []float64
}

func newScheduled(xs []datafile.Sample) scheduled {
	xs = slices.Clone(xs)
	sort.SliceStable(xs, func(i, j int) bool { return xs[i].T < xs[j].T })
	since := make([]float64, len(xs))
	for i, x := range xs {
		since[i] = x.T
		if i > 0 && xs[i-1].V == x.V {
			since[i] = since[i-1]
		}
	}
	return scheduled{xs, since}
}

// rateAt is the rate (bits/s) in force over the whole step from prev to t: 0
// when the schedule may have changed it within the step, or had not said yet,
// as a drain over that step answers to no one rate. The schedule's samples are
// the rate at their time, taken on their own ticks: a change between the
// sample before t and the one after may lie in the step.
func (s scheduled) rateAt(prev, t float64) float64 {
	i := sort.Search(len(s.xs), func(i int) bool { return s.xs[i].T > t }) - 1
	if i < 0 || s.since[i] > prev {
		return 0
	}
	if i+1 < len(s.xs) && s.xs[i+1].V != s.xs[i].V && s.xs[i].T < t {
		return 0
	}
	return s.xs[i].V * 1e6
}

func deviceSeries(run *datafile.Run) (map[string]*devSeries, []string) {
	devs := map[string]*devSeries{}
	var order []string
	get := func(host, dev string) *devSeries {
		k := host + ":" + dev
		d := devs[k]
		if d == nil {
			d = &devSeries{}
			devs[k] = d
			order = append(order, k)
		}
		return d
	}
	for _, se := range run.Series {
		switch role := datafile.Classify(se).Role; role {
		case datafile.RoleSojourn:
			if se.Host != "" && se.Dev != "" {
				d := get(se.Host, se.Dev)
				if strings.HasSuffix(se.Stat, EchoSuffix) {
					d.echo = append(d.echo, run.Samples[se.Name])
				} else {
					d.sojourn = append(d.sojourn, run.Samples[se.Name])
				}
			}
		case datafile.RoleShaper:
			if se.Host != "" && se.Dev != "" {
				get(se.Host, se.Dev).shaper = run.Samples[se.Name]
			}
		case datafile.RoleQdisc, datafile.RoleTxQueue:
			st, ok := BottleneckStat(se)
			if !ok && role == datafile.RoleQdisc {
				// The byte counter is no bottleneck row of its own.
				if hd, ok := qdiscStat(se, "root bytes"); ok {
					get(hd[0], hd[1]).bytes = run.Samples[se.Name]
				}
				continue
			}
			if !ok {
				continue
			}
			d := get(st.Host, st.Dev)
			switch st.Row {
			case "backlog":
				d.backlog = run.Samples[se.Name]
			case "BQL inflight":
				d.inflight = append(d.inflight, run.Samples[se.Name])
			}
		}
	}
	sort.Strings(order)
	return devs, order
}

// qdiscStat says whether a qdisc series is the statistic stat, and of which host
// and device.
func qdiscStat(se datafile.Series, stat string) ([2]string, bool) {
	host, dev, s := se.Host, se.Dev, se.Stat
	if dev == "" || s == "" {
		_, rest, _ := strings.Cut(se.Name, " ")
		hostDev, st, _ := strings.Cut(rest, " ")
		host, dev, _ = strings.Cut(hostDev, ":")
		s = st
	}
	return [2]string{host, dev}, s == stat
}

// histogram is the packets of sojourn series in (from, to]: their times (ms) and
// counts, sorted by time.
type histogram struct {
	ms []float64
	n  []float64
}

// HistQuantile is the time (ms) below which a fraction q of the packets of
// histogram samples fall (each sample a bucket: V its time, N its packets); NaN
// for none. The plots take each step's median with it.
func HistQuantile(ss []datafile.Sample, q float64) float64 {
	return sojournHist([][]datafile.Sample{ss}, math.Inf(-1), math.Inf(1)).quantile(q)
}

func sojournHist(series [][]datafile.Sample, from, to float64) histogram {
	byMs := map[float64]float64{}
	for _, ss := range series {
		for _, s := range ss {
			if s.T > from && s.T <= to && s.N > 0 && !math.IsNaN(s.V) {
				byMs[s.V] += float64(s.N)
			}
		}
	}
	var h histogram
	for ms := range byMs {
		h.ms = append(h.ms, ms)
	}
	sort.Float64s(h.ms)
	for _, ms := range h.ms {
		h.n = append(h.n, byMs[ms])
	}
	return h
}

func (h histogram) total() float64 {
	var t float64
	for _, n := range h.n {
		t += n
	}
	return t
}

// quantile is the time below which a fraction q of the packets fall (the bucket
// of the ceil(q*total)-th packet); NaN for none.
func (h histogram) quantile(q float64) float64 {
	total := h.total()
	if total == 0 {
		return math.NaN()
	}
	rank := math.Max(1, math.Ceil(q*total))
	var seen float64
	for i, n := range h.n {
		seen += n
		if seen >= rank {
			return h.ms[i]
		}
	}
	return h.ms[len(h.ms)-1]
}

func (h histogram) mean() float64 {
	total := h.total()
	if total == 0 {
		return math.NaN()
	}
	var sum float64
	for i, n := range h.n {
		sum += h.ms[i] * n
	}
	return sum / total
}

// drainRates are a byte counter's rates (bytes/s) over each step in (from, to], by
// the time of the step's end; a counter that went down was reset, its step skipped.
func drainRates(ss []datafile.Sample, from, to float64) map[float64]float64 {
	out := map[float64]float64{}
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		if b.T <= from || b.T > to || b.T <= a.T || b.V < a.V {
			continue
		}
		out[b.T] = (b.V - a.V) / (b.T - a.T)
	}
	return out
}

// queueDelays are a queue's bytes over the rate the device drained at, per step
// (ms), for the steps where it drained: how long the bytes queued then take to go.
func queueDelays(queue map[float64]float64, rates map[float64]float64) []float64 {
	var out []float64
	for t, q := range queue {
		if r, ok := rates[t]; ok && r > 0 {
			out = append(out, q/r*1e3)
		}
	}
	return out
}

// gaugeAt sums gauge series by sample time, within (from, to].
func gaugeAt(series [][]datafile.Sample, from, to float64) map[float64]float64 {
	out := map[float64]float64{}
	for _, ss := range series {
		for _, s := range ss {
			if s.T > from && s.T <= to {
				out[s.T] += s.V
			}
		}
	}
	return out
}

// delayRows are each bottleneck device's sojourn row (the kernel's histograms over
// the window: avg, median, p99; the points are packets) and drain rate row
// (Mbit/s, from the root qdisc's byte counter).
func delayRows(devs map[string]*devSeries, order []string, rates map[string]datafile.DeviceRate, from, to float64) []Row {
	var rows []Row
	for _, name := range order {
		d := devs[name]
		if len(d.sojourn) > 0 {
			h := sojournHist(d.sojourn, from, to)
			rows = append(rows, Row{Name: "Qdisc " + name + SojournSuffix, Units: "ms",
				Avg: h.mean(), Median: h.quantile(0.5), P99: h.quantile(0.99), Points: int(h.total()),
				Key: Key{Family: FamilyBottleneck, Dev: name, Stat: SojournStat}})
		}
		if len(d.echo) > 0 {
			h := sojournHist(d.echo, from, to)
			rows = append(rows, Row{Name: "Qdisc " + name + EchoSojournSuffix, Units: "ms",
				Avg: h.mean(), Median: h.quantile(0.5), P99: h.quantile(0.99), Points: int(h.total()),
				Key: Key{Family: FamilyBottleneck, Dev: name, Stat: EchoSojournStat}})
		}
		if len(d.bytes) > 1 {
			var xs []float64
			for _, r := range drainRates(d.bytes, from, to) {
				xs = append(xs, r*8/1e6)
			}
			sort.Float64s(xs) // map order must not reach the row
			rows = append(rows, keyed(rowOf("Qdisc "+name+DrainSuffix, "Mbit/s", xs), Key{Family: FamilyBottleneck, Dev: name, Stat: DrainStat}))
		}
		if len(d.shaper) > 0 {
			// Under a rate schedule, the rate in force each step of the window.
			var xs []float64
			for _, x := range d.shaper {
				if x.T > from && x.T <= to {
					xs = append(xs, x.V)
				}
			}
			rows = append(rows, keyed(rowOf("Qdisc "+name+ConfiguredSuffix, "Mbit/s", xs), Key{Family: FamilyBottleneck, Dev: name, Stat: ConfiguredStat}))
		} else if r, ok := rates[name]; ok {
			rows = append(rows, keyed(rowOf("Qdisc "+name+ConfiguredSuffix, "Mbit/s", []float64{r.Bits / 1e6}), Key{Family: FamilyBottleneck, Dev: name, Stat: ConfiguredStat}))
		}
	}
	return rows
}

// ConfiguredSuffix ends a bottleneck device's configured rate row, "Qdisc
// HOST:DEV configured rate" (Mbit/s): its setup's shaper, the inventory's rate for
// it or its link speed (the data file's rates), beside its drain rate.
const ConfiguredSuffix = " configured rate"

// SlowDrain is the share of its configured rate below which a queue drained,
// while it held one, is worth a warning: the link gives less than the rate the
// reader works from (a slower negotiated speed, a shaper upstream, another
// sender), and the queue's delay is more than its backlog over that rate.
const SlowDrain = 0.9

// standingQueue is the backlog (bytes) from which a step is one where the qdisc
// held a queue, and so should have drained at its rate: two full-size packets.
const standingQueue = 2 * 1514

// minQueuedSteps is the least number of such steps the warning takes a median of.
const minQueuedSteps = 5

// rateMap is the file's configured rates by HOST:DEV.
func rateMap(rates []datafile.DeviceRate) map[string]datafile.DeviceRate {
	out := map[string]datafile.DeviceRate{}
	for _, r := range rates {
		if r.Bits > 0 && !math.IsInf(r.Bits, 0) {
			out[r.Host+":"+r.Dev] = r
		}
	}
	return out
}

// slowDrains are the warnings for devices whose queue drained, over the steps
// in (from, to] that it held one, at a median below SlowDrain of its configured
// rate.
func slowDrains(devs map[string]*devSeries, order []string, rates map[string]datafile.DeviceRate, from, to float64) []string {
	var out []string
	for _, name := range order {
		d, r := devs[name], rates[name]
		if len(d.shaper) > 0 {
			if w := scheduledSlowDrain(name, d, from, to); w != "" {
				out = append(out, w)
			}
			continue
		}
		if r.Bits == 0 || len(d.backlog) == 0 {
			continue
		}
		backlog := gaugeAt([][]datafile.Sample{d.backlog}, from, to)
		var queued []float64
		for t, bps := range drainRates(d.bytes, from, to) {
			if backlog[t] >= standingQueue {
				queued = append(queued, bps*8)
			}
		}
		if len(queued) < minQueuedSteps {
			continue
		}
		if m := Median(queued); m < SlowDrain*r.Bits {
			out = append(out, fmt.Sprintf("qdisc %s drained at a median %.2f Mbit/s over the %d steps it held a queue, %.0f%% of its configured %.2f Mbit/s (%s): the link gives less than that rate, and its queue's delay is more than its backlog over it",
				name, m/1e6, len(queued), 100*m/r.Bits, r.Bits/1e6, r.Source))
		}
	}
	return out
}

// scheduledSlowDrain is slowDrains' warning for a device whose shaper's rate
// changed on a schedule: each step it held a queue is held to the rate in force
// over that step, and the median share warned of.
func scheduledSlowDrain(name string, d *devSeries, from, to float64) string {
	backlog := gaugeAt([][]datafile.Sample{d.backlog}, from, to)
	sched := newScheduled(d.shaper)
	var shares []float64
	for i := 1; i < len(d.bytes); i++ {
		a, b := d.bytes[i-1], d.bytes[i]
		if b.T <= from || b.T > to || b.T <= a.T || b.V < a.V || backlog[b.T] < standingQueue {
			continue
		}
		if r := sched.rateAt(a.T, b.T); r > 0 {
			shares = append(shares, (b.V-a.V)*8/(b.T-a.T)/r)
		}
	}
	if len(shares) < minQueuedSteps {
		return ""
	}
	if m := Median(shares); m < SlowDrain {
		return fmt.Sprintf("qdisc %s drained at a median %.0f%% of its scheduled rate over the %d steps it held a queue at one rate: the link gives less than the rate the schedule set, and its queue's delay is more than its backlog over it",
			name, 100*m, len(shares))
	}
	return ""
}

// attribute splits the excess of the loaded ping's median over its idle median
// among the devices' qdiscs and rings, over the loaded window (from, to]. Each
// device's qdisc delay is the median sojourn of the ping's own packets in it where
// the kernel measured them (a flow-queuing qdisc serves a ping ahead of the bulk
// flows: every packet's median would credit it with their queue), else of every
// packet's, else the median over steps of its backlog over its drain rate; its
// ring's, the median of BQL inflight over the drain rate. A ping's round trip
// crosses every device under test once at most, so the parts add up. nil when the
// run has no ping rows or no device it can say anything of.
func attribute(rows []Row, devs map[string]*devSeries, order []string, from, to float64) *DelayAttribution {
	var loaded, idle float64 = math.NaN(), math.NaN()
	for _, r := range rows {
		if r.Key.Family != FamilyProbe || r.Key.Series != PingRow || r.Key.Pair != "" {
			continue
		}
		switch r.Key.Phase {
		case LoadedPhase:
			loaded = r.Median
		case IdlePhase:
			idle = r.Median
		}
	}
	if math.IsNaN(loaded) || math.IsNaN(idle) {
		return nil
	}
	a := &DelayAttribution{ExcessMs: math.Max(0, loaded-idle)}
	// Files from tracers that histogram the echo packets apart have their
	// series wherever a ping crossed a traced qdisc.
	echoTraced := false
	for _, name := range order {
		echoTraced = echoTraced || len(devs[name].echo) > 0
	}
	sources := map[string]bool{}
	for _, name := range order {
		d := devs[name]
		rates := drainRates(d.bytes, from, to)
		dd := DeviceDelay{Dev: name, QdiscMs: math.NaN(), RingMs: 0}
		h := sojournHist(d.sojourn, from, to)
		switch e := sojournHist(d.echo, from, to); {
		case e.total() > 0:
			dd.QdiscMs, dd.Source = e.quantile(0.5), "ICMP sojourn"
		case echoTraced && h.total() > 0:
			// The tracer counted the echo packets apart and none crossed this
			// qdisc: it held none of the ping's delay, whatever its own queue.
			dd.QdiscMs, dd.Source = 0, "ICMP sojourn"
		case h.total() > 0:
			dd.QdiscMs, dd.Source = h.quantile(0.5), "sojourn"
		case len(d.backlog) > 0 && len(rates) > 0:
			dd.QdiscMs, dd.Source = Median(queueDelays(gaugeAt([][]datafile.Sample{d.backlog}, from, to), rates)), "backlog"
		}
		if math.IsNaN(dd.QdiscMs) {
			continue
		}
		if len(d.inflight) > 0 && len(rates) > 0 {
			if v := Median(queueDelays(gaugeAt(d.inflight, from, to), rates)); !math.IsNaN(v) {
				dd.RingMs = v
			}
		}
		sources[strings.TrimPrefix(dd.Source, "ICMP ")] = true
		a.QdiscMs += dd.QdiscMs
		a.RingMs += dd.RingMs
		a.Devices = append(a.Devices, dd)
	}
	if len(a.Devices) == 0 {
		return nil
	}
	switch {
	case len(sources) > 1:
		a.Source = "mixed"
	case sources["sojourn"]:
		a.Source = "sojourn"
	default:
		a.Source = "backlog"
	}
	a.OtherMs = math.Max(0, a.ExcessMs-a.QdiscMs-a.RingMs)
	if a.ExcessMs > 0 {
		a.QdiscShare = math.Min(1, a.QdiscMs/a.ExcessMs)
	} else {
		a.QdiscShare = 1
	}
	return a
}

// Text is the attribution as the block under a summary.
func (d *DelayAttribution) Text() string {
	return fmt.Sprintf("Delay under load, ICMP median over idle: %.2f ms: qdisc %.2f ms (%.0f%%, %s), driver ring %.2f ms, elsewhere %.2f ms",
		d.ExcessMs, d.QdiscMs, 100*d.QdiscShare, d.Source, d.RingMs, d.OtherMs)
}
