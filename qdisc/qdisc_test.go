package qdisc

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/internal/golden"
	"github.com/bloatbench/bloatbench/inventory"
)

func testInventory(t *testing.T) *inventory.Inventory {
	inv, err := inventory.Load("testdata/inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// The exact commands every setup produces, for a 4-queue eth0 on a host of 4 CPUs.
func TestCommandsGolden(t *testing.T) {
	inv := testInventory(t)
	var b strings.Builder
	for _, name := range Names(inv) {
		s, err := Resolve(name, inv)
		if err != nil {
			fmt.Fprintf(&b, "# %s: error: %v\n\n", name, err)
			continue
		}
		fmt.Fprintf(&b, "# %s (%s), %s\n%s", name, s.Title, s.Source, Script(s.CommandsOn("eth0", 4, 4)))
		for _, c := range s.Changes("eth0") {
			fmt.Fprintf(&b, "# %s\n", c)
		}
		if len(s.Sysctls) > 0 {
			fmt.Fprintf(&b, "# on every host of the run:\n%s", Script(s.SysctlOps()))
		}
		if p := s.PathCommands("eth1"); p != nil {
			fmt.Fprintf(&b, "# on each path device (eth1):\n%s", Script(p))
		}
		b.WriteString("\n")
	}
	golden.Check(t, "commands.golden", []byte(b.String()))
}

func TestResolve(t *testing.T) {
	inv := testInventory(t)
	s, err := Resolve("dualpi2-15ms", inv)
	if err != nil {
		t.Fatal(err)
	}
	if s.MQ == nil || s.MQ.Kind != "dualpi2" || s.MQ.Params["target"] != "15ms" || s.Title != "MQ + DUALPI2 (target 15ms)" || s.Builtin {
		t.Errorf("dualpi2-15ms: %+v %+v", s, s.MQ)
	}
	s, err = Resolve("cake-950-nogso", inv)
	if err != nil {
		t.Fatal(err)
	}
	if s.Root.Params["bandwidth"] != "950mbit" || s.Root.Params["split-gso"] != "" || *s.BQL.LimitMax != 45000 || s.Offloads["gso"] {
		t.Errorf("two levels of extends lost something: %+v %+v", s, s.Root)
	}
	if _, ok := s.Root.Params["split-gso"]; !ok {
		t.Error("cake's split-gso flag was not inherited")
	}
	if got := strings.Join(s.Kinds(), ","); got != "cake" {
		t.Errorf("kinds %s", got)
	}
	if s, _ := Resolve("htb-100", inv); s == nil || strings.Join(s.Kinds(), ",") != "htb,fq_codel" {
		t.Errorf("htb-100: %+v", s)
	}
	if s, _ := Resolve("mq+fq_codel", nil); s == nil || !s.Builtin || s.Source != "built-in" {
		t.Errorf("a built-in without an inventory: %+v", s)
	}
}

func TestResolveErrors(t *testing.T) {
	inv := testInventory(t)
	cases := map[string][]string{
		"nope":         {`unknown setup "nope"`, "mq+dualpi2", "htb+bfifo"},
		"loop-a":       {"loop"},
		"htb+fq_codel": {"needs a rate", "extends: htb+fq_codel"},
	}
	for name, wants := range cases {
		_, err := Resolve(name, inv)
		for _, w := range wants {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v lacks %q", name, err, w)
			}
		}
	}
}

func TestCheckErrors(t *testing.T) {
	n := func(i int) *int { return &i }
	cases := []struct {
		spec inventory.SetupSpec
		want string
	}{
		{inventory.SetupSpec{}, "exactly one of root"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, MQ: &inventory.QdiscSpec{Kind: "fq_codel"}}, "exactly one"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq codel"}}, "kind"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel", Params: map[string]string{"target": "5ms; reboot"}}}, "parameter"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel", Params: map[string]string{"$(x)": ""}}}, "parameter"},
		{inventory.SetupSpec{MQ: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "100mbit"}, "goes with root"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "fast"}, "tc rate"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, BQL: &inventory.BQLSpec{LimitMax: n(-1)}}, "bql.limit_max"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Offloads: map[string]string{"lro": "off"}}, "offloads.lro"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Offloads: map[string]string{"gso": "no"}}, "offloads.gso"},
		{inventory.SetupSpec{Ingress: &inventory.IngressSpec{Rate: "50mbit"}}, "ingress: needs root"},
		{inventory.SetupSpec{Ingress: &inventory.IngressSpec{Root: &inventory.QdiscSpec{Kind: "cake; reboot"}}}, "kind"},
		{inventory.SetupSpec{Ingress: &inventory.IngressSpec{Root: &inventory.QdiscSpec{Kind: "bfifo"}, Rate: "lots"}}, "ingress.rate"},
		{inventory.SetupSpec{Ingress: &inventory.IngressSpec{Root: &inventory.QdiscSpec{Kind: "bfifo"}}, Rate: "50mbit"}, "needs root"},
		{inventory.SetupSpec{Netem: &inventory.NetemSpec{Delay: "25ms"}, Params: map[string]string{"target": "5ms"}}, "params:"},
		{inventory.SetupSpec{Netem: &inventory.NetemSpec{Delay: "25 ms"}}, "netem.delay"},
		{inventory.SetupSpec{Netem: &inventory.NetemSpec{}}, "netem: empty"},
		{inventory.SetupSpec{Channels: map[string]int{"queues": 1}}, "channels.queues"},
		{inventory.SetupSpec{MQ: &inventory.QdiscSpec{Kind: "pfifo"}, Steer: &inventory.SteerSpec{}}, "steer: give tx_queue"},
		{inventory.SetupSpec{MQ: &inventory.QdiscSpec{Kind: "pfifo"}, Steer: &inventory.SteerSpec{TxQueue: n(-1)}}, "steer: give tx_queue"},
		{inventory.SetupSpec{MQ: &inventory.QdiscSpec{Kind: "pfifo"}, Steer: &inventory.SteerSpec{TxQueue: n(MaxTxQueue + 1)}}, "steer: give tx_queue"},
		{inventory.SetupSpec{Channels: map[string]int{"tx": 0}}, "channels.tx"},
		{inventory.SetupSpec{Sysctls: map[string]string{"../../etc/passwd": "1"}}, "sysctls."},
		{inventory.SetupSpec{Sysctls: map[string]string{"net.ipv4.tcp_ecn": "1; reboot"}}, "sysctls.net.ipv4.tcp_ecn"},
		{inventory.SetupSpec{Sysctls: map[string]string{"net.ipv4.tcp_ecn": ""}}, "sysctls.net.ipv4.tcp_ecn"},
		{inventory.SetupSpec{Sysctls: map[string]string{"net": "1"}}, "sysctls.net"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, RateSchedule: steps("10s", "25mbit")}, "rate_schedule changes the rate of the htb shaper"},
		{inventory.SetupSpec{MQ: &inventory.QdiscSpec{Kind: "fq_codel"}, RateSchedule: steps("10s", "25mbit")}, "rate_schedule changes"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "50mbit", RateSchedule: steps("10", "25mbit")}, "rate_schedule[0].at"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "50mbit", RateSchedule: steps("-1s", "25mbit")}, "rate_schedule[0].at"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "50mbit", RateSchedule: steps("25h", "25mbit")}, "rate_schedule[0].at"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "50mbit", RateSchedule: steps("10s", "25mbit", "10s", "5mbit")}, "rate_schedule[1].at 10s: the steps go in time order"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "50mbit", RateSchedule: steps("10s", "25mbit", "5s", "5mbit")}, "rate_schedule[1].at"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "50mbit", RateSchedule: steps("10s", "25mbit; reboot")}, "rate_schedule[0].rate"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "50mbit", RateSchedule: steps("10s", "0mbit")}, "rate_schedule[0].rate"},
		{inventory.SetupSpec{Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: "50mbit", RateSchedule: manySteps(MaxRateSteps + 1)}, "at most"},
	}
	for _, c := range cases {
		_, err := check("x", c.spec, "hosts.yaml:12")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "hosts.yaml:12: setup x:") {
			t.Errorf("%+v: error %v, want %q with its place", c.spec, err, c.want)
		}
	}
}

