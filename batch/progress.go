package batch

import (
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"

	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/report"
)

// Bars draws runs' progress on a terminal with mpb: a bar for the run in progress
// (its label, seconds of total, the streams' sum throughput and the latest ping,
// live), with log lines printed above the bars. A batch adds a bar for its runs
// (progress below); `run` draws one Bars a run. Off a terminal (cron, a pipe) there
// are no bars: the log lines say it all and stay readable. A nil *Bars does nothing.
type Bars struct {
	p    *mpb.Progress
	log  *report.TerminalWriter // log lines, escaped, onto p
	keep bool

	// mu guards what the run bar's decorators read. It is never held while
	// waiting on mpb: mpb calls the decorators from its own goroutines.
	mu    sync.Mutex
	run   *mpb.Bar
	label string
	live  controller.Progress
}

// BarsOptions say how NewBars draws.
type BarsOptions struct {
	// Force draws the bars even when the writer is not a terminal (tests): mpb then
	// renders plain rows without moving the cursor.
	Force bool
	// KeepRuns leaves each run's bar drawn as it last was once the run ends (run's
	// bars, one a setup and repetition, above each summary); without it the bar goes
	// away (a batch's, where the next run's bar takes its place).
	KeepRuns bool
}

// Terminal says whether w is a terminal that bars can be drawn on: isatty, and a
// window size (a pseudo-terminal nobody sized has none, and mpb draws nothing there).
func Terminal(w io.Writer) bool {
	f, ok := unwrapTerminal(w).(*os.File)
	if !ok {
		return false
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	return err == nil && ws.Col > 0
}

// unwrapTerminal is the writer behind an escaping one (report.TerminalWriter), which
// would escape the bars' own sequences.
func unwrapTerminal(w io.Writer) io.Writer {
	if u, ok := w.(interface{ Underlying() io.Writer }); ok {
		return u.Underlying()
	}
	return w
}

// NewBars starts drawing on w when w is a terminal (or o.Force is set); else it
// returns nil. The bars are drawn on the terminal itself; what they show from files
// and hosts (labels) and the log lines above them are escaped here.
func NewBars(w io.Writer, o BarsOptions) *Bars {
	if !o.Force && !Terminal(w) {
		return nil
	}
	opts := []mpb.ContainerOption{mpb.WithOutput(unwrapTerminal(w)), mpb.WithWidth(40)}
	if o.Force {
		// Without a terminal mpb renders nothing unless told to, and cuts each row
		// to the bar's width: a test reads whole rows.
		opts = append(opts, mpb.WithAutoRefresh(), mpb.WithWidth(160))
	}
	b := &Bars{p: mpb.New(opts...), keep: o.KeepRuns}
	b.log = report.NewTerminalWriter(b.p)
	return b
}

// Log is where log lines go while the bars are drawn: above them.
func (b *Bars) Log(fallback io.Writer) io.Writer {
	if b == nil {
		return fallback
	}
	return b.log
}

// StartRun draws a bar for a run of total seconds.
func (b *Bars) StartRun(label string, total float64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.label, b.live = label, controller.Progress{Total: total, PingMs: math.NaN()}
	b.mu.Unlock()
	opts := []mpb.BarOption{
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
			b.mu.Lock()
			defer b.mu.Unlock()
			return report.EscapeText(b.label)
		}, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			b.mu.Lock()
			defer b.mu.Unlock()
			return liveText(b.live)
		})),
	}
	if !b.keep {
		opts = append(opts, mpb.BarRemoveOnComplete())
	}
	run := b.p.AddBar(int64(math.Ceil(total*10)), opts...)
	b.mu.Lock()
	b.run = run
	b.mu.Unlock()
}

// liveText is the run bar's right side: "5s of 12s, 94.3 Mbit/s, ping 15.23 ms (loaded)".
func liveText(l controller.Progress) string {
	s := fmt.Sprintf("%.0fs of %.0fs, %.1f Mbit/s", math.Max(0, math.Min(l.Elapsed, l.Total)), l.Total, l.SumMbps)
	if !math.IsNaN(l.PingMs) {
		s += fmt.Sprintf(", ping %.2f ms", l.PingMs)
	}
	if l.Loaded {
		s += " (loaded)"
	} else {
		s += " (idle)"
	}
	return s
}

