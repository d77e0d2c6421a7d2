// Package remote reaches endpoints over SSH (golang.org/x/crypto/ssh): host keys
// checked against the user's and the global known_hosts (HostKeyAlias,
// HashKnownHosts), keys from files and ssh-agent (IdentitiesOnly), ~/.ssh/config
// aliases with ProxyJump or ProxyCommand, timeouts on connecting and on every
// command; and it puts the bloatbench agent on a host.
package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
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
	// StrictHostKeyChecking=accept-new does; changed keys are refused all the same,
	// whichever file (the user's or the global one) pins them.
	AcceptNew bool
	// Home is the user's home directory, for ~/.ssh defaults.
	Home string
	// GlobalKnownHosts are the system-wide known_hosts files checked for a host
	// whose ~/.ssh/config sets no GlobalKnownHostsFile; nil is OpenSSH's default,
	// /etc/ssh/ssh_known_hosts and /etc/ssh/ssh_known_hosts2. A field rather than
	// a constant so that tests can point it at files of their own.
	GlobalKnownHosts []string
}

// Target is where and how to connect, after ~/.ssh/config is applied.
type Target struct {
	Name          string // the inventory's host name, for messages
	User          string
	Addr          string // host:port
	IdentityFiles []string
	// IdentitiesOnly (IdentitiesOnly yes) offers only the IdentityFiles' keys, not
	// the others ssh-agent holds: a server counts each key offered against its
	// MaxAuthTries, and some must not see every key the user has.
	IdentitiesOnly bool
	// KnownHosts are the user's known_hosts files (the inventory's,
	// UserKnownHostsFile, ~/.ssh/known_hosts and known_hosts2); accepted keys go to
	// the first.
	KnownHosts []string
	// GlobalKnownHosts (GlobalKnownHostsFile) are checked as well, never written.
	GlobalKnownHosts []string
	// InventoryKnownHosts is the inventory's known_hosts file for the host (also
	// first in KnownHosts), or "": its jump hosts are checked against it too.
	InventoryKnownHosts string
	// HostKeyAlias is the name the host key is looked up and recorded under
	// instead of Addr, or "".
	HostKeyAlias string
	// HashKnownHosts (HashKnownHosts yes) writes accepted keys with the host name
	// hashed.
	HashKnownHosts bool
	ProxyJump      []string
	// ProxyCommand, its tokens expanded, is run with sh -c and its stdin and
	// stdout are the connection; "" is a TCP connection to Addr.
	ProxyCommand   string
	ConnectTimeout time.Duration
	CommandTimeout time.Duration
}

// knownHostsAddr is what the host's key is looked up and recorded under: Addr, or
// the HostKeyAlias, which ssh writes as it is, without the port (port 22 is how
// knownhosts leaves a port out).
func (t Target) knownHostsAddr() string {
	if t.HostKeyAlias != "" {
		return net.JoinHostPort(t.HostKeyAlias, "22")
	}
	return t.Addr
}

// knownHostsFiles is every file the host key is checked against: the user's, then
// the global ones.
func (t Target) knownHostsFiles() []string {
	return append(slices.Clip(t.KnownHosts), t.GlobalKnownHosts...)
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

// yes is ssh_config's reading of a yes/no option.
func (d *Dialer) yes(alias, key string) bool { return strings.EqualFold(d.get(alias, key), "yes") }

func (d *Dialer) expand(p, user, host string) string {
	p = strings.NewReplacer("%d", d.Home, "%u", user, "%h", host, "%%", "%").Replace(p)
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = filepath.Join(d.Home, p[1:])
	}
	return p
}

// Resolve applies ~/.ssh/config to an inventory host.
func (d *Dialer) Resolve(h *inventory.Host) (Target, error) {
	t, err := d.resolve(h.Name, h.SSH, h.IdentityFile, h.KnownHosts)
	if err != nil {
		return Target{}, err
	}
	t.ConnectTimeout = h.ConnectTimeout.Or(DefaultConnectTimeout)
	t.CommandTimeout = h.CommandTimeout.Or(DefaultCommandTimeout)
	return t, nil
}

