package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The failure policy of a sequence (run's setups and repetitions, a batch's runs):
// a failed run is reported and the next goes on; a host not put back stops it; so
// does an interruption, before the next run starts.
func TestSequencePolicy(t *testing.T) {
	t.Parallel()
	t.Run("a failed run, the next goes on", func(t *testing.T) {
		t.Parallel()
		hosts := newFakeHosts()
		o, _ := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), downloadPlan(t))
		o.Length, o.Delay, o.Step = 200*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		bad := errors.New("test no_such_test: no such test")
		var ended []string
		q := Sequence{Steps: []Step{{Options: o}, {Options: o, Err: bad}, {Options: o}},
			Ended: func(i int, path string, err error) error {
				kept := "none"
				if path != "" {
					kept = "data"
				}
				ended = append(ended, fmt.Sprintf("%d %s %s", i, kept, errText(err)))
				return nil
			}}
		res, err := q.Execute(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"0 data ok", "1 none " + bad.Error(), "2 data ok"}
		if strings.Join(ended, "\n") != strings.Join(want, "\n") || res.Ran != 3 || len(res.Failures) != 1 || res.Interrupted || res.Stopped != nil {
			t.Errorf("ended %q, result %+v; want %q and one failure", ended, res, want)
		}
		// The session the sequence opened (with the first run's options) is closed.
		allExited(t, hosts)
	})
	t.Run("a host not put back stops it", func(t *testing.T) {
		t.Parallel()
		r := newBottleneckRig(t, "default", "bfifo")
		r.dev.failOn(t, strings.TrimPrefix(tcDelRoot, "tc "), "not-permitted")
		n := 0
		q := Sequence{Steps: []Step{{Options: r.o}, {Options: r.o}}, Session: r.s,
			Ended: func(int, string, error) error { n++; return nil }}
		res, err := q.Execute(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(res.Stopped, ErrNotRestored) || res.Ran != 1 || n != 1 {
			t.Errorf("result %+v, %d ended; want it stopped after the first run, not restored", res, n)
		}
		// A session given is the caller's: still open.
		if _, err := r.s.Exec(context.Background(), "server", "true"); err != nil {
			t.Errorf("the caller's session after the sequence: %v", err)
		}
	})
	t.Run("interrupted between runs", func(t *testing.T) {
		t.Parallel()
		hosts := newFakeHosts()
		o, _ := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), downloadPlan(t))
		o.Length, o.Delay, o.Step = 200*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := 0
		q := Sequence{Steps: []Step{{Options: o}, {Options: o}}, Pause: time.Hour,
			Start: func(_ int, o Options) Options { started++; return o },
			Ended: func(int, string, error) error { cancel(); return nil }}
		res, err := q.Execute(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Interrupted || res.Ran != 1 || started != 1 || len(res.Failures) != 0 {
			t.Errorf("result %+v, %d started; want it interrupted in the pause after the first run", res, started)
		}
	})
	t.Run("what Ended cannot keep ends it", func(t *testing.T) {
		t.Parallel()
		hosts := newFakeHosts()
		o, _ := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), downloadPlan(t))
		full := errors.New("write runs.jsonl: no space left on device")
		q := Sequence{Steps: []Step{{Options: o, Err: errors.New("no such test")}, {Options: o}},
			Ended: func(int, string, error) error { return full }}
		if res, err := q.Execute(context.Background()); !errors.Is(err, full) || res.Ran != 1 {
			t.Errorf("result %+v, %v; want %v after the first run", res, err, full)
		}
	})
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
