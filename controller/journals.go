package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bloatbench/bloatbench/qdisc"
)

// ErrStaleJournal marks a run refused because a journal that was never restored
// names one of its devices (or holds sysctls of one of its hosts).
var ErrStaleJournal = errors.New("a journal left by an earlier run was never restored")

// StaleJournal is a journal left by a run that did not put its hosts back (it was
// killed, or its restore failed), naming what of this run's it holds.
type StaleJournal struct {
	Path    string
	Setup   string
	Created time.Time
	PID     int
	// Devices are this run's devices it holds, as host:dev (the journal's host
	// names: the inventory of that run may have called a host otherwise).
	Devices []string
	// Sysctls are this run's hosts whose sysctls it holds.
	Sysctls []string
	// Controller is set for a journal that a host's mark names on another
	// controller: it cannot be restored from here.
	Controller string
	// Mark is the mark on the host that named it, when the journal is not in this
	// run's folder.
	Mark string
}

// StaleJournalsError refuses a run on devices with unrestored journals: the run
// would measure on top of the setup the journal's run left, and snapshot it as the
// host's own state, so that even its own restore would not put the host back.
type StaleJournalsError struct{ Journals []StaleJournal }

func (e *StaleJournalsError) Error() string {
	var b strings.Builder
	for i, j := range e.Journals {
		if i > 0 {
			b.WriteString("; ")
		}
		var what []string
		for _, d := range j.Devices {
			what = append(what, "device "+d)
		}
		for _, h := range j.Sysctls {
			what = append(what, "the sysctls of "+h)
		}
		if j.Controller != "" {
			// Whether that run still goes on cannot be told from here.
			fmt.Fprintf(&b, "journal %s on controller %s (setup %s, run %s by pid %d) holds %s as found before that run, which has not put it back (it still runs there, or was killed): the host's mark %s says so. Restore it there with bloatbench restore, or, if that journal is gone, remove the mark on the host",
				j.Path, j.Controller, j.Setup, j.Created.Format("2006-01-02 15:04:05"), j.PID, strings.Join(what, " and "), j.Mark)
			continue
		}
		fmt.Fprintf(&b, "journal %s (setup %s, run %s by pid %d) holds %s as found before that run, which never put it back",
			j.Path, j.Setup, j.Created.Format("2006-01-02 15:04:05"), j.PID, strings.Join(what, " and "))
		switch {
		case j.Mark != "":
			fmt.Fprintf(&b, " (found by the host's mark %s: the journal is in another journal folder, another XDG_STATE_HOME: bloatbench restore --journal %s)", j.Mark, j.Path)
		}
	}
	fmt.Fprintf(&b, ". This run would measure on top of what that run left, and take it for the hosts' own state, so it changes nothing and does not start: run `bloatbench restore` first (or `bloatbench restore --journal FILE` for one), or run again with --restore-stale to restore them first")
	return fmt.Sprintf("%v: %s", ErrStaleJournal, b.String())
}

func (e *StaleJournalsError) Unwrap() error { return ErrStaleJournal }

// Paths are the journals' files on this controller.
func (e *StaleJournalsError) Paths() []string {
	var p []string
	for _, j := range e.Journals {
		if j.Controller == "" {
			p = append(p, j.Path)
		}
	}
	return p
}

// identities asks every host of the run who it is, for the journal and the stale
// check: an address or inventory name can differ between two inventories of one
// machine, its machine-id and network namespace do not. A host that cannot say is
// known by its address alone.
func (o *Options) identities(ctx context.Context, eps []*endpoint) map[string]qdisc.HostID {
	ids := make([]qdisc.HostID, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		// An identity names lock files: one longer than any machine-id and
		// namespace make is asked for by the command instead.
		if ep.id == nil && ep.hello != nil && ep.hello.Identity != "" && len(ep.hello.Identity) <= 256 {
			ep.id = &qdisc.HostID{Addr: ep.conn.addr(), ID: ep.hello.Identity}
		}
		if ep.id != nil {
			// A host's machine-id and network namespace do not change under
			// its agent: asked once a connection (its hello tells), not once a
			// run.
			ids[i] = *ep.id
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := qdisc.HostID{Addr: ep.conn.addr()}
			cctx, cancel := context.WithTimeout(ctx, ep.conn.commandTimeout())
			s, err := qdisc.HostIdentity(cctx, ep)
			cancel()
			id.ID = s
			ids[i] = id
			if err != nil {
				o.logf("host %s: %v; it is known by its address %s alone", ep.host.Name, err, id.Addr)
				return
			}
			ep.id = &id
		}()
	}
	wg.Wait()
	out := map[string]qdisc.HostID{}
	for i, ep := range eps {
		out[ep.host.Name] = ids[i]
	}
	return out
}

