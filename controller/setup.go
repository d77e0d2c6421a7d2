package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
	"github.com/bloatbench/bloatbench/runners"
	"github.com/bloatbench/bloatbench/tests"
)

// restoreTimeout bounds putting the hosts back; it runs even after Ctrl-C.
const restoreTimeout = 2 * time.Minute

// ErrNotRestored marks a run after which a host could not be put back as found: no
// further run should touch the hosts until `bloatbench restore` has.
var ErrNotRestored = errors.New("a bottleneck was not put back as it was found")

func endpointOf(eps []*endpoint, host string) *endpoint {
	for _, ep := range eps {
		if ep.host.Name == host {
			return ep
		}
	}
	return nil
}

func (o *Options) journalDir() string {
	if o.JournalDir != "" {
		return o.JournalDir
	}
	return qdisc.JournalDir()
}

// lockedDevs are the devices a run locks: every bottleneck and path device.
func (o *Options) lockedDevs() []inventory.Bottleneck {
	return append(append([]inventory.Bottleneck(nil), o.Inventory.Bottleneck...), o.Inventory.PathDevices...)
}

// lockBottlenecks makes every bottleneck this run's, with a setup or without, from
// before its snapshot until it is put back: another run would measure this one's
// traffic, or take its setup for the state to restore, and a `restore` would pull
// it from under the run. Each device is locked twice, by the address SSH goes to
// and by the host's identity (machine-id and network namespace), so that two
// inventories naming one machine differently (10.0.0.2, router.lab) still meet,
// and a restore of a journal from before identities (keyed by address) too.
// With the devices held, any journal that names one of them is stale: the run is
// refused (checkStale) before it changes anything.
func (o *Options) lockBottlenecks(ctx context.Context, eps []*endpoint, ids map[string]qdisc.HostID) (unlock func(), err error) {
	var locks []*qdisc.DeviceLock
	unlock = func() {
		for _, l := range locks {
			l.Unlock()
		}
		locks = nil
	}
	what := "run of " + o.Plan.Test
	if o.Setup != nil {
		what += " with setup " + o.Setup.Name
	}
	for _, b := range o.lockedDevs() {
		id := ids[b.Host]
		if id.Addr == "" {
			id.Addr = endpointOf(eps, b.Host).conn.addr()
		}
		l, err := qdisc.LockDeviceOf(o.journalDir(), b.Host, id, b.Dev, what)
		if err != nil {
			unlock()
			return func() {}, err
		}
		locks = append(locks, l)
	}
	if err := o.checkStale(ctx, eps, ids); err != nil {
		unlock()
		return func() {}, err
	}
	return unlock, nil
}

// target is a device a run changes, and what it puts there.
type target struct {
	host, dev string
	setup     *qdisc.Setup
	path      bool // path emulation, not the setup under test
}

// targets are the devices a run changes: every bottleneck with the setup, when the
// setup changes them, and every path device with netem (the setup's, else the
// inventory's), with the data file's record of that netem (nil for none). The
// path netem carries the name of the setup that gave it.
func (o *Options) targets() ([]target, *datafile.Path, error) {
	inv := o.Inventory
	var ts []target
	s := o.Setup
	if s != nil && s.TouchesBottleneck() {
		if len(inv.Bottleneck) == 0 {
			return nil, nil, fmt.Errorf("%s: setup %s needs bottleneck: devices in the inventory", inv.Path, s.Name)
		}
		for _, b := range inv.Bottleneck {
			ts = append(ts, target{host: b.Host, dev: b.Dev, setup: s})
		}
	}
	var args, l4s []string
	source := ""
	switch {
	case s != nil && s.Netem != nil:
		if len(inv.PathDevices) == 0 {
			return nil, nil, fmt.Errorf("%s: setup %s sets netem:, and %s lists no path_devices: to put it on (devices off the bottleneck, e.g. path_devices: [{host: server, dev: eth1}])", s.Source, s.Name, inv.Path)
		}
		args, l4s, source = s.Netem, s.NetemL4S, s.Source
	case inv.Netem != nil:
		a, err := qdisc.NetemArgs(inv.Netem, inv.Where("netem"))
		if err == nil {
			l4s, err = qdisc.NetemL4SArgs(inv.Netem, inv.Where("netem"))
		}
		if err != nil {
			return nil, nil, err
		}
		args, source = a, inv.Where("netem")
	}
	var path *datafile.Path
	if args != nil {
		ps := qdisc.PathSetup("path", qdisc.PathTitle(args, l4s), source, args, l4s)
		for _, p := range inv.PathDevices {
			ts = append(ts, target{host: p.Host, dev: p.Dev, setup: ps, path: true})
		}
		path = &datafile.Path{Netem: strings.Join(args, " "), L4S: strings.Join(l4s, " ")}
	}
	return ts, path, nil
}

