package batch

import (
	"fmt"
	"io"
	"math"
	"os"
	"sync"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"

	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/report"
)

// progress draws a batch on a terminal with mpb: a bar for the batch's runs (i of
// N, elapsed, ETA) and one for the run in progress (seconds left, the streams' sum
// throughput and the loaded ping, live). Log lines print above the bars. Off a
// terminal (cron, a pipe) there is no progress: the log lines say it all and stay
// readable. A nil *progress does nothing.
type progress struct {
	p    *mpb.Progress
	log  *report.TerminalWriter // log lines, escaped, onto p
	runs *mpb.Bar
	run  *mpb.Bar

	mu    sync.Mutex
	label string
	live  controller.Progress
}

// isTerminal says whether w is a terminal that bars can be drawn on: isatty, and a
// window size (a pseudo-terminal nobody sized has none, and mpb draws nothing there).
func isTerminal(w io.Writer) bool {
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

// newProgress starts the bars on w when w is a terminal (or force is set, for
// tests); else it returns nil. The bars are drawn on the terminal itself; what they
// show from the batch file (its name, the runs' labels) and the log lines above
// them are escaped here.
func newProgress(w io.Writer, force bool, name string, total, done int) *progress {
	if !force && !isTerminal(w) {
		return nil
	}
	pr := &progress{p: mpb.New(mpb.WithOutput(unwrapTerminal(w)), mpb.WithWidth(40))}
	pr.log = report.NewTerminalWriter(pr.p)
	pr.runs = pr.p.AddBar(int64(total),
		mpb.PrependDecorators(decor.Name("batch "+report.EscapeText(name)+" ", decor.WCSyncSpaceR), decor.CountersNoUnit("run %d of %d", decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Elapsed(decor.ET_STYLE_GO, decor.WCSyncSpace), decor.Name(" ETA "), decor.AverageETA(decor.ET_STYLE_GO)))
	pr.runs.SetCurrent(int64(done))
	return pr
}

// Log is where log lines go while the bars are drawn: above them.
func (pr *progress) Log(fallback io.Writer) io.Writer {
	if pr == nil {
		return fallback
	}
	return pr.log
}

// startRun draws a bar for a run of total seconds.
func (pr *progress) startRun(label string, total float64) {
	if pr == nil {
		return
	}
	pr.mu.Lock()
	pr.label, pr.live = label, controller.Progress{Total: total, PingMs: math.NaN()}
	pr.mu.Unlock()
	run := pr.p.AddBar(int64(math.Ceil(total*10)), mpb.BarRemoveOnComplete(),
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			return report.EscapeText(pr.label)
		}, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			return liveText(pr.live)
		})))
	pr.mu.Lock()
	pr.run = run
	pr.mu.Unlock()
}

// liveText is the run bar's right side: "12s left, 94.3 Mbit/s, ping 15.2 ms (loaded)".
func liveText(l controller.Progress) string {
	left := math.Max(0, l.Total-l.Elapsed)
	s := fmt.Sprintf("%.0fs left, %.1f Mbit/s", left, l.SumMbps)
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

// update is the controller's feed for the run bar.
func (pr *progress) update(l controller.Progress) {
	if pr == nil {
		return
	}
	pr.mu.Lock()
	pr.live = l
	run := pr.run
	pr.mu.Unlock()
	if run != nil {
		run.SetCurrent(int64(math.Max(0, math.Min(l.Elapsed, l.Total)) * 10))
	}
}

// endRun takes the run's bar away and counts the run.
func (pr *progress) endRun() {
	if pr == nil {
		return
	}
	pr.endRunBar()
	pr.runs.Increment()
}

func (pr *progress) endRunBar() {
	pr.mu.Lock()
	run := pr.run
	pr.run = nil
	pr.mu.Unlock()
	if run != nil {
		run.Abort(true)
	}
}

// stop ends the drawing.
func (pr *progress) stop() {
	if pr == nil {
		return
	}
	pr.log.Flush()
	pr.endRunBar()
	pr.runs.Abort(false)
	pr.p.Wait()
}
