package controller

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
)

// Problem is one thing wrong with a host, with what to do.
type Problem struct {
	Host string
	Msg  string
}

// hostFacts is what hosts check reports of a host that answers.
const factsScript = `echo "kernel $(uname -r)"
echo "tc $(tc -V 2>&1 | head -1)"
if command -v ethtool >/dev/null 2>&1; then echo "ethtool yes"; else echo "ethtool no"; fi
for d in "$@"; do
  if [ ! -d "/sys/class/net/$d" ]; then echo "dev $d missing"; continue; fi
  n=$(ls -d /sys/class/net/"$d"/queues/tx-* 2>/dev/null | wc -l)
  if [ -d "/sys/class/net/$d/queues/tx-0/byte_queue_limits" ]; then b=yes; else b=no; fi
  echo "dev $d txqueues $n bql $b"
done
`

// accessScript reports who the agent is and what the host allows: the login user
// (SUDO_USER when the agent runs through sudo), whether sudo runs the agent without
// a password, the addresses of the host with their devices (the controller finds
// test_ip among them), the ping group range and the user's groups (ICMP sockets
// without root), and whether netem and ifb work. As root these are tried in a
// scratch namespace ($3) that is deleted after; ifb only when that loads no module
// (qdisc.IFBLoaded, or modprobe finds none: built in), since loading it adds ifb0
// and ifb1 to the host. Not as root,
// modprobe -n says whether the modules exist. $1 is the agent's path, $2 "sudo"
// when it runs through sudo; $4 "skip" leaves netem and ifb untried (a run's
// preflight, when the run uses neither: the scratch namespace is five processes
// a host, seconds of an emulated guest's CPU).
const accessScript = `u=$(id -u)
echo "user ${SUDO_USER:-$(id -un)} $u"
if [ "$u" = 0 ]; then
  if [ "$2" = sudo ]; then echo "sudo via"; else echo "sudo root"; fi
elif ! command -v sudo >/dev/null 2>&1; then echo "sudo no sudo is not installed (apt-get install sudo)"
elif e=$(sudo -n -l "$1" agent 2>&1 >/dev/null); then echo "sudo yes"
else echo "sudo no $e" | head -1; fi
ip -o addr show scope global 2>/dev/null | while read -r _ dev fam addr _; do echo "addr $dev $fam $addr"; done
echo "pinggroups $(cat /proc/sys/net/ipv4/ping_group_range 2>/dev/null) groups $(id -G)"
if [ "$4" = skip ]; then
  echo "netem skip"; echo "ifb skip"
elif [ "$u" = 0 ] && ip netns add "$3" 2>/dev/null; then
  ip -n "$3" link add bbchk0 type veth peer name bbchk1 >/dev/null 2>&1
  if e=$(tc -n "$3" qdisc add dev bbchk0 root netem delay 1ms 2>&1); then echo "netem yes"; else echo "netem no $e" | head -1; fi
  if ` + qdisc.IFBLoaded + ` || ! modprobe -n -q ifb 2>/dev/null; then
    if e=$(ip -n "$3" link add bbchk2 type ifb 2>&1); then echo "ifb yes"; else echo "ifb no $e" | head -1; fi
  else echo "ifb module"; fi
  ip netns del "$3"
else
  if modprobe -n -q sch_netem 2>/dev/null; then echo "netem module"; else echo "netem no the kernel has no sch_netem module (CONFIG_NET_SCH_NETEM)"; fi
  if [ -d /sys/module/ifb ] || modprobe -n -q ifb 2>/dev/null; then echo "ifb module"; else echo "ifb no the kernel has no ifb module (CONFIG_IFB)"; fi
fi
`

// access is what accessScript found, in words for hosts check's line.
type access struct {
	user, sudo, family, addr, ping, netem, ifb string
	// sudoOK says sudo would run the agent as root without a password (or the
	// agent is root already).
	sudoOK bool
}

func (a access) String() string {
	return strings.Join([]string{"user " + a.user, "sudo without a password: " + a.sudo, "test_ip " + a.addr,
		"ping without root: " + a.ping, "netem: " + a.netem, "ifb: " + a.ifb}, "; ")
}

