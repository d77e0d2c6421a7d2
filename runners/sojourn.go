package runners

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"syscall"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/sojourn"
	"github.com/cilium/ebpf/btf"
)

// The sojourn kind measures, from inside the kernel, how long each packet waited in
// the host's bottleneck qdiscs (package sojourn's BPF programs), and ships each
// step's histogram of it, per qdisc, as samples: one per non-empty bucket, V the
// bucket's time in ms and N its packets over the step; and a second histogram of
// each qdisc's ICMP echo packets alone (a ping's), whose wait a flow-queuing
// qdisc keeps apart from the bulk's. Where the kernel has no BTF
// or tracepoints, or the agent is not root, it says so in the run's events and
// records nothing; reports then estimate the qdisc's delay from its backlog.

// SojournSeries names a qdisc's sojourn histogram: handle as tc prints it ("1:").
func SojournSeries(host, dev, handle string) string {
	return fmt.Sprintf("sojourn %s:%s %s", host, dev, handle)
}

// EchoSuffix ends the Stat (and the name) of a qdisc's histogram of the ICMP echo
// packets alone: "sojourn HOST:DEV 1: echo".
const EchoSuffix = " echo"

var sojournKind = Kind{
	Background: true,
	Sampler:    true,
	Plan:       planNone("sojourn"),
	Prepare: func(ctx context.Context, spec JobSpec, env Env) (io.Closer, error) {
		if err := decodeRaw(spec.Params, &struct{}{}); err != nil {
			return nil, err
		}
		if why := noQueue(spec); why != "" {
			return &loadedTracer{idle: why}, nil
		}
		tr, err := openTracer(spec, env)
		return &loadedTracer{tr: tr, err: err}, nil
	},
	Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		loaded, _ := env.Prepared.(*loadedTracer)
		if err := decodeRaw(spec.Params, &struct{}{}); err != nil {
			if loaded != nil {
				loaded.Close()
			}
			return nil, Started{}, err
		}
		if len(spec.Devs) == 0 {
			if loaded != nil {
				loaded.Close()
			}
			return JobFunc(func(context.Context) error { return nil }), Started{}, nil
		}
		// Prepared, the prepare has looked; else it is looked at here.
		var why string
		if loaded != nil {
			why = loaded.idle
		} else {
			why = noQueue(spec)
		}
		if why != "" {
			return JobFunc(func(context.Context) error { return nil }), Started{Message: why}, nil
		}
		devs := devNames(spec)
		return JobFunc(func(ctx context.Context) error {
			if loaded == nil {
				// Not prepared ahead (an agent driven by hand): loading is left to
				// the job's run, as a job's start holds up every job after it.
				tr, err := openTracer(spec, env)
				loaded = &loadedTracer{tr: tr, err: err}
			}
			defer loaded.Close()
			if loaded.err != nil {
				// Not the run's failure: the run goes on, its qdisc delay estimated.
				env.Warn(fmt.Sprintf("no per-packet sojourn on %v: %v; the qdisc's delay is estimated from its backlog", devs, loaded.err))
				return nil
			}
			s := &sojournSampler{tr: loaded.tr, host: spec.Host, env: env, prev: map[sojourn.Key]sojourn.Hist{}, conns: map[sojourn.ConnKey]sojourn.ConnCount{}}
			err := everyStep(ctx, spec.Start, spec.Step, s.step)
			// The connections' last counts: a probe's last replies and a flow's
			// last packets came after the last second's.
			if cerr := s.emitConns(unix(time.Now())); err == nil {
				err = cerr
			}
			s.warnUnstamped()
			return err
		}), Started{Message: fmt.Sprintf("tracing the sojourn of every packet in the qdiscs of %v (BPF on qdisc_enqueue and qdisc_dequeue)", devs)}, nil
	},
}

// loadedTracer is a sojourn job's tracer, loaded (or refused, err) by Prepare
// ahead of the run: the kernel's BTF is parsed and the programs verified there,
// which takes seconds of CPU in an emulated guest.
type loadedTracer struct {
	tr  *sojourn.Tracer
	err error
	// idle says why none was loaded: no device has a queue to trace.
	idle string
}

// Close unloads the programs.
func (l *loadedTracer) Close() error {
	if l.tr == nil {
		return nil
	}
	err := l.tr.Close()
	l.tr = nil
	return err
}

