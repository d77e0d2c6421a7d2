package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/report"
)

const steerSetups = `setups:
  mq+pfifo: {title: "MQ + PFIFO", mq: {kind: pfifo, params: {limit: "1000"}}}
  mq+pfifo-steer: {extends: mq+pfifo, title: "MQ + PFIFO, steered to tx-1", steer: {tx_queue: 1}}
`

// xpsState is every tx queue's XPS mask on both ends of the test link.
func xpsState(t *testing.T, inv *inventory.Inventory) string {
	t.Helper()
	var b strings.Builder
	for _, role := range []string{"client", "server"} {
		out, err := exec.Command("ip", "netns", "exec", inv.Testbed+"-"+role, "sh", "-c",
			`for q in /sys/class/net/test0/queues/tx-*; do echo "${q##*/} $(cat $q/xps_cpus)"; done`).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		b.WriteString(role + ":\n" + string(out))
	}
	return b.String()
}

// childPackets are the packets each of the mq root's children on dev sent, by
// parent, from a tc -s -j state the data file keeps.
func childPackets(t *testing.T, run *datafile.Run, host, phase string) map[string]float64 {
	t.Helper()
	for _, st := range run.States {
		if st.Host != host || st.Phase != phase {
			continue
		}
		var qs []struct {
			Kind    string  `json:"kind"`
			Parent  string  `json:"parent"`
			Packets float64 `json:"packets"`
		}
		if err := json.Unmarshal(st.TC, &qs); err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, q := range qs {
			if q.Kind != "mq" && q.Parent != "" {
				out[q.Parent] = q.Packets
			}
		}
		return out
	}
	t.Fatalf("no %s state of %s", phase, host)
	return nil
}

// A setup's steer: puts a test's flows and its ping on one tx queue of the
// 4-queue test link: tc's per-child counters at the run's end show every packet
// of server:test0 (the downloads and the ping's replies) and client:test0 (the
// ACKs and the requests) in child 1:2, tx-1's, none in the others; the data file
// attributes each flow and the ping to that child, the summary warns of
// nothing, and the tracer's counts per child are tc's. After the run every
// queue's XPS mask is as found. The same test unsteered spreads the four flows
// over the children, and the tracer's counts per child are tc's there too.
func TestSteerPutsFlowsAndPingOnOneQueue(t *testing.T) {
	invPath, inv := lab(t, "--queues", "4")
	appendSetups(t, invPath, steerSetups)
	before, state := xpsState(t, inv), labState(t, inv)
	for _, setup := range []string{"mq+pfifo-steer", "mq+pfifo"} {
		out := t.TempDir()
		r := bbEnv(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "run", "-H", invPath, "--setup", setup, "-l", "5", "-d", "1", "-o", out, "tcp_4down")
		if r.err != nil {
			t.Fatalf("%s: %v\n%s", setup, r.err, r.stderr)
		}
		if now := xpsState(t, inv); now != before {
			t.Errorf("%s: XPS not restored:\nbefore\n%s\nafter\n%s", setup, before, now)
		}
		if now := labState(t, inv); now != state {
			t.Errorf("%s: not restored:\nbefore\n%s\nafter\n%s", setup, state, now)
		}
		run := dataFile(t, out)
		uses := report.QueueUses(run)
		s := report.Summarize(run)
		t.Logf("%s:\n%s\nwarnings: %q", setup, report.QueuesText(uses), s.QueueWarnings)
		for _, host := range []string{"server", "client"} {
			tc := childPackets(t, run, host, "post")
			// The tracer's count of every connection through each child.
			traced := map[string]float64{}
			for _, se := range run.Series {
				if se.Kind == datafile.KindConnQueue && se.Host == host {
					var n float64
					for _, x := range run.Samples[se.Name] {
						n = max(n, x.V)
					}
					traced[se.Stat] += n
				}
			}
			t.Logf("%s %s:test0: tc's packets per child %v, the tracer's %v", setup, host, tc, traced)
			for child, n := range tc {
				// The tracer loads before t0 and reads after the streams' end: it
				// sees every packet of the test but the few before and after.
				if d := traced[child] - n; d > 0.02*n+20 || -d > 0.02*n+20 {
					t.Errorf("%s %s:test0 %s: the tracer counted %.0f packets, tc %.0f", setup, host, child, traced[child], n)
				}
				if setup == "mq+pfifo-steer" && child != "1:2" && n > 0 {
					t.Errorf("%s %s:test0: %.0f packets through %s, steered to tx-1 (1:2): %v", setup, host, n, child, tc)
				}
			}
			if setup == "mq+pfifo-steer" && tc["1:2"] < 1000 {
				t.Errorf("%s %s:test0: %v packets through 1:2", setup, host, tc)
			}
		}
		var series []string
		for _, u := range uses {
			series = append(series, u.Series)
			if setup != "mq+pfifo-steer" {
				continue
			}
			for _, q := range u.Queues {
				if q.Qdisc != "1:2" || q.Queue != "tx-1" {
					t.Errorf("%s: %s went through %s %s %s", setup, u.Series, q.Dev, q.Qdisc, q.Queue)
				}
			}
			if len(u.Queues) != 2 {
				t.Errorf("%s: %s counted on %d devices' queues, want both ends': %+v", setup, u.Series, len(u.Queues), u.Queues)
			}
		}
		sort.Strings(series)
		if want := "Ping (ms) ICMP TCP download::1 TCP download::2 TCP download::3 TCP download::4"; strings.Join(series, " ") != want {
			t.Errorf("%s: queues of %q, want %s", setup, series, want)
		}
		if setup == "mq+pfifo-steer" && len(s.QueueWarnings) > 0 {
			t.Errorf("%s: warnings %q", setup, s.QueueWarnings)
		}
		if files, _ := filepath.Glob(filepath.Join(out, "*")); len(files) != 1 {
			t.Errorf("%s: data files %v", setup, files)
		}
	}
}
