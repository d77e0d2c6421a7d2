package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Keepalives: OpenSSH's ServerAliveInterval and ServerAliveCountMax. A host that
// answers none of KeepaliveCount requests in a row (frozen, or its link cut) has its
// connection closed, so every session on it ends instead of waiting forever.
const (
	KeepaliveInterval = 5 * time.Second
	KeepaliveCount    = 3
)

// keepalive runs until the connection ends.
func (c *Conn) keepalive(interval time.Duration, count int) {
	answered := make(chan error, 1)
	pending := false
	missed := 0
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case err := <-answered:
			pending = false
			if err != nil {
				return // the connection is gone; its sessions say so
			}
			missed = 0
		case <-t.C:
			if pending {
				missed++
				if missed >= count {
					c.lostMu.Lock()
					c.lost = fmt.Errorf("host %s answered no SSH keepalive for %v (frozen, or its management link is down)",
						c.Target.Name, time.Duration(count)*interval)
					c.lostMu.Unlock()
					c.Close()
					return
				}
				continue
			}
			pending = true
			go func() {
				// Any answer counts, a refusal too: the host is alive.
				_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
				answered <- err
			}()
		}
	}
}

// Lost says why the connection was closed by its keepalive, or is nil.
func (c *Conn) Lost() error {
	c.lostMu.Lock()
	defer c.lostMu.Unlock()
	return c.lost
}

// newSession opens a session within the connect timeout: a frozen host never answers
// the channel request, and x/crypto/ssh would wait for it forever.
func (c *Conn) newSession(ctx context.Context) (*ssh.Session, error) {
	type result struct {
		s   *ssh.Session
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := c.client.NewSession()
		ch <- result{s, err}
	}()
	abandon := func() {
		// Close the session if it ever opens.
		go func() {
			if r := <-ch; r.s != nil {
				r.s.Close()
			}
		}()
	}
	timer := time.NewTimer(c.Target.ConnectTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			if lost := c.Lost(); lost != nil {
				return nil, lost
			}
			return nil, fmt.Errorf("host %s: open an SSH session: %w", c.Target.Name, r.err)
		}
		return r.s, nil
	case <-timer.C:
		abandon()
		return nil, fmt.Errorf("host %s: opening an SSH session got no answer within %v (is the host frozen, or its sshd overloaded?)",
			c.Target.Name, c.Target.ConnectTimeout)
	case <-ctx.Done():
		abandon()
		return nil, fmt.Errorf("host %s: open an SSH session: %w", c.Target.Name, context.Cause(ctx))
	}
}

// Output runs a command (already quoted: build it with Command) with stdin, within
// the host's command timeout, and returns its stdout. A non-zero exit is an error
// carrying stderr. Each call is a session, so the host's login shell starts again:
// a run sends its commands through the agent instead.
func (c *Conn) Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Target.CommandTimeout)
	defer cancel()
	s, err := c.newSession(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	// A host decides how much a command prints: what is kept of it is bounded, and
	// the rest read and discarded, so that the command is never blocked on a full
	// pipe and finishes as it would.
	out, errb := NewHeadTail(MaxOutput), NewHeadTail(MaxOutput)
	s.Stdout, s.Stderr, s.Stdin = out, errb, stdin
	done := make(chan error, 1)
	go func() { done <- s.Run(cmd) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Signal(ssh.SIGKILL)
		s.Close()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("host %s: %q did not finish within %v", c.Target.Name, cmd, c.Target.CommandTimeout)
		}
		return nil, fmt.Errorf("host %s: %q interrupted: %w", c.Target.Name, cmd, ctx.Err())
	}
	if err != nil {
		// An error is read by a person: its head and tail say enough.
		short := NewHeadTail(maxErrorText)
		short.Write(bytes.TrimSpace(errb.Bytes()))
		msg := string(short.Bytes())
		if msg == "" {
			msg = err.Error()
		}
		return out.Bytes(), fmt.Errorf("host %s: %s: %s", c.Target.Name, cmd, msg)
	}
	return out.Bytes(), nil
}

