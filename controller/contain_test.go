package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/remote"
)

// inject sends messages to the controller as if the agent had: a hostile host's
// agent, which may send anything. Each line is one pipe write, which io.Pipe keeps
// whole beside the relay's.
func (a *fakeAgent) inject(t *testing.T, ms ...agent.Message) {
	for _, m := range ms {
		line, err := json.Marshal(m)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := a.msgW.Write(append(line, '\n')); err != nil {
			t.Errorf("inject into the agent on %s: %v", a.conn.name, err)
			return
		}
	}
}

// containPlan is a download without ping, so that its series are the same
// wherever the test runs: the streams' on the client, none planned on the server.
const containPlan = `name: contain
jobs:
  - {name: listen, kind: tcp-listen, host: server, target: server}
  - name: streams
    kind: tcp-streams
    host: client
    connect: listen
    start: delay
    duration: length
    params: {flows: [{direction: download, count: 1}]}
`

const (
	clientLabel = "client (tester@client.invalid)"
	serverLabel = "server (tester@server.invalid)"
	stream      = "TCP download::1"
)

func declaration(job, name string) agent.Message {
	return agent.Message{Type: agent.TypeSeries, Job: job, Series: &datafile.Series{Name: name, Kind: datafile.KindQdisc, Units: "packets"}}
}

func batchOf(name string, v float64, n int) agent.Message {
	// Now: the fake hosts' clocks are the controller's, and the run keeps only
	// samples within its time.
	ss := make([]datafile.Sample, n)
	for i := range ss {
		ss[i] = datafile.Sample{T: datafile.Unix(time.Now()), V: v}
	}
	return agent.Message{Type: agent.TypeBatch, Batch: map[string][]datafile.Sample{name: ss}}
}

// warningsOf are the warnings the file has about host that contain substr.
func warningsOf(run *datafile.Run, host, substr string) []string {
	var out []string
	for _, e := range run.Events {
		if e.Host == host && e.Level == "warning" && strings.Contains(e.Message, substr) {
			out = append(out, e.Message)
		}
	}
	return out
}