// journalHost is how journal j knows its host name: by the identity it recorded,
// else (a journal from before identities) by the SSH destination of the inventory.
func journalHost(j *qdisc.Journal, name string) (qdisc.HostID, string) {
	ssh := ""
	if h := j.Hosts[name]; h != nil {
		ssh = h.SSH
	}
	return j.Identities[name], ssh
}

// sameHost says whether journal j's host name is the run's endpoint ep, known as id.
func sameHost(j *qdisc.Journal, name string, ep *endpoint, id qdisc.HostID) bool {
	jid, ssh := journalHost(j, name)
	if jid.Addr != "" || jid.ID != "" {
		return jid.Same(id)
	}
	return ssh != "" && ssh == ep.host.SSH
}

// runLive says whether the run that wrote j still runs on this controller: its
// sysctls are then its own, not stale. Its devices need no such check: the run
// holds them locked, so a journal naming a device this run has locked is stale.
func runLive(j *qdisc.Journal) bool {
	hn, _ := os.Hostname()
	if j.Controller != hn || j.PID == os.Getpid() || j.PID <= 0 {
		return false
	}
	err := syscall.Kill(j.PID, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// staleJournals finds the journals in the run's journal folder that name one of
// its devices (bottlenecks, path devices) or hold sysctls of one of its hosts. A
// journal that cannot be read is named in the log: it cannot be matched.
func (o *Options) staleJournals(eps []*endpoint, ids map[string]qdisc.HostID) ([]StaleJournal, error) {
	dir := o.journalDir()
	files, err := qdisc.Journals(dir)
	if err != nil {
		return nil, fmt.Errorf("list the journals in %s: %w", dir, err)
	}
	devs := o.lockedDevs()
	var out []StaleJournal
	for _, f := range files {
		j, err := qdisc.LoadJournal(f)
		if err != nil {
			o.logf("warning: %v; it is not checked against this run's devices", err)
			continue
		}
		sj := StaleJournal{Path: j.Path(), Setup: j.Setup, Created: j.Created, PID: j.PID}
		seen := map[string]bool{}
		for _, st := range j.States {
			for _, b := range devs {
				ep := endpointOf(eps, b.Host)
				k := st.Host + ":" + st.Dev
				if ep != nil && st.Dev == b.Dev && !seen[k] && sameHost(j, st.Host, ep, ids[b.Host]) {
					seen[k] = true
					sj.Devices = append(sj.Devices, k)
				}
			}
		}
		if !runLive(j) {
			for _, sv := range j.Sysctls {
				for _, ep := range eps {
					if !seen["sysctl "+sv.Host] && sameHost(j, sv.Host, ep, ids[ep.host.Name]) {
						seen["sysctl "+sv.Host] = true
						sj.Sysctls = append(sj.Sysctls, sv.Host)
					}
				}
			}
		}
		if len(sj.Devices) > 0 || len(sj.Sysctls) > 0 {
			out = append(out, sj)
		}
	}
	return out, nil
}

// checkStale refuses the run when a journal holds one of its devices or hosts: one in
// the run's journal folder, or one the hosts' marks name (from another journal folder
// or controller). It runs with the devices locked, so that no live run's journal in
// the folder can be taken for a stale one; a live run elsewhere is told by its pid.
func (o *Options) checkStale(ctx context.Context, eps []*endpoint, ids map[string]qdisc.HostID) error {
	stale, err := o.staleJournals(eps, ids)
	if err != nil {
		return err
	}
	more, err := o.markedJournals(ctx, eps, ids, stale)
	if err != nil {
		return err
	}
	stale = append(stale, more...)
	if len(stale) > 0 {
		return &StaleJournalsError{Journals: stale}
	}
	return nil
}

// StaleJournals is the check a run makes before it changes anything, for the
// command to make first (and restore what it finds, when asked): the journals in
// o's journal folder that hold a device or the sysctls of a host of the session.
// Run checks again, with the devices locked.
func (s *Session) StaleJournals(ctx context.Context, o Options) error {
	o.Inventory = s.o.Inventory
	return o.checkStale(ctx, s.eps, o.identities(ctx, s.eps))
}

// markPaths are the marks a run of o reads on ep's host, with what each is of:
// those of its devices there and that of its sysctls. None for a host that could
// not say who it is.
func (o *Options) markPaths(ep *endpoint, id qdisc.HostID) (paths, what []string) {
	if id.ID == "" {
		return nil, nil
	}
	for _, b := range o.lockedDevs() {
		if b.Host == ep.host.Name {
			paths = append(paths, qdisc.MarkPath(o.markDir(), id.ID, b.Dev))
			what = append(what, "device "+b.Host+":"+b.Dev)
		}
	}
	return append(paths, qdisc.MarkPath(o.markDir(), id.ID, "")), append(what, "the sysctls of "+ep.host.Name)
}

// markedJournals are the journals the hosts' marks name that the folder did not
// (known lists those): a run from another journal folder or controller that never
// put the host back. A mark of a journal on this controller that is gone is an
// orphan (the journal was removed to keep the host as it is), and is passed over; a
// mark of a run still going here is that run's, and the device is busy.
func (o *Options) markedJournals(ctx context.Context, eps []*endpoint, ids map[string]qdisc.HostID, known []StaleJournal) ([]StaleJournal, error) {
	hn, _ := os.Hostname()
	byPath := map[string]*StaleJournal{}
	var order []string
	for _, k := range known {
		byPath[k.Path] = nil // listed already
	}
	// Every host's marks are read at once; they are gone through in the
	// endpoints' order.
	type read struct {
		paths, what []string
		marks       []qdisc.Mark
		err         error
	}
	reads := make([]read, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		r := &reads[i]
		if r.paths, r.what = o.markPaths(ep, ids[ep.host.Name]); len(r.paths) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, ep.conn.commandTimeout())
			defer cancel()
			r.marks, r.err = qdisc.ReadMarks(cctx, ep, ep.host.Name, r.paths)
		}()
	}
	wg.Wait()
	for i, ep := range eps {
		paths, what, marks := reads[i].paths, reads[i].what, reads[i].marks
		if len(paths) == 0 {
			continue
		}
		if err := reads[i].err; err != nil {
			o.logf("warning: %v; only this controller's journals are checked for it", err)
			continue
		}
		for _, m := range marks {
			w := what[slices.Index(paths, m.Path)]
			if sj, ok := byPath[m.Journal]; ok && sj == nil {
				continue
			}
			if m.Controller == hn {
				if _, err := os.Stat(m.Journal); err != nil {
					o.logf("host %s: mark %s names journal %s, which is gone (removed to keep the host as it was left?): passed over", ep.host.Name, m.Path, m.Journal)
					continue
				}
				if runLive(&qdisc.Journal{Controller: m.Controller, PID: m.PID}) {
					return nil, fmt.Errorf("host %s: %s: %w: run pid %d of setup %s on this controller, with journal %s (another journal folder) holds it: wait for it to end, or stop it", ep.host.Name, w, qdisc.ErrBusy, m.PID, m.Setup, m.Journal)
				}
			}
			sj := byPath[m.Journal]
			if sj == nil {
				sj = &StaleJournal{Path: m.Journal, Setup: m.Setup, Created: m.Created, PID: m.PID, Mark: m.Path}
				if m.Controller != hn {
					sj.Controller = m.Controller
				}
				byPath[m.Journal] = sj
				order = append(order, m.Journal)
			}
			if d, ok := strings.CutPrefix(w, "device "); ok {
				sj.Devices = append(sj.Devices, d)
			} else {
				sj.Sysctls = append(sj.Sysctls, ep.host.Name)
			}
		}
	}
	var out []StaleJournal
	for _, p := range order {
		out = append(out, *byPath[p])
	}
	return out, nil
}

