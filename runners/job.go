package runners

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"

	"github.com/bloatbench/bloatbench/datafile"
)

// JobSpec is what an agent is given to start a job of any kind: the fields every
// kind shares, which the controller fills in without knowing the kind, and the
// kind's own parameters (Params), which only the kind reads.
type JobSpec struct {
	Kind string `json:"kind"`
	// Start is when the job starts, Unix seconds on this host's clock (the
	// controller converts the run's t0 plus the job's offset); 0 = at once.
	Start float64 `json:"start,omitempty"`
	// Duration is how long it runs, seconds; a background kind runs until stopped.
	Duration float64 `json:"duration,omitempty"`
	// Step is the run's sampling interval, seconds.
	Step float64 `json:"step"`
	// Target is the test address of the host the job aims at (or binds to).
	Target string `json:"target,omitempty"`
	// Addr is host:port of the job this one connects to, and Token the secret that
	// job's connections must present.
	Addr  string `json:"addr,omitempty"`
	Token string `json:"token,omitempty"`
	// PeerOffset is the clock of the host the job aims at or connects to minus
	// this host's, seconds, as the controller estimated both at the run's start,
	// and PeerOffsetErr its uncertainty (half of each estimate's best round trip,
	// added): what a one-way delay needs.
	PeerOffset    float64 `json:"peer_offset,omitempty"`
	PeerOffsetErr float64 `json:"peer_offset_err,omitempty"`
	// Host is the inventory's name for this host: per-host series carry it.
	Host string `json:"host,omitempty"`
	// Devs are the devices of this host the run watches (its bottlenecks, their
	// IFBs, its path devices).
	Devs []Dev `json:"devs,omitempty"`
	// Pair is the client/server pair the job belongs to in a run with several
	// ("" in a run with one): the agent names every series the job yields for it
	// (datafile.PairName), so kinds need not know.
	Pair string `json:"pair,omitempty"`
	// Params are the kind's own, as Kind.Plan resolved them.
	Params json.RawMessage `json:"params,omitempty"`
	// Clients are the jobs of the same pair that connect to this one, as planned:
	// a listener accepts from the test network only what they will ask of it.
	Clients []Client `json:"clients,omitempty"`
}

// Client is a job that connects to another, as the controller planned it.
type Client struct {
	Kind     string          `json:"kind"`
	Duration float64         `json:"duration,omitempty"`
	Params   json.RawMessage `json:"params,omitempty"`
}

// Dev is a device a run watches on a host.
type Dev struct {
	Name string `json:"name"`
	// IFB is set for an intermediate functional block: its byte_queue_limits files
	// exist, but the ifb driver never accounts to them.
	IFB bool `json:"ifb,omitempty"`
	// Changed is set when the run's setup changes the device (an IFB the setup
	// makes is changed): its qdiscs at a job's prepare are not the run's.
	Changed bool `json:"changed,omitempty"`
}

// Env is how a running job reports: samples, series it finds as it runs (a
// sampler learns a qdisc's statistics from the kernel), and warnings for the data
// file. All are safe for concurrent use.
type Env struct {
	Emit    Emit
	Declare func(datafile.Series)
	Warn    func(msg string)
	// Alert is a warning the person running the test must see as it runs (a
	// test that did not get what it asked for), recorded as Warn's are. Nil
	// falls back to Warn.
	Alert func(msg string)
	// Streams bounds the agent's TCP streams in system calls at once, shared by
	// every stream job of the agent; nil bounds nothing.
	Streams *StreamGate
	// Prepared is what the kind's Prepare returned for this job, when the
	// controller had it prepared; Start owns it from then on (closes it when the
	// job ends, or when Start fails).
	Prepared io.Closer
	// Keep is the agent's store for its session; nil keeps nothing.
	Keep *Keep
}

// Started is what a kind says once its job is ready to run: the port it listens
// on, where its timestamps come from, a line for the log.
type Started struct {
	Port       int    `json:"port,omitempty"`
	Timestamps string `json:"timestamps,omitempty"`
	Message    string `json:"message,omitempty"`
}

// Job is a started job; Run runs it until it is done or ctx ends.
type Job interface {
	Run(ctx context.Context) error
}

// warn records msg, and shows it as the run goes when alert (Alert, or Warn
// where the caller gave none); a nil Warn records nothing.
func (env Env) warn(msg string, alert bool) {
	switch {
	case alert && env.Alert != nil:
		env.Alert(msg)
	case env.Warn != nil:
		env.Warn(msg)
	}
}

