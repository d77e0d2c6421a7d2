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
	proc  *remote.Process
	agent *agent.Client
	hello *agent.Hello
	info  datafile.Host
	tail  *tailBuffer
}

// recorder writes what agents send into the data file.
type recorder struct {
	w    *datafile.Writer
	done chan jobEnd
	mu   sync.Mutex
	err  error
	// known series; qdisc and BQL statistics are declared when first seen, since
	// which ones a kernel prints depends on the qdisc kinds.
	known map[string]bool
	// dead receives each endpoint whose agent stops.
	dead chan *endpoint
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

type jobEnd struct {
	host, job string
	err       error
}

func (r *recorder) Samples(host string, batch map[string][]datafile.Sample) {
	for series, ss := range batch {
		err := r.declare(series)
		if err == nil {
			err = r.w.Append(series, ss)
		}
		if err != nil {
			r.mu.Lock()
			if r.err == nil {
				r.err = err
			}
			r.mu.Unlock()
		}
	}
}

func (r *recorder) JobDone(host, job string, err error) { r.done <- jobEnd{host, job, err} }

func (r *recorder) Log(host, msg string) {
	r.w.Event(datafile.Event{T: datafile.Unix(time.Now()), Host: host, Level: "warning", Message: msg})
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Run runs the test and returns the data file's path. The file is kept whatever
// happens once it exists; a run that fails is recorded as incomplete with its error.
func Run(ctx context.Context, o Options) (path string, err error) {
	if err := o.Check(); err != nil {
		return "", err
	}
	inv := o.Inventory
	eps := []*endpoint{{role: "client", host: inv.Role("client")}, {role: "server", host: inv.Role("server")}}
	for _, b := range inv.Bottleneck {
		if endpointOf(eps, b.Host) == nil {
			eps = append(eps, &endpoint{role: "bottleneck", host: inv.Hosts[b.Host]})
		}
	}
	defer func() {
		for _, ep := range eps {
			ep.close()
		}
	}()
	// Agents only send samples once jobs start, after the file exists. Every job's end
	// fits in done, so an agent's reader never blocks on one nobody waits for (at most
	// listen, streams, ping and one sampler per host).
	rec := &recorder{done: make(chan jobEnd, 3+len(eps)), known: map[string]bool{}}
	// Connect to every host before creating anything: one that refuses us costs no file.
	// Not errgroup.WithContext: its context ends with Wait, and the agents' sessions
	// must outlive it.
	var g errgroup.Group
	for _, ep := range eps {
		g.Go(func() error {
			if err := o.connect(ctx, ep); err != nil {
				return err
			}
			return o.startAgent(ctx, ep, rec)
		})
	}
	if err := g.Wait(); err != nil {
		return "", err
	}
	rec.dead = make(chan *endpoint, len(eps))
	for _, ep := range eps {
		go func() {
			<-ep.agent.Dead()
			rec.dead <- ep
		}()
	}
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
	runErr := o.drive(ctx, eps, w, rec, start, setup)
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

func (o *Options) connect(ctx context.Context, ep *endpoint) error {
	ep.label = fmt.Sprintf("%s (%s)", ep.host.Name, ep.host.SSH)
	o.logf("connecting to %s", ep.label)
	conn, err := o.Dialer.Dial(ctx, ep.host)
	if err != nil {
		return err
	}
	ep.conn = conn
	path, err := conn.EnsureAgent(ctx, o.Self, o.SelfHash, ep.host.AgentPath)
	if err != nil {
		return err
	}
	// The agent lives as long as this session: when the controller goes, its stdin
	// closes and it stops every runner.
	proc, err := conn.Start(ctx, "exec "+remote.Quote(path)+" agent")
	if err != nil {
		return err
	}
	ep.proc = proc
	ep.tail = &tailBuffer{max: 4096}
	go io.Copy(ep.tail, proc.Stderr)
	ep.info = datafile.Host{Role: ep.role, Name: ep.host.Name, SSH: ep.host.SSH, TestIP: ep.host.TestIP}
	return nil
}

func (o *Options) startAgent(ctx context.Context, ep *endpoint, h agent.Handler) error {
	ep.agent = agent.NewClient(ep.label, ep.proc.Stdout, ep.proc.Stdin, h)
	hello, err := ep.agent.Hello(ctx)
	if err != nil {
		return ep.deathErr(err)
	}
	ep.hello = hello
	off, rtt, err := ep.agent.SyncClock(ctx, 7)
	if err != nil {
		return ep.deathErr(err)
	}
	ep.info.Hostname, ep.info.Kernel = hello.Hostname, hello.Kernel
	ep.info.ClockOffset, ep.info.ClockRTT = off.Seconds(), rtt.Seconds()
	o.logf("agent on %s: %s, kernel %s, clock offset %+.3f ms (±%.3f ms)", ep.label, hello.Hostname, hello.Kernel,
		off.Seconds()*1e3, rtt.Seconds()*1e3/2)
	return nil
}

func (o *Options) drive(ctx context.Context, eps []*endpoint, w *datafile.Writer, rec *recorder, start time.Time, setup *datafile.Setup) error {
	client, server := eps[0], eps[1]
	p := o.Plan
	length, delay, step := o.Length.Seconds(), o.Delay.Seconds(), o.Step.Seconds()
	total := length + 2*delay
	meta := datafile.Metadata{
		Test: p.Test, Title: o.Title, Parameters: p.Parameters, StartTime: start, T0: datafile.Unix(start),
		Length: length, Delay: delay, Step: step, TotalLength: total,
		ToolVersion: o.Version, CommandLine: o.CommandLine, Setup: setup,
	}
	for _, ep := range eps {
		meta.Hosts = append(meta.Hosts, ep.info)
	}
	var flows []runners.StreamFlow
	series := []datafile.Series{}
	if p.Ping {
		series = append(series, datafile.Series{Name: PingSeries, Kind: datafile.KindPing, Units: "ms", Host: "client", Target: server.host.TestIP})
	}
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
	for _, s := range series {
		rec.known[s.Name] = true
		if err := w.AddSeries(s); err != nil {
			return err
		}
	}
	o.recordStates(ctx, eps, w, "pre")
	if err := o.startSampling(ctx, eps, step); err != nil {
		return err
	}

	tok := make([]byte, 16)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	running := map[string]*endpoint{}
	if len(flows) > 0 {
		m, err := server.agent.Call(ctx, agent.Request{Op: agent.OpListen, Job: "listen",
			Listen: &runners.ListenSpec{Addr: server.host.TestIP, Token: token, Step: step}})
		if err != nil {
			return server.deathErr(err)
		}
		defer func() {
			// The listener ends with the run, however the run ends.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			server.agent.Call(sctx, agent.Request{Op: agent.OpStop, Job: "listen"})
		}()
		flowsAddr := net.JoinHostPort(server.host.TestIP, strconv.Itoa(m.Port))
		startStreams := func() error {
			_, err := client.agent.Call(ctx, agent.Request{Op: agent.OpStreams, Job: "streams",
				Streams: &runners.StreamsSpec{Addr: flowsAddr, Token: token, Step: step, Duration: length, Flows: flows}})
			if err != nil {
				return client.deathErr(err)
			}
			running["streams"] = client
			return nil
		}
		o.logf("running %s for %gs, %d streams, ping every %gs from %gs before to %gs after", p.Test, length, len(flows), step, delay, delay)
		if p.Ping {
			if err := o.startPing(ctx, client, server, total, step); err != nil {
				return err
			}
			running["ping"] = client
		}
		if err := o.wait(ctx, eps, rec, running, start.Add(o.Delay)); err != nil {
			return err
		}
		if err := startStreams(); err != nil {
			return err
		}
	} else if p.Ping {
		if err := o.startPing(ctx, client, server, total, step); err != nil {
			return err
		}
		running["ping"] = client
	}
	return o.wait(ctx, eps, rec, running, time.Time{})
}

func (o *Options) startPing(ctx context.Context, client, server *endpoint, total, step float64) error {
	_, err := client.agent.Call(ctx, agent.Request{Op: agent.OpPing, Job: "ping",
		Ping: &runners.PingSpec{Series: PingSeries, Target: server.host.TestIP, Interval: step, Duration: total}})
	return client.deathErr(err)
}

// wait waits until the time until (or, when until is zero, until the running jobs
// have ended), failing as soon as an agent dies, a job fails or ctx ends.
func (o *Options) wait(ctx context.Context, eps []*endpoint, rec *recorder, running map[string]*endpoint, until time.Time) error {
	var timer <-chan time.Time
	if !until.IsZero() {
		timer = time.After(time.Until(until)) // at once when until has passed
	}
	for {
		if until.IsZero() && len(running) == 0 {
			return nil
		}
		select {
		case <-timer:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("run interrupted: %w", context.Cause(ctx))
		case ep := <-rec.dead:
			return ep.deathErr(ep.agent.Err())
		case e := <-rec.done:
			delete(running, e.job)
			if e.err != nil {
				// A stream fails when the far agent dies: name the cause, not the symptom.
				select {
				case ep := <-rec.dead:
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
	if t := strings.TrimSpace(ep.tail.String()); t != "" {
		err = fmt.Errorf("%w; its stderr: %s", err, t)
	}
	return err
}

func (ep *endpoint) close() {
	if ep.proc != nil {
		ep.proc.Stdin.Close()
		select {
		case <-ep.proc.Exited():
		case <-time.After(5 * time.Second):
		}
		ep.proc.Close()
	}
	if ep.conn != nil {
		ep.conn.Close()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
