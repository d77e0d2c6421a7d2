package runners

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// The cpu kind samples where a host's CPU time goes, step by step, from
// /proc/stat. A qdisc's cost is not only the delay it adds but the CPU it burns:
// seed 001 reports the system time a UDP flood costs, and users compare qdiscs by
// the sys and softirq share they take on the bottleneck host.

// procStat is where Linux accounts CPU time, in jiffies since boot.
const procStat = "/proc/stat"

// CPUSeries names a CPU share series: cpu is "all" for the whole host, or the
// kernel's name of one core ("cpu1"); stat is user, sys, softirq, irq, iowait,
// steal or busy.
func CPUSeries(host, cpu, stat string) string {
	return fmt.Sprintf("cpu %s %s %s", host, cpu, stat)
}

var cpuKind = Kind{
	Background: true,
	Sampler:    true,
	// The series are not known here: how many cores a host has, and which fields
	// its kernel accounts, only the host can tell. They are declared as they come.
	Plan: planPerCore,
	Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		var p perCoreParams
		if err := decodeRaw(spec.Params, &p); err != nil {
			return nil, Started{}, err
		}
		s := &cpuSampler{path: procStat, host: spec.Host, step: spec.Step, start: spec.Start, perCore: bool(p.PerCore), env: env}
		// Read once now: a host without /proc/stat fails the start, not the run.
		if _, _, err := s.read(); err != nil {
			return nil, Started{}, err
		}
		what := "the whole host"
		if s.perCore {
			what += " and each core"
		}
		return JobFunc(s.run), Started{Message: "sampling CPU time of " + what + " from " + procStat}, nil
	},
}

// Indexes of the fields of a cpu line of /proc/stat, in the kernel's order. The
// guest fields that follow steal are left out: the kernel counts guest time in
// user as well, and adding it again would count it twice.
const (
	jUser = iota
	jNice
	jSystem
	jIdle
	jIOWait  // since Linux 2.5.41
	jIRQ     // since 2.6.0
	jSoftIRQ // since 2.6.0
	jSteal   // since 2.6.11
	nJiffies
)

// cpuJiffies is one cpu line of /proc/stat: Name is "cpu" (the whole host) or
// "cpuN"; N is how many of the fields this kernel gives, at least 4.
type cpuJiffies struct {
	Name string
	J    [nJiffies]uint64
	N    int
}

// parseProcStat reads the cpu lines of /proc/stat, the host's first.
func parseProcStat(r io.Reader) ([]cpuJiffies, error) {
	var cpus []cpuJiffies
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !isCPUName(fields[0]) {
			if len(cpus) > 0 {
				// The kernel prints the cpu lines first. What follows is not
				// needed, and its intr line can outgrow the scanner's buffer on a
				// host with many interrupts.
				break
			}
			continue
		}
		c := cpuJiffies{Name: fields[0], N: min(len(fields)-1, nJiffies)}
		if c.N < jIOWait {
			return nil, fmt.Errorf("%s line has %d fields, want at least %d", c.Name, c.N, jIOWait)
		}
		for i := range c.N {
			v, err := strconv.ParseUint(fields[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s line, field %d: %w", c.Name, i+1, err)
			}
			c.J[i] = v
		}
		cpus = append(cpus, c)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(cpus) == 0 || cpus[0].Name != "cpu" {
		return nil, errors.New("no cpu line")
	}
	return cpus, nil
}

// isCPUName is whether a /proc/stat line's first field names the host ("cpu") or a
// core ("cpu12"), not another cpu-prefixed line.
func isCPUName(s string) bool {
	digits, ok := strings.CutPrefix(s, "cpu")
	if !ok {
		return false
	}
	for _, r := range digits {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// cpuShare is one statistic's share of a step's CPU time, in percent.
type cpuShare struct {
	Stat string
	V    float64
}

// cpuShares is how a step's jiffies, from prev to cur, split between user, sys,
// softirq, irq, iowait, steal and busy; a statistic this kernel does not account
// is left out. ok is false when the step says nothing: no jiffies passed, a counter
// went backwards (per-core iowait and idle can, on NO_HZ kernels), or the line's
// fields changed.
func cpuShares(prev, cur cpuJiffies) (shares []cpuShare, ok bool) {
	if prev.N != cur.N {
		return nil, false
	}
	var d [nJiffies]uint64
	var total uint64
	for i := range cur.N {
		if cur.J[i] < prev.J[i] {
			return nil, false
		}
		d[i] = cur.J[i] - prev.J[i]
		total += d[i]
	}
	if total == 0 {
		return nil, false
	}
	// Each share is a part of total over total, so it is within 0..100.
	pct := func(j uint64) float64 { return float64(j) * 100 / float64(total) }
	shares = []cpuShare{{"user", pct(d[jUser] + d[jNice])}, {"sys", pct(d[jSystem])}}
	if cur.N > jSoftIRQ {
		shares = append(shares, cpuShare{"softirq", pct(d[jSoftIRQ])}, cpuShare{"irq", pct(d[jIRQ])})
	}
	if cur.N > jIOWait {
		shares = append(shares, cpuShare{"iowait", pct(d[jIOWait])})
	}
	if cur.N > jSteal {
		shares = append(shares, cpuShare{"steal", pct(d[jSteal])})
	}
	// Waiting for I/O is idle time: the CPU could have run something else.
	return append(shares, cpuShare{"busy", pct(total - d[jIdle] - d[jIOWait])}), true
}

// cpuSampler is a started cpu job.
type cpuSampler struct {
	path    string // procStat; a test may point it elsewhere
	host    string
	step    float64
	start   float64
	perCore bool
	env     Env
}

// read parses the file once; t is when it was read.
func (s *cpuSampler) read() (cpus []cpuJiffies, t float64, err error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	cpus, err = parseProcStat(f)
	t = unix(time.Now())
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", s.path, err)
	}
	return cpus, t, nil
}

// run reads the file from the start time on, once a step, until ctx ends. The
// first read is only the baseline: a share needs two.
func (s *cpuSampler) run(ctx context.Context) error {
	emit := declaring(s.env)
	var prev map[string]cpuJiffies
	return everyStep(ctx, s.start, s.step, func() error {
		cpus, t, err := s.read()
		if err != nil {
			return fmt.Errorf("cpu sampler: %w", err)
		}
		prev = s.observe(prev, cpus, t, emit)
		return nil
	})
}

// observe emits the shares of the step from prev to cpus, read at t, and returns
// cpus as the next baseline. A core missing from a read (taken offline) drops out
// of the baseline, so that when it returns its first step does not span the time
// it was away.
func (s *cpuSampler) observe(prev map[string]cpuJiffies, cpus []cpuJiffies, t float64,
	emit func(datafile.Series, datafile.Sample)) map[string]cpuJiffies {
	next := make(map[string]cpuJiffies, len(cpus))
	for _, c := range cpus {
		if c.Name != "cpu" && !s.perCore {
			continue
		}
		next[c.Name] = c
		p, ok := prev[c.Name]
		if !ok {
			continue
		}
		shares, ok := cpuShares(p, c)
		if !ok {
			continue
		}
		name := c.Name
		if name == "cpu" {
			name = "all"
		}
		for _, sh := range shares {
			emit(datafile.Series{Name: CPUSeries(s.host, name, sh.Stat), Kind: datafile.KindCPU, Units: "%", Host: s.host, Stat: sh.Stat},
				datafile.Sample{T: t, V: sh.V})
		}
	}
	return next
}
