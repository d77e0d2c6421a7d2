// Package remote reaches endpoints over SSH (golang.org/x/crypto/ssh): host keys
// checked against known_hosts, keys from files and ssh-agent, ~/.ssh/config aliases
// with ProxyJump, timeouts on connecting and on every command; and it puts the
// bloatbench agent on a host.
package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/bloatbench/bloatbench/inventory"
)

// Defaults for hosts whose inventory sets no timeout.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultCommandTimeout = 60 * time.Second
	maxJumps              = 8
)

// Dialer opens SSH connections. Its zero value is usable: no ~/.ssh/config, no agent.
type Dialer struct {
	// Config is the user's ~/.ssh/config, or nil.
	Config *ssh_config.Config
	// AgentSocket is ssh-agent's socket (SSH_AUTH_SOCK), or "".
	AgentSocket string
	// AcceptNew adds unknown host keys to known_hosts, as OpenSSH's
	// StrictHostKeyChecking=accept-new does; changed keys are refused all the same.
	AcceptNew bool
	// Home is the user's home directory, for ~/.ssh defaults.
	Home string
}

// Target is where and how to connect, after ~/.ssh/config is applied.
type Target struct {
	Name           string // the inventory's host name, for messages
	User           string
	Addr           string // host:port
	IdentityFiles  []string
	KnownHosts     []string
	ProxyJump      []string
	ConnectTimeout time.Duration
	CommandTimeout time.Duration
}

func (d *Dialer) get(alias, key string) string {
	if d.Config == nil {
		return ""
	}
	v, _ := d.Config.Get(alias, key)
	return v
}

func (d *Dialer) getAll(alias, key string) []string {
	if d.Config == nil {
		return nil
	}
	v, _ := d.Config.GetAll(alias, key)
	return v
}

func (d *Dialer) expand(p, user, host string) string {
	p = strings.NewReplacer("%d", d.Home, "%u", user, "%h", host, "%%", "%").Replace(p)
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = filepath.Join(d.Home, p[1:])
	}
	return p
}

// Resolve applies ~/.ssh/config to an inventory host.
func (d *Dialer) Resolve(h *inventory.Host) (Target, error) {
	t, err := d.resolve(h.Name, h.SSH)
	if err != nil {
		return Target{}, err
	}
	if h.IdentityFile != "" {
		t.IdentityFiles = append([]string{h.IdentityFile}, t.IdentityFiles...)
	}
	if h.KnownHosts != "" {
		t.KnownHosts = append([]string{h.KnownHosts}, t.KnownHosts...)
	}
	t.ConnectTimeout = h.ConnectTimeout.Or(DefaultConnectTimeout)
	t.CommandTimeout = h.CommandTimeout.Or(DefaultCommandTimeout)
	return t, nil
}

func (d *Dialer) resolve(name, dest string) (Target, error) {
	usr, alias, port, err := inventory.SplitSSH(dest)
	if err != nil {
		return Target{}, fmt.Errorf("host %s: %w", name, err)
	}
	t := Target{Name: name, User: usr}
	host := alias
	if hn := d.get(alias, "HostName"); hn != "" {
		host = strings.ReplaceAll(hn, "%h", alias)
	}
	if t.User == "" {
		t.User = d.get(alias, "User")
	}
	if t.User == "" {
		if u, err := user.Current(); err == nil {
			t.User = u.Username
		}
	}
	if port == 0 {
		if p := d.get(alias, "Port"); p != "" {
			if port, err = strconv.Atoi(p); err != nil {
				return Target{}, fmt.Errorf("host %s: ~/.ssh/config gives %s Port %q, not a number", name, alias, p)
			}
		}
	}
	if port == 0 {
		port = 22
	}
	t.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	for _, f := range d.getAll(alias, "IdentityFile") {
		t.IdentityFiles = append(t.IdentityFiles, d.expand(f, t.User, host))
	}
	for _, f := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		t.IdentityFiles = append(t.IdentityFiles, filepath.Join(d.Home, ".ssh", f))
	}
	for _, f := range strings.Fields(d.get(alias, "UserKnownHostsFile")) {
		t.KnownHosts = append(t.KnownHosts, d.expand(f, t.User, host))
	}
	t.KnownHosts = append(t.KnownHosts, filepath.Join(d.Home, ".ssh", "known_hosts"))
	if pj := d.get(alias, "ProxyJump"); pj != "" && !strings.EqualFold(pj, "none") {
		t.ProxyJump = strings.Split(pj, ",")
	}
	return t, nil
}

