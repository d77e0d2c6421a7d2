package runners

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

func TestUDPScalablePlan(t *testing.T) {
	for _, tc := range []struct {
		params map[string]any
		want   string // the agent's parameters, or "error: " and what the error says
	}{
		{nil, `{"series":"UDP scalable","flows":1,"max_rate":"100000000000","start_rate":"1000000","packet_size":1470,"tos":"1"}`},
		{map[string]any{"series": "L4S", "max_rate": "20M", "start_rate": "2M", "tos": "AF11"},
			`{"series":"L4S","flows":1,"max_rate":"20000000","start_rate":"2000000","packet_size":1470,"tos":"41"}`},
		// A start above the cap starts at the cap.
		{map[string]any{"max_rate": "1M", "start_rate": "5M", "ecn": "ect0", "packet_size": 56},
			`{"series":"UDP scalable","flows":1,"max_rate":"1000000","start_rate":"1000000","packet_size":56,"tos":"2"}`},
		{map[string]any{"packet_size": 55}, "error: at least 56 bytes"},
		{map[string]any{"max_rate": "1k"}, "error: want both at least 117600 bit/s"},
		{map[string]any{"start_rate": "fast"}, "error: start_rate: "},
		{map[string]any{"ecn": "ect2"}, "error: want notect, ect0, ect1 or ce"},
		{map[string]any{"tos": 3, "ecn": "ect1"}, "error: tos 3 sets the ECN field to CE"},
		{map[string]any{"flows": 0}, "error: flows is 0"},
		{map[string]any{"flows": "2", "series": "L"},
			`{"series":"L","flows":2,"max_rate":"100000000000","start_rate":"1000000","packet_size":1470,"tos":"1"}`},
	} {
		raw, series, err := Kinds()["udp-scalable"].Plan(tc.params, NewPlanner())
		if want, ok := strings.CutPrefix(tc.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("plan %v: %v, want an error saying %q", tc.params, err, want)
			}
			continue
		}
		if err != nil || string(raw) != tc.want {
			t.Errorf("plan %v:\n got %s, %v\nwant %s", tc.params, raw, err, tc.want)
			continue
		}
		var names []string
		var p scalableParams
		json.Unmarshal(raw, &p)
		for i, se := range series {
			names = append(names, se.Name+" "+se.Units+" "+se.Host)
			if se.Kind != datafile.KindUDP || se.Flow != 1+i/7 || se.CC != "scalable" || se.Direction != Upload {
				t.Errorf("plan %v: series %+v", tc.params, se)
			}
		}
		var want []string
		for _, base := range (scalableConfig{series: p.Series, flows: int(*p.Flows)}).names() {
			want = append(want, base+" Mbits/s @peer", base+" sent Mbits/s ", base+" loss % @peer", base+" tx pps packets/s ",
				base+" rx pps packets/s @peer", base+" RTT ms ", base+" CE fraction % ")
		}
		if p.Flows != nil && *p.Flows == 2 && !strings.HasPrefix(want[7], "L::2 ") {
			t.Errorf("two flows' names %q", want)
		}
		if strings.Join(names, "|") != strings.Join(want, "|") {
			t.Errorf("plan %v: series\n%q\nwant\n%q", tc.params, names, want)
		}
	}
	// A flood and a scalable flow of one name would share series.
	pl := NewPlanner()
	if _, _, err := Kinds()["udp-flood"].Plan(map[string]any{"series": "X"}, pl); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Kinds()["udp-scalable"].Plan(map[string]any{"series": "X"}, pl); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a scalable flow named as a flood: %v", err)
	}
}