// readAccess reads accessScript's lines for a host whose test_ip is testIP.
func readAccess(out, testIP string) access {
	var a access
	want, _ := netip.ParseAddr(testIP)
	a.family = datafile.FamilyOf(testIP)
	a.addr = fmt.Sprintf("%s (%s) is not an address of the host", testIP, a.family)
	fams := map[string][]string{}
	found := ""
	uid := ""
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		rest := strings.Join(f[1:], " ")
		switch f[0] {
		case "user":
			if len(f) == 3 {
				a.user, uid = f[1], f[2]
			}
		case "sudo":
			switch {
			case rest == "via":
				a.sudo, a.sudoOK = "yes (the agent runs as root through sudo -n)", true
			case rest == "root":
				a.sudo, a.sudoOK = "not needed (root login)", true
			case rest == "yes":
				a.sudo, a.sudoOK = "yes", true
			default:
				a.sudo = "no (" + strings.TrimSpace(strings.TrimPrefix(rest, "no")) + ")"
			}
		case "addr":
			if len(f) != 4 {
				continue
			}
			fam := map[string]string{"inet": "ipv4", "inet6": "ipv6"}[f[2]]
			if fam == "" {
				continue
			}
			dev := strings.TrimSuffix(f[1], ":")
			if !slices.Contains(fams[dev], fam) {
				fams[dev] = append(fams[dev], fam)
			}
			if p, err := netip.ParsePrefix(f[3]); err == nil && p.Addr() == want {
				found = dev
			}
		case "pinggroups":
			a.ping = pingWithoutRoot(uid, f[1:])
		case "netem", "ifb":
			v := "no"
			switch {
			case rest == "yes":
				v = "yes (tried in a scratch namespace)"
			case rest == "module":
				v = "module present (not tried: needs root)"
			case rest == "skip":
				v = "not tried (this run uses no netem path and no ingress shaping)"
			case strings.HasPrefix(rest, "no "):
				v = "no: " + strings.TrimPrefix(rest, "no ")
			}
			if f[0] == "netem" {
				a.netem = v
			} else {
				a.ifb = v
			}
		}
	}
	if found != "" {
		a.addr = fmt.Sprintf("%s (%s) on %s, which has %s", testIP, a.family, found, strings.Join(fams[found], " and "))
	}
	return a
}

// pingWithoutRoot says whether ICMP sockets work for the user: uid 0 uses raw
// sockets; others need a group of theirs inside net.ipv4.ping_group_range (which
// covers ICMPv6 too). f is "LOW HIGH groups GID...".
func pingWithoutRoot(uid string, f []string) string {
	if uid == "0" {
		return "not needed (root: raw sockets)"
	}
	if len(f) < 3 {
		return "unknown"
	}
	lo, err1 := strconv.ParseInt(f[0], 10, 64)
	hi, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return "unknown"
	}
	for _, g := range f[3:] {
		if n, err := strconv.ParseInt(g, 10, 64); err == nil && n >= lo && n <= hi {
			return fmt.Sprintf("yes (net.ipv4.ping_group_range %d %d)", lo, hi)
		}
	}
	return fmt.Sprintf("no: net.ipv4.ping_group_range is %d %d, which has none of the user's groups; ping runs only as root "+
		"(sudo: true) or after sysctl -w net.ipv4.ping_group_range=\"0 2147483647\"", lo, hi)
}

// Check connects to every host a run needs (client, server, bottleneck hosts) and
// starts its agent, reports what it finds on log, and dry-runs every setup on every
// bottleneck host. It returns the problems, one per thing to fix.
func Check(ctx context.Context, o Options, setups []*qdisc.Setup, log io.Writer) []Problem {
	s, errs := connectAll(ctx, o)
	defer s.Close()
	var problems []Problem
	for i, err := range errs {
		if err != nil {
			name := s.eps[i].host.Name
			problems = append(problems, Problem{Host: name, Msg: err.Error()})
			fmt.Fprintf(log, "FAIL %s: %v\n", name, err)
		}
	}
	return append(problems, s.Check(ctx, setups, log)...)
}

// Check is Check on an open session's hosts, through their agents. The hosts are
// checked at once (a host's check is a few commands there, and seconds in an
// emulated guest); what each finds is printed in the hosts' order, a host's lines
// once it and every host before it are done.
func (s *Session) Check(ctx context.Context, setups []*qdisc.Setup, log io.Writer) []Problem {
	return s.check(ctx, setups, true, log)
}

// Preflight is Check before a run of setups: netem and ifb are tried only when the
// run uses them (a path with netem, a setup that shapes ingress through an IFB);
// the setups' own qdiscs are tried in Check's dry runs either way.
func (s *Session) Preflight(ctx context.Context, setups []*qdisc.Setup, log io.Writer) []Problem {
	needs := len(s.o.Inventory.PathDevices) > 0
	for _, st := range setups {
		needs = needs || st.Ingress != nil
	}
	return s.check(ctx, setups, needs, log)
}

