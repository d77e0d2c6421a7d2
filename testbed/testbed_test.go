package testbed

import (
	"strings"
	"testing"
)

func TestOptionsCheck(t *testing.T) {
	good := []Options{{}, {Rate: "100mbit", Queue: "bfifo:300000", GSO: "off"}, {Rate: "1.5gbit", Queue: "pfifo:100", Queues: 8}}
	for _, o := range good {
		if err := o.Check(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	bad := map[string]Options{
		"--rate":   {Rate: "100 mbit"},
		"--queue":  {Queue: "fq_codel:5"},
		"--gso":    {GSO: "maybe"},
		"--queues": {Queues: 1000},
	}
	for flag, o := range bad {
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: error %v, want one naming %s", o, err, flag)
		}
	}
}

func TestShapingCommands(t *testing.T) {
	cases := []struct {
		o    Options
		want []string
	}{
		{Options{Rate: "100mbit", Queue: "bfifo:300000"}, []string{
			"tc -n ns qdisc replace dev test0 root handle 1: htb default 1",
			"tc -n ns class replace dev test0 parent 1: classid 1:1 htb rate 100mbit ceil 100mbit",
			"tc -n ns qdisc replace dev test0 parent 1:1 handle 10: bfifo limit 300000",
		}},
		{Options{Rate: "1gbit"}, []string{
			"tc -n ns qdisc replace dev test0 root handle 1: htb default 1",
			"tc -n ns class replace dev test0 parent 1: classid 1:1 htb rate 1gbit ceil 1gbit",
		}},
		{Options{Queue: "pfifo:50"}, []string{"tc -n ns qdisc replace dev test0 root handle 1: pfifo limit 50"}},
		{Options{}, nil},
	}
	for _, c := range cases {
		got := (&Lab{Options: c.o}).shaping("ns")
		if len(got) != len(c.want) {
			t.Fatalf("%+v: got %v", c.o, got)
		}
		for i := range c.want {
			if strings.Join(got[i], " ") != c.want[i] {
				t.Errorf("%+v: command %d %q, want %q", c.o, i, strings.Join(got[i], " "), c.want[i])
			}
		}
	}
}

// Pairs 2 and up sit behind the first pair's namespaces on access links of their
// own, in address ranges that meet neither the test link, the management links
// nor another lab's; the first pair routes each side's access links over test0.
func TestPairsPlan(t *testing.T) {
	if got := plan(3, 1); len(got) != 2 || got[0].Pair != 0 || got[1].Via != "" {
		t.Fatalf("one pair: %+v", got)
	}
	nodes := plan(3, 3)
	if len(nodes) != 6 {
		t.Fatalf("3 pairs: %d nodes", len(nodes))
	}
	seen := map[string]string{}
	for _, n := range nodes {
		for _, a := range []string{n.NetNS, n.HostDev, n.HostIP, n.MgmtIP, n.TestIP} {
			if other, ok := seen[a]; ok {
				t.Errorf("%s of %s is also %s's", a, n.Role, other)
			}
			seen[a] = n.Role
		}
		if len(n.HostDev) > 15 {
			t.Errorf("%s's host device %q is too long a name", n.Role, n.HostDev)
		}
	}
	c3 := nodes[4]
	want := Node{Role: "client3", NetNS: "bb3-client3", HostIP: "198.19.3.17", MgmtIP: "198.19.3.18", HostDev: "bb3mc3",
		TestIP: "198.18.67.9", Pair: 3, Via: "bb3-client", AccessDev: "acc3", Gateway: "198.18.67.10"}
	if c3 != want {
		t.Errorf("client3 %+v\nwant    %+v", c3, want)
	}
	if s2 := nodes[3]; s2.Role != "server2" || s2.TestIP != "198.19.67.5" || s2.Via != "bb3-server" || s2.MgmtIP != "198.19.3.14" {
		t.Errorf("server2 %+v", s2)
	}
	var cmds []string
	for _, st := range pairSteps(nodes, true) {
		cmds = append(cmds, strings.Join(st, " "))
	}
	all := strings.Join(cmds, "\n")
	for _, w := range []string{
		"ip netns exec bb3-client sysctl -q -w net.ipv4.ip_forward=1",
		"ip netns exec bb3-server sysctl -q -w net.ipv4.ip_forward=1",
		"ip -n bb3-client link add acc3 type veth peer name test0 netns bb3-client3",
		"ip -n bb3-client3 route add default via 198.18.67.10",
		"ip -n bb3-client route add 198.19.67.0/24 via 198.18.3.2 dev test0",
		"ip -n bb3-server route add 198.18.67.0/24 via 198.18.3.1 dev test0",
		"ip netns exec bb3-client3 ethtool -K test0 gso off tso off gro off",
		"ip netns exec bb3-client ethtool -K acc3 gso off tso off gro off",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("no %q among\n%s", w, all)
		}
	}
	if strings.Count(all, "ip_forward=1") != 2 {
		t.Errorf("forwarding turned on %d times", strings.Count(all, "ip_forward=1"))
	}
	for _, o := range []Options{{Pairs: 17}, {Pairs: 2, IPv6: true}} {
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), "--pairs") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
