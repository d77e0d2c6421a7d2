// Package qdisc turns setups (data: a qdisc tree, shaping, BQL limits, offloads) into
// the tc, sysfs and ethtool operations that apply them to a bottleneck device; it
// snapshots a device before, puts it back after, checks both, and parses tc's JSON
// statistics.
package qdisc

import (
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strings"

	"github.com/bloatbench/bloatbench/inventory"
)

// Setup is a resolved, checked setup.
type Setup struct {
	Name  string
	Title string
	// At most one of Root and MQ is set; neither when the setup only shapes the
	// ingress or emulates the path, and leaves the bottleneck's egress as found.
	Root *Qdisc // at the root, or under the htb class when Rate is set
	MQ   *Qdisc // under every tx queue of an mq root
	Rate string // htb shaping rate
	BQL  *BQL
	// Offloads in ethtool's words: gso, tso, gro -> true (on) or false (off).
	Offloads map[string]bool
	// Channels are ethtool -L's counts: rx, tx, other, combined.
	Channels map[string]int
	// Sysctls are set on every host of the run, by their sysctl names.
	Sysctls map[string]string
	// OptionalSysctls are those of Sysctls a kernel may refuse with a warning
	// rather than a failed run (the value a test's flows would like, which older
	// kernels lack), each with who asks.
	OptionalSysctls map[string]string
	// Ingress shapes the bottleneck's ingress on an IFB.
	Ingress *Ingress
	// Netem is tc's words after "netem" for the inventory's path devices, nil for
	// none (the inventory's own netem: then applies, if any); NetemL4S those for
	// the packets marked ECT(1) or CE, nil when they take Netem's.
	Netem, NetemL4S []string
	// L4SNetem is, in a path device's setup (PathSetup), the netem of the
	// packets marked ECT(1) or CE, beside Root's for the others.
	L4SNetem *Qdisc
	// RateSchedule changes Rate during each run, in time order.
	RateSchedule []RateStep
	// Steer puts every packet the device sends on one tx queue (XPS), nil for
	// none.
	Steer   *Steer
	Builtin bool
	// Source says where it was defined: "built-in" or file:line.
	Source string
}

// Qdisc is one qdisc and its tc parameters.
type Qdisc struct {
	Kind   string
	Params map[string]string // "" is a flag without a value
	// Args, when set, are the parameters in tc's order instead: netem reads
	// positional words (delay 25ms 2ms) that a map cannot keep in order.
	Args []string
}

// args are the qdisc's parameters as tc words.
func (q *Qdisc) args() []string {
	if q.Args != nil {
		return q.Args
	}
	return params(q.Params)
}

// Steer is the tx queue, counted from 0 (tx-0, mq's child 1:1), that every CPU
// of the host is mapped to by XPS, and every other queue to none: the kernel then
// picks that queue for each packet the device sends, forwarded or a socket's
// (get_xps_queue comes before the flow hash in netdev_pick_tx). So a test's
// flows and probes, which mq's hash would spread over its children, meet in one
// qdisc. XPS needs neither a filter nor an action module (this kernel has no
// act_skbedit, and tc filters under the root are what a snapshot cannot put
// back), and restore is a sysfs write per queue, as BQL's.
type Steer struct {
	TxQueue int
}

// MaxTxQueue is the highest tx queue a setup may steer to.
const MaxTxQueue = 4095

// BQL limits, bytes.
type BQL struct {
	LimitMax, LimitMin *int
}

// builtins are the mission's setups with the kernel's default parameters.
var builtins = map[string]inventory.SetupSpec{
	"pfifo_fast":        {Title: "PFIFO_FAST", Root: &inventory.QdiscSpec{Kind: "pfifo_fast"}},
	"fq_codel":          {Title: "FQ_CODEL", Root: &inventory.QdiscSpec{Kind: "fq_codel"}},
	"mq+fq_codel":       {Title: "MQ + FQ_CODEL", MQ: &inventory.QdiscSpec{Kind: "fq_codel"}},
	"mq+fq_pie":         {Title: "MQ + FQ_PIE", MQ: &inventory.QdiscSpec{Kind: "fq_pie"}},
	"mq+dualpi2":        {Title: "MQ + DUALPI2", MQ: &inventory.QdiscSpec{Kind: "dualpi2"}},
	"cake":              {Title: "CAKE (split-gso)", Root: &inventory.QdiscSpec{Kind: "cake", Params: map[string]string{"split-gso": ""}}},
	"cake-no-split-gso": {Title: "CAKE (no-split-gso)", Root: &inventory.QdiscSpec{Kind: "cake", Params: map[string]string{"no-split-gso": ""}}},
	"htb+fq_codel":      {Title: "HTB + FQ_CODEL", Root: &inventory.QdiscSpec{Kind: "fq_codel"}, Rate: needsRate},
}

