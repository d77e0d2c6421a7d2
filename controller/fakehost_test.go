package controller

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/remote"
)

// fakeHosts are a test's hosts. Each dial gives a new connection whose agent is the
// real agent.Server, run in the test's process over pipes: the controller's side of
// the protocol is the one it speaks to real hosts, only SSH is left out. Every host
// is this machine, so its jobs bind and ping the test IPs the inventory gives.
type fakeHosts struct {
	// keepalive is how long a frozen agent's connection lasts before it is closed
	// as lost, as remote.Conn's keepalive closes a frozen host's; 0 keeps it open.
	keepalive time.Duration
	// bottlenecks are fake devices by host name (faketc_test.go): that host's
	// agent runs its commands on its fake, the others' with sh as the real agent
	// does. Set before the first dial, and only read after.
	bottlenecks map[string]*fakeBottleneck

	mu    sync.Mutex
	conns map[string][]*fakeConn
}

func newFakeHosts() *fakeHosts { return &fakeHosts{conns: map[string][]*fakeConn{}} }

// dial is Options.dial.
func (f *fakeHosts) dial(ctx context.Context, h *inventory.Host) (hostConn, error) {
	c := &fakeConn{hosts: f, name: h.Name}
	f.mu.Lock()
	f.conns[h.Name] = append(f.conns[h.Name], c)
	f.mu.Unlock()
	return c, nil
}

// agent is the latest agent started on host, or nil.
func (f *fakeHosts) agent(host string) *fakeAgent {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.conns[host]) - 1; i >= 0; i-- {
		c := f.conns[host][i]
		c.mu.Lock()
		n := len(c.agents)
		var a *fakeAgent
		if n > 0 {
			a = c.agents[n-1]
		}
		c.mu.Unlock()
		if a != nil {
			return a
		}
	}
	return nil
}

// agents are every agent started on any host.
func (f *fakeHosts) agents() []*fakeAgent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []*fakeAgent
	for _, cs := range f.conns {
		for _, c := range cs {
			c.mu.Lock()
			all = append(all, c.agents...)
			c.mu.Unlock()
		}
	}
	return all
}

// fakeConn is a hostConn to one fake host.
type fakeConn struct {
	hosts *fakeHosts
	name  string

	mu      sync.Mutex
	agents  []*fakeAgent
	lostErr error
	closed  bool
}

func (c *fakeConn) startAgent(ctx context.Context, o remote.AgentOptions) (agentProc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("host %s: open an SSH session: the connection is closed", c.name)
	}
	a := startFakeAgent(c, o.Sudo, c.hosts.bottlenecks[c.name])
	c.agents = append(c.agents, a)
	return a, nil
}

func (c *fakeConn) lost() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lostErr
}

// close ends every session of the connection: their agents die.
func (c *fakeConn) close() error {
	c.mu.Lock()
	c.closed = true
	agents := slices.Clone(c.agents)
	c.mu.Unlock()
	for _, a := range agents {
		a.kill("")
	}
	return nil
}

// lose closes the connection as remote.Conn's keepalive does when a host stops
// answering, with its words.
func (c *fakeConn) lose(after time.Duration) {
	c.mu.Lock()
	c.lostErr = fmt.Errorf("host %s answered no SSH keepalive for %v (frozen, or its management link is down)", c.name, after)
	c.mu.Unlock()
	c.close()
}

func (c *fakeConn) user() string                  { return "tester" }
func (c *fakeConn) addr() string                  { return c.name + ".invalid:22" }
func (c *fakeConn) commandTimeout() time.Duration { return 5 * time.Second }

// errFakeKilled is how a fake agent that was killed exited.
var errFakeKilled = errors.New("killed")

// fakeAgent is an agent.Server run in the test's process. Between it and the
// controller's pipes two relays pass the protocol's lines, so that a test can freeze
// the agent (the relays drop what passes, as a hung host answers nothing) and so
// that they can tell which jobs the agent runs.
type fakeAgent struct {
	conn *fakeConn
	sudo bool

	// The controller writes reqW and reads msgR; the server reads sReqR and writes
	// sMsgW; the relays copy reqR to sReqW and sMsgR to msgW.
	reqR, sReqR, sMsgR, msgR *io.PipeReader
	reqW, sReqW, sMsgW, msgW *io.PipeWriter

	frozen atomic.Bool
	done   chan struct{}

	mu      sync.Mutex
	exitErr error
	stderr  string
	// starting maps a start request's ID to its job until the reply; running are
	// the jobs started and not yet reported done.
	starting map[int64]string
	running  map[string]bool
}

