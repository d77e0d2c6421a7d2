package report

import (
	"math"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// delayRun is a 4 s load after 1 s of idle, sampled every 0.2 s: ping idle at 0.1
// ms and loaded at 0.1 + loadedExcess ms; each device of devs drains at 12.5 MB/s
// (100 Mbit/s) with its backlog, BQL inflight and sojourn (a histogram: a fifth of
// its packets at half the time, the rest at the time) as given; a negative value
// leaves the series out.
type delayDev struct {
	host, dev                string
	backlog, inflight, sojMs float64
}

func delayRun(loadedExcess float64, devs ...delayDev) *datafile.Run {
	m := datafile.Metadata{Test: "tcp_4down", T0: 100, Delay: 1, Length: 4, Step: 0.2, TotalLength: 6}
	run := &datafile.Run{Metadata: m, Samples: map[string][]datafile.Sample{}}
	add := func(se datafile.Series, ss []datafile.Sample) {
		run.Series = append(run.Series, se)
		run.Samples[se.Name] = ss
	}
	var ping []datafile.Sample
	for k := 1; k < 30; k++ {
		v := 0.1
		if sent := float64(k) * 0.2; sent >= 1 && sent < 5 {
			v += loadedExcess
		}
		ping = append(ping, datafile.Sample{T: 100 + float64(k)*0.2 + v/1e3, V: v, Seq: k})
	}
	add(datafile.Series{Name: PingRow, Kind: datafile.KindPing, Units: "ms", Host: "client"}, ping)
	for _, d := range devs {
		var bytes, backlog, inflight, soj []datafile.Sample
		for k := 0; k <= 30; k++ {
			t := 100 + float64(k)*0.2
			loaded := t > 101 && t <= 105
			bytes = append(bytes, datafile.Sample{T: t, V: 12.5e6 * 0.2 * float64(k)})
			b, i := 0.0, 0.0
			if loaded {
				b, i = d.backlog, d.inflight
				if d.sojMs >= 0 {
					soj = append(soj, datafile.Sample{T: t, V: d.sojMs / 2, Dur: 0.2, N: 100}, datafile.Sample{T: t, V: d.sojMs, Dur: 0.2, N: 400})
				}
			}
			backlog = append(backlog, datafile.Sample{T: t, V: b})
			inflight = append(inflight, datafile.Sample{T: t, V: i})
		}
		hd := d.host + ":" + d.dev
		add(datafile.Series{Name: "qdisc " + hd + " root bytes", Kind: datafile.KindQdisc, Units: "bytes", Host: d.host, Dev: d.dev, Stat: "root bytes", Counter: true}, bytes)
		if d.backlog >= 0 {
			add(datafile.Series{Name: "qdisc " + hd + " root backlog", Kind: datafile.KindQdisc, Units: "bytes", Host: d.host, Dev: d.dev, Stat: "root backlog"}, backlog)
		}
		if d.inflight >= 0 {
			add(datafile.Series{Name: "bql " + hd + " tx-0 inflight", Kind: datafile.KindBQL, Units: "bytes", Host: d.host, Dev: d.dev, Queue: "tx-0", Stat: "inflight"}, inflight)
		}
		if d.sojMs >= 0 {
			add(datafile.Series{Name: "sojourn " + hd + " 1:", Kind: datafile.KindSojourn, Units: "ms", Host: d.host, Dev: d.dev, Stat: "1:"}, soj)
		}
	}
	return run
}

func TestDelayAttribution(t *testing.T) {
	for _, c := range []struct {
		name                      string
		run                       *datafile.Run
		qdisc, ring, other, share float64
		source                    string
		warn                      string // in the warning; "" for none
	}{
		{"the kernel's sojourn, the queue where it is tested", delayRun(10, delayDev{"server", "eth1", 125000, 0, 9}, delayDev{"client", "eth1", 0, 0, 0.01}),
			9.01, 0, 0.99, 0.901, "sojourn", ""},
		{"backlog over the drain rate, without the sojourn", delayRun(10, delayDev{"server", "eth1", 125000, -1, -1}),
			10, 0, 0, 1, "backlog", ""},
		{"the driver's ring holds half", delayRun(10, delayDev{"server", "eth1", 62500, 62500, 5}),
			5, 5, 0, 0.5, "sojourn", ""},
		{"the queue is not under test", delayRun(20, delayDev{"client", "eth1", 0, 0, 0.05}),
			0.05, 0, 19.95, 0.0025, "sojourn", "the qdiscs under test (client:eth1) held 0% of the loaded ping's 20.00 ms over idle"},
		{"one device measured, one estimated", delayRun(10, delayDev{"server", "eth1", 100000, -1, 8}, delayDev{"router", "eth0", 12500, -1, -1}),
			9, 0, 1, 0.9, "mixed", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := SummarizeWith(c.run, Options{})
			d := s.Delay
			if d == nil {
				t.Fatalf("no attribution; rows %+v", s.Rows)
			}
			near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-6+1e-3*math.Abs(want) }
			if !near(d.ExcessMs, 10) && !near(d.ExcessMs, 20) || !near(d.QdiscMs, c.qdisc) || !near(d.RingMs, c.ring) || !near(d.OtherMs, c.other) || !near(d.QdiscShare, c.share) || d.Source != c.source {
				t.Errorf("%s\n%+v", d.Text(), *d)
			}
			w := d.Warning()
			if c.warn == "" && w != "" || c.warn != "" && !strings.Contains(w, c.warn) {
				t.Errorf("warning %q, want %q", w, c.warn)
			}
			if c.warn != "" && !strings.Contains(strings.Join(s.Warnings, "\n"), w) {
				t.Errorf("the summary's warnings %q lack it", s.Warnings)
			}
		})
	}
	// No ping, no attribution; no bottleneck statistics, none either.
	noPing := delayRun(10, delayDev{"server", "eth1", 125000, 0, 9})
	noPing.Series = noPing.Series[1:]
	if d := SummarizeWith(noPing, Options{}).Delay; d != nil {
		t.Errorf("attribution without ping: %+v", d)
	}
	if d := SummarizeWith(delayRun(10), Options{}).Delay; d != nil {
		t.Errorf("attribution without bottleneck: %+v", d)
	}
}

