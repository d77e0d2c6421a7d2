package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The lab the comparisons in docs/reports.md were made on: htb at
// 100 Mbit/s with a 300000-byte bfifo on both ends, GSO off, and every tool's flows
// on cubic, each asked for it as its users ask (--te cc, iperf3 -C; a network
// namespace may not make a congestion control its default unless the machine
// allows it). Not bbr, the machine's
// default: BBR's drains move a run's loaded ping by up to 20% either way and its
// flows' shares more (docs/labs.md), for every tool alike (iperf3 against itself
// within 10% in 9 of 14 pairs), so a bound on a pair would hold the congestion
// control's state, not the tools; make bench compares them under bbr over pairs.
// Under cubic the flows fill the bfifo until it drops, whatever sends them: three
// pairs of 20 s against iperf3 read 1.03, 1.00 and 1.02 of its loaded ping.
const (
	peerLength = 20
	peerPairs  = 3
	// peerTCPSum is what htb at 100 Mbit/s passes of TCP payload with timestamps
	// on: 100 x 1448/1514 Mbit/s.
	peerTCPSum = 100 * 1448.0 / 1514
)

// peerRun is one tool's run: its loaded ping median, its flows' throughputs and
// their sum.
type peerRun struct {
	ping  float64
	flows []float64
	sum   float64
}

// jain is Jain's fairness index over the flows' throughputs.
func (r peerRun) jain() float64 {
	var sum, sq float64
	for _, f := range r.flows {
		sum += f
		sq += f * f
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(r.flows)) * sq)
}

func (r peerRun) String() string {
	return fmt.Sprintf("loaded ping %.2f ms, sum %.2f Mbit/s, flows %.1f, Jain %.4f", r.ping, r.sum, r.flows, r.jain())
}

// TestPeersOnTheSameLab runs tcp_4down and the reference tools on one shaped lab,
// alternating which goes first, and holds bloatbench to them:
//   - against iperf3 -P 4 -R with iputils ping beside it (the autotuned application):
//     each pair's loaded ping within 10% (seen in 9 pairs: 0.96-1.08), the pairs'
//     median of Jain's index at least iperf3's less 0.25, and each run's sum
//     within 1% of what htb passes. Under cubic a 20 s run of either tool shares
//     the link as unevenly as 0.75-0.85 now and then (one flow losing more in the
//     synchronized slow start), so the index of one pair differed by -0.21 to
//     +0.25: the bound holds a flow starved in most runs, not a pair's luck;
//   - a receiver held to a fixed small window (recv_buffer, under bbr, the
//     machine's default) is named in the summary's window-limited warning, flow by
//     flow, and no flow of the runs against iperf3 is.
//
// Not flent's tcp_4down: its netperf flows start up to 100 ms apart and under
// cubic shared the link as 11/64/14/6 and 48/38/3/6 Mbit/s in two runs, under bbr
// as evenly as ours in some runs and as 40/28/13/14 in others, its loaded ping
// 17.7-24.0 ms against our 22.9-23.0; no bound on a pair holds that. make bench's
// peers table (bench/peers.sh) reads it against ours over pairs.
func TestPeersOnTheSameLab(t *testing.T) {
	for _, tool := range []string{"iperf3", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (scripts/install-deps installs it): %v", tool, err)
		}
	}
	invPath, inv := lab(t, "--rate", "100mbit", "--queue", "bfifo:300000", "--gso", "off")
	cns, sns := inv.Testbed+"-client", inv.Testbed+"-server"
	server := inv.Hosts["server"].TestIP

	var ours, theirs []peerRun
	for i := range peerPairs {
		runs := []func(){
			func() { ours = append(ours, bloatbenchRun(t, invPath, "default")) },
			func() { theirs = append(theirs, iperf3Run(t, cns, sns, server)) },
		}
		if i%2 == 1 {
			slices.Reverse(runs)
		}
		for _, run := range runs {
			run()
		}
		t.Logf("pair %d: bloatbench %v; iperf3 %v", i+1, ours[i], theirs[i])
	}
	var fairer []float64
	for i := range ours {
		fairer = append(fairer, ours[i].jain()-theirs[i].jain())
		if ratio := ours[i].ping / theirs[i].ping; ratio < 0.9 || ratio > 1.1 {
			t.Errorf("pair %d: loaded ping %.2f ms against iperf3's %.2f (%.3fx), want within 10%%", i+1, ours[i].ping, theirs[i].ping, ratio)
		}
		if ours[i].sum < 0.99*peerTCPSum || ours[i].sum > 1.01*peerTCPSum {
			t.Errorf("pair %d: TCP download sum %.2f Mbit/s, want %.2f within 1%%", i+1, ours[i].sum, peerTCPSum)
		}
	}
	if m := median(fairer); m < -0.25 {
		t.Errorf("Jain's index less iperf3's: the pairs' median %.4f (%.4f), want at least -0.25", m, fairer)
	}

	// A receive window held below what the path needs: every flow is named.
	bloatbenchRun(t, invPath, "window")
}

