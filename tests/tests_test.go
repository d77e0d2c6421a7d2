package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/qdisc"
)

// flows gives a plan's TCP series names and congestion controls, in order.
func flows(p *Plan) (names, ccs []string) {
	for _, s := range p.Series() {
		if s.Kind == datafile.KindTCP {
			names = append(names, s.Name)
			ccs = append(ccs, s.CC)
		}
	}
	return names, ccs
}

func TestEmbeddedDefinitions(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"tcp_nup":           {"TCP upload::1"},
		"tcp_1up":           {"TCP upload::1"},
		"tcp_4up":           {"TCP upload::1", "TCP upload::2", "TCP upload::3", "TCP upload::4"},
		"tcp_ndown":         {"TCP download::1"},
		"tcp_4down":         {"TCP download::1", "TCP download::2", "TCP download::3", "TCP download::4"},
		"tcp_8down":         {"TCP download::1", "TCP download::2", "TCP download::3", "TCP download::4", "TCP download::5", "TCP download::6", "TCP download::7", "TCP download::8"},
		"tcp_bidirectional": {"TCP download", "TCP upload"},
		"tcp_2up_delay":     {"TCP stream 1", "TCP stream 2"},
		"rrul":              {"TCP upload BE", "TCP upload BK", "TCP upload CS5", "TCP upload EF", "TCP download BE", "TCP download BK", "TCP download CS5", "TCP download EF"},
		"rrul_be":           {"TCP upload BE", "TCP upload BE2", "TCP upload BE3", "TCP upload BE4", "TCP download BE", "TCP download BE2", "TCP download BE3", "TCP download BE4"},
	}
	for _, d := range all {
		p, err := d.Resolve(nil)
		if err != nil {
			t.Fatalf("%s: %v", d.Name, err)
		}
		names, _ := flows(p)
		if d.Name == "tcp_128down" && len(names) != 128 {
			t.Errorf("tcp_128down: %d flows", len(names))
		}
		if w, ok := want[d.Name]; ok {
			delete(want, d.Name)
			if strings.Join(names, ",") != strings.Join(w, ",") {
				t.Errorf("%s: flows %v, want %v", d.Name, names, w)
			}
		}
		ping := 0
		for _, s := range p.Series() {
			if s.Kind == datafile.KindPing {
				ping++
			}
		}
		if ping != 1 {
			t.Errorf("%s: %d ping series", d.Name, ping)
		}
		// The bottleneck's samplers close the plan: tc's statistics and the kernel's
		// per-packet sojourn.
		if n := len(p.Jobs); n < 2 || p.Jobs[n-2].Kind != "qdisc" || p.Jobs[n-2].Host != RoleBottleneck || p.Jobs[n-1].Kind != "sojourn" || p.Jobs[n-1].Host != RoleBottleneck {
			t.Errorf("%s: the bottleneck samplers are not planned: %+v", d.Name, p.Jobs[max(0, n-2):])
		}
	}
	if len(want) != 0 {
		t.Errorf("missing tests: %v", want)
	}
}

// Starts and durations: flent's tcp_2up_delay runs its first flow for length +
// delay, its second from delay for length.
func TestJobTimes(t *testing.T) {
	d, err := Get("tcp_2up_delay")
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	tm := Timing{Delay: 5, Length: 60}
	got := map[string][2]float64{}
	for _, j := range p.Jobs {
		got[j.Name] = [2]float64{j.Start.Eval(tm), j.Duration.Eval(tm)}
	}
	want := map[string][2]float64{"listen": {0, 0}, "ping": {0, 70}, "first": {0, 65}, "second": {5, 60}, "qdisc": {0, 0}}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("job %s: start, duration %v, want %v", n, got[n], w)
		}
	}
	for _, c := range []struct {
		in   string
		want float64
		err  string
	}{
		{"total - delay", 65, ""}, {"2.5", 2.5, ""}, {"delay+1", 6, ""}, {"-delay + length", 55, ""},
		{"delay delay", 0, "joined by + or -"}, {"soon", 0, "neither seconds"}, {"delay +", 0, "not a time"}, {"1e9", 0, "neither"},
	} {
		e, err := parseExpr(c.in, "0")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || e.Eval(tm) != c.want {
			t.Errorf("%q = %v (%v), want %v", c.in, e.Eval(tm), err, c.want)
		}
	}
}