// resolve applies ~/.ssh/config to dest. identity and knownHosts are the
// inventory's identity_file and known_hosts, or "": they come first.
func (d *Dialer) resolve(name, dest, identity, knownHosts string) (Target, error) {
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

	if identity != "" {
		t.IdentityFiles = append(t.IdentityFiles, identity)
	}
	for _, f := range d.getAll(alias, "IdentityFile") {
		t.IdentityFiles = append(t.IdentityFiles, d.expand(f, t.User, host))
	}
	t.IdentitiesOnly = d.yes(alias, "IdentitiesOnly")
	// ssh tries the default keys only when no IdentityFile is given; bloatbench
	// has always tried them after the given ones, but not when IdentitiesOnly says
	// to offer those alone.
	if !t.IdentitiesOnly || len(t.IdentityFiles) == 0 {
		for _, f := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			t.IdentityFiles = append(t.IdentityFiles, filepath.Join(d.Home, ".ssh", f))
		}
	}

	if knownHosts != "" {
		t.KnownHosts = append(t.KnownHosts, knownHosts)
		t.InventoryKnownHosts = knownHosts
	}
	for _, f := range strings.Fields(d.get(alias, "UserKnownHostsFile")) {
		if !strings.EqualFold(f, "none") {
			t.KnownHosts = append(t.KnownHosts, d.expand(f, t.User, host))
		}
	}
	// ~/.ssh/known_hosts is read even when UserKnownHostsFile names others (which
	// ssh would read instead): a key pinned there stays pinned, so that a changed
	// one is refused rather than taken for a new one.
	for _, f := range []string{"known_hosts", "known_hosts2"} {
		if f := filepath.Join(d.Home, ".ssh", f); !slices.Contains(t.KnownHosts, f) {
			t.KnownHosts = append(t.KnownHosts, f)
		}
	}
	switch g := d.get(alias, "GlobalKnownHostsFile"); {
	case g != "":
		for _, f := range strings.Fields(g) {
			if !strings.EqualFold(f, "none") {
				t.GlobalKnownHosts = append(t.GlobalKnownHosts, d.expand(f, t.User, host))
			}
		}
	case d.GlobalKnownHosts != nil:
		t.GlobalKnownHosts = slices.Clone(d.GlobalKnownHosts)
	default:
		t.GlobalKnownHosts = []string{defaultGlobalKnownHosts, defaultGlobalKnownHosts2}
	}
	t.HostKeyAlias = d.get(alias, "HostKeyAlias")
	t.HashKnownHosts = d.yes(alias, "HashKnownHosts")

	jump, command, err := proxyOf(d.Config, alias)
	if err != nil {
		return Target{}, fmt.Errorf("host %s: %w", name, err)
	}
	if jump != "" {
		t.ProxyJump = strings.Split(jump, ",")
	}
	if command != "" {
		if t.ProxyCommand, err = expandProxyCommand(command, host, strconv.Itoa(port), t.User, alias); err != nil {
			return Target{}, fmt.Errorf("host %s: ~/.ssh/config for %s: %w", name, alias, err)
		}
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
		// The jump hosts are checked against the inventory's known_hosts as well
		// as their own files: the inventory that pins the host's key may pin its
		// bastion's, and accept-new records the bastion's key there too.
		jt, err := d.resolve(t.Name+" via "+j, j, "", t.InventoryKnownHosts)
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

// dialOne connects to t: through via when it is a jump host's connection, else
// through t's ProxyCommand if it has one (a host reached through a jump host is
// reached from there, so its own ProxyCommand does not apply, as with ssh -J), else
// over TCP.
func (d *Dialer) dialOne(ctx context.Context, t Target, via *ssh.Client) (*ssh.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, t.ConnectTimeout)
	defer cancel()
	auth, closeAuth, err := d.auth(ctx, t)
	if err != nil {
		return nil, err
	}
	defer closeAuth()
	// The host key check's own error, not x/crypto/ssh's wrapping of it in a
	// handshake failure: it already says what to do.
	var hostKeyErr error
	check := d.hostKeyCallback(t)
	cfg := &ssh.ClientConfig{
		User: t.User,
		Auth: auth,
		HostKeyCallback: func(hostname string, remote net.Addr, key ssh.PublicKey) error {
			hostKeyErr = check(hostname, remote, key)
			return hostKeyErr
		},
		// The algorithms of the keys known_hosts holds for the host first, so
		// that it presents one of those.
		HostKeyAlgorithms: hostKeyAlgorithms(t.knownHostsFiles(), t.knownHostsAddr()),
		Timeout:           t.ConnectTimeout,
	}
	var nc net.Conn
	var proxy *proxyConn
	how := "" // how the connection was made, for messages
	switch {
	case via != nil:
		nc, err = via.DialContext(ctx, "tcp", t.Addr)
	case t.ProxyCommand != "":
		how = " through ProxyCommand " + strconv.Quote(t.ProxyCommand)
		if proxy, err = startProxyCommand(ctx, t.ProxyCommand, t.Addr); err != nil {
			return nil, fmt.Errorf("host %s: start ProxyCommand %q: %w (check that it runs: sh -c %s)", t.Name, t.ProxyCommand, err, Quote("exec "+t.ProxyCommand))
		}
		nc = proxy
	default:
		var nd net.Dialer
		nc, err = nd.DialContext(ctx, "tcp", t.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("host %s: connect to %s: %w (is sshd running there, and the address right?)", t.Name, t.Addr, err)
	}
	// Cancelling ctx during the handshake closes the connection, which kills a
	// ProxyCommand.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	sc, chans, reqs, err := ssh.NewClientConn(nc, t.Addr, cfg)
	if err != nil {
		nc.Close()
		if hostKeyErr != nil {
			return nil, hostKeyErr
		}
		if proxy != nil {
			// What the command said (nc's "Connection refused", ssh -W's errors)
			// is why far more often than the EOF the handshake got.
			if said := proxy.said(); said != "" {
				err = fmt.Errorf("%w; the ProxyCommand said: %s", err, said)
			}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("host %s: SSH handshake with %s%s timed out after %v: %w", t.Name, t.Addr, how, t.ConnectTimeout, err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("host %s: SSH handshake with %s%s: %w (%w)", t.Name, t.Addr, how, ctx.Err(), err)
		}
		if !strings.Contains(err.Error(), "unable to authenticate") {
			// Not the keys: the connection broke during the handshake.
			return nil, fmt.Errorf("host %s: SSH handshake with %s%s: %w (is the host up and its sshd answering?)", t.Name, t.Addr, how, err)
		}
		tried := "and ssh-agent"
		if t.IdentitiesOnly {
			tried = "(IdentitiesOnly: ssh-agent's other keys were not offered)"
		}
		return nil, fmt.Errorf("host %s: SSH to %s@%s: %w (tried keys %s %s)", t.Name, t.User, t.Addr, err, strings.Join(t.IdentityFiles, ", "), tried)
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

func (d *Dialer) auth(ctx context.Context, t Target) ([]ssh.AuthMethod, func(), error) {
	signers, closer, err := d.signers(ctx, t)
	if err != nil {
		return nil, closer, err
	}
	return []ssh.AuthMethod{ssh.PublicKeys(signers...)}, closer, nil
}

// signers are the keys offered to t: those of its identity files, then
// ssh-agent's (only those of the identity files under IdentitiesOnly). closer
// ends the agent connection, which signs during the handshake.
func (d *Dialer) signers(ctx context.Context, t Target) ([]ssh.Signer, func(), error) {
	var signers []ssh.Signer
	// The identity files' public keys: under IdentitiesOnly, ssh-agent may still
	// sign for one whose private key needs a passphrase or is not on disk, as ssh
	// lets it.
	var mine []ssh.PublicKey
	for _, f := range t.IdentityFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			// Absent defaults are normal; a key kept only in ssh-agent may
			// have its .pub here.
			if pub := readPublicKey(f + ".pub"); pub != nil {
				mine = append(mine, pub)
			}
			continue
		}
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			var pm *ssh.PassphraseMissingError
			if errors.As(err, &pm) {
				// Needs a passphrase: ssh-agent can offer it instead.
				if pm.PublicKey != nil {
					mine = append(mine, pm.PublicKey)
				} else if pub := readPublicKey(f + ".pub"); pub != nil {
					mine = append(mine, pub)
				}
				continue
			}
			return nil, func() {}, fmt.Errorf("host %s: identity file %s: %w", t.Name, f, err)
		}
		signers = append(signers, s)
		mine = append(mine, s.PublicKey())
	}
	closer := func() {}
	if d.AgentSocket != "" {
		var nd net.Dialer
		if ac, err := nd.DialContext(ctx, "unix", d.AgentSocket); err == nil {
			closer = func() { ac.Close() }
			// An agent that hangs must not outlast the connect timeout.
			if dl, ok := ctx.Deadline(); ok {
				ac.SetDeadline(dl)
			}
			if as, err := sshagent.NewClient(ac).Signers(); err == nil {
				for _, s := range as {
					if t.IdentitiesOnly && !slices.ContainsFunc(mine, func(k ssh.PublicKey) bool { return bytes.Equal(k.Marshal(), s.PublicKey().Marshal()) }) {
						continue
					}
					signers = append(signers, s)
				}
			}
		}
	}
	if len(signers) == 0 {
		if t.IdentitiesOnly {
			return nil, closer, fmt.Errorf("host %s: no usable SSH key among %s, and IdentitiesOnly (~/.ssh/config) keeps ssh-agent's other keys out: "+
				"set identity_file in the inventory or IdentityFile to a key that exists, or add that key to ssh-agent", t.Name, strings.Join(t.IdentityFiles, ", "))
		}
		return nil, closer, fmt.Errorf("host %s: no usable SSH key: set identity_file in the inventory, add a key to ssh-agent, or create ~/.ssh/id_ed25519", t.Name)
	}
	return signers, closer, nil
}

// readPublicKey is the key in an authorized_keys-format file (KEY.pub), or nil.
func readPublicKey(file string) ssh.PublicKey {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil
	}
	return k
}