// The sojourn and drain rate rows: the histogram's statistics over the load, its
// packets the points; the byte counter's rate in Mbit/s, a point a step.
func TestSojournAndDrainRows(t *testing.T) {
	s := SummarizeWith(delayRun(10, delayDev{"server", "eth1", 125000, 0, 9}), Options{})
	rows := map[string]Row{}
	for _, r := range s.Rows {
		rows[r.Name] = r
	}
	soj := rows["Qdisc server:eth1 sojourn"]
	// 20 steps of 100 packets at 4.5 ms and 400 at 9: the mean 8.1, the median and
	// p99 9.
	if soj.Points != 10000 || math.Abs(soj.Avg-8.1) > 1e-9 || soj.Median != 9 || soj.P99 != 9 || soj.Units != "ms" {
		t.Errorf("sojourn row %+v", soj)
	}
	dr := rows["Qdisc server:eth1 drain rate"]
	if dr.Points != 20 || math.Abs(dr.Median-100) > 1e-9 || dr.Units != "Mbit/s" {
		t.Errorf("drain rate row %+v", dr)
	}
	if h := HistQuantile(nil, 0.5); !math.IsNaN(h) {
		t.Errorf("the median of no packets is %v", h)
	}
}

// withEcho adds a histogram of the echo packets alone on host:dev, all at ms
// over the loaded steps, as the tracer writes it beside every packet's.
func withEcho(run *datafile.Run, host, dev string, ms float64) *datafile.Run {
	se := datafile.Series{Name: "sojourn " + host + ":" + dev + " 1:" + EchoSuffix, Kind: datafile.KindSojourn, Units: "ms", Host: host, Dev: dev, Stat: "1:" + EchoSuffix}
	run.Series = append(run.Series, se)
	for k := 6; k <= 25; k++ {
		run.Samples[se.Name] = append(run.Samples[se.Name], datafile.Sample{T: 100 + float64(k)*0.2, V: ms, Dur: 0.2, N: 2})
	}
	return run
}

