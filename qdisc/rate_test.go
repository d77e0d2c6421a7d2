package qdisc

import "testing"

func TestShaperRate(t *testing.T) {
	for _, c := range []struct {
		name string
		s    *Setup
		ifb  bool
		bps  float64
		what string
	}{
		{"none", nil, false, 0, ""},
		{"htb", &Setup{Rate: "100mbit", Root: &Qdisc{Kind: "fq_codel"}}, false, 100e6, "htb rate"},
		{"htb over cake's own", &Setup{Rate: "50mbit", Root: &Qdisc{Kind: "cake", Params: map[string]string{"bandwidth": "90mbit"}}}, false, 50e6, "htb rate"},
		{"tbf", &Setup{Root: &Qdisc{Kind: "tbf", Params: map[string]string{"rate": "10mbit", "burst": "3000"}}}, false, 10e6, "tbf rate"},
		{"cake", &Setup{Root: &Qdisc{Kind: "cake", Params: map[string]string{"bandwidth": "1.5gbit"}}}, false, 1.5e9, "cake bandwidth"},
		{"cake unlimited", &Setup{Root: &Qdisc{Kind: "cake", Params: map[string]string{"unlimited": ""}}}, false, 0, ""},
		{"fq_codel shapes nothing", &Setup{Root: &Qdisc{Kind: "fq_codel"}}, false, 0, ""},
		{"mq's children shape queues", &Setup{MQ: &Qdisc{Kind: "cake", Params: map[string]string{"bandwidth": "10mbit"}}}, false, 0, ""},
		{"ingress rate", &Setup{Ingress: &Ingress{Rate: "20mbit", Root: &Qdisc{Kind: "fq_codel"}}}, true, 20e6, "htb rate"},
		{"ingress cake", &Setup{Root: &Qdisc{Kind: "tbf", Params: map[string]string{"rate": "10mbit"}},
			Ingress: &Ingress{Root: &Qdisc{Kind: "cake", Params: map[string]string{"bandwidth": "40mbit", "ingress": ""}}}}, true, 40e6, "cake bandwidth"},
		{"no ingress", &Setup{Rate: "100mbit"}, true, 0, ""},
	} {
		bps, what := c.s.ShaperRate(c.ifb)
		if bps != c.bps || what != c.what {
			t.Errorf("%s: %v %q, want %v %q", c.name, bps, what, c.bps, c.what)
		}
	}
}

func TestFoundShaperRate(t *testing.T) {
	for _, c := range []struct {
		name, qdiscs, classes string
		bps                   float64
		what                  string
	}{
		{"htb, as the local lab sets it", "qdisc htb 1: root refcnt 3 r2q 10 default 0x1 direct_packets_stat 0 direct_qlen 1000;qdisc bfifo 10: parent 1:1 limit 300000b;",
			"class htb 1:1 root leaf 10: prio 0 rate 100Mbit ceil 120Mbit burst 1600b cburst 1575b ;", 120e6, "htb ceil (as found)"},
		{"htb's top classes together", "qdisc htb 1: root refcnt 2 r2q 10 default 0x10;",
			"class htb 1:1 root rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b;class htb 1:2 root rate 5Mbit ceil 5Mbit burst 1600b cburst 1600b;class htb 1:10 parent 1:1 prio 0 rate 1Mbit ceil 10Mbit burst 1600b cburst 1600b;",
			15e6, "htb ceil (as found)"},
		{"htb without classes", "qdisc htb 1: root refcnt 2 r2q 10 default 0;", "", 0, ""},
		{"tbf", "qdisc tbf 8792: root refcnt 3 rate 10Mbit burst 3000b lat 50ms;", "", 10e6, "tbf rate (as found)"},
		{"cake", "qdisc cake 8001: root refcnt 2 bandwidth 40Mbit diffserv3 triple-isolate nonat nowash no-ack-filter split-gso rtt 100ms raw overhead 0;", "", 40e6, "cake bandwidth (as found)"},
		{"cake unlimited", "qdisc cake 8001: root refcnt 2 bandwidth unlimited diffserv3;", "", 0, ""},
		{"mq shapes nothing", "qdisc mq 0: root;qdisc fq_codel 0: parent :1 limit 10240p;", "", 0, ""},
		{"tbf under a root that does not shape", "qdisc prio 1: root refcnt 2 bands 3;qdisc tbf 10: parent 1:1 rate 10Mbit burst 3000b lat 50ms;", "", 0, ""},
		{"nothing", "", "", 0, ""},
	} {
		bps, what := FoundShaperRate(c.qdiscs, c.classes)
		if bps != c.bps || what != c.what {
			t.Errorf("%s: %v %q, want %v %q", c.name, bps, what, c.bps, c.what)
		}
	}
}