// HostKeyError is a host key refused: unknown, or changed.
type HostKeyError struct {
	Host, Addr string
	// KnownAs is the name looked up in known_hosts: Addr, or the HostKeyAlias.
	KnownAs     string
	Fingerprint string
	KeyType     string
	Changed     bool
	Files       []string
	Known       []knownhosts.KnownKey
}

func (e *HostKeyError) Error() string {
	name := knownhosts.Normalize(e.KnownAs)
	if e.KnownAs == "" {
		name = knownhosts.Normalize(e.Addr)
	}
	if e.Changed {
		var was, fix []string
		seen := map[string]bool{}
		for _, k := range e.Known {
			was = append(was, fmt.Sprintf("%s %s (pinned in %s:%d)", k.Key.Type(), ssh.FingerprintSHA256(k.Key), k.Filename, k.Line))
			if !seen[k.Filename] {
				seen[k.Filename] = true
				fix = append(fix, "ssh-keygen -R "+Quote(name)+" -f "+Quote(k.Filename))
			}
		}
		return fmt.Sprintf("host %s (%s): HOST KEY HAS CHANGED: it presents %s %s, but known_hosts has %s for %s. Someone may be intercepting the connection, "+
			"so nothing was run there, with --accept-new-host-keys or not. If the change is expected (the host was reinstalled), "+
			"remove the old line (%s) and connect again", e.Host, e.Addr, e.KeyType, e.Fingerprint, strings.Join(was, ", "), name, strings.Join(fix, "; "))
	}
	return fmt.Sprintf("host %s (%s): unknown host key %s %s (%s is not in %s); nothing was run there. "+
		"Check the fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub), then add it to known_hosts "+
		"(ssh-keyscan, or one `ssh` by hand) or rerun with --accept-new-host-keys",
		e.Host, e.Addr, e.KeyType, e.Fingerprint, name, strings.Join(e.Files, ", "), strings.TrimPrefix(e.KeyType, "ssh-"))
}