// Conn is an open SSH connection to one host.
type Conn struct {
	Target Target
	client *ssh.Client
	jumps  []*ssh.Client
	// done ends the keepalive; lost is why the keepalive closed the connection.
	done      chan struct{}
	closeOnce sync.Once
	lostMu    sync.Mutex
	lost      error
}

// Dial connects to an inventory host, through its ProxyJump hosts if any.
func (d *Dialer) Dial(ctx context.Context, h *inventory.Host) (*Conn, error) {
	t, err := d.Resolve(h)
	if err != nil {
		return nil, err
	}
	return d.DialTarget(ctx, t)
}

// DialTarget connects to a resolved target.
func (d *Dialer) DialTarget(ctx context.Context, t Target) (*Conn, error) {
	c := &Conn{Target: t, done: make(chan struct{})}
	var via *ssh.Client
	for i, j := range t.ProxyJump {
		if i >= maxJumps {
			return nil, fmt.Errorf("host %s: more than %d ProxyJump hops", t.Name, maxJumps)
		}
		jt, err := d.resolve(t.Name+" via "+j, j)
		if err != nil {
			c.Close()
			return nil, err
		}
		jt.ConnectTimeout = t.ConnectTimeout
		jc, err := d.dialOne(ctx, jt, via)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("host %s: jump host %s: %w", t.Name, j, err)
		}
		c.jumps = append(c.jumps, jc)
		via = jc
	}
	cl, err := d.dialOne(ctx, t, via)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.client = cl
	go c.keepalive(KeepaliveInterval, KeepaliveCount)
	return c, nil
}

