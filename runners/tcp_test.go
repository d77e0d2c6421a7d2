package runners

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// samples collects what a runner emits.
type samples struct {
	mu sync.Mutex
	m  map[string][]datafile.Sample
}

func (s *samples) emit(series string, smp datafile.Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]datafile.Sample{}
	}
	s.m[series] = append(s.m[series], smp)
}

func TestSamplerIntervals(t *testing.T) {
	var got samples
	s := newSampler(got.emit)
	t0 := time.Unix(1000, 0)
	a := s.start("a", t0)
	b := s.start("b", t0.Add(100*time.Millisecond))
	a.add(1_000_000)
	b.add(500)
	s.tick(t0.Add(200 * time.Millisecond))
	a.add(250_000)
	s.stop(a, t0.Add(300*time.Millisecond))
	s.stop(a, t0.Add(400*time.Millisecond)) // stopped once only
	s.tick(t0.Add(300 * time.Millisecond))  // b's second sample
	s.tick(t0.Add(300 * time.Millisecond))  // an empty interval: nothing

	want := map[string][]datafile.Sample{
		"a": {
			{T: 1000.2, Dur: 0.2, Bytes: 1_000_000, V: 40},
			{T: 1000.3, Dur: 0.1, Bytes: 250_000, V: 20},
		},
		"b": {
			{T: 1000.2, Dur: 0.1, Bytes: 500, V: 0.04},
			{T: 1000.3, Dur: 0.1, Bytes: 0, V: 0},
		},
	}
	for series, ws := range want {
		gs := got.m[series]
		if len(gs) != len(ws) {
			t.Fatalf("%s: %d samples %+v, want %d", series, len(gs), gs, len(ws))
		}
		for i := range ws {
			g, w := gs[i], ws[i]
			if !near(g.T, w.T) || !near(g.Dur, w.Dur) || g.Bytes != w.Bytes || !near(g.V, w.V) {
				t.Errorf("%s[%d] = %+v, want %+v", series, i, g, w)
			}
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// TestStreamsOverLoopback runs both directions through the real sockets: the bytes
// sent with sendfile arrive and are counted by the MSG_TRUNC receiver, on both
// sides, and every stream ends without an error when its time is up.
func TestStreamsOverLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got samples
	l, err := Listen(ctx, ListenSpec{Addr: "127.0.0.1", Token: "tok", Step: 0.05}, got.emit)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve(ctx) }()
	flows := []StreamFlow{
		{Name: "TCP download::1", Direction: "download"},
		{Name: "TCP download::2", Direction: "download"},
		{Name: "TCP upload::1", Direction: "upload"},
	}
	spec := StreamsSpec{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port())), Token: "tok", Step: 0.05,
		Duration: 0.3, Flows: flows}
	if err := RunStreams(ctx, spec, got.emit); err != nil {
		t.Fatal(err)
	}
	// The upload's receiver is the listener: it takes its last sample when the
	// client's half-close arrives, which may come after RunStreams returns.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got.mu.Lock()
		n := len(got.m)
		got.mu.Unlock()
		if n == len(flows) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	for _, f := range flows {
		var bytes int64
		for _, s := range got.m[f.Name] {
			if s.Dur <= 0 || s.Bytes < 0 {
				t.Errorf("%s: sample %+v", f.Name, s)
			}
			bytes += s.Bytes
		}
		if bytes == 0 {
			t.Errorf("%s: no bytes counted in %d samples", f.Name, len(got.m[f.Name]))
		}
	}
}

func TestStreamGateOnlyBeyondItsThreshold(t *testing.T) {
	g := newStreamGate(2, 3)
	done := []func(){g.stream(), g.stream(), g.stream()}
	if g.enter() {
		t.Error("3 streams, 2 slots engaged past 3: a slot taken")
	}
	done = append(done, g.stream())
	a, b := g.enter(), g.enter()
	if !a || !b || len(g.slots) != 2 {
		t.Errorf("4 streams and 2 slots: entered %v %v, %d slots taken", a, b, len(g.slots))
	}
	g.leave(a)
	g.leave(b)
	for _, d := range done {
		d()
	}
	if len(g.slots) != 0 || g.active.Load() != 0 || g.enter() {
		t.Errorf("all left: %d slots, %d streams", len(g.slots), g.active.Load())
	}
	// A threshold below the slots is the slots: the gate never engages where
	// every stream would have a slot anyway.
	if h := newStreamGate(4, 1); h.engageAt != 4 {
		t.Errorf("4 slots engaged past 1: engages past %d, want 4", h.engageAt)
	}
	// A job given no gate (tests, a runner outside an agent) is not bounded.
	var none *StreamGate
	defer none.stream()()
	if held := none.enter(); held {
		t.Error("a nil gate took a slot")
	}
}
