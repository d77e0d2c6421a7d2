package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/runners"
	"github.com/bloatbench/bloatbench/tests"
)

// These tests run whole runs against fake hosts (fakehost_test.go): the real agent
// in this process, every host this machine, no SSH, no root, no bottleneck (so no
// tc and nothing changed on the machine).

// testLog is Options.Log for a test: safe from the controller's goroutines, and
// able to act when a line appears (to kill an agent once the streams run).
type testLog struct {
	t     *testing.T
	mu    sync.Mutex
	buf   bytes.Buffer
	hooks []logHook
}

type logHook struct {
	substr string
	do     func()
}

// on calls do once, at the first line that contains substr. do must not block:
// it runs in the controller's goroutine that logs.
func (l *testLog) on(substr string, do func()) {
	l.mu.Lock()
	l.hooks = append(l.hooks, logHook{substr, do})
	l.mu.Unlock()
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	var fire []func()
	kept := l.hooks[:0]
	for _, h := range l.hooks {
		if bytes.Contains(p, []byte(h.substr)) {
			fire = append(fire, h.do)
		} else {
			kept = append(kept, h)
		}
	}
	l.hooks = kept
	l.mu.Unlock()
	l.t.Logf("%s", bytes.TrimSuffix(p, []byte("\n")))
	for _, f := range fire {
		f()
	}
	return len(p), nil
}

