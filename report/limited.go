package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/bloatbench/bloatbench/datafile"
)

// MaxWindowLimited is the share of its sending time under load (TCP_INFO's
// busy_time) that a flow may spend stopped by the receiver's window, or by its
// own send buffer, before the summary warns. It is small because the kernel's
// counters are: a flow counts as rwnd-limited only while its congestion window
// has room and the receiver's window has none, and as sndbuf-limited only
// while its congestion window has room and everything it was given is sent. A
// flow whose receiver reads at once grows its congestion window to about the
// receiver's window, the two limits coincide, and most of the time it is held
// to that window counts as busy alone. Measured on the local lab (100 Mbit/s,
// bfifo of 300000 bytes, GSO off, tcp_4down for 10 s, two runs each): with
// the receivers' buffers fixed (net.ipv4.tcp_rmem "4096 81920 81920") every
// flow counted 3.5% to 7.3% of its busy time rwnd-limited, and the queue never
// overflowed (no drops, a mean backlog of 161 kB, the loaded ping 13.8 and
// 13.9 ms); autotuned, at most 0.12% (the queue overflowing 33 to 42 times a
// second, 191 and 192 kB, 16.2 and 16.5 ms). 1% is 8 times the autotuned
// flows' most and a 3.5th of the fixed ones' least.
const MaxWindowLimited = 0.01

// minBusyMs is the least sending time under load (ms) whose limited share the
// summary judges: the kernel counts these times in jiffies (4 ms at HZ=250,
// 10 ms at HZ=100), and a flow that was busy for a few of them says nothing.
const minBusyMs = 500

// FlowLimits is one flow's time under load as TCP_INFO counted it (ms): the
// time it had data to send (busy_time), and of that, the time the receiver's
// window held it back (rwnd_limited) and its own send buffer did
// (sndbuf_limited).
type FlowLimits struct {
	Flow                     string // "TCP download::1", "TCP download::1 (pair 2)"
	BusyMs, RwndMs, SndbufMs float64
	// HasRwnd, HasSndbuf say the flow has the series (a file may carry one).
	HasRwnd, HasSndbuf bool
}

// RwndShare is the share of its busy time the receiver's window held the flow
// back, at most 1 (the counters are read at one instant, but a file may say
// anything); NaN without busy time.
func (f FlowLimits) RwndShare() float64 { return limitedShare(f.RwndMs, f.BusyMs) }

// SndbufShare is the share of its busy time its send buffer held it back.
func (f FlowLimits) SndbufShare() float64 { return limitedShare(f.SndbufMs, f.BusyMs) }

func limitedShare(limited, busy float64) float64 {
	if busy <= 0 {
		return math.NaN()
	}
	return math.Min(limited/busy, 1)
}