// TestScalableCCRounds drives the control with feedback of known counts, a
// round at a time.
func TestScalableCCRounds(t *testing.T) {
	ms := time.Millisecond
	cfg := scalableConfig{size: 1000, startBps: 1e6, maxBps: 50e6}
	cc := newScalableCC(cfg)
	if cc.rate() != 1e6 || cc.cwnd != 10 {
		t.Fatalf("before a round trip: rate %g, window %g; want the start rate and 10", cc.rate(), cc.cwnd)
	}
	var now time.Duration
	var recv, ce int64
	// round sends n datagrams over a 10 ms round trip: marked of them CE, lost
	// of them never come; the feedback answers them.
	round := func(n, marked, lost int64) {
		sent := now
		for range n {
			if !cc.canSend() {
				t.Fatalf("window %g full at %d in flight", cc.cwnd, cc.sent-cc.maxSeq)
			}
			cc.sent++
		}
		now += 10 * ms
		recv += n - lost
		ce += marked
		cc.feedback(now, now, sent, 0, recv, ce, cc.sent)
	}
	// alpha moves a 1/16 toward each round's marked fraction, from 1.
	alpha := 1.0
	round(10, 0, 0)
	alpha -= alpha / 16
	if cc.cwnd != 20 || !cc.slowStart || cc.srtt != 10*ms {
		t.Fatalf("after a clean round in slow start: window %g, slow start %v, srtt %v; want 20, true, 10ms", cc.cwnd, cc.slowStart, cc.srtt)
	}
	// The pace: 1.25 windows a round trip.
	if want := 1.25 * 8 * 1000 * 20 / 0.01; math.Abs(cc.rate()-want) > 1e-6 {
		t.Fatalf("rate %g, want %g", cc.rate(), want)
	}
	round(20, 0, 0)
	alpha -= alpha / 16
	if cc.canSend() != true || cc.cwnd != 40 || math.Abs(cc.alpha-alpha) > 1e-12 {
		t.Fatalf("two clean rounds: window %g alpha %g, want 40, %g", cc.cwnd, cc.alpha, alpha)
	}
	// Half the datagrams marked: alpha toward 0.5, the window cut by alpha/2 and
	// grown by one, slow start over.
	round(40, 20, 0)
	alpha += (0.5 - alpha) / 16
	if want := 40*(1-alpha/2) + 1; math.Abs(cc.alpha-alpha) > 1e-12 || math.Abs(cc.cwnd-want) > 1e-9 || cc.slowStart {
		t.Fatalf("a marked round: alpha %g window %g slow start %v; want %g, %g, false", cc.alpha, cc.cwnd, cc.slowStart, alpha, want)
	}
	// A clean round: one more.
	w := cc.cwnd
	round(int64(w), 0, 0)
	if cc.cwnd != w+1 {
		t.Fatalf("a clean round after: window %g, want %g", cc.cwnd, w+1)
	}
	// Loss without marks halves it; the gap stays, and the next round is clean.
	w = cc.cwnd
	round(int64(w), 0, 2)
	if cc.cwnd != w/2 || cc.lossRounds != 1 {
		t.Fatalf("a lossy round: window %g, loss rounds %d; want %g, 1", cc.cwnd, cc.lossRounds, w/2)
	}
	w = cc.cwnd
	round(int64(w), 0, 0)
	if cc.cwnd != w+1 {
		t.Fatalf("the round after the loss: window %g, want %g (the old gap is no new loss)", cc.cwnd, w+1)
	}
	// A full window holds the sender.
	for cc.canSend() {
		cc.sent++
	}
	if got := cc.sent - cc.maxSeq; float64(got) < cc.cwnd || float64(got) >= cc.cwnd+1 {
		t.Fatalf("%d in flight with a window of %g", got, cc.cwnd)
	}
	// Feedback for a datagram sent before the round began ends no round, and
	// stale counts do not go back.
	rounds, seq := cc.rounds, cc.maxSeq
	cc.feedback(now+ms, now+ms, now-5*ms, 0, recv-3, ce, seq-3)
	if cc.rounds != rounds || cc.recv != recv || cc.maxSeq != seq {
		t.Fatalf("a late feedback: rounds %d->%d, recv %d seq %d; want no round and %d, %d", rounds, cc.rounds, cc.recv, cc.maxSeq, recv, seq)
	}
	// Silence since that feedback with datagrams in flight: nothing before
	// max(200 ms, 3 srtt), then what is in flight is taken as lost and the
	// window is 2, once a wait.
	if cc.stalled(now + 200*ms) {
		t.Fatal("stalled before 200 ms")
	}
	if !cc.stalled(now+201*ms) || cc.cwnd != 2 || cc.sent != cc.maxSeq || !cc.canSend() || cc.stalled(now+202*ms) {
		t.Fatalf("stall: window %g, %d in flight", cc.cwnd, cc.sent-cc.maxSeq)
	}
	// Nothing in flight is no stall.
	if cc.stalled(now + time.Hour) {
		t.Fatal("stalled with nothing in flight")
	}
	// Every CE: alpha to 1 and the window to 2/alpha, DCTCP's balance, never
	// below 2.
	for range 300 {
		round(int64(cc.cwnd), int64(cc.cwnd), 0)
	}
	if cc.cwnd < 2 || cc.cwnd > 2.1 || cc.alpha < 0.99 {
		t.Fatalf("all marked: window %g alpha %g; want 2 and alpha near 1", cc.cwnd, cc.alpha)
	}
	// Never marked: up to the cap's pace, the window no more than four round
	// trips of it.
	for range 1000 {
		round(int64(cc.cwnd), 0, 0)
	}
	if top := 4 * 50e6 * 0.01 / 8000; cc.rate() != 50e6 || math.Abs(cc.cwnd-top) > 1e-3 {
		t.Fatalf("never marked: rate %g window %g; want the cap 50e6 and %g", cc.rate(), cc.cwnd, top)
	}
}

