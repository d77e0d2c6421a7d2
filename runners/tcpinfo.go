package runners

import (
	"context"
	"net"
	"time"

	sysunix "golang.org/x/sys/unix"

	"github.com/bloatbench/bloatbench/datafile"
)

// tcpInfoStats are the statistics read, with their units: the smoothed round
// trip and its variation, the congestion window, the segments retransmitted in
// the step, the kernel's delivery and pacing rates, and the segments delivered
// in the step that the receiver's ECN feedback said were CE-marked
// (tcpi_delivered_ce: exact with Accurate ECN, whose ACKs count the marks; with
// RFC 3168's ECN every segment acknowledged while ECE is echoed counts, until
// the sender's CWR, so it over-counts the marks).
//
// Then the kernel's time counters, each the milliseconds the step added:
// tcpi_busy_time (the time the socket had data to send, the two below
// included), tcpi_rwnd_limited (of that, the time the receiver's advertised
// window held it back) and tcpi_sndbuf_limited (the time its own send buffer
// did). Time in the step, not a share of it: times add up over any window (the
// load, a --cut), so the summary's share is their sum over busy_time's, exactly;
// shares of steps would have to be weighted back by their steps' busy times.
// Their unit is "ms/step", not srtt's "ms": a busy step counts the step's
// length, and the page that charts a unit's series together would put the
// round trip's few ms under it.
var tcpInfoStats = []struct{ stat, units string }{
	{"srtt", "ms"}, {"rttvar", "ms"}, {"cwnd", "packets"}, {"retransmits", "packets"},
	{"delivery_rate", "Mbits/s"}, {"pacing_rate", "Mbits/s"}, {"delivered_ce", "packets"},
	{datafile.StatBusyTime, "ms/step"}, {datafile.StatRwndLimited, "ms/step"}, {datafile.StatSndbufLimited, "ms/step"},
}

// TCPInfoSeries names a flow's TCP_INFO series: "TCP download::1 srtt".
func TCPInfoSeries(flow, stat string) string { return flow + " " + stat }

// startTCPInfo watches a sending socket's TCP_INFO until the returned stop is
// called, which waits for the watcher: no sample of it comes after its stream's end.
func startTCPInfo(ctx context.Context, c *net.TCPConn, flow, direction, host string, start time.Time, step float64, env Env) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchTCPInfo(ctx, c, flow, direction, host, start, step, env)
	}()
	return func() {
		cancel()
		<-done
	}
}

// watchTCPInfo reads TCP_INFO on a sending socket every step until ctx ends or the
// socket closes, declaring its series before their first samples. The sender is
// where the kernel keeps the round trip and window that drive the flow.
func watchTCPInfo(ctx context.Context, c *net.TCPConn, flow, direction, host string, start time.Time, step float64, env Env) {
	if step <= 0 {
		return
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	if env.Declare != nil {
		for _, s := range tcpInfoStats {
			env.Declare(datafile.Series{Name: TCPInfoSeries(flow, s.stat), Kind: datafile.KindTCPInfo, Units: s.units, Host: host,
				Direction: direction, Stat: s.stat})
		}
	}
	g := newStepGrid(start, step, 1, true)
	defer g.close()
	var lastRetrans, lastCE uint32
	var busy, rwnd, sndbuf timeCounter
	first := true
	for {
		if _, ev, _ := g.wait(ctx, nil); ev != stepTick {
			return
		}
		var info *sysunix.TCPInfo
		var gerr error
		if err := rc.Control(func(fd uintptr) {
			info, gerr = sysunix.GetsockoptTCPInfo(int(fd), sysunix.IPPROTO_TCP, sysunix.TCP_INFO)
		}); err != nil || gerr != nil {
			return // the stream ended and closed its socket
		}
		now := unix(time.Now())
		// Counters: what the step added (the first step, all since the connection
		// began, the handshake included).
		retrans, ce := info.Total_retrans-lastRetrans, info.Delivered_ce-lastCE
		if first {
			retrans, ce, first = info.Total_retrans, info.Delivered_ce, false
		}
		lastRetrans, lastCE = info.Total_retrans, info.Delivered_ce
		values := map[string]float64{
			"srtt":          float64(info.Rtt) / 1e3,
			"rttvar":        float64(info.Rttvar) / 1e3,
			"cwnd":          float64(info.Snd_cwnd),
			"retransmits":   float64(retrans),
			"delivery_rate": float64(info.Delivery_rate) * 8 / 1e6,
			"pacing_rate":   pacingRate(info.Pacing_rate),
			"delivered_ce":  float64(ce),
			// The kernel counts in microseconds (jiffies, scaled).
			datafile.StatBusyTime:      float64(busy.step(info.Busy_time)) / 1e3,
			datafile.StatRwndLimited:   float64(rwnd.step(info.Rwnd_limited)) / 1e3,
			datafile.StatSndbufLimited: float64(sndbuf.step(info.Sndbuf_limited)) / 1e3,
		}
		for _, s := range tcpInfoStats {
			env.Emit(TCPInfoSeries(flow, s.stat), datafile.Sample{T: now, V: values[s.stat]})
		}
	}
}

// timeCounter turns one of TCP_INFO's cumulative time counters into what each
// read added.
type timeCounter struct {
	last uint64
	read bool
}

// step is what the counter added since the last read; the first read counts
// all since the connection began (a flow limited from its first window is
// limited in its first step too). A counter below its last read started over:
// the kernel keeps these as 32-bit jiffies, which wrap (after 49.7 days at
// HZ=1000), and the step then counts what it holds now, never the wrapped
// difference of some 2^64 microseconds.
func (c *timeCounter) step(now uint64) uint64 {
	d := now - c.last
	if !c.read || now < c.last {
		d = now
	}
	c.last, c.read = now, true
	return d
}

// pacingRate is the pacing rate in Mbit/s; the kernel reports "unlimited" as all
// ones, which is no rate at all.
func pacingRate(bytesPerSec uint64) float64 {
	if bytesPerSec == ^uint64(0) || bytesPerSec == uint64(^uint32(0)) {
		return 0
	}
	return float64(bytesPerSec) * 8 / 1e6
}
