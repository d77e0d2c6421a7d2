package runners

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/tcrate"
	"github.com/bloatbench/bloatbench/qdisc"
)

// The rate-schedule kind carries out a setup's rate_schedule on a bottleneck host:
// at each step's time from the run's start it changes the rate of the htb class
// the setup made on each of the host's bottleneck devices, and it records the rate
// in force once a step, so that charts and the summary read the queue's response
// against the rate it had. The controller places it from the setup; a test does
// not name it. It runs on the host, not from the controller, so that a change
// lands on the host's clock at its time, however far the controller is.

// ShaperSeries names a device's rate series: "shaper HOST:DEV rate".
func ShaperSeries(host, dev string) string { return fmt.Sprintf("shaper %s:%s rate", host, dev) }

// RateScheduleParams are the kind's parameters, as the controller makes them.
type RateScheduleParams struct {
	// Initial is the rate the setup applied, bits/s: the series' value before the
	// first step.
	Initial float64            `json:"initial"`
	Steps   []RateScheduleStep `json:"steps"`
}

// RateScheduleStep is one change: at At seconds from the run's start, Rate.
type RateScheduleStep struct {
	At   float64 `json:"at"`
	Rate string  `json:"rate"`
	Bits float64 `json:"bits"`
}

// RateScheduleJob is the kind's parameters for a setup's schedule.
func RateScheduleJob(s *qdisc.Setup) (json.RawMessage, error) {
	initial, _ := s.ShaperRate(false)
	p := RateScheduleParams{Initial: initial}
	for _, st := range s.RateSchedule {
		p.Steps = append(p.Steps, RateScheduleStep{At: st.At.Seconds(), Rate: st.Rate, Bits: st.Bits})
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return json.Marshal(p)
}

// check holds the parameters to what a setup's check let through: the agent
// takes nothing on trust, and a rate goes to tc.
func (p RateScheduleParams) check() error {
	if len(p.Steps) == 0 || len(p.Steps) > qdisc.MaxRateSteps {
		return fmt.Errorf("rate schedule: %d steps; from 1 to %d", len(p.Steps), qdisc.MaxRateSteps)
	}
	if !(p.Initial > 0 && p.Initial < 1e15) {
		return fmt.Errorf("rate schedule: initial rate %g bit/s", p.Initial)
	}
	prev := -1.0
	for i, st := range p.Steps {
		if !(st.At > prev && st.At <= 86400) || !qdisc.IsRate(st.Rate) || !(st.Bits > 0 && st.Bits < 1e15) {
			return fmt.Errorf("rate schedule: step %d (at %g s, rate %q, %g bit/s): times in order within a day, tc rates", i, st.At, st.Rate, st.Bits)
		}
		prev = st.At
	}
	return nil
}

var rateScheduleKind = Kind{
	Background: true,
	Plan: func(params map[string]any, pl *Planner) (json.RawMessage, []datafile.Series, error) {
		return nil, nil, errors.New("rate-schedule is made from a setup's rate_schedule:, not named by a test: give the setup the schedule (docs/setups.md)")
	},
	Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		var p RateScheduleParams
		if err := decodeRaw(spec.Params, &p); err != nil {
			return nil, Started{}, err
		}
		if err := p.check(); err != nil {
			return nil, Started{}, err
		}
		tc, err := exec.LookPath("tc")
		if err != nil {
			return nil, Started{}, fmt.Errorf("rate schedule: no tc on the host: %w", err)
		}
		var devs []string
		for _, d := range spec.Devs {
			if !d.IFB {
				devs = append(devs, d.Name)
			}
		}
		if len(devs) == 0 {
			return nil, Started{}, errors.New("rate schedule: the host has no bottleneck device")
		}
		// The class the steps change must be there: a setup without it fails the
		// start, not the run at its first step.
		for _, dev := range devs {
			line, err := showClass(ctx, tc, dev)
			if err == nil {
				err = htbClassAt(line)
			}
			if err != nil {
				return nil, Started{}, fmt.Errorf("rate schedule on %s: %w", dev, err)
			}
		}
		// One tc for the whole run, started now: a change is then a line on its
		// stdin, not a process forked at the moment the rate must change (which
		// took seconds in an emulated guest under load).
		b, err := startTCBatch(ctx, tc)
		if err != nil {
			return nil, Started{}, err
		}
		r := &rateSchedule{params: p, host: spec.Host, devs: devs, start: spec.Start, step: spec.Step, env: env,
			apply:   b.apply,
			confirm: b.confirm,
			done:    b.close}
		return JobFunc(r.run), Started{Message: fmt.Sprintf("rate schedule of %d steps on %s", len(p.Steps), strings.Join(devs, ", "))}, nil
	},
}