// A hostile host is contained: it cannot record into another host's series nor
// declare series for jobs it does not run, a series found as a job runs is its
// host's alone, and what a host floods the controller with is cut at the bounds.
// Each refusal kind is warned of once a host, counted at the end, and the run
// completes with every host's own data.
func TestHostileHostContained(t *testing.T) {
	const prefix = "run1/" // the session's first run
	cases := []struct {
		name string
		// server and client are what the hosts' agents send once the streams run.
		server, client func() []agent.Message
		check          func(t *testing.T, run *datafile.Run)
	}{
		{
			name: "another host's series",
			server: func() []agent.Message {
				return []agent.Message{
					declaration(prefix+"listen", stream),
					batchOf(stream, 12345, 3),
					// A job of the client's, and a job of no run.
					declaration(prefix+"streams", "forged"),
					declaration("run1/nosuchjob", "forged too"),
					batchOf("forged", 1, 1),
					// Ends of the client's job: were they taken, the run would
					// end early, or fail.
					{Type: agent.TypeDone, Job: prefix + "streams", Error: "forged end"},
					{Type: agent.TypeDone, Job: prefix + "streams"},
				}
			},
			// The client's own declaration of its planned series is no refusal.
			client: func() []agent.Message { return []agent.Message{declaration(prefix+"streams", stream)} },
			check: func(t *testing.T, run *datafile.Run) {
				for _, smp := range run.Samples[stream] {
					if smp.V == 12345 {
						t.Fatalf("the server's forged samples are in the client's series %q", stream)
					}
				}
				if len(run.Samples[stream]) == 0 {
					t.Errorf("the client's own samples of %q are missing", stream)
				}
				for _, se := range run.Series {
					if strings.HasPrefix(se.Name, "forged") {
						t.Errorf("a forged series was declared: %+v", se)
					}
				}
				if w := warningsOf(run, serverLabel, "was refused"); len(w) != 1 || !strings.Contains(w[0], `"`+stream+`"`) {
					t.Errorf("warnings of refused declarations: %q, want one naming %q", w, stream)
				}
				if w := warningsOf(run, serverLabel, "another host's, were dropped"); len(w) != 1 {
					t.Errorf("warnings of refused samples: %q, want one", w)
				}
				if w := warningsOf(run, serverLabel, "refused from the host in this run"); len(w) != 1 ||
					!strings.Contains(w[0], "3 declarations of other hosts' series") || !strings.Contains(w[0], "3 samples of other hosts' series") ||
					!strings.Contains(w[0], "1 samples of series no job") {
					t.Errorf("the server's final count: %q", w)
				}
				if w := warningsOf(run, clientLabel, ""); len(w) != 0 {
					t.Errorf("warnings about the client, which sent nothing amiss: %q", w)
				}
			},
		},
		{
			name: "a found series is its declaring host's",
			server: func() []agent.Message {
				return []agent.Message{declaration(prefix+"listen", "qdisc server:eth0 drops"), batchOf("qdisc server:eth0 drops", 1, 2)}
			},
			client: func() []agent.Message {
				// After the server's: the client's injection waits for it.
				return []agent.Message{declaration(prefix+"streams", "qdisc server:eth0 drops"), batchOf("qdisc server:eth0 drops", 2, 2)}
			},
			check: func(t *testing.T, run *datafile.Run) {
				ss := run.Samples["qdisc server:eth0 drops"]
				if len(ss) != 2 || ss[0].V != 1 || ss[1].V != 1 {
					t.Errorf("samples of the server's series: %+v, want the server's two", ss)
				}
				if w := warningsOf(run, clientLabel, "another host's"); len(w) != 2 {
					t.Errorf("warnings about the client's declaration and samples: %q", w)
				}
				if w := warningsOf(run, serverLabel, ""); len(w) != 0 {
					t.Errorf("warnings about the server, which sent nothing amiss: %q", w)
				}
			},
		},
		{
			name: "an event flood",
			server: func() []agent.Message {
				ms := make([]agent.Message, maxHostEvents+500)
				for i := range ms {
					ms[i] = agent.Message{Type: agent.TypeLog, Message: fmt.Sprintf("flood %d %s", i, strings.Repeat("x", 100))}
				}
				// One message far past what an event holds.
				ms[0].Message = strings.Repeat("y", 2*datafile.MaxText)
				return ms
			},
			check: func(t *testing.T, run *datafile.Run) {
				kept := warningsOf(run, serverLabel, "flood ")
				if len(kept)+1 != maxHostEvents {
					t.Errorf("%d of the flood's events kept, want %d", len(kept)+1, maxHostEvents)
				}
				if long := warningsOf(run, serverLabel, "yyyy"); len(long) != 1 || len(long[0]) > datafile.MaxText+100 {
					t.Errorf("the long event: %d kept, want one cut to %d bytes", len(long), datafile.MaxText)
				}
				if w := warningsOf(run, serverLabel, "logged more than"); len(w) != 1 {
					t.Errorf("warnings of the bound: %q, want one", w)
				}
				if w := warningsOf(run, serverLabel, "refused from the host"); len(w) != 1 || !strings.Contains(w[0], "500 events past the bound") {
					t.Errorf("the server's final count: %q", w)
				}
			},
		},
		{
			name: "a series flood",
			server: func() []agent.Message {
				ms := make([]agent.Message, 0, 2*datafile.MaxSeries+200)
				for i := range datafile.MaxSeries + 100 {
					name := fmt.Sprintf("qdisc server:eth%d drops", i)
					ms = append(ms, declaration(prefix+"listen", name))
				}
				return append(ms, batchOf("qdisc server:eth0 drops", 7, 1))
			},
			check: func(t *testing.T, run *datafile.Run) {
				if run.Incomplete {
					t.Errorf("the file is incomplete: %s", run.Error)
				}
				if len(run.Series) != datafile.MaxSeries {
					t.Errorf("%d series in the file, want the bound, %d", len(run.Series), datafile.MaxSeries)
				}
				if ss := run.Samples["qdisc server:eth0 drops"]; len(ss) != 1 {
					t.Errorf("the server's first found series has %d samples, want 1", len(ss))
				}
				if len(run.Samples[stream]) == 0 {
					t.Errorf("the client's samples of %q are missing", stream)
				}
				planned := 1
				if _, ok := run.Samples[stream]; ok && slices.ContainsFunc(run.Series, func(se datafile.Series) bool { return se.Of == stream }) {
					// The stream's connection, when its declaration came before
					// the flood filled the file.
					planned++
				}
				over := datafile.MaxSeries + 100 - (datafile.MaxSeries - planned)
				if w := warningsOf(run, serverLabel, "and any later were refused"); len(w) != 1 {
					t.Errorf("warnings of the bound: %q, want one", w)
				}
				if w := warningsOf(run, serverLabel, "refused from the host"); len(w) != 1 || !strings.Contains(w[0], fmt.Sprintf("%d declarations past the bound", over)) {
					t.Errorf("the server's final count: %q, want %d past the bound", w, over)
				}
			},
		},
		{
			name:   "an absurd batch",
			server: func() []agent.Message { return []agent.Message{batchOf(stream, 54321, agent.MaxBatchSamples+1)} },
			check: func(t *testing.T, run *datafile.Run) {
				for _, smp := range run.Samples[stream] {
					if smp.V == 54321 {
						t.Fatal("samples of the absurd batch were recorded")
					}
				}
				if w := warningsOf(run, serverLabel, "dropped unread"); len(w) != 1 {
					t.Errorf("warnings of the batch: %q, want one", w)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hosts := newFakeHosts()
			o, log := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), parsePlan(t, containPlan))
			s := connectFake(t, o)
			injected := make(chan struct{})
			log.on("streams started", func() {
				// In the run's goroutine, which is only waiting for the streams
				// to end: everything is in before the run can end.
				defer close(injected)
				if c.server != nil {
					hosts.agent("server").inject(t, c.server()...)
				}
				if c.client != nil {
					hosts.agent("client").inject(t, c.client()...)
				}
			})
			path, err := s.Run(context.Background(), o)
			if err != nil {
				t.Fatalf("the run failed: %v", err)
			}
			select {
			case <-injected:
			default:
				t.Fatal("the run ended before the streams started")
			}
			run := readRun(t, path)
			if run.Incomplete || run.Error != "" {
				t.Errorf("the run is incomplete: %s", run.Error)
			}
			c.check(t, run)
			s.Close()
			allExited(t, hosts)
		})
	}
}

