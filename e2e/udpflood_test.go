package e2e

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// socketDropped is the sink's warning of what its own receive buffer dropped.
var socketDropped = regexp.MustCompile(`^udp-sink: (\d+) datagrams dropped by this host's own receive buffer`)

// TestUDPFlood is issue 10's acceptance: a 200 Mbit/s UDP flood of 1470-byte
// datagrams into htb at 100 Mbit/s over a 300000-byte bfifo, on a lab that run -H
// local brings up. htb counts skb->len, which on a veth's egress is the IP packet
// and its 14-byte Ethernet header (no preamble or FCS): the UDP payload gets
// 1470/(1470+8+20+14) of 100 Mbit/s, about half of what is offered, the rest is
// dropped at the full bfifo, and ping waits behind the full bfifo: 24 ms.
func TestUDPFlood(t *testing.T) {
	needLab(t)
	const payload, rate, offered, queue = 1470, 100e6, 200e6, 300000
	out := t.TempDir()
	r := bb(t, "run", "-H", "local", "--local-rate", "100mbit", "--local-queue", fmt.Sprintf("bfifo:%d", queue), "--local-gso", "off",
		"-l", "10", "-d", "2", "-o", out, "--format", "json", "--te", "udp_bandwidth=200M", "--sampler", "softnet@server", "udp_flood")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	medians := parseSummary(t, r.stdout)
	run := dataFile(t, out)
	if run.Incomplete {
		t.Fatalf("incomplete run: %s", run.Error)
	}
	m := run.Metadata
	loadStart, loadEnd := m.T0+m.Delay, m.T0+m.Delay+m.Length

	// The receiver's rate against what htb passed: the median step, and the bytes
	// over the time of the samples wholly inside the flood (the first and last are
	// partial steps), each against htb's counters over the same steps, less what was
	// lost after htb (the softnet backlog's drops and the sink's own socket's, which
	// the sink counts as lost); and htb's rate against the one it was given.
	frame := float64(payload + 8 + 20 + 14)
	p := bottleneckPassed(t, run, loadStart+0.3, loadEnd-0.3)
	var bytes int64
	var secs float64
	for _, s := range run.Samples["UDP upload"] {
		if s.T-s.Dur >= loadStart+0.3 && s.T <= loadEnd-0.3 {
			bytes += s.Bytes
			secs += s.Dur
		}
	}
	if secs < 8 {
		t.Fatalf("UDP upload has samples over %.1f s of the 10 s flood", secs)
	}
	mean := float64(bytes) * 8 / secs / 1e6
	socketDrops := 0.0
	for _, e := range run.Events {
		if mm := socketDropped.FindStringSubmatch(e.Message); mm != nil {
			socketDrops, _ = strconv.ParseFloat(mm[1], 64)
		}
	}
	qs := run.Samples[strings.TrimSuffix(p.series, "bytes")+"packets"]
	if len(qs) < 2 {
		t.Fatalf("%s: no packets counter", p.series)
	}
	htbPkts := qs[len(qs)-1].V - qs[0].V
	after := (p.afterDrops + socketDrops) / htbPkts
	passedRate := p.bitRate() / 1e6 * payload / frame * (1 - after)
	passedStep := median(p.stepBits) / 1e6 * payload / frame * (1 - after)
	sent := medians["UDP upload sent"]
	t.Logf("UDP upload: median %.2f Mbit/s, mean %.2f over %.1f s; htb passed %.2f Mbit/s (median step %.2f) of payload, %.2f Mbit/s in all; lost after htb: %.0f in the backlog, %.0f in the sink's socket (%.2f%%); sent median %.2f",
		medians["UDP upload"], mean, secs, passedRate, passedStep, p.bitRate()/1e6, p.afterDrops, socketDrops, 100*after, sent)
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"median", medians["UDP upload"], passedStep}, {"mean", mean, passedRate}} {
		if math.Abs(c.got-c.want)/c.want > 0.02 {
			t.Errorf("UDP upload %s %.2f Mbit/s is not within 2%% of the %.2f Mbit/s of payload htb passed", c.name, c.got, c.want)
		}
	}
	if r := p.bitRate(); r < 0.8*rate || r > 1.05*rate {
		t.Errorf("%s passed %.2f Mbit/s, not from 80%% to 105%% of the shaped %.0f (see checkTCPDownload)", p.series, r/1e6, rate/1e6)
	}
	if math.Abs(sent-offered/1e6)/(offered/1e6) > 0.02 {
		t.Errorf("the sender sent %.2f Mbit/s, not the 200 asked for: the loss below is not the queue's", sent)
	}

	// Loss: per step from the summary, and in all from the sink's account, against
	// what htb passing at its measured rate leaves of the offered load (half, at
	// the rate it was given), within 5 points.
	loss := medians["UDP upload loss"]
	wantLoss := 100 * (1 - p.bitRate()*payload/frame/offered*(1-after))
	t.Logf("loss: median step %.2f%%, expected %.2f%% (%.2f%% at htb's nominal rate)", loss, wantLoss, 100*(1-rate*payload/frame/offered))
	if math.Abs(loss-wantLoss) > 5 {
		t.Errorf("UDP upload loss median %.2f%%, want %.2f%% within 5 points", loss, wantLoss)
	}
	account := regexp.MustCompile(`^udp-sink UDP upload from \S+: (\d+) datagrams sent, (\d+) received, (\d+) lost \(([\d.]+)%\)`)
	found := false
	for _, e := range run.Events {
		mm := account.FindStringSubmatch(e.Message)
		if mm == nil {
			continue
		}
		found = true
		total, _ := strconv.ParseFloat(mm[4], 64)
		received, _ := strconv.ParseFloat(mm[2], 64)
		t.Logf("sink's account: %s", e.Message)
		if math.Abs(total-wantLoss) > 5 {
			t.Errorf("the sink lost %.1f%% in all, want %.2f%% within 5 points: %s", total, wantLoss, e.Message)
		}
		// What htb passed came, less what was lost after it; htb passed the pings
		// and the flood's hello and end too (a few hundred at most).
		if d := htbPkts - p.afterDrops - socketDrops - received; d < 0 || d > 0.005*htbPkts {
			t.Errorf("htb passed %.0f packets, %.0f were lost after it, the sink received %.0f of the flood's: %.0f unaccounted for", htbPkts, p.afterDrops+socketDrops, received, d)
		}
	}
	if !found {
		t.Errorf("no sink account among the events: %+v", run.Events)
	}

	// Ping waits behind the full bfifo, drained at the rate htb passed (its given
	// rate on a machine that keeps up: 24 ms).
	idle, loaded := medians["Ping (ms) ICMP idle"], medians["Ping (ms) ICMP loaded"]
	bound := queue*8/p.bitRate()*1e3 + idle
	t.Logf("ping: loaded median %.2f ms, idle %.3f ms; the full bfifo holds %.2f ms at htb's %.2f Mbit/s", loaded, idle, bound, p.bitRate()/1e6)
	if math.Abs(loaded-bound)/bound > 0.10 {
		t.Errorf("loaded ping median %.2f ms is not within 10%% of %.2f ms", loaded, bound)
	}
}