// simLink is a bottleneck for the control: a FIFO draining at rate bits/s
// whose packets are CE-marked when their sojourn passes mark (step marking, as
// dualpi2's L queue and DCTCP's switches do; 0 marks nothing) and dropped when
// the queue holds more than limit packets; base is the path's round trip
// without queue. Each datagram that comes through is answered at once. prob
// marks each datagram CE with that probability besides (dualpi2's coupled
// marking of its L queue, which a classic flow's load sets), and lag is how long
// after its arrival the sender reads a feedback (both ends' wake-ups in user
// space).
type simLink struct {
	rate            float64
	base, mark, lag time.Duration
	limit           int
	prob            float64
}

type simResult struct {
	mbps, sojournMs  float64 // over the last half
	ceRounds, losses int
}

// run sends through the link for d, as the sender sends: paced at the
// control's rate while its window has room. It returns the throughput and mean
// sojourn of the second half.
func (l simLink) run(cc *scalableCC, d time.Duration) simResult {
	type fb struct {
		at, sent time.Duration
		recv, ce int64
		seq      int64
	}
	var (
		pending            []fb
		departs            []time.Duration // the queue's departure times
		lastDepart         time.Duration
		next               time.Duration
		recv, ce           int64
		half               = d / 2
		bits, sojourn, cnt float64
		res                simResult
	)
	rng := rand.New(rand.NewPCG(1, 2))
	tx := time.Duration(float64(8*cc.size) / l.rate * float64(time.Second))
	for now := time.Duration(0); now < d; now += 50 * time.Microsecond {
		for len(pending) > 0 && pending[0].at+l.lag <= now {
			f := pending[0]
			pending = pending[1:]
			cc.feedback(f.at, f.at+l.lag, f.sent, 0, f.recv, f.ce, f.seq)
		}
		cc.stalled(now)
		gap := time.Duration(8 * cc.size / cc.rate() * float64(time.Second))
		next = max(next, now-udpMaxDebt)
		for next <= now {
			if !cc.canSend() {
				next = now
				break
			}
			cc.sent++
			sent := next
			next += gap
			arrive := sent + l.base/2
			for len(departs) > 0 && departs[0] <= arrive {
				departs = departs[1:]
			}
			if l.limit > 0 && len(departs) >= l.limit {
				res.losses++
				continue
			}
			depart := max(arrive, lastDepart) + tx
			lastDepart = depart
			departs = append(departs, depart)
			s := depart - tx - arrive
			recv++
			if l.mark > 0 && s > l.mark || l.prob > 0 && rng.Float64() < l.prob {
				ce++
			}
			if depart >= half && depart < d {
				bits += 8 * cc.size
				sojourn += s.Seconds() * 1e3
				cnt++
			}
			pending = append(pending, fb{at: depart + l.base/2, sent: sent, recv: recv, ce: ce, seq: cc.sent})
		}
	}
	res.mbps = bits / (d - half).Seconds() / 1e6
	res.sojournMs = sojourn / cnt
	res.ceRounds = cc.ceRounds
	return res
}

