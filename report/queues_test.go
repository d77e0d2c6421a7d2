package report

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
)

// queueRun is a run of l4s_coexist's shape on a router whose test0 carries the
// downloads (data, probe replies) and test1 the ACKs and probe requests: the
// probes' and flows' connections, as their runners declare them, and the
// tracer's counts of each through each tx queue, as the sojourn job emits them
// (cumulative, the last the largest).
type queueRun struct {
	series  []datafile.Series
	samples map[string][]datafile.Sample
}

func newQueueRun() *queueRun {
	return &queueRun{samples: map[string][]datafile.Sample{}}
}

// conn declares series of (a probe's when rtt) and its connection.
func (r *queueRun) conn(of string, rtt bool, conn, pair string) *queueRun {
	se := datafile.Series{Name: of, Kind: datafile.KindUDPProbe, Units: "ms", Pair: pair}
	if rtt {
		se.Measure = datafile.MeasureRTT
	} else {
		se.Kind = datafile.KindTCP
	}
	se.Name = datafile.PairName(of, pair)
	r.series = append(r.series, se,
		datafile.Series{Name: datafile.PairName(datafile.ConnPrefix+of, pair), Kind: datafile.KindConn, Of: of, Conn: conn, Pair: pair})
	return r
}

// count is the tracer's count of packets named conn (source first) through
// dev's tx queue txq, whose qdisc is qdisc.
func (r *queueRun) count(dev, queue, qdisc, conn string, packets, bytes float64) *queueRun {
	name := "conn router:" + dev + " " + queue + " " + conn
	r.series = append(r.series, datafile.Series{Name: name, Kind: datafile.KindConnQueue, Host: "router", Dev: dev, Queue: queue, Stat: qdisc, Conn: conn, Counter: true})
	// Two samples, a second apart: the counts grow.
	r.samples[name] = []datafile.Sample{{T: 1, V: packets / 2, Bytes: int64(bytes / 2)}, {T: 2, V: packets, Bytes: int64(bytes)}}
	return r
}

func (r *queueRun) run() *datafile.Run {
	return &datafile.Run{Series: r.series, Samples: r.samples}
}

const (
	tcpConn     = "tcp 198.18.128.2:41000 198.18.144.2:5001"
	tcpData     = "tcp 198.18.144.2:5001 198.18.128.2:41000"
	l4sConn     = "udp 198.18.144.2:39000 198.18.128.2:6001"
	l4sProbe    = "udp 198.18.128.2:42000 198.18.144.2:7001"
	l4sReply    = "udp 198.18.144.2:7001 198.18.128.2:42000"
	classicConn = "udp 198.18.128.2:42001 198.18.144.2:7001"
	classicRepl = "udp 198.18.144.2:7001 198.18.128.2:42001"
	// A ping socket's connection: its identifier in both ports.
	pingConn  = "icmp 198.18.128.2:77 198.18.144.2:77"
	pingReply = "icmp 198.18.144.2:77 198.18.128.2:77"
)

// coexist declares l4s_coexist's flows and probes.
func coexist() *queueRun {
	return newQueueRun().
		conn("TCP download::1", false, tcpConn, "").
		conn("L4S download", false, l4sConn, "").
		conn("Ping (ms) UDP L4S RTT", true, l4sProbe, "").
		conn("Ping (ms) UDP classic RTT", true, classicConn, "").
		conn("Ping (ms) ICMP", true, pingConn, "")
}

