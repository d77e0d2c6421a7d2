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
	"maps"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sync/errgroup"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/tcrate"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
	"github.com/bloatbench/bloatbench/report"
	"github.com/bloatbench/bloatbench/runners"
	"github.com/bloatbench/bloatbench/tests"
)

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
	// dial, when set, connects to a host instead of Dialer: a test's fake hosts,
	// whose agents run in the test's process. Like Dialer, it is the session's.
	dial func(ctx context.Context, h *inventory.Host) (hostConn, error)
	// Self is the controller's executable, what is copied to endpoints as the
	// agent, and SelfHash waits for its SHA-256 (remote.HashLater): a binary of
	// tens of MB takes tens of ms of CPU to hash, which the SSH logins hide.
	Self        string
	SelfHash    func() (string, error)
	Version     string
	CommandLine []string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Setup is applied to every bottleneck device for the run and undone after; nil
	// leaves the bottlenecks as they are (their statistics are sampled all the same).
	Setup *qdisc.Setup
	// JournalDir is where the undo journal goes ("" = qdisc.JournalDir()).
	JournalDir string
	// MarkDir is where on each host its marks of unrestored runs go ("" =
	// qdisc.MarkDir; tests, whose fake hosts are this machine, give their own).
	MarkDir string
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
	if err := o.Setup.ScheduleFits(o.Length + 2*o.Delay); err != nil {
		return err
	}
	if o.Plan == nil {
		return nil
	}
	// A job's times are sums of the run's delay and length: whether they fit
	// depends on this run's numbers.
	tm := tests.Timing{Delay: o.Delay.Seconds(), Length: o.Length.Seconds()}
	total := tm.Length + 2*tm.Delay
	for _, j := range o.Plan.Jobs {
		start, dur := j.Start.Eval(tm), j.Duration.Eval(tm)
		switch {
		case start < 0 || start >= total:
			return fmt.Errorf("test %s: job %s starts at %v = %gs: with --length %v and --delay %v it must be from 0 to before %gs",
				o.Plan.Test, j.Name, j.Start, start, o.Length, o.Delay, total)
		case !j.Background && dur <= 0:
			return fmt.Errorf("test %s: job %s runs for %v = %gs with --length %v and --delay %v: give a delay or length that leaves it time",
				o.Plan.Test, j.Name, j.Duration, dur, o.Length, o.Delay)
		case !j.Background && start+dur > total+1e-9:
			return fmt.Errorf("test %s: job %s ends at %gs, after the run's %gs (length + 2 delay)", o.Plan.Test, j.Name, start+dur, total)
		}
	}
	return nil
}

type endpoint struct {
	role  string
	label string // "server (root@198.19.0.6)"
	host  *inventory.Host
	conn  hostConn
	proc  agentProc
	agent *agent.Client
	hello *agent.Hello
	info  datafile.Host
	// fwd passes what the agent sends to the run in progress.
	fwd *forwarder
	// warnings about the host (a slow login shell) go into each run's data file.
	warnings []string
	// broken is set when the agent stopped answering: the next run starts it again.
	broken bool
	// id is who the host said it is (identities), once it said; nil until then,
	// and again after each connect.
	id *qdisc.HostID
	// startTook is the longest a job's start took on this host's agent, round
	// trip included, in the session so far (startLead).
	startTook time.Duration
}

// Output runs a command on the host through its agent: no new SSH session, so no
// login shell, per command. Endpoints are what qdisc's operations run on.
func (ep *endpoint) Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	return ep.agent.Output(ctx, cmd, stdin, ep.conn.commandTimeout())
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

func (f *forwarder) Series(host, job string, s datafile.Series) {
	if h := f.get(); h != nil {
		h.Series(host, job, s)
	}
}

func (f *forwarder) Log(host, msg string) {
	if h := f.get(); h != nil {
		h.Log(host, msg)
	}
}

func (f *forwarder) Alert(host, msg string) {
	if h := f.get(); h != nil {
		h.Alert(host, msg)
	}
}

// recorder writes what agents send during one run into its data file.
type recorder struct {
	w *datafile.Writer
	// alert shows an agent's alerts to the person running the test.
	alert func(host, msg string)
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
	// owners are the hosts (endpoint labels) each series of the run may come from:
	// for the plan's, the hosts that run the jobs yielding them; for those a job
	// declares as it runs (a qdisc's statistics depend on its kind and the kernel),
	// the declaring host alone. A host sends no other series: an endpoint is not
	// trusted with another's measurements.
	owners map[string][]string
	// jobsOn are the run's jobs on each host, keyed by jobOn; ended, those whose
	// end came.
	jobsOn, ended map[string]bool
	// series counts the series the file declares, the plan's and the found ones.
	series int
	// hosts is what each host sent, by its label, and what of it was refused.
	hosts map[string]*hostTally
	// progress and live feed Options.Progress; live is set once t0 is known.
	progress func(Progress)
	live     *live
}

