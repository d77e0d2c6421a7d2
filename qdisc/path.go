package qdisc

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/bloatbench/bloatbench/inventory"
)

// Ingress shapes what a bottleneck receives, as sqm-scripts does: an IFB device
// takes the device's ingress through a u32 match-all filter with a mirred redirect,
// and the qdisc (under an htb class when Rate is set) runs on the IFB's egress.
// u32 rather than matchall: kernels built without cls_matchall have u32, and it is
// what sqm-scripts uses.
type Ingress struct {
	Root *Qdisc
	Rate string
}

// IFBName is the IFB device that shapes dev's ingress: sqm-scripts' "ifb4" + dev,
// cut to the 15 bytes Linux allows. The state script computes the same name.
func IFBName(dev string) string {
	n := "ifb4" + dev
	if len(n) > 15 {
		n = n[:15]
	}
	return n
}

// IFBLoaded is a shell test that holds when making an IFB device loads no module:
// ifb is loaded or built in, or there is no modprobe (the kernel could not load it
// either).
const IFBLoaded = `{ [ -d /sys/module/ifb ] || ! command -v modprobe >/dev/null 2>&1 || grep -qs '/ifb\.ko' "/lib/modules/$(uname -r)/modules.builtin"; }`

var (
	timeRE    = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(us|usec|ms|msec|s|sec)$`)
	percentRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?%$`)
	// netem's distribution tables as iproute2 installs them.
	distributions = []string{"normal", "pareto", "paretonormal", "uniform"}
)

// NetemArgs checks a netem spec and returns tc's words after "netem", in the order
// tc-netem reads them. where names the spec for errors ("file:line: netem").
func NetemArgs(sp *inventory.NetemSpec, where string) ([]string, error) {
	errf := func(key, format string, args ...any) error {
		return fmt.Errorf("%s.%s: %s", where, key, fmt.Sprintf(format, args...))
	}
	var a []string
	if sp.Limit < 0 {
		return nil, errf("limit", "%d: packets netem may hold, a positive number", sp.Limit)
	}
	if sp.Limit > 0 {
		a = append(a, "limit", strconv.Itoa(sp.Limit))
	}
	for _, kv := range [][2]string{{"delay", sp.Delay}, {"jitter", sp.Jitter}} {
		if kv[1] != "" && !timeRE.MatchString(kv[1]) {
			return nil, errf(kv[0], "%q: write a time such as 25ms or 500us", kv[1])
		}
	}
	if sp.Delay != "" {
		a = append(a, "delay", sp.Delay)
		if sp.Jitter != "" {
			a = append(a, sp.Jitter)
		}
	} else {
		for _, kv := range [][2]string{{"jitter", sp.Jitter}, {"reorder", sp.Reorder}, {"distribution", sp.Distribution}} {
			if kv[1] != "" {
				return nil, errf(kv[0], "goes with a delay: netem varies or reorders the delay it adds; add delay:")
			}
		}
	}
	if sp.Distribution != "" {
		if sp.Jitter == "" {
			return nil, errf("distribution", "shapes the jitter: add jitter:")
		}
		if !contains(distributions, sp.Distribution) {
			return nil, errf("distribution", "%q: netem's tables are %s", sp.Distribution, strings.Join(distributions, ", "))
		}
		a = append(a, "distribution", sp.Distribution)
	}
	for _, kv := range [][2]string{{"loss", sp.Loss}, {"reorder", sp.Reorder}} {
		if kv[1] == "" {
			continue
		}
		if !percentRE.MatchString(kv[1]) {
			return nil, errf(kv[0], "%q: write a percentage such as 0.5%%", kv[1])
		}
		if p, _ := strconv.ParseFloat(strings.TrimSuffix(kv[1], "%"), 64); p > 100 {
			return nil, errf(kv[0], "%q: at most 100%%", kv[1])
		}
		if kv[0] == "loss" {
			a = append(a, "loss", "random", kv[1])
		} else {
			a = append(a, "reorder", kv[1])
		}
	}
	if sp.Rate != "" {
		if !rateRE.MatchString(sp.Rate) {
			return nil, errf("rate", "%q: write a tc rate such as 100mbit", sp.Rate)
		}
		a = append(a, "rate", sp.Rate)
	}
	if len(a) == 0 || (len(a) == 2 && a[0] == "limit") {
		return nil, fmt.Errorf("%s: empty: give at least one of delay, loss, rate (e.g. delay: 25ms)", where)
	}
	return a, nil
}

// NetemL4SArgs are NetemArgs of the spec's l4s: netem, nil when it has none.
func NetemL4SArgs(sp *inventory.NetemSpec, where string) ([]string, error) {
	if sp.L4S == nil {
		return nil, nil
	}
	if sp.L4S.L4S != nil {
		return nil, fmt.Errorf("%s.l4s.l4s: an l4s: netem is for the L4S packets already; give its keys (delay, loss, ...) directly", where)
	}
	return NetemArgs(sp.L4S, where+".l4s")
}

// PathSetup is what a run puts on one path device: netem at the root with args,
// or, with l4s, two netems under a prio root, the packets marked ECT(1) or CE
// taking l4s's (see Commands).
func PathSetup(name, title, source string, args, l4s []string) *Setup {
	s := &Setup{Name: name, Title: title, Source: source, Root: &Qdisc{Kind: "netem", Args: args}}
	if l4s != nil {
		s.L4SNetem = &Qdisc{Kind: "netem", Args: l4s}
	}
	return s
}

