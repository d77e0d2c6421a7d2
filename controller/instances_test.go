package controller

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/tests"
)

// The plan's jobs laid out on the hosts: roles to endpoints, bottleneck jobs on
// each bottleneck host, a sampler once a host, starts on each agent's clock,
// targets and the series' hosts filled in, the peer's clock offset given.
func TestInstances(t *testing.T) {
	def, err := tests.Get("tcp_nup")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := def.Resolve(map[string]string{"upload_streams": "2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"cpu", "cpu@server"} {
		if err := plan.AddSampler(s); err != nil && !strings.Contains(err.Error(), "already") {
			t.Fatal(err)
		}
	}
	inv := &inventory.Inventory{Client: "client", Server: "server", Bottleneck: []inventory.Bottleneck{{Host: "server", Dev: "eth1"}, {Host: "router", Dev: "eth0"}, {Host: "router", Dev: "eth1"}}}
	eps := []*endpoint{
		{role: "client", host: &inventory.Host{Name: "client", TestIP: "192.0.2.1"}, info: datafile.Host{ClockOffset: 0.5, ClockRTT: 0.002}},
		{role: "server", host: &inventory.Host{Name: "server", TestIP: "192.0.2.2"}, info: datafile.Host{ClockOffset: -0.25, ClockRTT: 0.004}},
		{role: "bottleneck", host: &inventory.Host{Name: "router", TestIP: "192.0.2.3"}},
	}
	o := &Options{Plan: plan, Inventory: inv, Length: 10 * time.Second, Delay: 2 * time.Second, Step: 200 * time.Millisecond}
	t0 := time.Unix(1_800_000_000, 0)
	ins := o.instances(eps, t0, "tok")
	var got []string
	for _, in := range ins {
		got = append(got, in.job.Name+"@"+in.ep.host.Name)
	}
	want := "listen@server ping@client streams@client qdisc@server qdisc@router sojourn@server sojourn@router cpu@all@client cpu@all@server cpu@all@router"
	if strings.Join(got, " ") != want {
		t.Errorf("instances %v, want %s", got, want)
	}
	byName := map[string]instance{}
	for _, in := range ins {
		byName[in.job.Name+"@"+in.ep.host.Name] = in
	}
	streams := byName["streams@client"]
	if s := streams.spec; s.Start != datafile.Unix(t0)+2+0.5 || s.Duration != 10 || s.Token != "tok" || s.Target != "" ||
		s.PeerOffset != -0.75 || s.PeerOffsetErr != 0.003 {
		t.Errorf("streams spec %+v", s)
	}
	for _, se := range streams.series {
		if se.Host != "server" { // uploads are counted by the listener's host
			t.Errorf("series %s measured by %q", se.Name, se.Host)
		}
	}
	ping := byName["ping@client"]
	if ping.spec.Target != "192.0.2.2" || ping.spec.Duration != 14 || ping.series[0].Target != "192.0.2.2" || ping.series[0].Host != "client" {
		t.Errorf("ping %+v %+v", ping.spec, ping.series)
	}
	var devs []string
	for _, d := range byName["qdisc@router"].spec.Devs {
		devs = append(devs, d.Name)
	}
	if strings.Join(devs, ",") != "eth0,eth1" || byName["qdisc@router"].spec.Duration != 0 {
		t.Errorf("router's sampler %+v", byName["qdisc@router"].spec)
	}
	var params map[string]any
	if err := json.Unmarshal(streams.spec.Params, &params); err != nil || len(params["flows"].([]any)) != 2 {
		t.Errorf("streams params %s: %v", streams.spec.Params, err)
	}
}

// With several pairs, a client or server job runs once a pair, on that pair's
// host, aimed at that pair's peer, its series named for the pair; a sampler still
// runs once a host, however many pairs the host is in.
func TestInstancesPairs(t *testing.T) {
	def, err := tests.Get("tcp_ndown")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := def.Resolve(map[string]string{"download_streams": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.AddSampler("cpu@server"); err != nil {
		t.Fatal(err)
	}
	inv := &inventory.Inventory{Client: "c1", Server: "s1",
		Pairs:      []inventory.Pair{{Client: "c1", Server: "s1"}, {Client: "c2", Server: "s1"}, {Client: "c3", Server: "s3"}},
		Bottleneck: []inventory.Bottleneck{{Host: "s1", Dev: "eth1"}}}
	host := func(role, name, ip string, off float64) *endpoint {
		return &endpoint{role: role, host: &inventory.Host{Name: name, TestIP: ip}, info: datafile.Host{ClockOffset: off}}
	}
	eps := []*endpoint{host("client", "c1", "192.0.2.1", 0), host("server", "s1", "192.0.2.2", 1),
		host("client", "c2", "192.0.2.3", 2), host("client", "c3", "192.0.2.5", 3), host("server", "s3", "192.0.2.6", 4)}
	o := &Options{Plan: plan, Inventory: inv, Length: 10 * time.Second, Delay: 2 * time.Second, Step: 200 * time.Millisecond}
	ins := o.instances(eps, time.Unix(1_800_000_000, 0), "tok")
	var got []string
	byName := map[string]instance{}
	for _, in := range ins {
		got = append(got, in.name+"@"+in.ep.host.Name)
		byName[in.name] = in
	}
	want := "listen/1@s1 listen/2@s1 listen/3@s3 ping/1@c1 ping/2@c2 ping/3@c3 streams/1@c1 streams/2@c2 streams/3@c3 qdisc@s1 sojourn@s1 cpu@server@s1 cpu@server@s3"
	if strings.Join(got, " ") != want {
		t.Errorf("instances %v\nwant %s", got, want)
	}
	ping := byName["ping/3"]
	if ping.spec.Target != "192.0.2.6" || ping.spec.Pair != "3" || ping.spec.PeerOffset != 1 {
		t.Errorf("pair 3's ping %+v", ping.spec)
	}
	if se := ping.series[0]; se.Name != "Ping (ms) ICMP (pair 3)" || se.Pair != "3" || se.Target != "192.0.2.6" {
		t.Errorf("pair 3's ping series %+v", se)
	}
	var names []string
	for _, se := range byName["streams/2"].series {
		names = append(names, se.Name)
		if se.Pair != "2" {
			t.Errorf("series %s of pair %q", se.Name, se.Pair)
		}
	}
	if strings.Join(names, ",") != "TCP download::1 (pair 2),TCP download::2 (pair 2)" {
		t.Errorf("pair 2's streams yield %v", names)
	}
	// Each pair's listener is told of its own pair's streams, and of no other's.
	for _, pair := range []string{"1", "2", "3"} {
		l, st := byName["listen/"+pair].spec, byName["streams/"+pair].spec
		if len(l.Clients) != 1 || l.Clients[0].Kind != "tcp-streams" || l.Clients[0].Duration != 10 || string(l.Clients[0].Params) != string(st.Params) {
			t.Errorf("listen/%s's clients %+v", pair, l.Clients)
		}
	}
	if c := byName["ping/1"].spec.Clients; c != nil {
		t.Errorf("ping has clients %+v", c)
	}
	if s := byName["qdisc"].spec; s.Pair != "" || len(byName["qdisc"].series) != 0 && byName["qdisc"].series[0].Pair != "" {
		t.Errorf("the bottleneck's sampler is given pair %q", s.Pair)
	}
	if s := byName["cpu@server"].spec; s.Pair != "" {
		t.Errorf("a sampler is given pair %q", s.Pair)
	}
}
