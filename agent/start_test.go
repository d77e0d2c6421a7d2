package agent

import (
	"context"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/runners"
)

// A ping job given a start time answers at once, saying where its times come from,
// and sends its first probe at that time, not before.
func TestPingStartsAtItsStartTime(t *testing.T) {
	needPing(t)
	rec := newRecorder()
	c, stop := pipeAgent(t, "client", rec)
	defer stop()
	start := time.Now().Add(400 * time.Millisecond)
	asked := time.Now()
	m, err := c.Call(context.Background(), startReq("ping", runners.JobSpec{Kind: "ping", Target: "127.0.0.1", Step: 0.05, Duration: 0.5,
		Start: datafile.Unix(start)}, ""))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(asked); took > 200*time.Millisecond {
		t.Errorf("the start was answered after %v, not at once", took)
	}
	if m.Timestamps == "" || m.Message == "" {
		t.Errorf("reply %+v says nothing of its timestamps", m)
	}
	select {
	case <-rec.doneCh:
	case <-time.After(5 * time.Second):
		t.Fatal("ping did not end")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	ss := rec.samples["Ping (ms) ICMP"]
	if len(ss) != 10 {
		t.Fatalf("%d samples for 10 probes", len(ss))
	}
	first := ss[0].T - ss[0].V/1e3
	if d := first - datafile.Unix(start); d < -0.001 || d > 0.05 {
		t.Errorf("first probe sent %.4f s from its start time", d)
	}
}

// A host with no ICMP socket fails the job's start, not later.
func TestPingBadTargetFailsTheStart(t *testing.T) {
	c, stop := pipeAgent(t, "client", newRecorder())
	defer stop()
	if _, err := c.Call(context.Background(), startReq("ping", runners.JobSpec{Kind: "ping", Target: "server", Step: 0.05, Duration: 0.5}, "")); err == nil {
		t.Fatal("a ping to a name, not an address, started")
	}
	if _, err := c.Call(context.Background(), Request{Op: OpStart, Job: "ping"}); err == nil {
		t.Fatal("a start without a spec started")
	}
}