// PathHasL4S says whether a run of setup s (nil: none) on inv gives the L4S
// packets a netem of their own: the setup's netem when it has one, else the
// inventory's.
func PathHasL4S(s *Setup, inv *inventory.Inventory) bool {
	if s != nil && s.Netem != nil {
		return s.NetemL4S != nil
	}
	return inv != nil && inv.Netem != nil && inv.Netem.L4S != nil
}

// PathTitle says what a path setup puts on the path devices.
func PathTitle(args, l4s []string) string {
	t := "netem " + strings.Join(args, " ")
	if l4s != nil {
		t += "; for ECT(1) and CE: netem " + strings.Join(l4s, " ")
	}
	return t
}

// PathCommands are what the setup puts on each path device (dev), none when it
// sets no netem.
func (s *Setup) PathCommands(dev string) []Op {
	if s.Netem == nil {
		return nil
	}
	return PathSetup("path", "", "", s.Netem, s.NetemL4S).Commands(dev, 1)
}

// The packets a path device's L4S netem takes: those whose ECN field's low bit
// is set, ECT(1) (01) and CE (11), by u32 on the IPv4 TOS byte and the IPv6
// traffic class. A classic flow's CE (10 marked 11 on the way) would match too;
// the path devices come before the bottleneck that marks, on the data's way.
// prio's priomap sends everything else to its second band; two bands, each with
// its netem, are two delay lines side by side (netem releases a packet when its
// time comes, and a path device is not a bottleneck, so the bands' strict
// priority has nothing to hold back).
const (
	l4sBand     = "1:1"
	classicBand = "1:2"
)

// l4sPathOps builds that tree on dev: args for the classic band, l4s for the L4S one.
func l4sPathOps(dev string, args, l4s []string) []Op {
	tc := func(args ...string) Op { return Op{Argv: append([]string{"tc"}, args...)} }
	priomap := []string{"priomap"}
	for range 16 {
		priomap = append(priomap, "1")
	}
	return []Op{
		tc(append([]string{"qdisc", "replace", "dev", dev, "root", "handle", "1:", "prio", "bands", "2"}, priomap...)...),
		tc(append([]string{"qdisc", "replace", "dev", dev, "parent", l4sBand, "handle", "10:", "netem"}, l4s...)...),
		tc(append([]string{"qdisc", "replace", "dev", dev, "parent", classicBand, "handle", "20:", "netem"}, args...)...),
		tc("filter", "replace", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "tos", "0x01", "0x01", "flowid", l4sBand),
		tc("filter", "replace", "dev", dev, "parent", "1:", "protocol", "ipv6", "prio", "2", "u32", "match", "ip6", "priority", "0x01", "0x01", "flowid", l4sBand),
	}
}

// ingressCommands make dev's IFB, shape on it and redirect dev's ingress to it.
// The ifb module is loaded with no devices of its own when it is not there yet:
// loading it by default (as creating the device would) adds ifb0 and ifb1, which
// would stay behind on the host. Built in, or with no modprobe to load it, there is
// nothing to load; when modprobe finds no module (a kernel that has ifb built in but
// lists no modules.builtin) the device is made all the same, and a kernel without
// ifb fails there, naming the device type.
func (in *Ingress) commands(dev string) []Op {
	ifb := IFBName(dev)
	tc := func(args ...string) Op { return Op{Argv: append([]string{"tc"}, args...)} }
	ops := []Op{
		{Argv: []string{"sh", "-c", IFBLoaded + " || modprobe -q ifb numifbs=0 || :"}},
		{Argv: []string{"ip", "link", "add", "name", ifb, "type", "ifb"}},
		{Argv: []string{"ip", "link", "set", "dev", ifb, "up"}},
	}
	if in.Rate != "" {
		ops = append(ops, ShapedOps(ifb, in.Rate, in.Root)...)
	} else {
		ops = append(ops, tc(append([]string{"qdisc", "replace", "dev", ifb, "root", "handle", "1:", in.Root.Kind}, in.Root.args()...)...))
	}
	return append(ops,
		tc("qdisc", "add", "dev", dev, "handle", "ffff:", "ingress"),
		tc("filter", "add", "dev", dev, "parent", "ffff:", "protocol", "all", "prio", "10", "u32", "match", "u32", "0", "0",
			"flowid", "1:1", "action", "mirred", "egress", "redirect", "dev", ifb))
}

// checkIngress checks an ingress spec as check does the egress one.
func checkIngress(sp *inventory.IngressSpec, errf func(string, ...any) error) (*Ingress, error) {
	if sp.Root == nil {
		return nil, errf("ingress: needs root: {kind: ...}, the qdisc on the IFB (e.g. cake with ingress, or fq_codel under rate:)")
	}
	q, err := checkQdisc(sp.Root, nil, errf)
	if err != nil {
		return nil, err
	}
	if sp.Rate != "" && !rateRE.MatchString(sp.Rate) {
		return nil, errf("ingress.rate %q: write a tc rate such as 100mbit", sp.Rate)
	}
	return &Ingress{Root: q, Rate: sp.Rate}, nil
}

// verifyIngress checks the kernel shows dev's ingress going to its IFB, shaped.
func (in *Ingress) verify(now *State) error {
	if now.ingress() == nil {
		return fmt.Errorf("no ingress qdisc on %s", now.Dev)
	}
	if len(now.IngressFilters) == 0 {
		return fmt.Errorf("no filter on %s's ingress", now.Dev)
	}
	if now.IFB == nil {
		return fmt.Errorf("no device %s", IFBName(now.Dev))
	}
	for _, q := range now.IFB.Qdiscs {
		if q.Kind == in.Root.Kind && (in.Rate == "" && q.Root || in.Rate != "" && q.Parent == "1:1") {
			return nil
		}
	}
	return fmt.Errorf("no %s on %s", in.Root.Kind, now.IFB.Name)
}
