// Package testbed builds the local lab: two network namespaces, client and server,
// joined by a multi-queue veth test link, each reached from the host over its own
// management veth by a real OpenSSH sshd with freshly made keys. It writes an
// inventory for `run -H`, and takes all of it down again.
package testbed

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
)

// StateDir holds one folder per lab: its keys, sshd files and state.
const StateDir = "/run/bloatbench/labs"

// MaxLabs bounds how many labs can be up at once (one /24 of 198.18/15 each).
const MaxLabs = 64

// TestDev is the test link's name inside both namespaces.
const TestDev = "test0"

// Options shape the lab's test link.
type Options struct {
	Rate  string // htb rate on both ends of the test link, e.g. "100mbit"; "" = unshaped
	Queue string // the queue under the shaper (or at the root): pfifo:N or bfifo:BYTES
	GSO   string // "off" turns GSO, TSO and GRO off on the test link
	// Queues is the test link's number of tx and rx queues.
	Queues int
	// User is the lab's SSH login ("" = root): a system user made when missing,
	// the only one the lab's sshd lets in, whose HOME the lab's home is. With Sudo it
	// may run the agent as root through sudo without a password (a drop-in in
	// /etc/sudoers.d for this lab only); without, it has no sudo rights of the lab's.
	User string `json:"user,omitempty"`
	Sudo bool   `json:"sudo,omitempty"`
	// IPv6 adds an IPv6 address (2001:2:0:N::1 and ::2/64, RFC 5180's benchmarking
	// range) to each end of the test link, and the inventory's test_ip is that one.
	IPv6 bool `json:"ipv6,omitempty"`
	// Pairs is the number of client/server pairs (0 or 1 = one). Pair k > 1 is
	// two more namespaces, clientK behind client and serverK behind server, each on
	// an access link of its own and routed through them: every pair's traffic
	// crosses the one test link, which stays the bottleneck.
	Pairs int `json:"pairs,omitempty"`
}

// MaxPairs bounds a lab's pairs (a /30 of management addresses each way a pair
// in the lab's /24).
const MaxPairs = 16

// Lab is a lab that is up.
type Lab struct {
	Name      string  `json:"name"`
	Index     int     `json:"index"`
	Dir       string  `json:"dir"`
	Options   Options `json:"options"`
	Inventory string  `json:"inventory"`
	Hosts     []Node  `json:"hosts"`
	// UserCreated says testbed up made Options.User: down removes it when no other
	// lab uses it. Sudoers is the lab's drop-in, removed by down.
	UserCreated bool   `json:"user_created,omitempty"`
	Sudoers     string `json:"sudoers,omitempty"`
	// VM and VMOptions are set for a VM lab (testbed up --vm).
	VM        *VMState   `json:"vm,omitempty"`
	VMOptions *VMOptions `json:"vm_options,omitempty"`
}

// Node is one namespace of the lab.
type Node struct {
	Role    string `json:"role"`
	NetNS   string `json:"netns"`
	MgmtIP  string `json:"mgmt_ip"`
	HostIP  string `json:"host_ip"`  // the host's end of the management link
	HostDev string `json:"host_dev"` // the host's end of the management link
	TestIP  string `json:"test_ip"`
	TestIP6 string `json:"test_ip6,omitempty"`
	// Pair is the node's pair (from 1). A node of pair 2 and up sits behind the
	// first pair's node of its role (Via, a namespace), on an access link whose
	// end there is AccessDev with address Gateway.
	Pair      int    `json:"pair,omitempty"`
	Via       string `json:"via,omitempty"`
	AccessDev string `json:"access_dev,omitempty"`
	Gateway   string `json:"gateway,omitempty"`
}

