package controller

// The driving room: the jobs prepared, started on every agent at one t0, waited
// for while the run lasts, and stopped; what the run loop needs beyond placement
// and recording.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/tcrate"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/runners"
)

// jobKey names a job on one endpoint.
type jobKey struct {
	ep  *endpoint
	job string
}

// jobSet is a run's jobs: those it waits for (they end by themselves) and those
// stopped when it ends (the listener, the samplers).
type jobSet struct {
	rec        *recorder
	awaited    map[jobKey]bool
	background map[jobKey]bool
	// prepared are the jobs prepared and not yet started; the prepares go out
	// at once, so this one map is guarded.
	mu       sync.Mutex
	prepared map[jobKey]bool
}

// start asks ep's agent to start a job of this run.
func (js *jobSet) start(ctx context.Context, ep *endpoint, req agent.Request, awaited bool) (agent.Message, error) {
	req.Job = js.rec.prefix + req.Job
	// Starting a job is answered at once; a host that does not answer is frozen.
	cctx, cancel := context.WithTimeout(ctx, ep.conn.commandTimeout())
	defer cancel()
	began := time.Now()
	m, err := ep.agent.Call(cctx, req)
	if err != nil {
		return m, ep.deathErr(err)
	}
	ep.startTook = max(ep.startTook, time.Since(began))
	k := jobKey{ep, req.Job}
	js.mu.Lock()
	delete(js.prepared, k)
	js.mu.Unlock()
	if awaited {
		if js.awaited == nil {
			js.awaited = map[jobKey]bool{}
		}
		js.awaited[k] = true
	} else {
		if js.background == nil {
			js.background = map[jobKey]bool{}
		}
		js.background[k] = true
	}
	return m, nil
}

// prepare asks ep's agent to prepare a job of this run, ahead of its start; until
// then a stop of the run lets it go.
func (js *jobSet) prepare(ctx context.Context, ep *endpoint, req agent.Request) error {
	req.Job = js.rec.prefix + req.Job
	cctx, cancel := context.WithTimeout(ctx, prepareWithin)
	defer cancel()
	js.mu.Lock()
	if js.prepared == nil {
		js.prepared = map[jobKey]bool{}
	}
	js.prepared[jobKey{ep, req.Job}] = true
	js.mu.Unlock()
	if _, err := ep.agent.Call(cctx, req); err != nil {
		return ep.deathErr(err)
	}
	return nil
}

// ended takes a job's end off the set.
func (js *jobSet) ended(e jobEnd) {
	for k := range js.awaited {
		if k.ep.label == e.host && k.job == e.job {
			delete(js.awaited, k)
		}
	}
	for k := range js.background {
		if k.ep.label == e.host && k.job == e.job {
			delete(js.background, k)
		}
	}
}

// stopWithin bounds stopping a run's jobs: a frozen host must not hold up the
// restore of the others.
const stopWithin = 3 * time.Second