// tcBatch is a `tc -force -batch -` the job keeps for its run: a change is a
// line on its stdin, which tc carries out as it reads it. What tc prints to
// stdout cannot say a change is in (iproute2 7.2 keeps it buffered until it
// exits; 6.1 flushes it each command), so each change is checked by showing the
// class apart, after it.
type tcBatch struct {
	tc   string
	cmd  *exec.Cmd
	in   io.WriteCloser
	errs *lastLines
}

// tcWait bounds how long one change may take to show.
const tcWait = 10 * time.Second

func startTCBatch(ctx context.Context, tc string) (*tcBatch, error) {
	cmd := exec.CommandContext(ctx, tc, "-force", "-batch", "-")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("rate schedule: %w", err)
	}
	errs := &lastLines{}
	cmd.Stderr = errs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("rate schedule: start tc -batch: %w", err)
	}
	return &tcBatch{tc: tc, cmd: cmd, in: in, errs: errs}, nil
}

// apply has tc set class 1:1 of each dev to rate: lines on its stdin, which it
// carries out as it reads them.
func (b *tcBatch) apply(devs []string, rate string) error {
	var cmds strings.Builder
	for _, dev := range devs {
		fmt.Fprintf(&cmds, "%s\n", strings.Join(qdisc.RateOp(dev, rate).Argv[1:], " "))
	}
	if _, err := io.WriteString(b.in, cmds.String()); err != nil {
		return fmt.Errorf("tc -batch: %w (tc said: %s)", err, b.errs)
	}
	return nil
}