// steps makes a rate schedule of at, rate pairs.
func steps(kv ...string) []inventory.RateStepSpec {
	var out []inventory.RateStepSpec
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, inventory.RateStepSpec{At: kv[i], Rate: kv[i+1]})
	}
	return out
}

func manySteps(n int) []inventory.RateStepSpec {
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("%ds", i+1), "10mbit")
	}
	return steps(kv...)
}

// A rate schedule resolves to its steps in order, is inherited by extends, and
// says what it will run; a run must be longer than its last step.
func TestRateSchedule(t *testing.T) {
	inv := testInventory(t)
	s, err := Resolve("htb+bfifo-steps", inv)
	if err != nil {
		t.Fatal(err)
	}
	want := []RateStep{{10 * time.Second, "25mbit", 25e6}, {20 * time.Second, "5mbit", 5e6}, {30 * time.Second, "1.5gbit", 1.5e9}}
	if !reflect.DeepEqual(s.RateSchedule, want) {
		t.Errorf("schedule %+v, want %+v", s.RateSchedule, want)
	}
	ch := s.Changes("eth0")
	if len(ch) != 3 || ch[1] != "at 20s: tc class change dev eth0 parent 1: classid 1:1 htb rate 5mbit ceil 5mbit" {
		t.Errorf("changes %q", ch)
	}
	child, err := Resolve("steps-child", inv)
	if err != nil || !reflect.DeepEqual(child.RateSchedule, want) || child.Rate != "100mbit" {
		t.Errorf("extends lost the schedule: %+v, %v", child, err)
	}
	if err := s.ScheduleFits(30 * time.Second); err == nil || !strings.Contains(err.Error(), "step at 30s is not before the run's end (30s") {
		t.Errorf("a run ending at the last step: %v", err)
	}
	if err := s.ScheduleFits(31 * time.Second); err != nil {
		t.Error(err)
	}
	var none *Setup
	if err := none.ScheduleFits(time.Second); err != nil {
		t.Error(err)
	}
}