// newRecorder is the recorder of a run whose job names start with prefix and which
// waits for at most jobs jobs' ends.
func newRecorder(prefix string, jobs int, progress func(Progress)) *recorder {
	return &recorder{prefix: prefix, done: make(chan jobEnd, jobs), failed: make(chan struct{}), progress: progress,
		owners: map[string][]string{}, jobsOn: map[string]bool{}, ended: map[string]bool{}, hosts: map[string]*hostTally{}}
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
	// pingSeries is the series whose latest round trip the feed shows.
	pingSeries string
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
		} else if series == l.pingSeries && !last.Lost {
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
	// The batch is the client's, decoded for this call: what is refused is taken
	// out of it, so that neither the file nor the progress feed sees it.
	var warns []string
	r.mu.Lock()
	t := r.tally(host)
	for series, ss := range batch {
		owners, known := r.owners[series]
		switch {
		case !known:
			// Every series is declared before its samples (by the plan, or by
			// its job as it runs): these are of no job of this run.
			delete(batch, series)
			t.unknownSamples += len(ss)
			if t.once(refusedUnknown) {
				warns = append(warns, fmt.Sprintf("samples of series %q, which no job of the run declared, were dropped; later ones of undeclared series are counted at the run's end",
					truncName(series)))
			}
		case !slices.Contains(owners, host):
			delete(batch, series)
			t.foreignSamples += len(ss)
			if t.once(refusedForeignSamples) {
				warns = append(warns, fmt.Sprintf("samples of series %q, which is another host's, were dropped; later ones of other hosts' series are counted at the run's end",
					truncName(series)))
			}
		}
	}
	r.mu.Unlock()
	for _, msg := range warns {
		r.warn(host, msg)
	}
	for series, ss := range batch {
		if err := r.w.Append(series, ss); err != nil {
			r.fail(err)
		}
	}
	if r.progress != nil {
		r.tell(batch)
	}
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = fmt.Errorf("record into %s: %w", r.w.Path(), err)
	}
	r.mu.Unlock()
	r.failedOnce.Do(func() { close(r.failed) })
}

// Series records a series a job found as it ran (a qdisc's statistics, which
// depend on the qdisc's kind and the kernel), once, as the declaring host's: a
// declaration naming a job the host does not run in this run, or a series that is
// another host's, is refused, as are declarations past the bounds.
func (r *recorder) Series(host, job string, s datafile.Series) {
	if r.w == nil || !strings.HasPrefix(job, r.prefix) {
		return // a job of an earlier run that ends late
	}
	msg, err := r.declare(host, job, s)
	if msg != "" {
		r.warn(host, msg)
	}
	if err != nil {
		r.fail(err)
	}
}

// declare takes a declaration; a refusal's first of its kind from the host comes
// back as the warning to record.
func (r *recorder) declare(host, job string, s datafile.Series) (warning string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tally(host)
	owners, known := r.owners[s.Name]
	switch {
	case !r.jobsOn[jobOn(host, job)]:
		t.foreignSeries++
		if t.once(refusedForeignSeries) {
			return fmt.Sprintf("series %q was refused: declared for job %q, which this run did not start on the host; later refusals are counted at the run's end",
				truncName(s.Name), truncName(job)), nil
		}
	case known && slices.Contains(owners, host):
		// Planned, or declared already: the first declaration stands.
	case known:
		t.foreignSeries++
		if t.once(refusedForeignSeries) {
			return fmt.Sprintf("series %q was refused: it is another host's; later refusals are counted at the run's end", truncName(s.Name)), nil
		}
	case t.series >= maxHostSeries:
		t.overSeries++
		if t.once(refusedOverSeries) {
			return fmt.Sprintf("series %q and any later were refused: the host's jobs declared %d series, the most a host may; they are counted at the run's end",
				truncName(s.Name), maxHostSeries), nil
		}
	case r.series >= datafile.MaxSeries:
		t.overSeries++
		if t.once(refusedOverSeries) {
			return fmt.Sprintf("series %q and any later were refused: the run has %d series, the most a data file holds; they are counted at the run's end",
				truncName(s.Name), datafile.MaxSeries), nil
		}
	default:
		r.owners[s.Name] = []string{host}
		t.series++
		r.series++
		// Under the lock: a sample of the series, accepted once its owner is set,
		// is written after its declaration.
		return "", r.w.AddSeries(s)
	}
	return "", nil
}

