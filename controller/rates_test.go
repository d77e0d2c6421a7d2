package controller

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/tests"
)

// Which rate each bottleneck drains at by rights: the setup's shaper first, the
// root qdisc's as found where the setup leaves it, the inventory's, the link's.
func TestConfiguredRates(t *testing.T) {
	labHTB := map[string]string{
		"dev.eth1.qdiscs":  "qdisc htb 1: root refcnt 3 r2q 10 default 0x1;qdisc bfifo 10: parent 1:1 limit 300000b;",
		"dev.eth1.classes": "class htb 1:1 root leaf 10: prio 0 rate 100Mbit ceil 100Mbit burst 1600b cburst 1600b ;",
		"dev.eth1.speed":   "10000",
	}
	veth := map[string]string{"dev.eth1.qdiscs": "qdisc noqueue 0: root refcnt 2;", "dev.eth1.speed": "10000"}
	virtio := map[string]string{"dev.eth1.qdiscs": "qdisc mq 0: root;", "dev.eth1.speed": "-1"}
	fqCodel := &qdisc.Setup{Name: "fq_codel", Root: &qdisc.Qdisc{Kind: "fq_codel"}}
	for _, c := range []struct {
		name  string
		setup *qdisc.Setup
		rate  string // the inventory's
		facts map[string]string
		want  []datafile.DeviceRate
	}{
		{"the setup's htb", &qdisc.Setup{Rate: "50mbit", Root: &qdisc.Qdisc{Kind: "fq_codel"}}, "10mbit", labHTB,
			[]datafile.DeviceRate{{Host: "server", Dev: "eth1", Bits: 50e6, Source: "htb rate"}}},
		{"no setup: the lab's htb as found", nil, "", labHTB,
			[]datafile.DeviceRate{{Host: "server", Dev: "eth1", Bits: 100e6, Source: "htb ceil (as found)"}}},
		{"a setup of BQL alone leaves the root as found", &qdisc.Setup{Name: "bql", BQL: &qdisc.BQL{}}, "", labHTB,
			[]datafile.DeviceRate{{Host: "server", Dev: "eth1", Bits: 100e6, Source: "htb ceil (as found)"}}},
		{"a setup's root replaces the lab's htb: the link's speed", fqCodel, "", labHTB,
			[]datafile.DeviceRate{{Host: "server", Dev: "eth1", Bits: 10e9, Source: "link speed"}}},
		{"the inventory's rate over the link's", fqCodel, "10mbit", veth,
			[]datafile.DeviceRate{{Host: "server", Dev: "eth1", Bits: 10e6, Source: "inventory"}}},
		{"nothing says: no rate", fqCodel, "", virtio, nil},
		{"ingress shaping: the IFB's rate too", &qdisc.Setup{Name: "in", Ingress: &qdisc.Ingress{Rate: "20mbit", Root: &qdisc.Qdisc{Kind: "fq_codel"}}}, "", virtio,
			[]datafile.DeviceRate{{Host: "server", Dev: qdisc.IFBName("eth1"), Bits: 20e6, Source: "htb rate"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &Options{Setup: c.setup, Inventory: &inventory.Inventory{Bottleneck: []inventory.Bottleneck{{Host: "server", Dev: "eth1", Rate: c.rate}}}}
			eps := []*endpoint{{host: &inventory.Host{Name: "server"}, info: datafile.Host{Facts: c.facts}}}
			if got := o.configuredRates(eps); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// A setup's rate schedule is a job on every bottleneck host, added to a copy
// of the test's plan (which the runs of the other setups share), and refused
// when the run would end before its last step.
func TestRateScheduleJobPlaced(t *testing.T) {
	plan := &tests.Plan{Test: "rate_steps", Jobs: []tests.Job{{Name: "ping", Kind: "ping", Host: tests.RoleClient, Background: true}}}
	steps := &qdisc.Setup{Name: "steps", Source: "lab.yaml:3", Rate: "50mbit", Root: &qdisc.Qdisc{Kind: "fq_codel"},
		RateSchedule: []qdisc.RateStep{{At: 10 * time.Second, Rate: "5mbit", Bits: 5e6}}}
	o := &Options{Plan: plan, Setup: steps, Length: 20 * time.Second, Step: 200 * time.Millisecond}
	p, err := o.withSchedule()
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Jobs) != 1 || len(p.Jobs) != 2 {
		t.Fatalf("the test's plan has %d jobs, the run's %d", len(plan.Jobs), len(p.Jobs))
	}
	j := p.Jobs[1]
	if j.Kind != "rate-schedule" || j.Host != tests.RoleBottleneck || !j.Background || !strings.Contains(string(j.Params), `"rate":"5mbit"`) {
		t.Errorf("job %+v %s", j, j.Params)
	}
	if err := o.Check(); err != nil {
		t.Error(err)
	}
	o.Length = 5 * time.Second
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "lab.yaml:3: setup steps: rate_schedule's step at 10s is not before the run's end (5s") {
		t.Errorf("a run shorter than the schedule: %v", err)
	}
	o.Setup = &qdisc.Setup{Name: "fq_codel", Root: &qdisc.Qdisc{Kind: "fq_codel"}}
	if p, err := o.withSchedule(); err != nil || p != plan {
		t.Errorf("no schedule: %v, the plan %p for %p", err, p, plan)
	}
	o.Setup = steps
	o.Plan = &tests.Plan{Test: "odd", Jobs: []tests.Job{{Name: rateScheduleJob, Kind: "ping", Host: tests.RoleClient}}}
	if _, err := o.withSchedule(); err == nil || !strings.Contains(err.Error(), "rename it") {
		t.Errorf("a test job of the schedule's name: %v", err)
	}
}