func TestProbeQueueWarnings(t *testing.T) {
	cases := []struct {
		name string
		run  *queueRun
		// want are the warnings' beginnings, in order.
		want []string
	}{{
		name: "flows and probes in one child",
		run: coexist().
			count("test0", "tx-0", "1:1", tcpData, 20000, 30e6).
			count("test0", "tx-0", "1:1", l4sConn, 10000, 14e6).
			count("test0", "tx-0", "1:1", l4sReply, 300, 30000).
			count("test0", "tx-0", "1:1", classicRepl, 300, 30000).
			count("test0", "tx-0", "1:1", pingReply, 300, 30000).
			// The requests and ACKs went another way, through another child:
			// no load there.
			count("test1", "tx-3", "1:4", tcpConn, 10000, 660000).
			count("test1", "tx-2", "1:3", l4sProbe, 300, 30000),
	}, {
		name: "the classic probe's replies in a child of their own",
		run: coexist().
			count("test0", "tx-0", "1:1", tcpData, 20000, 30e6).
			count("test0", "tx-2", "1:3", l4sConn, 10000, 14e6).
			count("test0", "tx-0", "1:1", l4sReply, 300, 30000).
			count("test0", "tx-1", "1:2", classicRepl, 300, 30000).
			count("test0", "tx-2", "1:3", pingReply, 300, 30000),
		want: []string{
			"probe Ping (ms) UDP L4S RTT went through router:test0 1:1 (tx-0), which held TCP download::1; not 1:3 (tx-2), which held L4S download: it measured part of the load",
			"probe Ping (ms) UDP classic RTT went through router:test0 1:2 (tx-1), and the flows it is compared with through 1:1 (tx-0), which held TCP download::1; 1:3 (tx-2), which held L4S download: it measured a queue that held none of their load",
			"probe Ping (ms) ICMP went through router:test0 1:3 (tx-2), which held L4S download; not 1:1 (tx-0), which held TCP download::1: it measured part of the load",
		},
	}, {
		name: "a root qdisc every queue shares",
		run: coexist().
			count("test0", "tx-0", "root", tcpData, 20000, 30e6).
			count("test0", "tx-2", "root", l4sConn, 10000, 14e6).
			count("test0", "tx-1", "root", classicRepl, 300, 30000).
			count("test0", "tx-3", "root", l4sReply, 300, 30000),
	}, {
		name: "a flow that left a few packets in another child before it moved",
		run: coexist().
			count("test0", "tx-0", "1:1", tcpData, 20000, 30e6).
			count("test0", "tx-1", "1:2", tcpData, 10, 15000).
			count("test0", "tx-0", "1:1", l4sConn, 10000, 14e6).
			count("test0", "tx-1", "1:2", l4sReply, 300, 30000).
			count("test0", "tx-0", "1:1", classicRepl, 300, 30000),
		want: []string{"probe Ping (ms) UDP L4S RTT went through router:test0 1:2 (tx-1), and the flows it is compared with through 1:1 (tx-0), which held TCP download::1, L4S download: it measured a queue that held none"},
	}, {
		name: "the ICMP ping beside tcp_4down, its replies alone",
		run: newQueueRun().
			conn("TCP download::1", false, tcpConn, "").
			conn("Ping (ms) ICMP", true, pingConn, "").
			count("test0", "tx-0", "1:1", tcpData, 20000, 30e6).
			count("test0", "tx-3", "1:4", pingReply, 300, 30000),
		want: []string{"probe Ping (ms) ICMP went through router:test0 1:4 (tx-3), and the flows it is compared with through 1:1 (tx-0)"},
	}, {
		name: "tcp_4down's four flows over three children, the ping beside one",
		run: newQueueRun().
			conn("TCP download::1", false, tcpConn, "").
			conn("TCP download::2", false, "tcp 198.18.128.2:41001 198.18.144.2:5001", "").
			conn("TCP download::3", false, "tcp 198.18.128.2:41002 198.18.144.2:5001", "").
			conn("TCP download::4", false, "tcp 198.18.128.2:41003 198.18.144.2:5001", "").
			conn("Ping (ms) ICMP", true, pingConn, "").
			count("test0", "tx-0", "1:1", tcpData, 20000, 30e6).
			count("test0", "tx-2", "1:3", "tcp 198.18.144.2:5001 198.18.128.2:41001", 20000, 30e6).
			count("test0", "tx-2", "1:3", "tcp 198.18.144.2:5001 198.18.128.2:41002", 20000, 30e6).
			count("test0", "tx-3", "1:4", "tcp 198.18.144.2:5001 198.18.128.2:41003", 20000, 30e6).
			count("test0", "tx-2", "1:3", pingReply, 300, 30000),
		want: []string{"probe Ping (ms) ICMP went through router:test0 1:3 (tx-2), which held TCP download::2, TCP download::3; not 1:1 (tx-0), which held TCP download::1; 1:4 (tx-3), which held TCP download::4: it measured part of the load"},
	}, {
		name: "no counts: a file from before them, or no tracer",
		run:  coexist(),
	}, {
		name: "pairs: each pair's series by its name",
		run: newQueueRun().
			conn("TCP download::1", false, tcpConn, "2").
			conn("Ping (ms) ICMP", true, pingConn, "2").
			count("test0", "tx-0", "1:1", tcpData, 20000, 30e6).
			count("test0", "tx-1", "1:2", pingReply, 300, 30000),
		want: []string{"probe Ping (ms) ICMP (pair 2) went through router:test0 1:2 (tx-1)"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ProbeQueueWarnings(QueueUses(c.run.run()))
			if len(got) != len(c.want) {
				t.Fatalf("warnings %q, want %d beginning %q", got, len(c.want), c.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], c.want[i]) {
					t.Errorf("warning %q, want it to begin %q", got[i], c.want[i])
				}
			}
		})
	}
}

