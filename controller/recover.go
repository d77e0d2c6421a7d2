package controller

// The recovery room: what `bloatbench restore` (and run's --restore-stale) does with
// the journals of runs that never put their hosts back: each device and each host's
// sysctls put back while they are as that run left them, one login and one agent per
// host of a journal, as a run's.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/bloatbench/bloatbench/qdisc"
)

// Restore puts back what the journals in files recorded, newest first: on a device
// two crashed runs left, the later run's snapshot is the earlier run's setup, so it
// is undone first and the earliest snapshot, the device as first found, comes last.
// A device, or a host's sysctls, is put back only while it is as its run left it
// (unless force); one changed since is left alone, named, and kept in its journal,
// and so is it in every older journal (each would put back a state that is not the
// device's own). What is settled is dropped from its journal, and a journal with
// nothing left is removed. Out hears what became of each device and host; o gives
// the hosts' connections (Dialer, Self, SelfHash), the marks' folder and the log.
func Restore(ctx context.Context, o Options, files []string, force bool, out io.Writer) error {
	// Restoring needs root on every host it touches, devices and sysctls alike: a
	// login that is not root runs the agent through sudo, as a run's does.
	o.ChangesDevices, o.SetsSysctls = true, true
	var errs []error
	var js []*qdisc.Journal
	for _, f := range files {
		j, err := qdisc.LoadJournal(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		js = append(js, j)
	}
	qdisc.NewestFirst(js)
	r := &recovery{o: o, force: force, out: out}
	for _, j := range js {
		errs = append(errs, r.journal(ctx, j)...)
	}
	return errors.Join(errs...)
}

// recovery is one Restore: what it left alone so far, across journals.
type recovery struct {
	o     Options
	force bool
	out   io.Writer
	// leftDevs and leftHosts are the devices and the hosts' sysctls a newer
	// journal did not settle: an older journal's snapshot of them is not theirs.
	leftDevs, leftHosts []journalDev
}

// journalDev is one device of a journal (dev "" for a host's sysctls), for the order
// of restores across journals.
type journalDev struct {
	id  qdisc.HostID
	ssh string // the inventory's SSH destination, for journals without identities
	dev string
}

func (a journalDev) same(b journalDev) bool {
	if a.dev != b.dev {
		return false
	}
	if (a.id.Addr != "" || a.id.ID != "") && (b.id.Addr != "" || b.id.ID != "") {
		return a.id.Same(b.id)
	}
	return a.ssh != "" && a.ssh == b.ssh
}

func devOf(j *qdisc.Journal, host, dev string) journalDev {
	id, ssh := journalHost(j, host)
	return journalDev{id: id, ssh: ssh, dev: dev}
}

func isLeft(list []journalDev, x journalDev) bool {
	for _, l := range list {
		if l.same(x) {
			return true
		}
	}
	return false
}

// journalHosts are the connections of one journal's hosts, opened as needed and
// closed when the journal is done; a host that could not be reached is not tried
// again for the same journal.
type journalHosts struct {
	o      *Options
	j      *qdisc.Journal
	eps    map[string]*endpoint
	failed map[string]error
}

func (h *journalHosts) get(ctx context.Context, name string) (*endpoint, error) {
	if ep := h.eps[name]; ep != nil {
		return ep, nil
	}
	if err := h.failed[name]; err != nil {
		return nil, err
	}
	host := h.j.Hosts[name]
	if host == nil {
		return nil, fmt.Errorf("host %s: journal %s names no such host", name, h.j.Path())
	}
	ep := &endpoint{role: "bottleneck", host: host, fwd: &forwarder{}}
	if err := h.o.connect(ctx, ep); err != nil {
		ep.close()
		h.failed[name] = err
		return nil, err
	}
	h.eps[name] = ep
	return ep, nil
}

func (h *journalHosts) close() {
	for _, ep := range h.eps {
		ep.close()
	}
}

// journal restores one journal's devices, then its hosts' sysctls (as a run puts them
// back), and rewrites or removes it.
func (r *recovery) journal(ctx context.Context, j *qdisc.Journal) []error {
	var errs []error
	when := j.Created.Format("2006-01-02 15:04:05")
	hosts := &journalHosts{o: &r.o, j: j, eps: map[string]*endpoint{}, failed: map[string]error{}}
	defer hosts.close()
	settled := map[*qdisc.State]bool{}
	var locks []*qdisc.DeviceLock // held until the journal is rewritten or gone
	defer func() {
		for _, l := range locks {
			l.Unlock()
		}
	}()
	for _, st := range j.States {
		jd := devOf(j, st.Host, st.Dev)
		if isLeft(r.leftDevs, jd) {
			errs = append(errs, fmt.Errorf("host %s: %s: left as it is: a newer journal for it was not restored (above); journal %s would put back what it was before that one", st.Host, st.Dev, j.Path()))
			continue
		}
		v, err := r.device(ctx, hosts, st, &locks)
		if errors.Is(err, qdisc.ErrJournalGone) {
			// The run that wrote it ended meanwhile and put its hosts back.
			fmt.Fprintln(r.out, err)
			return errs
		}
		if err != nil {
			r.leftDevs = append(r.leftDevs, jd)
			if errors.Is(err, qdisc.ErrChangedSince) {
				err = fmt.Errorf("%w. To put it back as found all the same: bloatbench restore --force --journal %s; to keep it as it is: rm %s", err, j.Path(), j.Path())
			}
			errs = append(errs, err)
			continue
		}
		settled[st] = true
		switch v {
		case qdisc.AsFound:
			fmt.Fprintf(r.out, "%s:%s is as setup %s of %s found it already: nothing to do\n", st.Host, st.Dev, j.Setup, when)
		case qdisc.Changed:
			fmt.Fprintf(r.out, "restored %s:%s (setup %s of %s), forced: it had been changed since that run left it\n", st.Host, st.Dev, j.Setup, when)
		default:
			fmt.Fprintf(r.out, "restored %s:%s (setup %s of %s)\n", st.Host, st.Dev, j.Setup, when)
		}
	}
	// The setup's sysctls, host by host, after the devices as a run does.
	settledHosts := map[string]bool{}
	seen := map[string]bool{}
	for _, sv := range j.Sysctls {
		if seen[sv.Host] {
			continue
		}
		seen[sv.Host] = true
		jd := devOf(j, sv.Host, "")
		if isLeft(r.leftHosts, jd) {
			errs = append(errs, fmt.Errorf("host %s: sysctls left as they are: a newer journal for them was not restored (above)", sv.Host))
			continue
		}
		out, err := r.sysctls(ctx, hosts, sv.Host)
		if err != nil {
			r.leftHosts = append(r.leftHosts, jd)
			if errors.Is(err, qdisc.ErrChangedSince) {
				err = fmt.Errorf("%w. To put them back as found all the same: bloatbench restore --force --journal %s", err, j.Path())
			}
			errs = append(errs, err)
			continue
		}
		settledHosts[sv.Host] = true
		if len(out.Restored) == 0 {
			fmt.Fprintf(r.out, "the sysctls of %s are as setup %s of %s found them already: nothing to do\n", sv.Host, j.Setup, when)
		} else {
			fmt.Fprintf(r.out, "restored the sysctls of %s (setup %s of %s): %s\n", sv.Host, j.Setup, when, strings.Join(out.Restored, ", "))
		}
	}
	if err := j.Keep(func(st *qdisc.State) bool { return !settled[st] }, func(h string) bool { return !settledHosts[h] }); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// device restores one device of a journal, holding its lock (appended to locks, for
// the caller to release once the journal is rewritten). The host must still be the
// one the journal was written on: another machine now at the address has a device
// of that name that is not the journal's to undo.
func (r *recovery) device(ctx context.Context, hosts *journalHosts, st *qdisc.State, locks *[]*qdisc.DeviceLock) (qdisc.Verdict, error) {
	ep, err := hosts.get(ctx, st.Host)
	if err != nil {
		return 0, err
	}
	j := hosts.j
	// Refused, naming the holder, while a run or another restore has the device.
	l, err := j.LockForRestore(st, ep.conn.addr())
	if err != nil {
		return 0, err
	}
	*locks = append(*locks, l)
	if err := r.sameMachine(ctx, ep, j, st.Host); err != nil {
		return 0, err
	}
	v, err := qdisc.RestoreJournaled(ctx, ep, st, j.AppliedOf(st.Host, st.Dev), r.force)
	if err == nil {
		r.removeMark(ctx, ep, j, st.Host, st.Dev)
	}
	return v, err
}

// sysctls puts back the sysctls the journal found on host.
func (r *recovery) sysctls(ctx context.Context, hosts *journalHosts, host string) (qdisc.SysctlOutcome, error) {
	ep, err := hosts.get(ctx, host)
	if err != nil {
		return qdisc.SysctlOutcome{}, err
	}
	j := hosts.j
	if err := r.sameMachine(ctx, ep, j, host); err != nil {
		return qdisc.SysctlOutcome{}, err
	}
	out, err := qdisc.RestoreSysctlsJournaled(ctx, ep, host, j.Sysctls, j.SysctlsApplied, r.force)
	if err == nil {
		r.removeMark(ctx, ep, j, host, "")
	}
	return out, err
}

// removeMark removes the host's mark of a device (or, dev "", of its sysctls) once it
// is settled; one left would only ask for a restore that finds nothing to do.
func (r *recovery) removeMark(ctx context.Context, ep *endpoint, j *qdisc.Journal, host, dev string) {
	id := j.Identities[host].ID
	if id == "" {
		return
	}
	if err := qdisc.RemoveMark(ctx, ep, host, qdisc.MarkPath(r.o.markDir(), id, dev), j.Path()); err != nil {
		r.o.logf("warning: %v", err)
	}
}

// sameMachine refuses a host that is not the one the journal recorded (unless
// forced): an address can name another machine, or a new lab namespace, by now.
func (r *recovery) sameMachine(ctx context.Context, ep *endpoint, j *qdisc.Journal, host string) error {
	want := j.Identities[host].ID
	if want == "" || r.force {
		return nil
	}
	got := ""
	if ep.hello != nil {
		got = ep.hello.Identity
	}
	if got == "" {
		var err error
		if got, err = qdisc.HostIdentity(ctx, ep); err != nil {
			return nil // one that cannot say is taken at its address, as before identities
		}
	}
	if got == want {
		return nil
	}
	return fmt.Errorf("host %s: %w: it is %q now, and was %q when journal %s was written: another machine (or network namespace) is at its address, whose devices are not that run's to undo, so bloatbench leaves it alone (--force to restore all the same; rm %s to drop the journal)",
		host, qdisc.ErrChangedSince, got, want, j.Path(), j.Path())
}