func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// testInventory is a client and a server with no bottleneck devices; the client's
// test IP is 127.0.0.1, the server's serverIP.
func testInventory(t *testing.T, serverIP string) *inventory.Inventory {
	t.Helper()
	data := fmt.Sprintf(`hosts:
  client: {ssh: "tester@client.invalid", test_ip: 127.0.0.1}
  server: {ssh: "tester@server.invalid", test_ip: %s}
client: client
server: server
`, serverIP)
	inv, err := inventory.Parse(filepath.Join(t.TempDir(), "hosts.yaml"), []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// canPing says whether this process may open an ICMP socket, as the ping runner
// tries them: the unprivileged kind (net.ipv4.ping_group_range), else a raw one
// (root).
func canPing() bool {
	for _, typ := range []int{syscall.SOCK_DGRAM, syscall.SOCK_RAW} {
		if fd, err := syscall.Socket(syscall.AF_INET, typ, syscall.IPPROTO_ICMP); err == nil {
			syscall.Close(fd)
			return true
		}
	}
	return false
}

// downloadPlan is tcp_ndown with two streams, or, where ping cannot run, the same
// without ping.
func downloadPlan(t *testing.T) *tests.Plan {
	t.Helper()
	if canPing() {
		d, err := tests.Get("tcp_ndown")
		if err != nil {
			t.Fatal(err)
		}
		p, err := d.Resolve(map[string]string{"download_streams": "2"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Log("no ICMP socket for this user: the run has no ping")
	return parsePlan(t, `name: tcp_ndown
jobs:
  - {name: listen, kind: tcp-listen, host: server, target: server}
  - name: streams
    kind: tcp-streams
    host: client
    connect: listen
    start: delay
    duration: length
    params: {flows: [{direction: download, count: 2}]}
`)
}

func parsePlan(t *testing.T, yaml string) *tests.Plan {
	t.Helper()
	d, err := tests.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeRun is a run's options against fake hosts, with a short run: 1 s of streams,
// 0.2 s before and after.
func fakeRun(t *testing.T, hosts *fakeHosts, inv *inventory.Inventory, plan *tests.Plan) (Options, *testLog) {
	log := &testLog{t: t}
	return Options{Inventory: inv, Plan: plan, Title: "fake hosts", Length: time.Second, Step: 100 * time.Millisecond,
		Delay: 200 * time.Millisecond, OutputDir: t.TempDir(), Version: "test", Log: log, dial: hosts.dial}, log
}

// connectFake opens a session on the fake hosts and closes it when the test ends.
func connectFake(t *testing.T, o Options) *Session {
	t.Helper()
	s, err := Connect(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// allExited fails the test unless every agent the hosts started has exited.
func allExited(t *testing.T, hosts *fakeHosts) {
	t.Helper()
	for _, a := range hosts.agents() {
		select {
		case <-a.exited():
		case <-time.After(10 * time.Second):
			t.Errorf("the agent on %s is still running after the session closed", a.conn.name)
		}
	}
}

// readRun reads a run's data file back.
func readRun(t *testing.T, path string) *datafile.Run {
	t.Helper()
	if path == "" {
		t.Fatal("the run kept no data file")
	}
	run, err := datafile.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

var startedLine = regexp.MustCompile(`(?m)^(\S+) started ([0-9.]+)s after t0$`)

func TestRunOnFakeHosts(t *testing.T) {
	hosts := newFakeHosts()
	plan := downloadPlan(t)
	o, log := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), plan)
	s := connectFake(t, o)
	path, err := s.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// Everything the run started, the listener too, was stopped before it returned.
	for _, h := range []string{"client", "server"} {
		if js := hosts.agent(h).jobs(); len(js) > 0 {
			t.Errorf("jobs still running on %s after the run: %v", h, js)
		}
	}
	run := readRun(t, path)
	if run.Incomplete || run.Error != "" {
		t.Errorf("the run is incomplete: %s", run.Error)
	}
	m := run.Metadata
	if m.Test != "tcp_ndown" || m.T0 == 0 || m.Length != 1 || m.Delay != 0.2 || m.Step != 0.1 || len(m.Hosts) != 2 {
		t.Errorf("header: test %q t0 %v length %v delay %v step %v, %d hosts", m.Test, m.T0, m.Length, m.Delay, m.Step, len(m.Hosts))
	}

	withPing := false
	for _, j := range plan.Jobs {
		withPing = withPing || j.Kind == "ping"
	}
	want := []string{"TCP download::1", "TCP download::2"}
	awaited := []string{"streams"}
	if withPing {
		want = append(want, runners.PingSeries)
		awaited = []string{"ping", "streams"}
	}
	got := map[string]bool{}
	conns := map[string]bool{}
	for _, se := range run.Series {
		if se.Kind == datafile.KindConn {
			// Each flow's and probe's connection, declared as it starts.
			conns[se.Of] = se.Conn != ""
			continue
		}
		got[se.Name] = true
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for _, w := range want {
		if !conns[w] {
			t.Errorf("no connection declared for %s: %v", w, conns)
		}
	}
	// A sample's time is on the controller's clock through the agent's offset,
	// which is known to half the round trip of its estimate.
	slack := 0.0
	for _, h := range m.Hosts {
		slack = max(slack, h.ClockRTT/2)
	}
	for _, name := range want {
		if !got[name] {
			t.Errorf("no series %q in %v", name, got)
		}
		ss := run.Samples[name]
		if len(ss) == 0 {
			t.Errorf("series %q has no samples", name)
		}
		for _, smp := range ss {
			if smp.T < m.T0-slack {
				t.Errorf("series %q: a sample at %.6f precedes t0 %.6f", name, smp.T, m.T0)
				break
			}
		}
	}

	// The controller's record of the starts: in the file and in its log, in the
	// plan's start order, the streams after the delay.
	var events []string
	last := 0.0
	for _, e := range run.Events {
		if job, ok := strings.CutSuffix(e.Message, " started"); ok && e.Level == "info" {
			events = append(events, job)
			if e.T < last {
				t.Errorf("event %q at %.3f comes before an earlier start at %.3f", e.Message, e.T, last)
			}
			last = e.T
		}
	}
	if strings.Join(events, ",") != strings.Join(awaited, ",") {
		t.Errorf("start events %v, want %v", events, awaited)
	}
	var logged []string
	prev := -1.0
	for _, mm := range startedLine.FindAllStringSubmatch(log.String(), -1) {
		logged = append(logged, mm[1])
		at, _ := strconv.ParseFloat(mm[2], 64)
		if at < prev {
			t.Errorf("log: %s started at %.3fs, before the previous start at %.3fs", mm[1], at, prev)
		}
		if mm[1] == "streams" && at < o.Delay.Seconds() {
			t.Errorf("log: the streams started %.3fs after t0, before the delay %v", at, o.Delay)
		}
		prev = at
	}
	if strings.Join(logged, ",") != strings.Join(awaited, ",") {
		t.Errorf("log: starts %v, want %v", logged, awaited)
	}
	s.Close()
	allExited(t, hosts)
}

// An agent that dies while the streams run ends the run with an error that names
// its host; the data file is kept, incomplete, with that error.
func TestAgentDiesDuringRun(t *testing.T) {
	hosts := newFakeHosts()
	o, log := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), downloadPlan(t))
	s := connectFake(t, o)
	log.on("streams started", func() { hosts.agent("server").kill("killed by the test") })
	path, err := s.Run(context.Background(), o)
	if err == nil {
		t.Fatal("the run succeeded with its server's agent killed")
	}
	t.Logf("the run's error: %v", err)
	label := "server (tester@server.invalid)"
	if !strings.Contains(err.Error(), label) || !strings.Contains(err.Error(), "killed by the test") {
		t.Errorf("the error names neither %q nor the agent's last words: %v", label, err)
	}
	run := readRun(t, path)
	if !run.Incomplete || run.Error != err.Error() {
		t.Errorf("data file: incomplete %v, error %q; want incomplete with %q", run.Incomplete, run.Error, err)
	}
	s.Close()
	allExited(t, hosts)
}

// A host that stops answering while the streams run is found out when its
// connection's keepalive gives up: the run ends with an error that says so.
func TestFrozenAgentDuringRun(t *testing.T) {
	hosts := newFakeHosts()
	hosts.keepalive = 300 * time.Millisecond
	o, log := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), downloadPlan(t))
	s := connectFake(t, o)
	log.on("streams started", func() { hosts.agent("client").freeze() })
	path, err := s.Run(context.Background(), o)
	if err == nil {
		t.Fatal("the run succeeded with its client frozen")
	}
	t.Logf("the run's error: %v", err)
	if label := "client (tester@client.invalid)"; !strings.Contains(err.Error(), label) || !strings.Contains(err.Error(), "frozen") {
		t.Errorf("the error does not say that %s is frozen: %v", label, err)
	}
	run := readRun(t, path)
	if !run.Incomplete || run.Error != err.Error() {
		t.Errorf("data file: incomplete %v, error %q; want incomplete with %q", run.Incomplete, run.Error, err)
	}
	s.Close()
	allExited(t, hosts)
}

// A host that stops answering only its stop (its jobs ran to their end) holds the
// run up no longer than stopWithin; its agent is started again for the next run.
func TestFrozenAgentAtStop(t *testing.T) {
	hosts := newFakeHosts() // no keepalive: the connection stays up
	o, log := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), downloadPlan(t))
	s := connectFake(t, o)
	frozen := hosts.agent("server")
	log.on("streams started", frozen.freeze)
	path, err := s.Run(context.Background(), o)
	// The streams ran against the server's listener, which kept serving: what the
	// run lost is the server's stop, which stopAll gave up on after stopWithin. The
	// run reports no error for it today (the file says complete); the next run
	// starting the agent again is what this checks.
	t.Logf("run with the server frozen: %s: %v", path, err)
	if !endpointOf(s.eps, "server").broken {
		t.Error("the server's agent did not answer its stop, and it is not marked broken")
	}
	path, err = s.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("the run after the frozen one: %v", err)
	}
	if want := "starting the agent on server (tester@server.invalid) again"; !strings.Contains(log.String(), want) {
		t.Errorf("the log does not say %q", want)
	}
	select {
	case <-frozen.exited():
	default:
		t.Error("the frozen agent was not ended when its replacement started")
	}
	if run := readRun(t, path); run.Incomplete {
		t.Errorf("the run after the frozen one is incomplete: %s", run.Error)
	}
	s.Close()
	allExited(t, hosts)
}

// A job that cannot start (a listener on an address the host does not have) ends
// the run with an error naming the job and its host, and stops what had started.
func TestJobFailsToStart(t *testing.T) {
	const unbindable = "192.0.2.1" // TEST-NET-1: no host of the test has it
	if ln, err := net.Listen("tcp", net.JoinHostPort(unbindable, "0")); err == nil {
		ln.Close()
		t.Fatalf("this machine can bind %s, so a listener there cannot fail to start: net.ipv4.ip_nonlocal_bind is set; unset it for this test", unbindable)
	}
	hosts := newFakeHosts()
	plan := parsePlan(t, `name: unbindable
jobs:
  - {name: cpu, kind: cpu, host: client}
  - {name: listen, kind: tcp-listen, host: server, target: server}
  - name: streams
    kind: tcp-streams
    host: client
    connect: listen
    start: delay
    duration: length
    params: {flows: [{direction: download, count: 1}]}
`)
	o, _ := fakeRun(t, hosts, testInventory(t, unbindable), plan)
	s := connectFake(t, o)
	path, err := s.Run(context.Background(), o)
	if err == nil {
		t.Fatal("the run succeeded with its listener unable to bind")
	}
	t.Logf("the run's error: %v", err)
	if want := "start job listen (tcp-listen) on server"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), unbindable) {
		t.Errorf("the error is not %q with the address: %v", want, err)
	}
	// The cpu sampler had started on the client: the run stopped it.
	for _, h := range []string{"client", "server"} {
		if js := hosts.agent(h).jobs(); len(js) > 0 {
			t.Errorf("jobs still running on %s after the failed run: %v", h, js)
		}
	}
	run := readRun(t, path)
	if !run.Incomplete || run.Error != err.Error() {
		t.Errorf("data file: incomplete %v, error %q; want incomplete with %q", run.Incomplete, run.Error, err)
	}
	s.Close()
	allExited(t, hosts)
}

// A host that cannot be reached fails Connect with its name, and the agents that
// had started are stopped.
func TestConnectFails(t *testing.T) {
	hosts := newFakeHosts()
	o, _ := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), downloadPlan(t))
	refused := errors.New("host server: connect to server.invalid:22: connection refused")
	o.dial = func(ctx context.Context, h *inventory.Host) (hostConn, error) {
		if h.Name == "server" {
			return nil, refused
		}
		return hosts.dial(ctx, h)
	}
	s, err := Connect(context.Background(), o)
	if s != nil || !errors.Is(err, refused) {
		t.Errorf("Connect: %v, %v; want the server's error", s, err)
	}
	allExited(t, hosts)
}