// TestScalableCCOnALink runs the control against modelled bottlenecks: a marking
// one (an L4S queue) it must fill with a queue of about the marking threshold,
// and a drop-tail one it must still share out by loss, its queue bounded by the
// window.
func TestScalableCCOnALink(t *testing.T) {
	ms := time.Millisecond
	cfg := scalableConfig{size: 1470, startBps: 1e6, maxBps: 1e9}
	l4s := simLink{rate: 10e6, base: 10 * ms, mark: ms, limit: 1000}
	got := l4s.run(newScalableCC(cfg), 10*time.Second)
	t.Logf("L4S link 10 Mbit/s, 10 ms, marking at 1 ms: %.2f Mbit/s, sojourn %.2f ms, %d marked rounds, %d losses", got.mbps, got.sojournMs, got.ceRounds, got.losses)
	if got.mbps < 9 || got.mbps > 10.01 || got.sojournMs > 3 || got.ceRounds == 0 || got.losses != 0 {
		t.Errorf("on an L4S link: %+v; want at least 9 of 10 Mbit/s, a sojourn below 3 ms, marks and no loss", got)
	}
	fast := simLink{rate: 100e6, base: 20 * ms, mark: ms, limit: 10000}
	got = fast.run(newScalableCC(cfg), 10*time.Second)
	t.Logf("L4S link 100 Mbit/s, 20 ms: %.2f Mbit/s, sojourn %.2f ms", got.mbps, got.sojournMs)
	if got.mbps < 90 || got.sojournMs > 3 {
		t.Errorf("on a 100 Mbit/s L4S link: %+v; want at least 90 Mbit/s and a sojourn below 3 ms", got)
	}
	tail := simLink{rate: 10e6, base: 10 * ms, limit: 50}
	got = tail.run(newScalableCC(cfg), 10*time.Second)
	t.Logf("drop-tail link 10 Mbit/s, 50 packets: %.2f Mbit/s, sojourn %.2f ms, %d losses", got.mbps, got.sojournMs, got.losses)
	if got.mbps < 8 || got.losses == 0 || got.ceRounds != 0 {
		t.Errorf("on a drop-tail link: %+v; want at least 8 of 10 Mbit/s, by loss, no marks", got)
	}
	// A deep queue that never marks nor drops (as fq_codel is to an ECN flow
	// between its marks): the window bounds what waits in it.
	deep := simLink{rate: 10e6, base: 10 * ms}
	cc := newScalableCC(scalableConfig{size: 1470, startBps: 1e6, maxBps: 1e9})
	got = deep.run(cc, 3*time.Second)
	t.Logf("unmarked deep queue: sojourn %.2f ms, window %.0f", got.sojournMs, cc.cwnd)
	if bdp := 10e6 * 0.01 / (8 * 1470); got.sojournMs > 1.1*(cc.cwnd-bdp)*1.176 {
		t.Errorf("unmarked deep queue: sojourn %.2f ms with a window of %.0f: more waits than the window sent", got.sojournMs, cc.cwnd)
	}
}

// TestScalableCCPacesOverThePath: under marking the flow's rate does not set
// (dualpi2's coupled probability, which a classic flow's load sets), a window
// of 2/p paced over the path's round trip, as DCTCP's in a kernel would be;
// user space's wake-ups at both ends, which lengthen the feedback loop, do not
// cut it (the window counted over the loop would: 5 datagrams a 30 ms loop is
// 2 Mbit/s, not 6), and a loop past four times the path's is held to four.
func TestScalableCCPacesOverThePath(t *testing.T) {
	ms := time.Millisecond
	cfg := scalableConfig{size: 1470, startBps: 1e6, maxBps: 1e9}
	run := func(lag time.Duration) (simResult, *scalableCC) {
		cc := newScalableCC(cfg)
		return simLink{rate: 20e6, base: 10 * ms, prob: 0.4, lag: lag, limit: 1000}.run(cc, 20*time.Second), cc
	}
	kernel, cc0 := run(0)
	user, cc1 := run(20 * ms)
	want := 2 / 0.4 * 1470 * 8 / 0.01 / 1e6 // 5.9 Mbit/s
	t.Logf("p 0.4, path 10 ms: %.2f Mbit/s read at once, %.2f read 20 ms late (2/p over the path: %.2f); srtt %v and %v, loop %v",
		kernel.mbps, user.mbps, want, cc0.srtt, cc1.srtt, cc1.loop)
	if math.Abs(kernel.mbps-want) > 0.25*want || math.Abs(user.mbps-kernel.mbps) > 0.15*kernel.mbps {
		t.Errorf("%.2f Mbit/s read at once and %.2f read late; want both near %.2f", kernel.mbps, user.mbps, want)
	}
	if d := cc1.srtt - 10*ms; d < 0 || d > 2*ms || cc1.loop < 29*ms || cc1.loop > 32*ms {
		t.Errorf("read late: srtt %v, loop %v; want the path's 10 ms and the loop's 30", cc1.srtt, cc1.loop)
	}
	slow, cc2 := run(100 * ms)
	t.Logf("read 100 ms late: %.2f Mbit/s, loop factor %.2f", slow.mbps, cc2.loopFactor())
	if cc2.loopFactor() != scalableMaxLoop || slow.mbps > 0.5*kernel.mbps {
		t.Errorf("read 100 ms late: loop factor %g, %.2f Mbit/s; want %d and the window counted over 4 paths' time", cc2.loopFactor(), slow.mbps, scalableMaxLoop)
	}
}

