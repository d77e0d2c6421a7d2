package controller

// The recording room: every sample, series, event and job end an agent sends goes
// into the data file as it arrives, with the live progress feed; what a hostile
// endpoint may declare is bounded here (contain.go holds the bounds).

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/datafile"
)

// forwarder hands what an agent sends to the run in progress; between runs it drops
// it.
type forwarder struct {
	mu sync.Mutex
	h  agent.Handler
}

func (f *forwarder) set(h agent.Handler) {
	f.mu.Lock()
	f.h = h
	f.mu.Unlock()
}

func (f *forwarder) get() agent.Handler {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h
}

func (f *forwarder) Samples(host string, batch map[string][]datafile.Sample) {
	if h := f.get(); h != nil {
		h.Samples(host, batch)
	}
}

func (f *forwarder) JobDone(host, job string, err error) {
	if h := f.get(); h != nil {
		h.JobDone(host, job, err)
	}
}

func (f *forwarder) Series(host, job string, s datafile.Series) {
	if h := f.get(); h != nil {
		h.Series(host, job, s)
	}
}

func (f *forwarder) Log(host, msg string) {
	if h := f.get(); h != nil {
		h.Log(host, msg)
	}
}

func (f *forwarder) Alert(host, msg string) {
	if h := f.get(); h != nil {
		h.Alert(host, msg)
	}
}

// recorder writes what agents send during one run into its data file.
type recorder struct {
	w *datafile.Writer
	// alert shows an agent's alerts to the person running the test.
	alert func(host, msg string)
	// prefix marks this run's job names: a job of an earlier run that ends late is
	// not one of this run's.
	prefix string
	done   chan jobEnd
	mu     sync.Mutex
	err    error
	// failed is closed at the first write error (a full disk): the run ends then,
	// with what the file holds, rather than measuring on into nothing.
	failed     chan struct{}
	failedOnce sync.Once
	// owners are the hosts (endpoint labels) each series of the run may come from:
	// for the plan's, the hosts that run the jobs yielding them; for those a job
	// declares as it runs (a qdisc's statistics depend on its kind and the kernel),
	// the declaring host alone. A host sends no other series: an endpoint is not
	// trusted with another's measurements.
	owners map[string][]string
	// jobsOn are the run's jobs on each host, keyed by jobOn; ended, those whose
	// end came.
	jobsOn, ended map[string]bool
	// series counts the series the file declares, the plan's and the found ones.
	series int
	// hosts is what each host sent, by its label, and what of it was refused.
	hosts map[string]*hostTally
	// progress and live feed Options.Progress; live is set once t0 is known.
	progress func(Progress)
	live     *live
}

// newRecorder is the recorder of a run whose job names start with prefix and which
// waits for at most jobs jobs' ends.
func newRecorder(prefix string, jobs int, progress func(Progress)) *recorder {
	return &recorder{prefix: prefix, done: make(chan jobEnd, jobs), failed: make(chan struct{}), progress: progress,
		owners: map[string][]string{}, jobsOn: map[string]bool{}, ended: map[string]bool{}, hosts: map[string]*hostTally{}}
}

// jobEnd is a job's end as its agent reports it: host is the endpoint's label.
type jobEnd struct {
	host, job string
	err       error
}

// Progress is a run's state as its samples arrive.
type Progress struct {
	// Elapsed is the seconds since t0 (negative before it), of Total.
	Elapsed, Total float64
	// Loaded says the streams run: from delay to delay + length.
	Loaded bool
	// SumMbps is the throughput of the streams' latest samples, summed; PingMs the
	// latest reply's round trip (NaN before the first).
	SumMbps, PingMs float64
}

// live keeps what a progress feed needs: each stream's latest throughput and the
// latest ping.
type live struct {
	t0                   time.Time
	delay, length, total float64
	tcp                  map[string]float64
	ping                 float64
	// pingSeries is the series whose latest round trip the feed shows.
	pingSeries string
}

// tell updates the live state with a batch and hands it to the progress feed.
func (r *recorder) tell(batch map[string][]datafile.Sample) {
	r.mu.Lock()
	l := r.live
	if l == nil {
		r.mu.Unlock()
		return
	}
	for series, ss := range batch {
		if len(ss) == 0 {
			continue
		}
		last := ss[len(ss)-1]
		if _, ok := l.tcp[series]; ok {
			l.tcp[series] = last.V
		} else if series == l.pingSeries && !last.Lost {
			l.ping = last.V
		}
	}
	el := time.Since(l.t0).Seconds()
	p := Progress{Elapsed: el, Total: l.total, Loaded: el >= l.delay && el < l.delay+l.length, PingMs: l.ping}
	if p.Loaded {
		// Outside the streams' time their last samples would linger.
		for _, v := range l.tcp {
			p.SumMbps += v
		}
	}
	r.mu.Unlock()
	r.progress(p)
}

