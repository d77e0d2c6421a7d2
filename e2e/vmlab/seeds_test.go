package vmlab

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/report"
)

// seedWorkloads runs the seeds' other workloads through the router's setups and
// checks the direction each seed reports:
//   - seed 001: a UDP flood at twice the line rate, through pfifo_fast and through
//     fq_codel: the receiver gets the line's payload rate, about half is lost, and
//     fq_codel keeps the ping (a sparse flow beside the flood) far below
//     pfifo_fast's, which waits behind the whole queue;
//   - seed 004: request/response transactions beside bulk downloads through
//     pfifo_fast, with GSO on and off: under load every transaction waits in the
//     same queue as ICMP (within a quarter of its median), and takes far longer
//     than alone.
func seedWorkloads(t *testing.T, invPath string, inv *inventory.Inventory, before, out string) {
	t.Run("seeds", func(t *testing.T) {
		run := func(test, setup string, te ...string) (*datafile.Run, map[string]float64) {
			t.Helper()
			return runOnce(t, invPath, inv, before, filepath.Join(out, "seeds"), "15", test, setup, te...)
		}
		checks := newCheckTable(t)
		add := checks.add

		// Seed 001. The flood goes up, through the router's device towards the
		// server; its datagrams are 1470 bytes, framed in 1512.
		payloadRate := rate / 1e6 * 1470 / 1512
		ping := map[string]float64{}
		for _, setup := range []string{"pfifo_fast+bql", "fq_codel+bql"} {
			r, rows := run("udp_flood", setup, "udp_bandwidth=20M")
			got, loss, sent := rows["UDP upload"], rows["UDP upload loss"], rows["UDP upload sent"]
			add(setup, "udp_flood: the line's payload rate arrives", got > payloadRate*0.9 && got < payloadRate*1.05,
				"UDP upload median %.2f Mbit/s of %.2f", got, payloadRate)
			add(setup, "udp_flood: the sender offers twice the line", sent > 19 && sent < 21, "UDP upload sent median %.2f Mbit/s", sent)
			if setup == "pfifo_fast+bql" {
				// pfifo_fast's queue is full within a second and drops what does
				// not fit. fq_codel's grows on for the whole run (codel raises its
				// drop rate against a flow that does not answer it slowly), so the
				// datagrams still queued are not yet lost by the sink's count.
				add(setup, "udp_flood: about half is lost", loss > 40 && loss < 60, "loss median %.1f%% (20 Mbit/s offered)", loss)
			} else {
				drops := rows["Qdisc router:test1 drops"]
				add(setup, "udp_flood: fq_codel drops from the flood", drops > 0, "%.0f drops/s, loss median %.1f%% by the sink's count", drops, loss)
			}
			ping[setup] = rows["Ping (ms) ICMP loaded"]
			add(setup, "udp_flood: run complete", !r.Incomplete, "%s", r.Error)
		}
		add("fq_codel+bql", "udp_flood: ping far below pfifo_fast's (seed 001)", ping["fq_codel+bql"] < ping["pfifo_fast+bql"]/4,
			"loaded median %.1f ms vs %.1f ms", ping["fq_codel+bql"], ping["pfifo_fast+bql"])

		// Seed 004.
		_, alone := run("tcp_rr", "pfifo_fast+bql")
		for _, setup := range []string{"pfifo_fast+bql", "pfifo_fast+bql-gso"} {
			r, rows := run("rr_under_load", setup)
			rr := rows["TCP RR latency"]
			// pfifo_fast's queue grows for the whole run, towards a second: a sample
			// is taken per completed transaction, so the fast ones of the run's start
			// are most of the samples, while ICMP's are one a step. Compared over
			// time (each step the transaction in flight then), they agree.
			// Above ICMP's by more when the full queue drops a response segment: the
			// transaction then waits for TCP's retransmission too (934 against 772 ms
			// was seen), while a dropped probe only goes missing from ICMP's mean.
			// Over the steps a transaction covered only: CI once saw RR 589 against
			// ICMP 790 ms over the whole window, with the run's last steps (the
			// longest queue) left without RR by a transaction cut off at its end.
			rrTime, icmpTime, steps, retrans := rrAndICMP(r)
			add(setup, "rr_under_load: RR waits as ICMP does", steps >= 30 && rrTime > icmpTime*0.8 && rrTime < icmpTime*1.5,
				"over the %d loaded steps a transaction covered: RR %.0f ms, ICMP %.0f ms (RR median per sample %.0f ms; %d steps of retransmitted transactions left out)",
				steps, rrTime, icmpTime, rr, retrans)
			add(setup, "rr_under_load: slower than tcp_rr alone", rr > 4*alone["TCP RR latency"] && rows["TCP RR transactions"] < alone["TCP RR transactions"]/4,
				"%.2f ms, %.0f transactions/s under load; %.2f ms, %.0f alone", rr, rows["TCP RR transactions"], alone["TCP RR latency"], alone["TCP RR transactions"])
		}
		t.Logf("VM lab seed workloads (15 s, line rate %.0f Mbit/s):\n%s", rate/1e6, strings.TrimRight(checks.String(), "\n"))
	})
}

