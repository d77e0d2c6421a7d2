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
			"tc -n ns class add dev test0 parent 1: classid 1:1 htb rate 100mbit ceil 100mbit",
			"tc -n ns qdisc add dev test0 parent 1:1 handle 10: bfifo limit 300000",
		}},
		{Options{Rate: "1gbit"}, []string{
			"tc -n ns qdisc replace dev test0 root handle 1: htb default 1",
			"tc -n ns class add dev test0 parent 1: classid 1:1 htb rate 1gbit ceil 1gbit",
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
