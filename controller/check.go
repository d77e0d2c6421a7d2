package controller

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

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

// Check is Check on an open session's hosts, through their agents.
func (s *Session) Check(ctx context.Context, setups []*qdisc.Setup, log io.Writer) []Problem {
	inv := s.o.Inventory
	var problems []Problem
	devsOf := map[string][]string{}
	for _, b := range inv.Bottleneck {
		devsOf[b.Host] = append(devsOf[b.Host], b.Dev)
	}
	for _, ep := range s.eps {
		if ep.agent == nil {
			continue // reported by Connect
		}
		name, h := ep.host.Name, ep.host
		add := func(format string, args ...any) {
			p := Problem{Host: name, Msg: fmt.Sprintf(format, args...)}
			problems = append(problems, p)
			fmt.Fprintf(log, "FAIL %s: %s\n", name, p.Msg)
		}
		out, err := ep.Output(ctx, remote.Command(append([]string{"sh", "-c", factsScript, "sh"}, devsOf[name]...)...), nil)
		if err != nil {
			add("%v", err)
			continue
		}
		facts := string(out)
		fmt.Fprintf(log, "ok   %s (%s): login shell %.2fs; %s\n", name, h.SSH, ep.proc.ShellStart.Seconds(), strings.Join(strings.Split(strings.TrimSpace(facts), "\n"), "; "))
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
			for _, dev := range devsOf[name] {
				if _, exists := txq[dev]; exists && st.BQL != nil && !bql[dev] {
					add("setup %s sets BQL limits, but %s has no byte_queue_limits (its driver lacks BQL)", st.Name, dev)
				}
				if len(st.Offloads) > 0 && strings.Contains(facts, "ethtool no") {
					add("setup %s sets offloads, but ethtool is not installed: apt-get install ethtool", st.Name)
				}
			}
			if len(devsOf[name]) > 0 {
				if err := qdisc.DryRun(ctx, ep, name, st, max(txq[devsOf[name][0]], 1)); err != nil {
					add("%v", err)
				} else {
					fmt.Fprintf(log, "ok   %s: setup %s can be applied (tried in a scratch namespace)\n", name, st.Name)
				}
			}
		}
	}
	return problems
}

func sortedHosts(inv *inventory.Inventory) []string {
	var names []string
	for n := range inv.Hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