// runOnce runs test with setup for length seconds on the VM lab, checks that
// the guests are as they were, and returns its data file and summary medians.
func runOnce(t *testing.T, invPath string, inv *inventory.Inventory, before, out, length, test, setup string, te ...string) (*datafile.Run, map[string]float64) {
	t.Helper()
	dir := filepath.Join(out, test+"-"+setup)
	args := []string{"run", "-H", invPath, "--setup", setup, "-l", length, "-d", "2", "-o", dir}
	for _, kv := range te {
		args = append(args, "--te", kv)
	}
	stdout, stderr, err := bb(t, 10*time.Minute, append(args, test)...)
	if err != nil {
		t.Fatalf("%s with %s: %v\n%s\n%s", test, setup, err, stdout, stderr)
	}
	t.Logf("%s with %s:\n%s", test, setup, stdout)
	if after := guestState(t, inv); after != before {
		t.Errorf("after %s with %s the guests are not as they were:\nbefore:\n%s\nafter:\n%s", test, setup, before, after)
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*.bb.json.gz"))
	if len(paths) != 1 {
		t.Fatalf("data files %v", paths)
	}
	r, err := datafile.Read(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	return r, summaryRows(t, paths[0])
}

// rrAndICMP are RR's and ICMP's means over the same steps of the loaded window: the
// steps a completed transaction covered (RR's value there: the transaction in
// flight then), and the ICMP replies that arrived in them. A transaction still in
// flight when the run ends leaves no sample, so the run's last steps, behind the
// longest queue, may have no RR value; ICMP's replies there leave its mean too.
// So do the steps of a transaction that waited longer than any probe of the window
// by more than TCP's least retransmission timeout (200 ms): it lost a segment to
// the full queue and waited for the retransmission, where a lost probe goes
// missing from ICMP instead (CI saw RR 1567 against ICMP 764 ms when one did).
// retrans counts those steps.
func rrAndICMP(r *datafile.Run) (rr, icmp float64, steps, retrans int) {
	m := r.Metadata
	from, to := m.T0+m.Delay, m.T0+m.Delay+m.Length
	g := report.GridOf(m)
	longest := math.Inf(-1)
	for _, s := range r.Samples["Ping (ms) ICMP"] {
		if !s.Lost && s.T > from && s.T <= to {
			longest = max(longest, s.V)
		}
	}
	covered := map[int]bool{}
	var rrs, icmps []float64
	for k, v := range report.AlignIntervals(g, r.Samples["TCP RR latency"]) {
		if t := g.Time(k); t > from && t <= to && !math.IsNaN(v) {
			if v > longest+200 {
				retrans++
				continue
			}
			covered[k] = true
			rrs = append(rrs, v)
		}
	}
	for _, s := range r.Samples["Ping (ms) ICMP"] {
		// the step whose interval (Time(k-1), Time(k)] the reply arrived in
		if k := int(math.Ceil((s.T - g.T0) / g.Step)); !s.Lost && covered[k] {
			icmps = append(icmps, s.V)
		}
	}
	return report.Mean(rrs), report.Mean(icmps), len(rrs), retrans
}