// WindowLimits adds up each flow's TCP_INFO time counters over the steps that
// end in (from, to] (a step's sample is the time it added, at its end). A
// step's value that is no time at all (negative, NaN, infinite: a file may
// say anything; the sampler never writes one) counts as none, and so does
// every counter of that step: a limited time without its busy time would
// tip the share. Flows in the run's order; only those with a busy_time series
// and one of the other two.
func WindowLimits(run *datafile.Run, from, to float64) []FlowLimits {
	type key struct{ flow, pair string }
	type counters struct{ busy, rwnd, sndbuf []datafile.Sample }
	byFlow := map[key]*counters{}
	var order []key
	for _, se := range run.Series {
		if se.Kind != datafile.KindTCPInfo || datafile.Classify(se).Role != datafile.RoleFlowStat {
			continue
		}
		switch se.Stat {
		case datafile.StatBusyTime, datafile.StatRwndLimited, datafile.StatSndbufLimited:
		default:
			continue
		}
		base := datafile.BaseName(se.Name, se.Pair)
		if !strings.HasSuffix(base, " "+se.Stat) {
			continue // not a sampler's name: no flow to name it by
		}
		k := key{strings.TrimSuffix(base, " "+se.Stat), se.Pair}
		c := byFlow[k]
		if c == nil {
			c = &counters{}
			byFlow[k] = c
			order = append(order, k)
		}
		xs := run.Samples[se.Name]
		switch se.Stat {
		case datafile.StatBusyTime:
			c.busy = append(c.busy, xs...)
		case datafile.StatRwndLimited:
			c.rwnd = append(c.rwnd, xs...)
		default:
			c.sndbuf = append(c.sndbuf, xs...)
		}
	}
	var out []FlowLimits
	for _, k := range order {
		c := byFlow[k]
		if c.busy == nil || (c.rwnd == nil && c.sndbuf == nil) {
			continue
		}
		// The three are read together each step: pair them by the step's time.
		type step struct{ busy, rwnd, sndbuf float64 }
		steps := map[float64]*step{}
		at := func(t float64) *step {
			s := steps[t]
			if s == nil {
				s = &step{busy: math.NaN(), rwnd: math.NaN(), sndbuf: math.NaN()}
				steps[t] = s
			}
			return s
		}
		// A file's times are checked as it is read; a run made in memory may
		// hold a NaN, which no map finds again.
		for _, x := range c.busy {
			if !math.IsNaN(x.T) {
				at(x.T).busy = x.V
			}
		}
		for _, x := range c.rwnd {
			if !math.IsNaN(x.T) {
				at(x.T).rwnd = x.V
			}
		}
		for _, x := range c.sndbuf {
			if !math.IsNaN(x.T) {
				at(x.T).sndbuf = x.V
			}
		}
		f := FlowLimits{Flow: datafile.PairName(k.flow, k.pair), HasRwnd: c.rwnd != nil, HasSndbuf: c.sndbuf != nil}
		// In time order: a sum the same to the last bit every time it is read.
		times := slices.Sorted(maps.Keys(steps))
		for _, t := range times {
			s := steps[t]
			if !(t > from && t <= to) || !isTime(s.busy) {
				continue
			}
			// A series the flow lacks counts 0 at every step; one it has must
			// say a time at this step for the step to count.
			if (f.HasRwnd && !isTime(s.rwnd)) || (f.HasSndbuf && !isTime(s.sndbuf)) {
				continue
			}
			f.BusyMs += s.busy
			if f.HasRwnd {
				f.RwndMs += s.rwnd
			}
			if f.HasSndbuf {
				f.SndbufMs += s.sndbuf
			}
		}
		out = append(out, f)
	}
	return out
}

// isTime says whether a step's value is a time the step could have added.
func isTime(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }

// limitWarnings are the warnings for flows held back by the receiver's window,
// or by their own send buffer, for more than MaxWindowLimited of their busy
// time: one warning for each, naming the flows and their shares.
func limitWarnings(flows []FlowLimits) []string {
	var out []string
	for _, kind := range []struct {
		share func(FlowLimits) float64
		name  string // of such flows
		by    string // what stopped them
		field string // tcp_info's counter
		why   string // what does that
	}{
		{FlowLimits.RwndShare, "window-limited", "the receiver's window", "rwnd_limited",
			"a receiver with a fixed socket buffer does this (netperf, which flent's TCP tests run, sets its buffers), or a net.ipv4.tcp_rmem maximum below the path's window"},
		{FlowLimits.SndbufShare, "send-buffer-limited", "their own send buffer", "sndbuf_limited",
			"a sender with a fixed socket buffer does this (SO_SNDBUF, as netperf sets it), or a net.ipv4.tcp_wmem maximum below the path's window"},
	} {
		type hit struct {
			flow  string
			share float64
		}
		var hits []hit
		for _, f := range flows {
			if f.BusyMs < minBusyMs {
				continue
			}
			if s := kind.share(f); s > MaxWindowLimited {
				hits = append(hits, hit{f.Flow, s})
			}
		}
		if len(hits) == 0 {
			continue
		}
		sort.SliceStable(hits, func(i, j int) bool { return naturalLess(hits[i].flow, hits[j].flow) })
		// Name a few: 128 flows would fill a screen.
		const named = 8
		var list []string
		for i, h := range hits {
			if i == named {
				lo, hi := h.share, h.share
				for _, r := range hits[named:] {
					lo, hi = math.Min(lo, r.share), math.Max(hi, r.share)
				}
				list = append(list, fmt.Sprintf("and %d more flows (%.1f%% to %.1f%%)", len(hits)-named, 100*lo, 100*hi))
				break
			}
			list = append(list, fmt.Sprintf("%s %.1f%%", h.flow, 100*h.share))
		}
		out = append(out, fmt.Sprintf("%s flows: %s of their sending time under load stopped by %s (tcp_info's %s over busy_time, more than %.0f%%: the kernel counts only the time the congestion window had room, so a flow held to a fixed window counts a few percent, an autotuned one about none). They sent what %s allowed, not what the bottleneck would take, so the queue, and the ping's delay, is shallower than an autotuned application's would be: %s",
			kind.name, strings.Join(list, ", "), kind.by, kind.field, 100*MaxWindowLimited, kind.by, kind.why))
	}
	return out
}
