// Package inventory reads hosts.yaml: which endpoints a run uses, how to reach them
// over SSH, their addresses on the test network, and the bottleneck devices.
//
// Reading is strict: an unknown key, a missing host, a bad address or duration is an
// error that names the file, the line and the key, and says what to write instead.
package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bloatbench/bloatbench/internal/tcrate"
	"github.com/bloatbench/bloatbench/internal/yamlkeys"
)

// Inventory is a parsed hosts.yaml.
type Inventory struct {
	Path   string           `yaml:"-"`
	Hosts  map[string]*Host `yaml:"hosts"`
	Client string           `yaml:"client,omitempty"`
	Server string           `yaml:"server,omitempty"`
	// Pairs lists the client/server pairs of a run with several (load beyond
	// what one sender can do): every pair runs the test's client and server jobs,
	// its series named for it. The first pair is client and server, which may
	// then be left out.
	Pairs      []Pair       `yaml:"pairs,omitempty"`
	Bottleneck []Bottleneck `yaml:"bottleneck"`
	// Setups are qdisc setups declared here, by name, beside the built-in ones.
	Setups map[string]*SetupSpec `yaml:"setups,omitempty"`
	// Testbed names the local lab this inventory was written for, so that
	// `testbed down -H FILE` knows what to remove.
	Testbed string `yaml:"testbed,omitempty"`
	// PathDevices lists the devices where path emulation (netem) goes: off the
	// bottleneck, so that the qdisc under test stays the one that queues, e.g. a
	// router's far side or the endpoints' own devices behind a router.
	PathDevices []Bottleneck `yaml:"path_devices,omitempty"`
	// Netem is the path emulation every run of this inventory puts on the path
	// devices (a setup's own netem: replaces it for that setup's runs).
	Netem *NetemSpec `yaml:"netem,omitempty"`

	lines map[string]int
}

// SetupSpec is a qdisc setup as written in the inventory; package qdisc checks it
// and turns it into commands.
type SetupSpec struct {
	// Extends names a built-in or another inventory setup whose keys this one overrides.
	Extends string `yaml:"extends,omitempty"`
	Title   string `yaml:"title,omitempty"`
	// Root is the qdisc at the root (or, with Rate, under the htb shaper).
	Root *QdiscSpec `yaml:"root,omitempty"`
	// MQ puts mq at the root with this qdisc under every tx queue.
	MQ *QdiscSpec `yaml:"mq,omitempty"`
	// Params override the leaf qdisc's parameters (of Root or MQ, inherited or not).
	Params map[string]string `yaml:"params,omitempty"`
	// Rate shapes with an htb class at this rate, with Root under it.
	Rate string   `yaml:"rate,omitempty"`
	BQL  *BQLSpec `yaml:"bql,omitempty"`
	// Offloads sets gso, tso, gro: on or off.
	Offloads map[string]string `yaml:"offloads,omitempty"`
	// Channels sets the device's queues (ethtool -L): rx, tx, other or combined ->
	// count. Seed 004 compares one tx queue with many.
	Channels map[string]int `yaml:"channels,omitempty"`
	// Sysctls are set on every host of the run (tcp_ecn and the congestion control
	// matter at the endpoints, default_qdisc where devices come up): key -> value.
	Sysctls map[string]string `yaml:"sysctls,omitempty"`
	// Ingress shapes what the bottleneck receives: an IFB device takes the
	// device's ingress through a mirred filter, and this qdisc (under an htb class
	// at Rate when given) runs on the IFB's egress, as sqm-scripts does.
	Ingress *IngressSpec `yaml:"ingress,omitempty"`
	// Netem emulates the path (delay, loss, reordering, rate) on the inventory's
	// path_devices: for this setup's runs.
	Netem *NetemSpec `yaml:"netem,omitempty"`
	// RateSchedule changes the rate of the htb shaper Rate makes during each run,
	// step by step: the bottleneck's response to a link that slows down and
	// speeds up again (a radio's, a shared line's).
	RateSchedule []RateStepSpec `yaml:"rate_schedule,omitempty"`
	// Steer puts every packet the bottleneck device sends on one of its tx
	// queues, so that a test's flows and probes meet in one of mq's children.
	Steer *SteerSpec `yaml:"steer,omitempty"`
}