func (s *Session) check(ctx context.Context, setups []*qdisc.Setup, tryModules bool, log io.Writer) []Problem {
	devsOf := map[string][]string{}
	for _, b := range s.o.Inventory.Bottleneck {
		devsOf[b.Host] = append(devsOf[b.Host], b.Dev)
	}
	type found struct {
		out      bytes.Buffer
		problems []Problem
		done     chan struct{}
	}
	all := make([]*found, len(s.eps))
	for i, ep := range s.eps {
		f := &found{done: make(chan struct{})}
		all[i] = f
		go func() {
			defer close(f.done)
			f.problems = s.checkHost(ctx, ep, devsOf[ep.host.Name], setups, tryModules, &f.out)
		}()
	}
	var problems []Problem
	for _, f := range all {
		<-f.done
		log.Write(f.out.Bytes())
		problems = append(problems, f.problems...)
	}
	return problems
}

// checkHost is Check's work on one host, whose bottleneck devices are devs.
func (s *Session) checkHost(ctx context.Context, ep *endpoint, devs []string, setups []*qdisc.Setup, tryModules bool, log io.Writer) []Problem {
	if ep.agent == nil {
		return nil // reported by Connect
	}
	inv := s.o.Inventory
	var problems []Problem
	name, h := ep.host.Name, ep.host
	add := func(format string, args ...any) {
		p := Problem{Host: name, Msg: fmt.Sprintf(format, args...)}
		problems = append(problems, p)
		fmt.Fprintf(log, "FAIL %s: %s\n", name, p.Msg)
	}
	out, err := ep.Output(ctx, remote.Command(append([]string{"sh", "-c", factsScript, "sh"}, devs...)...), nil)
	if err != nil {
		add("%v", err)
		return problems
	}
	facts := string(out)
	fmt.Fprintf(log, "ok   %s (%s): login shell %.2fs; %s\n", name, h.SSH, ep.proc.started().shellStart.Seconds(), strings.Join(strings.Split(strings.TrimSpace(facts), "\n"), "; "))
	via := ""
	if ep.proc.started().sudo {
		via = "sudo"
	}
	var rb [4]byte
	rand.Read(rb[:])
	try := "try"
	if !tryModules {
		try = "skip"
	}
	out, err = ep.Output(ctx, remote.Command("sh", "-c", accessScript, "sh", ep.proc.started().path, via, "bbchk-"+hex.EncodeToString(rb[:]), try), nil)
	if err != nil {
		add("%v", err)
		return problems
	}
	acc := readAccess(string(out), h.TestIP)
	fmt.Fprintf(log, "ok   %s: %s\n", name, acc)
	if !acc.sudoOK && len(setups) > 0 && (s.o.isBottleneck(name) || s.o.SetsSysctls) {
		add("the setups need root on %s, and sudo -n refuses the agent: allow it with the sudoers line %s", name,
			remote.SudoersLine(acc.user, ep.proc.started().path, h.AgentPath != ""))
	}
	txq, bql := map[string]int{}, map[string]bool{}
	for _, line := range strings.Split(facts, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "dev" && f[2] == "missing":
			add("bottleneck device %s does not exist (see %s)", f[1], inv.Where("bottleneck"))
		case len(f) == 6 && f[0] == "dev":
			txq[f[1]], _ = strconv.Atoi(f[3])
			bql[f[1]] = f[5] == "yes"
		case len(f) >= 2 && f[0] == "tc" && strings.Contains(line, "not found"):
			add("tc is not installed: apt-get install iproute2")
		}
	}
	for _, st := range setups {
		for _, dev := range devs {
			if _, exists := txq[dev]; exists && st.BQL != nil && !bql[dev] {
				add("setup %s sets BQL limits, but %s has no byte_queue_limits (its driver lacks BQL)", st.Name, dev)
			}
			if len(st.Offloads) > 0 && strings.Contains(facts, "ethtool no") {
				add("setup %s sets offloads, but ethtool is not installed: apt-get install ethtool", st.Name)
			}
		}
		if len(devs) > 0 {
			if err := qdisc.DryRun(ctx, ep, name, st, max(txq[devs[0]], 1)); err != nil {
				add("%v", err)
			} else {
				fmt.Fprintf(log, "ok   %s: setup %s can be applied (tried in a scratch namespace)\n", name, st.Name)
			}
		}
	}
	return problems
}

// isBottleneck says whether a setup changes devices of the host: a bottleneck's
// or a path device's (netem).
func (o *Options) isBottleneck(host string) bool {
	for _, b := range append(append([]inventory.Bottleneck(nil), o.Inventory.Bottleneck...), o.Inventory.PathDevices...) {
		if b.Host == host {
			return true
		}
	}
	return false
}