// A flow-queuing qdisc serves the ping ahead of the bulk flows: the bulk's packets
// waited 9 ms in it, the ping's 0.5. The ping's delay was the ring's and
// elsewhere's, and the attribution says so from the ping's own packets; a device
// the tracer saw no echo packet cross (while it counted them apart elsewhere)
// held none of the ping's delay, whatever its own queue.
func TestDelayAttributionFromThePingsOwnPackets(t *testing.T) {
	run := withEcho(delayRun(10, delayDev{"server", "eth1", 125000, 0, 9}), "server", "eth1", 0.5)
	s := SummarizeWith(run, Options{})
	d := s.Delay
	if d == nil || math.Abs(d.QdiscMs-0.5) > 1e-9 || d.Source != "sojourn" || len(d.Devices) != 1 || d.Devices[0].Source != "ICMP sojourn" {
		t.Fatalf("%+v", d)
	}
	if w := d.Warning(); !strings.Contains(w, "held 5% of the loaded ping's 10.00 ms") {
		t.Errorf("warning %q", w)
	}
	rows := map[string]Row{}
	for _, r := range s.Rows {
		rows[r.Name] = r
	}
	if r := rows["Qdisc server:eth1 ICMP sojourn"]; r.Median != 0.5 || r.Points != 40 {
		t.Errorf("ICMP sojourn row %+v", r)
	}
	if r := rows["Qdisc server:eth1 sojourn"]; r.Median != 9 {
		t.Errorf("every packet's sojourn row %+v", r)
	}
	// compare's sojourn line is every packet's, not the echo packets' row.
	if got := worstRow(SojournStat)(s); got != 9 {
		t.Errorf("compare's Qdisc sojourn median %g, want every packet's 9", got)
	}

	run = withEcho(delayRun(10, delayDev{"server", "eth1", 125000, 0, 8}, delayDev{"client", "eth1", 0, 0, 5}), "server", "eth1", 8)
	d = SummarizeWith(run, Options{}).Delay
	if d == nil || math.Abs(d.QdiscMs-8) > 1e-9 || len(d.Devices) != 2 {
		t.Fatalf("%+v", d)
	}
	for _, dd := range d.Devices {
		if want := map[string]float64{"server:eth1": 8, "client:eth1": 0}[dd.Dev]; dd.QdiscMs != want || dd.Source != "ICMP sojourn" {
			t.Errorf("device %+v, want %g ms from the ICMP sojourn", dd, want)
		}
	}
}

// The configured rate beside the drain rate, and the warning when a queue drained
// slower than it: delayRun's devices drain at 100 Mbit/s.
func TestConfiguredRate(t *testing.T) {
	for _, c := range []struct {
		name    string
		rate    float64
		backlog float64
		warn    string // in the warning; "" for none
	}{
		{"drains at its rate", 100e6, 125000, ""},
		{"drains a little slower", 105e6, 125000, ""},
		{"drains at 80% of it", 125e6, 125000, "qdisc server:eth1 drained at a median 100.00 Mbit/s over the 20 steps it held a queue, 80% of its configured 125.00 Mbit/s (htb rate)"},
		// An idle link drains at what it is given: no queue, no warning.
		{"no queue", 125e6, 1000, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := delayRun(10, delayDev{"server", "eth1", c.backlog, 0, -1})
			run.Metadata.Rates = []datafile.DeviceRate{{Host: "server", Dev: "eth1", Bits: c.rate, Source: "htb rate"},
				{Host: "router", Dev: "eth9", Bits: 1e9, Source: "link speed"}} // no series: no row
			s := SummarizeWith(run, Options{})
			var rows []string
			for _, r := range s.Rows {
				if strings.HasSuffix(r.Name, ConfiguredSuffix) {
					rows = append(rows, r.Name)
					if r.Median != c.rate/1e6 || r.Avg != c.rate/1e6 || r.Units != "Mbit/s" {
						t.Errorf("row %+v", r)
					}
				}
			}
			if len(rows) != 1 || rows[0] != "Qdisc server:eth1 configured rate" {
				t.Errorf("configured rate rows %q", rows)
			}
			var drained []string
			for _, w := range s.QueueWarnings {
				if strings.Contains(w, " drained at ") {
					drained = append(drained, w)
				}
			}
			w := strings.Join(drained, "\n")
			if c.warn == "" && w != "" || c.warn != "" && !strings.Contains(w, c.warn) {
				t.Errorf("queue warnings %q, want %q", w, c.warn)
			}
			if w != "" && !strings.Contains(strings.Join(s.Warnings, "\n"), w) {
				t.Errorf("the summary's warnings %q lack %q", s.Warnings, w)
			}
		})
	}
}