// bloatbenchRun runs tcp_4down on the lab: "default" (cubic) or "window" (bbr and a
// fixed 32 KB receive buffer, whose flows the summary must name as window-limited;
// the others must name none).
func bloatbenchRun(t *testing.T, invPath, as string) peerRun {
	t.Helper()
	out := t.TempDir()
	length := peerLength
	var te []string
	switch as {
	case "default":
		te = []string{"--te", "cc=cubic"}
	case "window":
		// bbr: under cubic a flow held to its window keeps its congestion
		// window at about the receiver's, and the kernel counts that time as
		// neither's (report.MaxWindowLimited).
		length, te = 10, []string{"--te", "recv_buffer=32K"}
	}
	args := append([]string{"run", "-H", invPath, "-l", strconv.Itoa(length), "-d", "2", "-o", out, "--format", "json",
		"--te", "tcp_info=true"}, te...)
	r := bb(t, append(args, "tcp_4down")...)
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	var s struct {
		Runs []struct {
			Rows []struct {
				Name   string  `json:"name"`
				Avg    float64 `json:"avg"`
				Median float64 `json:"median"`
			} `json:"rows"`
			Warnings []string `json:"warnings"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || len(s.Runs) != 1 {
		t.Fatalf("summary JSON: %v\n%s", err, r.stdout)
	}
	var run peerRun
	for _, row := range s.Runs[0].Rows {
		switch {
		case row.Name == "Ping (ms) ICMP loaded":
			run.ping = row.Median
		case row.Name == "TCP download sum":
			run.sum = row.Median
		case strings.HasPrefix(row.Name, "TCP download::") && !strings.Contains(strings.TrimPrefix(row.Name, "TCP download::"), " "):
			run.flows = append(run.flows, row.Avg)
		}
	}
	if len(run.flows) != 4 || run.ping == 0 {
		t.Fatalf("rows of tcp_4down missing: %+v", s.Runs[0].Rows)
	}
	var limited string
	for _, w := range s.Runs[0].Warnings {
		if strings.HasPrefix(w, "window-limited flows:") {
			limited = w
		}
	}
	switch as {
	case "window":
		for i := 1; i <= 4; i++ {
			if !strings.Contains(limited, fmt.Sprintf("TCP download::%d ", i)) {
				t.Errorf("a 32 KB receive buffer: TCP download::%d not named window-limited in %q", i, s.Runs[0].Warnings)
			}
		}
	default:
		if limited != "" {
			t.Errorf("%s sockets: %s", as, limited)
		}
	}
	return run
}

// iperf3Run runs iperf3 -P 4 -R for peerLength seconds between the lab's hosts,
// with iputils ping -i 0.2 beside it from 2 s before; the loaded ping is the
// median of the replies to echoes sent while iperf3 ran its streams, by iperf3's
// own start and end times.
func iperf3Run(t *testing.T, cns, sns, server string) peerRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(peerLength+60)*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, "ip", "netns", "exec", sns, "iperf3", "-s", "-1", "-p", "5299")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	ping := exec.CommandContext(ctx, "ip", "netns", "exec", cns, "ping", "-D", "-n", "-i", "0.2", "-w", strconv.Itoa(peerLength+5), server)
	pings, err := ping.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ping.Start(); err != nil {
		t.Fatal(err)
	}
	replies := make(chan map[float64]float64, 1)
	go func() { replies <- pingReplies(pings) }()
	time.Sleep(2 * time.Second) // the idle lead-in, as bloatbench's -d 2
	var stdout strings.Builder
	cli := exec.CommandContext(ctx, "ip", "netns", "exec", cns, "iperf3", "-c", server, "-p", "5299", "-P", "4", "-R", "-C", "cubic", "-t", strconv.Itoa(peerLength), "-J")
	cli.Stdout = &stdout
	if err := cli.Run(); err != nil {
		t.Fatalf("iperf3: %v\n%s", err, stdout.String())
	}
	ping.Process.Signal(os.Interrupt)
	got := <-replies
	ping.Wait()
	var res struct {
		Start struct {
			Timestamp struct {
				Timesecs float64 `json:"timesecs"`
			} `json:"timestamp"`
		} `json:"start"`
		Intervals []struct {
			Sum struct {
				Start float64 `json:"start"`
				End   float64 `json:"end"`
			} `json:"sum"`
		} `json:"intervals"`
		End struct {
			Streams []struct {
				Receiver struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"receiver"`
			} `json:"streams"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil || len(res.Intervals) == 0 || len(res.End.Streams) != 4 {
		t.Fatalf("iperf3's JSON: %v\n%s", err, stdout.String())
	}
	// iperf3's start time is whole seconds: the streams ran from within a second
	// after it, for the intervals' span. The first and last second are left out.
	from := res.Start.Timestamp.Timesecs + 1 + 1
	to := res.Start.Timestamp.Timesecs + res.Intervals[len(res.Intervals)-1].Sum.End - 1
	var loaded []float64
	for at, rtt := range got {
		if at >= from && at <= to {
			loaded = append(loaded, rtt)
		}
	}
	if len(loaded) < 5*(peerLength-4) {
		t.Fatalf("%d ping replies between iperf3's %.1f and %.1f", len(loaded), from, to)
	}
	run := peerRun{ping: median(loaded)}
	for _, s := range res.End.Streams {
		run.flows = append(run.flows, s.Receiver.BitsPerSecond/1e6)
		run.sum += s.Receiver.BitsPerSecond / 1e6
	}
	return run
}

var pingLine = regexp.MustCompile(`^\[(\d+\.\d+)\] .* time=([0-9.]+) ms`)

// pingReplies reads iputils ping -D's replies: the time each arrived, and its RTT.
func pingReplies(r io.Reader) map[float64]float64 {
	got := map[float64]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := pingLine.FindStringSubmatch(sc.Text()); m != nil {
			at, _ := strconv.ParseFloat(m[1], 64)
			rtt, _ := strconv.ParseFloat(m[2], 64)
			got[at] = rtt
		}
	}
	return got
}
