package runners

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// PingSpec runs ICMP echo from this host to Target.
type PingSpec struct {
	Series   string  `json:"series"`
	Target   string  `json:"target"`   // an IPv4 or IPv6 address
	Interval float64 `json:"interval"` // seconds between probes
	Duration float64 `json:"duration"` // seconds of probing
	Size     int     `json:"size,omitempty"`
	// Start is when the first probe goes, Unix seconds on this host's clock (the
	// controller converts the run's t0 with the offset it estimated); 0 = at once.
	Start float64 `json:"start,omitempty"`
}

// MinPingInterval is the shortest probe interval accepted.
const MinPingInterval = 0.01

// lossWait is how long after the last probe a reply may still come.
const lossWait = time.Second

// defaultPingSize is the echo payload in bytes, iputils' and fping's default.
const defaultPingSize = 56

// Pinger is an ICMP prober with its socket open: what timestamps it gets is known
// before its first probe.
type Pinger struct {
	spec PingSpec
	p    *prober
	// Warn, if set, receives what is worth a line in the data file (replies that
	// lacked the kernel's stamps).
	Warn func(msg string)
}

// OpenPing checks the spec and opens the socket.
func OpenPing(spec PingSpec) (*Pinger, error) { return openPing(kernel{}, spec) }

func openPing(sys sysCalls, spec PingSpec) (*Pinger, error) {
	if spec.Interval < MinPingInterval {
		return nil, fmt.Errorf("ping interval %gs is below the minimum %gs", spec.Interval, MinPingInterval)
	}
	target, err := netip.ParseAddr(spec.Target)
	if err != nil {
		return nil, fmt.Errorf("ping target %q is not an IP address", spec.Target)
	}
	size := spec.Size
	if size <= 0 {
		size = defaultPingSize
	}
	p, err := openICMP(sys, target, size, time.Duration(spec.Interval*float64(time.Second)))
	if err != nil {
		return nil, fmt.Errorf("ping %s: %w", spec.Target, err)
	}
	return &Pinger{spec: spec, p: p}, nil
}

// Timestamps is the data file's name for where its times come from
// (datafile.StampsKernel, StampsKernelRX or StampsUser).
func (pg *Pinger) Timestamps() string { return pg.p.stamps.label() }

// Describe says where its times come from, in words.
func (pg *Pinger) Describe() string {
	kind := "unprivileged ICMP socket"
	if pg.p.raw {
		kind = "raw ICMP socket"
	}
	if pg.p.v6 {
		kind += " (ICMPv6)"
	}
	return kind + "; " + pg.p.stamps.describe()
}

// Close releases the socket of a Pinger that will not Run.
func (pg *Pinger) Close() { pg.p.close() }

// RunPing probes Target every Interval for Duration and emits one sample per reply
// (its RTT in ms, at the time the reply arrived) and one per probe that got none
// (Lost, at the time it was sent).
func RunPing(ctx context.Context, spec PingSpec, emit Emit) error {
	pg, err := OpenPing(spec)
	if err != nil {
		return err
	}
	return pg.Run(ctx, emit)
}