func TestInventorySetupTypoIsAnError(t *testing.T) {
	_, err := inventory.Parse("hosts.yaml", []byte("hosts:\n  a: {ssh: a, test_ip: 10.0.0.1}\n  b: {ssh: b, test_ip: 10.0.0.2}\nclient: a\nserver: b\nsetups:\n  x:\n    extnds: cake\n"))
	if err == nil || !strings.Contains(err.Error(), "hosts.yaml:8: setups.x.extnds") {
		t.Errorf("error %v", err)
	}
}

func TestTCKind(t *testing.T) {
	for line, want := range map[string]string{
		"tc qdisc replace dev eth0 root handle 1: fq_codel":                "fq_codel",
		"tc -n ns qdisc replace dev eth0 parent 1:3 dualpi2 target 15ms":   "dualpi2",
		"tc qdisc replace dev eth0 parent 1:1 handle 10: bfifo limit 5":    "bfifo",
		"tc class replace dev eth0 parent 1: classid 1:1 htb rate 100mbit": "htb",
		"ethtool -K eth0 gso off":                                          "",
	} {
		if got := tcKind(strings.Fields(line)); got != want {
			t.Errorf("%s: %q, want %q", line, got, want)
		}
	}
}

func TestNetemArgs(t *testing.T) {
	cases := []struct {
		spec inventory.NetemSpec
		want string // tc's words, or the error's key
	}{
		{inventory.NetemSpec{Delay: "25ms"}, "delay 25ms"},
		{inventory.NetemSpec{Delay: "25ms", Jitter: "2ms", Distribution: "normal"}, "delay 25ms 2ms distribution normal"},
		{inventory.NetemSpec{Loss: "0.5%"}, "loss random 0.5%"},
		{inventory.NetemSpec{Delay: "10ms", Reorder: "25%", Loss: "1%", Rate: "100mbit", Limit: 5000}, "limit 5000 delay 10ms loss random 1% reorder 25% rate 100mbit"},
		{inventory.NetemSpec{Rate: "1gbit"}, "rate 1gbit"},
		{inventory.NetemSpec{Delay: "500us"}, "delay 500us"},
		{inventory.NetemSpec{}, "error: netem: empty"},
		{inventory.NetemSpec{Limit: 100}, "error: netem: empty"},
		{inventory.NetemSpec{Limit: -1, Delay: "1ms"}, "error: netem.limit"},
		{inventory.NetemSpec{Delay: "25"}, "error: netem.delay"},
		{inventory.NetemSpec{Delay: "25ms; reboot"}, "error: netem.delay"},
		{inventory.NetemSpec{Jitter: "2ms"}, "error: netem.jitter"},
		{inventory.NetemSpec{Reorder: "1%"}, "error: netem.reorder"},
		{inventory.NetemSpec{Delay: "1ms", Distribution: "normal"}, "error: netem.distribution"},
		{inventory.NetemSpec{Delay: "1ms", Jitter: "1ms", Distribution: "gauss"}, "error: netem.distribution"},
		{inventory.NetemSpec{Loss: "1"}, "error: netem.loss"},
		{inventory.NetemSpec{Loss: "150%"}, "error: netem.loss"},
		{inventory.NetemSpec{Rate: "fast"}, "error: netem.rate"},
	}
	for _, c := range cases {
		a, err := NetemArgs(&c.spec, "hosts.yaml:3: netem")
		got := strings.Join(a, " ")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "hosts.yaml:3: ") {
				t.Errorf("%+v: error %v does not name its place", c.spec, err)
			}
			got = "error: " + strings.TrimPrefix(err.Error(), "hosts.yaml:3: ")
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v: got %q, want %q", c.spec, got, c.want)
		}
	}
}