// SteerSpec names the tx queue a device's packets are steered to (XPS: every CPU
// mapped to that queue alone), counted from 0 as sysfs names them (tx-0 is mq's
// child 1:1).
type SteerSpec struct {
	TxQueue *int `yaml:"tx_queue"`
}

// RateStepSpec is one step of a rate schedule: from At (a time from the run's
// start, such as 10s or 1m30s) the shaper's rate is Rate (a tc rate, 25mbit).
type RateStepSpec struct {
	At   string `yaml:"at"`
	Rate string `yaml:"rate"`
}

// IngressSpec is the qdisc that shapes a device's ingress on its IFB.
type IngressSpec struct {
	Root *QdiscSpec `yaml:"root,omitempty"`
	Rate string     `yaml:"rate,omitempty"`
}

// NetemSpec is a netem qdisc in tc-netem's words. Delay and loss apply each way
// the device sends: a path device on each end with delay D gives an RTT of 2D.
type NetemSpec struct {
	Delay        string `yaml:"delay,omitempty"`        // 25ms
	Jitter       string `yaml:"jitter,omitempty"`       // 2ms, with delay
	Distribution string `yaml:"distribution,omitempty"` // normal, pareto, paretonormal, uniform
	Loss         string `yaml:"loss,omitempty"`         // 0.5%
	Reorder      string `yaml:"reorder,omitempty"`      // 1%, with delay
	Rate         string `yaml:"rate,omitempty"`         // 100mbit
	Limit        int    `yaml:"limit,omitempty"`        // packets netem holds (tc's default is 1000)
	// L4S is the netem for packets marked ECT(1) or CE, the L4S identifier (RFC
	// 9331), in place of this one's: so that a scalable flow and a classic flow
	// cross paths of their own round trips (rtt_fair). Nil: one netem for all.
	L4S *NetemSpec `yaml:"l4s,omitempty"`
}

// QdiscSpec is one qdisc: its kind and tc parameters (a flag has an empty value).
type QdiscSpec struct {
	Kind   string            `yaml:"kind"`
	Params map[string]string `yaml:"params,omitempty"`
}

// BQLSpec sets byte queue limits on every tx queue of a bottleneck device.
type BQLSpec struct {
	LimitMax *int `yaml:"limit_max,omitempty"`
	LimitMin *int `yaml:"limit_min,omitempty"`
}

// Where returns "file:line: key" for a dotted key, for errors about it.
func (inv *Inventory) Where(key string) string {
	line := inv.lines[key]
	for k := key; line == 0 && k != ""; {
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
		line = inv.lines[k]
	}
	if line == 0 {
		return fmt.Sprintf("%s: %s", inv.Path, key)
	}
	return fmt.Sprintf("%s:%d: %s", inv.Path, line, key)
}

// Host is one endpoint.
type Host struct {
	Name string `yaml:"-"`
	// SSH is [user@]host[:port], an alias from ~/.ssh/config, or LocalSSH.
	SSH    string `yaml:"ssh"`
	TestIP string `yaml:"test_ip"`
	// IdentityFile and KnownHosts add to (and come before) what ~/.ssh/config gives.
	IdentityFile string `yaml:"identity_file,omitempty"`
	KnownHosts   string `yaml:"known_hosts,omitempty"`
	// AgentPath is a bloatbench binary already on the host, for endpoints whose OS or
	// architecture differs from the controller's.
	AgentPath      string   `yaml:"agent_path,omitempty"`
	ConnectTimeout Duration `yaml:"connect_timeout,omitempty"`
	CommandTimeout Duration `yaml:"command_timeout,omitempty"`
	// Sudo says how a login that is not root gets root for what needs it (applying
	// a setup): true runs the agent as root through `sudo -n` always, false never
	// (a setup on the host is then refused up front), unset (nil) when the run
	// needs root on the host. A root login never uses sudo.
	Sudo *bool `yaml:"sudo,omitempty"`
}

