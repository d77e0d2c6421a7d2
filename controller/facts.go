package controller

import (
	"context"
	"strings"
	"sync"

	"github.com/bloatbench/bloatbench/remote"
)

// factsOfHost gathers, in one command through the agent, what a reader of a run
// needs to know of a host years later and what tells two nights' runs apart: the
// kernel and its command line, the CPU, the TCP and net.core sysctls, the versions
// of the qdisc modules loaded, and for each bottleneck device its driver and
// firmware, offloads, channels, BQL limits, qdiscs and classes, and link speed (Mbit/s, as
// the kernel has it: -1 or nothing where the driver cannot tell) as found. sysctls are read
// with one grep (a fork per file costs seconds in an emulated guest). $@ are the
// host's bottleneck devices.
const factsOfHost = `echo "kernel.release=$(uname -r)"
echo "kernel.cmdline=$(cat /proc/cmdline 2>/dev/null)"
echo "cpu.count=$(grep -c ^processor /proc/cpuinfo)"
echo "cpu.model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
grep -s -r -H . /proc/sys/net/ipv4/ 2>/dev/null | grep '^/proc/sys/net/ipv4/tcp_'
grep -s -r -H . /proc/sys/net/core/ 2>/dev/null
for m in /sys/module/sch_*; do
  [ -d "$m" ] || continue
  v=$(cat "$m/version" 2>/dev/null || cat "$m/srcversion" 2>/dev/null || echo built-in)
  echo "module.${m##*/}=$v"
done
for d in "$@"; do
  ethtool -i "$d" 2>/dev/null | sed -n -e "s/^driver: /dev.$d.driver=/p" -e "s/^firmware-version: /dev.$d.firmware=/p" -e "s/^version: /dev.$d.driver_version=/p"
  ethtool -k "$d" 2>/dev/null | sed -n -e "s/^\(tcp-segmentation-offload\|generic-segmentation-offload\|generic-receive-offload\|large-receive-offload\): /dev.$d.offload.\1=/p"
  ethtool -l "$d" 2>/dev/null | sed -n '/^Current hardware settings/,$p' | sed -n -e "s/^\(RX\|TX\|Combined\):[[:space:]]*/dev.$d.channels.\1=/p"
  for q in /sys/class/net/"$d"/queues/tx-*; do
    [ -d "$q/byte_queue_limits" ] || continue
    echo "dev.$d.bql.${q##*/}.limit_max=$(cat "$q/byte_queue_limits/limit_max")"
    echo "dev.$d.bql.${q##*/}.limit_min=$(cat "$q/byte_queue_limits/limit_min")"
  done
  echo "dev.$d.qdiscs=$(tc qdisc show dev "$d" 2>/dev/null | tr '\n' ';')"
  echo "dev.$d.classes=$(tc class show dev "$d" 2>/dev/null | tr '\n' ';')"
  echo "dev.$d.speed=$(cat /sys/class/net/"$d"/speed 2>/dev/null)"
done
`

// parseFacts reads factsOfHost's output: key=value lines, and grep's
// /proc/sys/PATH:VALUE lines as sysctl.DOTTED.PATH. A value of several lines (a
// sysctl that prints a table) is joined with "; ".
func parseFacts(out string) map[string]string {
	facts := map[string]string{}
	add := func(k, v string) {
		v = strings.TrimSpace(strings.ReplaceAll(v, "\t", " "))
		if old, ok := facts[k]; ok {
			v = old + "; " + v
		}
		facts[k] = v
	}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "/proc/sys/"); ok {
			path, v, ok := strings.Cut(rest, ":")
			if ok && path != "" {
				add("sysctl."+strings.ReplaceAll(path, "/", "."), v)
			}
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && k != "" && !strings.ContainsAny(k, " \t") {
			add(k, v)
		}
	}
	return facts
}

// gatherFacts reads every host's facts at the start of a run, before its setup: the
// host as found. A host that cannot tell is recorded with the reason, not failed.
func (s *Session) gatherFacts(ctx context.Context) {
	devs := map[string][]string{}
	for _, b := range s.o.Inventory.Bottleneck {
		devs[b.Host] = append(devs[b.Host], b.Dev)
	}
	var wg sync.WaitGroup
	for _, ep := range s.eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := ep.Output(ctx, remote.Command(append([]string{"sh", "-c", factsOfHost, "sh"}, devs[ep.host.Name]...)...), nil)
			facts := parseFacts(string(out))
			if err != nil {
				facts["error"] = err.Error()
			}
			ep.info.Facts = facts
		}()
	}
	wg.Wait()
}
