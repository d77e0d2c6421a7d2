package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/batch"
	"github.com/bloatbench/bloatbench/controller"
)

// runProgress shows on stderr how run's runs go, as batch shows its own (the bars
// and the time left are batch's): on a terminal a bar a run, one a setup and
// repetition, labelled with the run's title and repetition and showing its seconds
// of total, the streams' sum and the latest ping, left drawn above the run's
// summary when it ends. Elsewhere (a pipe, a CI's log), with more than one run, a
// line as each starts, "run 2 of 6: MQ + FQ_CODEL 1/3 (elapsed ..., about ... left)";
// a single run prints nothing new. The run's own log lines are unchanged either way.
type runProgress struct {
	errw         io.Writer // stderr, the *report.TerminalWriter main makes
	bars         bool      // errw is a terminal
	force        bool      // draw the bars on errw even so (tests)
	setups, reps int
	now          func() time.Time

	// Touched by runAction's goroutine only, between start and end.
	eta *batch.ETA
	ran int

	// mu guards the run in progress against the controller's goroutines: its log
	// lines and its progress feed.
	mu     sync.Mutex
	active bool
	label  string
	total  float64
	// cur is the run's bars, from its first sample to its end: a bar drawn from its
	// start would be broken by what the session logs past the run's options before
	// the streams (its clocks' offsets), which does not go through them.
	cur *batch.Bars
}

// newRunProgress is the progress of reps cycles of setups runs (1 without a setup).
func newRunProgress(errw io.Writer, setups, reps int) *runProgress {
	return &runProgress{errw: errw, bars: batch.Terminal(errw), setups: max(1, setups), reps: max(1, reps), now: time.Now}
}

// start is the run of o starting: it returns o with its log and progress feed on
// the run's bar, on a terminal.
func (rp *runProgress) start(o controller.Options) controller.Options {
	total := o.Length + 2*o.Delay
	n := rp.setups * rp.reps
	if rp.eta == nil {
		rp.eta = batch.NewETA(total, n, rp.now)
	}
	label := o.Title
	if rp.reps > 1 {
		label += fmt.Sprintf(" %d/%d", rp.ran/rp.setups+1, rp.reps)
	}
	if !rp.bars && !rp.force {
		if n > 1 {
			fmt.Fprintf(rp.errw, "run %d of %d: %s (%s)\n", rp.ran+1, n, label, rp.eta)
		}
		return o
	}
	rp.mu.Lock()
	rp.active, rp.label, rp.total = true, label, total.Seconds()
	rp.mu.Unlock()
	o.Log, o.Progress = rp, rp.update
	return o
}

// update is the run's progress feed: the first sample starts the run's bar.
func (rp *runProgress) update(l controller.Progress) {
	rp.mu.Lock()
	if rp.active && rp.cur == nil {
		rp.cur = batch.NewBars(rp.errw, batch.BarsOptions{Force: rp.force, KeepRuns: true})
		rp.cur.StartRun(rp.label, rp.total)
	}
	cur := rp.cur
	rp.mu.Unlock()
	cur.Update(l)
}

// Write is the run's log: above its bar while there is one, else stderr itself.
func (rp *runProgress) Write(p []byte) (int, error) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.cur.Log(rp.errw).Write(p)
}

// end is the run ending (complete or not): its bar stays as last drawn, and what is
// written after (the summary, the data file's path) goes below it. The lock is held
// while the bar stops, so that no log line can pass the ones still on their way
// through it.
func (rp *runProgress) end() {
	rp.mu.Lock()
	rp.cur.Stop()
	rp.cur, rp.active = nil, false
	rp.mu.Unlock()
	rp.ran++
	rp.eta.RunEnded()
}