func TestResolve(t *testing.T) {
	d, err := Get("tcp_ndown")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		set     map[string]string
		flows   []string
		ccs     []string
		wantErr string
	}{
		{"default", nil, []string{"TCP download::1"}, []string{""}, ""},
		{"four", map[string]string{"download_streams": "4"},
			[]string{"TCP download::1", "TCP download::2", "TCP download::3", "TCP download::4"}, []string{"", "", "", ""}, ""},
		{"cc round robin", map[string]string{"download_streams": "3", "cc": "cubic,reno"},
			[]string{"TCP download::1", "TCP download::2", "TCP download::3"}, []string{"cubic", "reno", "cubic"}, ""},
		{"unknown key", map[string]string{"upload_streams": "4"}, nil, nil, `no parameter "upload_streams"`},
		{"not a number", map[string]string{"download_streams": "four"}, nil, nil, `download_streams="four"`},
		{"too many", map[string]string{"download_streams": "5000"}, nil, nil, "whole number from 0 to 1024"},
		{"bad cc", map[string]string{"cc": "cubic;reboot"}, nil, nil, "congestion control"},
		{"nothing", map[string]string{"download_streams": "0"}, nil, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := d.Resolve(c.set)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			names, ccs := flows(p)
			if strings.Join(names, ",") != strings.Join(c.flows, ",") || strings.Join(ccs, ",") != strings.Join(c.ccs, ",") {
				t.Errorf("flows %v ccs %q, want %v %q", names, ccs, c.flows, c.ccs)
			}
		})
	}
}

// A test file from disk runs as the embedded ones do, may extend one, and may
// extend a file beside it.
func TestTestFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := write("six.yaml", "name: six\nextends: tcp_ndown\nparameters:\n  download_streams: {default: \"6\"}\n")
	child := write("six_cubic.yaml", "name: six_cubic\nextends: ./six.yaml\nparameters:\n  cc: {default: cubic}\n")
	loop := write("loop.yaml", "name: loop\nextends: ./loop.yaml\n")
	for _, c := range []struct {
		path  string
		flows int
		cc    string
		err   string
	}{
		{base, 6, "", ""},
		{child, 6, "cubic", ""},
		{loop, 0, "", "extends it back"},
		{filepath.Join(dir, "missing.yaml"), 0, "", "no such file"},
	} {
		d, err := Get(c.path)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.path, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.Parameters["download_streams"].Description == "" {
			t.Errorf("%s: the parameter's description was not inherited", c.path)
		}
		p, err := d.Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		names, ccs := flows(p)
		if len(names) != c.flows || ccs[0] != c.cc {
			t.Errorf("%s: flows %v ccs %v", c.path, names, ccs)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"name: x\nbogus: 1\n": "line 2: unknown key bogus; valid here: aggregates, description, extends, jobs, name, needs, parameters",
		"description: y\n":    `missing key "name"`,
		"name: x\n":           "no jobs",
		"name: x\njobs: [{name: a, kind: teleport, host: client}]\n":                                                               `kind "teleport"`,
		"name: x\njobs: [{name: a, kind: ping, host: router}]\n":                                                                   `host "router"`,
		"name: x\njobs: [{name: a, kind: ping, host: client, target: bottleneck}]\n":                                               `target "bottleneck"`,
		"name: x\njobs: [{name: a, kind: ping, host: client}, {name: a, kind: ping, host: client}]\n":                              `second job named "a"`,
		"name: x\njobs: [{name: a, kind: tcp-streams, host: client, connect: l}]\n":                                                `connect "l"`,
		"name: x\njobs: [{name: a, kind: ping, host: client, start: soon}]\n":                                                      `jobs[0].start`,
		"name: x\njobs: [{name: a, kind: qdisc, host: client, duration: '2'}]\n":                                                   "runs until the run ends",
		"name: x\njobs: [{name: a, kind: ping, host: client, params: {series: '${n}'}}]\n":                                         `${n} names no parameter`,
		"name: x\njobs: [{name: a, kind: ping, host: client}]\naggregates: [{name: s, op: max, series: '*'}]\n":                    `op "max"`,
		"name: x\nparameters: {N: {default: '1'}}\njobs: [{name: a, kind: ping, host: client}]\n":                                  "parameters.N",
		"name: x\njobs: [{name: a, kind: ping, host: client}]\naggregates: [{name: s, op: ratio, series: '*'}]\n":                  "aggregates[0].over: a ratio divides",
		"name: x\njobs: [{name: a, kind: ping, host: client}]\naggregates: [{name: s, op: sum, series: '*', over: '*'}]\n":         "only op ratio takes over",
		"name: x\njobs: [{name: a, kind: ping, host: client}]\naggregates: [{name: s, op: ratio, series: '*', over: '['}]\n":       `over "["`,
		"name: x\njobs: [{name: a, kind: ping, host: client}]\naggregates: [{name: s, op: sum, series: '*', exclude: [a, '[']}]\n": `exclude[1] "["`,
	}
	for in, want := range cases {
		_, err := Parse("tests/x/test.yaml", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "tests/x/test.yaml") {
			t.Errorf("%q: error %v, want %q with the file name", in, err, want)
		}
	}
}

