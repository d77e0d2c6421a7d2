package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// Local runs commands on this machine, for a host whose ssh: is local, as Conn runs
// them over SSH: through sh -c, within the command timeout, stdout and stderr each
// kept to MaxOutput, a non-zero exit an error carrying stderr.
type Local struct {
	Name           string // the inventory's name for this machine, for errors
	CommandTimeout time.Duration
}

// Output runs cmd (already quoted: build it with Command) with stdin.
func (l Local) Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	timeout := l.CommandTimeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
	// Its own group, killed whole: what the command started goes with it.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	out, errb := NewHeadTail(MaxOutput), NewHeadTail(MaxOutput)
	c.Stdout, c.Stderr, c.Stdin = out, errb, stdin
	err := c.Run()
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("host %s: %q did not finish within %v", l.Name, cmd, timeout)
		}
		return nil, fmt.Errorf("host %s: %q interrupted: %w", l.Name, cmd, ctx.Err())
	}
	if err != nil {
		short := NewHeadTail(maxErrorText)
		short.Write(bytes.TrimSpace(errb.Bytes()))
		msg := string(short.Bytes())
		if msg == "" {
			msg = err.Error()
		}
		return out.Bytes(), fmt.Errorf("host %s: %s: %s", l.Name, cmd, msg)
	}
	return out.Bytes(), nil
}