// Under a rate schedule, each device's configured rate row is the rate in force
// each step of the window, and a queue is held to the rate of each step it
// drained in, the steps a change may fall in left out.
func TestRateScheduleRows(t *testing.T) {
	for _, c := range []struct {
		name           string
		rate           func(t float64) float64 // the schedule, Mbit/s
		median, avg    float64
		warn           string // in the warning; "" for none
		warnsUnchanged bool   // without the schedule, at its first rate
	}{
		{"follows the schedule", func(t float64) float64 { return map[bool]float64{true: 200, false: 100}[t < 102.5] }, 100, 140, "", true},
		{"half the scheduled rate", func(t float64) float64 { return map[bool]float64{true: 400, false: 200}[t < 102.5] }, 200, 280, "qdisc server:eth1 drained at a median 50% of its scheduled rate over the 18 steps it held a queue at one rate", true},
		{"the last steps faster", func(t float64) float64 { return map[bool]float64{true: 100, false: 250}[t < 104.5] }, 100, 115, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := delayRun(10, delayDev{"server", "eth1", 125000, 0, -1})
			// The static rate, what the setup began with: the schedule's samples
			// take its place.
			run.Metadata.Rates = []datafile.DeviceRate{{Host: "server", Dev: "eth1", Bits: c.rate(100) * 1e6, Source: "htb rate"}}
			var shaper []datafile.Sample
			for k := 0; k <= 30; k++ {
				// The schedule's own ticks, a little after the qdisc sampler's.
				at := 100 + float64(k)*0.2 + 0.03
				shaper = append(shaper, datafile.Sample{T: at, V: c.rate(at)})
			}
			unscheduled := SummarizeWith(run, Options{})
			run.Series = append(run.Series, datafile.Series{Name: "shaper server:eth1 rate", Kind: datafile.KindShaper, Units: "Mbit/s", Host: "server", Dev: "eth1", Stat: "rate"})
			run.Samples["shaper server:eth1 rate"] = shaper
			s := SummarizeWith(run, Options{})
			var found bool
			for _, r := range s.Rows {
				if r.Name == "shaper server:eth1 rate" {
					t.Errorf("the schedule has a row of its own beside the configured rate: %+v", r)
				}
				if r.Name == "Qdisc server:eth1 configured rate" {
					found = true
					if r.Median != c.median || math.Abs(r.Avg-c.avg) > 1e-9 || r.Points != 20 {
						t.Errorf("configured rate %+v, want median %g avg %g over 20 steps", r, c.median, c.avg)
					}
				}
			}
			if !found {
				t.Error("no configured rate row")
			}
			w := strings.Join(s.QueueWarnings, "\n")
			if c.warn == "" && strings.Contains(w, " drained at ") || c.warn != "" && !strings.Contains(w, c.warn) {
				t.Errorf("queue warnings %q, want %q", w, c.warn)
			}
			// Held to the first rate alone, the run would have said otherwise.
			if got := strings.Contains(strings.Join(unscheduled.QueueWarnings, "\n"), " drained at "); got != c.warnsUnchanged {
				t.Errorf("without the schedule: warned %v, want %v", got, c.warnsUnchanged)
			}
		})
	}
}

// The rate in force over a step: none where a change may lie within it.
func TestScheduledRateAt(t *testing.T) {
	s := newScheduled([]datafile.Sample{{T: 1.0, V: 50}, {T: 1.2, V: 50}, {T: 1.4, V: 25}, {T: 1.6, V: 25}, {T: 1.8, V: 25}})
	for _, c := range []struct {
		prev, t, want float64
	}{
		{0.8, 0.95, 0},     // before the schedule said anything
		{0.95, 1.1, 0},     // its first sample is within the step
		{1.0, 1.15, 50e6},  // 50 from 1.0 on, and still at 1.2
		{1.15, 1.3, 0},     // the change is between 1.2 and 1.4: maybe here
		{1.25, 1.45, 0},    // ... or here
		{1.4, 1.55, 25e6},  // 25 since 1.4
		{1.8, 5.0, 25e6},   // the last rate holds
		{1.0, 1.2, 50e6},   // a step ending on a sample
		{1.2, 1.4, 0},      // the step the change is in
		{1.45, 1.41, 25e6}, // (a step of negative length is the caller's to skip)
	} {
		if got := s.rateAt(c.prev, c.t); got != c.want {
			t.Errorf("rateAt(%g, %g) = %g, want %g", c.prev, c.t, got, c.want)
		}
	}
}
