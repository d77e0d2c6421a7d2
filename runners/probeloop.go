package runners

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// probeSchedule is what the ICMP and the UDP probers share: probe k goes at start
// + k*interval on the monotonic clock, so that the probes never drift, and replies
// are waited for until every probe sent has one or the deadline passes.
type probeSchedule struct {
	start    time.Time
	interval time.Duration
	count    int
	deadline time.Time
}

// scheduleTally is how a schedule went.
type scheduleTally struct {
	sent, skipped, failed, answered int
	// sendErr is the first send that failed.
	sendErr error
	// interrupted says ctx ended first: nothing is to be recorded as lost.
	interrupted bool
}

// run sends probe k with send(k) while receive, in a goroutine of its own, calls
// answered once for each reply; stop makes receive return. run returns once every
// probe sent is answered, the deadline passes or ctx ends, with receive ended:
// what the callbacks wrote may be read then. The error is receive's.
//
// A slot that has passed when the next one is due already is skipped: a job that
// started late (an agent slow to start it, on a busy or emulated host) or a
// stalled one sends only the latest probe due, not every one it missed at once; a
// burst would measure one moment many times, and load the path it measures. The
// summary's coverage warning names the gap.
func (s probeSchedule) run(ctx context.Context, send func(k int) error, receive func(answered func()) error, stop func()) (scheduleTally, error) {
	var mu sync.Mutex
	var t scheduleTally
	expect, sentAll := s.count, false
	allIn := make(chan struct{})
	recvErr := make(chan error, 1)
	go func() {
		recvErr <- receive(func() {
			mu.Lock()
			defer mu.Unlock()
			t.answered++
			if sentAll && t.answered == expect {
				close(allIn)
			}
		})
	}()
	stopReceiving := func() error {
		stop()
		return <-recvErr
	}
	for k := 0; k < s.count; k++ {
		at := s.start.Add(time.Duration(k) * s.interval)
		if k+1 < s.count && !time.Now().Before(at.Add(s.interval)) {
			t.skipped++
			continue
		}
		if err := sleepUntil(ctx, at); err != nil {
			stopReceiving()
			t.interrupted = true
			return t, nil
		}
		t.sent++
		if err := send(k); err != nil {
			// The probe is lost (a link down is a measurement, not a failure).
			if t.sendErr == nil {
				t.sendErr = err
			}
			t.failed++
		}
	}
	mu.Lock()
	sentAll, expect = true, t.sent
	if t.answered == expect {
		close(allIn)
	}
	mu.Unlock()

	timer := time.NewTimer(time.Until(s.deadline))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		stopReceiving()
		t.interrupted = true
		return t, nil
	case err := <-recvErr:
		return t, err
	case <-allIn:
	case <-timer.C:
	}
	return t, stopReceiving()
}

// recordLost emits a lost sample of series, at its send time, for every probe p
// got no reply to, in probe order: once the schedule has run, without a
// context that ended (an interrupted run records no losses).
func recordLost(p *prober, emit Emit, series string) {
	lost := p.unanswered()
	seqs := make([]int, 0, len(lost))
	for k := range lost {
		seqs = append(seqs, k)
	}
	sort.Ints(seqs)
	for _, k := range seqs {
		emit(series, datafile.Sample{T: unix(lost[k]), Seq: k, Lost: true})
	}
}
