// Package controller runs one test: it connects to the endpoints, starts their
// agents, drives the runners on the plan's schedule and records every sample into a
// data file as it arrives. It reports nothing itself: the report package reads the file.
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/report"
)

// Run runs one test in its own session: Connect, Session.Run, Close.
func Run(ctx context.Context, o Options) (string, error) {
	if err := o.Check(); err != nil {
		return "", err
	}
	s, err := Connect(ctx, o)
	if err != nil {
		return "", err
	}
	defer s.Close()
	return s.Run(ctx, o)
}

// Run runs the test on the session's hosts and returns the data file's path. o's
// Inventory, Dialer and Self are the session's; the rest is this run's. The file is
// kept whatever happens once it exists; a run that fails is recorded as incomplete
// with its error.
func (s *Session) Run(ctx context.Context, o Options) (path string, err error) {
	if err := o.Check(); err != nil {
		return "", err
	}
	if err := o.Plan.CheckSetup(o.Setup, qdisc.PathHasL4S(o.Setup, o.Inventory)); err != nil {
		return "", err
	}
	// The sysctls the test's flows need (tcp_ecn for ecn:) are set as the
	// setup's, snapshot and restored with them.
	if o.Setup, err = o.Plan.SetupFor(o.Setup); err != nil {
		return "", err
	}
	if o.Plan, err = o.withSchedule(); err != nil {
		return "", err
	}
	if err := s.revive(ctx); err != nil {
		return "", err
	}
	eps := s.eps
	s.runs++
	// Agents only send samples once jobs start, after the file exists. Every job's end
	// fits in done (each job on at most every host).
	rec := newRecorder(fmt.Sprintf("run%d/", s.runs), (len(o.Plan.Jobs)+1)*(len(eps)+len(o.Inventory.PairsOf())), o.Progress)
	for _, ep := range eps {
		ep.fwd.set(rec)
	}
	defer func() {
		for _, ep := range eps {
			ep.fwd.set(nil)
		}
	}()
	if err := s.syncClocks(ctx); err != nil {
		return "", err
	}
	jobs := &jobSet{rec: rec}
	prepared := o.startPrepare(ctx, eps, jobs)
	// A failure before the jobs start lets go of what was prepared for them (a
	// tracer's programs) before the hosts are restored.
	abandon := func(err error) (string, error) {
		prepared()
		jobs.stopAll(context.WithoutCancel(ctx))
		return "", err
	}
	// The facts and who each host is are asked at once: both only read.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.gatherFacts(ctx)
	}()
	ids := o.identities(ctx, eps)
	wg.Wait()
	unlock, err := o.lockBottlenecks(ctx, eps, ids)
	if err != nil {
		return abandon(err)
	}
	// Deferred first, so it runs after the restore below.
	defer unlock()
	setup, restore, err := o.applySetup(ctx, eps, ids)
	if err != nil {
		return abandon(err)
	}
	defer func() {
		// However the run ended, Ctrl-C included, the bottlenecks go back as found.
		if rerr := restore(); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	start := time.Now()
	w, path, err := datafile.CreateIn(o.OutputDir, o.Plan.Test, o.Title, start)
	if err != nil {
		return abandon(err)
	}
	rec.w = w
	rec.alert = func(host, msg string) { o.logf("warning: %s: %s", host, report.EscapeText(msg)) }
	runErr := o.drive(ctx, eps, w, rec, jobs, setup, prepared)
	// Whatever is still running (the listener, the samplers; everything after Ctrl-C
	// or a failure) is stopped, and its last samples recorded, before the file ends.
	jobs.stopAll(context.WithoutCancel(ctx))
	o.recordStates(context.WithoutCancel(ctx), eps, w, "post")
	rec.summarize()
	o.recordQueueWarnings(context.WithoutCancel(ctx), eps, w)
	if runErr == nil {
		rec.mu.Lock()
		runErr = rec.err
		rec.mu.Unlock()
	}
	if cerr := w.Close(runErr); cerr != nil && runErr == nil {
		runErr = cerr
	}
	return path, runErr
}