// TestScalableCCHeld: the sink's hold comes off the round trip when the trip can
// hold it, and a stamp before the send (a stepped clock) measures the loop.
func TestScalableCCHeld(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		rx, seen, held, path time.Duration
	}{
		{12 * ms, 30 * ms, 2 * ms, 10 * ms},
		{12 * ms, 30 * ms, 0, 12 * ms},
		{12 * ms, 30 * ms, 12 * ms, 12 * ms}, // a hold as long as the trip
		{12 * ms, 30 * ms, -1, 12 * ms},
		{-5 * ms, 30 * ms, 2 * ms, 30 * ms}, // received before it was sent
		{40 * ms, 30 * ms, 0, 30 * ms},      // stamped after it was read
	} {
		cc := newScalableCC(scalableConfig{size: 1000, startBps: 1e6, maxBps: 1e9})
		cc.sent = 1
		if got := cc.feedback(c.rx, c.seen, 0, c.held, 1, 0, 1); got != c.path || cc.srtt != c.path || cc.loop != c.seen {
			t.Errorf("rx %v seen %v held %v: path %v (srtt %v, loop %v), want %v and loop %v", c.rx, c.seen, c.held, got, cc.srtt, cc.loop, c.path, c.seen)
		}
	}
}

// TestFeedbackHeld: the sink writes how long it held a datagram, from the kernel's
// receive stamp to the feedback's send, and a stamp from the future or more than
// a second old (a stepped clock) leaves 0, which the sender reads as no hold.
func TestFeedbackHeld(t *testing.T) {
	key := floodKey("tok")
	for _, c := range []struct {
		ago      time.Duration
		min, max time.Duration
	}{
		{3 * time.Millisecond, 3 * time.Millisecond, time.Second},
		{-time.Millisecond, 0, 0},
		{2 * time.Second, 0, 0},
	} {
		fb := appendFeedback(nil, key, 1, make([]byte, 8), 1, 0, 1)
		setFeedbackHeld(fb, time.Now().Add(-c.ago))
		got, ok := parseFeedback(fb, key)
		if !ok || got.held < c.min || got.held > c.max {
			t.Errorf("received %v ago: held %v (ok %v), want %v..%v", c.ago, got.held, ok, c.min, c.max)
		}
	}
}

