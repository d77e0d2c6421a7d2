package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// Handler receives what an agent sends besides replies.
type Handler interface {
	// Samples arrive with times already on the controller's clock.
	Samples(host string, batch map[string][]datafile.Sample)
	JobDone(host, job string, err error)
	Log(host, msg string)
	// Alert is a warning for the person running the test (TypeAlert).
	Alert(host, msg string)
	// Series declares a series a job found as it ran, before its first samples.
	Series(host, job string, s datafile.Series)
}

// Client is the controller's handle on one running agent.
type Client struct {
	host    string // names the host in every error
	w       io.Writer
	wm      sync.Mutex
	handler Handler

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan Message
	offset  time.Duration // agent clock minus controller clock
	dead    chan struct{}
	deadErr error
}

// NewClient starts reading the agent's messages from r; requests go to w. host names
// the agent in errors ("agent on host server (root@10.0.0.2)").
func NewClient(host string, r io.Reader, w io.Writer, h Handler) *Client {
	c := &Client{host: host, w: w, handler: h, pending: map[int64]chan Message{}, dead: make(chan struct{})}
	go c.read(r)
	return c
}

// Host is the name the client reports in errors.
func (c *Client) Host() string { return c.host }

// maxLine bounds one message from an agent: the largest an agent sends is an exec
// reply of remote.MaxOutput of stdout and of stderr (about 11 MB as base64) or a
// batch of MaxBatchSamples (about 11 MB). A longer line is no agent's, and ends the
// client rather than be read into memory.
const maxLine = 64 << 20

func (c *Client) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var err error
	for sc.Scan() {
		c.mu.Lock()
		off := c.offset.Seconds()
		c.mu.Unlock()
		m, derr := DecodeMessage(sc.Bytes(), off)
		if derr != nil {
			err = fmt.Errorf("garbled message: %w", derr)
			break
		}
		c.dispatch(m)
	}
	if err == nil {
		err = sc.Err()
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("a message longer than the %d MiB an agent sends: %w", maxLine>>20, err)
		}
	}
	if err == nil {
		err = errors.New("connection closed")
	}
	c.mu.Lock()
	c.deadErr = fmt.Errorf("agent on host %s stopped: %w", c.host, err)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.dead)
}

func (c *Client) dispatch(m Message) {
	// An agent's error becomes a job's or a run's error, kept in its data file and
	// printed: it is cut as an event's message is.
	m.Error = datafile.Truncate(m.Error, datafile.MaxText)
	switch m.Type {
	case TypeReply:
		c.mu.Lock()
		ch := c.pending[m.ID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case TypeBatch:
		if m.Dropped > 0 {
			// An agent splits its batches below the bound: this one is broken or
			// hostile, and its batch is refused, not its run.
			c.handler.Log(c.host, fmt.Sprintf("a batch of about %d samples was dropped unread: an agent sends at most %d a batch", m.Dropped, MaxBatchSamples))
			return
		}
		// Times are on the controller's clock already (DecodeMessage).
		c.handler.Samples(c.host, m.Batch)
	case TypeDone:
		var err error
		if m.Error != "" {
			err = fmt.Errorf("host %s: job %s: %s", c.host, m.Job, m.Error)
		}
		c.handler.JobDone(c.host, m.Job, err)
	case TypeLog:
		c.handler.Log(c.host, m.Message)
	case TypeAlert:
		c.handler.Alert(c.host, m.Message)
	case TypeSeries:
		if m.Series != nil {
			c.handler.Series(c.host, m.Job, *m.Series)
		}
	}
}

// Dead is closed when the agent's output ends; Err then says why.
func (c *Client) Dead() <-chan struct{} { return c.dead }

// Err is why the agent stopped, or nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadErr
}

