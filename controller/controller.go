// Package controller runs one test: it connects to the endpoints, starts their
// agents, drives the runners on the plan's schedule and records every sample into a
// data file as it arrives. It reports nothing itself: the report package reads the file.
package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sync/errgroup"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
	"github.com/bloatbench/bloatbench/runners"
	"github.com/bloatbench/bloatbench/tests"
)

// PingSeries is the ICMP ping series' name, flent's.
const PingSeries = "Ping (ms) ICMP"

// Options of one run.
type Options struct {
	Inventory *inventory.Inventory
	Plan      *tests.Plan
	Title     string
	Length    time.Duration
	Step      time.Duration
	Delay     time.Duration
	OutputDir string
	Dialer    *remote.Dialer
	// Self is the controller's executable and SelfHash its SHA-256: what is copied
	// to endpoints as the agent.
	Self, SelfHash string
	Version        string
	CommandLine    []string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Setup is applied to every bottleneck device for the run and undone after; nil
	// leaves the bottlenecks as they are (their statistics are sampled all the same).
	Setup *qdisc.Setup
	// JournalDir is where the undo journal goes ("" = qdisc.JournalDir()).
	JournalDir string
	// Note is free text kept in the data file (--note).
	Note string
	// Progress, when set, hears how the run goes as samples arrive: a progress bar's
	// feed. It is called from the agents' readers and must not block.
	Progress func(Progress)
	// ChangesDevices says the session's runs apply setups: their bottleneck hosts
	// need root, so a login that is not root runs the agent there through sudo
	// (inventory.Host.UseSudo). The other hosts' agents run as the login user.
	ChangesDevices bool
	// SetsSysctls says a setup of the session sets sysctls, which it does on every
	// host of the run: every host then needs root.
	SetsSysctls bool
}

// Check validates the options' numbers.
func (o *Options) Check() error {
	switch {
	case o.Length <= 0:
		return fmt.Errorf("--length %v: must be more than 0", o.Length)
	case o.Step < time.Duration(runners.MinPingInterval*float64(time.Second)):
		return fmt.Errorf("--step %v: must be at least 10ms", o.Step)
	case o.Step > o.Length:
		return fmt.Errorf("--step %v is longer than --length %v", o.Step, o.Length)
	case o.Delay < 0:
		return fmt.Errorf("--delay %v: must not be negative", o.Delay)
	}
	return nil
}

type endpoint struct {
	role  string
	label string // "server (root@198.19.0.6)"
	host  *inventory.Host
	conn  *remote.Conn
	proc  *remote.Agent
	agent *agent.Client
	hello *agent.Hello
	info  datafile.Host
	// fwd passes what the agent sends to the run in progress.
	fwd *forwarder
	// warnings about the host (a slow login shell) go into each run's data file.
	warnings []string
	// broken is set when the agent stopped answering: the next run starts it again.
	broken bool
}

// Output runs a command on the host through its agent: no new SSH session, so no
// login shell, per command. Endpoints are what qdisc's operations run on.
func (ep *endpoint) Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	return ep.agent.Output(ctx, cmd, stdin, ep.conn.Target.CommandTimeout)
}

// aliveWithin bounds the probe that tells a frozen host from a slow command.
const aliveWithin = 3 * time.Second

// alive checks that the agent answers at once. After Ctrl-C, or before restoring a
// host, a frozen host must cost seconds, not every command's timeout.
func (ep *endpoint) alive(ctx context.Context) error {
	if ep.agent == nil {
		return fmt.Errorf("host %s: no agent", ep.host.Name)
	}
	if ep.broken {
		return fmt.Errorf("host %s stopped answering its agent's requests earlier in this run", ep.host.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, aliveWithin)
	defer cancel()
	if _, err := ep.agent.Call(ctx, agent.Request{Op: agent.OpClock}); err != nil {
		ep.broken = true
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("host %s: its agent did not answer within %v (is the host frozen?)", ep.host.Name, aliveWithin)
		}
		return ep.deathErr(err)
	}
	return nil
}

// forwarder hands what an agent sends to the run in progress; between runs it drops
// it.
type forwarder struct {
	mu sync.Mutex
	h  agent.Handler
}