// withSchedule is the plan with the setup's rate schedule as a job on every
// bottleneck host (runners' rate-schedule), or the plan as it is when the setup
// has none. The plan is the test's, shared by the runs of every setup: it is
// copied, not changed.
func (o *Options) withSchedule() (*tests.Plan, error) {
	if o.Setup == nil || len(o.Setup.RateSchedule) == 0 {
		return o.Plan, nil
	}
	raw, err := runners.RateScheduleJob(o.Setup)
	if err != nil {
		return nil, fmt.Errorf("setup %s: %w", o.Setup.Name, err)
	}
	for _, j := range o.Plan.Jobs {
		if j.Name == rateScheduleJob {
			return nil, fmt.Errorf("test %s: a job is named %s, the name of the setup's rate schedule: rename it", o.Plan.Test, j.Name)
		}
	}
	p := *o.Plan
	p.Jobs = append(slices.Clip(p.Jobs), tests.Job{Name: rateScheduleJob, Kind: "rate-schedule", Host: tests.RoleBottleneck, Params: raw, Background: true})
	return &p, nil
}

// rateScheduleJob names the schedule's job: "@" is no test job's (a sampler's
// from the command line has it too).
const rateScheduleJob = "rate-schedule@setup"

// sampledDevs are the devices whose qdiscs a run samples each step: the
// bottlenecks and the IFBs the setup shapes their ingress on.
func (o *Options) sampledDevs() []inventory.Bottleneck {
	devs := append([]inventory.Bottleneck(nil), o.Inventory.Bottleneck...)
	if o.Setup != nil && o.Setup.Ingress != nil {
		for _, b := range o.Inventory.Bottleneck {
			devs = append(devs, inventory.Bottleneck{Host: b.Host, Dev: qdisc.IFBName(b.Dev)})
		}
	}
	return devs
}

// recordedDevs are those whose tc statistics go into the data file before and
// after the run: the sampled ones, and the path devices when the run puts netem
// there (sampling those each step would cost the endpoints CPU that the streams
// need, for counters that only say what netem was asked to do).
func (o *Options) recordedDevs() []inventory.Bottleneck {
	devs := o.sampledDevs()
	if o.Setup != nil && o.Setup.Netem != nil || o.Inventory.Netem != nil {
		devs = append(devs, o.Inventory.PathDevices...)
	}
	return devs
}

// applied is what applySetup did, for the data file.
type applied struct {
	setup *datafile.Setup
	path  *datafile.Path
	// warnings are what applying it warned of, for the data file's events.
	warnings []datafile.Event
}

