package vmlab

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/inventory"
)

// l4sChecks runs the L4S tests through the router's dualpi2, fq_codel and cake
// for 30 s each and checks what dualpi2 is built for (RFC 9332):
//   - l4s_coexist on mq+dualpi2: the scalable flow sees CE marks and the
//     classic flow's rate over the scalable flow's stays within 1/3..3;
//   - the same on one tx queue (mq's children each drain through a driver ring of
//     their own, and which one a probe's hash picks, with or without a bulk flow
//     in it, moves its latency by more than the qdisc does): the L4S probe's
//     loaded median below the classic probe's; with fq_codel (ECN on) in
//     dualpi2's place the two probes' medians close to each other;
//   - l4s_overload on mq+dualpi2, an ECT(1) flood at 1.2 times the line: the
//     classic flow is not starved to zero (it moves in most steps) and the
//     qdisc drops.
func l4sChecks(t *testing.T, invPath string, inv *inventory.Inventory, before, out string) {
	t.Run("l4s", func(t *testing.T) {
		for _, s := range []string{"mq+dualpi2+bql", "fq_codel+bql"} {
			addSetup(t, invPath, s+"-1q", &inventory.SetupSpec{Extends: s, Channels: map[string]int{"combined": 1}})
		}
		dir := filepath.Join(out, "l4s")
		checks := newCheckTable(t)
		add := checks.add

		_, rows := runOnce(t, invPath, inv, before, dir, "30", "l4s_coexist", "mq+dualpi2+bql")
		marks, balance := rows["L4S download CE marks"], rows["rate balance"]
		add("mq+dualpi2+bql", "l4s_coexist: the scalable flow is marked", marks > 0, "CE marks median %.1f/s", marks)
		add("mq+dualpi2+bql", "l4s_coexist: rate balance within 1/3..3", balance >= 1.0/3 && balance <= 3,
			"classic over L4S median %.2f (TCP %.2f, L4S %.2f Mbit/s)", balance, rows["TCP download::1"], rows["L4S download"])

		probes := func(rows map[string]float64) (l4s, classic float64) {
			return rows["Ping (ms) UDP L4S RTT loaded"], rows["Ping (ms) UDP classic RTT loaded"]
		}
		_, rows = runOnce(t, invPath, inv, before, dir, "30", "l4s_coexist", "mq+dualpi2+bql-1q")
		l, c := probes(rows)
		// dualpi2's C queue aims at 15 ms, its L queue at under 1.
		add("mq+dualpi2+bql-1q", "l4s_coexist: the L4S probe below the classic one", l < c,
			"loaded medians %.2f and %.2f ms (C queue delay %.2f, L queue delay %.2f ms)", l, c,
			rows["Qdisc router:test0 C queue delay"], rows["Qdisc router:test0 L queue delay"])
		add("mq+dualpi2+bql-1q", "l4s_coexist: the scalable flow is marked", rows["L4S download CE marks"] > 0,
			"CE marks median %.1f/s, rate balance %.2f", rows["L4S download CE marks"], rows["rate balance"])

		_, rows = runOnce(t, invPath, inv, before, dir, "30", "l4s_coexist", "fq_codel+bql-1q")
		l, c = probes(rows)
		// Both probes are sparse flows of one fq_codel, behind one ring: a
		// quarter apart at most (dualpi2's were twice).
		add("fq_codel+bql-1q", "l4s_coexist: the two probes close", math.Abs(l-c) <= 0.25*math.Max(l, c),
			"loaded medians %.2f and %.2f ms", l, c)

		r, rows := runOnce(t, invPath, inv, before, dir, "30", "l4s_overload", "mq+dualpi2+bql", "flood_rate=12M")
		classic, drops := rows["TCP download::1"], rows["Qdisc router:test0 drops"]
		// Not starved to zero, as the issue asks: how much it keeps depends on
		// whether mq's hash put it in the flood's child (0.29 Mbit/s median in
		// one CI run) or another (4.50 in a run by hand), so what is held is
		// that it delivered throughout, some bytes in most steps.
		var delivered int64
		steps, moving := 0, 0
		for _, x := range r.Samples["TCP download::1"] {
			steps++
			delivered += x.Bytes
			if x.Bytes > 0 {
				moving++
			}
		}
		add("mq+dualpi2+bql", "l4s_overload: the classic flow is not starved to zero", delivered > 0 && moving*2 > steps,
			"TCP median %.2f Mbit/s, bytes in %d of %d steps, beside the flood's %.2f (loss %.1f%%)", classic, moving, steps, rows["L4S flood"], rows["L4S flood loss"])
		add("mq+dualpi2+bql", "l4s_overload: dualpi2 drops under overload", drops > 0, "drops median %.1f/s", drops)
		add("mq+dualpi2+bql", "l4s_overload: run complete", !r.Incomplete, "%s", r.Error)
		t.Logf("VM lab L4S checks (30 s, line rate %.0f Mbit/s):\n%s", rate/1e6, strings.TrimRight(checks.String(), "\n"))
	})
}