func (d *Dialer) dialOne(ctx context.Context, t Target, via *ssh.Client) (*ssh.Client, error) {
	auth, closeAuth, err := d.auth(t)
	if err != nil {
		return nil, err
	}
	defer closeAuth()
	cfg := &ssh.ClientConfig{
		User:            t.User,
		Auth:            auth,
		HostKeyCallback: d.hostKeyCallback(t),
		// The algorithms of the keys known_hosts holds for the host first, so
		// that it presents one of those.
		HostKeyAlgorithms: hostKeyAlgorithms(t.KnownHosts, t.Addr),
		Timeout:           t.ConnectTimeout,
	}
	ctx, cancel := context.WithTimeout(ctx, t.ConnectTimeout)
	defer cancel()
	var nc net.Conn
	if via != nil {
		nc, err = via.DialContext(ctx, "tcp", t.Addr)
	} else {
		var nd net.Dialer
		nc, err = nd.DialContext(ctx, "tcp", t.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("host %s: connect to %s: %w (is sshd running there, and the address right?)", t.Name, t.Addr, err)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	sc, chans, reqs, err := ssh.NewClientConn(nc, t.Addr, cfg)
	if err != nil {
		nc.Close()
		var hk *HostKeyError
		if errors.As(err, &hk) {
			return nil, hk
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("host %s: SSH handshake with %s timed out after %v", t.Name, t.Addr, t.ConnectTimeout)
		}
		if !strings.Contains(err.Error(), "unable to authenticate") {
			// Not the keys: the connection broke during the handshake.
			return nil, fmt.Errorf("host %s: SSH handshake with %s: %w (is the host up and its sshd answering?)", t.Name, t.Addr, err)
		}
		return nil, fmt.Errorf("host %s: SSH to %s@%s: %w (tried keys %s and ssh-agent)", t.Name, t.User, t.Addr, err, strings.Join(t.IdentityFiles, ", "))
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

func (d *Dialer) auth(t Target) ([]ssh.AuthMethod, func(), error) {
	var signers []ssh.Signer
	for _, f := range t.IdentityFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // absent defaults are normal
		}
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			var pm *ssh.PassphraseMissingError
			if errors.As(err, &pm) {
				continue // needs a passphrase: ssh-agent can offer it instead
			}
			return nil, func() {}, fmt.Errorf("host %s: identity file %s: %w", t.Name, f, err)
		}
		signers = append(signers, s)
	}
	closer := func() {}
	if d.AgentSocket != "" {
		if ac, err := net.Dial("unix", d.AgentSocket); err == nil {
			closer = func() { ac.Close() }
			if as, err := sshagent.NewClient(ac).Signers(); err == nil {
				signers = append(signers, as...)
			}
		}
	}
	if len(signers) == 0 {
		return nil, closer, fmt.Errorf("host %s: no usable SSH key: set identity_file in the inventory, add a key to ssh-agent, or create ~/.ssh/id_ed25519", t.Name)
	}
	return []ssh.AuthMethod{ssh.PublicKeys(signers...)}, closer, nil
}

// HostKeyError is a host key refused: unknown, or changed.
type HostKeyError struct {
	Host, Addr  string
	Fingerprint string
	KeyType     string
	Changed     bool
	Files       []string
	Known       []knownhosts.KnownKey
}

func (e *HostKeyError) Error() string {
	if e.Changed {
		var was []string
		for _, k := range e.Known {
			was = append(was, fmt.Sprintf("%s:%d has %s", k.Filename, k.Line, ssh.FingerprintSHA256(k.Key)))
		}
		return fmt.Sprintf("host %s (%s): HOST KEY HAS CHANGED: it presents %s %s but %s. Someone may be intercepting the connection; "+
			"if the host was reinstalled, remove the old line (ssh-keygen -R %s -f FILE) and connect again", e.Host, e.Addr, e.KeyType, e.Fingerprint, strings.Join(was, ", "), knownhosts.Normalize(e.Addr))
	}
	return fmt.Sprintf("host %s (%s): unknown host key %s %s (not in %s); nothing was run there. "+
		"Check the fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub), then add it to known_hosts "+
		"(ssh-keyscan, or one `ssh` by hand) or rerun with --accept-new-host-keys",
		e.Host, e.Addr, e.KeyType, e.Fingerprint, strings.Join(e.Files, ", "), strings.TrimPrefix(e.KeyType, "ssh-"))
}

func (d *Dialer) hostKeyCallback(t Target) ssh.HostKeyCallback {
	var existing []string
	for _, f := range t.KnownHosts {
		if _, err := os.Stat(f); err == nil {
			existing = append(existing, f)
		}
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		var err error = &knownhosts.KeyError{}
		if len(existing) > 0 {
			cb, lerr := knownhosts.New(existing...)
			if lerr != nil {
				return fmt.Errorf("host %s: read known_hosts: %w", t.Name, lerr)
			}
			err = cb(hostname, remote, key)
		}
		if err == nil {
			return nil
		}
		var ke *knownhosts.KeyError
		if !errors.As(err, &ke) {
			return fmt.Errorf("host %s: check host key: %w", t.Name, err)
		}
		hk := &HostKeyError{Host: t.Name, Addr: t.Addr, Fingerprint: ssh.FingerprintSHA256(key), KeyType: key.Type(),
			Changed: len(ke.Want) > 0, Files: t.KnownHosts, Known: ke.Want}
		if hk.Changed || !d.AcceptNew {
			return hk
		}
		return appendKnownHost(t.KnownHosts[0], hostname, key)
	}
}

func appendKnownHost(file, hostname string, key ssh.PublicKey) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("add host key to %s: %w", file, err)
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("add host key to %s: %w", file, err)
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key)); err != nil {
		return fmt.Errorf("add host key to %s: %w", file, err)
	}
	return nil
}

// Close ends the connection and its jump connections.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	var errs []error
	if c.client != nil {
		errs = append(errs, c.client.Close())
	}
	for i := len(c.jumps) - 1; i >= 0; i-- {
		errs = append(errs, c.jumps[i].Close())
	}
	return errors.Join(errs...)
}
