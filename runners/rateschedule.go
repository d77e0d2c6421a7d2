package runners

import (
	"bufio"
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
		// One tc for the whole run, started now: a change is then a line on its
		// stdin, not a process forked at the moment the rate must change (which
		// took seconds in an emulated guest under load).
		b, err := startTCBatch(ctx, tc)
		if err != nil {
			return nil, Started{}, err
		}
		// The class the steps change must be there: a setup without it fails the
		// start, not the run at its first step.
		if err := b.change(ctx, devs, ""); err != nil {
			b.close()
			return nil, Started{}, err
		}
		r := &rateSchedule{params: p, host: spec.Host, devs: devs, start: spec.Start, step: spec.Step, env: env,
			change: func(ctx context.Context, dev, rate string) error { return b.change(ctx, []string{dev}, rate) },
			done:   b.close}
		return JobFunc(r.run), Started{Message: fmt.Sprintf("rate schedule of %d steps on %s", len(p.Steps), strings.Join(devs, ", "))}, nil
	},
}

// tcBatch is a `tc -force -batch -` the job keeps for its run: each change is
// two lines on its stdin, the change and a show of the class, whose line on
// stdout (tc flushes it after each command) says the change is in.
type tcBatch struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  chan string // stdout's lines; closed when tc exits
	errs *lastLines
}

// tcWait bounds how long one change may take.
const tcWait = 10 * time.Second

func startTCBatch(ctx context.Context, tc string) (*tcBatch, error) {
	cmd := exec.CommandContext(ctx, tc, "-force", "-batch", "-")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("rate schedule: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("rate schedule: %w", err)
	}
	errs := &lastLines{}
	cmd.Stderr = errs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("rate schedule: start tc -batch: %w", err)
	}
	b := &tcBatch{cmd: cmd, in: in, out: make(chan string, 16), errs: errs}
	go func() {
		defer close(b.out)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 4096), 64<<10)
		for sc.Scan() {
			b.out <- sc.Text()
		}
	}()
	return b, nil
}

// change sets class 1:1 of each dev to rate, or with rate "" only shows it, and
// waits for tc to show each class at that rate.
func (b *tcBatch) change(ctx context.Context, devs []string, rate string) error {
	var cmds strings.Builder
	for _, dev := range devs {
		if rate != "" {
			fmt.Fprintf(&cmds, "%s\n", strings.Join(qdisc.RateOp(dev, rate).Argv[1:], " "))
		}
		fmt.Fprintf(&cmds, "class show dev %s classid 1:1\n", dev)
	}
	if _, err := io.WriteString(b.in, cmds.String()); err != nil {
		return fmt.Errorf("rate schedule: tc -batch: %w (tc said: %s)", err, b.errs)
	}
	var want float64
	if rate != "" {
		want, _ = tcrate.Parse(rate)
	}
	timeout := time.NewTimer(tcWait)
	defer timeout.Stop()
	for _, dev := range devs {
		select {
		case line, ok := <-b.out:
			if !ok {
				return fmt.Errorf("rate schedule: tc -batch ended (tc said: %s)", b.errs)
			}
			if err := htbClassAt(line, want); err != nil {
				// tc wrote why to stderr before it showed the class; what copies
				// stderr here may not have it yet.
				b.errs.wait(ctx, time.Second)
				return fmt.Errorf("rate schedule on %s: %w (tc said: %s)", dev, err, b.errs)
			}
		case <-timeout.C:
			return fmt.Errorf("rate schedule on %s: tc took more than %v to change the class (tc said: %s)", dev, tcWait, b.errs)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// htbClassAt checks a line of `tc class show` is htb class 1:1 at rate and
// ceiling want (bits/s; 0: any), within tc's rounding of what it prints.
func htbClassAt(line string, want float64) error {
	if !strings.HasPrefix(line, "class htb 1:1 ") {
		return fmt.Errorf("no htb class 1:1 to change (tc shows %q): the setup's rate: makes one", bounded(line, 200))
	}
	if want == 0 {
		return nil
	}
	f := strings.Fields(line)
	for _, key := range []string{"rate", "ceil"} {
		i := slices.Index(f, key)
		if i < 0 || i+1 >= len(f) {
			return fmt.Errorf("tc shows no %s in %q", key, bounded(line, 200))
		}
		v, err := tcrate.Parse(f[i+1])
		if err != nil || math.Abs(v-want) > want*1e-3 {
			return fmt.Errorf("the class's %s is %s after the change, not %g bit/s", key, bounded(f[i+1], 40), want)
		}
	}
	return nil
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

// wait waits up to d for something to be written.
func (l *lastLines) wait(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		l.mu.Lock()
		n := len(l.buf)
		l.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	change func(ctx context.Context, dev, rate string) error
	// done, when set, is called as the job ends (the tc it kept exits).
	done func()
}

// run makes each change at its time and emits the rate in force once a step
// until ctx ends: a step's sample is the rate at its end, so the step in which
// the rate changed is the first with the new rate. A change that fails ends the
// job with its error: the run would measure a rate other than the one it says.
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
	tick := time.NewTicker(time.Duration(step * float64(time.Second)))
	defer tick.Stop()
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
			for _, dev := range r.devs {
				if err := r.change(ctx, dev, st.Rate); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("rate schedule step at %gs: %w", st.At, err)
				}
			}
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
		case <-tick.C:
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