func (f *forwarder) set(h agent.Handler) {
	f.mu.Lock()
	f.h = h
	f.mu.Unlock()
}

func (f *forwarder) get() agent.Handler {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h
}

func (f *forwarder) Samples(host string, batch map[string][]datafile.Sample) {
	if h := f.get(); h != nil {
		h.Samples(host, batch)
	}
}

func (f *forwarder) JobDone(host, job string, err error) {
	if h := f.get(); h != nil {
		h.JobDone(host, job, err)
	}
}

func (f *forwarder) Log(host, msg string) {
	if h := f.get(); h != nil {
		h.Log(host, msg)
	}
}

// recorder writes what agents send during one run into its data file.
type recorder struct {
	w *datafile.Writer
	// prefix marks this run's job names: a job of an earlier run that ends late is
	// not one of this run's.
	prefix string
	done   chan jobEnd
	mu     sync.Mutex
	err    error
	// failed is closed at the first write error (a full disk): the run ends then,
	// with what the file holds, rather than measuring on into nothing.
	failed     chan struct{}
	failedOnce sync.Once
	// known series; qdisc and BQL statistics are declared when first seen, since
	// which ones a kernel prints depends on the qdisc kinds.
	known map[string]bool
	// progress and live feed Options.Progress; live is set once t0 is known.
	progress func(Progress)
	live     *live
}

func (r *recorder) declare(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.known[name] {
		return nil
	}
	r.known[name] = true
	kind, rest, ok := strings.Cut(name, " ")
	if !ok || (kind != datafile.KindQdisc && kind != datafile.KindBQL) {
		return nil // declared up front
	}
	hostDev, stat, _ := strings.Cut(rest, " ")
	host, _, _ := strings.Cut(hostDev, ":")
	return r.w.AddSeries(datafile.Series{Name: name, Kind: kind, Host: host, Units: qdisc.Units(stat), Counter: qdisc.IsCounter(stat)})
}

// jobEnd is a job's end as its agent reports it: host is the endpoint's label.
type jobEnd struct {
	host, job string
	err       error
}

// Progress is a run's state as its samples arrive.
type Progress struct {
	// Elapsed is the seconds since t0 (negative before it), of Total.
	Elapsed, Total float64
	// Loaded says the streams run: from delay to delay + length.
	Loaded bool
	// SumMbps is the throughput of the streams' latest samples, summed; PingMs the
	// latest reply's round trip (NaN before the first).
	SumMbps, PingMs float64
}

// live keeps what a progress feed needs: each stream's latest throughput and the
// latest ping.
type live struct {
	t0                   time.Time
	delay, length, total float64
	tcp                  map[string]float64
	ping                 float64
}

// tell updates the live state with a batch and hands it to the progress feed.
func (r *recorder) tell(batch map[string][]datafile.Sample) {
	r.mu.Lock()
	l := r.live
	if l == nil {
		r.mu.Unlock()
		return
	}
	for series, ss := range batch {
		if len(ss) == 0 {
			continue
		}
		last := ss[len(ss)-1]
		if _, ok := l.tcp[series]; ok {
			l.tcp[series] = last.V
		} else if series == PingSeries && !last.Lost {
			l.ping = last.V
		}
	}
	el := time.Since(l.t0).Seconds()
	p := Progress{Elapsed: el, Total: l.total, Loaded: el >= l.delay && el < l.delay+l.length, PingMs: l.ping}
	if p.Loaded {
		// Outside the streams' time their last samples would linger.
		for _, v := range l.tcp {
			p.SumMbps += v
		}
	}
	r.mu.Unlock()
	r.progress(p)
}

func (r *recorder) Samples(host string, batch map[string][]datafile.Sample) {
	if r.w == nil {
		return // before the file: nothing of this run sends samples yet
	}
	if r.progress != nil {
		defer r.tell(batch)
	}
	for series, ss := range batch {
		err := r.declare(series)
		if err == nil {
			err = r.w.Append(series, ss)
		}
		if err != nil {
			r.mu.Lock()
			if r.err == nil {
				r.err = fmt.Errorf("record into %s: %w", r.w.Path(), err)
			}
			r.mu.Unlock()
			r.failedOnce.Do(func() { close(r.failed) })
		}
	}
}