// --sampler adds a sampler kind on a role, once; kinds that serve other jobs, and
// roles that are not, are refused naming what is accepted.
func TestAddSampler(t *testing.T) {
	d, err := Get("tcp_ndown")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		err  string
		host string
	}{
		{[]string{"cpu"}, "", RoleAll},
		{[]string{"cpu@server"}, "", RoleServer},
		{[]string{"cpu@server", "cpu@client"}, "", RoleClient},
		{[]string{"cpu", "cpu@server"}, "samples cpu on all already", ""},
		{[]string{"qdisc@bottleneck"}, "samples qdisc on bottleneck already", ""},
		{[]string{"udp-sink"}, "the samplers are cpu, qdisc", ""},
		{[]string{"tcp-listen@server"}, "the samplers are", ""},
		{[]string{"cpu@router"}, `"router" is not a role`, ""},
		{[]string{"teleport"}, "the samplers are", ""},
	} {
		p, err := d.Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range c.args {
			if err = p.AddSampler(a); err != nil {
				break
			}
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if last := p.Jobs[len(p.Jobs)-1]; last.Kind != "cpu" || last.Host != c.host || !last.Background {
			t.Errorf("%v: last job %+v", c.args, last)
		}
	}
}

func TestRemoveSampler(t *testing.T) {
	def, err := Get("tcp_4down")
	if err != nil {
		t.Fatal(err)
	}
	p, err := def.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := len(p.Jobs)
	if err := p.RemoveSampler("sojourn"); err != nil {
		t.Fatal(err)
	}
	for _, j := range p.Jobs {
		if j.Kind == "sojourn" {
			t.Errorf("sojourn still planned: %+v", j)
		}
	}
	if len(p.Jobs) != n-1 {
		t.Errorf("%d jobs left of %d", len(p.Jobs), n)
	}
	if err := p.RemoveSampler("sojourn"); err == nil || !strings.Contains(err.Error(), "it runs qdisc") {
		t.Errorf("removing it again: %v", err)
	}
	// A test's own jobs are not samplers to remove.
	if err := p.RemoveSampler("ping"); err == nil {
		t.Errorf("removed ping")
	}
}