// TestUDPSinkFeedback feeds a sink a scalable flow's datagrams and reads what it
// answers: every second datagram and every CE one, its counts, the send time
// echoed, and nothing for a flow that did not ask or a datagram smaller than the
// answer.
func TestUDPSinkFeedback(t *testing.T) {
	rec := &rrRecorder{mayDeclare: true}
	s := &udpSink{key: floodKey("tok"), env: rec.env(), flows: map[sinkKey]*sinkFlow{}}
	s.declare = declaring(s.env)
	from := netip.MustParseAddrPort("192.0.2.1:4000")
	t0 := time.Unix(1_700_000_000, 0)
	data := func(flow, seq uint32, size, tos int) []byte {
		d := make([]byte, size)
		copy(d, s.key[:])
		binary.BigEndian.PutUint32(d[8:12], flow)
		binary.BigEndian.PutUint32(d[12:16], seq)
		if size >= 24 {
			binary.BigEndian.PutUint64(d[16:24], uint64(seq)*1000)
		}
		fb, _ := s.take(t0, from, d, tos, nil)
		return fb
	}
	type answer struct {
		seq  uint32
		tos  int
		want *feedbackMsg
	}
	ect1, ceTOS := ECNECT1, ECNCE
	for i, a := range []answer{
		{1, ect1, nil},
		{2, ect1, &feedbackMsg{sent: 2000, recv: 2, ce: 0, maxSeq: 2}},
		{3, ceTOS, &feedbackMsg{sent: 3000, recv: 3, ce: 1, maxSeq: 3}},
		{5, ect1, &feedbackMsg{sent: 5000, recv: 4, ce: 1, maxSeq: 5}}, // 4 lost so far
		{4, ect1, nil},
		{6, ect1, &feedbackMsg{sent: 6000, recv: 6, ce: 1, maxSeq: 6}},
	} {
		fb := data(1|udpWantsFeedback, a.seq, 100, a.tos)
		switch {
		case a.want == nil && fb != nil:
			t.Errorf("datagram %d (seq %d): answered %x, want no answer", i, a.seq, fb)
		case a.want != nil:
			got, ok := parseFeedback(fb, s.key)
			if !ok || got != *a.want {
				t.Errorf("datagram %d (seq %d): answered %+v (%v), want %+v", i, a.seq, got, ok, *a.want)
			}
		}
	}
	if f := s.flows[sinkKey{from, 1}]; f == nil || f.total != 6 || f.ecnAll[ECNCE] != 1 {
		t.Errorf("the flow's counts: %+v", f)
	}
	// A flood's data, and a scalable datagram smaller than the answer: none.
	for _, fb := range [][]byte{data(2, 1, 100, ceTOS), data(2, 2, 100, ceTOS), data(3|udpWantsFeedback, 1, 47, ceTOS), data(3|udpWantsFeedback, 2, 47, ceTOS)} {
		if fb != nil {
			t.Errorf("answered %x", fb)
		}
	}
	// What the sender reads only: the right key, flow 1, type, size.
	good := appendFeedback(nil, s.key, 1, make([]byte, 8), 1, 0, 1)
	if _, ok := parseFeedback(good, s.key); !ok || len(good) != udpFeedbackSize {
		t.Fatalf("a good feedback of %d bytes not read", len(good))
	}
	for i, mutate := range []func([]byte) []byte{
		func(b []byte) []byte { b[0] ^= 1; return b },
		func(b []byte) []byte { b[11] = 2; return b },
		func(b []byte) []byte { b[15] = udpEnd; return b },
		func(b []byte) []byte { return b[:len(b)-1] },
		func(b []byte) []byte { return append(b, 0) },
	} {
		b := mutate(append([]byte(nil), good...))
		if _, ok := parseFeedback(b, s.key); ok {
			t.Errorf("mutation %d read as feedback", i)
		}
	}
}

// The feedback carries its flow's mark: the TOS byte its data last arrived with
// not CE-marked (a flow's CE says nothing of its own codepoint), none before
// one has come, and the DSCP with it.
func TestUDPSinkFeedbackMark(t *testing.T) {
	s := &udpSink{key: floodKey("tok"), env: (&rrRecorder{mayDeclare: true}).env(), flows: map[sinkKey]*sinkFlow{}}
	s.declare = declaring(s.env)
	from := netip.MustParseAddrPort("192.0.2.1:4000")
	af41 := 34 << 2
	for i, c := range []struct {
		tos      int
		answered bool
		mark     int // -1: none known
	}{
		{ECNCE, true, -1},        // CE: answered, and no codepoint of the flow's own seen yet
		{ECNECT1, true, ECNECT1}, // every second datagram
		{ECNCE, true, ECNECT1},   // CE: marked with the ECT(1) seen before
		{-1, true, ECNECT1},      // the kernel did not say: what was known
		{-1, false, -1},          // odd, and not known to be CE: no answer
		{af41 | ECNECT1, true, af41 | ECNECT1},
		{af41 | ECNCE, true, af41 | ECNECT1},
	} {
		d := make([]byte, 100)
		copy(d, s.key[:])
		binary.BigEndian.PutUint32(d[8:12], 1|udpWantsFeedback)
		binary.BigEndian.PutUint32(d[12:16], uint32(i+1))
		fb, mark := s.take(time.Unix(1_700_000_000, int64(i)), from, d, c.tos, nil)
		if (fb != nil) != c.answered || mark != c.mark {
			t.Errorf("datagram %d (TOS %d): answered %v, mark %d; want %v, %d", i, c.tos, fb != nil, mark, c.answered, c.mark)
		}
	}
}

