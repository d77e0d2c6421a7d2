package vmlab

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/internal/e2eutil"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/report"
)

// l4sChecks runs the L4S tests through the router's dualpi2, fq_codel and cake
// for 30 s each and checks what dualpi2 is built for (RFC 9332):
//   - l4s_coexist on mq+dualpi2 with min_qlen_step 1: the scalable flow sees CE
//     marks and the classic flow's rate over the scalable flow's stays within
//     1/3..3. At the lab's 10 Mbit/s one frame takes 1.2 ms, past the default
//     1 ms step threshold, and the emulated NIC completes its ring in batches,
//     so an L packet that met no other L packet but waited for the ring was
//     step-marked all the same (the step threshold made 84% of one run's marks,
//     3956 of 4736), and the balance measured the emulator: 1.1 to 4.4 over
//     eight runs, 4.4 in a CI run. min_qlen_step 1, the knob dualpi2 has for
//     this, step-marks only a packet that joins an L queue: 1.4 to 1.9 over
//     four runs;
//   - the same steered to one of the four tx queues (mq's children each drain
//     through a driver ring of their own, and which one a probe's hash picks,
//     with or without a bulk flow in it, moved its latency by more than the
//     qdisc did: in about a third of runs the ping's child held none of the
//     flows): the data file puts both flows and both probes in mq's child 1:1
//     on the router's test0, the summary warns of no probe in another queue,
//     and the L4S probe's loaded median is below the classic probe's; with
//     fq_codel (ECN on) on one tx queue in dualpi2's place the two probes'
//     medians close to each other;
//   - l4s_overload on mq+dualpi2, an ECT(1) flood at 1.2 times the line: the
//     classic flow is not starved to zero (it moves in most steps) and the
//     qdisc drops;
//   - tcp_ndown with one dctcp and one cubic flow on mq+dualpi2, one tx queue,
//     the hosts at net.ipv4.tcp_ecn 2: the dctcp flow negotiates ECN and is
//     marked (a listener of the host's default would decline its ECT-marked SYN);
//   - rate_steps under htb + dualpi2 stepping from 0.8 of the line to 0.2 and
//     back: the rate went through the schedule, and the queue drained at it.
func l4sChecks(t *testing.T, invPath string, inv *inventory.Inventory, before, out string) {
	t.Run("l4s", func(t *testing.T) {
		for _, s := range []string{"mq+dualpi2+bql", "fq_codel+bql"} {
			addSetup(t, invPath, s+"-1q", &inventory.SetupSpec{Extends: s, Channels: map[string]int{"combined": 1}})
		}
		dir := filepath.Join(out, "l4s")
		checks := newCheckTable(t)
		add := checks.add

		addSetup(t, invPath, "mq+dualpi2+bql-q1", &inventory.SetupSpec{Extends: "mq+dualpi2+bql", Params: map[string]string{"min_qlen_step": "1"}})
		_, rows := runOnce(t, invPath, inv, before, dir, "30", "l4s_coexist", "mq+dualpi2+bql-q1")
		marks, balance := rows["L4S download CE marks"], rows["rate balance"]
		add("mq+dualpi2+bql-q1", "l4s_coexist: the scalable flow is marked", marks > 0, "CE marks median %.1f/s", marks)
		add("mq+dualpi2+bql-q1", "l4s_coexist: rate balance within 1/3..3", balance >= 1.0/3 && balance <= 3,
			"classic over L4S median %.2f (TCP %.2f, L4S %.2f Mbit/s)", balance, rows["TCP download::1"], rows["L4S download"])

		probes := func(rows map[string]float64) (l4s, classic float64) {
			return rows["Ping (ms) UDP L4S RTT loaded"], rows["Ping (ms) UDP classic RTT loaded"]
		}
		r, rows := runOnce(t, invPath, inv, before, dir, "30", "l4s_coexist", "mq+dualpi2+bql-steer")
		l, c := probes(rows)
		// Every probe and flow in the child of tx-0, where the router's test0
		// sends the downloads and the probes' replies.
		var placed []string
		oneQueue := true
		uses := report.QueueUses(r)
		for _, u := range uses {
			for _, q := range u.Queues {
				if q.Dev == "router:test0" {
					placed = append(placed, u.Series+" "+q.Qdisc)
					oneQueue = oneQueue && q.Qdisc == "1:1"
				}
			}
		}
		warned := report.ProbeQueueWarnings(uses)
		add("mq+dualpi2+bql-steer", "l4s_coexist: flows and probes in one tx queue", oneQueue && len(placed) >= 5 && len(warned) == 0,
			"router:test0: %s; warnings %q", strings.Join(placed, ", "), warned)
		// dualpi2's C queue aims at 15 ms, its L queue at under 1.
		add("mq+dualpi2+bql-steer", "l4s_coexist: the L4S probe below the classic one", l < c,
			"loaded medians %.2f and %.2f ms (C queue delay %.2f, L queue delay %.2f ms)", l, c,
			rows["Qdisc router:test0 C queue delay"], rows["Qdisc router:test0 L queue delay"])
		add("mq+dualpi2+bql-steer", "l4s_coexist: the scalable flow is marked", rows["L4S download CE marks"] > 0,
			"CE marks median %.1f/s, rate balance %.2f", rows["L4S download CE marks"], rows["rate balance"])

		// DCTCP beside cubic, the hosts' net.ipv4.tcp_ecn left at 2: dctcp's SYN
		// is ECT-marked, which Linux takes up only on a listener whose own
		// congestion control needs ECN; the cubic flow asks for none.
		for _, role := range []string{"client", "server"} {
			guestSSH(t, inv, role, "modprobe tcp_dctcp")
		}
		r, rows = runOnce(t, invPath, inv, before, dir, "20", "tcp_ndown", "mq+dualpi2+bql-1q", "cc=dctcp,cubic", "download_streams=2", "tcp_info=true")
		// The streams' ECN lines (an alert among them, had it been refused).
		var said []string
		for _, e := range r.Events {
			if strings.HasPrefix(e.Message, "tcp-streams: ") {
				said = append(said, e.Message)
			}
		}
		want := "tcp-streams: 1 flows run dctcp, which needs ECN, and negotiated ECN (RFC 3168) (TCP download::1)"
		add("mq+dualpi2+bql-1q", "dctcp negotiates ECN at tcp_ecn 2", slices.Equal(said, []string{want}), "streams said %q", said)
		// The marks dctcp's own connection counted (tcp_info), beside the qdisc's.
		var ce float64
		for _, x := range r.Samples["TCP download::1 delivered_ce"] {
			ce += x.V
		}
		add("mq+dualpi2+bql-1q", "dctcp's packets are ECN-marked", rows["Qdisc router:test0 ECN marks"] > 0 && ce > 0,
			"ECN marks median %.1f/s, drops %.1f/s; dctcp's connection counted %.0f CE-marked deliveries (dctcp %.2f, cubic %.2f Mbit/s)",
			rows["Qdisc router:test0 ECN marks"], rows["Qdisc router:test0 drops"], ce, rows["TCP download::1"], rows["TCP download::2"])
		for _, role := range []string{"client", "server"} {
			guestSSH(t, inv, role, "rmmod tcp_dctcp || true")
		}

		_, rows = runOnce(t, invPath, inv, before, dir, "30", "l4s_coexist", "fq_codel+bql-1q")
		l, c = probes(rows)
		// Both probes are sparse flows of one fq_codel, behind one ring: a
		// quarter apart at most (dualpi2's were twice).
		add("fq_codel+bql-1q", "l4s_coexist: the two probes close", math.Abs(l-c) <= 0.25*math.Max(l, c),
			"loaded medians %.2f and %.2f ms", l, c)

		r, rows = runOnce(t, invPath, inv, before, dir, "30", "l4s_overload", "mq+dualpi2+bql", "flood_rate=12M")
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
		// rate_steps under dualpi2: the guest's tc (iproute2 7.2) takes the
		// schedule's changes from the tc -batch the run keeps, on time, and the
		// queue drains at each step's rate.
		hiK, loK := int(0.8*rate/1e3), int(0.2*rate/1e3)
		hi, lo := fmt.Sprintf("%dkbit", hiK), fmt.Sprintf("%dkbit", loK)
		hiM, loM := float64(hiK)/1e3, float64(loK)/1e3
		addSetup(t, invPath, "dualpi2-steps", &inventory.SetupSpec{Rate: hi, Root: &inventory.QdiscSpec{Kind: "dualpi2"},
			RateSchedule: []inventory.RateStepSpec{{At: "10s", Rate: lo}, {At: "20s", Rate: hi}}})
		r, _ = runOnce(t, invPath, inv, before, dir, "26", "rate_steps", "dualpi2-steps")
		var seen []float64
		for _, x := range r.Samples["shaper router:test0 rate"] {
			if len(seen) == 0 || seen[len(seen)-1] != x.V {
				seen = append(seen, x.V)
			}
		}
		add("dualpi2-steps", "rate_steps: the rate went through the schedule", slices.Equal(seen, []float64{hiM, loM, hiM}), "rates %v Mbit/s", seen)
		bytes, t0 := r.Samples["qdisc router:test0 root bytes"], r.Metadata.T0
		low, high := e2eutil.DrainMbit(bytes, t0+12, t0+19), e2eutil.DrainMbit(bytes, t0+23, t0+28)
		add("dualpi2-steps", "rate_steps: drained at the low step's rate", low <= loM*1.05 && low >= loM*0.7, "%.2f Mbit/s from 12 to 19 s", low)
		add("dualpi2-steps", "rate_steps: took the rate back", high >= hiM/2, "%.2f Mbit/s from 23 to 28 s", high)
		t.Logf("VM lab L4S checks (30 s, line rate %.0f Mbit/s):\n%s", rate/1e6, strings.TrimRight(checks.String(), "\n"))
	})
}