// The lab uses RFC 2544's benchmarking range, 198.18.0.0/15: the test link of lab n
// is 198.18.n.0/24, its management links 198.19.n.(8k)/30 (client) and
// 198.19.n.(8k+4)/30 (server) for pair k from 0. The access links of pair k > 0
// are 198.18.(64+n).(4k)/30 behind the client and 198.19.(64+n).(4k)/30 behind
// the server (the VM lab takes 198.18.128 and up).
func plan(n, pairs int) []Node {
	nodes := []Node{
		{Role: "client", NetNS: fmt.Sprintf("bb%d-client", n), HostIP: fmt.Sprintf("198.19.%d.1", n), MgmtIP: fmt.Sprintf("198.19.%d.2", n),
			HostDev: fmt.Sprintf("bb%dmc", n), TestIP: fmt.Sprintf("198.18.%d.1", n), TestIP6: fmt.Sprintf("2001:2:0:%x::1", n)},
		{Role: "server", NetNS: fmt.Sprintf("bb%d-server", n), HostIP: fmt.Sprintf("198.19.%d.5", n), MgmtIP: fmt.Sprintf("198.19.%d.6", n),
			HostDev: fmt.Sprintf("bb%dms", n), TestIP: fmt.Sprintf("198.18.%d.2", n), TestIP6: fmt.Sprintf("2001:2:0:%x::2", n)},
	}
	if pairs < 2 {
		return nodes
	}
	nodes[0].Pair, nodes[1].Pair = 1, 1
	for k := 1; k < pairs; k++ {
		for i, side := range []struct {
			role, net, dev string
		}{{"client", fmt.Sprintf("198.18.%d", 64+n), "c"}, {"server", fmt.Sprintf("198.19.%d", 64+n), "s"}} {
			role := fmt.Sprintf("%s%d", side.role, k+1)
			nodes = append(nodes, Node{Role: role, NetNS: fmt.Sprintf("bb%d-%s", n, role), Pair: k + 1,
				HostIP: fmt.Sprintf("198.19.%d.%d", n, 8*k+4*i+1), MgmtIP: fmt.Sprintf("198.19.%d.%d", n, 8*k+4*i+2),
				HostDev: fmt.Sprintf("bb%dm%s%d", n, side.dev, k+1),
				TestIP:  fmt.Sprintf("%s.%d", side.net, 4*k+1), Gateway: fmt.Sprintf("%s.%d", side.net, 4*k+2),
				Via: nodes[i].NetNS, AccessDev: fmt.Sprintf("acc%d", k+1)})
		}
	}
	return nodes
}