// Update is the controller's feed for the run bar (controller.Options.Progress).
func (b *Bars) Update(l controller.Progress) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.live = l
	run := b.run
	b.mu.Unlock()
	if run != nil {
		run.SetCurrent(int64(math.Max(0, math.Min(l.Elapsed, l.Total)) * 10))
	}
}

// EndRun ends the run's bar: it goes away, or with KeepRuns stays as last drawn.
func (b *Bars) EndRun() {
	if b == nil {
		return
	}
	b.mu.Lock()
	run := b.run
	b.run = nil
	b.mu.Unlock()
	if run != nil {
		run.Abort(!b.keep)
	}
}

// Stop ends the drawing; the log lines go to where they went before the bars.
func (b *Bars) Stop() {
	if b == nil {
		return
	}
	b.log.Flush()
	b.EndRun()
	b.p.Wait()
}

// progress is a batch's Bars with a bar above the run's for the batch's runs: run i
// of N, elapsed and what is left as eta estimates it. Without Bars (off a terminal)
// it does nothing.
type progress struct {
	*Bars
	runs *mpb.Bar
}

// newProgress starts a batch's bars on w when w is a terminal (or force is set,
// for tests); else its Bars are nil. done of the total runs are complete already (a
// resumed batch); the time left is eta's, of this session's runs only.
func newProgress(w io.Writer, force bool, name string, total, done int, eta *ETA) *progress {
	bars := NewBars(w, BarsOptions{Force: force})
	pr := &progress{Bars: bars}
	if bars == nil {
		return pr
	}
	pr.runs = bars.p.AddBar(int64(total),
		mpb.PrependDecorators(decor.Name("batch "+report.EscapeText(name)+" ", decor.WCSyncSpaceR), decor.CountersNoUnit("run %d of %d", decor.WCSyncSpaceR)),
		// Not mpb's own ETA: its average counts the runs a resumed batch found
		// complete as if this session had run them in no time.
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return eta.String() }, decor.WCSyncSpace)))
	pr.runs.SetCurrent(int64(done))
	return pr
}

// endRun takes the run's bar away and counts the run.
func (pr *progress) endRun() {
	pr.EndRun()
	if pr.runs != nil {
		pr.runs.Increment()
	}
}

// stop ends the drawing.
func (pr *progress) stop() {
	if pr.runs != nil {
		pr.runs.Abort(false)
	}
	pr.Stop()
}

// ETA estimates how long the runs a session has to run take, from this session's
// runs only: before one has ended, from the planned time of a run; then from the
// time this session's runs took on average. Runs a resumed batch found complete
// count for nothing. It is safe for concurrent use (a bar's decorator reads it).
type ETA struct {
	planned time.Duration
	todo    int
	now     func() time.Time

	mu    sync.Mutex
	start time.Time
	ran   int
	// ended is when the latest run ended, since start.
	ended time.Duration
}

// NewETA starts the clock of todo runs of planned time each (length, delay before
// and after, the pause between runs). now is the clock; nil means the real one.
func NewETA(planned time.Duration, todo int, now func() time.Time) *ETA {
	if now == nil {
		now = time.Now
	}
	return &ETA{planned: planned, todo: todo, now: now, start: now()}
}

// RunEnded counts a run as ended, complete or not: it took its time all the same.
func (e *ETA) RunEnded() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ran++
	e.ended = e.now().Sub(e.start)
}

// Elapsed is the time since the clock started.
func (e *ETA) Elapsed() time.Duration {
	return e.now().Sub(e.start)
}

// Left is the estimate of the time the runs left take.
func (e *ETA) Left() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return estimateLeft(e.planned, e.ended, e.now().Sub(e.start), e.ran, e.todo)
}

// String is "elapsed 1m10s, about 5m50s left", to the second.
func (e *ETA) String() string {
	return fmt.Sprintf("elapsed %v, about %v left", e.Elapsed().Round(time.Second), e.Left().Round(time.Second))
}

// estimateLeft is the time todo runs take that ran have not yet: a run takes
// planned until one has ended, then what ran runs took on average (ended, since the
// start, when the latest ended). The run in progress, now since the start, counts
// what it has left of that time: the estimate goes down as the time passes, and not
// below the runs after it.
func estimateLeft(planned, ended, now time.Duration, ran, todo int) time.Duration {
	left := todo - ran
	if left <= 0 {
		return 0
	}
	per := planned
	if ran > 0 {
		per = ended / time.Duration(ran)
	}
	current := max(0, per-max(0, now-ended))
	return current + per*time.Duration(left-1)
}