// applySetup snapshots every device the run changes, writes the journal, applies
// the setup (and the path emulation) and reads it back. It returns the record for
// the data file and the function that puts everything back (a no-op when the run
// changes nothing). If applying fails, what was done is undone before it returns.
func (o *Options) applySetup(ctx context.Context, eps []*endpoint, ids map[string]qdisc.HostID) (applied, func() error, error) {
	noop := func() error { return nil }
	ts, netem, err := o.targets()
	sysctls := o.Setup != nil && len(o.Setup.Sysctls) > 0
	if err != nil || len(ts) == 0 && !sysctls {
		return applied{}, noop, err
	}
	name := "path"
	if o.Setup != nil {
		name = o.Setup.Name
	}
	dir := o.journalDir()
	j := qdisc.NewJournal(name, o.Inventory.Path)
	// Read only: every host's devices at once (see byHost).
	sts, errs := make([]*qdisc.State, len(ts)), make([]error, len(ts))
	byHost(len(ts), func(i int) string { return ts[i].host }, func(i int) {
		sts[i], errs[i] = qdisc.Snapshot(ctx, endpointOf(eps, ts[i].host), ts[i].host, ts[i].dev)
		if errs[i] == nil {
			errs[i] = sts[i].CheckRestorable()
		}
	})
	for i, t := range ts {
		if errs[i] != nil {
			return applied{}, noop, errs[i]
		}
		j.States = append(j.States, sts[i])
		j.Hosts[t.host] = endpointOf(eps, t.host).host
		j.Identities[t.host] = ids[t.host]
	}
	if sysctls {
		// On every host of the run: the endpoints' TCP (tcp_ecn, the congestion
		// control) as much as the bottlenecks'.
		for _, ep := range eps {
			sv, err := o.Setup.SnapshotSysctls(ctx, ep, ep.host.Name)
			if err != nil {
				return applied{}, noop, err
			}
			j.Sysctls = append(j.Sysctls, sv...)
			// What the run sets goes in before it is set: a sysctl that does not have
			// it yet still has the value found, and restore tells the two apart.
			j.SysctlsApplied = append(j.SysctlsApplied, o.Setup.AppliedSysctls(ep.host.Name)...)
			j.Hosts[ep.host.Name] = ep.host
			j.Identities[ep.host.Name] = ids[ep.host.Name]
		}
	}
	if err := j.Save(dir); err != nil {
		return applied{}, noop, err
	}
	o.writeMarks(ctx, eps, j)
	restore := func() error { return o.restore(ctx, eps, j) }
	var rec applied
	if s := o.Setup; s != nil {
		rec.setup = &datafile.Setup{Name: s.Name, Title: s.Title, Source: s.Source}
	}
	rec.path = netem
	if sysctls {
		for _, ep := range eps {
			done, refused, err := o.Setup.ApplySysctls(ctx, ep, ep.host.Name)
			for _, msg := range refused {
				o.logf("warning: %s", msg)
				rec.warnings = append(rec.warnings, datafile.Event{Host: ep.host.Name, Level: "warning", Message: msg})
			}
			if err != nil {
				if rerr := restore(); rerr != nil {
					err = errors.Join(err, rerr)
				}
				return applied{}, noop, err
			}
			rec.setup.Devices = append(rec.setup.Devices, datafile.SetupDevice{Host: ep.host.Name, Commands: done})
			if len(refused) > 0 {
				o.logf("setup %s: sysctls set on %s, %d refused", name, ep.host.Name, len(refused))
			} else {
				o.logf("setup %s: sysctls set on %s", name, ep.host.Name)
			}
		}
	}
	for i, st := range j.States {
		t := ts[i]
		done, now, err := qdisc.Apply(ctx, endpointOf(eps, st.Host), t.setup, st)
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("run interrupted while applying setup %s: %w", name, err)
		}
		if err != nil {
			if rerr := restore(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return applied{}, noop, err
		}
		// What the run left the device as, for a restore after a crash: it puts the
		// device back only while it is still so, and leaves one changed since. The
		// rate schedule's steps change it as the run goes, and are the run's own.
		left := now
		if !t.path && len(t.setup.RateSchedule) > 0 {
			c := *now
			for _, st := range t.setup.RateSchedule {
				c.ShaperRates = append(c.ShaperRates, st.Rate)
			}
			left = &c
		}
		j.SetApplied(left)
		if err := j.Save(dir); err != nil {
			if rerr := restore(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return applied{}, noop, err
		}
		readBack, _ := json.Marshal(now)
		d := datafile.SetupDevice{Host: st.Host, Dev: st.Dev, Commands: done, ReadBack: readBack}
		if t.path {
			rec.path.Devices = append(rec.path.Devices, d)
			o.logf("path emulation (netem %s) applied on %s:%s", rec.path.Netem, st.Host, st.Dev)
		} else {
			rec.setup.Devices = append(rec.setup.Devices, d)
			o.logf("setup %s applied on %s:%s", name, st.Host, st.Dev)
		}
	}
	return rec, restore, nil
}

func (o *Options) restore(ctx context.Context, eps []*endpoint, j *qdisc.Journal) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	var errs []error
	reach := func(ep *endpoint) error {
		// A frozen host is named at once; the others are restored all the same.
		err := ep.alive(ctx)
		if err != nil {
			// The agent died or stopped answering: a new connection and agent may
			// still reach the host (a hung session is not a hung host).
			o.logf("%v; connecting again to restore it", err)
			ep.close()
			err = o.connect(ctx, ep)
		}
		return err
	}
	// Every host's devices at once, each host's in the journal's order, and an
	// error each in that order. A host that cannot be reached fails its first
	// device; its others are tried again after it, as before.
	stErrs := make([]error, len(j.States))
	byHost(len(j.States), func(i int) string { return j.States[i].Host }, func(i int) {
		st := j.States[i]
		ep := endpointOf(eps, st.Host)
		err := reach(ep)
		if err == nil {
			err = qdisc.Restore(ctx, ep, st)
		}
		stErrs[i] = err
	})
	for _, err := range stErrs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Sysctls after the devices: a host's default_qdisc is back before anything
	// could make a device again.
	done := map[string]bool{}
	for _, sv := range j.Sysctls {
		if done[sv.Host] {
			continue
		}
		done[sv.Host] = true
		ep := endpointOf(eps, sv.Host)
		err := reach(ep)
		if err == nil {
			err = qdisc.RestoreSysctls(ctx, ep, sv.Host, j.Sysctls)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w; the state to put back is in %s: fix the cause, then run bloatbench restore --journal %s", ErrNotRestored, err, j.Path(), j.Path())
	}
	if err := j.Remove(); err != nil {
		return err
	}
	// After the journal: a mark left by a failure here names a journal that is gone,
	// which later runs from this controller pass over; the other order could leave
	// a journal that no host's mark points to.
	o.removeMarks(ctx, eps, j)
	return nil
}

// byHost calls f(i) for i from 0 to n-1: in order for the i of one host (host(i)),
// the hosts at once, and returns when every call has. A run's snapshots and
// restores are a process or three a device on each host, each waited on over
// the agent's round trip: one host after another they were a run's fixed cost
// twice over, 0.1-0.2 s a device on the local lab and seconds in emulated guests
// (a path on both endpoints and the router's two devices).
func byHost(n int, host func(i int) string, f func(i int)) {
	var hosts []string
	of := map[string][]int{}
	for i := range n {
		h := host(i)
		if _, ok := of[h]; !ok {
			hosts = append(hosts, h)
		}
		of[h] = append(of[h], i)
	}
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range of[h] {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// recordStates writes the tc statistics of recordedDevs into the data file.
func (o *Options) recordStates(ctx context.Context, eps []*endpoint, w *datafile.Writer, phase string) {
	writeStates(w, o.readStates(ctx, eps, phase))
}

// devStates are the tc statistics of the recorded devices at one moment, and the
// warnings for those that could not be read.
type devStates struct {
	states []datafile.State
	events []datafile.Event
}

// readStates reads the tc statistics of recordedDevs, one command each, every
// host's at once (each is a run's fixed cost); they are recorded in recordedDevs'
// order.
func (o *Options) readStates(ctx context.Context, eps []*endpoint, phase string) devStates {
	devs := o.recordedDevs()
	type read struct {
		state datafile.State
		err   error
	}
	reads := make([]read, len(devs))
	var wg sync.WaitGroup
	for _, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, b := range devs {
				if endpointOf(eps, b.Host) != ep {
					continue
				}
				err := ep.alive(ctx)
				var out []byte
				if err == nil {
					out, err = ep.Output(ctx, remote.Command("tc", "-s", "-j", "qdisc", "show", "dev", b.Dev), nil)
				}
				if err == nil && !json.Valid(out) {
					err = fmt.Errorf("tc -s -j printed no JSON: %.200q", out)
				}
				reads[i] = read{datafile.State{Phase: phase, T: datafile.Unix(time.Now()), Host: b.Host, Dev: b.Dev, TC: out}, err}
			}
		}()
	}
	wg.Wait()
	var d devStates
	for i, r := range reads {
		if r.err != nil {
			d.events = append(d.events, datafile.Event{T: r.state.T, Host: devs[i].Host, Level: "warning",
				Message: fmt.Sprintf("tc statistics of %s %s the run: %v", devs[i].Dev, map[string]string{"pre": "before", "post": "after"}[phase], r.err)})
			continue
		}
		d.states = append(d.states, r.state)
	}
	return d
}

func writeStates(w *datafile.Writer, d devStates) {
	for _, e := range d.events {
		w.Event(e)
	}
	for _, st := range d.states {
		w.State(st)
	}
}