// JobFunc is a Job that is a function.
type JobFunc func(ctx context.Context) error

// Run calls f.
func (f JobFunc) Run(ctx context.Context) error { return f(ctx) }

// Kind is one kind of job: how the controller plans it and how an agent runs it.
type Kind struct {
	// Plan checks a job's parameters on the controller, before any host is
	// touched, and returns the parameters the agent gets and the series the job
	// yields. The planner numbers flows across a test's jobs.
	Plan func(params map[string]any, pl *Planner) (json.RawMessage, []datafile.Series, error)
	// Start opens what the job needs (sockets, files) and returns it ready to run;
	// it runs on the agent.
	Start func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error)
	// Prepare, where a kind has it, does the slow part of a start ahead of it,
	// before the run picks t0: the controller waits for every prepare, so its time
	// holds up no job's start and its CPU is not spent in the run's first idle
	// seconds, whose ping is the baseline of every "over idle" number. Start gets
	// what it returned in Env.Prepared; Start must also work without it.
	Prepare func(ctx context.Context, spec JobSpec, env Env) (io.Closer, error)
	// Background kinds run until the run stops them (a listener, a sampler); the
	// others end by themselves, and the run waits for them.
	Background bool
	// Sampler kinds watch a host and talk to no other job: any run can add them
	// on any host (--sampler).
	Sampler bool
}

// planWith is the Plan of a kind with parameters P: the test's parameters are
// decoded strictly into P, plan checks them, declares and claims the job's series
// and returns what the agent is to get, which is marshalled here.
func planWith[P any](plan func(p P, pl *Planner) (any, []datafile.Series, error)) func(map[string]any, *Planner) (json.RawMessage, []datafile.Series, error) {
	return func(params map[string]any, pl *Planner) (json.RawMessage, []datafile.Series, error) {
		var p P
		if err := decodeParams(params, &p); err != nil {
			return nil, nil, err
		}
		agentParams, series, err := plan(p, pl)
		if err != nil {
			return nil, nil, err
		}
		b, err := json.Marshal(agentParams)
		return b, series, err
	}
}

// planNone is the Plan of a kind that takes no parameters.
func planNone(kind string) func(map[string]any, *Planner) (json.RawMessage, []datafile.Series, error) {
	return func(params map[string]any, _ *Planner) (json.RawMessage, []datafile.Series, error) {
		if len(params) > 0 {
			return nil, nil, fmt.Errorf("%s takes no parameters", kind)
		}
		return nil, nil, nil
	}
}

// startNone is the Start of a kind that takes no parameters: start, after the
// agent has refused any it was sent (a controller of another version).
func startNone(kind string, start func(context.Context, JobSpec, Env) (Job, Started, error)) func(context.Context, JobSpec, Env) (Job, Started, error) {
	return func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		if err := decodeRaw(spec.Params, &struct{}{}); err != nil {
			return nil, Started{}, fmt.Errorf("%s: %w", kind, err)
		}
		return start(ctx, spec, env)
	}
}

// Kinds is the registry: every kind of job by name. A new workload is a runner
// file and one line here.
func Kinds() map[string]Kind {
	return map[string]Kind{
		"tcp-listen":    tcpListenKind,
		"tcp-streams":   tcpStreamsKind,
		"ping":          pingKind,
		"qdisc":         qdiscKind,
		"cpu":           cpuKind,
		"softnet":       softnetKind,
		"sojourn":       sojournKind,
		"rr-server":     rrServerKind,
		"udp-rr":        udpRRKind,
		"tcp-rr":        tcpRRKind,
		"udp-sink":      udpSinkKind,
		"udp-flood":     udpFloodKind,
		"udp-echo":      udpEchoKind,
		"udp-probe":     udpProbeKind,
		"udp-scalable":  udpScalableKind,
		"rate-schedule": rateScheduleKind,
	}
}

