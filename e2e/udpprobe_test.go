package e2e

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// TestUDPProbe is the UDP probe's acceptance (issue 10 item 3, issue 12 item 2):
// on a lab that run -H local brings up, htb at 100 Mbit/s over a 300000-byte bfifo
// with a TCP download filling it, the probe waits in the same queue as ICMP ping,
// so their loaded medians agree; each probe's up and down add up to its RTT (they
// share its four stamps); and the download's queue, on the server's egress, shows
// in down, not up.
func TestUDPProbe(t *testing.T) {
	needLab(t)
	out := t.TempDir()
	// A probe every 50 ms: one TCP download's queue saws between empty and full
	// (0-24 ms), and the medians of 50 replies a probe (at 0.2 s) came 5.5% apart
	// in one CI run: 200 hold the comparison to the queue, not to the draw.
	r := bb(t, "run", "-H", "local", "--local-rate", "100mbit", "--local-queue", "bfifo:300000", "--local-gso", "off",
		"-l", "10", "-d", "2", "-s", "0.05", "-o", out, "--format", "json", "udp_probe")
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
	// The replies of a window, by probe number, as the summary's loaded and idle
	// rows take them (by arrival time).
	window := func(name string, from, to float64) map[int]float64 {
		vs := map[int]float64{}
		for _, s := range run.Samples[name] {
			if !s.Lost && s.T >= from && s.T <= to {
				vs[s.Seq] = s.V
			}
		}
		return vs
	}
	med := func(vs map[int]float64) float64 {
		var xs []float64
		for _, v := range vs {
			xs = append(xs, v)
		}
		if len(xs) == 0 {
			return math.NaN()
		}
		return median(xs)
	}
	const rttName, upName, downName = "UDP probe RTT", "UDP probe up", "UDP probe down"

	for _, se := range run.Series {
		if strings.HasPrefix(se.Name, "UDP probe ") &&
			(se.Kind != "udpprobe" || se.Units != "ms" || se.Host != "client" || se.Timestamps != datafile.StampsKernel) {
			t.Errorf("series %+v: want kind udpprobe, ms, measured on the client with the kernel's stamps", se)
		}
	}

	// The loaded medians: the probe's RTT within 5% of ICMP's.
	icmp := medians["Ping (ms) ICMP loaded"]
	rtt := window(rttName, loadStart, loadEnd)
	if len(rtt) < 160 {
		t.Fatalf("%d probe replies in the 10 s loaded window, want about 200", len(rtt))
	}
	probe := med(rtt)
	t.Logf("loaded medians: UDP probe RTT %.3f ms (%d replies), ICMP %.3f ms: %+.2f%%", probe, len(rtt), icmp, 100*(probe-icmp)/icmp)
	if icmp < 5 {
		t.Fatalf("loaded ICMP median %.3f ms: the download did not fill the queue, nothing to compare", icmp)
	}
	if math.Abs(probe-icmp)/icmp > 0.05 {
		t.Errorf("UDP probe's loaded RTT median %.3f ms is not within 5%% of ICMP's %.3f ms", probe, icmp)
	}

	// Every probe: up + down = RTT, exactly up to rounding; none without the other.
	allRTT, allUp, allDown := window(rttName, 0, math.Inf(1)), window(upName, 0, math.Inf(1)), window(downName, 0, math.Inf(1))
	if len(allUp) != len(allRTT) || len(allDown) != len(allRTT) {
		t.Errorf("%d RTT, %d up and %d down samples: want one of each per reply", len(allRTT), len(allUp), len(allDown))
	}
	worst := 0.0
	for k, v := range allRTT {
		up, okUp := allUp[k]
		down, okDown := allDown[k]
		if !okUp || !okDown {
			t.Errorf("probe %d: RTT %.3f ms without up or down", k, v)
			continue
		}
		worst = math.Max(worst, math.Abs(up+down-v))
	}
	t.Logf("largest |up + down - RTT| over %d probes: %.3g ms", len(allRTT), worst)
	if worst > 1e-6 {
		t.Errorf("up + down differs from RTT by up to %.3g ms", worst)
	}

	// The queue is the server's egress (downloads): it shows in down. Up stays the
	// idle path's, within the clock offset estimate (the run's namespaces share one
	// clock, so the estimate is all its error).
	upLoaded, downLoaded := med(window(upName, loadStart, loadEnd)), med(window(downName, loadStart, loadEnd))
	upIdle, downIdle := med(window(upName, m.T0, loadStart)), med(window(downName, m.T0, loadStart))
	t.Logf("up: idle %.3f ms, loaded %.3f ms; down: idle %.3f ms, loaded %.3f ms", upIdle, upLoaded, downIdle, downLoaded)
	if math.Abs(upLoaded) > 1 || math.Abs(upLoaded-upIdle) > 0.5 {
		t.Errorf("loaded up median %.3f ms (idle %.3f): the download's queue must not show on the way up", upLoaded, upIdle)
	}
	if downLoaded < 0.9*probe || downLoaded-downIdle < 5 {
		t.Errorf("loaded down median %.3f ms (idle %.3f, RTT %.3f): the download's queue must show on the way down", downLoaded, downIdle, probe)
	}

	// The closing line counts every probe, and says how far one-way delays are
	// to be trusted.
	var summary, census string
	for _, e := range run.Events {
		switch {
		case !strings.Contains(e.Message, "udp-probe UDP probe to "):
		case strings.Contains(e.Message, "one-way delays are"):
			summary = e.Message
		case strings.Contains(e.Message, "; the server got "):
			census = e.Message
		}
	}
	// Unmarked probes are counted Not-ECT both ways, every reply.
	if want := fmt.Sprintf("sent Not-ECT; the server got Not-ECT %d; the replies came back Not-ECT %d", len(allRTT), len(allRTT)); !strings.HasSuffix(census, want) {
		t.Errorf("the census line %q, want one ending %q", census, want)
	}
	var sent, replies int
	i := strings.Index(summary, ": sent ")
	if i < 0 || !strings.Contains(summary, "one-way delays are ±") {
		t.Fatalf("no closing line in the run's events: %q", summary)
	}
	if _, err := fmt.Sscanf(summary[i:], ": sent %d, replies %d,", &sent, &replies); err != nil || replies != len(allRTT) ||
		sent != len(run.Samples[rttName]) {
		t.Errorf("closing line %q: want %d replies of %d probes", summary, len(allRTT), len(run.Samples[rttName]))
	}
	t.Logf("%s", summary)
	lost := slices.IndexFunc(run.Samples[rttName], func(s datafile.Sample) bool { return s.Lost }) >= 0
	if lost != (replies < sent) {
		t.Errorf("lost samples %v, but %d replies of %d", lost, replies, sent)
	}
}
