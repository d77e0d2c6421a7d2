package controller

// The sequence room: runs one after another on one session, with one failure
// policy. `run` makes one of its setups and repetitions, a batch of its run list.

import (
	"context"
	"errors"
	"time"
)

// Step is one run of a sequence.
type Step struct {
	// Options are the run's.
	Options Options
	// Err, when set, fails the run before it starts (a test or setup that does not
	// resolve), and the sequence goes on.
	Err error
}

// Sequence is runs one after another, each with its setup applied and put back.
//
// The failure policy: a run that fails is reported (Ended) and the next one goes
// on; an interruption (ctx done) ends the sequence, and so does a run after which a
// host could not be put back as found (ErrNotRestored), since every later run would
// measure on top of what it left.
type Sequence struct {
	Steps []Step
	// Pause is the time between two runs' ends and starts.
	Pause time.Duration
	// Session is the hosts' session for every run; nil connects with the first
	// step's options, and again for the next step while connecting fails (a host
	// that was down may be back). A session the sequence opened, it closes.
	Session *Session
	// Start, when set, is told that step i starts and gives the options it runs
	// with (a progress bar's log and feed on them).
	Start func(i int, o Options) Options
	// Run, when set, runs step i on s in place of s.Run (a batch's commands
	// before and after each run).
	Run func(ctx context.Context, s *Session, i int, o Options) (string, error)
	// Ended is told of step i's end: the data file kept ("" for none) and the
	// run's error. An error it returns (a record it could not write) ends the
	// sequence, and Execute returns it.
	Ended func(i int, path string, err error) error
}

// SequenceResult is what a sequence came to.
type SequenceResult struct {
	// Ran is the steps that started.
	Ran int
	// Failures are the runs' errors, in order.
	Failures []error
	// Interrupted: ctx ended the sequence before its last step ended.
	Interrupted bool
	// Stopped is the error that ended the sequence early (ErrNotRestored), or nil.
	Stopped error
}

// Execute runs the sequence. Its error is only Ended's: what the runs did is in the
// result.
func (q *Sequence) Execute(ctx context.Context) (SequenceResult, error) {
	var res SequenceResult
	sess := q.Session
	if sess == nil {
		defer func() { sess.Close() }()
	}
	for i, st := range q.Steps {
		if res.Ran > 0 && q.Pause > 0 {
			select {
			case <-time.After(q.Pause):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			res.Interrupted = true
			return res, nil
		}
		o := st.Options
		if q.Start != nil {
			o = q.Start(i, o)
		}
		res.Ran++
		var data string
		var err error
		switch {
		case st.Err != nil:
			err = st.Err
		case sess == nil:
			s, cerr := Connect(ctx, o)
			if cerr != nil {
				err = cerr
				break
			}
			sess = s
			data, err = q.run(ctx, sess, i, o)
		default:
			data, err = q.run(ctx, sess, i, o)
		}
		if err != nil {
			res.Failures = append(res.Failures, err)
		}
		if q.Ended != nil {
			if eerr := q.Ended(i, data, err); eerr != nil {
				return res, eerr
			}
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			res.Interrupted = true
			return res, nil
		case errors.Is(err, ErrNotRestored):
			res.Stopped = err
			return res, nil
		}
	}
	return res, nil
}

func (q *Sequence) run(ctx context.Context, s *Session, i int, o Options) (string, error) {
	if q.Run != nil {
		return q.Run(ctx, s, i, o)
	}
	return s.Run(ctx, o)
}