// LocalSSH as a host's ssh: is the controller's own machine: its agent runs as a
// process of the controller, with no SSH login (flent's model, where the machine
// running the test is the client).
const LocalSSH = "local"

// Local says whether the host is the controller's own machine.
func (h *Host) Local() bool { return h.SSH == LocalSSH }

// UseSudo says whether the agent on a host that logs in as user runs through sudo,
// for a run that needs root on the host (needRoot) or not. It is an error when the
// run needs root and the host says sudo: false.
func (h *Host) UseSudo(user string, needRoot bool) (bool, error) {
	if user == "root" {
		return false, nil
	}
	switch {
	case h.Sudo == nil:
		return needRoot, nil
	case *h.Sudo:
		return true, nil
	case needRoot:
		return false, fmt.Errorf("host %s logs in as %s and says sudo: false, but a setup changes its devices, which needs root: "+
			"remove sudo: false (the agent then runs through sudo -n), or log in as root", h.Name, user)
	}
	return false, nil
}

// Pair is one client and one server.
type Pair struct {
	Client string `yaml:"client"`
	Server string `yaml:"server"`
}

// PairsOf returns the run's pairs: Pairs when several are listed, else the one
// of client and server.
func (inv *Inventory) PairsOf() []Pair {
	if len(inv.Pairs) > 0 {
		return inv.Pairs
	}
	return []Pair{{Client: inv.Client, Server: inv.Server}}
}

// MaxPairs bounds the pairs of one run.
const MaxPairs = 64

// Bottleneck is a device whose egress queue a setup configures.
type Bottleneck struct {
	Host string `yaml:"host"`
	Dev  string `yaml:"dev"`
	// Rate is the device's line rate where the kernel cannot tell it (a virtual
	// NIC, a link that a modem or the host of a VM holds to its rate), in tc's
	// words: what a run sets the rate its queue drained at beside, when its setup
	// shapes with none of its own.
	Rate string `yaml:"rate,omitempty"`
}

// Duration is a time.Duration written as Go writes it ("10s", "1m30s").
type Duration time.Duration

// UnmarshalYAML parses "10s"-style durations.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v <= 0 {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration: write it like 10s or 1m30s", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration back as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Or returns d, or def when d is unset.
func (d Duration) Or(def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}

// Error is an inventory problem at a place in the file.
type Error struct {
	Path string
	Line int
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	loc := e.Path
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Key != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

// Load reads and checks an inventory file.
func Load(path string) (*Inventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	return Parse(path, data)
}

// Parse checks an inventory's bytes; path names it in errors and anchors relative paths.
func Parse(path string, data []byte) (*Inventory, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(path, err, nil)
	}
	lines := map[string]int{}
	indexLines(&root, "", lines)
	var inv Inventory
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&inv); err != nil {
		return nil, yamlError(path, err, lines)
	}
	inv.Path = path
	inv.lines = lines
	if err := inv.check(lines); err != nil {
		return nil, err
	}
	return &inv, nil
}

var lineMsg = regexp.MustCompile(`^line (\d+): (.*)$`)