// confirm waits until tc shows each dev's class at one of rates (bits/s): the
// step's, or a later step's that went in since.
func (b *tcBatch) confirm(ctx context.Context, devs []string, rates []float64) error {
	deadline := time.Now().Add(tcWait)
	for _, dev := range devs {
		for {
			line, err := showClass(ctx, b.tc, dev)
			if err == nil {
				err = htbClassAt(line, rates...)
			}
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) || strings.Contains(b.errs.String(), "Command failed") {
				return fmt.Errorf("on %s: %w (tc said: %s)", dev, err, b.errs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// showClass is the first line of `tc class show dev DEV classid 1:1`.
func showClass(ctx context.Context, tc, dev string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, tcWait)
	defer cancel()
	out, err := exec.CommandContext(cctx, tc, "class", "show", "dev", dev, "classid", "1:1").CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil {
		return "", fmt.Errorf("tc class show dev %s classid 1:1: %w: %s", dev, err, bounded(line, 200))
	}
	return line, nil
}

// htbClassAt checks a line of `tc class show` is htb class 1:1 at one of
// rates, rate and ceiling both (bits/s, within tc's rounding of what it prints;
// none: any).
func htbClassAt(line string, rates ...float64) error {
	if !strings.HasPrefix(line, "class htb 1:1 ") {
		return fmt.Errorf("no htb class 1:1 to change (tc shows %q): the setup's rate: makes one", bounded(line, 200))
	}
	if len(rates) == 0 {
		return nil
	}
	f := strings.Fields(line)
	var got [2]float64
	for k, key := range []string{"rate", "ceil"} {
		i := slices.Index(f, key)
		if i < 0 || i+1 >= len(f) {
			return fmt.Errorf("tc shows no %s in %q", key, bounded(line, 200))
		}
		v, err := tcrate.Parse(f[i+1])
		if err != nil {
			return fmt.Errorf("tc shows %s %q", key, bounded(f[i+1], 40))
		}
		got[k] = v
	}
	for _, want := range rates {
		if math.Abs(got[0]-want) <= want*1e-3 && math.Abs(got[1]-want) <= want*1e-3 {
			return nil
		}
	}
	return fmt.Errorf("the class's rate and ceiling are %g and %g bit/s after the change, not %g", got[0], got[1], rates[0])
}

// close ends tc: its stdin closed, it exits.
func (b *tcBatch) close() {
	b.in.Close()
	b.cmd.Wait()
}

// bounded is s cut to n bytes.
func bounded(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// lastLines keeps the end of what a process wrote (its stderr), bounded.
type lastLines struct {
	mu  sync.Mutex
	buf []byte
}

func (l *lastLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > 2048 {
		l.buf = l.buf[len(l.buf)-2048:]
	}
	return len(p), nil
}

func (l *lastLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(l.buf), "?"))
	if s == "" {
		return "nothing"
	}
	return strings.ReplaceAll(s, "\n", "; ")
}

// rateSchedule is a started rate-schedule job.
type rateSchedule struct {
	params RateScheduleParams
	host   string
	devs   []string
	start  float64 // the run's t0, Unix seconds on this host's clock
	step   float64
	env    Env
	// apply sets the rate of every device's class, all at once, without
	// waiting; confirm waits until the kernel shows one of rates (the step's or
	// a later one's) on every device.
	apply   func(devs []string, rate string) error
	confirm func(ctx context.Context, devs []string, rates []float64) error
	// done, when set, is called as the job ends (the tc it kept exits).
	done func()
}

// run makes each change at its time and emits the rate in force once a step
// until ctx ends: a step's sample is the rate at its end, so the step in which
// the rate changed is the first with the new rate. Each change is confirmed
// beside the loop (a process to fork, which takes seconds in a loaded emulated
// guest), so that neither the steps' samples nor the next change wait for it.
// A change that fails ends the job with its error: the run would measure a rate
// other than the one it says.
func (r *rateSchedule) run(ctx context.Context) error {
	if r.done != nil {
		defer r.done()
	}
	emit := declaring(r.env)
	step := r.step
	if step <= 0 {
		step = 0.2
	}
	t0 := startTime(r.start)
	if sleepUntil(ctx, t0) != nil {
		return nil
	}
	bits := r.params.Initial
	record := func() {
		t := unix(time.Now())
		for _, dev := range r.devs {
			emit(datafile.Series{Name: ShaperSeries(r.host, dev), Kind: datafile.KindShaper, Units: "Mbit/s", Host: r.host, Dev: dev, Stat: "rate"},
				datafile.Sample{T: t, V: bits / 1e6})
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	confirmed := make(chan error, len(r.params.Steps))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	// A sample at the start, then one at each tick of the run's grid.
	ticks := newStepGrid(t0, step, 1, false)
	defer ticks.close()
	// One timer for the next change, set again when the change is made.
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	armed := -1
	next := 0
	sample := true // at the start, then at each tick: one sample a step
	for {
		for next < len(r.params.Steps) && !time.Now().Before(r.at(t0, next)) {
			st := r.params.Steps[next]
			if err := r.apply(r.devs, st.Rate); err != nil {
				return fmt.Errorf("rate schedule step at %gs: %w", st.At, err)
			}
			var rates []float64
			for _, later := range r.params.Steps[next:] {
				rates = append(rates, later.Bits)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.confirm(cctx, r.devs, rates); err != nil && cctx.Err() == nil {
					confirmed <- fmt.Errorf("rate schedule step at %gs: %w", st.At, err)
				}
			}()
			bits = st.Bits
			next++
		}
		if sample {
			record()
		}
		var due <-chan time.Time
		if next < len(r.params.Steps) {
			if armed != next {
				timer.Reset(time.Until(r.at(t0, next)))
				armed = next
			}
			due = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-confirmed:
			return err
		case <-ticks.arm():
			ticks.taken()
			sample = true
		case <-due:
			sample = false
		}
	}
}

// at is when step i is due.
func (r *rateSchedule) at(t0 time.Time, i int) time.Time {
	return t0.Add(time.Duration(r.params.Steps[i].At * float64(time.Second)))
}
