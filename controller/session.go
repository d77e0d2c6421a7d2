package controller

// The session room: one SSH login and one agent per host for every run of a
// command, the clocks' offsets, an agent started again when it died, and the
// hosts closed at the end.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sync/errgroup"
)

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
