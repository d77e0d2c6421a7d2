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

// Check connects to every host of the inventory, reports what it finds on log, and
// dry-runs every setup on every bottleneck host. It returns the problems, one per
// thing to fix.
func Check(ctx context.Context, inv *inventory.Inventory, d *remote.Dialer, setups []*qdisc.Setup, log io.Writer) []Problem {
	var problems []Problem
	devsOf := map[string][]string{}
	for _, b := range inv.Bottleneck {
		devsOf[b.Host] = append(devsOf[b.Host], b.Dev)
	}
	for _, name := range sortedHosts(inv) {
		h := inv.Hosts[name]
		add := func(format string, args ...any) {
			p := Problem{Host: name, Msg: fmt.Sprintf(format, args...)}
			problems = append(problems, p)
			fmt.Fprintf(log, "FAIL %s: %s\n", name, p.Msg)
		}
		conn, err := d.Dial(ctx, h)
		if err != nil {
			add("%v", err)
			continue
		}
		out, err := conn.Output(ctx, remote.Command(append([]string{"sh", "-c", factsScript, "sh"}, devsOf[name]...)...), nil)
		if err != nil {
			add("%v", err)
			conn.Close()
			continue
		}
		facts := string(out)
		fmt.Fprintf(log, "ok   %s (%s): %s\n", name, h.SSH, strings.Join(strings.Split(strings.TrimSpace(facts), "\n"), "; "))
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
		for _, s := range setups {
			for _, dev := range devsOf[name] {
				if _, exists := txq[dev]; exists && s.BQL != nil && !bql[dev] {
					add("setup %s sets BQL limits, but %s has no byte_queue_limits (its driver lacks BQL)", s.Name, dev)
				}
				if len(s.Offloads) > 0 && strings.Contains(facts, "ethtool no") {
					add("setup %s sets offloads, but ethtool is not installed: apt-get install ethtool", s.Name)
				}
			}
			if len(devsOf[name]) > 0 {
				if err := qdisc.DryRun(ctx, conn, name, s, max(txq[devsOf[name][0]], 1)); err != nil {
					add("%v", err)
				} else {
					fmt.Fprintf(log, "ok   %s: setup %s can be applied (tried in a scratch namespace)\n", name, s.Name)
				}
			}
		}
		conn.Close()
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