// Run sends the probes from Start on (probe k at Start + k*Interval, on the
// monotonic clock, so they never drift), waits for their replies until Duration
// plus a second after Start, then records the unanswered ones as lost. It closes the
// socket. A context that ends stops it without recording losses.
func (pg *Pinger) Run(ctx context.Context, emit Emit) error {
	defer pg.p.close()
	spec := pg.spec
	interval := time.Duration(spec.Interval * float64(time.Second))
	count := max(int(spec.Duration/spec.Interval+0.5), 1)
	start := startTime(spec.Start)
	deadline := start.Add(time.Duration(spec.Duration*float64(time.Second)) + lossWait)

	var fellBack [2]int // replies without the kernel's receive, send stamp
	sched := probeSchedule{start: start, interval: interval, count: count, deadline: deadline}
	t, err := sched.run(ctx, pg.p.send, func(answered func()) error {
		return pg.p.receive(func(r reply) {
			user := false
			if !r.kernelRX && pg.p.stamps.rx != "" {
				fellBack[0]++
				user = true
			}
			if !r.kernelTX && pg.p.stamps.tx {
				fellBack[1]++
				user = true
			}
			emit(spec.Series, datafile.Sample{T: unix(r.at), V: float64(r.rtt) / float64(time.Millisecond), Seq: r.k, UserStamp: user})
			answered()
		})
	}, pg.p.stop)
	if err != nil {
		return fmt.Errorf("ping %s: %w", spec.Target, err)
	}
	if t.interrupted {
		return nil
	}
	recordLost(pg.p, emit, spec.Series)
	if t.failed == t.sent && t.sent > 0 {
		return fmt.Errorf("ping %s: every probe failed to send: %w", spec.Target, t.sendErr)
	}
	if pg.Warn != nil {
		if t.skipped > 0 {
			pg.Warn(fmt.Sprintf("ping %s: %d probes were not sent: their slots had passed when the runner got to them (it started or ran late), and only the latest one due was sent", spec.Target, t.skipped))
		}
		if fellBack[0] > 0 {
			pg.Warn(fmt.Sprintf("ping %s: %d of %d replies came without the kernel's receive timestamp; their receive times were taken in user space", spec.Target, fellBack[0], t.answered))
		}
		if fellBack[1] > 0 {
			pg.Warn(fmt.Sprintf("ping %s: %d of %d probes got no kernel send timestamp; their send times were taken in user space before sendto", spec.Target, fellBack[1], t.answered))
		}
		if t.failed > 0 {
			pg.Warn(fmt.Sprintf("ping %s: %d of %d probes could not be sent (recorded as lost): %v", spec.Target, t.failed, t.sent, t.sendErr))
		}
	}
	return nil
}

// PingSeries is the ICMP ping series' default name, flent's.
const PingSeries = "Ping (ms) ICMP"

// pingParams are a ping job's parameters: its series name (a test with two pings
// names them apart), the payload size, and the interval when it is not the run's
// step.
type pingParams struct {
	Series   string      `json:"series,omitempty"`
	Size     wholeNumber `json:"size,omitempty"`
	Interval seconds     `json:"interval,omitempty"`
}

var pingKind = Kind{
	Plan: planWith(func(p pingParams, pl *Planner) (any, []datafile.Series, error) {
		if p.Series == "" {
			p.Series = PingSeries
		}
		if p.Size < 0 || p.Size > 65000 {
			return nil, nil, fmt.Errorf("size %d: want 0 (the default, %d) to 65000 bytes", p.Size, defaultPingSize)
		}
		if p.Interval != 0 && float64(p.Interval) < MinPingInterval {
			return nil, nil, fmt.Errorf("interval %gs is below the minimum %gs", float64(p.Interval), MinPingInterval)
		}
		if err := pl.Claim(p.Series); err != nil {
			return nil, nil, err
		}
		return p, []datafile.Series{{Name: p.Series, Kind: datafile.KindPing, Units: "ms"}}, nil
	}),
	// The socket opens before the answer: a host that allows no ICMP socket fails
	// the start, and the answer says what stamps the probes get.
	Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		var p pingParams
		if err := decodeRaw(spec.Params, &p); err != nil {
			return nil, Started{}, err
		}
		interval := float64(p.Interval)
		if interval == 0 {
			interval = spec.Step
		}
		if p.Series == "" {
			p.Series = PingSeries
		}
		pg, err := OpenPing(PingSpec{Series: p.Series, Target: spec.Target, Interval: interval, Duration: spec.Duration,
			Size: int(p.Size), Start: spec.Start})
		if err != nil {
			return nil, Started{}, err
		}
		pg.Warn = env.Warn
		// The connection is declared with the first sample: an unprivileged
		// ICMP socket has its identifier from the first send on.
		var once sync.Once
		emit := func(name string, x datafile.Sample) {
			once.Do(func() {
				local, remote := pg.p.ends()
				declareConn(env, spec.Host, p.Series, pg.p.protoName(), local, remote)
			})
			env.Emit(name, x)
		}
		return JobFunc(func(ctx context.Context) error { return pg.Run(ctx, emit) }),
			Started{Timestamps: pg.Timestamps(), Message: pg.Describe()}, nil
	},
}
