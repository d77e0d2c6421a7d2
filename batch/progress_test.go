package batch

import (
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/internal/e2eutil"
)

func TestEstimateLeft(t *testing.T) {
	const s = time.Second
	cases := []struct {
		name                string
		planned, ended, now time.Duration
		ran, todo           int
		want                time.Duration
	}{
		{"at the start: the planned time", 70 * s, 0, 0, 0, 4, 280 * s},
		{"into the first run: it counts down", 70 * s, 0, 30 * s, 0, 4, 250 * s},
		{"the first run over its plan: no less than the runs after it", 70 * s, 0, 100 * s, 0, 4, 210 * s},
		{"after a run: its time, not the plan", 70 * s, 90 * s, 90 * s, 1, 3, 180 * s},
		{"the average of the runs so far", 70 * s, 200 * s, 230 * s, 2, 5, 270 * s},
		{"the last run going", 70 * s, 200 * s, 250 * s, 2, 3, 50 * s},
		{"all ran", 70 * s, 300 * s, 300 * s, 3, 3, 0},
		{"nothing to run", 70 * s, 0, 10 * s, 0, 0, 0},
	}
	for _, c := range cases {
		if got := estimateLeft(c.planned, c.ended, c.now, c.ran, c.todo); got != c.want {
			t.Errorf("%s: estimateLeft(%v, %v, %v, %d, %d) = %v, want %v", c.name, c.planned, c.ended, c.now, c.ran, c.todo, got, c.want)
		}
	}
}

// A resumed batch: 10 of 12 runs were complete before; the two this session runs
// are all the time left, and the first's time is what the second is expected to take.
func TestETAOfAResumedBatch(t *testing.T) {
	now := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)
	eta := NewETA(70*time.Second, 2, func() time.Time { return now })
	if got := eta.String(); got != "elapsed 0s, about 2m20s left" {
		t.Errorf("at the start: %q", got)
	}
	now = now.Add(100 * time.Second)
	eta.RunEnded()
	if got := eta.String(); got != "elapsed 1m40s, about 1m40s left" {
		t.Errorf("after a run of 100s: %q", got)
	}
	now = now.Add(40 * time.Second)
	if got := eta.Left(); got != 60*time.Second {
		t.Errorf("40s into the second: %v left, want 1m0s", got)
	}
	now = now.Add(60 * time.Second)
	eta.RunEnded()
	if got := eta.Left(); got != 0 {
		t.Errorf("both ran: %v left", got)
	}
}

// The batch's bars as drawn (forced, on a buffer): the runs' bar counts the runs a
// resume found complete but takes its time left from eta, and the run's bar shows
// the live feed with its label escaped.
func TestBatchBarsDrawn(t *testing.T) {
	// The clock stands still: mpb's goroutines read it.
	start := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)
	var out e2eutil.LockedBuffer
	pr := newProgress(&out, true, "nightly", 12, 10, NewETA(70*time.Second, 2, func() time.Time { return start }))
	pr.StartRun("run 11 of 12: tcp_4down \x1b]0;x\x07 mq+fq_codel", 60)
	pr.Update(controller.Progress{Elapsed: 23.4, Total: 60, Loaded: true, SumMbps: 94.26, PingMs: 15.234})
	pr.stop()
	got := out.String()
	for _, want := range []string{"batch nightly", "run 10 of 12", "elapsed 0s, about 2m20s left", `tcp_4down \x1b]0;x\x07 mq+fq_codel`, "23s of 60s, 94.3 Mbit/s, ping 15.23 ms (loaded)"} {
		if !strings.Contains(got, want) {
			t.Errorf("the bars show no %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\x1b]") {
		t.Errorf("the label reached the terminal unescaped:\n%q", got)
	}
}