// JobDone hands a job's end to the run; only the host that runs a job may end it,
// once: done holds one end of each, and forged ends must not crowd the real ones
// out.
func (r *recorder) JobDone(host, job string, err error) {
	if !strings.HasPrefix(job, r.prefix) {
		return
	}
	r.mu.Lock()
	k := jobOn(host, job)
	ours := r.jobsOn[k] && !r.ended[k]
	if ours {
		r.ended[k] = true
	}
	r.mu.Unlock()
	if !ours {
		return
	}
	select {
	case r.done <- jobEnd{host, job, err}:
	default:
		// Every job of the run fits in done; a surplus end is not one we wait for.
	}
}

// Alert records what a host's agent warns of as Log does, and prints it as the
// run goes (escaped: an agent's words are not trusted with the terminal).
// Past the host's cap on events it is neither: a hostile agent cannot flood the
// terminal.
func (r *recorder) Alert(host, msg string) {
	if r.record(host, msg) && r.alert != nil {
		r.alert(host, datafile.Truncate(msg, datafile.MaxText))
	}
}

// Log records what a host's agent warns of, up to maxHostEvents a host.
func (r *recorder) Log(host, msg string) { r.record(host, msg) }

// record is Log, saying whether msg was kept.
func (r *recorder) record(host, msg string) bool {
	if r.w == nil {
		return false
	}
	r.mu.Lock()
	t := r.tally(host)
	t.events++
	over := t.events > maxHostEvents
	first := false
	if over {
		t.overEvents++
		first = t.once(refusedOverEvents)
	}
	r.mu.Unlock()
	if first {
		r.warn(host, fmt.Sprintf("the host's agent logged more than %d events in this run: later ones are counted at the run's end, not kept", maxHostEvents))
	}
	if !over {
		r.warn(host, datafile.Truncate(msg, datafile.MaxText))
	}
	return !over
}

// warn records a warning about host.
func (r *recorder) warn(host, msg string) {
	r.w.Event(datafile.Event{T: datafile.Unix(time.Now()), Host: host, Level: "warning", Message: msg})
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
	s := &Session{o: o}
	// One endpoint a host: a host may be in several pairs (one server for
	// several clients).
	for _, p := range inv.PairsOf() {
		for _, e := range []struct{ role, host string }{{"client", p.Client}, {"server", p.Server}} {
			if endpointOf(s.eps, e.host) == nil {
				s.eps = append(s.eps, &endpoint{role: e.role, host: inv.Hosts[e.host]})
			}
		}
	}
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
	ep.broken, ep.warnings, ep.id = false, nil, nil
	o.logf("connecting to %s", ep.label)
	conn, err := o.dialHost(ctx, ep.host)
	if err != nil {
		return err
	}
	ep.conn = conn
	sudo, err := ep.host.UseSudo(conn.user(), o.ChangesDevices && (o.SetsSysctls || o.isBottleneck(ep.host.Name)))
	if err != nil {
		return err
	}
	// The agent lives as long as this session: when the controller goes, its stdin
	// closes and it stops every runner.
	selfHash := ""
	if ep.host.AgentPath == "" && o.SelfHash != nil {
		if selfHash, err = o.SelfHash(); err != nil {
			return err
		}
	}
	proc, err := conn.startAgent(ctx, remote.AgentOptions{Self: o.Self, SelfHash: selfHash, AgentPath: ep.host.AgentPath, Sudo: sudo,
		Warn: func(msg string) {
			o.logf("warning: %s", msg)
			ep.warnings = append(ep.warnings, msg)
		}})
	if err != nil {
		return err
	}
	ep.proc = proc
	started := proc.started()
	if started.installed {
		o.logf("copied the agent to %s:%s", ep.host.Name, started.path)
	}
	ep.agent = agent.NewClient(ep.label, proc.stdout(), proc.stdin(), ep.fwd)
	hctx, cancel := context.WithTimeout(ctx, conn.commandTimeout())
	defer cancel()
	hello, err := ep.agent.Hello(hctx)
	if err != nil {
		return ep.deathErr(err)
	}
	ep.hello = hello
	ep.info = datafile.Host{Role: ep.role, Name: ep.host.Name, SSH: ep.host.SSH, TestIP: ep.host.TestIP,
		Hostname: hello.Hostname, Kernel: hello.Kernel}
	as := conn.user()
	if started.sudo {
		as = "root (sudo -n, login " + as + ")"
	}
	o.logf("agent on %s: %s, kernel %s, login shell %.2fs, runs as %s", ep.label, hello.Hostname, hello.Kernel, started.shellStart.Seconds(), as)
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
			cctx, cancel := context.WithTimeout(ctx, ep.conn.commandTimeout())
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
	if err := o.Plan.CheckSetup(o.Setup, qdisc.PathHasL4S(o.Setup, o.Inventory)); err != nil {
		return "", err
	}
	// The sysctls the test's flows need (tcp_ecn for ecn:) are set as the
	// setup's, snapshot and restored with them.
	if o.Setup, err = o.Plan.SetupFor(o.Setup); err != nil {
		return "", err
	}
	if o.Plan, err = o.withSchedule(); err != nil {
		return "", err
	}
	if err := s.revive(ctx); err != nil {
		return "", err
	}
	eps := s.eps
	s.runs++
	// Agents only send samples once jobs start, after the file exists. Every job's end
	// fits in done (each job on at most every host).
	rec := newRecorder(fmt.Sprintf("run%d/", s.runs), (len(o.Plan.Jobs)+1)*(len(eps)+len(o.Inventory.PairsOf())), o.Progress)
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
	jobs := &jobSet{rec: rec}
	prepared := o.startPrepare(ctx, eps, jobs)
	// A failure before the jobs start lets go of what was prepared for them (a
	// tracer's programs) before the hosts are restored.
	abandon := func(err error) (string, error) {
		prepared()
		jobs.stopAll(context.WithoutCancel(ctx))
		return "", err
	}
	// The facts and who each host is are asked at once: both only read.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.gatherFacts(ctx)
	}()
	ids := o.identities(ctx, eps)
	wg.Wait()
	unlock, err := o.lockBottlenecks(ctx, eps, ids)
	if err != nil {
		return abandon(err)
	}
	// Deferred first, so it runs after the restore below.
	defer unlock()
	setup, restore, err := o.applySetup(ctx, eps, ids)
	if err != nil {
		return abandon(err)
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
		return abandon(err)
	}
	rec.w = w
	rec.alert = func(host, msg string) { o.logf("warning: %s: %s", host, report.EscapeText(msg)) }
	runErr := o.drive(ctx, eps, w, rec, jobs, setup, prepared)
	// Whatever is still running (the listener, the samplers; everything after Ctrl-C
	// or a failure) is stopped, and its last samples recorded, before the file ends.
	jobs.stopAll(context.WithoutCancel(ctx))
	o.recordStates(context.WithoutCancel(ctx), eps, w, "post")
	rec.summarize()
	o.recordQueueWarnings(context.WithoutCancel(ctx), eps, w)
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
	// prepared are the jobs prepared and not yet started; the prepares go out
	// at once, so this one map is guarded.
	mu       sync.Mutex
	prepared map[jobKey]bool
}