// stopAll stops every job still running and waits for their ends (their last samples
// come before), at most stopWithin; an agent that does not answer is marked broken.
func (js *jobSet) stopAll(ctx context.Context) {
	left := map[jobKey]bool{}
	for k := range js.awaited {
		left[k] = true
	}
	for k := range js.background {
		left[k] = true
	}
	// A job prepared and never started has no end to wait for: its stop lets
	// go of what it holds (a tracer's programs) before the restore.
	js.mu.Lock()
	unstarted := slices.Collect(maps.Keys(js.prepared))
	js.prepared = nil
	js.mu.Unlock()
	if len(left)+len(unstarted) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, stopWithin)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	// The stops go out from a copy of the keys: a stop that fails deletes its key
	// from left while this loop would still be ranging over it.
	keys := make([]jobKey, 0, len(left))
	for k := range left {
		keys = append(keys, k)
	}
	for _, k := range append(keys, unstarted...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := k.ep.agent.Call(ctx, agent.Request{Op: agent.OpStop, Job: k.job}); err != nil {
				mu.Lock()
				k.ep.broken = true
				delete(left, k)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for len(left) > 0 {
		select {
		case e := <-js.rec.done:
			for k := range left {
				if k.ep.label == e.host && k.job == e.job {
					delete(left, k)
				}
			}
		case <-ctx.Done():
			for k := range left {
				k.ep.broken = true
			}
			return
		}
	}
}

func (o *Options) drive(ctx context.Context, eps []*endpoint, w *datafile.Writer, rec *recorder, jobs *jobSet, setup applied, prepared func() error) error {
	pairs := o.pairsOf(eps)
	server := pairs[0].server
	p := o.Plan
	length, delay, step := o.Length.Seconds(), o.Delay.Seconds(), o.Step.Seconds()
	total := length + 2*delay
	// The devices' statistics before the run are read first, while the jobs'
	// prepares end: in an emulated guest each tc costs tens of ms, which would
	// come out of the jobs' start lead.
	preRead := make(chan devStates, 1)
	go func() { preRead <- o.readStates(ctx, eps, "pre") }()
	err := prepared()
	pre := <-preRead
	if err != nil {
		return err
	}
	// Every job starts from one instant, t0, picked a little ahead and sent to each
	// agent on its own clock: ping and the samplers start at t0, the streams at
	// t0+delay, so every series starts on the grid (the header's t0).
	lead := o.startLead(eps)
	start := time.Now().Add(lead).Round(time.Millisecond)
	meta := datafile.Metadata{
		Test: p.Test, Title: o.Title, Parameters: p.Parameters, StartTime: start, T0: datafile.Unix(start),
		Length: length, Delay: delay, Step: step, TotalLength: total, Family: datafile.FamilyOf(server.host.TestIP),
		ToolVersion: o.Version, CommandLine: o.CommandLine, Setup: setup.setup, Path: setup.path, Note: o.Note,
		Aggregates: p.Aggregates, Rates: o.configuredRates(eps),
	}
	for _, ep := range eps {
		meta.Hosts = append(meta.Hosts, ep.info)
	}
	if err := w.Header(meta); err != nil {
		return err
	}
	for _, ep := range eps {
		for _, msg := range ep.warnings {
			w.Event(datafile.Event{T: datafile.Unix(start), Host: ep.host.Name, Level: "warning", Message: msg})
		}
	}
	for _, e := range setup.warnings {
		e.T = datafile.Unix(start)
		w.Event(e)
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	ins := o.instances(eps, start, hex.EncodeToString(tok))
	lv := &live{t0: start, delay: delay, length: length, total: total, tcp: map[string]float64{}, ping: math.NaN()}
	rec.mu.Lock()
	for _, in := range ins {
		rec.jobsOn[jobOn(in.ep.label, rec.prefix+in.name)] = true
		for i, se := range in.series {
			// Samples may come before the declaration, which waits for the job's
			// start to say where its times come from.
			owners, planned := rec.owners[se.Name]
			if !planned {
				rec.series++
			}
			if from := in.from[i].label; !slices.Contains(owners, from) {
				rec.owners[se.Name] = append(owners, from)
			}
			switch c := datafile.Classify(se); {
			case c.Role == datafile.RoleFlow:
				lv.tcp[se.Name] = 0
			case c.Role == datafile.RoleProbe && lv.pingSeries == "":
				lv.pingSeries = se.Name
			}
		}
	}
	rec.live = lv
	rec.mu.Unlock()
	writeStates(w, pre)
	o.logf("running %s for %gs (%s), sampling every %gs from %gs before to %gs after", p.Test, length, p.Describe(), step, delay, delay)
	ports := map[string]int{}
	for _, in := range ins {
		spec := in.spec
		if in.job.Connect != "" {
			// The job it connects to is of the same pair.
			spec.Addr = net.JoinHostPort(pairs[in.pairIndex].role(o.jobRole(in.job.Connect)).host.TestIP, strconv.Itoa(ports[instanceName(in.job.Connect, in.pair)]))
		}
		m, err := jobs.start(ctx, in.ep, agent.Request{Op: agent.OpStart, Job: in.name, Start: &spec}, !in.job.Background)
		if err != nil {
			if ctx.Err() != nil {
				// Ctrl-C while the jobs start is the run interrupted, as later.
				return fmt.Errorf("run interrupted while starting job %s on %s: %w", in.name, in.ep.host.Name, context.Cause(ctx))
			}
			return fmt.Errorf("start job %s (%s) on %s: %w", in.name, in.job.Kind, in.ep.host.Name, err)
		}
		ports[in.name] = m.Port
		for _, se := range in.series {
			if m.Timestamps != "" {
				se.Timestamps = m.Timestamps
			}
			if err := w.AddSeries(se); err != nil {
				return err
			}
		}
		if m.Timestamps != "" {
			level := "info"
			if m.Timestamps != datafile.StampsKernel {
				level = "warning"
			}
			o.logf("%s timestamps on %s: %s", in.name, in.ep.label, m.Message)
			w.Event(datafile.Event{T: datafile.Unix(time.Now()), Host: in.ep.host.Name, Level: level, Message: in.name + " timestamps: " + m.Message})
		}
	}
	if late := time.Since(start); late > 0 {
		msg := fmt.Sprintf("the jobs were started %.0f ms after t0 (the controller allowed %.0f ms): their first samples are late", late.Seconds()*1e3, lead.Seconds()*1e3)
		o.logf("warning: %s", msg)
		w.Event(datafile.Event{T: datafile.Unix(time.Now()), Level: "warning", Message: msg})
	}
	// The controller's own record of when each job started, on its clock, at the
	// instant the agents were given: what tests and readers check timing against.
	awaited := []instance{}
	for _, in := range ins {
		if !in.job.Background {
			awaited = append(awaited, in)
		}
	}
	sort.SliceStable(awaited, func(i, k int) bool { return awaited[i].at.Before(awaited[k].at) })
	for _, in := range awaited {
		if err := o.wait(ctx, eps, rec, jobs, in.at); err != nil {
			return err
		}
		now := time.Now()
		o.logf("%s started %.3fs after t0", in.name, now.Sub(start).Seconds())
		w.Event(datafile.Event{T: datafile.Unix(now), Level: "info", Message: in.name + " started"})
	}
	return o.wait(ctx, eps, rec, jobs, time.Time{})
}

// configuredRates are the rates the bottleneck devices should drain at while
// they have a queue: the setup's shaper where it has one; where the run leaves
// the device's root qdisc as it found it (no setup, or one of ingress, path or
// BQL alone), that qdisc's shaper as found (the local lab's htb); else the
// inventory's rate for the device, else the link speed its kernel told at the
// run's start.
func (o *Options) configuredRates(eps []*endpoint) []datafile.DeviceRate {
	facts := map[string]map[string]string{}
	for _, ep := range eps {
		facts[ep.host.Name] = ep.info.Facts
	}
	rootAsFound := o.Setup == nil || o.Setup.Root == nil && o.Setup.MQ == nil
	var out []datafile.DeviceRate
	for _, b := range o.Inventory.Bottleneck {
		r := datafile.DeviceRate{Host: b.Host, Dev: b.Dev}
		f := facts[b.Host]
		r.Bits, r.Source = o.Setup.ShaperRate(false)
		if r.Bits == 0 && rootAsFound {
			r.Bits, r.Source = qdisc.FoundShaperRate(f["dev."+b.Dev+".qdiscs"], f["dev."+b.Dev+".classes"])
		}
		if r.Bits == 0 && b.Rate != "" {
			if v, err := tcrate.Parse(b.Rate); err == nil {
				r.Bits, r.Source = v, "inventory"
			}
		}
		if r.Bits == 0 {
			if mbit, err := strconv.ParseFloat(f["dev."+b.Dev+".speed"], 64); err == nil && mbit > 0 {
				r.Bits, r.Source = mbit*1e6, "link speed"
			}
		}
		if r.Bits > 0 {
			out = append(out, r)
		}
		if v, what := o.Setup.ShaperRate(true); v > 0 {
			out = append(out, datafile.DeviceRate{Host: b.Host, Dev: qdisc.IFBName(b.Dev), Bits: v, Source: what})
		}
	}
	return out
}

// prepareWithin bounds a job's prepare: loading and verifying the sojourn
// tracer's programs takes seconds of CPU in an emulated guest, not minutes.
const prepareWithin = 2 * time.Minute

// startPrepare has the agents prepare the run's jobs and returns what waits for
// that (each call returns the same error). The prepares go out at once, ahead of the
// hosts' facts, locks and setup, which they neither read nor change: the kernel
// verifying a tracer's programs and making its maps (a tenth of a second of CPU a
// host here, more in an emulated guest) overlaps them. A setup that makes a device a job is prepared for
// (ingress's IFB) has them wait until it is made: they go out when first waited for.
func (o *Options) startPrepare(ctx context.Context, eps []*endpoint, jobs *jobSet) func() error {
	if o.Setup != nil && o.Setup.Ingress != nil {
		return sync.OnceValue(func() error { return o.prepare(ctx, eps, jobs) })
	}
	done := make(chan error, 1)
	go func() { done <- o.prepare(ctx, eps, jobs) }()
	return sync.OnceValue(func() error { return <-done })
}

// prepare has every agent do the slow part of its jobs' starts (runners.Kind's
// Prepare) before t0 is picked, all hosts at once, and waits for them: what the
// kernel spends loading a tracer is then neither late jobs nor delay in the run's
// idle phase. A host whose prepare fails fails the run, as its start would.
func (o *Options) prepare(ctx context.Context, eps []*endpoint, jobs *jobSet) error {
	kinds := runners.Kinds()
	var ins []instance
	for _, in := range o.instances(eps, time.Time{}, "") {
		if kinds[in.job.Kind].Prepare != nil {
			ins = append(ins, in)
		}
	}
	errs := make([]error, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			if err := jobs.prepare(ctx, in.ep, agent.Request{Op: agent.OpPrepare, Job: in.name, Start: &in.spec}); err != nil {
				errs[i] = fmt.Errorf("prepare job %s (%s) on %s: %w", in.name, in.job.Kind, in.ep.host.Name, err)
				return
			}
			o.logf("%s prepared on %s in %.1fs", in.name, in.ep.label, time.Since(began).Seconds())
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("run interrupted while preparing its jobs: %w", context.Cause(ctx))
	}
	return errors.Join(errs...)
}

// startLead is how far ahead t0 is put: past what comes between the header and the
// last job's start, which is one request per job on each host it runs on, one after
// another (a client's needs its server's port), each a round trip to its agent and
// the job's start there. Each request is allowed its host's round trip and the
// longest start that host's agent took in this session's earlier runs, or
// firstStart before any; the whole, 25 ms more for the header and the controller's
// own scheduling. Every run waits out its lead before t0 (a flat 200 ms more than
// that was a third of a run's fixed cost). A job whose start comes late starts at
// once, and the run says so.
func (o *Options) startLead(eps []*endpoint) time.Duration {
	lead := 25 * time.Millisecond
	for _, in := range o.instances(eps, time.Time{}, "") {
		cost := in.ep.startTook
		if cost == 0 {
			cost = firstStart
		}
		lead += time.Duration(in.ep.info.ClockRTT*float64(time.Second)) + cost
	}
	return lead
}

// firstStart is the time a job's start is allowed on an agent that has started
// none yet: a local lab's take 1-2 ms, round trip included.
const firstStart = 5 * time.Millisecond

// wait waits until the time until (or, when until is zero, until the awaited jobs
// have ended), failing as soon as an agent dies, a job fails or ctx ends.
func (o *Options) wait(ctx context.Context, eps []*endpoint, rec *recorder, jobs *jobSet, until time.Time) error {
	var timer <-chan time.Time
	if !until.IsZero() {
		timer = time.After(time.Until(until)) // at once when until has passed
	}
	dead := make(chan *endpoint, len(eps))
	stop := make(chan struct{})
	defer close(stop)
	for _, ep := range eps {
		// The channel is taken here: a restore may replace ep's agent while the
		// goroutine has yet to run.
		died := ep.agent.Dead()
		go func() {
			select {
			case <-died:
				dead <- ep
			case <-stop:
			}
		}()
	}
	for {
		if until.IsZero() && len(jobs.awaited) == 0 {
			return nil
		}
		select {
		case <-timer:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("run interrupted: %w", context.Cause(ctx))
		case <-rec.failed:
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return rec.err
		case ep := <-dead:
			return ep.deathErr(ep.agent.Err())
		case e := <-rec.done:
			jobs.ended(e)
			if e.err != nil {
				// A stream fails when the far agent dies: name the cause, not the symptom.
				select {
				case ep := <-dead:
					return ep.deathErr(ep.agent.Err())
				case <-time.After(500 * time.Millisecond):
				}
				return e.err
			}
		}
	}
}
