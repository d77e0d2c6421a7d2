package runners

import (
	"context"
	"time"
)

// stepGrid is a job's ticks on the run's step grid: start + k*step for k = first,
// first+1, ..., each computed from start, so that samples never drift off the
// grid the reports put them on however late a wakeup was. A tick at or before the
// previous one taken is skipped (a sample that took longer than a step does not
// make a burst of samples after it); one that passed since is taken at once.
// Every sampler and runner that does something each step waits on one.
type stepGrid struct {
	start time.Time
	step  float64 // seconds
	k     int
	// end, when not zero, ends the grid: a last tick at end itself when end is
	// not on the grid (atEnd), or none at or after it (the caller takes its own
	// last sample when its work has stopped).
	end   time.Time
	atEnd bool
	last  time.Time // when the previous tick was taken
	timer *time.Timer
	// due is the tick the timer is set for, armed whether it is set.
	due   time.Time
	armed bool
}

// newStepGrid starts a grid at start with ticks from k = first, every step
// seconds (0 or less: the samplers' 0.2 s). When fromNow is set, ticks before now
// (a job that began late) are skipped; else the first is taken at once however
// late, as a sampler's reading at its start is.
func newStepGrid(start time.Time, step float64, first int, fromNow bool) *stepGrid {
	if step <= 0 {
		step = 0.2
	}
	g := &stepGrid{start: start, step: step, k: first}
	if fromNow {
		g.last = time.Now()
	}
	return g
}

// until ends the grid at end, with a tick at end itself when atEnd is set.
func (g *stepGrid) until(end time.Time, atEnd bool) *stepGrid {
	g.end, g.atEnd = end, atEnd
	return g
}

// next is the next tick to wait for; false when the grid has ended.
func (g *stepGrid) next() (time.Time, bool) {
	ended := !g.end.IsZero()
	if ended && !g.last.IsZero() && !g.last.Before(g.end) {
		return time.Time{}, false
	}
	for ; ; g.k++ {
		t := g.start.Add(time.Duration(float64(g.k) * g.step * float64(time.Second)))
		if ended && !t.Before(g.end) {
			if !g.atEnd {
				return time.Time{}, false
			}
			t = g.end
		}
		if g.last.IsZero() || t.After(g.last) {
			g.k++
			return t, true
		}
	}
}

// Why wait returned.
type stepEvent int

const (
	stepTick  stepEvent = iota // a tick: sample
	stepEnded                  // the grid's end, or ctx's
	stepStop                   // stop delivered
)

// wait sleeps until the next tick and returns the time it woke, which is when a
// sample is read: a late wakeup must not put what was counted since into the
// interval before it. It returns early when ctx ends or stop (which may be nil)
// delivers, with what stop delivered.
func (g *stepGrid) wait(ctx context.Context, stop <-chan error) (time.Time, stepEvent, error) {
	due := g.arm()
	if due == nil {
		return time.Time{}, stepEnded, nil
	}
	select {
	case <-due:
		return g.taken(), stepTick, nil
	case <-ctx.Done():
		g.disarm()
		return time.Time{}, stepEnded, nil
	case err := <-stop:
		g.disarm()
		return time.Time{}, stepStop, err
	}
}

// arm sets the grid's timer for its next tick, unless it is set, and returns the
// channel it fires on (nil when the grid has ended): for a loop that waits on
// other things too, which calls taken when it fires.
func (g *stepGrid) arm() <-chan time.Time {
	if !g.armed {
		if g.due.IsZero() {
			t, ok := g.next()
			if !ok {
				return nil
			}
			g.due = t
		}
		if g.timer == nil {
			g.timer = time.NewTimer(time.Until(g.due))
		} else {
			g.timer.Reset(time.Until(g.due))
		}
		g.armed = true
	}
	return g.timer.C
}

// taken says the armed tick fired and returns the time of reading.
func (g *stepGrid) taken() time.Time {
	g.armed, g.due = false, time.Time{}
	g.last = time.Now()
	return g.last
}

// disarm stops the timer; the tick it was set for is still the next.
func (g *stepGrid) disarm() {
	if g.armed {
		g.timer.Stop()
		g.armed = false
	}
}

// close releases the grid's timer.
func (g *stepGrid) close() {
	if g.timer != nil {
		g.timer.Stop()
	}
}