func TestIngressAndNetemSetups(t *testing.T) {
	inv := testInventory(t)
	s := mustSetup(t, "fq_codel-rtt50")
	if s.Root == nil || s.Root.Kind != "fq_codel" || strings.Join(s.Netem, " ") != "limit 10000 delay 25ms 1ms distribution normal loss random 0.5%" {
		t.Errorf("fq_codel-rtt50: %+v", s)
	}
	if !s.TouchesBottleneck() || strings.Join(s.Kinds(), ",") != "fq_codel,netem" {
		t.Errorf("fq_codel-rtt50 kinds %v", s.Kinds())
	}
	if s := mustSetup(t, "rtt-only"); s.TouchesBottleneck() || s.Root != nil || s.MQ != nil {
		t.Errorf("rtt-only changes the bottleneck: %+v", s)
	}
	s, err := Resolve("cake-ingress", inv)
	if err != nil {
		t.Fatal(err)
	}
	if s.Root != nil || s.Ingress == nil || strings.Join(s.Kinds(), ",") != "ingress,cake" || !s.TouchesBottleneck() {
		t.Errorf("cake-ingress: %+v kinds %v", s, s.Kinds())
	}
	s = mustSetup(t, "dualpi2-rtt")
	if strings.Join(s.Netem, " ") != "limit 10000 delay 25ms" || strings.Join(s.NetemL4S, " ") != "limit 10000 delay 5ms" ||
		strings.Join(s.Kinds(), ",") != "mq,dualpi2,netem,prio" || !PathHasL4S(s, inv) || PathHasL4S(mustSetup(t, "rtt-only"), inv) {
		t.Errorf("dualpi2-rtt: netem %q, l4s %q, kinds %v", s.Netem, s.NetemL4S, s.Kinds())
	}
	if PathHasL4S(nil, inv) || !PathHasL4S(nil, &inventory.Inventory{Netem: &inventory.NetemSpec{Delay: "1ms", L4S: &inventory.NetemSpec{Delay: "2ms"}}}) {
		t.Error("PathHasL4S of an inventory's netem")
	}
	ps := PathSetup("path", PathTitle(s.Netem, s.NetemL4S), "", s.Netem, s.NetemL4S)
	if k := strings.Join(ps.Kinds(), ","); k != "prio,netem,netem" || ps.Title != "netem limit 10000 delay 25ms; for ECT(1) and CE: netem limit 10000 delay 5ms" {
		t.Errorf("path setup: kinds %s, title %q", k, ps.Title)
	}
	if _, err := NetemL4SArgs(&inventory.NetemSpec{Delay: "1ms", L4S: &inventory.NetemSpec{Delay: "2ms", L4S: &inventory.NetemSpec{Delay: "3ms"}}}, "hosts.yaml:3: netem"); err == nil ||
		!strings.HasPrefix(err.Error(), "hosts.yaml:3: netem.l4s.l4s: ") {
		t.Errorf("an l4s inside an l4s: %v", err)
	}
	if _, err := NetemL4SArgs(&inventory.NetemSpec{Delay: "1ms", L4S: &inventory.NetemSpec{Delay: "2"}}, "hosts.yaml:3: netem"); err == nil ||
		!strings.HasPrefix(err.Error(), "hosts.yaml:3: netem.l4s.delay: ") {
		t.Errorf("a bad l4s delay: %v", err)
	}
	if got := IFBName("enp129s0f0np0"); got != "ifb4enp129s0f0n" || len(got) != 15 {
		t.Errorf("IFB name %q", got)
	}
}