func devNames(spec JobSpec) []string {
	var devs []string
	for _, d := range spec.Devs {
		devs = append(devs, d.Name)
	}
	return devs
}

// noQueue says why spec's devices need no tracer, or "" when they may: every one
// has no qdisc (noqueue, a veth's default), which the run leaves as it is. Their
// packets go straight to the driver and the programs would trace nothing, while
// their load was a third of a short run's CPU on the local lab (0.3-0.4 of 1.3
// core-seconds, two agents) and on the path to its t0. Any doubt (a device the
// setup changes, one the kernel does not list) is a tracer.
func noQueue(spec JobSpec) string {
	var devs []string
	for _, d := range spec.Devs {
		if d.Changed {
			return ""
		}
		devs = append(devs, d.Name)
	}
	if len(devs) == 0 {
		return ""
	}
	qdiscs, err := rootQdiscs()
	if err != nil {
		return ""
	}
	for _, d := range devs {
		if qdiscs[d] != "noqueue" {
			return ""
		}
	}
	return fmt.Sprintf("no sojourn to trace on %v: no qdisc (noqueue), and the run leaves them so", devs)
}

// rootQdiscs is each device's root qdisc kind by name, as the kernel tells ip
// link (IFLA_QDISC), in this thread's network namespace.
func rootQdiscs() (map[string]string, error) {
	tab, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("list the links: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(tab)
	if err != nil {
		return nil, fmt.Errorf("list the links: %w", err)
	}
	out := map[string]string{}
	for _, m := range msgs {
		if m.Header.Type != syscall.RTM_NEWLINK {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			continue
		}
		var name, kind string
		for _, a := range attrs {
			switch a.Attr.Type {
			case syscall.IFLA_IFNAME:
				name = string(bytes.TrimRight(a.Value, "\x00"))
			case syscall.IFLA_QDISC:
				kind = string(bytes.TrimRight(a.Value, "\x00"))
			}
		}
		if name != "" {
			out[name] = kind
		}
	}
	return out, nil
}

// openTracer loads the programs for spec's devices; none is no tracer and no error.
// The kernel's BTF, decoded for the first run's, is kept for the session's later
// runs: in the VM lab's emulated guest a decode was about half a second of a
// load's 1.2.
func openTracer(spec JobSpec, env Env) (*sojourn.Tracer, error) {
	if len(spec.Devs) == 0 {
		return nil, nil
	}
	kernel := env.Keep.Value("kernel BTF", func() any { return btf.NewCache() }).(*btf.Cache)
	return sojourn.Open(devNames(spec), kernel)
}

type sojournSampler struct {
	tr    *sojourn.Tracer
	host  string
	env   Env
	emit  func(datafile.Series, datafile.Sample)
	prev  map[sojourn.Key]sojourn.Hist
	prevT float64
	// conns are each connection's counts through each tx queue as last
	// emitted, at connT.
	conns map[sojourn.ConnKey]sojourn.ConnCount
	connT float64
	// connsFull says the tracer's map of connections was found full, once.
	connsFull bool
}

// connEvery is how often the connections' counts are emitted, seconds: which
// queue each went through is a run's answer, not a step's, and a run of 128
// flows has some 300 connections on a router's two devices.
const connEvery = 1.0

// ConnQueueSeries names a connection's count through one tx queue.
func ConnQueueSeries(host, dev string, txq uint16, conn string) string {
	return fmt.Sprintf("conn %s:%s tx-%d %s", host, dev, txq, conn)
}

// emitConns emits, for each connection whose packets through a tx queue grew
// since the last time, the packets (V) and bytes since the tracer began.
func (s *sojournSampler) emitConns(t float64) error {
	if s.emit == nil {
		s.emit = declaring(s.env)
	}
	cs, err := s.tr.Conns()
	if err != nil {
		return err
	}
	s.connT = t
	if len(cs) >= sojourn.MaxConns && !s.connsFull {
		s.connsFull = true
		s.env.Warn(fmt.Sprintf("sojourn: %d connections counted through the tx queues, the most the tracer holds: later connections' queues are not known", sojourn.MaxConns))
	}
	for k, c := range cs {
		if prev, ok := s.conns[k]; ok && prev == c {
			continue
		}
		s.conns[k] = c
		dev := s.tr.Devs[k.Ifindex]
		conn := datafile.Conn{Proto: datafile.ProtoName(k.Proto), Src: k.Src, Dst: k.Dst}.String()
		queue := fmt.Sprintf("tx-%d", k.TxQueue)
		se := datafile.Series{Name: ConnQueueSeries(s.host, dev, k.TxQueue, conn), Kind: datafile.KindConnQueue, Units: "packets",
			Host: s.host, Dev: dev, Queue: queue, Stat: tcHandle(k.Parent), Conn: conn, Counter: true}
		s.emit(se, datafile.Sample{T: t, V: float64(c.Packets), Bytes: int64(min(c.Bytes, 1<<62))})
	}
	return nil
}

// step reads the histograms and emits what each qdisc's gained since the last
// read; the first read is the baseline.
func (s *sojournSampler) step() error {
	if s.emit == nil {
		s.emit = declaring(s.env)
	}
	hs, err := s.tr.Read()
	if err != nil {
		return err
	}
	t := unix(time.Now())
	first := s.prevT == 0
	if !first && t-s.connT >= connEvery {
		if err := s.emitConns(t); err != nil {
			return err
		}
	}
	dur := t - s.prevT
	s.prevT = t
	for k, h := range hs {
		prev, seen := s.prev[k]
		s.prev[k] = h
		if first {
			continue
		}
		dev := s.tr.Devs[k.Ifindex]
		stat := fmt.Sprintf("%x:", k.Handle>>16)
		if k.Class == sojourn.Echo {
			stat += EchoSuffix
		}
		se := datafile.Series{Name: SojournSeries(s.host, dev, stat), Kind: datafile.KindSojourn, Units: "ms",
			Host: s.host, Dev: dev, Stat: stat}
		for b, n := range h.Counts {
			if seen {
				n -= prev.Counts[b]
			}
			if n == 0 {
				continue
			}
			s.emit(se, datafile.Sample{T: t, V: sojourn.Mid(b) / 1e6, Dur: dur, N: uint32(min(n, 1<<32-1))})
		}
	}
	return nil
}

// warnUnstamped says when a qdisc gave up packets it was not seen to take: their
// waits are missing from its histogram. Where the kernel would not let the tracer
// follow segments cut inside a qdisc, that is the likely cause, and said. It also
// says, for the log, how many packets passed each qdisc empty: a qdisc that is
// bypassed nearly always was seldom the bottleneck.
func (s *sojournSampler) warnUnstamped() {
	why := fmt.Sprintf("requeued, or past a bulk dequeue's %d", sojourn.MaxBulk)
	if s.tr.Segments != nil {
		why = fmt.Sprintf("requeued, past a bulk dequeue's %d, or segments cut inside the qdisc, as dualpi2's and cake's split-gso are, which this kernel does not let the tracer follow: %v", sojourn.MaxBulk, s.tr.Segments)
	}
	keys := make([]sojourn.Key, 0, len(s.prev))
	for k := range s.prev {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b sojourn.Key) int {
		return cmp.Or(cmp.Compare(a.Ifindex, b.Ifindex), cmp.Compare(a.Parent, b.Parent), cmp.Compare(a.Handle, b.Handle))
	})
	for _, k := range keys {
		h := s.prev[k]
		if k.Class != sojourn.All {
			continue
		}
		missed := h.Unstamped + h.BeyondBulk
		total := h.Counts.Total() + missed
		if h.Bypassed > 0 {
			s.env.Warn(fmt.Sprintf("sojourn: %d of the %d packets through %s's qdisc %x: (parent %s) passed it empty, straight to the driver: counted with a wait of 0",
				h.Bypassed, total, s.tr.Devs[k.Ifindex], k.Handle>>16, tcHandle(k.Parent)))
		}
		if total > 0 && missed*100 > total {
			s.env.Warn(fmt.Sprintf("sojourn: %d of the %d packets dequeued from %s's qdisc %x: had no enqueue stamp (%s): the histogram holds the others",
				missed, total, s.tr.Devs[k.Ifindex], k.Handle>>16, why))
		}
	}
}

// tcHandle is a qdisc's parent as tc prints it: "root", or major:minor in hex.
func tcHandle(h uint32) string {
	if h == 0xffffffff {
		return "root"
	}
	return fmt.Sprintf("%x:%x", h>>16, h&0xffff)
}
