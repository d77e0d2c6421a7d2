package controller

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// An endpoint is a host the controller logs in to, not one it trusts: a broken
// build or a hostile host may send anything its protocol can carry. What one host
// sends is kept to its own jobs' series and within bounds, so that it can neither
// forge another host's measurements nor grow the controller's memory and the data
// file without end. A host past a bound is cut there with one warning, and its
// counts go into an event at the run's end; the run goes on with what it sent.
const (
	// maxHostSeries bounds the series one host's jobs declare as they run: a data
	// file holds datafile.MaxSeries (20,000) in all, and the largest real run (1024
	// streams with their tcp_info, a bottleneck's queues) declares a few thousand.
	// The file's bound is kept too, whatever the hosts.
	maxHostSeries = datafile.MaxSeries
	// maxHostEvents bounds the events a host's agent logs in a run: a job warns a
	// few times at most, and a reader keeps datafile.MaxEvents (100,000) of a file,
	// so that one host flooding leaves room for the others' and the controller's.
	maxHostEvents = 10_000
	// maxNameInWarning bounds a series' or a job's name quoted in a warning: an
	// agent's names are up to 512 bytes, and a warning names what it refused, not
	// all of it.
	maxNameInWarning = 128
)

// Kinds of refusal, each warned of once a host.
const (
	refusedUnknown = 1 << iota
	refusedForeignSamples
	refusedForeignSeries
	refusedOverSeries
	refusedOverEvents
)

// hostTally is what one host sent in a run and what of it was refused.
type hostTally struct {
	// series are the declarations taken from the host, events its agent's logs.
	series, events int
	// unknownSamples are samples of series no job declared; foreignSamples of
	// another host's series; foreignSeries declarations of another host's series or
	// for a job the host does not run; overSeries and overEvents what came past the
	// bounds.
	unknownSamples, foreignSamples, foreignSeries, overSeries, overEvents int
	// warned are the kinds of refusal already warned of.
	warned int
}

// once says whether this is the host's first refusal of kind, and marks it.
func (t *hostTally) once(kind int) bool {
	first := t.warned&kind == 0
	t.warned |= kind
	return first
}

// refused says what of the host's was refused, or "".
func (t *hostTally) refused() string {
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{
		{t.unknownSamples, "samples of series no job of the run declared"},
		{t.foreignSamples, "samples of other hosts' series"},
		{t.foreignSeries, "declarations of other hosts' series or for jobs the host does not run"},
		{t.overSeries, fmt.Sprintf("declarations past the bound (%d series a host, %d a file)", maxHostSeries, datafile.MaxSeries)},
		{t.overEvents, fmt.Sprintf("events past the bound of %d a host", maxHostEvents)},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(parts, ", ")
}

// tally is host's record; r.mu is held. host is an endpoint's label, which the
// controller gives each agent's client: the map has one entry an endpoint.
func (r *recorder) tally(host string) *hostTally {
	t := r.hosts[host]
	if t == nil {
		t = &hostTally{}
		r.hosts[host] = t
	}
	return t
}

// summarize records, for each host that sent what was refused, how much: the
// warnings said only the first of each kind.
func (r *recorder) summarize() {
	if r.w == nil {
		return
	}
	r.mu.Lock()
	type line struct{ host, msg string }
	var lines []line
	for host, t := range r.hosts {
		if msg := t.refused(); msg != "" {
			lines = append(lines, line{host, "refused from the host in this run: " + msg})
		}
	}
	r.mu.Unlock()
	sort.Slice(lines, func(i, k int) bool { return lines[i].host < lines[k].host })
	for _, l := range lines {
		r.w.Event(datafile.Event{T: datafile.Unix(time.Now()), Host: l.host, Level: "warning", Message: l.msg})
	}
}

// jobOn keys a job on a host in the recorder's sets.
func jobOn(host, job string) string { return host + "\x00" + job }

// truncName is a name an agent sent, cut for a warning.
func truncName(s string) string { return datafile.Truncate(s, maxNameInWarning) }
