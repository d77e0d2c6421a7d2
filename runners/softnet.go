package runners

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/procfs"

	"github.com/bloatbench/bloatbench/datafile"
)

// The softnet kind samples the receive path's per-CPU counters, step by step,
// from /proc/net/softnet_stat: packets processed, packets dropped because a CPU's
// input backlog was full (net.core.netdev_max_backlog), the times the receive
// softirq ran out of budget with work left (time_squeeze), and flow-limit drops. A
// sender can outrun a receiver's CPU (a UDP flood, many small packets through a
// veth or a forwarding host) and lose packets there, ahead of any qdisc: a drop
// that is not the qdisc's must show, or it is read as the AQM's.
//
// The file is parsed by prometheus/procfs, which knows its layouts across kernel
// versions (11 columns before 5.10, the CPU's index from 5.10 on).

// SoftnetSeries names a softnet series: cpu is "all" for the whole host or
// "cpuN"; stat is processed, dropped, time_squeeze or flow_limit.
func SoftnetSeries(host, cpu, stat string) string {
	return fmt.Sprintf("softnet %s %s %s", host, cpu, stat)
}

var softnetKind = Kind{
	Background: true,
	Sampler:    true,
	Plan:       planPerCore,
	Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		var p perCoreParams
		if err := decodeRaw(spec.Params, &p); err != nil {
			return nil, Started{}, err
		}
		s, err := newSoftnetSampler(procfs.DefaultMountPoint, spec, bool(p.PerCore), env)
		if err != nil {
			return nil, Started{}, err
		}
		// Read once now: a host without the file fails the start, not the run.
		if _, _, _, err := s.read(); err != nil {
			return nil, Started{}, err
		}
		return JobFunc(s.run), Started{Message: "sampling the receive path's counters from /proc/net/softnet_stat"}, nil
	},
}

// softnetStats are the counters of one statistic the kind reports, in order.
var softnetStats = []struct {
	stat, units string
	get         func(procfs.SoftnetStat) uint32
}{
	{"processed", "pkts/s", func(s procfs.SoftnetStat) uint32 { return s.Processed }},
	{"dropped", "pkts/s", func(s procfs.SoftnetStat) uint32 { return s.Dropped }},
	{"time_squeeze", "events/s", func(s procfs.SoftnetStat) uint32 { return s.TimeSqueezed }},
	{"flow_limit", "pkts/s", func(s procfs.SoftnetStat) uint32 { return s.FlowLimitCount }},
}

// softnetSampler is a started softnet job.
type softnetSampler struct {
	fs      procfs.FS
	host    string
	step    float64
	start   float64
	perCore bool
	env     Env
}

func newSoftnetSampler(mount string, spec JobSpec, perCore bool, env Env) (*softnetSampler, error) {
	fs, err := procfs.NewFS(mount)
	if err != nil {
		return nil, fmt.Errorf("softnet sampler: %w", err)
	}
	return &softnetSampler{fs: fs, host: spec.Host, step: spec.Step, start: spec.Start, perCore: perCore, env: env}, nil
}

// softnetIndexed is the width from which the file says each line's CPU (Linux
// 5.10); before, procfs numbers the lines, and offline CPUs have none.
const softnetIndexed = 13

// read parses the file once, by CPU index; t is when it was read. numbered says the
// indexes are line numbers, which shift when a CPU goes off or on line.
func (s *softnetSampler) read() (byCPU map[uint32]procfs.SoftnetStat, t float64, numbered bool, err error) {
	rows, err := s.fs.NetSoftnetStat()
	t = unix(time.Now())
	if err != nil {
		return nil, 0, false, fmt.Errorf("softnet sampler: %w", err)
	}
	byCPU = make(map[uint32]procfs.SoftnetStat, len(rows))
	for _, r := range rows {
		byCPU[r.Index] = r
		numbered = numbered || r.Width < softnetIndexed
	}
	return byCPU, t, numbered, nil
}

// run reads the file from the start time on, once a step, until ctx ends; the
// first read is only the baseline.
func (s *softnetSampler) run(ctx context.Context) error {
	emit := declaring(s.env)
	var prev map[uint32]procfs.SoftnetStat
	var prevT float64
	return everyStep(ctx, s.start, s.step, func() error {
		cur, t, numbered, err := s.read()
		if err != nil {
			return err
		}
		// Lines numbered by their place pair up only while the same CPUs are online.
		if prev != nil && (!numbered || len(prev) == len(cur)) {
			s.observe(prev, cur, t-prevT, t, emit)
		}
		prev, prevT = cur, t
		return nil
	})
}

// observe emits each statistic's rate over the step from prev to cur (dt seconds
// long, read at t): the host's, over the CPUs present in both reads (a CPU taken
// offline drops out instead of reading as its counters lost; run skips a step in
// which the CPUs changed when the file does not say which line is which), and with
// perCore each CPU's. The kernel's counters are 32 bits and wrap; a difference taken in 32 bits
// is right across one wrap.
func (s *softnetSampler) observe(prev, cur map[uint32]procfs.SoftnetStat, dt, t float64, emit func(datafile.Series, datafile.Sample)) {
	if dt <= 0 {
		return
	}
	var cpus []uint32
	for cpu := range cur {
		if _, ok := prev[cpu]; ok {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) == 0 {
		return
	}
	slices.Sort(cpus)
	for _, st := range softnetStats {
		var total uint64
		for _, cpu := range cpus {
			d := st.get(cur[cpu]) - st.get(prev[cpu]) // uint32: modulo 2^32
			total += uint64(d)
			if s.perCore {
				name := fmt.Sprintf("cpu%d", cpu)
				emit(datafile.Series{Name: SoftnetSeries(s.host, name, st.stat), Kind: datafile.KindSoftnet, Units: st.units, Host: s.host, Stat: st.stat},
					datafile.Sample{T: t, V: float64(d) / dt, Dur: dt})
			}
		}
		emit(datafile.Series{Name: SoftnetSeries(s.host, "all", st.stat), Kind: datafile.KindSoftnet, Units: st.units, Host: s.host, Stat: st.stat},
			datafile.Sample{T: t, V: float64(total) / dt, Dur: dt})
	}
}
