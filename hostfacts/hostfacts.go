// Package hostfacts reads, on a host, what a reader of a run needs to know of it
// years later and what tells two nights' runs apart: the kernel and its command
// line, the CPU, the TCP and net.core sysctls, the versions of the qdisc modules
// loaded, and for each bottleneck device its driver and firmware, offloads,
// channels, BQL limits, qdiscs and classes, and link speed (Mbit/s, as the kernel
// has it: -1 or nothing where the driver cannot tell), as found.
//
// The agent reads them itself at every run's start, on every host: files with no
// process, and only ethtool and tc run (five processes a device). A shell script
// of greps and seds took a dozen processes a host, 5-10 ms of CPU each on a 2-core
// EPYC, while the hosts of a local lab share the controller's cores and the
// kernel verifies the sojourn tracer's programs: a quarter of a run's fixed cost.
package hostfacts

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Limits on what is read: a host's files and its tools' output are not trusted to
// be small.
const (
	maxFile   = 4 << 20 // /proc/cpuinfo of a few hundred CPUs is under 1 MB
	maxOutput = 4 << 20 // tc's classes of a large htb tree
	// cmdTimeout bounds each ethtool and tc: a driver that hangs its ioctl
	// must not hold the run.
	cmdTimeout = 10 * time.Second
)

// Facts are a host's facts, by key ("kernel.release", "sysctl.net.core.somaxconn",
// "dev.eth0.offload.tcp-segmentation-offload"); values are one line, a value of
// several lines joined with "; ".
type Facts map[string]string

// add sets k, tabs made spaces and the ends trimmed; a key given again gains the
// value after "; ".
func (f Facts) add(k, v string) {
	v = strings.TrimSpace(strings.ReplaceAll(v, "\t", " "))
	if old, ok := f[k]; ok {
		v = old + "; " + v
	}
	f[k] = v
}

// Gather reads this host's facts, with devs its bottleneck devices. What cannot
// be read is left out (or empty, for a device's driver, firmware, qdiscs and
// speed), never an error: a host that cannot tell is recorded as such.
func Gather(ctx context.Context, devs []string) Facts {
	return gatherFrom(ctx, "/", devs, run)
}

// gatherFrom is Gather with the file system under root and the commands run by
// runCmd (tests give recorded ones).
func gatherFrom(ctx context.Context, root string, devs []string, runCmd func(ctx context.Context, name string, args ...string) []byte) Facts {
	f := Facts{}
	at := func(p string) string { return filepath.Join(root, p) }
	f.add("kernel.release", readFile(at("/proc/sys/kernel/osrelease")))
	f.add("kernel.cmdline", firstLine(readFile(at("/proc/cmdline"))))
	count, model := cpuInfo(readFile(at("/proc/cpuinfo")))
	f.add("cpu.count", count)
	f.add("cpu.model", model)
	tcp, _ := filepath.Glob(at("/proc/sys/net/ipv4/tcp_*"))
	core, _ := filepath.Glob(at("/proc/sys/net/core/*"))
	for _, p := range append(tcp, core...) {
		addSysctl(f, strings.TrimPrefix(p, at("/proc/sys")+"/"), readFile(p))
	}
	mods, _ := filepath.Glob(at("/sys/module/sch_*"))
	for _, m := range mods {
		v := readFile(filepath.Join(m, "version"))
		if strings.TrimSpace(v) == "" {
			v = readFile(filepath.Join(m, "srcversion"))
		}
		if strings.TrimSpace(v) == "" {
			v = "built-in"
		}
		f.add("module."+filepath.Base(m), firstLine(v))
	}
	for _, d := range devs {
		pre := "dev." + d + "."
		for _, l := range lines(runCmd(ctx, "ethtool", "-i", d)) {
			for prefix, key := range map[string]string{"driver: ": "driver", "firmware-version: ": "firmware", "version: ": "driver_version"} {
				if v, ok := strings.CutPrefix(l, prefix); ok {
					f.add(pre+key, v)
				}
			}
		}
		for _, l := range lines(runCmd(ctx, "ethtool", "-k", d)) {
			for _, name := range []string{"tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload", "large-receive-offload"} {
				if v, ok := strings.CutPrefix(l, name+": "); ok {
					f.add(pre+"offload."+name, v)
				}
			}
		}
		current := false
		for _, l := range lines(runCmd(ctx, "ethtool", "-l", d)) {
			current = current || strings.HasPrefix(l, "Current hardware settings")
			for _, name := range []string{"RX", "TX", "Combined"} {
				if v, ok := strings.CutPrefix(l, name+":"); ok && current {
					f.add(pre+"channels."+name, v)
				}
			}
		}
		queues, _ := filepath.Glob(at("/sys/class/net/" + d + "/queues/tx-*"))
		for _, q := range queues {
			bql := filepath.Join(q, "byte_queue_limits")
			if st, err := os.Stat(bql); err != nil || !st.IsDir() {
				continue
			}
			for _, lim := range []string{"limit_max", "limit_min"} {
				f.add(pre+"bql."+filepath.Base(q)+"."+lim, firstLine(readFile(filepath.Join(bql, lim))))
			}
		}
		f.add(pre+"qdiscs", joinLines(runCmd(ctx, "tc", "qdisc", "show", "dev", d)))
		f.add(pre+"classes", joinLines(runCmd(ctx, "tc", "class", "show", "dev", d)))
		f.add(pre+"speed", firstLine(readFile(at("/sys/class/net/"+d+"/speed"))))
	}
	return f
}

// addSysctl adds the sysctl at path (under /proc/sys) with its value's non-empty
// lines; one with none is left out.
func addSysctl(f Facts, path, v string) {
	key := "sysctl." + strings.ReplaceAll(path, "/", ".")
	for _, l := range strings.Split(v, "\n") {
		if l != "" {
			f.add(key, l)
		}
	}
}

// cpuInfo is /proc/cpuinfo's processor count and first model name.
func cpuInfo(s string) (count, model string) {
	n, found := 0, false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "processor") {
			n++
		}
		if rest, ok := strings.CutPrefix(l, "model name"); ok && !found {
			if _, v, ok := strings.Cut(rest, ": "); ok {
				model, found = v, true
			}
		}
	}
	return strconv.Itoa(n), model
}

// readFile is the file's contents, at most maxFile bytes; "" when it cannot be read.
func readFile(path string) string {
	fh, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer fh.Close()
	b, _ := io.ReadAll(io.LimitReader(fh, maxFile))
	return string(b)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// lines are out's lines, without their ends.
func lines(out []byte) []string {
	var ls []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, maxOutput)
	for sc.Scan() {
		ls = append(ls, strings.TrimRight(sc.Text(), "\r"))
	}
	return ls
}

// joinLines is out on one line, a ';' after each of its lines: tc's qdiscs and
// classes as the facts have always kept them.
func joinLines(out []byte) string {
	var b strings.Builder
	for _, l := range lines(out) {
		b.WriteString(l)
		b.WriteByte(';')
	}
	return b.String()
}

// run runs a tool with no shell, at most cmdTimeout, and gives its standard output
// (at most maxOutput bytes); nothing when it fails to start. Its stderr is dropped,
// as a driver without channels says so there.
func run(ctx context.Context, name string, args ...string) []byte {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out limitedBuffer
	out.max = maxOutput
	cmd.Stdout = &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil && out.Len() == 0 {
		return nil
	}
	return out.Bytes()
}

// limitedBuffer keeps the first max bytes written and drops the rest, so that the
// command still runs to its end.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
