package e2e

import (
	"math"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// Issue 10's request/response acceptance on one shaped lab (htb 100mbit, bfifo
// 300000, GSO off): tcp_rr alone, then rr_under_load beside 4 TCP downloads. Under
// load there are fewer transactions and each takes longer; a transaction's
// response waits in the same full bfifo as ICMP's echo reply, so the RR latency
// under load is within 10% of the ICMP median of the same run.
func TestRRUnderLoad(t *testing.T) {
	inv, _ := lab(t, "--rate", "100mbit", "--queue", "bfifo:300000", "--gso", "off")
	var loadedRun *datafile.Run
	run := func(test string) map[string]float64 {
		t.Helper()
		out := t.TempDir()
		r := bb(t, "run", "-H", inv, "-l", "10", "-d", "2", "-o", out, "--format", "json", test)
		if r.err != nil {
			t.Fatalf("%s: %v\n%s", test, r.err, r.stderr)
		}
		loadedRun = dataFile(t, out)
		return parseSummary(t, r.stdout)
	}
	alone, loaded := run("tcp_rr"), run("rr_under_load")
	t.Logf("tcp_rr: %.3f ms, %.0f transactions/s; rr_under_load: %.3f ms, %.0f transactions/s, ICMP loaded median %.3f ms",
		alone["TCP RR latency"], alone["TCP RR transactions"], loaded["TCP RR latency"], loaded["TCP RR transactions"],
		loaded["Ping (ms) ICMP loaded"])
	if !(loaded["TCP RR transactions"] < alone["TCP RR transactions"]) || !(loaded["TCP RR latency"] > alone["TCP RR latency"]) {
		t.Errorf("under load: %.0f transactions/s at %.3f ms; alone: %.0f at %.3f ms: want fewer and slower under load",
			loaded["TCP RR transactions"], loaded["TCP RR latency"], alone["TCP RR transactions"], alone["TCP RR latency"])
	}
	icmp := loaded["Ping (ms) ICMP loaded"]
	if d := math.Abs(loaded["TCP RR latency"]-icmp) / icmp; !(d <= 0.10) {
		t.Errorf("RR latency under load %.3f ms is %.1f%% from the ICMP median %.3f ms of the same run; want within 10%%",
			loaded["TCP RR latency"], d*100, icmp)
	}
	// The downloads fill the line, as far as this machine lets them: held to what
	// htb passed, and htb to its rate (checkTCPDownload).
	checkTCPDownload(t, loadedRun, loaded["TCP download sum"], 100e6)
}
