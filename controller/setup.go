package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
	"github.com/bloatbench/bloatbench/runners"
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

// lockBottlenecks makes every bottleneck this run's, with a setup or without, from
// before its snapshot until it is put back: another run would measure this one's
// traffic, or take its setup for the state to restore, and a `restore` would pull
// it from under the run. The locks are keyed by the address SSH goes to, so two
// inventories naming one machine differently still meet.
func (o *Options) lockBottlenecks(eps []*endpoint) (unlock func(), err error) {
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
	for _, b := range o.Inventory.Bottleneck {
		l, err := qdisc.LockDevice(o.journalDir(), b.Host, endpointOf(eps, b.Host).conn.Target.Addr, b.Dev, what)
		if err != nil {
			unlock()
			return func() {}, err
		}
		locks = append(locks, l)
	}
	return unlock, nil
}

// applySetup snapshots every bottleneck, writes the journal, applies the setup and
// reads it back. It returns the record for the data file and the function that
// puts everything back (a no-op without a setup). If applying fails, what was done
// is undone before it returns.
func (o *Options) applySetup(ctx context.Context, eps []*endpoint) (*datafile.Setup, func() error, error) {
	noop := func() error { return nil }
	if o.Setup == nil || len(o.Inventory.Bottleneck) == 0 {
		if o.Setup != nil {
			return nil, noop, fmt.Errorf("%s: setup %s needs bottleneck: devices in the inventory", o.Inventory.Path, o.Setup.Name)
		}
		return nil, noop, nil
	}
	s := o.Setup
	dir := o.journalDir()
	j := qdisc.NewJournal(s.Name, o.Inventory.Path)
	for _, b := range o.Inventory.Bottleneck {
		ep := endpointOf(eps, b.Host)
		st, err := qdisc.Snapshot(ctx, ep, b.Host, b.Dev)
		if err == nil {
			err = st.CheckRestorable()
		}
		if err != nil {
			return nil, noop, err
		}
		j.States = append(j.States, st)
		j.Hosts[b.Host] = ep.host
	}
	if err := j.Save(dir); err != nil {
		return nil, noop, err
	}
	restore := func() error { return o.restore(ctx, eps, j) }
	rec := &datafile.Setup{Name: s.Name, Title: s.Title, Source: s.Source}
	for _, st := range j.States {
		done, now, err := qdisc.Apply(ctx, endpointOf(eps, st.Host), s, st)
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("run interrupted while applying setup %s: %w", s.Name, err)
		}
		if err != nil {
			if rerr := restore(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, noop, err
		}
		readBack, _ := json.Marshal(now)
		rec.Devices = append(rec.Devices, datafile.SetupDevice{Host: st.Host, Dev: st.Dev, Commands: done, ReadBack: readBack})
		o.logf("setup %s applied on %s:%s", s.Name, st.Host, st.Dev)
	}
	return rec, restore, nil
}

func (o *Options) restore(ctx context.Context, eps []*endpoint, j *qdisc.Journal) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	var errs []error
	for _, st := range j.States {
		// A frozen host is named at once; the others are restored all the same.
		ep := endpointOf(eps, st.Host)
		err := ep.alive(ctx)
		if err != nil {
			// The agent died or stopped answering: a new connection and agent may
			// still reach the host (a hung session is not a hung host).
			o.logf("%v; connecting again to restore it", err)
			ep.close()
			err = o.connect(ctx, ep)
		}
		if err == nil {
			err = qdisc.Restore(ctx, ep, st)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w; the state to put back is in %s: fix the cause, then run bloatbench restore --journal %s", ErrNotRestored, err, j.Path(), j.Path())
	}
	return j.Remove()
}

// recordStates writes every bottleneck's tc statistics into the data file.
func (o *Options) recordStates(ctx context.Context, eps []*endpoint, w *datafile.Writer, phase string) {
	for _, b := range o.Inventory.Bottleneck {
		ep := endpointOf(eps, b.Host)
		err := ep.alive(ctx)
		var out []byte
		if err == nil {
			out, err = ep.Output(ctx, remote.Command("tc", "-s", "-j", "qdisc", "show", "dev", b.Dev), nil)
		}
		if err != nil || !json.Valid(out) {
			w.Event(datafile.Event{T: datafile.Unix(time.Now()), Host: b.Host, Level: "warning", Message: fmt.Sprintf("tc statistics %s: %v", phase, err)})
			continue
		}
		w.State(datafile.State{Phase: phase, T: datafile.Unix(time.Now()), Host: b.Host, Dev: b.Dev, TC: out})
	}
}

// startSampling starts a qdisc statistics job on each bottleneck host's agent, from
// t0 on; it runs until the run stops it.
func (o *Options) startSampling(ctx context.Context, eps []*endpoint, jobs *jobSet, step float64, t0 time.Time) error {
	devs := map[string][]string{}
	var hosts []string
	for _, b := range o.Inventory.Bottleneck {
		if devs[b.Host] == nil {
			hosts = append(hosts, b.Host)
		}
		devs[b.Host] = append(devs[b.Host], b.Dev)
	}
	for _, h := range hosts {
		ep := endpointOf(eps, h)
		if _, err := jobs.start(ctx, ep, agent.Request{Op: agent.OpQdisc, Job: "qdisc",
			Qdisc: &runners.QdiscSpec{Host: h, Devs: devs[h], Step: step, Start: agentTime(ep, t0)}}, false); err != nil {
			return err
		}
	}
	return nil
}