// startFakeAgent starts an agent on c's host, whose commands run on b (nil: with sh).
func startFakeAgent(c *fakeConn, sudo bool, b *fakeBottleneck) *fakeAgent {
	a := &fakeAgent{conn: c, sudo: sudo, done: make(chan struct{}), starting: map[int64]string{}, running: map[string]bool{}}
	a.reqR, a.reqW = io.Pipe()
	a.sReqR, a.sReqW = io.Pipe()
	a.sMsgR, a.sMsgW = io.Pipe()
	a.msgR, a.msgW = io.Pipe()
	go a.relayIn()
	go a.relayOut()
	srv := &agent.Server{Version: "test"}
	if b != nil {
		srv.Exec = b.exec
	}
	go func() {
		// The agent outlives the start's context, as the real one's session does.
		err := srv.Serve(context.Background(), a.sReqR, a.sMsgW)
		// Requests after the end fail instead of blocking, and the relay passes
		// the end of the output on.
		a.sReqR.Close()
		a.sMsgW.Close()
		a.mu.Lock()
		if a.exitErr == nil {
			a.exitErr = err
		}
		a.mu.Unlock()
		close(a.done)
	}()
	return a
}

// relayIn passes the controller's requests to the server; a frozen agent reads
// them (a session's window takes them) and never acts on them, nor on the end of
// its input.
func (a *fakeAgent) relayIn() {
	br := bufio.NewReader(a.reqR)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && !a.frozen.Load() {
			var req agent.Request
			if json.Unmarshal(line, &req) == nil && req.Op == agent.OpStart {
				a.mu.Lock()
				a.starting[req.ID] = req.Job
				a.mu.Unlock()
			}
			a.sReqW.Write(line) // an error: the server has ended, and the request is lost as it would be
		}
		if err != nil {
			if !a.frozen.Load() {
				a.sReqW.Close()
			}
			return
		}
	}
}

// relayOut passes the server's messages to the controller, noting which jobs run;
// a frozen agent's are dropped.
func (a *fakeAgent) relayOut() {
	br := bufio.NewReader(a.sMsgR)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && !a.frozen.Load() {
			var m agent.Message
			if json.Unmarshal(line, &m) == nil {
				a.mu.Lock()
				switch m.Type {
				case agent.TypeReply:
					if job, ok := a.starting[m.ID]; ok {
						delete(a.starting, m.ID)
						if m.Error == "" {
							a.running[job] = true
						}
					}
				case agent.TypeDone:
					delete(a.running, m.Job)
				}
				a.mu.Unlock()
			}
			a.msgW.Write(line) // an error: the agent was killed, and its output is cut
		}
		if err != nil {
			a.msgW.Close()
			return
		}
	}
}

// kill ends the agent abruptly, as a process killed on its host: its output ends
// at once, its jobs stop and requests to it fail. stderr is its last words.
func (a *fakeAgent) kill(stderr string) {
	a.mu.Lock()
	select {
	case <-a.done:
		a.mu.Unlock()
		return
	default:
	}
	if a.exitErr == nil {
		a.exitErr, a.stderr = errFakeKilled, stderr
	}
	a.mu.Unlock()
	// The output first: the controller hears of the death before the jobs it
	// talks to fail, as it does when a host's agent is killed.
	a.msgW.Close()
	a.reqR.CloseWithError(errFakeKilled)
	a.sReqW.CloseWithError(errFakeKilled)
	a.sMsgR.CloseWithError(errFakeKilled)
}

// freeze makes the agent stop answering: what it is sent, and what it sends, is
// lost. With the hosts' keepalive set, the connection is closed as lost after it.
func (a *fakeAgent) freeze() {
	a.frozen.Store(true)
	if k := a.conn.hosts.keepalive; k > 0 {
		time.AfterFunc(k, func() { a.conn.lose(k) })
	}
}

// jobs are the jobs the agent runs, as its protocol told.
func (a *fakeAgent) jobs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var js []string
	for j := range a.running {
		js = append(js, j)
	}
	slices.Sort(js)
	return js
}

func (a *fakeAgent) stdin() io.WriteCloser   { return a.reqW }
func (a *fakeAgent) stdout() io.Reader       { return a.msgR }
func (a *fakeAgent) exited() <-chan struct{} { return a.done }

func (a *fakeAgent) wait() error {
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exitErr
}

func (a *fakeAgent) stderrTail() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stderr
}

// close ends the agent's session: an agent still running is killed.
func (a *fakeAgent) close() error {
	a.kill("")
	return nil
}

func (a *fakeAgent) started() agentStart {
	return agentStart{path: "/fake/bloatbench", sudo: a.sudo}
}