func (r *recorder) Samples(host string, batch map[string][]datafile.Sample) {
	if r.w == nil {
		return // before the file: nothing of this run sends samples yet
	}
	// The batch is the client's, decoded for this call: what is refused is taken
	// out of it, so that neither the file nor the progress feed sees it.
	var warns []string
	r.mu.Lock()
	t := r.tally(host)
	for series, ss := range batch {
		owners, known := r.owners[series]
		switch {
		case !known:
			// Every series is declared before its samples (by the plan, or by
			// its job as it runs): these are of no job of this run.
			delete(batch, series)
			t.unknownSamples += len(ss)
			if t.once(refusedUnknown) {
				warns = append(warns, fmt.Sprintf("samples of series %q, which no job of the run declared, were dropped; later ones of undeclared series are counted at the run's end",
					truncName(series)))
			}
		case !slices.Contains(owners, host):
			delete(batch, series)
			t.foreignSamples += len(ss)
			if t.once(refusedForeignSamples) {
				warns = append(warns, fmt.Sprintf("samples of series %q, which is another host's, were dropped; later ones of other hosts' series are counted at the run's end",
					truncName(series)))
			}
		}
	}
	r.mu.Unlock()
	for _, msg := range warns {
		r.warn(host, msg)
	}
	for series, ss := range batch {
		if err := r.w.Append(series, ss); err != nil {
			r.fail(err)
		}
	}
	if r.progress != nil {
		r.tell(batch)
	}
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = fmt.Errorf("record into %s: %w", r.w.Path(), err)
	}
	r.mu.Unlock()
	r.failedOnce.Do(func() { close(r.failed) })
}

// Series records a series a job found as it ran (a qdisc's statistics, which
// depend on the qdisc's kind and the kernel), once, as the declaring host's: a
// declaration naming a job the host does not run in this run, or a series that is
// another host's, is refused, as are declarations past the bounds.
func (r *recorder) Series(host, job string, s datafile.Series) {
	if r.w == nil || !strings.HasPrefix(job, r.prefix) {
		return // a job of an earlier run that ends late
	}
	msg, err := r.declare(host, job, s)
	if msg != "" {
		r.warn(host, msg)
	}
	if err != nil {
		r.fail(err)
	}
}

// declare takes a declaration; a refusal's first of its kind from the host comes
// back as the warning to record.
func (r *recorder) declare(host, job string, s datafile.Series) (warning string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tally(host)
	owners, known := r.owners[s.Name]
	switch {
	case !r.jobsOn[jobOn(host, job)]:
		t.foreignSeries++
		if t.once(refusedForeignSeries) {
			return fmt.Sprintf("series %q was refused: declared for job %q, which this run did not start on the host; later refusals are counted at the run's end",
				truncName(s.Name), truncName(job)), nil
		}
	case known && slices.Contains(owners, host):
		// Planned, or declared already: the first declaration stands.
	case known:
		t.foreignSeries++
		if t.once(refusedForeignSeries) {
			return fmt.Sprintf("series %q was refused: it is another host's; later refusals are counted at the run's end", truncName(s.Name)), nil
		}
	case t.series >= maxHostSeries:
		t.overSeries++
		if t.once(refusedOverSeries) {
			return fmt.Sprintf("series %q and any later were refused: the host's jobs declared %d series, the most a host may; they are counted at the run's end",
				truncName(s.Name), maxHostSeries), nil
		}
	case r.series >= datafile.MaxSeries:
		t.overSeries++
		if t.once(refusedOverSeries) {
			return fmt.Sprintf("series %q and any later were refused: the run has %d series, the most a data file holds; they are counted at the run's end",
				truncName(s.Name), datafile.MaxSeries), nil
		}
	default:
		r.owners[s.Name] = []string{host}
		t.series++
		r.series++
		// Under the lock: a sample of the series, accepted once its owner is set,
		// is written after its declaration.
		return "", r.w.AddSeries(s)
	}
	return "", nil
}

// JobDone hands a job's end to the run; only the host that runs a job may end it,
// once: done holds one end of each, and forged ends must not crowd the real ones
// out.
func (r *recorder) JobDone(host, job string, err error) {
	if !strings.HasPrefix(job, r.prefix) {
		return
	}
	r.mu.Lock()
	k := jobOn(host, job)
	ours := r.jobsOn[k] && !r.ended[k]
	if ours {
		r.ended[k] = true
	}
	r.mu.Unlock()
	if !ours {
		return
	}
	select {
	case r.done <- jobEnd{host, job, err}:
	default:
		// Every job of the run fits in done; a surplus end is not one we wait for.
	}
}

// Alert records what a host's agent warns of as Log does, and prints it as the
// run goes (escaped: an agent's words are not trusted with the terminal).
// Past the host's cap on events it is neither: a hostile agent cannot flood the
// terminal.
func (r *recorder) Alert(host, msg string) {
	if r.record(host, msg) && r.alert != nil {
		r.alert(host, datafile.Truncate(msg, datafile.MaxText))
	}
}

// Log records what a host's agent warns of, up to maxHostEvents a host.
func (r *recorder) Log(host, msg string) { r.record(host, msg) }

// record is Log, saying whether msg was kept.
func (r *recorder) record(host, msg string) bool {
	if r.w == nil {
		return false
	}
	r.mu.Lock()
	t := r.tally(host)
	t.events++
	over := t.events > maxHostEvents
	first := false
	if over {
		t.overEvents++
		first = t.once(refusedOverEvents)
	}
	r.mu.Unlock()
	if first {
		r.warn(host, fmt.Sprintf("the host's agent logged more than %d events in this run: later ones are counted at the run's end, not kept", maxHostEvents))
	}
	if !over {
		r.warn(host, datafile.Truncate(msg, datafile.MaxText))
	}
	return !over
}

// warn records a warning about host.
func (r *recorder) warn(host, msg string) {
	r.w.Event(datafile.Event{T: datafile.Unix(time.Now()), Host: host, Level: "warning", Message: msg})
}
