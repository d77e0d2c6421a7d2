package runners

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The grid's ticks are computed from its start, skip what the previous tick
// covered, and end as asked; checked on the ticks' times, never on how long a
// wait took.
func TestStepGridTicks(t *testing.T) {
	start := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	type take struct {
		want time.Time // zero: the grid has ended
		// takenAt is when the tick is taken (a late wakeup or a slow sample):
		// ticks at or before it are skipped. Zero: at the tick itself.
		takenAt time.Time
	}
	for _, c := range []struct {
		name  string
		grid  *stepGrid
		takes []take
	}{
		{"a sampler: from the start's tick, every step", newStepGrid(start, 0.2, 0, false),
			[]take{{want: at(0)}, {want: at(200)}, {want: at(400)}}},
		{"a slow sample skips the ticks it covered, and takes a passed one at once", newStepGrid(start, 0.2, 0, false),
			[]take{{want: at(0), takenAt: at(450)}, {want: at(600)}, {want: at(800), takenAt: at(805)}, {want: at(1000)}}},
		{"a job that began late skips the ticks before it", func() *stepGrid {
			g := newStepGrid(start, 0.2, 1, true)
			g.last = at(730)
			return g
		}(), []take{{want: at(800)}, {want: at(1000)}}},
		{"no step given: the samplers' 0.2 s", newStepGrid(start, 0, 1, false),
			[]take{{want: at(200)}, {want: at(400)}}},
		{"until an end off the grid, with a tick at it", newStepGrid(start, 0.2, 1, false).until(at(500), true),
			[]take{{want: at(200)}, {want: at(400)}, {want: at(500)}, {}}},
		{"until an end on the grid, with a tick at it", newStepGrid(start, 0.2, 1, false).until(at(400), true),
			[]take{{want: at(200)}, {want: at(400)}, {}}},
		{"until an end, none at it", newStepGrid(start, 0.2, 1, false).until(at(500), false),
			[]take{{want: at(200)}, {want: at(400)}, {}}},
		{"until an end a slow sample passed", newStepGrid(start, 0.2, 1, false).until(at(500), true),
			[]take{{want: at(200), takenAt: at(650)}, {}}},
	} {
		g := c.grid
		for i, tk := range c.takes {
			got, ok := g.next()
			if tk.want.IsZero() {
				if ok {
					t.Errorf("%s: take %d: tick at %v, want the grid's end", c.name, i, got.Sub(start))
				}
				break
			}
			if !ok || !got.Equal(tk.want) {
				t.Errorf("%s: take %d: tick at %v (%v), want %v", c.name, i, got.Sub(start), ok, tk.want.Sub(start))
				break
			}
			g.last = tk.want
			if !tk.takenAt.IsZero() {
				g.last = tk.takenAt
			}
		}
	}
}

// wait returns at a tick with the time it woke, and early when ctx ends or stop
// delivers, with what stop delivered.
func TestStepGridWait(t *testing.T) {
	// A start in the past: the first tick is taken at once.
	g := newStepGrid(time.Now().Add(-time.Hour), 0.2, 0, false)
	defer g.close()
	before := time.Now()
	now, ev, _ := g.wait(context.Background(), nil)
	if ev != stepTick || now.Before(before) {
		t.Fatalf("first wait: %v at %v, want a tick taken now", ev, now)
	}
	// The next tick is a step after the start's grid point past now: stop first.
	stop := make(chan error, 1)
	stopErr := errors.New("the flows ended")
	g = newStepGrid(time.Now().Add(time.Hour), 0.2, 0, true)
	defer g.close()
	stop <- stopErr
	if _, ev, err := g.wait(context.Background(), stop); ev != stepStop || err != stopErr {
		t.Errorf("wait with stop delivered: %v, %v", ev, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ev, _ := g.wait(ctx, nil); ev != stepEnded {
		t.Errorf("wait after ctx ended: %v", ev)
	}
}

// A loop that waits on more than the grid arms it, and a wait cut short keeps
// the tick it was set for.
func TestStepGridArm(t *testing.T) {
	start := time.Now().Add(time.Hour)
	g := newStepGrid(start, 0.2, 1, false)
	defer g.close()
	if g.arm() == nil || !g.due.Equal(start.Add(200*time.Millisecond)) {
		t.Fatalf("armed for %v, want the first tick", g.due.Sub(start))
	}
	g.arm() // armed already: the same tick
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ev, _ := g.wait(ctx, nil); ev != stepEnded || g.armed {
		t.Fatalf("wait after ctx ended: %v, armed %v", ev, g.armed)
	}
	if g.arm(); !g.due.Equal(start.Add(200 * time.Millisecond)) {
		t.Errorf("armed again for %v, want the tick the cut wait was set for", g.due.Sub(start))
	}
	g.taken()
	if g.arm(); !g.due.Equal(start.Add(400 * time.Millisecond)) {
		t.Errorf("after a tick taken, armed for %v, want the next", g.due.Sub(start))
	}
}
