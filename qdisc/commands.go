package qdisc

import (
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/bloatbench/bloatbench/remote"
)

// Op is one operation on a host: a command, with its stdin for sysfs writes.
type Op struct {
	Argv  []string
	Stdin string
}

// Shell is the operation as a person would type it (and as the host's shell runs it).
func (o Op) Shell() string {
	if o.Stdin != "" && len(o.Argv) == 2 && o.Argv[0] == "tee" {
		return fmt.Sprintf("echo %s > %s", remote.Quote(o.Stdin), remote.Quote(o.Argv[1]))
	}
	return remote.Command(o.Argv...)
}

// run is how the host runs it: tee's copy of stdin is not wanted.
func (o Op) run() string {
	if len(o.Argv) > 0 && o.Argv[0] == "tee" {
		return remote.Command(o.Argv...) + " >/dev/null"
	}
	return remote.Command(o.Argv...)
}

// bqlPath is a BQL file of the tx queue named queue ("tx-10"): by name, since the
// shell's glob lists tx-10 before tx-2.
func bqlPath(dev, queue, file string) string {
	return fmt.Sprintf("/sys/class/net/%s/queues/%s/byte_queue_limits/%s", dev, queue, file)
}

// xpsPath is the XPS CPU mask of the tx queue named queue.
func xpsPath(dev, queue string) string {
	return fmt.Sprintf("/sys/class/net/%s/queues/%s/xps_cpus", dev, queue)
}

// CPUMask is the mask of CPUs 0 to cpus-1 as sysfs reads and writes it: hex, in
// groups of 32 bits, most significant first, joined by commas. The kernel
// refuses a bit past its last possible CPU, so the mask is the host's own.
func CPUMask(cpus int) string {
	if cpus <= 0 {
		return "0"
	}
	var groups []string
	for ; cpus > 0; cpus -= 32 {
		n := min(cpus, 32)
		groups = append([]string{strconv.FormatUint(1<<n-1, 16)}, groups...)
	}
	return strings.Join(groups, ",")
}

// steerOps map every CPU of the host (cpus, its possible CPUs) to tx queue
// s.TxQueue alone, and every other queue to none: the target first, so that no
// CPU is left without a queue of its map between the writes.
func (s *Steer) ops(dev string, txQueues, cpus int) []Op {
	ops := []Op{{Argv: []string{"tee", xpsPath(dev, fmt.Sprintf("tx-%d", s.TxQueue))}, Stdin: CPUMask(cpus)}}
	for q := 0; q < txQueues; q++ {
		if q != s.TxQueue {
			ops = append(ops, Op{Argv: []string{"tee", xpsPath(dev, fmt.Sprintf("tx-%d", q))}, Stdin: "0"})
		}
	}
	return ops
}

func params(p map[string]string) []string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, k)
		if p[k] != "" {
			out = append(out, p[k])
		}
	}
	return out
}

// Commands applies the setup to dev, a device with txQueues transmit queues
// (after the channels change, if the setup changes them): channels, offloads, then
// BQL limits on every tx queue, the steering of every packet to one tx queue,
// then the qdisc tree, then the ingress's IFB, its qdiscs and the redirect to it.
// A steering's CPU mask is this machine's (a run writes each host's own).
func (s *Setup) Commands(dev string, txQueues int) []Op {
	return s.CommandsOn(dev, txQueues, runtime.NumCPU())
}

// CommandsOn is Commands on a host with cpus possible CPUs.
func (s *Setup) CommandsOn(dev string, txQueues, cpus int) []Op {
	if len(s.Channels) == 0 {
		return s.commands(dev, txQueues, cpus)
	}
	// What the queues will be: a device's own count after ethtool -L is read back
	// by Apply; shown here, the tx (or combined) count the setup asks.
	if n, ok := s.Channels["tx"]; ok {
		txQueues = n
	} else if n, ok := s.Channels["combined"]; ok {
		txQueues = n
	}
	return append([]Op{s.channelOp(dev)}, s.commands(dev, txQueues, cpus)...)
}