// needsRate marks a built-in whose rate the user must give.
const needsRate = "(needs a rate)"

var (
	kindRE   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,15}$`)
	paramRE  = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	valueRE  = regexp.MustCompile(`^[A-Za-z0-9_.:/+-]{0,64}$`)
	rateRE   = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$`)
	offloads = []string{"gso", "tso", "gro"}
	// channelKinds in ethtool -L's order.
	channelKinds  = []string{"rx", "tx", "other", "combined"}
	sysctlKeyRE   = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z0-9_][a-z0-9_-]*)+$`)
	sysctlValueRE = regexp.MustCompile(`^[A-Za-z0-9_.:/+-]+( [A-Za-z0-9_.:/+-]+)*$`)
)

// BuiltinNames lists the built-in setups, sorted.
func BuiltinNames() []string {
	var n []string
	for k := range builtins {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Names lists every setup: built-ins, then the inventory's.
func Names(inv *inventory.Inventory) []string {
	n := BuiltinNames()
	var own []string
	if inv != nil {
		for k := range inv.Setups {
			if _, ok := builtins[k]; !ok {
				own = append(own, k)
			}
		}
	}
	sort.Strings(own)
	return append(n, own...)
}

// Resolve finds a setup by name, in the inventory (which may be nil) first, then
// the built-ins, following extends, and checks it is complete enough to apply.
func Resolve(name string, inv *inventory.Inventory) (*Setup, error) {
	s, err := Lookup(name, inv)
	if err == nil && s.Rate == needsRate {
		err = fmt.Errorf("%s: setup %s: needs a rate: define one in the inventory, e.g. setups: {htb-100: {extends: %s, rate: 100mbit}}", s.Source, name, name)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NeedsRate says whether the setup is a template that an inventory setup must give
// a rate to.
func (s *Setup) NeedsRate() bool { return s.Rate == needsRate }

// Lookup is Resolve for listing: it also returns templates that need a rate.
func Lookup(name string, inv *inventory.Inventory) (*Setup, error) {
	spec, source, err := merged(name, inv, map[string]bool{})
	if err != nil {
		return nil, err
	}
	s, err := check(name, spec, source)
	if err != nil {
		return nil, err
	}
	_, s.Builtin = builtins[name]
	if inv != nil && inv.Setups[name] != nil {
		s.Builtin = false
	}
	return s, nil
}

func merged(name string, inv *inventory.Inventory, seen map[string]bool) (inventory.SetupSpec, string, error) {
	if seen[name] {
		return inventory.SetupSpec{}, "", fmt.Errorf("setup %s: extends itself in a loop", name)
	}
	seen[name] = true
	if inv != nil {
		if own := inv.Setups[name]; own != nil {
			source := inv.Where("setups." + name)
			if own.Extends == "" {
				return *own, source, nil
			}
			base, _, err := merged(own.Extends, inv, seen)
			if err != nil {
				return inventory.SetupSpec{}, "", fmt.Errorf("%s.extends: %w", source, err)
			}
			return overlay(base, *own), source, nil
		}
	}
	if b, ok := builtins[name]; ok {
		return b, "built-in", nil
	}
	return inventory.SetupSpec{}, "", fmt.Errorf("unknown setup %q: the setups are %s (bloatbench setups lists them; define your own under setups: in the inventory)",
		name, strings.Join(Names(inv), ", "))
}

// overlay puts o's keys over base's.
func overlay(base, o inventory.SetupSpec) inventory.SetupSpec {
	out := base
	out.Extends = ""
	if o.Title != "" {
		out.Title = o.Title
	} else {
		out.Title = ""
	}
	if o.Root != nil || o.MQ != nil {
		out.Root, out.MQ = o.Root, o.MQ
	}
	if o.Rate != "" {
		out.Rate = o.Rate
	}
	if o.BQL != nil {
		out.BQL = o.BQL
	}
	if o.Ingress != nil {
		out.Ingress = o.Ingress
	}
	if len(o.Channels) > 0 {
		out.Channels = maps.Clone(base.Channels)
		if out.Channels == nil {
			out.Channels = map[string]int{}
		}
		maps.Copy(out.Channels, o.Channels)
	}
	out.Sysctls = merge(base.Sysctls, o.Sysctls)
	if o.Netem != nil {
		out.Netem = o.Netem
	}
	if len(o.RateSchedule) > 0 {
		out.RateSchedule = o.RateSchedule
	}
	if o.Steer != nil {
		out.Steer = o.Steer
	}
	out.Offloads = merge(base.Offloads, o.Offloads)
	out.Params = merge(base.Params, o.Params)
	return out
}

// merge is a copy of base with over's keys on top; base itself when over is empty.
func merge(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	m := maps.Clone(base)
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, over)
	return m
}

func check(name string, sp inventory.SetupSpec, source string) (*Setup, error) {
	errf := func(format string, args ...any) error {
		return fmt.Errorf("%s: setup %s: %s", source, name, fmt.Sprintf(format, args...))
	}
	s := &Setup{Name: name, Title: sp.Title, Rate: sp.Rate, Source: source}
	if s.Title == "" {
		s.Title = name
	}
	if sp.Root != nil && sp.MQ != nil || sp.Root == nil && sp.MQ == nil && sp.Ingress == nil && sp.Netem == nil && len(sp.Sysctls) == 0 && len(sp.Channels) == 0 && sp.Steer == nil {
		return nil, errf("give exactly one of root: {kind: ...} or mq: {kind: ...} (or only ingress:, netem:, channels:, steer: or sysctls:, to leave the qdiscs as found)")
	}
	if sp.Steer != nil {
		if sp.Steer.TxQueue == nil || *sp.Steer.TxQueue < 0 || *sp.Steer.TxQueue > MaxTxQueue {
			return nil, errf("steer: give tx_queue: N, the tx queue (0 to %d, as sysfs counts them: 0 is mq's child 1:1) every packet goes to", MaxTxQueue)
		}
		s.Steer = &Steer{TxQueue: *sp.Steer.TxQueue}
	}
	if sp.Ingress != nil {
		in, err := checkIngress(sp.Ingress, errf)
		if err != nil {
			return nil, err
		}
		s.Ingress = in
	}
	if sp.Netem != nil {
		args, err := NetemArgs(sp.Netem, fmt.Sprintf("%s: setup %s: netem", source, name))
		if err != nil {
			return nil, err
		}
		s.Netem = args
		if s.NetemL4S, err = NetemL4SArgs(sp.Netem, fmt.Sprintf("%s: setup %s: netem", source, name)); err != nil {
			return nil, err
		}
	}
	if sp.Root == nil && sp.MQ == nil {
		if sp.Rate != "" && sp.Rate != needsRate {
			return nil, errf("rate (htb shaping) needs root: {kind: ...}, the qdisc under the shaper")
		}
		if len(sp.Params) > 0 {
			return nil, errf("params: set the egress qdisc's parameters, and this setup has none (root: or mq:)")
		}
	} else {
		leafSpec := sp.Root
		if sp.MQ != nil {
			leafSpec = sp.MQ
		}
		leaf, err := checkQdisc(leafSpec, sp.Params, errf)
		if err != nil {
			return nil, err
		}
		if sp.MQ != nil {
			s.MQ = leaf
		} else {
			s.Root = leaf
		}
	}
	switch {
	case s.Rate == needsRate:
	case s.Rate != "" && s.MQ != nil:
		return nil, errf("rate (htb shaping) goes with root:, not mq:")
	case s.Rate != "" && !rateRE.MatchString(s.Rate):
		return nil, errf("rate %q: write a tc rate such as 100mbit", s.Rate)
	}
	if s.Rate != needsRate {
		sched, err := checkSchedule(sp.RateSchedule, s, errf)
		if err != nil {
			return nil, err
		}
		s.RateSchedule = sched
	}
	if sp.BQL != nil {
		for k, v := range map[string]*int{"limit_max": sp.BQL.LimitMax, "limit_min": sp.BQL.LimitMin} {
			if v != nil && (*v < 0 || *v > 1<<30) {
				return nil, errf("bql.%s %d: bytes, from 0 to %d", k, *v, 1<<30)
			}
		}
		if sp.BQL.LimitMax != nil || sp.BQL.LimitMin != nil {
			s.BQL = &BQL{LimitMax: sp.BQL.LimitMax, LimitMin: sp.BQL.LimitMin}
		}
	}
	for k, v := range sp.Channels {
		if !contains(channelKinds, k) || v < 1 || v > 4096 {
			return nil, errf("channels.%s: %d: the channels are rx, tx, other, combined, each a count from 1 to 4096 (ethtool -L)", k, v)
		}
		if s.Channels == nil {
			s.Channels = map[string]int{}
		}
		s.Channels[k] = v
	}
	for k, v := range sp.Sysctls {
		if !sysctlKeyRE.MatchString(k) || !sysctlValueRE.MatchString(v) {
			return nil, errf("sysctls.%s: %q: write a sysctl name (net.ipv4.tcp_ecn) and a plain value (1, bbr, \"4096 131072 6291456\")", k, v)
		}
		if s.Sysctls == nil {
			s.Sysctls = map[string]string{}
		}
		s.Sysctls[k] = v
	}
	for k, v := range sp.Offloads {
		if !contains(offloads, k) || (v != "on" && v != "off") {
			return nil, errf("offloads.%s: %q: the offloads are gso, tso, gro, each on or off", k, v)
		}
		if s.Offloads == nil {
			s.Offloads = map[string]bool{}
		}
		s.Offloads[k] = v == "on"
	}
	return s, nil
}

// checkQdisc checks a qdisc's kind and parameters, extra's over the spec's own.
func checkQdisc(sp *inventory.QdiscSpec, extra map[string]string, errf func(string, ...any) error) (*Qdisc, error) {
	q := &Qdisc{Kind: sp.Kind, Params: map[string]string{}}
	maps.Copy(q.Params, sp.Params)
	maps.Copy(q.Params, extra)
	if !kindRE.MatchString(q.Kind) {
		return nil, errf("qdisc kind %q: write a tc qdisc name such as fq_codel", q.Kind)
	}
	for k, v := range q.Params {
		if !paramRE.MatchString(k) || !valueRE.MatchString(v) {
			return nil, errf("parameter %q: %q: names are lower-case words (target, split-gso), values plain tc values (15ms, 950mbit)", k, v)
		}
	}
	return q, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Kinds are the qdisc kinds a setup needs from the kernel and from tc: the egress
// root first (when the setup sets one), then the ingress's and netem.
func (s *Setup) Kinds() []string {
	var k []string
	switch {
	case s.MQ != nil:
		k = []string{"mq", s.MQ.Kind}
	case s.Root != nil && s.Rate != "":
		k = []string{"htb", s.Root.Kind}
	case s.L4SNetem != nil:
		k = []string{"prio", s.L4SNetem.Kind, s.Root.Kind}
	case s.Root != nil:
		k = []string{s.Root.Kind}
	}
	if s.Ingress != nil {
		k = append(k, "ingress")
		if s.Ingress.Rate != "" {
			k = append(k, "htb")
		}
		k = append(k, s.Ingress.Root.Kind)
	}
	if s.Netem != nil {
		k = append(k, "netem")
		if s.NetemL4S != nil {
			k = append(k, "prio")
		}
	}
	return k
}

// TouchesBottleneck says whether the setup changes the bottleneck devices at all:
// one that only emulates the path leaves them as found.
func (s *Setup) TouchesBottleneck() bool {
	return s.Root != nil || s.MQ != nil || s.Ingress != nil || s.BQL != nil || len(s.Offloads) > 0 || len(s.Channels) > 0 || s.Steer != nil
}
