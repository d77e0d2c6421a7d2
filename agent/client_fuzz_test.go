package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// fuzzHandler keeps what the client hands on.
type fuzzHandler struct {
	mu      sync.Mutex
	samples []datafile.Sample
	errs    []error
	hosts   []string
	bad     []string
}

func (h *fuzzHandler) Samples(host string, batch map[string][]datafile.Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hosts = append(h.hosts, host)
	for _, ss := range batch {
		h.samples = append(h.samples, ss...)
	}
}

func (h *fuzzHandler) JobDone(host, job string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hosts = append(h.hosts, host)
	if err != nil {
		h.errs = append(h.errs, err)
	}
}

func (h *fuzzHandler) Series(host, job string, s datafile.Series) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hosts = append(h.hosts, host)
	if s.Name == "" || len(s.Name) > maxSeriesName {
		h.bad = append(h.bad, fmt.Sprintf("a series named %q", s.Name))
	}
}

func (h *fuzzHandler) Log(host, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hosts = append(h.hosts, host)
}

func (h *fuzzHandler) Alert(host, msg string) { h.Log(host, msg) }

// gate blocks a reader until open is closed, then ends: the client reads the wire
// only once the request under test is waiting for its reply.
type gate struct{ open chan struct{} }

func (g gate) Read([]byte) (int, error) { <-g.open; return 0, io.EOF }

// signalWriter closes sent at the first request written.
type signalWriter struct {
	once sync.Once
	sent chan struct{}
}

func (w *signalWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.sent) })
	return len(b), nil
}

const fuzzHost = "fuzzhost"

// FuzzClient feeds the controller's agent client what an agent (a remote host, so
// untrusted: a broken build, a garbled line, a hostile host) might send, while a
// hello, clock or exec request waits for its reply. Whatever the bytes: no panic;
// the request returns, with an error naming the host or a well-formed answer; the
// client ends with an error naming the host; and every sample it hands on is one a
// data file reader accepts (else the run's file would be unreadable).
func FuzzClient(f *testing.F) {
	lines := func(ms ...Message) []byte {
		var b bytes.Buffer
		for _, m := range ms {
			j, _ := json.Marshal(m)
			b.Write(append(j, '\n'))
		}
		return b.Bytes()
	}
	batch := map[string][]datafile.Sample{"TCP download::1": {{T: 1764441125.2, V: 94.1, Dur: 0.2, Bytes: 2352500}},
		"Ping (ms) ICMP": {{T: 1764441125.21, V: 14.2, Seq: 3}, {T: 1764441125.4, Seq: 4, Lost: true}}}
	for op := uint8(0); op < 3; op++ {
		f.Add(op, lines(Message{Type: TypeReply, ID: 1, Hello: &Hello{Protocol: ProtocolVersion, Version: "v1", Hostname: "h", Kernel: "6.18", PID: 42}}))
		f.Add(op, lines(Message{Type: TypeReply, ID: 1, Clock: 1764441125123456789}))
		f.Add(op, lines(Message{Type: TypeReply, ID: 1, Exec: &ExecResult{Stdout: []byte("ok\n"), Exit: 0}}))
		f.Add(op, lines(Message{Type: TypeReply, ID: 1, Exec: &ExecResult{Stderr: []byte("no"), Exit: 2}}))
		f.Add(op, lines(Message{Type: TypeBatch, Job: "streams", Batch: batch}, Message{Type: TypeLog, Message: "slow"},
			Message{Type: TypeDone, Job: "streams", Error: "exit"}, Message{Type: TypeReply, ID: 1, Error: "busy"}))
		f.Add(op, lines(Message{Type: TypeSeries, Job: "qdisc", Series: &datafile.Series{Name: "qdisc h:eth0 root drops", Kind: "qdisc"}},
			Message{Type: TypeSeries, Job: "qdisc", Series: &datafile.Series{}}))
	}
	f.Fuzz(func(t *testing.T, op uint8, wire []byte) {
		h := &fuzzHandler{}
		w := &signalWriter{sent: make(chan struct{})}
		c := NewClient(fuzzHost, io.MultiReader(gate{w.sent}, bytes.NewReader(wire)), w, h)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		switch op % 3 {
		case 0:
			var hello *Hello
			hello, err = c.Hello(ctx)
			if err == nil && (hello == nil || hello.Protocol != ProtocolVersion) {
				t.Fatalf("hello accepted: %+v", hello)
			}
		case 1:
			_, _, err = c.SyncClock(ctx, 1)
		case 2:
			_, err = c.Output(ctx, "true", nil, 0)
		}
		if ctx.Err() != nil {
			t.Fatal("the request did not return when the agent's output ended")
		}
		if err != nil && !strings.Contains(err.Error(), fuzzHost) {
			t.Fatalf("error does not name the host: %v", err)
		}
		select {
		case <-c.Dead():
		case <-ctx.Done():
			t.Fatal("the client did not end with the agent's output")
		}
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), fuzzHost) {
			t.Fatalf("ended without an error naming the host: %v", err)
		}
		if _, err := c.Call(ctx, Request{Op: OpClock}); err == nil {
			t.Fatal("a call to an agent that ended did not fail")
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.bad) > 0 {
			t.Fatalf("handed on %v", h.bad)
		}
		for _, s := range h.samples {
			if err := datafile.CheckSample("sample", s); err != nil {
				t.Fatalf("handed on: %v", err)
			}
		}
		for _, host := range h.hosts {
			if host != fuzzHost {
				t.Fatalf("handed on as host %q", host)
			}
		}
		for _, e := range h.errs {
			if !strings.Contains(e.Error(), fuzzHost) {
				t.Fatalf("job error does not name the host: %v", e)
			}
		}
	})
}