// TestUDPScalableLoopback runs a scalable flow into a sink through the kinds, as
// agents run them: with nothing marking on loopback it climbs to its cap, the
// feedback gives RTT samples, and the sink's census counts its ECT(1) datagrams.
func TestUDPScalableLoopback(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	raw, _, err := Kinds()["udp-scalable"].Plan(map[string]any{"max_rate": "20M", "start_rate": "2M"}, NewPlanner())
	if err != nil {
		t.Fatal(err)
	}
	sinkRec := &rrRecorder{mayDeclare: true}
	port, stopSink := startSink(t, "127.0.0.1", token, sinkRec, Client{Kind: "udp-scalable", Params: raw})
	rec := &rrRecorder{}
	ctx := t.Context()
	spec := JobSpec{Kind: "udp-scalable", Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Token: token, Step: 0.1, Duration: 1.5,
		Start: float64(time.Now().Add(100*time.Millisecond).UnixNano()) / 1e9, Params: raw}
	job, _, err := Kinds()["udp-scalable"].Start(ctx, spec, rec.env())
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	stopSink()
	for _, r := range []*rrRecorder{rec, sinkRec} {
		if len(r.errs) > 0 {
			t.Errorf("samples the data file refuses: %v", r.errs)
		}
	}
	// The flow's connection, as the tracer at a bottleneck would count it.
	if len(rec.declared) != 1 || rec.declared[0].Of != "UDP scalable" ||
		!strings.HasPrefix(rec.declared[0].Conn, "udp 127.0.0.1:") || !strings.HasSuffix(rec.declared[0].Conn, " 127.0.0.1:"+strconv.Itoa(port)) {
		t.Errorf("declared %+v, want the flow's connection to the sink's port %d", rec.declared, port)
	}
	sent := rec.samples["UDP scalable sent"]
	if len(sent) < 14 {
		t.Fatalf("%d sender samples, want one a 0.1 s step", len(sent))
	}
	// Slow start from 2 Mbit/s doubles each round trip (well under a step on
	// loopback) to the cap: the last half second is at 20 Mbit/s.
	last, _ := rateOf(sent[len(sent)-5:])
	if math.Abs(last-20) > 1 {
		t.Errorf("the last half second at %.2f Mbit/s, want the cap, 20", last)
	}
	if n := len(rec.samples["UDP scalable RTT"]); n < 14 {
		t.Errorf("%d RTT samples, want one a step", n)
	}
	for _, x := range rec.samples["UDP scalable RTT"] {
		if x.V <= 0 || x.V > 50 {
			t.Errorf("RTT sample %+v on loopback", x)
		}
	}
	for _, x := range rec.samples["UDP scalable CE fraction"] {
		if x.V != 0 {
			t.Errorf("CE fraction %+v on loopback", x)
		}
	}
	var rx, ect1 float64
	for _, x := range sinkRec.samples["UDP scalable rx pps"] {
		rx += x.V * x.Dur
	}
	for _, x := range sinkRec.samples["UDP scalable rx ECT(1) pps"] {
		ect1 += x.V * x.Dur
	}
	if rx < 1000 || math.Abs(ect1-rx) > 0.5 {
		t.Errorf("the sink received %.0f datagrams, %.0f of them ECT(1); want over 1000, all ECT(1)", rx, ect1)
	}
	var closing string
	for _, w := range rec.warns {
		if strings.HasPrefix(w, "udp-scalable UDP scalable: ") {
			closing = w
		}
	}
	if !strings.Contains(closing, "0 with CE marks") || strings.Contains(closing, " 0 feedback") {
		t.Errorf("closing line %q", closing)
	}
	for _, w := range sinkRec.warns {
		if strings.Contains(w, "bleached") {
			t.Errorf("sink: %s", w)
		}
	}
	_ = datafile.Sample{}
}

