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

// PathSetup is what a run puts on one path device: netem at the root with args.
func PathSetup(name, title, source string, args []string) *Setup {
	return &Setup{Name: name, Title: title, Source: source, Root: &Qdisc{Kind: "netem", Args: args}}
}

// PathCommands are what the setup puts on each path device (dev), none when it
// sets no netem.
func (s *Setup) PathCommands(dev string) []Op {
	if s.Netem == nil {
		return nil
	}
	return PathSetup("path", "", "", s.Netem).Commands(dev, 1)
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
		ops = append(ops,
			tc("qdisc", "replace", "dev", ifb, "root", "handle", "1:", "htb", "default", "1"),
			tc("class", "replace", "dev", ifb, "parent", "1:", "classid", "1:1", "htb", "rate", in.Rate, "ceil", in.Rate),
			tc(append([]string{"qdisc", "replace", "dev", ifb, "parent", "1:1", "handle", "10:", in.Root.Kind}, in.Root.args()...)...))
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
