package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// Two client/server pairs over the lab's one bottleneck (testbed up --pairs 2):
// every pair runs the test, each pair's rows are in the summary, and the sum over
// both is what the one bottleneck passed, within 2%: the second pair's traffic
// crosses the same htb as the first's, not a way around it.
func TestTwoPairsOneBottleneck(t *testing.T) {
	invPath, inv := lab(t, "--rate", "100mbit", "--gso", "off", "--pairs", "2")
	if ps := inv.PairsOf(); len(ps) != 2 || ps[1].Client != "client2" || ps[1].Server != "server2" || len(inv.Bottleneck) != 2 {
		t.Fatalf("the lab's inventory: pairs %+v, bottleneck %+v", ps, inv.Bottleneck)
	}
	out := t.TempDir()
	r := bb(t, "run", "-H", invPath, "-l", "15", "-d", "2", "-o", out, "--format", "json", "--sampler", "cpu@server", "--sampler", "softnet@client", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	medians := parseSummary(t, r.stdout)
	// The pairs' pings together: the rows compare and batch read.
	rows := []string{"Ping (ms) ICMP loaded", "Ping (ms) ICMP idle"}
	for _, pair := range []string{"1", "2"} {
		rows = append(rows, datafile.PairName("TCP download sum", pair), datafile.PairName("Ping (ms) ICMP", pair),
			datafile.PairName("Ping (ms) ICMP", pair)+" loaded")
		for f := 1; f <= 4; f++ {
			rows = append(rows, datafile.PairName(fmt.Sprintf("TCP download::%d", f), pair))
		}
	}
	for _, row := range rows {
		if _, ok := medians[row]; !ok {
			t.Errorf("no row %q in\n%s", row, r.stdout)
		}
	}
	run := dataFile(t, out)
	sum := medians["TCP download sum"]
	p1, p2 := medians["TCP download sum (pair 1)"], medians["TCP download sum (pair 2)"]
	t.Logf("TCP download sum median %.2f Mbit/s (pair 1 %.2f, pair 2 %.2f)", sum, p1, p2)
	checkTCPDownload(t, run, sum, 100e6)
	// Eight flows through one queue: neither pair gets a tenth of the link.
	if want := 100 * 1448.0 / 1514; p1 < want/10 || p2 < want/10 {
		t.Errorf("pair sums %.2f and %.2f: one pair starves", p1, p2)
	}
	// The data file says which pair each series is of; the samplers ran once on
	// each server or client, named for its host, not its pair.
	pairs := map[string]int{}
	conns := map[string]int{}
	samplerHosts := map[string]bool{}
	for _, se := range run.Series {
		if se.Kind == datafile.KindConn {
			// Each flow's and ping's connection, declared for its pair.
			conns[se.Pair]++
		} else {
			pairs[se.Pair]++
		}
		if se.Kind == "cpu" || se.Kind == "softnet" {
			samplerHosts[se.Kind+" "+se.Host] = true
			if se.Pair != "" {
				t.Errorf("sampler series %s has pair %q", se.Name, se.Pair)
			}
		}
		if se.Pair != "" && !strings.HasSuffix(se.Name, " (pair "+se.Pair+")") {
			t.Errorf("series %s of pair %s is not named for it", se.Name, se.Pair)
		}
	}
	if pairs["1"] != 5 || pairs["2"] != 5 || conns["1"] != 5 || conns["2"] != 5 {
		t.Errorf("series by pair %v, their connections %v, want 5 (4 flows and ping) each", pairs, conns)
	}
	for _, h := range []string{"cpu server", "cpu server2", "softnet client", "softnet client2"} {
		if !samplerHosts[h] {
			t.Errorf("no %s series (have %v)", h, samplerHosts)
		}
	}
	for _, name := range []string{"streams/1 started", "streams/2 started"} {
		n := 0
		for _, e := range run.Events {
			if e.Message == name {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d events %q in the data file, want 1", n, name)
		}
	}
}