// FuzzUDPSinkTake hands the sink datagrams of any content behind its key (what
// anyone who saw a datagram of the run could send): it must not fail, and any
// feedback it answers is one, for the flow the datagram named, and no bigger
// than the datagram.
func FuzzUDPSinkTake(f *testing.F) {
	key := floodKey("tok")
	seed := func(flow, word uint32, rest []byte) []byte {
		b := append([]byte(nil), key[:]...)
		b = binary.BigEndian.AppendUint32(b, flow)
		b = binary.BigEndian.AppendUint32(b, word)
		return append(b, rest...)
	}
	f.Add(seed(1|udpWantsFeedback, 2, make([]byte, 40)), 1)
	f.Add(seed(1|udpControl, udpHello, []byte("name")), 3)
	f.Add(seed(1|udpControl, udpEnd, make([]byte, 8)), 0)
	f.Add(seed(1|udpControl, udpFeedback, make([]byte, 32)), 3)
	f.Add(seed(math.MaxUint32, math.MaxUint32, nil), -1)
	f.Fuzz(func(t *testing.T, rest []byte, tos int) {
		rec := &rrRecorder{mayDeclare: true}
		s := &udpSink{key: key, env: rec.env(), flows: map[sinkKey]*sinkFlow{}}
		s.declare = declaring(s.env)
		d := append(key[:udpFloodKeySize:udpFloodKeySize], rest...)
		if len(d) < udpFloodHeader {
			return // receive drops these before take
		}
		from := netip.MustParseAddrPort("192.0.2.1:4000")
		for i := range 3 { // the second of a flow is answered
			fb, _ := s.take(time.Unix(1_700_000_000, int64(i)), from, d, tos%4, nil)
			if fb == nil {
				continue
			}
			flow := binary.BigEndian.Uint32(d[8:12]) &^ (udpControl | udpWantsFeedback)
			if len(fb) > len(d) || len(fb) != udpFeedbackSize || binary.BigEndian.Uint32(fb[8:12]) != flow|udpControl {
				t.Fatalf("datagram %x answered %x", d, fb)
			}
			if flow == 1 {
				if _, ok := parseFeedback(fb, key); !ok {
					t.Fatalf("answer %x is not feedback", fb)
				}
			}
		}
		s.tick(time.Unix(1_700_000_001, 0))
		s.finish(time.Unix(1_700_000_002, 0))
		if len(s.flows) > 1 {
			t.Fatalf("%d flows from one datagram", len(s.flows))
		}
	})
}

// TestUDPScalableFlows runs two scalable flows in one job: each has a socket, a
// window and series of its own, and the sink tells them apart.
func TestUDPScalableFlows(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	raw, _, err := Kinds()["udp-scalable"].Plan(map[string]any{"max_rate": "10M", "flows": 2, "series": "L"}, NewPlanner())
	if err != nil {
		t.Fatal(err)
	}
	sinkRec := &rrRecorder{mayDeclare: true}
	port, stopSink := startSink(t, "127.0.0.1", token, sinkRec, Client{Kind: "udp-scalable", Params: raw})
	rec := &rrRecorder{}
	spec := JobSpec{Kind: "udp-scalable", Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Token: token, Step: 0.1, Duration: 1,
		Start: float64(time.Now().Add(100*time.Millisecond).UnixNano()) / 1e9, Params: raw}
	job, _, err := Kinds()["udp-scalable"].Start(t.Context(), spec, rec.env())
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	stopSink()
	for _, name := range []string{"L::1", "L::2"} {
		sent, _ := rateOf(rec.samples[name+" sent"])
		got, _ := rateOf(sinkRec.samples[name])
		if sent < 5 || math.Abs(got-sent) > 0.1*sent || len(rec.samples[name+" RTT"]) < 8 {
			t.Errorf("flow %s: sent %.2f Mbit/s, the sink got %.2f, %d RTT samples", name, sent, got, len(rec.samples[name+" RTT"]))
		}
	}
	if len(rec.samples) != 2*4 {
		var names []string
		for n := range rec.samples {
			names = append(names, n)
		}
		t.Errorf("the sender's series %q, want sent, tx pps, RTT and CE fraction of L::1 and L::2", names)
	}
}
