package controller

import (
	"context"
	"io"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/remote"
)

// hostConn is what the controller asks of its connection to a host. The real one
// is an SSH connection (remote.Conn); a test gives a fake that runs the agent in
// this process, so that scheduling and failure handling are tested without SSH or
// root (pro-bing's packetConn pattern: a small interface, a fake that overrides
// what a test needs).
type hostConn interface {
	// startAgent starts the host's agent, whose protocol runs over its pipes.
	startAgent(ctx context.Context, o remote.AgentOptions) (agentProc, error)
	// lost says why the connection was closed under the controller (its keepalive
	// went unanswered), or is nil.
	lost() error
	close() error
	// user is the login user: whether the agent needs sudo depends on it.
	user() string
	// addr is the address the connection goes to (host:port): bottleneck locks are
	// keyed by it, so two inventories naming one machine differently still meet.
	addr() string
	// commandTimeout bounds a command on the host, and a request its agent answers
	// at once.
	commandTimeout() time.Duration
}

// agentProc is an agent started on a host.
type agentProc interface {
	// stdin carries requests; closing it tells the agent to stop every job and exit.
	stdin() io.WriteCloser
	// stdout carries the agent's messages.
	stdout() io.Reader
	// exited is closed when the agent has exited; wait then says how.
	exited() <-chan struct{}
	wait() error
	// stderrTail is the end of what the agent wrote on stderr: its last words.
	stderrTail() string
	// close ends the agent's session, whether or not the agent has exited.
	close() error
	// started says how the start went: where the agent is, whether it was copied
	// there, how slow the login shell was and whether it runs through sudo.
	started() agentStart
}

// agentStart is what starting an agent found.
type agentStart struct {
	path       string
	installed  bool
	shellStart time.Duration
	sudo       bool
}

// dialHost connects to h: through o.dial when a test set it, else over SSH with
// o.Dialer.
func (o *Options) dialHost(ctx context.Context, h *inventory.Host) (hostConn, error) {
	if o.dial != nil {
		return o.dial(ctx, h)
	}
	if h.Local() {
		c, err := newLocalConn(h, o.Self)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	c, err := o.Dialer.Dial(ctx, h)
	if err != nil {
		// Not a typed nil in an interface: the caller checks err alone.
		return nil, err
	}
	return sshConn{c}, nil
}

// sshConn is the real hostConn.
type sshConn struct{ c *remote.Conn }

func (s sshConn) startAgent(ctx context.Context, o remote.AgentOptions) (agentProc, error) {
	a, err := s.c.StartAgent(ctx, o)
	if err != nil {
		return nil, err
	}
	return sshAgent{a}, nil
}

func (s sshConn) lost() error                   { return s.c.Lost() }
func (s sshConn) close() error                  { return s.c.Close() }
func (s sshConn) user() string                  { return s.c.Target.User }
func (s sshConn) addr() string                  { return s.c.Target.Addr }
func (s sshConn) commandTimeout() time.Duration { return s.c.Target.CommandTimeout }

// sshAgent is the real agentProc: an agent in an SSH session.
type sshAgent struct{ a *remote.Agent }

func (s sshAgent) stdin() io.WriteCloser   { return s.a.Stdin }
func (s sshAgent) stdout() io.Reader       { return s.a.Stdout }
func (s sshAgent) exited() <-chan struct{} { return s.a.Exited() }
func (s sshAgent) wait() error             { return s.a.Wait() }
func (s sshAgent) stderrTail() string      { return s.a.StderrTail() }
func (s sshAgent) close() error            { return s.a.Close() }
func (s sshAgent) started() agentStart {
	return agentStart{path: s.a.Path, installed: s.a.Installed, shellStart: s.a.ShellStart, sudo: s.a.Sudo}
}