// channelOp is the setup's ethtool -L.
func (s *Setup) channelOp(dev string) Op {
	argv := []string{"ethtool", "-L", dev}
	for _, k := range channelKinds {
		if v, ok := s.Channels[k]; ok {
			argv = append(argv, k, strconv.Itoa(v))
		}
	}
	return Op{Argv: argv}
}

// commands are Commands but the channels'.
func (s *Setup) commands(dev string, txQueues, cpus int) []Op {
	var ops []Op
	if len(s.Offloads) > 0 {
		argv := []string{"ethtool", "-K", dev}
		for _, k := range offloads {
			if on, ok := s.Offloads[k]; ok {
				argv = append(argv, k, map[bool]string{true: "on", false: "off"}[on])
			}
		}
		ops = append(ops, Op{Argv: argv})
	}
	if s.BQL != nil {
		for q := 0; q < txQueues; q++ {
			if s.BQL.LimitMax != nil {
				ops = append(ops, Op{Argv: []string{"tee", bqlPath(dev, fmt.Sprintf("tx-%d", q), "limit_max")}, Stdin: strconv.Itoa(*s.BQL.LimitMax)})
			}
			if s.BQL.LimitMin != nil {
				ops = append(ops, Op{Argv: []string{"tee", bqlPath(dev, fmt.Sprintf("tx-%d", q), "limit_min")}, Stdin: strconv.Itoa(*s.BQL.LimitMin)})
			}
		}
	}
	if s.Steer != nil {
		ops = append(ops, s.Steer.ops(dev, txQueues, cpus)...)
	}
	tc := func(args ...string) Op { return Op{Argv: append([]string{"tc"}, args...)} }
	switch {
	case s.MQ != nil:
		ops = append(ops, tc("qdisc", "replace", "dev", dev, "root", "handle", "1:", "mq"))
		for q := 1; q <= txQueues; q++ {
			ops = append(ops, tc(append([]string{"qdisc", "replace", "dev", dev, "parent", fmt.Sprintf("1:%x", q), s.MQ.Kind}, s.MQ.args()...)...))
		}
	case s.Root == nil && s.Rate == "":
	case s.L4SNetem != nil && s.Root != nil:
		ops = append(ops, l4sPathOps(dev, s.Root.args(), s.L4SNetem.args())...)
	case s.Rate != "":
		// With no root, htb's class alone (its default pfifo_fast-like leaf): the
		// local lab's test link unshaped but for its rate.
		ops = append(ops, ShapedOps(dev, s.Rate, s.Root)...)
	default:
		ops = append(ops, tc(append([]string{"qdisc", "replace", "dev", dev, "root", "handle", "1:", s.Root.Kind}, s.Root.args()...)...))
	}
	if s.Ingress != nil {
		ops = append(ops, s.Ingress.commands(dev)...)
	}
	return ops
}

// ShapedOps shape dev's egress at rate: an htb root (1:) whose one class 1:1, the
// default, has rate and ceil at rate, and leaf (when not nil) under it as 10:.
// The setups' Rate, an ingress's IFB and the local lab's test link are shaped so.
func ShapedOps(dev, rate string, leaf *Qdisc) []Op {
	tc := func(args ...string) Op { return Op{Argv: append([]string{"tc"}, args...)} }
	ops := []Op{
		tc("qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"),
		tc("class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate, "ceil", rate),
	}
	if leaf != nil {
		ops = append(ops, tc(append([]string{"qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "10:", leaf.Kind}, leaf.args()...)...))
	}
	return ops
}

// Script is the commands as lines a person can paste.
func Script(ops []Op) string {
	var b strings.Builder
	for _, o := range ops {
		b.WriteString(o.Shell())
		b.WriteByte('\n')
	}
	return b.String()
}