// KindNames lists the registered kinds, sorted, for errors.
func KindNames() []string {
	var names []string
	for n := range Kinds() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Planner carries what planning one test's jobs shares: flow numbers and series
// names.
type Planner struct {
	next    map[string]int
	series  map[string]bool
	sysctls map[string]SysctlWant
}

// NewPlanner starts planning a test.
func NewPlanner() *Planner {
	return &Planner{next: map[string]int{}, series: map[string]bool{}, sysctls: map[string]SysctlWant{}}
}

// SysctlWant is a host sysctl a test's jobs need set for them to be what they
// ask (ECN of TCP flows, which Linux negotiates from net.ipv4.tcp_ecn): the run
// sets it on every host, as a setup's sysctls, and puts it back after.
type SysctlWant struct {
	Value string
	// By says which jobs ask, and why, for errors and warnings.
	By string
	// Optional: a kernel that refuses the value (Accurate ECN before Linux 6.19)
	// gets a warning, not a failed run; the jobs then report what they got.
	Optional bool
}

// WantSysctl records that a job needs key set to w.Value; two jobs that need it
// set to different values cannot run in one test.
func (pl *Planner) WantSysctl(key string, w SysctlWant) error {
	if have, ok := pl.sysctls[key]; ok && have.Value != w.Value {
		return fmt.Errorf("%s needs %s = %s, and %s needs %s: one host cannot have both", w.By, key, w.Value, have.By, have.Value)
	} else if ok {
		w.By = have.By + ", " + w.By
		w.Optional = have.Optional && w.Optional
	}
	pl.sysctls[key] = w
	return nil
}

// Sysctls are the sysctls the test's jobs need, by name.
func (pl *Planner) Sysctls() map[string]SysctlWant { return pl.sysctls }

// Next numbers flows of one key (a direction) across the test's jobs, from 1.
func (pl *Planner) Next(key string) int {
	pl.next[key]++
	return pl.next[key]
}

// Claim takes a series name; a name two jobs would yield is an error.
func (pl *Planner) Claim(name string) error {
	if pl.series[name] {
		return fmt.Errorf("series %q would be yielded twice", name)
	}
	pl.series[name] = true
	return nil
}

// Count is how many flows of key have been numbered.
func (pl *Planner) Count(key string) int { return pl.next[key] }

// declaring is how a sampler reports series it learns of as it runs (how many
// cores, which statistics a qdisc keeps): the first sample of each series goes out
// after its declaration.
func declaring(env Env) func(datafile.Series, datafile.Sample) {
	seen := map[string]bool{}
	return func(se datafile.Series, x datafile.Sample) {
		if !seen[se.Name] {
			seen[se.Name] = true
			if env.Declare != nil {
				env.Declare(se)
			}
		}
		env.Emit(se.Name, x)
	}
}

// declareConn declares the connection whose packets carry series of's (a
// flow's, a probe's): a series of kind conn, with no samples, that the reports
// match with the sojourn tracer's counts of each connection through each tx
// queue of the bottleneck, to say which queue the flow or probe went through.
// It is declared once the run's file takes declarations (a sample's time or
// later); an env without Declare (a runner driven by hand) declares nothing.
func declareConn(env Env, host, of, proto string, local, remote netip.AddrPort) {
	if env.Declare == nil || !remote.IsValid() {
		return
	}
	env.Declare(datafile.Series{Name: datafile.ConnPrefix + of, Kind: datafile.KindConn, Host: host, Of: of,
		Conn: datafile.Conn{Proto: proto, Src: local, Dst: remote}.String()})
}

// addrPortOf is a socket address's address and port, the zero AddrPort for
// another kind of address.
func addrPortOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort()
	case *net.UDPAddr:
		return a.AddrPort()
	}
	return netip.AddrPort{}
}

// everyStep calls read at start (Unix seconds on this host's clock; 0 = now) and
// then once a step (0 = the samplers' 0.2 s) until ctx ends or read fails: the
// samplers' loop.
func everyStep(ctx context.Context, start, step float64, read func() error) error {
	g := newStepGrid(startTime(start), step, 0, false)
	defer g.close()
	for {
		if _, ev, _ := g.wait(ctx, nil); ev != stepTick {
			return nil
		}
		if err := read(); err != nil {
			return err
		}
	}
}

// perCoreParams are the parameters of the samplers that read per-CPU counters:
// per-core series multiply the data file by the number of cores, so the whole host
// is the default.
type perCoreParams struct {
	PerCore boolFlag `json:"per_core,omitempty"`
}

// planPerCore is the Plan of those samplers: how many cores a host has only the
// host can tell, so their series are declared as they come.
func planPerCore(params map[string]any, pl *Planner) (json.RawMessage, []datafile.Series, error) {
	var p perCoreParams
	if err := decodeParams(params, &p); err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(p)
	return b, nil, err
}

// decodeParams turns a job's parameters (from YAML, through JSON) into the kind's
// own type, refusing keys it does not know: a typo must not run a different test.
func decodeParams(params any, into any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return decodeRaw(b, into)
}

func decodeRaw(b json.RawMessage, into any) error {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("parameters: %w", err)
	}
	return nil
}