// Call sends a request and waits for its reply.
func (c *Client) Call(ctx context.Context, req Request) (Message, error) {
	ch := make(chan Message, 1)
	c.mu.Lock()
	if c.deadErr != nil {
		c.mu.Unlock()
		return Message{}, c.deadErr
	}
	c.nextID++
	req.ID = c.nextID
	c.pending[req.ID] = ch
	c.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		return Message{}, fmt.Errorf("encode %s request: %w", req.Op, err)
	}
	c.wm.Lock()
	_, err = c.w.Write(append(line, '\n'))
	c.wm.Unlock()
	if err != nil {
		return Message{}, fmt.Errorf("send %s to agent on host %s: %w", req.Op, c.host, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return Message{}, c.Err()
		}
		if m.Error != "" {
			return m, fmt.Errorf("host %s: %s: %s", c.host, req.Op, m.Error)
		}
		return m, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return Message{}, fmt.Errorf("%s on host %s: %w", req.Op, c.host, ctx.Err())
	}
}

// Output runs cmd (a shell command line, quoted with remote.Command) on the agent's
// host with stdin, within timeout, and returns its stdout; a non-zero exit is an error
// carrying its stderr. It is what remote.Conn.Output is, without a new SSH session.
func (c *Client) Output(ctx context.Context, cmd string, stdin io.Reader, timeout time.Duration) ([]byte, error) {
	spec := &ExecSpec{Cmd: cmd, Timeout: timeout.Seconds()}
	if stdin != nil {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("host %s: %s: read its input: %w", c.host, cmd, err)
		}
		spec.Stdin = b
	}
	if timeout > 0 {
		// The agent kills the command at timeout; a second more for its answer, and
		// a host that answers nothing (frozen) fails here, not never.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+time.Second)
		defer cancel()
	}
	m, err := c.Call(ctx, Request{Op: OpExec, Exec: spec})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("host %s: %q got no answer within %v (is the host frozen?)", c.host, cmd, timeout)
		}
		return nil, err
	}
	r := m.Exec
	if r == nil {
		return nil, fmt.Errorf("host %s: %s: the agent answered without a result", c.host, cmd)
	}
	if r.Killed {
		return r.Stdout, fmt.Errorf("host %s: %q did not finish within %v", c.host, cmd, timeout)
	}
	if r.Exit != 0 {
		msg := datafile.Truncate(strings.TrimSpace(string(r.Stderr)), datafile.MaxText)
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", r.Exit)
		}
		return r.Stdout, fmt.Errorf("host %s: %s: %s", c.host, cmd, msg)
	}
	return r.Stdout, nil
}

// Hello asks the agent who it is and checks it speaks this protocol.
func (c *Client) Hello(ctx context.Context) (*Hello, error) {
	m, err := c.Call(ctx, Request{Op: OpHello})
	if err != nil {
		return nil, err
	}
	if m.Hello == nil || m.Hello.Protocol != ProtocolVersion {
		return nil, fmt.Errorf("agent on host %s speaks another protocol version: use the same bloatbench build on both ends", c.host)
	}
	return m.Hello, nil
}

// Facts reads the host's facts, with devs its bottleneck devices (OpFacts).
func (c *Client) Facts(ctx context.Context, devs []string) (map[string]string, error) {
	m, err := c.Call(ctx, Request{Op: OpFacts, Devs: devs})
	if err != nil {
		return nil, err
	}
	return m.Facts, nil
}

// SyncClock estimates the agent's clock offset from rounds of clock requests: the
// round with the shortest round trip bounds the error best (NTP's reasoning). Later
// sample times are corrected by it. It returns the offset and that round trip.
func (c *Client) SyncClock(ctx context.Context, rounds int) (offset, rtt time.Duration, err error) {
	type probe struct{ off, rtt time.Duration }
	var probes []probe
	for i := 0; i < rounds; i++ {
		sent := time.Now()
		m, err := c.Call(ctx, Request{Op: OpClock})
		if err != nil {
			return 0, 0, err
		}
		got := time.Now()
		mid := sent.Add(got.Sub(sent) / 2)
		probes = append(probes, probe{off: time.Unix(0, m.Clock).Sub(mid), rtt: got.Sub(sent)})
	}
	sort.Slice(probes, func(i, j int) bool { return probes[i].rtt < probes[j].rtt })
	c.mu.Lock()
	c.offset = probes[0].off
	c.mu.Unlock()
	return probes[0].off, probes[0].rtt, nil
}