// yamlError rewrites yaml.v3's "line 3: field bogus not found in type inventory.Host"
// as "hosts.yaml:3: hosts.client.bogus: unknown key bogus; valid here: ...".
func yamlError(path string, err error, lines map[string]int) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		keyAt := map[int]string{}
		for k, l := range lines {
			if old, ok := keyAt[l]; !ok || len(k) > len(old) {
				keyAt[l] = k
			}
		}
		keys := yamlkeys.Of(Inventory{})
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			m = keys.Explain(m)
			msgs[i] = path + ": " + m
			if g := lineMsg.FindStringSubmatch(m); g != nil {
				n, _ := strconv.Atoi(g[1])
				msgs[i] = (&Error{Path: path, Line: n, Key: keyAt[n], Msg: g[2]}).Error()
			}
		}
		return fmt.Errorf("%s (compare with hosts.example.yaml)", strings.Join(msgs, "; "))
	}
	if err.Error() == "EOF" {
		return &Error{Path: path, Msg: "the file is empty: copy hosts.example.yaml and edit it"}
	}
	return fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
}

// KeyLines is the line of every mapping key of a YAML document, by its dotted path
// (list items as key[i]): what file:line errors are made of, for the inventory and
// the other strict files (batch files).
func KeyLines(root *yaml.Node) map[string]int {
	lines := map[string]int{}
	indexLines(root, "", lines)
	return lines
}

// indexLines records the line of every mapping key by its dotted path.
func indexLines(n *yaml.Node, prefix string, lines map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			indexLines(c, prefix, lines)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := k.Value
			if prefix != "" {
				p = prefix + "." + k.Value
			}
			lines[p] = k.Line
			indexLines(n.Content[i+1], p, lines)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", prefix, i)
			lines[p] = c.Line
			indexLines(c, p, lines)
		}
	}
}