// hostKeyCallback checks the host key against every known_hosts file of t, the
// user's and the global ones alike, under t's HostKeyAlias if it has one. A key
// that any file pins otherwise is refused, with accept-new too: accept-new adds
// only a host no file knows, to the first user file.
func (d *Dialer) hostKeyCallback(t Target) ssh.HostKeyCallback {
	files := t.knownHostsFiles()
	name := t.knownHostsAddr()
	return func(_ string, _ net.Addr, key ssh.PublicKey) error {
		// The files are read at the handshake, not before: a jump host's
		// accept-new may have just added to them.
		check, err := knownHostsCheck(files)
		if err != nil {
			return fmt.Errorf("host %s: %w", t.Name, err)
		}
		err = check(name, knownHostsRemote(), key)
		if err == nil {
			return nil
		}
		var re *knownhosts.RevokedError
		if errors.As(err, &re) {
			return fmt.Errorf("host %s (%s): its host key %s %s is revoked (@revoked in %s:%d); nothing was run there. "+
				"The host needs a new host key, pinned in known_hosts: %w", t.Name, t.Addr, key.Type(), ssh.FingerprintSHA256(key), re.Revoked.Filename, re.Revoked.Line, err)
		}
		var ke *knownhosts.KeyError
		if !errors.As(err, &ke) {
			return fmt.Errorf("host %s: check host key against %s: %w", t.Name, strings.Join(files, ", "), err)
		}
		hk := &HostKeyError{Host: t.Name, Addr: t.Addr, KnownAs: name, Fingerprint: ssh.FingerprintSHA256(key), KeyType: key.Type(),
			Changed: len(ke.Want) > 0, Files: files, Known: ke.Want}
		if hk.Changed || !d.AcceptNew || len(t.KnownHosts) == 0 {
			return hk
		}
		if err := appendKnownHost(t.KnownHosts[0], name, key, t.HashKnownHosts); err != nil {
			return fmt.Errorf("host %s: accept its new host key %s: %w", t.Name, ssh.FingerprintSHA256(key), err)
		}
		return nil
	}
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