var (
	rateRE  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$`)
	userRE  = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	queueRE = regexp.MustCompile(`^(pfifo|bfifo):([0-9]+)$`)
)

// Check validates options before anything is touched.
func (o Options) Check() error {
	if o.Rate != "" && !rateRE.MatchString(o.Rate) {
		return fmt.Errorf("--rate %q: write a tc rate such as 100mbit or 1gbit", o.Rate)
	}
	if o.Queue != "" && !queueRE.MatchString(o.Queue) {
		return fmt.Errorf("--queue %q: write pfifo:PACKETS or bfifo:BYTES, e.g. bfifo:300000", o.Queue)
	}
	if o.GSO != "" && o.GSO != "on" && o.GSO != "off" {
		return fmt.Errorf("--gso %q: write on or off", o.GSO)
	}
	if o.Queues < 0 || o.Queues > 64 {
		return fmt.Errorf("--queues %d: from 1 to 64", o.Queues)
	}
	if o.User != "" && (!userRE.MatchString(o.User) || o.User == "root") {
		return fmt.Errorf("--user %q: a user name (lower-case letters, digits, _ and -, at most 32) other than root, which is the lab's login without --user", o.User)
	}
	if o.Sudo && o.User == "" {
		return errors.New("--sudo is for a --user: root needs no sudo")
	}
	if o.Pairs < 0 || o.Pairs > MaxPairs {
		return fmt.Errorf("--pairs %d: from 1 to %d", o.Pairs, MaxPairs)
	}
	if o.Pairs > 1 && o.IPv6 {
		return errors.New("--pairs with --ipv6: the pairs' access links are IPv4 only; leave out one of them")
	}
	return nil
}

// Up builds a lab and writes its inventory to out ("" = inside the lab's folder).
func Up(ctx context.Context, o Options, out string) (lab *Lab, err error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.Queues == 0 {
		o.Queues = 4
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the local lab needs root (network namespaces, veth, sshd): run as root")
	}
	tools := []string{"ip", "tc", "sshd"}
	if o.GSO != "" {
		tools = append(tools, "ethtool")
	}
	if o.User != "" {
		tools = append(tools, "useradd")
	}
	if o.Sudo {
		tools = append(tools, "sudo", "visudo")
	}
	for _, t := range tools {
		if _, err := lookPath(t); err != nil {
			return nil, fmt.Errorf("the local lab needs %s: install it (apt-get install iproute2 openssh-server ethtool sudo)", t)
		}
	}
	n, dir, err := claim("bb", MaxLabs, func(n int) string { return plan(n, 1)[0].NetNS })
	if err != nil {
		return nil, err
	}
	lab = &Lab{Name: fmt.Sprintf("bb%d", n), Index: n, Dir: dir, Options: o, Hosts: plan(n, o.Pairs)}
	if err := lab.bring(ctx, nsBackend{}, out); err != nil {
		return nil, err
	}
	return lab, nil
}

// A backend is how a lab's hosts come to be and go: network namespaces on this
// machine (nsBackend), or QEMU guests (qemuBackend, vm.go). Up and UpVM check their
// options and claim a name; bring and down are the same for both.
type backend interface {
	// build makes the hosts, their links and logins.
	build(ctx context.Context, l *Lab) error
	// writeInventory writes the inventory the hosts are reached by to l.Inventory.
	writeInventory(l *Lab) error
	// teardown removes what build made, also half-made, and the lab's folder.
	teardown(ctx context.Context, l *Lab) error
}

// backend is the lab's, by its saved state.
func (l *Lab) backend() backend {
	if l.VM != nil {
		return qemuBackend{}
	}
	return nsBackend{}
}

// bring builds the lab on b and writes its inventory to out ("" = inside the lab's
// folder); on an error, what was built is taken down again.
func (l *Lab) bring(ctx context.Context, b backend, out string) (err error) {
	defer func() {
		if err != nil {
			// Leave nothing half-built behind.
			b.teardown(context.WithoutCancel(ctx), l)
		}
	}()
	if err := l.save(); err != nil {
		return err
	}
	if err := b.build(ctx, l); err != nil {
		return err
	}
	return l.finish(out, func() error { return b.writeInventory(l) })
}

// nsBackend is the local lab: network namespaces on veths, an sshd in each.
type nsBackend struct{}

func (nsBackend) build(ctx context.Context, l *Lab) error {
	if err := l.links(ctx); err != nil {
		return err
	}
	return l.sshd(ctx)
}

func (nsBackend) writeInventory(l *Lab) error                { return l.writeInventory() }
func (nsBackend) teardown(ctx context.Context, l *Lab) error { return l.nsDown(ctx) }

// finish writes the lab's inventory to out ("" = inside the lab's folder) with
// write, and saves the lab's state.
func (l *Lab) finish(out string, write func() error) error {
	if out == "" {
		out = filepath.Join(l.Dir, "lab.yaml")
	}
	var err error
	if l.Inventory, err = filepath.Abs(out); err != nil {
		return err
	}
	if err := write(); err != nil {
		return err
	}
	return l.save()
}

// claim takes the first free lab number for labs named prefix+N; making its folder
// is the claim, so two `testbed up` at once never pick the same one. A number whose
// namespace (netns(N)) is still there, left by a lab whose folder is gone, is skipped.
func claim(prefix string, most int, netns func(int) string) (int, string, error) {
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return 0, "", fmt.Errorf("create %s: %w", StateDir, err)
	}
	for n := 0; n < most; n++ {
		dir := filepath.Join(StateDir, fmt.Sprintf("%s%d", prefix, n))
		if fileExists(filepath.Join("/run/netns", netns(n))) {
			continue
		}
		if err := os.Mkdir(dir, 0o700); err == nil {
			return n, dir, nil
		} else if !errors.Is(err, os.ErrExist) {
			return 0, "", fmt.Errorf("create %s: %w", dir, err)
		}
	}
	return 0, "", fmt.Errorf("all %d slots for %sN labs are taken: `bloatbench testbed down` removes them", most, prefix)
}

func (l *Lab) save() error {
	b, _ := json.MarshalIndent(l, "", "  ")
	if err := os.WriteFile(filepath.Join(l.Dir, "state.json"), b, 0o600); err != nil {
		return fmt.Errorf("save lab state: %w", err)
	}
	return nil
}

func (l *Lab) links(ctx context.Context) error {
	c, s := l.Hosts[0], l.Hosts[1]
	q := strconv.Itoa(l.Options.Queues)
	tmpC, tmpS := fmt.Sprintf("bb%dtc", l.Index), fmt.Sprintf("bb%dts", l.Index)
	steps := [][]string{
		{"ip", "netns", "add", c.NetNS},
		{"ip", "netns", "add", s.NetNS},
		{"ip", "link", "add", tmpC, "numtxqueues", q, "numrxqueues", q, "type", "veth", "peer", "name", tmpS, "numtxqueues", q, "numrxqueues", q},
	}
	for _, h := range []struct {
		n   Node
		tmp string
	}{{c, tmpC}, {s, tmpS}} {
		steps = append(steps,
			[]string{"ip", "link", "set", h.tmp, "netns", h.n.NetNS},
			[]string{"ip", "-n", h.n.NetNS, "link", "set", h.tmp, "name", TestDev},
			[]string{"ip", "-n", h.n.NetNS, "addr", "add", h.n.TestIP + "/24", "dev", TestDev},
			[]string{"ip", "-n", h.n.NetNS, "link", "set", TestDev, "up"},
		)
		steps = append(steps, mgmtSteps(h.n)...)
		if l.Options.IPv6 {
			steps = append(steps,
				[]string{"ip", "netns", "exec", h.n.NetNS, "sysctl", "-q", "-w", "net.ipv6.conf." + TestDev + ".disable_ipv6=0"},
				[]string{"ip", "-n", h.n.NetNS, "-6", "addr", "add", h.n.TestIP6 + "/64", "dev", TestDev, "nodad"})
		}
		if l.Options.GSO == "off" {
			steps = append(steps, []string{"ip", "netns", "exec", h.n.NetNS, "ethtool", "-K", TestDev, "gso", "off", "tso", "off", "gro", "off"})
		}
		steps = append(steps, l.shaping(h.n.NetNS)...)
	}
	steps = append(steps, pairSteps(l.Hosts, l.Options.GSO == "off")...)
	for _, st := range steps {
		if err := run(ctx, st...); err != nil {
			return err
		}
	}
	return nil
}

// mgmtSteps give a node its management link from the host, and what every
// node's namespace needs.
func mgmtSteps(n Node) [][]string {
	mg := n.HostDev + "x"
	return [][]string{
		{"ip", "link", "add", n.HostDev, "type", "veth", "peer", "name", mg},
		{"ip", "link", "set", mg, "netns", n.NetNS},
		{"ip", "-n", n.NetNS, "link", "set", mg, "name", "mgmt0"},
		{"ip", "addr", "add", n.HostIP + "/30", "dev", n.HostDev},
		{"ip", "-n", n.NetNS, "addr", "add", n.MgmtIP + "/30", "dev", "mgmt0"},
		{"ip", "link", "set", n.HostDev, "up"},
		{"ip", "-n", n.NetNS, "link", "set", "lo", "up"},
		{"ip", "-n", n.NetNS, "link", "set", "mgmt0", "up"},
		// A new namespace lets no group use ICMP sockets; hosts (systemd's
		// sysctl defaults) let every group: a login that is not root pings too.
		{"ip", "netns", "exec", n.NetNS, "sysctl", "-q", "-w", "net.ipv4.ping_group_range=0 2147483647"},
	}
}

// pairSteps build the nodes of pairs 2 and up: each on an access link from the
// first pair's node of its role, which forwards, with a default route through
// it; and each side's route to the other side's access links over the test link.
// With gsoOff the access links' ends have GSO, TSO and GRO off as test0 has: a
// super-packet built there would reach the bottleneck whole.
func pairSteps(nodes []Node, gsoOff bool) [][]string {
	var steps [][]string
	c, s := nodes[0], nodes[1]
	for i, n := range nodes[2:] {
		if i < 2 {
			// The first extra pair's nodes: the first pair's turn into routers.
			steps = append(steps, []string{"ip", "netns", "exec", n.Via, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"})
		}
		steps = append(steps,
			[]string{"ip", "netns", "add", n.NetNS},
			[]string{"ip", "-n", n.Via, "link", "add", n.AccessDev, "type", "veth", "peer", "name", TestDev, "netns", n.NetNS},
			[]string{"ip", "-n", n.Via, "addr", "add", n.Gateway + "/30", "dev", n.AccessDev},
			[]string{"ip", "-n", n.NetNS, "addr", "add", n.TestIP + "/30", "dev", TestDev},
			[]string{"ip", "-n", n.Via, "link", "set", n.AccessDev, "up"},
			[]string{"ip", "-n", n.NetNS, "link", "set", TestDev, "up"},
			[]string{"ip", "-n", n.NetNS, "route", "add", "default", "via", n.Gateway},
		)
		if gsoOff {
			steps = append(steps,
				[]string{"ip", "netns", "exec", n.NetNS, "ethtool", "-K", TestDev, "gso", "off", "tso", "off", "gro", "off"},
				[]string{"ip", "netns", "exec", n.Via, "ethtool", "-K", n.AccessDev, "gso", "off", "tso", "off", "gro", "off"})
		}
		steps = append(steps, mgmtSteps(n)...)
	}
	if len(nodes) > 2 {
		// The access links of each side are one /24: 198.18.(64+n) and 198.19.(64+n).
		cnet, snet := accessNet(nodes[2].TestIP), accessNet(nodes[3].TestIP)
		steps = append(steps,
			[]string{"ip", "-n", c.NetNS, "route", "add", snet, "via", s.TestIP, "dev", TestDev},
			[]string{"ip", "-n", s.NetNS, "route", "add", cnet, "via", c.TestIP, "dev", TestDev},
		)
	}
	return steps
}

// accessNet is the /24 of an access link's address.
func accessNet(ip string) string {
	return ip[:strings.LastIndexByte(ip, '.')] + ".0/24"
}

// Shaping is the lab's qdisc on each end of its test link, as a setup: htb at the
// rate with the queue under it, the queue alone at the root, or nil (the kernel's
// default) for neither.
func (o Options) Shaping() *qdisc.Setup {
	s := &qdisc.Setup{Name: "lab", Rate: o.Rate}
	if m := queueRE.FindStringSubmatch(o.Queue); m != nil {
		s.Root = &qdisc.Qdisc{Kind: m[1], Params: map[string]string{"limit": m[2]}}
	}
	if s.Rate == "" && s.Root == nil {
		return nil
	}
	return s
}

// shaping is the commands of the lab's shaping (Options.Shaping) on one end of the
// test link, in namespace ns.
func (l *Lab) shaping(ns string) [][]string {
	s := l.Options.Shaping()
	if s == nil {
		return nil
	}
	return inNetNS(ns, s.Commands(TestDev, 1))
}

// inNetNS are tc commands run in namespace ns: -n, not ip netns exec's fork.
func inNetNS(ns string, ops []qdisc.Op) [][]string {
	var out [][]string
	for _, o := range ops {
		out = append(out, append([]string{o.Argv[0], "-n", ns}, o.Argv[1:]...))
	}
	return out
}

func (l *Lab) sshd(ctx context.Context) error {
	userKey, err := newKey(filepath.Join(l.Dir, "id_ed25519"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(l.Dir, "authorized_keys"), ssh.MarshalAuthorizedKey(userKey), 0o600); err != nil {
		return fmt.Errorf("write authorized_keys: %w", err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return fmt.Errorf("create /run/sshd: %w", err)
	}
	sshd, _ := lookPath("sshd")
	// The lab is a clean host: its sessions get a HOME of their own, so the login
	// shell reads no rc file of this machine's (root's ~/.bashrc may run pyenv, which
	// costs every SSH command half a second, or a minute behind a stale lock), and
	// what the agent caches stays in the lab's folder, not in root's home.
	home := filepath.Join(l.Dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("create the lab's home: %w", err)
	}
	login := "root"
	if u := l.Options.User; u != "" {
		login = u
		if err := l.user(ctx, home); err != nil {
			return err
		}
	}
	var known []string
	for _, h := range l.Hosts {
		keyFile := filepath.Join(l.Dir, h.Role+"_host_ed25519_key")
		hostKey, err := newKey(keyFile)
		if err != nil {
			return err
		}
		known = append(known, knownhosts.Line([]string{h.MgmtIP}, hostKey))
		cfg := filepath.Join(l.Dir, h.Role+"_sshd_config")
		conf := strings.Join([]string{
			"ListenAddress " + h.MgmtIP,
			"Port 22",
			"HostKey " + keyFile,
			"PidFile " + filepath.Join(l.Dir, h.Role+"_sshd.pid"),
			// One authorized_keys for the lab, and only its login may use it.
			"AuthorizedKeysFile " + filepath.Join(l.Dir, "authorized_keys"),
			"AllowUsers " + login,
			"PermitRootLogin prohibit-password",
			"PasswordAuthentication no",
			"KbdInteractiveAuthentication no",
			"UsePAM no",
			"StrictModes no",
			"PrintMotd no",
			"SetEnv HOME=" + home,
			"MaxSessions 64",
			"MaxStartups 64",
			"",
		}, "\n")
		if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
			return fmt.Errorf("write sshd config: %w", err)
		}
		if err := run(ctx, "ip", "netns", "exec", h.NetNS, sshd, "-f", cfg, "-E", filepath.Join(l.Dir, h.Role+"_sshd.log")); err != nil {
			return err
		}
		if err := waitPort(ctx, net.JoinHostPort(h.MgmtIP, "22"), 10*time.Second); err != nil {
			log, _ := os.ReadFile(filepath.Join(l.Dir, h.Role+"_sshd.log"))
			return fmt.Errorf("sshd in %s: %w; its log: %s", h.NetNS, err, strings.TrimSpace(string(log)))
		}
	}
	return os.WriteFile(filepath.Join(l.Dir, "known_hosts"), []byte(strings.Join(known, "\n")+"\n"), 0o600)
}

func (l *Lab) writeInventory() error {
	inv := &inventory.Inventory{Hosts: map[string]*inventory.Host{}, Client: "client", Server: "server", Testbed: l.Name}
	for k := 2; k <= l.Options.Pairs; k++ {
		if k == 2 {
			inv.Pairs = []inventory.Pair{{Client: "client", Server: "server"}}
		}
		inv.Pairs = append(inv.Pairs, inventory.Pair{Client: fmt.Sprintf("client%d", k), Server: fmt.Sprintf("server%d", k)})
	}
	for _, h := range l.Hosts {
		login, ip := "root", h.TestIP
		if l.Options.User != "" {
			login = l.Options.User
		}
		if l.Options.IPv6 {
			ip = h.TestIP6
		}
		inv.Hosts[h.Role] = &inventory.Host{SSH: login + "@" + h.MgmtIP, TestIP: ip,
			IdentityFile: filepath.Join(l.Dir, "id_ed25519"), KnownHosts: filepath.Join(l.Dir, "known_hosts")}
		if h.Via == "" {
			inv.Bottleneck = append(inv.Bottleneck, inventory.Bottleneck{Host: h.Role, Dev: TestDev})
		}
	}
	shape := "unshaped"
	if l.Options.Rate != "" {
		shape = "htb " + l.Options.Rate
	}
	if l.Options.Queue != "" {
		shape += ", queue " + l.Options.Queue
	}
	if l.Options.GSO == "off" {
		shape += ", gso/tso/gro off"
	}
	if l.Options.IPv6 {
		shape += fmt.Sprintf(", dual-stack: test_ip is IPv6, IPv4 is %s and %s", l.Hosts[0].TestIP, l.Hosts[1].TestIP)
	}
	if l.Options.Pairs > 1 {
		shape += fmt.Sprintf(", %d client/server pairs routed through client and server", l.Options.Pairs)
	}
	if u := l.Options.User; u != "" {
		shape += ", login " + u
		if l.Options.Sudo {
			shape += " with passwordless sudo for the agent"
		} else {
			shape += " without sudo"
		}
	}
	comment := fmt.Sprintf("# Local lab %s (%s), written by `bloatbench testbed up`.\n# `bloatbench testbed down -H %s` removes it.\n", l.Name, shape, filepath.Base(l.Inventory))
	return inv.Write(l.Inventory, comment)
}

// user prepares the lab's login that is not root: the system user (made when
// missing), the lab's folder open to it for the way to its home, the home and the
// authorized_keys its own (sshd reads that file as the user), and with Sudo the
// lab's sudoers drop-in.
func (l *Lab) user(ctx context.Context, home string) error {
	name := l.Options.User
	u, err := user.Lookup(name)
	if err != nil {
		// A password of "*" matches none, but unlike useradd's "!" it does not lock
		// the account: sshd without PAM refuses locked accounts, keys or not.
		if err := run(ctx, "useradd", "--system", "--shell", "/bin/sh", "--home-dir", home, "--no-create-home", "--password", "*", name); err != nil {
			return err
		}
		l.UserCreated = true
		if err := l.save(); err != nil {
			return err
		}
		if u, err = user.Lookup(name); err != nil {
			return fmt.Errorf("user %s: %w", name, err)
		}
	}
	// OpenSSH takes a password field that starts with "!" for a locked account.
	if out, err := exec.CommandContext(ctx, "getent", "shadow", name).Output(); err == nil {
		if f := strings.Split(string(out), ":"); len(f) > 1 && strings.HasPrefix(f[1], "!") {
			return fmt.Errorf("user %s's account is locked, and sshd refuses locked accounts even with a key: unlock it without "+
				"giving it a password (usermod -p '*' %s), or choose another --user", name, name)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range []string{home, filepath.Join(l.Dir, "authorized_keys")} {
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("give %s to %s: %w", p, name, err)
		}
	}
	if err := os.Chmod(l.Dir, 0o711); err != nil {
		return err
	}
	if !l.Options.Sudo {
		return nil
	}
	// Only the agents in the lab's home, as root, without a password; sudo ignores
	// files whose names have a dot until this one is checked and renamed.
	rule := fmt.Sprintf("# bloatbench lab %s: `bloatbench testbed down` removes this file\n%s\n", l.Name,
		remote.SudoersLine(name, filepath.Join(home, ".cache", "bloatbench", "agent"), false))
	final := filepath.Join("/etc/sudoers.d", "bloatbench-"+l.Name)
	tmp := final + ".new"
	if err := os.WriteFile(tmp, []byte(rule), 0o440); err != nil {
		return fmt.Errorf("write the lab's sudoers rule: %w", err)
	}
	visudo, _ := lookPath("visudo")
	if err := run(ctx, visudo, "-c", "-q", "-f", tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return err
	}
	l.Sudoers = final
	return l.save()
}

func newKey(path string) (ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "bloatbench lab")
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, fmt.Errorf("write key: %w", err)
	}
	return ssh.NewPublicKey(pub)
}

func waitPort(ctx context.Context, addr string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing answers on %s after %v", addr, within)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Down removes the named lab, or every lab when name is "" (every VM lab when vmOnly).
func Down(ctx context.Context, name string, vmOnly bool) error {
	entries, err := os.ReadDir(StateDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", StateDir, err)
	}
	var errs []error
	found := false
	for _, e := range entries {
		if name != "" && e.Name() != name {
			continue
		}
		found = true
		l := &Lab{Name: e.Name(), Dir: filepath.Join(StateDir, e.Name())}
		if b, err := os.ReadFile(filepath.Join(l.Dir, "state.json")); err == nil {
			json.Unmarshal(b, l)
		}
		if vmOnly && l.VM == nil && !strings.HasPrefix(e.Name(), "bbvm") {
			continue
		}
		if l.VM == nil && strings.HasPrefix(e.Name(), "bbvm") {
			// A VM lab killed before it saved its state: its namespace has its name.
			l.VM = &VMState{NetNS: e.Name()}
		}
		if l.Hosts == nil && l.VM == nil {
			if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "bb")); err == nil {
				l.Index, l.Hosts = n, plan(n, 1)
				// The nodes of further pairs, by their namespaces' names (their
				// management veths go with the namespaces).
				more, _ := filepath.Glob(filepath.Join("/run/netns", l.Name+"-*"))
				for _, ns := range more {
					if ns := filepath.Base(ns); ns != l.Hosts[0].NetNS && ns != l.Hosts[1].NetNS {
						l.Hosts = append(l.Hosts, Node{NetNS: ns})
					}
				}
			}
		}
		errs = append(errs, l.down(ctx))
	}
	if name != "" && !found {
		return fmt.Errorf("no lab %q is up (labs live in %s)", name, StateDir)
	}
	return errors.Join(errs...)
}

// down removes what the lab made, by its backend.
func (l *Lab) down(ctx context.Context) error { return l.backend().teardown(ctx, l) }

// nsDown removes what a local lab made: its processes, namespaces (which take their
// veths with them), the host's management ends and the folder.
func (l *Lab) nsDown(ctx context.Context) error {
	var errs []error
	for _, h := range l.Hosts {
		if out, err := exec.CommandContext(ctx, "ip", "netns", "pids", h.NetNS).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if _, err := os.Stat(filepath.Join("/run/netns", h.NetNS)); err == nil {
			if err := run(ctx, "ip", "netns", "del", h.NetNS); err != nil {
				errs = append(errs, err)
			}
		}
		if h.HostDev != "" && linkExists(h.HostDev) {
			// Deleting the namespace deletes the veth pair too, but in the kernel's
			// own time: the host's end may vanish between the look and the delete.
			if err := run(ctx, "ip", "link", "del", h.HostDev); err != nil && linkExists(h.HostDev) {
				errs = append(errs, err)
			}
		}
	}
	for _, tmp := range []string{fmt.Sprintf("bb%dtc", l.Index), fmt.Sprintf("bb%dts", l.Index)} {
		if linkExists(tmp) {
			run(ctx, "ip", "link", "del", tmp)
		}
	}
	// The sudoers drop-in by its name, also when the state was never saved.
	if sf := filepath.Join("/etc/sudoers.d", "bloatbench-"+l.Name); fileExists(sf) || fileExists(sf+".new") {
		for _, f := range []string{sf, sf + ".new"} {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if l.UserCreated && !userInOtherLab(l.Name, l.Options.User) {
		if err := run(ctx, "userdel", l.Options.User); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(l.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", l.Dir, err))
	}
	return errors.Join(errs...)
}

// userInOtherLab says whether a lab other than name logs in as user.
func userInOtherLab(name, login string) bool {
	entries, _ := os.ReadDir(StateDir)
	for _, e := range entries {
		if e.Name() == name {
			continue
		}
		var o struct {
			Options Options `json:"options"`
		}
		if b, err := os.ReadFile(filepath.Join(StateDir, e.Name(), "state.json")); err == nil && json.Unmarshal(b, &o) == nil && o.Options.User == login {
			return true
		}
	}
	return false
}

func run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func lookPath(tool string) (string, error) {
	if p, err := exec.LookPath(tool); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, tool); fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", tool)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func linkExists(name string) bool { _, err := net.InterfaceByName(name); return err == nil }