// MaxOutput bounds what is kept of a command's stdout, and of its stderr, run over
// SSH or through the agent: a data file keeps at most datafile.MaxRaw (4 MiB) of a
// kernel's statistics, the largest output a run uses, so more than that is of use to
// no one, and a hostile or broken host printing without end must not fill the
// controller's memory.
const MaxOutput = 4 << 20

// maxErrorText bounds the stderr a failed command's error carries: a few screens.
const maxErrorText = 8 << 10

// HeadTail keeps the first and the last bytes written to it, up to a bound in all,
// and counts what it left out between them: the start of an output says what the
// command is, its end how it ended. Writes never fail, so a command writing into it
// is read to its end. It is safe for concurrent use.
type HeadTail struct {
	mu   sync.Mutex
	head []byte
	// tail is a ring of the latest bytes past the head: at is where the next byte
	// goes, and full says the ring has wrapped.
	tail []byte
	at   int
	full bool
	// headMax and tailMax are the head's bound and the ring's size. Both grow as
	// bytes come, not at the start: an agent makes two for every command it runs,
	// and zeroing MBs for a tc that prints a line was most of its cost.
	headMax, tailMax int
	// total is every byte written.
	total int64
}

// NewHeadTail keeps at most limit bytes (at least 2): the first half and the last.
func NewHeadTail(limit int) *HeadTail {
	limit = max(limit, 2)
	return &HeadTail{headMax: limit / 2, tailMax: limit - limit/2}
}

func (h *HeadTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	h.total += int64(n)
	if room := h.headMax - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if h.tail == nil {
		h.tail = make([]byte, h.tailMax)
	}
	if len(p) >= len(h.tail) {
		// Only the last ring's worth of p can stay.
		copy(h.tail, p[len(p)-len(h.tail):])
		h.at, h.full = 0, true
		return n, nil
	}
	for len(p) > 0 {
		k := copy(h.tail[h.at:], p)
		p = p[k:]
		if h.at += k; h.at == len(h.tail) {
			h.at, h.full = 0, true
		}
	}
	return n, nil
}

// Bytes is what was kept: everything written when it fits, else the head, a marker
// "[... N bytes left out]" on a line of its own, and the tail.
func (h *HeadTail) Bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	var tail []byte
	if h.full {
		tail = append(append(tail, h.tail[h.at:]...), h.tail[:h.at]...)
	} else {
		tail = h.tail[:h.at]
	}
	out := append([]byte(nil), h.head...)
	if left := h.total - int64(len(h.head)) - int64(len(tail)); left > 0 {
		out = fmt.Appendf(out, "\n[... %d bytes left out]\n", left)
	}
	return append(out, tail...)
}

// Len is how many bytes were written, kept or not.
func (h *HeadTail) Len() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Process is a long-running remote command with its pipes. Its stderr is kept, the
// last 4 KB of it, for the error that reports its end.
type Process struct {
	Stdin   io.WriteCloser
	Stdout  io.Reader
	s       *ssh.Session
	stderr  *tailBuffer
	exited  chan struct{}
	exitErr error
}

// Start runs a long-lived command; ending ctx closes its session.
func (c *Conn) Start(ctx context.Context, cmd string) (*Process, error) {
	s, err := c.newSession(ctx)
	if err != nil {
		return nil, err
	}
	p := &Process{s: s, stderr: &tailBuffer{max: 4096}}
	s.Stderr = p.stderr
	if p.Stdin, err = s.StdinPipe(); err == nil {
		p.Stdout, err = s.StdoutPipe()
	}
	if err == nil {
		err = s.Start(cmd)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("host %s: start %q: %w", c.Target.Name, cmd, err)
	}
	context.AfterFunc(ctx, func() { s.Close() })
	// ssh.Session.Wait answers once; every later caller would block forever.
	p.exited = make(chan struct{})
	go func() {
		p.exitErr = s.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Wait waits for the process to exit; any number of callers may wait.
func (p *Process) Wait() error {
	<-p.exited
	return p.exitErr
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Close ends the process's session.
func (p *Process) Close() error { return p.s.Close() }

// StderrTail is the last 4 KB the process wrote to stderr.
func (p *Process) StderrTail() string { return p.stderr.String() }

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
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