// Each series gets the queues its connection's packets went through, both ways,
// with the counts the tracer had last; an end whose address is unspecified (a
// socket the runner could not find its source of) matches any.
func TestQueueUses(t *testing.T) {
	r := newQueueRun().
		conn("TCP download::1", false, tcpConn, "").
		conn("Ping (ms) ICMP", true, pingConn, "").
		count("test0", "tx-0", "1:1", tcpData, 20000, 30e6).
		count("test1", "tx-3", "1:4", tcpConn, 10000, 660000).
		count("test0", "tx-0", "1:1", pingReply, 300, 30000).
		// Another host's echo with the same identifier is not the ping's.
		count("test0", "tx-2", "1:3", "icmp 198.18.144.2:77 198.18.128.9:77", 5, 500)
	got := QueueUses(r.run())
	want := []QueueUse{
		{Series: "TCP download::1", Conns: []string{tcpConn}, Queues: []QueueCount{
			{Dev: "router:test0", Queue: "tx-0", Qdisc: "1:1", Packets: 20000, Bytes: 30e6},
			{Dev: "router:test1", Queue: "tx-3", Qdisc: "1:4", Packets: 10000, Bytes: 660000}}},
		{Series: "Ping (ms) ICMP", Probe: true, Conns: []string{pingConn}, Queues: []QueueCount{
			{Dev: "router:test0", Queue: "tx-0", Qdisc: "1:1", Packets: 300, Bytes: 30000}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("uses\n%+v\nwant\n%+v", got, want)
	}
	if text, want := QueuesText(got), "Tx queues of router:test0: 1:1 (tx-0): TCP download::1, Ping (ms) ICMP"; text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	r = newQueueRun().
		conn("Ping (ms) ICMP", true, "icmp 0.0.0.0:77 198.18.144.2:77", "").
		count("test0", "tx-1", "1:2", pingReply, 300, 30000)
	if got := QueueUses(r.run()); len(got) != 1 || len(got[0].Queues) != 1 || got[0].Queues[0].Qdisc != "1:2" {
		t.Errorf("an unbound ping socket's replies: %+v", got)
	}
}

// The summary warns of a probe in a queue of its own in every format, names the
// queues each went through in text and markdown, and carries them in JSON.
func TestQueueWarningInEveryFormat(t *testing.T) {
	r := coexist().
		count("test0", "tx-0", "1:1", tcpData, 20000, 30e6).
		count("test0", "tx-0", "1:1", l4sConn, 10000, 14e6).
		count("test0", "tx-0", "1:1", l4sReply, 300, 30000).
		count("test0", "tx-1", "1:2", classicRepl, 300, 30000)
	run := r.run()
	run.Metadata = datafile.Metadata{Test: "l4s_coexist", Title: "mq+dualpi2", T0: 100, Delay: 1, Length: 4, Step: 0.2, TotalLength: 6}
	s := Summarize(run)
	warn := "probe Ping (ms) UDP classic RTT went through router:test0 1:2 (tx-1), and the flows it is compared with through 1:1 (tx-0)"
	if !slices.ContainsFunc(s.QueueWarnings, func(w string) bool { return strings.HasPrefix(w, warn) }) {
		t.Errorf("queue warnings %q", s.QueueWarnings)
	}
	for _, format := range []string{"text", "markdown", "json"} {
		var b strings.Builder
		if err := Write(&b, format, []Summary{s}, Columns{}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if format == "markdown" {
			out = strings.ReplaceAll(out, `\(`, "(")
			out = strings.ReplaceAll(out, `\)`, ")")
		}
		if !strings.Contains(out, "Ping (ms) UDP classic RTT went through router:test0 1:2 (tx-1)") {
			t.Errorf("%s: no warning in\n%s", format, out)
		}
		if format != "json" && !strings.Contains(out, "Tx queues of router:test0: 1:1 (tx-0): TCP download::1, L4S download, Ping (ms) UDP L4S RTT; 1:2 (tx-1): Ping (ms) UDP classic RTT") {
			t.Errorf("%s: no queues line in\n%s", format, out)
		}
		if format == "json" && !strings.Contains(out, `"qdisc": "1:2"`) {
			t.Errorf("json: no queues in\n%s", out)
		}
	}
}