// start asks ep's agent to start a job of this run.
func (js *jobSet) start(ctx context.Context, ep *endpoint, req agent.Request, awaited bool) (agent.Message, error) {
	req.Job = js.rec.prefix + req.Job
	// Starting a job is answered at once; a host that does not answer is frozen.
	cctx, cancel := context.WithTimeout(ctx, ep.conn.commandTimeout())
	defer cancel()
	began := time.Now()
	m, err := ep.agent.Call(cctx, req)
	if err != nil {
		return m, ep.deathErr(err)
	}
	ep.startTook = max(ep.startTook, time.Since(began))
	k := jobKey{ep, req.Job}
	js.mu.Lock()
	delete(js.prepared, k)
	js.mu.Unlock()
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

// prepare asks ep's agent to prepare a job of this run, ahead of its start; until
// then a stop of the run lets it go.
func (js *jobSet) prepare(ctx context.Context, ep *endpoint, req agent.Request) error {
	req.Job = js.rec.prefix + req.Job
	cctx, cancel := context.WithTimeout(ctx, prepareWithin)
	defer cancel()
	js.mu.Lock()
	if js.prepared == nil {
		js.prepared = map[jobKey]bool{}
	}
	js.prepared[jobKey{ep, req.Job}] = true
	js.mu.Unlock()
	if _, err := ep.agent.Call(cctx, req); err != nil {
		return ep.deathErr(err)
	}
	return nil
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
	// A job prepared and never started has no end to wait for: its stop lets
	// go of what it holds (a tracer's programs) before the restore.
	js.mu.Lock()
	unstarted := slices.Collect(maps.Keys(js.prepared))
	js.prepared = nil
	js.mu.Unlock()
	if len(left)+len(unstarted) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, stopWithin)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	// The stops go out from a copy of the keys: a stop that fails deletes its key
	// from left while this loop would still be ranging over it.
	keys := make([]jobKey, 0, len(left))
	for k := range left {
		keys = append(keys, k)
	}
	for _, k := range append(keys, unstarted...) {
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

// instance is a planned job on one host: a job of role bottleneck runs on every
// bottleneck host, a job of a client or server role once for each pair.
type instance struct {
	job tests.Job
	// name is the job's name on its agent and in the log: the plan's, with the
	// pair in a run with several.
	name string
	// pair is the job's pair in a run with several ("1", "2", ...), else "";
	// pairIndex is the pair (from 0) whose hosts its target and peer are.
	pair      string
	pairIndex int
	ep        *endpoint
	spec      runners.JobSpec
	// series are the job's planned series with their hosts and targets filled in;
	// from[i] is the endpoint whose agent sends series[i]'s samples: the job's own,
	// or for a series of its peer (an upload's receiver) the peer's.
	series []datafile.Series
	from   []*endpoint
	// at is when it starts, on the controller's clock.
	at time.Time
}

// pairEnds are the endpoints of each pair's client and server.
type pairEnds struct{ client, server *endpoint }

// pairsOf finds each of the inventory's pairs among the endpoints.
func (o *Options) pairsOf(eps []*endpoint) []pairEnds {
	var out []pairEnds
	for _, p := range o.Inventory.PairsOf() {
		out = append(out, pairEnds{endpointOf(eps, p.Client), endpointOf(eps, p.Server)})
	}
	return out
}

// role is the pair's endpoint of a client or server role.
func (p pairEnds) role(role string) *endpoint {
	switch role {
	case tests.RoleClient:
		return p.client
	case tests.RoleServer:
		return p.server
	}
	return nil
}

// pairLabel names pair k (from 0) of n: "" when the run has one.
func pairLabel(k, n int) string {
	if n < 2 {
		return ""
	}
	return strconv.Itoa(k + 1)
}

// instanceName is a job's name on its agent and in the log.
func instanceName(job, pair string) string {
	if pair == "" {
		return job
	}
	return job + "/" + pair
}

// instances lays the plan's jobs out on the hosts, t0 being start. The controller
// fills in what every kind shares (when, where, which devices, which pair); the
// kind's own parameters pass through as the test planned them.
func (o *Options) instances(eps []*endpoint, start time.Time, token string) []instance {
	timing := tests.Timing{Delay: o.Delay.Seconds(), Length: o.Length.Seconds()}
	devs := map[string][]runners.Dev{}
	var watched []string
	ifb := o.Setup != nil && o.Setup.Ingress != nil
	for _, b := range o.Inventory.Bottleneck {
		if devs[b.Host] == nil {
			watched = append(watched, b.Host)
		}
		devs[b.Host] = append(devs[b.Host], runners.Dev{Name: b.Dev})
	}
	if ifb {
		for _, b := range o.Inventory.Bottleneck {
			devs[b.Host] = append(devs[b.Host], runners.Dev{Name: qdisc.IFBName(b.Dev), IFB: true})
		}
	}
	pairs := o.pairsOf(eps)
	roleOf := map[string]string{} // a job's name to its host's role
	kinds := runners.Kinds()
	// A sampler runs once on a host, however many roles name it (cpu@server and
	// cpu@bottleneck on a server that is a bottleneck, the servers of several
	// pairs): two would write one series twice.
	sampled := map[string]bool{}
	var out []instance
	for _, j := range o.Plan.Jobs {
		type place struct {
			ep   *endpoint
			pair int // the pair whose target and peer it takes
		}
		var on []place
		perPair := false
		switch j.Host {
		case tests.RoleBottleneck:
			for _, h := range watched {
				on = append(on, place{endpointOf(eps, h), 0})
			}
		case tests.RoleAll:
			for _, ep := range eps { // one endpoint a host
				on = append(on, place{ep, 0})
			}
		default:
			perPair = !kinds[j.Kind].Sampler
			for k, p := range pairs {
				on = append(on, place{p.role(j.Host), k})
			}
		}
		roleOf[j.Name] = j.Host
		peer := j.Target
		if j.Connect != "" {
			peer = roleOf[j.Connect]
		}
		at := start.Add(time.Duration(j.Start.Eval(timing) * float64(time.Second)))
		for _, pl := range on {
			ep, pe := pl.ep, pairs[pl.pair]
			key := j.Kind + "\x00" + ep.host.Name
			if kinds[j.Kind].Sampler && sampled[key] {
				continue
			}
			sampled[key] = true
			pair := ""
			if perPair {
				pair = pairLabel(pl.pair, len(pairs))
			}
			in := instance{job: j, name: instanceName(j.Name, pair), pair: pair, pairIndex: pl.pair, ep: ep, at: at, spec: runners.JobSpec{Kind: j.Kind, Start: agentTime(ep, at),
				Step: o.Step.Seconds(), Token: token, Host: ep.host.Name, Devs: devs[ep.host.Name], Pair: pair, Params: j.Params}}
			if !j.Background {
				in.spec.Duration = j.Duration.Eval(timing)
			}
			if t := pe.role(j.Target); t != nil {
				in.spec.Target = t.host.TestIP
			}
			if pep := pe.role(peer); pep != nil {
				in.spec.PeerOffset = pep.info.ClockOffset - ep.info.ClockOffset
				in.spec.PeerOffsetErr = (pep.info.ClockRTT + ep.info.ClockRTT) / 2
			}
			for _, se := range j.Series {
				from := in.ep
				switch se.Host {
				case "":
					se.Host = j.Host
				case datafile.HostPeer:
					se.Host = peer
					if pep := pe.role(peer); pep != nil {
						from = pep
					}
				}
				if se.Target == "" && j.Connect == "" && in.spec.Target != "" {
					se.Target = in.spec.Target
				}
				se.Name, se.Pair = datafile.PairName(se.Name, pair), pair
				if in.spec.Duration > 0 {
					se.Start, se.Duration = j.Start.Eval(timing), in.spec.Duration
				}
				in.series = append(in.series, se)
				in.from = append(in.from, from)
			}
			out = append(out, in)
		}
	}
	// A listener learns what its clients (of its pair) will ask of it, so that
	// it answers nothing else from the test network.
	at := map[string]int{}
	for i, in := range out {
		at[in.name] = i
	}
	for _, in := range out {
		if in.job.Connect == "" {
			continue
		}
		if i, ok := at[instanceName(in.job.Connect, in.pair)]; ok {
			out[i].spec.Clients = append(out[i].spec.Clients, runners.Client{Kind: in.job.Kind, Duration: in.spec.Duration, Params: in.spec.Params})
		}
	}
	return out
}

func (o *Options) drive(ctx context.Context, eps []*endpoint, w *datafile.Writer, rec *recorder, jobs *jobSet, setup applied, prepared func() error) error {
	pairs := o.pairsOf(eps)
	server := pairs[0].server
	p := o.Plan
	length, delay, step := o.Length.Seconds(), o.Delay.Seconds(), o.Step.Seconds()
	total := length + 2*delay
	// The devices' statistics before the run are read first, while the jobs'
	// prepares end: in an emulated guest each tc costs tens of ms, which would
	// come out of the jobs' start lead.
	preRead := make(chan devStates, 1)
	go func() { preRead <- o.readStates(ctx, eps, "pre") }()
	err := prepared()
	pre := <-preRead
	if err != nil {
		return err
	}
	// Every job starts from one instant, t0, picked a little ahead and sent to each
	// agent on its own clock: ping and the samplers start at t0, the streams at
	// t0+delay, so every series starts on the grid (the header's t0).
	lead := o.startLead(eps)
	start := time.Now().Add(lead).Round(time.Millisecond)
	meta := datafile.Metadata{
		Test: p.Test, Title: o.Title, Parameters: p.Parameters, StartTime: start, T0: datafile.Unix(start),
		Length: length, Delay: delay, Step: step, TotalLength: total, Family: datafile.FamilyOf(server.host.TestIP),
		ToolVersion: o.Version, CommandLine: o.CommandLine, Setup: setup.setup, Path: setup.path, Note: o.Note,
		Aggregates: p.Aggregates, Rates: o.configuredRates(eps),
	}
	for _, ep := range eps {
		meta.Hosts = append(meta.Hosts, ep.info)
	}
	if err := w.Header(meta); err != nil {
		return err
	}
	for _, ep := range eps {
		for _, msg := range ep.warnings {
			w.Event(datafile.Event{T: datafile.Unix(start), Host: ep.host.Name, Level: "warning", Message: msg})
		}
	}
	for _, e := range setup.warnings {
		e.T = datafile.Unix(start)
		w.Event(e)
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	ins := o.instances(eps, start, hex.EncodeToString(tok))
	lv := &live{t0: start, delay: delay, length: length, total: total, tcp: map[string]float64{}, ping: math.NaN()}
	rec.mu.Lock()
	for _, in := range ins {
		rec.jobsOn[jobOn(in.ep.label, rec.prefix+in.name)] = true
		for i, se := range in.series {
			// Samples may come before the declaration, which waits for the job's
			// start to say where its times come from.
			owners, planned := rec.owners[se.Name]
			if !planned {
				rec.series++
			}
			if from := in.from[i].label; !slices.Contains(owners, from) {
				rec.owners[se.Name] = append(owners, from)
			}
			switch c := datafile.Classify(se); {
			case c.Role == datafile.RoleFlow:
				lv.tcp[se.Name] = 0
			case c.Role == datafile.RoleProbe && lv.pingSeries == "":
				lv.pingSeries = se.Name
			}
		}
	}
	rec.live = lv
	rec.mu.Unlock()
	writeStates(w, pre)
	o.logf("running %s for %gs (%s), sampling every %gs from %gs before to %gs after", p.Test, length, p.Describe(), step, delay, delay)
	ports := map[string]int{}
	for _, in := range ins {
		spec := in.spec
		if in.job.Connect != "" {
			// The job it connects to is of the same pair.
			spec.Addr = net.JoinHostPort(pairs[in.pairIndex].role(o.jobRole(in.job.Connect)).host.TestIP, strconv.Itoa(ports[instanceName(in.job.Connect, in.pair)]))
		}
		m, err := jobs.start(ctx, in.ep, agent.Request{Op: agent.OpStart, Job: in.name, Start: &spec}, !in.job.Background)
		if err != nil {
			if ctx.Err() != nil {
				// Ctrl-C while the jobs start is the run interrupted, as later.
				return fmt.Errorf("run interrupted while starting job %s on %s: %w", in.name, in.ep.host.Name, context.Cause(ctx))
			}
			return fmt.Errorf("start job %s (%s) on %s: %w", in.name, in.job.Kind, in.ep.host.Name, err)
		}
		ports[in.name] = m.Port
		for _, se := range in.series {
			if m.Timestamps != "" {
				se.Timestamps = m.Timestamps
			}
			if err := w.AddSeries(se); err != nil {
				return err
			}
		}
		if m.Timestamps != "" {
			level := "info"
			if m.Timestamps != datafile.StampsKernel {
				level = "warning"
			}
			o.logf("%s timestamps on %s: %s", in.name, in.ep.label, m.Message)
			w.Event(datafile.Event{T: datafile.Unix(time.Now()), Host: in.ep.host.Name, Level: level, Message: in.name + " timestamps: " + m.Message})
		}
	}
	if late := time.Since(start); late > 0 {
		msg := fmt.Sprintf("the jobs were started %.0f ms after t0 (the controller allowed %.0f ms): their first samples are late", late.Seconds()*1e3, lead.Seconds()*1e3)
		o.logf("warning: %s", msg)
		w.Event(datafile.Event{T: datafile.Unix(time.Now()), Level: "warning", Message: msg})
	}
	// The controller's own record of when each job started, on its clock, at the
	// instant the agents were given: what tests and readers check timing against.
	awaited := []instance{}
	for _, in := range ins {
		if !in.job.Background {
			awaited = append(awaited, in)
		}
	}
	sort.SliceStable(awaited, func(i, k int) bool { return awaited[i].at.Before(awaited[k].at) })
	for _, in := range awaited {
		if err := o.wait(ctx, eps, rec, jobs, in.at); err != nil {
			return err
		}
		now := time.Now()
		o.logf("%s started %.3fs after t0", in.name, now.Sub(start).Seconds())
		w.Event(datafile.Event{T: datafile.Unix(now), Level: "info", Message: in.name + " started"})
	}
	return o.wait(ctx, eps, rec, jobs, time.Time{})
}

// configuredRates are the rates the bottleneck devices should drain at while
// they have a queue: the setup's shaper where it has one; where the run leaves
// the device's root qdisc as it found it (no setup, or one of ingress, path or
// BQL alone), that qdisc's shaper as found (the local lab's htb); else the
// inventory's rate for the device, else the link speed its kernel told at the
// run's start.
func (o *Options) configuredRates(eps []*endpoint) []datafile.DeviceRate {
	facts := map[string]map[string]string{}
	for _, ep := range eps {
		facts[ep.host.Name] = ep.info.Facts
	}
	rootAsFound := o.Setup == nil || o.Setup.Root == nil && o.Setup.MQ == nil
	var out []datafile.DeviceRate
	for _, b := range o.Inventory.Bottleneck {
		r := datafile.DeviceRate{Host: b.Host, Dev: b.Dev}
		f := facts[b.Host]
		r.Bits, r.Source = o.Setup.ShaperRate(false)
		if r.Bits == 0 && rootAsFound {
			r.Bits, r.Source = qdisc.FoundShaperRate(f["dev."+b.Dev+".qdiscs"], f["dev."+b.Dev+".classes"])
		}
		if r.Bits == 0 && b.Rate != "" {
			if v, err := tcrate.Parse(b.Rate); err == nil {
				r.Bits, r.Source = v, "inventory"
			}
		}
		if r.Bits == 0 {
			if mbit, err := strconv.ParseFloat(f["dev."+b.Dev+".speed"], 64); err == nil && mbit > 0 {
				r.Bits, r.Source = mbit*1e6, "link speed"
			}
		}
		if r.Bits > 0 {
			out = append(out, r)
		}
		if v, what := o.Setup.ShaperRate(true); v > 0 {
			out = append(out, datafile.DeviceRate{Host: b.Host, Dev: qdisc.IFBName(b.Dev), Bits: v, Source: what})
		}
	}
	return out
}

// prepareWithin bounds a job's prepare: loading and verifying the sojourn
// tracer's programs takes seconds of CPU in an emulated guest, not minutes.
const prepareWithin = 2 * time.Minute

// startPrepare has the agents prepare the run's jobs and returns what waits for
// that (each call returns the same error). The prepares go out at once, ahead of the
// hosts' facts, locks and setup, which they neither read nor change: the kernel
// verifying a tracer's programs and making its maps (a tenth of a second of CPU a
// host here, more in an emulated guest) overlaps them. A setup that makes a device a job is prepared for
// (ingress's IFB) has them wait until it is made: they go out when first waited for.
func (o *Options) startPrepare(ctx context.Context, eps []*endpoint, jobs *jobSet) func() error {
	if o.Setup != nil && o.Setup.Ingress != nil {
		return sync.OnceValue(func() error { return o.prepare(ctx, eps, jobs) })
	}
	done := make(chan error, 1)
	go func() { done <- o.prepare(ctx, eps, jobs) }()
	return sync.OnceValue(func() error { return <-done })
}

// prepare has every agent do the slow part of its jobs' starts (runners.Kind's
// Prepare) before t0 is picked, all hosts at once, and waits for them: what the
// kernel spends loading a tracer is then neither late jobs nor delay in the run's
// idle phase. A host whose prepare fails fails the run, as its start would.
func (o *Options) prepare(ctx context.Context, eps []*endpoint, jobs *jobSet) error {
	kinds := runners.Kinds()
	var ins []instance
	for _, in := range o.instances(eps, time.Time{}, "") {
		if kinds[in.job.Kind].Prepare != nil {
			ins = append(ins, in)
		}
	}
	errs := make([]error, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			if err := jobs.prepare(ctx, in.ep, agent.Request{Op: agent.OpPrepare, Job: in.name, Start: &in.spec}); err != nil {
				errs[i] = fmt.Errorf("prepare job %s (%s) on %s: %w", in.name, in.job.Kind, in.ep.host.Name, err)
				return
			}
			o.logf("%s prepared on %s in %.1fs", in.name, in.ep.label, time.Since(began).Seconds())
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("run interrupted while preparing its jobs: %w", context.Cause(ctx))
	}
	return errors.Join(errs...)
}

// jobRole is the host role of the plan's job of that name.
func (o *Options) jobRole(name string) string {
	for _, j := range o.Plan.Jobs {
		if j.Name == name {
			return j.Host
		}
	}
	return ""
}

// agentTime is controller time t on ep's agent's clock, in a spec's Unix seconds.
func agentTime(ep *endpoint, t time.Time) float64 {
	return datafile.Unix(t) + ep.info.ClockOffset
}

// startLead is how far ahead t0 is put: past what comes between the header and the
// last job's start, which is one request per job on each host it runs on, one after
// another (a client's needs its server's port), each a round trip to its agent and
// the job's start there. Each request is allowed its host's round trip and the
// longest start that host's agent took in this session's earlier runs, or
// firstStart before any; the whole, 25 ms more for the header and the controller's
// own scheduling. Every run waits out its lead before t0 (a flat 200 ms more than
// that was a third of a run's fixed cost). A job whose start comes late starts at
// once, and the run says so.
func (o *Options) startLead(eps []*endpoint) time.Duration {
	lead := 25 * time.Millisecond
	for _, in := range o.instances(eps, time.Time{}, "") {
		cost := in.ep.startTook
		if cost == 0 {
			cost = firstStart
		}
		lead += time.Duration(in.ep.info.ClockRTT*float64(time.Second)) + cost
	}
	return lead
}

// firstStart is the time a job's start is allowed on an agent that has started
// none yet: a local lab's take 1-2 ms, round trip included.
const firstStart = 5 * time.Millisecond

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
	case <-ep.proc.exited():
		werr := ep.proc.wait()
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
	if lost := ep.conn.lost(); lost != nil {
		err = fmt.Errorf("%w: %w", err, lost)
	}
	if t := strings.TrimSpace(ep.proc.stderrTail()); t != "" {
		err = fmt.Errorf("%w; its stderr: %s", err, t)
	}
	return err
}

// closeWithin bounds how long an agent gets to stop its runners and exit.
const closeWithin = 3 * time.Second

func (ep *endpoint) close() {
	if ep.proc != nil {
		ep.proc.stdin().Close()
		select {
		case <-ep.proc.exited():
		case <-time.After(closeWithin):
		}
		ep.proc.close()
	}
	if ep.conn != nil {
		ep.conn.close()
	}
	ep.conn, ep.proc, ep.agent = nil, nil, nil
}
