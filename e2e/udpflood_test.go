package e2e

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"testing"
)

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
		"-l", "10", "-d", "2", "-o", out, "--format", "json", "--te", "udp_bandwidth=200M", "udp_flood")
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

	// The receiver's rate: the median step, and the bytes over the time of the
	// samples wholly inside the flood (the first and last are partial steps).
	want := rate * payload / (payload + 8 + 20 + 14) / 1e6
	var bytes int64
	var secs float64
	for _, s := range run.Samples["UDP upload"] {
		if s.T-s.Dur > loadStart+0.3 && s.T < loadEnd-0.3 {
			bytes += s.Bytes
			secs += s.Dur
		}
	}
	if secs < 8 {
		t.Fatalf("UDP upload has samples over %.1f s of the 10 s flood", secs)
	}
	mean := float64(bytes) * 8 / secs / 1e6
	sent := medians["UDP upload sent"]
	t.Logf("UDP upload: median %.2f Mbit/s, mean %.2f over %.1f s; htb's payload rate %.2f; sent median %.2f",
		medians["UDP upload"], mean, secs, want, sent)
	for name, got := range map[string]float64{"median": medians["UDP upload"], "mean": mean} {
		if math.Abs(got-want)/want > 0.02 {
			t.Errorf("UDP upload %s %.2f Mbit/s is not within 2%% of htb's payload rate %.2f", name, got, want)
		}
	}
	if math.Abs(sent-offered/1e6)/(offered/1e6) > 0.02 {
		t.Errorf("the sender sent %.2f Mbit/s, not the 200 asked for: the loss below is not the queue's", sent)
	}

	// Loss: per step from the summary, and in all from the sink's account.
	loss := medians["UDP upload loss"]
	t.Logf("loss: median step %.2f%%, expected %.2f%%", loss, 100*(1-want*1e6/offered))
	if loss < 45 || loss > 55 {
		t.Errorf("UDP upload loss median %.2f%%, want 45%% to 55%%", loss)
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
		t.Logf("sink's account: %s", e.Message)
		if total < 45 || total > 55 {
			t.Errorf("the sink lost %.1f%% in all, want 45%% to 55%%: %s", total, e.Message)
		}
	}
	if !found {
		t.Errorf("no sink account among the events: %+v", run.Events)
	}

	// Ping waits behind the full bfifo.
	idle, loaded := medians["Ping (ms) ICMP idle"], medians["Ping (ms) ICMP loaded"]
	bound := queue*8/rate*1e3 + idle
	t.Logf("ping: loaded median %.2f ms, idle %.3f ms; the full bfifo holds %.2f ms", loaded, idle, bound)
	if math.Abs(loaded-bound)/bound > 0.10 {
		t.Errorf("loaded ping median %.2f ms is not within 10%% of %.2f ms", loaded, bound)
	}
}