func (inv *Inventory) check(lines map[string]int) error {
	errAt := func(key, format string, args ...any) error {
		line := lines[key]
		for k := key; line == 0 && k != ""; {
			i := strings.LastIndexAny(k, ".[")
			if i < 0 {
				break
			}
			k = k[:i]
			line = lines[k]
		}
		return &Error{Path: inv.Path, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	if len(inv.Hosts) == 0 {
		return errAt("hosts", "no hosts: list the endpoints under hosts:, as hosts.example.yaml shows")
	}
	names := make([]string, 0, len(inv.Hosts))
	for name := range inv.Hosts {
		names = append(names, name)
	}
	sort.Strings(names)
	dir := filepath.Dir(inv.Path)
	for _, name := range names {
		h := inv.Hosts[name]
		key := "hosts." + name
		if err := CheckHostName(name); err != nil {
			return errAt(key, "%v", err)
		}
		if h == nil {
			return errAt(key, "empty host: give it at least ssh: and test_ip:")
		}
		h.Name = name
		if h.SSH == "" {
			return errAt(key, "missing ssh: write user@address[:port] or an alias from ~/.ssh/config")
		}
		if h.SSH == LocalSSH {
			// This machine: its agent is a process of the controller's, no login.
			for k, v := range map[string]string{"identity_file": h.IdentityFile, "known_hosts": h.KnownHosts, "agent_path": h.AgentPath} {
				if v != "" {
					return errAt(key+"."+k, "ssh: local runs the agent on this machine without SSH: remove %s:", k)
				}
			}
		} else if _, _, _, err := SplitSSH(h.SSH); err != nil {
			return errAt(key+".ssh", "%v", err)
		}
		if h.TestIP == "" {
			return errAt(key, "missing test_ip: the host's address on the test network")
		}
		if net.ParseIP(h.TestIP) == nil {
			return errAt(key+".test_ip", "%q is not an IP address: write the address test traffic goes to, e.g. 10.0.0.2", h.TestIP)
		}
		var err error
		if h.IdentityFile, err = resolvePath(dir, h.IdentityFile); err != nil {
			return errAt(key+".identity_file", "%v", err)
		}
		if h.KnownHosts, err = resolvePath(dir, h.KnownHosts); err != nil {
			return errAt(key+".known_hosts", "%v", err)
		}
	}
	if len(inv.Pairs) > MaxPairs {
		return errAt("pairs", "%d pairs: at most %d", len(inv.Pairs), MaxPairs)
	}
	if len(inv.Pairs) > 0 {
		// client: and server: may be left out, or must be the first pair.
		first := inv.Pairs[0]
		for _, role := range []struct{ key, val, pair string }{{"client", inv.Client, first.Client}, {"server", inv.Server, first.Server}} {
			if role.val != "" && role.val != role.pair {
				return errAt(role.key, "%s: is %q but the first pair's %s is %q: leave %s: out (pairs: lists every pair) or make them the same",
					role.key, role.val, role.key, role.pair, role.key)
			}
		}
		inv.Client, inv.Server = first.Client, first.Server
	}
	seen := map[Pair]int{}
	for i, p := range inv.PairsOf() {
		key := func(k string) string { return k }
		if len(inv.Pairs) > 0 {
			key = func(k string) string { return fmt.Sprintf("pairs[%d].%s", i, k) }
		}
		for _, role := range []struct{ key, val string }{{"client", p.Client}, {"server", p.Server}} {
			if role.val == "" {
				return errAt(key(role.key), "missing %s: name the host that %s (one of %s)", role.key,
					map[string]string{"client": "originates streams and pings", "server": "terminates them"}[role.key], strings.Join(names, ", "))
			}
			if inv.Hosts[role.val] == nil {
				return errAt(key(role.key), "no host %q under hosts: (the hosts are %s)", role.val, strings.Join(names, ", "))
			}
		}
		if p.Client == p.Server {
			return errAt(key("server"), "client and server are both %q: a test needs two endpoints", p.Client)
		}
		if j, ok := seen[p]; ok {
			return errAt(key("client"), "pairs %d and %d are the same (%s to %s): list each pair once", j+1, i+1, p.Client, p.Server)
		}
		seen[p] = i
	}
	for i, b := range inv.Bottleneck {
		key := fmt.Sprintf("bottleneck[%d]", i)
		if inv.Hosts[b.Host] == nil {
			return errAt(key+".host", "no host %q under hosts: (the hosts are %s)", b.Host, strings.Join(names, ", "))
		}
		if err := CheckDevName(b.Dev); err != nil {
			return errAt(key+".dev", "%v", err)
		}
		if b.Rate != "" {
			if _, err := tcrate.Parse(b.Rate); err != nil {
				return errAt(key+".rate", "%v", err)
			}
		}
	}
	for i, p := range inv.PathDevices {
		key := fmt.Sprintf("path_devices[%d]", i)
		if inv.Hosts[p.Host] == nil {
			return errAt(key+".host", "no host %q under hosts: (the hosts are %s)", p.Host, strings.Join(names, ", "))
		}
		if err := CheckDevName(p.Dev); err != nil {
			return errAt(key+".dev", "%v", err)
		}
		if p.Rate != "" {
			return errAt(key+".rate", "a path device has no rate of its own: netem's rate (netem: {rate: 100mbit}) limits the path")
		}
		for _, b := range inv.Bottleneck {
			if b.Host == p.Host && b.Dev == p.Dev {
				return errAt(key, "%s:%s is also a bottleneck: netem there would replace the qdisc under test; put path emulation on another device (a router's far side, or the endpoints behind a router)", p.Host, p.Dev)
			}
		}
	}
	if inv.Netem != nil && len(inv.PathDevices) == 0 {
		return errAt("netem", "netem: needs path_devices: to go on, e.g. path_devices: [{host: server, dev: eth1}]")
	}
	return nil
}

// HomeDir is the user's home directory ($HOME), or an error that names HOME and
// what to do. A path under ~ is never guessed: without HOME it would land relative
// to the working directory, where a later run or restore does not look.
func HomeDir() (string, error) {
	home, err := os.UserHomeDir()
	if err == nil && !filepath.IsAbs(home) {
		err = fmt.Errorf("$HOME is %q, not an absolute path", home)
	}
	if err != nil {
		return "", fmt.Errorf("no home directory (%v): set HOME to the home of the user whose ~/.ssh holds the keys and known_hosts "+
			"(under systemd, give the service User= and Environment=HOME=/home/USER)", err)
	}
	return home, nil
}

func resolvePath(dir, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := HomeDir()
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		return filepath.Join(home, p[1:]), nil
	}
	if filepath.IsAbs(p) {
		return p, nil
	}
	return filepath.Join(dir, p), nil
}

// CheckDevName applies Linux's rules for interface names (dev_valid_name): 1 to 15
// bytes, not "." or "..", no '/', ':' or white space.
func CheckDevName(dev string) error {
	switch {
	case dev == "":
		return errors.New("missing device name")
	case len(dev) > 15:
		return fmt.Errorf("device name %q is longer than Linux allows (15 bytes)", dev)
	case dev == "." || dev == "..":
		return fmt.Errorf("%q is not a device name", dev)
	}
	for _, r := range dev {
		if r == '/' || r == ':' || r <= ' ' || r == 0x7f || r > 0x7e {
			return fmt.Errorf("device name %q has a character Linux does not allow (%q)", dev, r)
		}
	}
	return nil
}

// maxHostName bounds a host name: a name for people, in every series and error.
const maxHostName = 64

// CheckHostName refuses inventory host names that would break what is made of them:
// series names ("qdisc HOST:DEV root drops", which readers split at spaces and at
// the colon), log lines and file names. Letters, digits, '-', '_' and '.', starting
// with a letter or digit.
func CheckHostName(name string) error {
	const rule = "write letters, digits, '-', '_' and '.' only, starting with a letter or digit (the name goes into series names such as \"qdisc NAME:DEV root drops\")"
	switch {
	case name == "":
		return fmt.Errorf("empty host name: %s", rule)
	case len(name) > maxHostName:
		return fmt.Errorf("host name %q is longer than %d bytes", name, maxHostName)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !ok && (i == 0 || !strings.ContainsRune("-_.", r)) {
			if i == 0 && strings.ContainsRune("-_.", r) {
				return fmt.Errorf("host name %q starts with %q: %s", name, r, rule)
			}
			return fmt.Errorf("host name %q has %q: %s", name, r, rule)
		}
	}
	return nil
}

// SplitSSH splits [user@]host[:port]; port is 0 when not given, and host may be an
// alias to look up in ~/.ssh/config.
func SplitSSH(s string) (user, host string, port int, err error) {
	rest := s
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		user, rest = rest[:i], rest[i+1:]
		if user == "" {
			return "", "", 0, fmt.Errorf("%q has an empty user before @", s)
		}
	}
	host = rest
	if strings.HasPrefix(rest, "[") || strings.Count(rest, ":") == 1 {
		h, p, serr := net.SplitHostPort(rest)
		if serr != nil {
			return "", "", 0, fmt.Errorf("%q: %v: write user@address:port, [v6address]:port or an alias", s, serr)
		}
		n, perr := strconv.Atoi(p)
		if perr != nil || n < 1 || n > 65535 {
			return "", "", 0, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, p)
		}
		host, port = h, n
	}
	if host == "" {
		return "", "", 0, fmt.Errorf("%q has no host", s)
	}
	for _, r := range host {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:%", r)) {
			return "", "", 0, fmt.Errorf("%q: %q is not a host name, address or alias", s, host)
		}
	}
	return user, host, port, nil
}

// Role returns the host playing role "client" or "server".
func (inv *Inventory) Role(role string) *Host {
	switch role {
	case "client":
		return inv.Hosts[inv.Client]
	case "server":
		return inv.Hosts[inv.Server]
	}
	return nil
}

// Write saves an inventory (the local lab writes one).
func (inv *Inventory) Write(path, comment string) error {
	data, err := yaml.Marshal(inv)
	if err != nil {
		return fmt.Errorf("encode inventory: %w", err)
	}
	if comment != "" {
		data = append([]byte(comment), data...)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write inventory: %w", err)
	}
	return nil
}
