package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/remote"
)

// localConn is the hostConn of a host that is this machine (ssh: local): its agent
// is a child process running this very binary, with no SSH and no copy.
type localConn struct {
	host    *inventory.Host
	self    string
	timeout time.Duration
}

func newLocalConn(h *inventory.Host, self string) (*localConn, error) {
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("host %s (ssh: local): this program's path: %w", h.Name, err)
		}
		self = exe
	}
	return &localConn{host: h, self: self, timeout: h.CommandTimeout.Or(remote.DefaultCommandTimeout)}, nil
}

// startAgent runs `SELF agent`. A run that needs root here (a setup on one of this
// machine's devices, its sysctls) needs the controller to run as root: it is said
// now, before anything runs, rather than asked of sudo in the middle of a run.
func (l *localConn) startAgent(_ context.Context, o remote.AgentOptions) (agentProc, error) {
	if o.Sudo {
		return nil, fmt.Errorf("host %s is this machine (ssh: local), and the run changes its devices or sysctls, which needs root: run bloatbench as root (sudo bloatbench ...)", l.host.Name)
	}
	cmd := exec.Command(l.self, "agent")
	// A process group of its own: Ctrl-C at the terminal reaches the controller,
	// which then restores the hosts through the agents; it must not reach the
	// agent first and take the restore with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := remote.NewHeadTail(64 << 10)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("host %s (ssh: local): start the agent %s: %w", l.host.Name, l.self, err)
	}
	a := &localAgent{cmd: cmd, in: stdin, out: stdout, stderr: stderr, path: l.self, done: make(chan struct{})}
	go func() {
		a.err = cmd.Wait()
		close(a.done)
	}()
	return a, nil
}

func (l *localConn) lost() error  { return nil }
func (l *localConn) close() error { return nil }
func (l *localConn) user() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Geteuid())
}

// addr is what locks key on beside the host's identity (machine-id and network
// namespace), which is what makes this machine meet itself under another name.
func (l *localConn) addr() string                  { return "local" }
func (l *localConn) commandTimeout() time.Duration { return l.timeout }

// localAgent is the agent child of a local host.
type localAgent struct {
	cmd       *exec.Cmd
	in        io.WriteCloser
	out       io.Reader
	stderr    *remote.HeadTail
	path      string
	done      chan struct{}
	err       error
	closeOnce sync.Once
}

func (a *localAgent) stdin() io.WriteCloser   { return a.in }
func (a *localAgent) stdout() io.Reader       { return a.out }
func (a *localAgent) exited() <-chan struct{} { return a.done }
func (a *localAgent) wait() error             { <-a.done; return a.err }
func (a *localAgent) stderrTail() string      { return string(a.stderr.Bytes()) }
func (a *localAgent) started() agentStart     { return agentStart{path: a.path} }

// close ends the agent as a session's end does: its stdin closes and it stops
// every job and exits; one that does not within agentExitGrace is killed, with
// whatever it started in its group.
func (a *localAgent) close() error {
	a.closeOnce.Do(func() {
		a.in.Close()
		select {
		case <-a.done:
		case <-time.After(agentExitGrace):
			syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			<-a.done
		}
	})
	return nil
}

// agentExitGrace is how long a local agent has to stop its jobs once told to.
const agentExitGrace = 10 * time.Second

// FarEndInventory is the inventory of a run flent's way (-H HOST): this machine the
// client, HOST the server. HOST's test address is testIP if given, else HOST itself
// as flent takes it (an address, or a name looked up), else, for an alias only
// ~/.ssh/config knows, the address SSH reaches it at; this machine's is the source
// address of its route to that.
func FarEndInventory(ctx context.Context, d *remote.Dialer, host, testIP string, bottlenecks []string) (*inventory.Inventory, error) {
	if testIP == "" {
		var err error
		if testIP, err = farEndAddress(ctx, d, host); err != nil {
			return nil, err
		}
	}
	ip, err := netip.ParseAddr(testIP)
	if err != nil {
		return nil, fmt.Errorf("--test-ip %q is not an IP address", testIP)
	}
	// A UDP socket connected to the far end sends nothing, but the kernel picks its
	// source address by the route: the client's test address.
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "udp", netip.AddrPortFrom(ip, 9).String())
	if err != nil {
		return nil, fmt.Errorf("no route from this machine to %s (-H %s): %w", testIP, host, err)
	}
	local := c.LocalAddr().(*net.UDPAddr).IP.String()
	c.Close()
	inv, err := inventory.ForFarEnd(inventory.FarEnd{SSH: host, TestIP: ip.String(), ClientTestIP: local, Bottlenecks: bottlenecks})
	if err != nil {
		return nil, err
	}
	return inv, nil
}

// farEndAddress is the test address -H HOST means when --test-ip is not given.
func farEndAddress(ctx context.Context, d *remote.Dialer, host string) (string, error) {
	_, name, _, err := inventory.SplitSSH(host)
	if err != nil {
		return "", fmt.Errorf("-H: %w", err)
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		return ip.Unmap().String(), nil
	}
	if ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name); err == nil && len(ips) > 0 {
		return ips[0].Unmap().String(), nil
	}
	t, err := d.Resolve(&inventory.Host{Name: inventory.FarEndServer, SSH: host})
	if err != nil {
		return "", fmt.Errorf("-H %s: %w", host, err)
	}
	if len(t.ProxyJump) > 0 || t.ProxyCommand != "" {
		return "", fmt.Errorf("-H %s is an alias reached through a jump host or ProxyCommand, so its SSH address is not its test address: give that with --test-ip", host)
	}
	addr, _, err := net.SplitHostPort(t.Addr)
	if err != nil {
		return "", fmt.Errorf("-H %s: address %q: %w", host, t.Addr, err)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", addr)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("-H %s: look up %s: %v: give its test address with --test-ip", host, addr, err)
	}
	return ips[0].Unmap().String(), nil
}
