package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proxyKillDelay is how long a ProxyCommand has to end after the SIGHUP its
// connection's Close sends it before it is killed.
const proxyKillDelay = 2 * time.Second

// expandProxyCommand expands the tokens OpenSSH expands in a ProxyCommand: %h the
// host name (after HostName), %p the port, %r the remote user, %n the name as
// given (the ssh_config alias) and %% a percent sign. The values go through Quote
// although they are ours: a HostName or user from ~/.ssh/config or the inventory
// must stay one word of the shell command whatever it holds. Any other token is an
// error, as it is for ssh.
func expandProxyCommand(cmd, host, port, user, alias string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(cmd); i++ {
		if cmd[i] != '%' {
			b.WriteByte(cmd[i])
			continue
		}
		if i+1 == len(cmd) {
			return "", fmt.Errorf("ProxyCommand %q ends with a lone %%: write %%%% for a percent sign", cmd)
		}
		i++
		switch cmd[i] {
		case 'h':
			b.WriteString(Quote(host))
		case 'p':
			b.WriteString(Quote(port))
		case 'r':
			b.WriteString(Quote(user))
		case 'n':
			b.WriteString(Quote(alias))
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("ProxyCommand %q: unknown token %%%c (bloatbench expands %%h, %%p, %%r, %%n and %%%%)", cmd, cmd[i])
		}
	}
	return b.String(), nil
}

// proxyConn is a connection whose transport is a local command's stdin and stdout,
// as for OpenSSH's ProxyCommand. Closing it ends the command.
type proxyConn struct {
	r, w    *os.File // our ends of the command's stdout and stdin
	cmd     *exec.Cmd
	command string
	stderr  *tailBuffer
	addr    proxyAddr
	// exited is closed once the command has ended and been waited for.
	exited    chan struct{}
	closeOnce sync.Once
}

// startProxyCommand runs command with `sh -c`, as OpenSSH does (with the "exec "
// it puts in front, so that the shell does not stay in between), and returns the
// connection over its stdin and stdout. addr is the host:port it leads to, for
// messages. Its stderr is kept for the errors of a connection that fails.
//
// The command outlives ctx, as a TCP connection outlives the context it was dialed
// with: ctx only bounds the start, and the caller closes the connection (which its
// dial does when ctx ends during the handshake).
func startProxyCommand(ctx context.Context, command, addr string) (*proxyConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Pipes of our own rather than exec's: *os.File pipes have deadlines, which a
	// net.Conn must offer.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	c := &proxyConn{r: outR, w: inW, command: command, stderr: &tailBuffer{max: 4096}, addr: proxyAddr(addr), exited: make(chan struct{})}
	c.cmd = exec.Command("sh", "-c", "exec "+command)
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = inR, outW, c.stderr
	// Its own process group, so that Close reaches what a compound command
	// started too, not only the shell.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child that keeps stderr open must not hold up Wait once the command ended.
	c.cmd.WaitDelay = proxyKillDelay
	err = c.cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		outR.Close()
		inW.Close()
		return nil, err
	}
	go func() {
		c.cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func (c *proxyConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *proxyConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// Close ends the command as OpenSSH does, with a SIGHUP (and EOF on its stdin),
// and kills it if it is still there proxyKillDelay later. It returns once the
// command has ended.
func (c *proxyConn) Close() error {
	c.closeOnce.Do(func() {
		c.w.Close()
		c.signal(syscall.SIGHUP)
		t := time.NewTimer(proxyKillDelay)
		defer t.Stop()
		select {
		case <-c.exited:
		case <-t.C:
			c.signal(syscall.SIGKILL)
			<-c.exited
		}
		c.r.Close()
	})
	return nil
}

// signal sends sig to the command's process group, unless the command has been
// waited for: its group id may then be another's.
func (c *proxyConn) signal(sig syscall.Signal) {
	select {
	case <-c.exited:
	default:
		syscall.Kill(-c.cmd.Process.Pid, sig)
	}
}

// said is what the command wrote on stderr, once it has ended, for the error of a
// connection that failed through it.
func (c *proxyConn) said() string {
	select {
	case <-c.exited:
	case <-time.After(proxyKillDelay):
	}
	return strings.TrimSpace(c.stderr.String())
}

func (c *proxyConn) LocalAddr() net.Addr  { return proxyAddr("") }
func (c *proxyConn) RemoteAddr() net.Addr { return c.addr }

func (c *proxyConn) SetDeadline(t time.Time) error {
	return errors.Join(c.r.SetReadDeadline(t), c.w.SetWriteDeadline(t))
}
func (c *proxyConn) SetReadDeadline(t time.Time) error  { return c.r.SetReadDeadline(t) }
func (c *proxyConn) SetWriteDeadline(t time.Time) error { return c.w.SetWriteDeadline(t) }

// proxyAddr is the address a ProxyCommand leads to, host:port.
type proxyAddr string

func (proxyAddr) Network() string  { return "proxycommand" }
func (a proxyAddr) String() string { return string(a) }