// defaultPlan is the built-in test name resolved with its parameters' defaults.
func defaultPlan(t *testing.T, name string) *Plan {
	t.Helper()
	d, err := Get(name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// l4s_rtt_fair needs a path whose netem has l4s:, the setup's or the
// inventory's (the caller says which, qdisc.PathHasL4S), and says so before a
// run; its jobs are l4s_coexist's.
func TestNeedsL4SPath(t *testing.T) {
	p := defaultPlan(t, "l4s_rtt_fair")
	dualpi2 := &qdisc.Setup{Name: "mq+dualpi2", Source: "built-in", MQ: &qdisc.Qdisc{Kind: "dualpi2"}}
	for _, s := range []*qdisc.Setup{nil, dualpi2} {
		err := p.CheckSetup(s, false)
		if err == nil || !strings.Contains(err.Error(), "test l4s_rtt_fair needs path emulation that gives the L4S packets (ECT(1), CE) a round trip of their own") {
			t.Errorf("setup %v, no l4s path: %v", s, err)
		}
		if err := p.CheckSetup(s, true); err != nil {
			t.Errorf("setup %v with an l4s path: %v", s, err)
		}
	}
	pp := defaultPlan(t, "l4s_coexist")
	if len(p.Jobs) != len(pp.Jobs) || len(p.Aggregates) != len(pp.Aggregates) {
		t.Errorf("l4s_rtt_fair has %d jobs and %d aggregates, l4s_coexist %d and %d", len(p.Jobs), len(p.Aggregates), len(pp.Jobs), len(pp.Aggregates))
	}
}

// rate_steps needs a setup with a rate schedule, and says so before a run;
// a test can need nothing else.
func TestNeedsRateSchedule(t *testing.T) {
	p := defaultPlan(t, "rate_steps")
	if err := p.CheckSetup(nil, false); err == nil || !strings.Contains(err.Error(), "test rate_steps needs a setup with a rate_schedule:") {
		t.Errorf("no setup: %v", err)
	}
	plain := &qdisc.Setup{Name: "fq_codel", Source: "built-in", Root: &qdisc.Qdisc{Kind: "fq_codel"}}
	if err := p.CheckSetup(plain, false); err == nil || !strings.Contains(err.Error(), "setup fq_codel (built-in) has none") {
		t.Errorf("a setup without a schedule: %v", err)
	}
	steps := &qdisc.Setup{Name: "steps", Rate: "50mbit", Root: &qdisc.Qdisc{Kind: "fq_codel"}, RateSchedule: []qdisc.RateStep{{At: time.Second, Rate: "5mbit", Bits: 5e6}}}
	if err := p.CheckSetup(steps, false); err != nil {
		t.Error(err)
	}
	// The jobs are l4s_coexist's.
	pp := defaultPlan(t, "l4s_coexist")
	if len(p.Jobs) != len(pp.Jobs) || pp.CheckSetup(nil, false) != nil {
		t.Errorf("rate_steps has %d jobs, l4s_coexist %d", len(p.Jobs), len(pp.Jobs))
	}
	if _, err := Parse("tests/x/test.yaml", []byte("name: x\nneeds: [a_faster_link]\njobs: [{name: p, kind: ping, host: client, target: server}]\n")); err == nil || !strings.Contains(err.Error(), `needs[0] "a_faster_link"`) {
		t.Errorf("an unknown need: %v", err)
	}
}

// A test whose flows need a sysctl gets it as its setup's: added to a copy of
// the setup, a setup of its own when it has none, refused when the setup sets
// it otherwise.
func TestSetupForTheFlowsSysctls(t *testing.T) {
	d, err := Get("tcp_4down")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := d.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	fq := &qdisc.Setup{Name: "fq_codel", Source: "built-in", Root: &qdisc.Qdisc{Kind: "fq_codel"}}
	if s, err := plain.SetupFor(fq); err != nil || s != fq || plain.Sysctls != nil {
		t.Errorf("flows that ask nothing: %+v, %v, wants %+v", s, err, plain.Sysctls)
	}
	if s, err := plain.SetupFor(nil); err != nil || s != nil {
		t.Errorf("no setup, nothing asked: %+v, %v", s, err)
	}
	p, err := d.Resolve(map[string]string{"ecn": "on"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.SetupFor(nil)
	if err != nil || s == nil || s.Sysctls["net.ipv4.tcp_ecn"] != "1" || s.Root != nil || s.Title != "" || s.TouchesBottleneck() {
		t.Errorf("no setup: %+v, %v", s, err)
	}
	ecn := &qdisc.Setup{Name: "fq_codel-ecn", Source: "lab.yaml:9", Root: &qdisc.Qdisc{Kind: "fq_codel"}, Sysctls: map[string]string{"net.core.default_qdisc": "fq", "net.ipv4.tcp_ecn": "1"}}
	s, err = p.SetupFor(ecn)
	if err != nil || s.Root.Kind != "fq_codel" || len(s.Sysctls) != 2 {
		t.Errorf("a setup that sets the same: %+v, %v", s, err)
	}
	s, err = p.SetupFor(fq)
	if err != nil || s == fq || fq.Sysctls != nil || s.Sysctls["net.ipv4.tcp_ecn"] != "1" || s.Name != "fq_codel" {
		t.Errorf("a setup without it: %+v (the setup given %+v), %v", s, fq, err)
	}
	ecn.Sysctls["net.ipv4.tcp_ecn"] = "2"
	if _, err := p.SetupFor(ecn); err == nil || !strings.Contains(err.Error(), "lab.yaml:9: setup fq_codel-ecn sets net.ipv4.tcp_ecn to 2, and test tcp_4down's TCP download::1 to TCP download::4 (ecn: on) needs 1") {
		t.Errorf("a setup at odds: %v", err)
	}
	acc, err := d.Resolve(map[string]string{"ecn": "accecn"})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := acc.SetupFor(nil); err != nil || s.OptionalSysctls["net.ipv4.tcp_ecn"] == "" {
		t.Errorf("Accurate ECN's value is one a kernel may refuse: %+v, %v", s, err)
	}
}