// writeMarks marks every device and host j holds on the hosts themselves, before the
// run changes any: a controller with another journal folder then sees them. A host
// that cannot keep a mark is named; the journal here still guards it.
func (o *Options) writeMarks(ctx context.Context, eps []*endpoint, j *qdisc.Journal) {
	o.eachMark(j, func(host, path string) {
		ep := endpointOf(eps, host)
		cctx, cancel := context.WithTimeout(ctx, ep.conn.commandTimeout())
		defer cancel()
		if err := qdisc.WriteMark(cctx, ep, host, path, j.MarkOf()); err != nil {
			o.logf("warning: %v; a controller with another journal folder would not see this run's journal", err)
		}
	})
}

// removeMarks removes j's marks once its hosts are back.
func (o *Options) removeMarks(ctx context.Context, eps []*endpoint, j *qdisc.Journal) {
	o.eachMark(j, func(host, path string) {
		ep := endpointOf(eps, host)
		cctx, cancel := context.WithTimeout(ctx, ep.conn.commandTimeout())
		defer cancel()
		if err := qdisc.RemoveMark(cctx, ep, host, path, j.Path()); err != nil {
			o.logf("warning: %v; the host is back as found, but a controller other than this one will take the mark for a run of %s not put back", err, j.Path())
		}
	})
}

// eachMark calls f with the host and path of each of j's marks.
func (o *Options) eachMark(j *qdisc.Journal, f func(host, path string)) {
	done := map[string]bool{}
	for _, st := range j.States {
		if id := j.Identities[st.Host].ID; id != "" {
			f(st.Host, qdisc.MarkPath(o.markDir(), id, st.Dev))
		}
	}
	for _, sv := range j.Sysctls {
		if id := j.Identities[sv.Host].ID; id != "" && !done[sv.Host] {
			done[sv.Host] = true
			f(sv.Host, qdisc.MarkPath(o.markDir(), id, ""))
		}
	}
}

func (o *Options) markDir() string {
	if o.MarkDir != "" {
		return o.MarkDir
	}
	return qdisc.MarkDir
}
