package runners

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
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
		r := &rateSchedule{params: p, host: spec.Host, start: spec.Start, step: spec.Step, env: env,
			change: func(ctx context.Context, dev, rate string) error {
				return runTC(ctx, tc, qdisc.RateOp(dev, rate).Argv[1:])
			}}
		for _, d := range spec.Devs {
			if !d.IFB {
				r.devs = append(r.devs, d.Name)
			}
		}
		if len(r.devs) == 0 {
			return nil, Started{}, errors.New("rate schedule: the host has no bottleneck device")
		}
		// The class the steps change must be there: a setup without it fails the
		// start, not the run at its first step.
		for _, dev := range r.devs {
			if err := runTC(ctx, tc, []string{"class", "show", "dev", dev, "classid", "1:1"}, "htb"); err != nil {
				return nil, Started{}, fmt.Errorf("rate schedule on %s: %w", dev, err)
			}
		}
		return JobFunc(r.run), Started{Message: fmt.Sprintf("rate schedule of %d steps on %s", len(p.Steps), strings.Join(r.devs, ", "))}, nil
	},
}

// runTC runs tc with args; want, when given, must be in what it prints.
func runTC(ctx context.Context, tc string, args []string, want ...string) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(cctx, tc, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	msg := strings.TrimSpace(string(bounded(out.Bytes(), 512)))
	if err != nil {
		return fmt.Errorf("tc %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			return fmt.Errorf("tc %s: no %s class 1:1 to change (it printed %q): the setup's rate: makes one", strings.Join(args, " "), w, msg)
		}
	}
	return nil
}

// bounded is b cut to n bytes.
func bounded(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
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
}

// run makes each change at its time and emits the rate in force once a step
// until ctx ends: a step's sample is the rate at its end, so the step in which
// the rate changed is the first with the new rate. A change that fails ends the
// job with its error: the run would measure a rate other than the one it says.
func (r *rateSchedule) run(ctx context.Context) error {
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