// A command's output past remote.MaxOutput is kept head and tail, with a marker
// saying how much was left out between; the command runs to its end all the same.
func TestExecOutputBounded(t *testing.T) {
	hosts := newFakeHosts()
	o, _ := fakeRun(t, hosts, testInventory(t, "127.0.0.1"), parsePlan(t, containPlan))
	s := connectFake(t, o)
	cases := []struct {
		name, cmd string
		size      int // bytes the command prints
	}{
		{"small", "echo START; echo END", len("START\nEND\n")},
		{"at the bound", fmt.Sprintf("echo START; head -c %d /dev/zero | tr '\\0' x; echo END", remote.MaxOutput-10), remote.MaxOutput},
		{"past the bound", "echo START; head -c 10000000 /dev/zero | tr '\\0' x; echo END", 10000010},
		{"past the bound on stderr", "echo START; head -c 10000000 /dev/zero >&2; echo END", len("START\nEND\n")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := s.Exec(context.Background(), "client", c.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(out, []byte("START\n")) || !bytes.HasSuffix(out, []byte("END\n")) {
				t.Errorf("the output does not keep its head and tail: %q ... %q", out[:min(len(out), 20)], out[max(0, len(out)-20):])
			}
			marker := fmt.Sprintf("\n[... %d bytes left out]\n", c.size-remote.MaxOutput)
			switch {
			case c.size <= remote.MaxOutput && len(out) != c.size:
				t.Errorf("%d bytes of output, want all %d", len(out), c.size)
			case c.size > remote.MaxOutput && (len(out) != remote.MaxOutput+len(marker) || !bytes.Contains(out, []byte(marker))):
				t.Errorf("%d bytes of output, want %d with the marker %q", len(out), remote.MaxOutput+len(marker), marker)
			}
		})
	}
}
