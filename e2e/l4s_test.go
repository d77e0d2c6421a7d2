package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// l4s_coexist on the local lab (htb 20 Mbit/s over a bfifo: no qdisc here marks,
// so what is checked is the traffic, not dualpi2, which the VM stage checks). On
// the client's link, as tcpdump sees it: the L4S probe's packets leave the client
// ECT(1) and the classic probe's Not-ECT, the scalable flow's datagrams come in
// ECT(1), and the sink's feedback goes back. The per-class rows are in the
// summary with their idle and loaded rows, the probe's census counts each ECT(1)
// probe the server got, and the sink's census each ECT(1) datagram tcpdump saw
// arrive.
func TestL4SCoexistOnTheLocalLab(t *testing.T) {
	invPath, inv := lab(t, "--rate", "20mbit", "--queue", "bfifo:60000")
	clientIP, serverIP := inv.Hosts[inv.Client].TestIP, inv.Hosts[inv.Server].TestIP
	pcap := filepath.Join(t.TempDir(), "test0.pcap")
	stop := startCapture(t, inv.Testbed+"-client", "test0", pcap, "udp and host "+serverIP)
	out := t.TempDir()
	r := bb(t, "run", "-H", invPath, "-l", "6", "-d", "2", "-o", out, "--format", "json", "l4s_coexist")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	medians := parseSummary(t, r.stdout)
	for _, row := range []string{"Ping (ms) UDP L4S RTT", "Ping (ms) UDP L4S RTT loaded", "Ping (ms) UDP L4S RTT idle",
		"Ping (ms) UDP classic RTT", "Ping (ms) UDP classic RTT loaded", "Ping (ms) UDP classic RTT idle",
		"L4S download", "L4S download RTT", "TCP download::1", "rate balance"} {
		if _, ok := medians[row]; !ok {
			t.Errorf("no row %q in the summary:\n%s", row, r.stdout)
		}
	}
	t.Logf("medians: L4S probe loaded %.2f ms, classic probe loaded %.2f ms, L4S flow %.2f Mbit/s, classic %.2f, balance %.2f",
		medians["Ping (ms) UDP L4S RTT loaded"], medians["Ping (ms) UDP classic RTT loaded"], medians["L4S download"],
		medians["TCP download::1"], medians["rate balance"])
	files, _ := filepath.Glob(filepath.Join(out, "*.bb.json.gz"))
	if len(files) != 1 {
		t.Fatalf("want one data file in %s, have %v", out, files)
	}
	run, err := datafile.Read(files[0])
	if err != nil {
		t.Fatal(err)
	}

	var probeCensus, sinkLine, flowLine string
	for _, e := range run.Events {
		switch {
		case strings.Contains(e.Message, "udp-probe Ping (ms) UDP L4S to ") && strings.Contains(e.Message, "; the server got "):
			probeCensus = e.Message
		case strings.HasPrefix(e.Message, "udp-sink L4S download from "):
			sinkLine = e.Message
		case strings.HasPrefix(e.Message, "udp-scalable L4S download: "):
			flowLine = e.Message
		}
	}
	var probesGot, sinkGot int
	if i := strings.Index(probeCensus, "the server got ECT(1) "); i >= 0 {
		fmt.Sscanf(probeCensus[i:], "the server got ECT(1) %d", &probesGot)
	}
	if i := strings.LastIndex(sinkLine, "they arrived ECT(1) "); i >= 0 {
		fmt.Sscanf(sinkLine[i:], "they arrived ECT(1) %d", &sinkGot)
	}

	// The wire. Probes are 56-byte datagrams from the client to the echo's port,
	// a socket (a source port) a probe job; the flow's data 1470 bytes from the
	// server; the feedback 56 bytes back. tcpdump takes packets from the kernel a
	// block at a time (no --immediate-mode): it is stopped once the file holds
	// every probe the server counted and every datagram the sink did, or after
	// 10 s (the checks below then say what is missing), and read once more after.
	// The feedback carries the flow's ECT(1) too, and a probe's size: it goes
	// to the flow's port, which the flow's data comes from.
	count := func() (l4s, data int) {
		pkts := readCapture(t, pcap)
		flowPorts := map[int]bool{}
		for _, p := range pkts {
			if p.src == serverIP && p.payloadLen == 1470 {
				flowPorts[p.sport] = true
				data++
			}
		}
		for _, p := range pkts {
			if p.src == clientIP && p.payloadLen == 56 && p.tos&3 == 1 && !flowPorts[p.dport] {
				l4s++
			}
		}
		return l4s, data
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if l4s, data := count(); l4s >= probesGot && data >= sinkGot {
			break
		}
	}
	said := strings.TrimSpace(stop())
	t.Logf("tcpdump: %s", said)
	// What tcpdump's buffer could not keep, it says: the wire's counts may be
	// that many short of the censuses on a busy machine, and no more.
	dropped := 0
	if m := regexp.MustCompile(`(\d+) packets? dropped by kernel`).FindStringSubmatch(said); m != nil {
		dropped, _ = strconv.Atoi(m[1])
	}
	matches := func(census, wire int) bool { return wire <= census && census-wire <= dropped }
	pkts := readCapture(t, pcap)
	probes := map[int]map[int]int{} // source port: codepoint: packets
	var data, feedback int
	dataECN, feedbackECN := map[int]int{}, map[int]int{}
	// The feedback is as big as a probe (56 bytes): it is told by going to the
	// scalable flow's port.
	flowPorts := map[int]bool{}
	for _, p := range pkts {
		if p.src == serverIP && p.payloadLen == 1470 {
			flowPorts[p.sport] = true
		}
	}
	for _, p := range pkts {
		switch {
		case p.src == clientIP && p.payloadLen == 56 && flowPorts[p.dport]:
			feedback++
			feedbackECN[p.tos&3]++
		case p.src == clientIP && p.payloadLen == 56:
			if probes[p.sport] == nil {
				probes[p.sport] = map[int]int{}
			}
			probes[p.sport][p.tos&3]++
		case p.src == serverIP && p.payloadLen == 1470:
			data++
			dataECN[p.tos&3]++
		}
	}
	t.Logf("on the wire: probes by socket and codepoint %v; %d data datagrams by codepoint %v; %d feedback", probes, data, dataECN, feedback)
	var l4sSent, classicSent int
	for _, byCP := range probes {
		switch {
		case len(byCP) == 1 && byCP[1] > 0:
			l4sSent = byCP[1]
		case len(byCP) == 1 && byCP[0] > 0:
			classicSent = byCP[0]
		default:
			t.Errorf("a probe socket sent %v (codepoint: packets): want one codepoint, ECT(1) or Not-ECT", byCP)
		}
	}
	if len(probes) != 2 || l4sSent < 40 || classicSent < 40 {
		t.Errorf("probe sockets %v: want one sending ECT(1) and one Not-ECT, a probe every 0.2 s for 10 s each", probes)
	}
	if data < 1000 || dataECN[1] != data {
		t.Errorf("the scalable flow's datagrams arrived %v (codepoint: packets): want them all ECT(1), over 1000", dataECN)
	}
	if feedback < data/3 {
		t.Errorf("%d feedback datagrams for %d data: want one for every second", feedback, data)
	}
	// The feedback carries the flow's codepoint: a path or a queue that sorts
	// the flow's packets by their marks sorts its feedback alike.
	if feedbackECN[1] != feedback {
		t.Errorf("the feedback left the client %v (codepoint: packets): want it all ECT(1), as the flow's data", feedbackECN)
	}

	// The censuses: the echo counted the L4S probes ECT(1), as many as left the
	// client; the sink counted the flow's datagrams ECT(1), as many as tcpdump saw
	// arrive.
	if !strings.Contains(probeCensus, "sent ECT(1); the server got ECT(1) ") || !matches(probesGot, l4sSent) {
		t.Errorf("the L4S probe's census %q: want the server to have got ECT(1) %d, as tcpdump saw them leave (it dropped %d)", probeCensus, l4sSent, dropped)
	}
	if !strings.HasSuffix(sinkLine, fmt.Sprintf("they arrived ECT(1) %d", sinkGot)) || !matches(sinkGot, data) {
		t.Errorf("the sink's line %q: want the %d datagrams tcpdump saw (it dropped %d), all ECT(1)", sinkLine, data, dropped)
	}
	m := regexp.MustCompile(`: (\d+) datagrams sent, (\d+) feedback;`).FindStringSubmatch(flowLine)
	if m == nil {
		t.Fatalf("no closing line of the scalable flow in the events: %q", flowLine)
	}
	if fb, _ := strconv.Atoi(m[2]); fb < feedback*9/10 {
		t.Errorf("the flow read %d feedback, %d went on the wire: %q", fb, feedback, flowLine)
	}
	t.Logf("%s\n%s\n%s", probeCensus, sinkLine, flowLine)
}