func (r *recorder) JobDone(host, job string, err error) {
	if !strings.HasPrefix(job, r.prefix) {
		return
	}
	select {
	case r.done <- jobEnd{host, job, err}:
	default:
		// Every job of the run fits in done; a surplus end is not one we wait for.
	}
}

func (r *recorder) Log(host, msg string) {
	if r.w != nil {
		r.w.Event(datafile.Event{T: datafile.Unix(time.Now()), Host: host, Level: "warning", Message: msg})
	}
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Session is one SSH connection and one agent per host a run needs (client, server
// and the bottleneck hosts), kept for any number of runs: a second setup or a repeat
// logs in to no host again, and a host's login shell runs once a session.
type Session struct {
	o    Options
	eps  []*endpoint
	runs int
}

// Connect opens a session: it connects to every host at once and starts its agent.
// A host that fails is named in the error; nothing is left running.
func Connect(ctx context.Context, o Options) (*Session, error) {
	s, errs := connectAll(ctx, o)
	if err := errors.Join(errs...); err != nil { // nil entries are dropped
		s.Close()
		return nil, err
	}
	return s, nil
}

// connectAll connects what it can; errs[i] is endpoint i's failure, or nil.
func connectAll(ctx context.Context, o Options) (*Session, []error) {
	inv := o.Inventory
	s := &Session{o: o, eps: []*endpoint{{role: "client", host: inv.Role("client")}, {role: "server", host: inv.Role("server")}}}
	for _, b := range inv.Bottleneck {
		if endpointOf(s.eps, b.Host) == nil {
			s.eps = append(s.eps, &endpoint{role: "bottleneck", host: inv.Hosts[b.Host]})
		}
	}
	// A host that only carries path emulation (netem on a router's far side).
	for _, p := range inv.PathDevices {
		if endpointOf(s.eps, p.Host) == nil {
			s.eps = append(s.eps, &endpoint{role: "path", host: inv.Hosts[p.Host]})
		}
	}
	errs := make([]error, len(s.eps))
	var wg sync.WaitGroup
	for i, ep := range s.eps {
		ep.fwd = &forwarder{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.o.connect(ctx, ep)
		}()
	}
	wg.Wait()
	return s, errs
}

// connect dials the host and starts its agent with one command.
func (o *Options) connect(ctx context.Context, ep *endpoint) error {
	ep.label = fmt.Sprintf("%s (%s)", ep.host.Name, ep.host.SSH)
	ep.broken, ep.warnings = false, nil
	o.logf("connecting to %s", ep.label)
	conn, err := o.Dialer.Dial(ctx, ep.host)
	if err != nil {
		return err
	}
	ep.conn = conn
	sudo, err := ep.host.UseSudo(conn.Target.User, o.ChangesDevices && (o.SetsSysctls || o.isBottleneck(ep.host.Name)))
	if err != nil {
		return err
	}
	// The agent lives as long as this session: when the controller goes, its stdin
	// closes and it stops every runner.
	proc, err := conn.StartAgent(ctx, remote.AgentOptions{Self: o.Self, SelfHash: o.SelfHash, AgentPath: ep.host.AgentPath, Sudo: sudo,
		Warn: func(msg string) {
			o.logf("warning: %s", msg)
			ep.warnings = append(ep.warnings, msg)
		}})
	if err != nil {
		return err
	}
	ep.proc = proc
	if proc.Installed {
		o.logf("copied the agent to %s:%s", ep.host.Name, proc.Path)
	}
	ep.agent = agent.NewClient(ep.label, proc.Stdout, proc.Stdin, ep.fwd)
	hctx, cancel := context.WithTimeout(ctx, conn.Target.CommandTimeout)
	defer cancel()
	hello, err := ep.agent.Hello(hctx)
	if err != nil {
		return ep.deathErr(err)
	}
	ep.hello = hello
	ep.info = datafile.Host{Role: ep.role, Name: ep.host.Name, SSH: ep.host.SSH, TestIP: ep.host.TestIP,
		Hostname: hello.Hostname, Kernel: hello.Kernel}
	as := conn.Target.User
	if proc.Sudo {
		as = "root (sudo -n, login " + as + ")"
	}
	o.logf("agent on %s: %s, kernel %s, login shell %.2fs, runs as %s", ep.label, hello.Hostname, hello.Kernel, proc.ShellStart.Seconds(), as)
	return nil
}

// revive starts again the agents that died or stopped answering in an earlier run.
func (s *Session) revive(ctx context.Context) error {
	var errs []error
	for _, ep := range s.eps {
		dead := ep.agent == nil || ep.broken
		if !dead {
			select {
			case <-ep.agent.Dead():
				dead = true
			default:
			}
		}
		if dead {
			s.o.logf("starting the agent on %s again", ep.label)
			ep.close()
			if err := s.o.connect(ctx, ep); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// syncClocks estimates every agent's clock offset, each run: hours of batch runs
// are long enough for clocks to drift.
func (s *Session) syncClocks(ctx context.Context) error {
	var g errgroup.Group
	for _, ep := range s.eps {
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(ctx, ep.conn.Target.CommandTimeout)
			defer cancel()
			off, rtt, err := ep.agent.SyncClock(cctx, 7)
			if err != nil {
				return ep.deathErr(err)
			}
			ep.info.ClockOffset, ep.info.ClockRTT = off.Seconds(), rtt.Seconds()
			s.o.logf("clock of %s: offset %+.3f ms (±%.3f ms)", ep.label, off.Seconds()*1e3, rtt.Seconds()*1e3/2)
			return nil
		})
	}
	return g.Wait()
}

// Close stops every agent and closes every connection, all hosts at once.
func (s *Session) Close() {
	if s == nil {
		return
	}
	var wg sync.WaitGroup
	for _, ep := range s.eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep.close()
		}()
	}
	wg.Wait()
}

// Run runs one test in its own session: Connect, Session.Run, Close.
func Run(ctx context.Context, o Options) (string, error) {
	if err := o.Check(); err != nil {
		return "", err
	}
	s, err := Connect(ctx, o)
	if err != nil {
		return "", err
	}
	defer s.Close()
	return s.Run(ctx, o)
}

// Run runs the test on the session's hosts and returns the data file's path. o's
// Inventory, Dialer and Self are the session's; the rest is this run's. The file is
// kept whatever happens once it exists; a run that fails is recorded as incomplete
// with its error.
func (s *Session) Run(ctx context.Context, o Options) (path string, err error) {
	if err := o.Check(); err != nil {
		return "", err
	}
	if err := s.revive(ctx); err != nil {
		return "", err
	}
	eps := s.eps
	s.runs++
	// Agents only send samples once jobs start, after the file exists. Every job's end
	// fits in done (listen, streams, ping and one sampler per host).
	rec := &recorder{prefix: fmt.Sprintf("run%d/", s.runs), done: make(chan jobEnd, 3+len(eps)), known: map[string]bool{},
		failed: make(chan struct{}), progress: o.Progress}
	for _, ep := range eps {
		ep.fwd.set(rec)
	}
	defer func() {
		for _, ep := range eps {
			ep.fwd.set(nil)
		}
	}()
	if err := s.syncClocks(ctx); err != nil {
		return "", err
	}
	s.gatherFacts(ctx)
	unlock, err := o.lockBottlenecks(eps)
	if err != nil {
		return "", err
	}
	// Deferred first, so it runs after the restore below.
	defer unlock()
	setup, restore, err := o.applySetup(ctx, eps)
	if err != nil {
		return "", err
	}
	defer func() {
		// However the run ended, Ctrl-C included, the bottlenecks go back as found.
		if rerr := restore(); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	start := time.Now()
	w, path, err := datafile.CreateIn(o.OutputDir, o.Plan.Test, o.Title, start)
	if err != nil {
		return "", err
	}
	rec.w = w
	jobs := &jobSet{rec: rec}
	runErr := o.drive(ctx, eps, w, rec, jobs, setup)
	// Whatever is still running (the listener, the samplers; everything after Ctrl-C
	// or a failure) is stopped, and its last samples recorded, before the file ends.
	jobs.stopAll(context.WithoutCancel(ctx))
	o.recordStates(context.WithoutCancel(ctx), eps, w, "post")
	if runErr == nil {
		rec.mu.Lock()
		runErr = rec.err
		rec.mu.Unlock()
	}
	if cerr := w.Close(runErr); cerr != nil && runErr == nil {
		runErr = cerr
	}
	return path, runErr
}

// jobKey names a job on one endpoint.
type jobKey struct {
	ep  *endpoint
	job string
}

// jobSet is a run's jobs: those it waits for (they end by themselves) and those
// stopped when it ends (the listener, the samplers).
type jobSet struct {
	rec        *recorder
	awaited    map[jobKey]bool
	background map[jobKey]bool
}

// start asks ep's agent to start a job of this run.
func (js *jobSet) start(ctx context.Context, ep *endpoint, req agent.Request, awaited bool) (agent.Message, error) {
	req.Job = js.rec.prefix + req.Job
	// Starting a job is answered at once; a host that does not answer is frozen.
	cctx, cancel := context.WithTimeout(ctx, ep.conn.Target.CommandTimeout)
	defer cancel()
	m, err := ep.agent.Call(cctx, req)
	if err != nil {
		return m, ep.deathErr(err)
	}
	k := jobKey{ep, req.Job}
	if awaited {
		if js.awaited == nil {
			js.awaited = map[jobKey]bool{}
		}
		js.awaited[k] = true
	} else {
		if js.background == nil {
			js.background = map[jobKey]bool{}
		}
		js.background[k] = true
	}
	return m, nil
}

// ended takes a job's end off the set.
func (js *jobSet) ended(e jobEnd) {
	for k := range js.awaited {
		if k.ep.label == e.host && k.job == e.job {
			delete(js.awaited, k)
		}
	}
	for k := range js.background {
		if k.ep.label == e.host && k.job == e.job {
			delete(js.background, k)
		}
	}
}

// stopWithin bounds stopping a run's jobs: a frozen host must not hold up the
// restore of the others.
const stopWithin = 3 * time.Second

// stopAll stops every job still running and waits for their ends (their last samples
// come before), at most stopWithin; an agent that does not answer is marked broken.
func (js *jobSet) stopAll(ctx context.Context) {
	left := map[jobKey]bool{}
	for k := range js.awaited {
		left[k] = true
	}
	for k := range js.background {
		left[k] = true
	}
	if len(left) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, stopWithin)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for k := range left {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := k.ep.agent.Call(ctx, agent.Request{Op: agent.OpStop, Job: k.job}); err != nil {
				mu.Lock()
				k.ep.broken = true
				delete(left, k)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for len(left) > 0 {
		select {
		case e := <-js.rec.done:
			for k := range left {
				if k.ep.label == e.host && k.job == e.job {
					delete(left, k)
				}
			}
		case <-ctx.Done():
			for k := range left {
				k.ep.broken = true
			}
			return
		}
	}
}

func (o *Options) drive(ctx context.Context, eps []*endpoint, w *datafile.Writer, rec *recorder, jobs *jobSet, setup applied) error {
	client, server := eps[0], eps[1]
	p := o.Plan
	length, delay, step := o.Length.Seconds(), o.Delay.Seconds(), o.Step.Seconds()
	total := length + 2*delay
	// Every job starts from one instant, t0, picked a little ahead and sent to each
	// agent on its own clock: ping and the samplers start at t0, the streams at
	// t0+delay, so every series starts on the grid (the header's t0).
	start := time.Now().Add(o.startLead(eps)).Round(time.Millisecond)
	meta := datafile.Metadata{
		Test: p.Test, Title: o.Title, Parameters: p.Parameters, StartTime: start, T0: datafile.Unix(start),
		Length: length, Delay: delay, Step: step, TotalLength: total, Family: datafile.FamilyOf(server.host.TestIP),
		ToolVersion: o.Version, CommandLine: o.CommandLine, Setup: setup.setup, Path: setup.path, Note: o.Note,
	}
	for _, ep := range eps {
		meta.Hosts = append(meta.Hosts, ep.info)
	}
	var flows []runners.StreamFlow
	series := []datafile.Series{}
	for _, f := range p.Flows {
		measuredBy := "client"
		if f.Direction == tests.Upload {
			measuredBy = "server"
		}
		series = append(series, datafile.Series{Name: f.Name(), Kind: datafile.KindTCP, Units: "Mbits/s", Host: measuredBy,
			Direction: f.Direction, Flow: f.Index, CC: f.CC})
		flows = append(flows, runners.StreamFlow{Name: f.Name(), Direction: f.Direction, CC: f.CC})
	}
	if err := w.Header(meta); err != nil {
		return err
	}
	for _, ep := range eps {
		for _, msg := range ep.warnings {
			w.Event(datafile.Event{T: datafile.Unix(start), Host: ep.host.Name, Level: "warning", Message: msg})
		}
	}
	lv := &live{t0: start, delay: delay, length: length, total: total, tcp: map[string]float64{}, ping: math.NaN()}
	for _, s := range series {
		rec.known[s.Name] = true
		if s.Kind == datafile.KindTCP {
			lv.tcp[s.Name] = 0
		}
		if err := w.AddSeries(s); err != nil {
			return err
		}
	}
	rec.mu.Lock()
	rec.live = lv
	rec.mu.Unlock()
	o.recordStates(ctx, eps, w, "pre")
	if err := o.startSampling(ctx, eps, jobs, step, start); err != nil {
		return err
	}
	var flowsAddr, token string
	if len(flows) > 0 {
		tok := make([]byte, 16)
		rand.Read(tok)
		token = hex.EncodeToString(tok)
		m, err := jobs.start(ctx, server, agent.Request{Op: agent.OpListen, Job: "listen",
			Listen: &runners.ListenSpec{Addr: server.host.TestIP, Token: token, Step: step}}, false)
		if err != nil {
			return err
		}
		flowsAddr = net.JoinHostPort(server.host.TestIP, strconv.Itoa(m.Port))
		o.logf("running %s for %gs, %d streams, ping every %gs from %gs before to %gs after", p.Test, length, len(flows), step, delay, delay)
	}
	if p.Ping {
		// The agent opens its socket before answering: the answer says where the
		// probes' times come from, and the series records it.
		rec.known[PingSeries] = true
		m, err := jobs.start(ctx, client, agent.Request{Op: agent.OpPing, Job: "ping",
			Ping: &runners.PingSpec{Series: PingSeries, Target: server.host.TestIP, Interval: step, Duration: total,
				Start: agentTime(client, start)}}, true)
		if err != nil {
			return err
		}
		stamps := m.Timestamps
		if stamps == "" {
			stamps = datafile.StampsUser
		}
		if err := w.AddSeries(datafile.Series{Name: PingSeries, Kind: datafile.KindPing, Units: "ms", Host: "client",
			Target: server.host.TestIP, Timestamps: stamps}); err != nil {
			return err
		}
		level := "info"
		if stamps != datafile.StampsKernel {
			level = "warning"
		}
		o.logf("ping timestamps on %s: %s", client.label, m.Message)
		w.Event(datafile.Event{T: datafile.Unix(time.Now()), Host: client.host.Name, Level: level, Message: "ping timestamps: " + m.Message})
	}
	if len(flows) > 0 {
		if _, err := jobs.start(ctx, client, agent.Request{Op: agent.OpStreams, Job: "streams",
			Streams: &runners.StreamsSpec{Addr: flowsAddr, Token: token, Step: step, Duration: length, Flows: flows,
				Start: agentTime(client, start.Add(o.Delay))}}, true); err != nil {
			return err
		}
	}
	if late := time.Since(start); late > 0 {
		msg := fmt.Sprintf("the jobs were started %.0f ms after t0 (the controller allowed %.0f ms): their first samples are late", late.Seconds()*1e3, o.startLead(eps).Seconds()*1e3)
		o.logf("warning: %s", msg)
		w.Event(datafile.Event{T: datafile.Unix(time.Now()), Level: "warning", Message: msg})
	}
	// The controller's own record of when each job started, on its clock, at the
	// instant the agents were given: what tests and readers check timing against.
	started := func(what string, at time.Time) error {
		if err := o.wait(ctx, eps, rec, jobs, at); err != nil {
			return err
		}
		now := time.Now()
		o.logf("%s started %.3fs after t0", what, now.Sub(start).Seconds())
		w.Event(datafile.Event{T: datafile.Unix(now), Level: "info", Message: what + " started"})
		return nil
	}
	if p.Ping {
		if err := started("ping", start); err != nil {
			return err
		}
	}
	if len(flows) > 0 {
		if err := started("streams", start.Add(o.Delay)); err != nil {
			return err
		}
	}
	return o.wait(ctx, eps, rec, jobs, time.Time{})
}

// agentTime is controller time t on ep's agent's clock, in a spec's Unix seconds.
func agentTime(ep *endpoint, t time.Time) float64 {
	return datafile.Unix(t) + ep.info.ClockOffset
}

// startLead is how far ahead t0 is put: past what comes between the header and the
// last job's start, which is one request per job and three per bottleneck (is the
// agent alive, tc -s before the run, the sampler), each a round trip to its agent
// and a little work there. A job whose start comes late starts at once.
func (o *Options) startLead(eps []*endpoint) time.Duration {
	var rtt time.Duration
	for _, ep := range eps {
		rtt = max(rtt, time.Duration(ep.info.ClockRTT*float64(time.Second)))
	}
	requests := 3 + 3*len(o.Inventory.Bottleneck)
	return 200*time.Millisecond + time.Duration(requests)*(rtt+10*time.Millisecond)
}

// wait waits until the time until (or, when until is zero, until the awaited jobs
// have ended), failing as soon as an agent dies, a job fails or ctx ends.
func (o *Options) wait(ctx context.Context, eps []*endpoint, rec *recorder, jobs *jobSet, until time.Time) error {
	var timer <-chan time.Time
	if !until.IsZero() {
		timer = time.After(time.Until(until)) // at once when until has passed
	}
	dead := make(chan *endpoint, len(eps))
	stop := make(chan struct{})
	defer close(stop)
	for _, ep := range eps {
		// The channel is taken here: a restore may replace ep's agent while the
		// goroutine has yet to run.
		died := ep.agent.Dead()
		go func() {
			select {
			case <-died:
				dead <- ep
			case <-stop:
			}
		}()
	}
	for {
		if until.IsZero() && len(jobs.awaited) == 0 {
			return nil
		}
		select {
		case <-timer:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("run interrupted: %w", context.Cause(ctx))
		case <-rec.failed:
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return rec.err
		case ep := <-dead:
			return ep.deathErr(ep.agent.Err())
		case e := <-rec.done:
			jobs.ended(e)
			if e.err != nil {
				// A stream fails when the far agent dies: name the cause, not the symptom.
				select {
				case ep := <-dead:
					return ep.deathErr(ep.agent.Err())
				case <-time.After(500 * time.Millisecond):
				}
				return e.err
			}
		}
	}
}

// deathErr adds what is known of an agent's end to err: its exit status and last
// words on stderr.
func (ep *endpoint) deathErr(err error) error {
	if err == nil || ep.agent == nil {
		return err
	}
	select {
	case <-ep.agent.Dead():
	default:
		return err
	}
	var why string
	select {
	case <-ep.proc.Exited():
		werr := ep.proc.Wait()
		var ee *ssh.ExitError
		var missing *ssh.ExitMissingError
		switch {
		case errors.As(werr, &ee) && ee.Signal() != "":
			why = "killed by signal " + ee.Signal()
		case errors.As(werr, &ee):
			why = fmt.Sprintf("exit status %d", ee.ExitStatus())
		case errors.As(werr, &missing):
			why = "exited without a status (killed?)"
		}
	case <-time.After(time.Second):
	}
	if why != "" {
		err = fmt.Errorf("%w (%s)", err, why)
	}
	if lost := ep.conn.Lost(); lost != nil {
		err = fmt.Errorf("%w: %w", err, lost)
	}
	if t := strings.TrimSpace(ep.proc.StderrTail()); t != "" {
		err = fmt.Errorf("%w; its stderr: %s", err, t)
	}
	return err
}

// closeWithin bounds how long an agent gets to stop its runners and exit.
const closeWithin = 3 * time.Second

func (ep *endpoint) close() {
	if ep.proc != nil {
		ep.proc.Stdin.Close()
		select {
		case <-ep.proc.Exited():
		case <-time.After(closeWithin):
		}
		ep.proc.Close()
	}
	if ep.conn != nil {
		ep.conn.Close()
	}
	ep.conn, ep.proc, ep.agent = nil, nil, nil
}
