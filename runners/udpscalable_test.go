package runners

import (
	"encoding/binary"
	"encoding/json"
	"math"
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
		{nil, `{"series":"UDP scalable","max_rate":"100000000000","start_rate":"1000000","packet_size":1470,"tos":"1"}`},
		{map[string]any{"series": "L4S", "max_rate": "20M", "start_rate": "2M", "tos": "AF11"},
			`{"series":"L4S","max_rate":"20000000","start_rate":"2000000","packet_size":1470,"tos":"41"}`},
		// A start above the cap starts at the cap.
		{map[string]any{"max_rate": "1M", "start_rate": "5M", "ecn": "ect0", "packet_size": 48},
			`{"series":"UDP scalable","max_rate":"1000000","start_rate":"1000000","packet_size":48,"tos":"2"}`},
		{map[string]any{"packet_size": 47}, "error: at least 48 bytes"},
		{map[string]any{"max_rate": "1k"}, "error: want both at least 117600 bit/s"},
		{map[string]any{"start_rate": "fast"}, "error: start_rate: "},
		{map[string]any{"ecn": "ect2"}, "error: want notect, ect0, ect1 or ce"},
		{map[string]any{"tos": 3, "ecn": "ect1"}, "error: tos 3 sets the ECN field to CE"},
		{map[string]any{"flows": 2}, "error: "},
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
		for _, se := range series {
			names = append(names, se.Name+" "+se.Units+" "+se.Host)
			if se.Kind != KindUDP || se.Flow != 1 || se.CC != "scalable" || se.Direction != Upload {
				t.Errorf("plan %v: series %+v", tc.params, se)
			}
		}
		var p scalableParams
		json.Unmarshal(raw, &p)
		base := p.Series
		want := []string{base + " Mbits/s @peer", base + " sent Mbits/s ", base + " loss % @peer", base + " tx pps packets/s ",
			base + " rx pps packets/s @peer", base + " RTT ms ", base + " CE fraction % "}
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

// TestScalableCCRounds drives the rate control with feedback of known counts, a
// round at a time.
func TestScalableCCRounds(t *testing.T) {
	ms := time.Millisecond
	cfg := scalableConfig{size: 1000, startBps: 1e6, maxBps: 50e6}
	cc := newScalableCC(cfg)
	var now time.Duration
	var recv, ce, seq int64
	// round sends n datagrams over a 10 ms round trip: marked of them CE, lost
	// of them never come; the feedback answers each datagram that came.
	round := func(n, marked, lost int64) {
		sent := now
		now += 10 * ms
		seq += n
		recv += n - lost
		ce += marked
		cc.feedback(now, sent, recv, ce, seq)
	}
	// alpha moves a 1/16 toward each round's marked fraction, from 1.
	alpha := 1.0
	round(10, 0, 0)
	alpha -= alpha / 16
	if cc.rate != 2e6 || !cc.slowStart || cc.srtt != 10*ms {
		t.Fatalf("after a clean round in slow start: rate %g, slow start %v, srtt %v; want 2e6, true, 10ms", cc.rate, cc.slowStart, cc.srtt)
	}
	round(10, 0, 0)
	round(10, 0, 0)
	alpha -= alpha / 16
	alpha -= alpha / 16
	if cc.rate != 8e6 || math.Abs(cc.alpha-alpha) > 1e-12 {
		t.Fatalf("three clean rounds: rate %g alpha %g, want 8e6, %g", cc.rate, cc.alpha, alpha)
	}
	// Half the datagrams marked: alpha toward 0.5 by 1/16, the rate cut by
	// alpha/2, slow start over.
	round(10, 5, 0)
	alpha += (0.5 - alpha) / 16
	if math.Abs(cc.alpha-alpha) > 1e-12 || math.Abs(cc.rate-8e6*(1-alpha/2)) > 1e-6 || cc.slowStart {
		t.Fatalf("a marked round: alpha %g rate %g slow start %v; want %g, %g, false", cc.alpha, cc.rate, cc.slowStart, alpha, 8e6*(1-alpha/2))
	}
	// A clean round: alpha decays, the rate grows by a datagram a round trip
	// (1000 bytes in 10 ms: 0.8 Mbit/s).
	r := cc.rate
	round(10, 0, 0)
	alpha -= alpha / 16
	if math.Abs(cc.alpha-alpha) > 1e-12 || math.Abs(cc.rate-(r+0.8e6)) > 1e-6 {
		t.Fatalf("a clean round after: alpha %g rate %g; want %g, %g", cc.alpha, cc.rate, alpha, r+0.8e6)
	}
	// Loss without marks halves it; the gap stays, and the next round is clean.
	r = cc.rate
	round(10, 0, 2)
	if cc.rate != r/2 || cc.lossRounds != 1 {
		t.Fatalf("a lossy round: rate %g, loss rounds %d; want %g, 1", cc.rate, cc.lossRounds, r/2)
	}
	r = cc.rate
	round(10, 0, 0)
	if math.Abs(cc.rate-(r+0.8e6)) > 1e-6 {
		t.Fatalf("the round after the loss: rate %g, want %g (the old gap is no new loss)", cc.rate, r+0.8e6)
	}
	// Feedback for a datagram sent before the round began ends no round, and
	// stale counts do not go back.
	rounds := cc.rounds
	cc.feedback(now+ms, now-5*ms, recv-3, ce, seq-3)
	if cc.rounds != rounds || cc.recv != recv || cc.maxSeq != seq {
		t.Fatalf("a late feedback: rounds %d->%d, recv %d seq %d; want no round and %d, %d", rounds, cc.rounds, cc.recv, cc.maxSeq, recv, seq)
	}
	// Silence since that feedback: nothing before max(200 ms, 3 srtt), then half
	// the rate, once a wait.
	r = cc.rate
	if cc.stalled(now + 200*ms) {
		t.Fatal("stalled before 200 ms")
	}
	if !cc.stalled(now+201*ms) || cc.rate != r/2 || cc.stalled(now+300*ms) {
		t.Fatalf("stalls: rate %g, want %g, and one a wait", cc.rate, r/2)
	}
	// Every CE: alpha to 1 and the rate down to its floor, never below.
	for range 200 {
		round(10, 10, 0)
	}
	if cc.rate != cfg.minBps() || cc.alpha < 0.99 {
		t.Fatalf("all marked: rate %g alpha %g; want the floor %g and alpha near 1", cc.rate, cc.alpha, cfg.minBps())
	}
	// Never marked: up to the cap, never past it.
	for range 1000 {
		round(10, 0, 0)
	}
	if cc.rate != cfg.maxBps {
		t.Fatalf("never marked: rate %g, want the cap %g", cc.rate, cfg.maxBps)
	}
}

// simLink is a bottleneck for the rate control: a FIFO draining at rate bits/s
// whose packets are CE-marked when their sojourn passes mark (step marking, as
// dualpi2's L queue and DCTCP's switches do; 0 marks nothing) and dropped when
// the queue holds more than limit packets; base is the path's round trip
// without queue. Each datagram that comes through is answered at once.
type simLink struct {
	rate       float64
	base, mark time.Duration
	limit      int
}

type simResult struct {
	mbps, sojournMs  float64 // over the last half
	ceRounds, losses int
}

// run sends through the link for d, paced by cc as the sender paces, and returns
// the throughput and mean sojourn of the second half.
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
		seq, recv, ce      int64
		half               = d / 2
		bits, sojourn, cnt float64
		res                simResult
	)
	tx := time.Duration(float64(8*cc.size) / l.rate * float64(time.Second))
	for now := time.Duration(0); now < d; now += 50 * time.Microsecond {
		for len(pending) > 0 && pending[0].at <= now {
			f := pending[0]
			pending = pending[1:]
			cc.feedback(f.at, f.sent, f.recv, f.ce, f.seq)
		}
		cc.stalled(now)
		gap := time.Duration(8 * cc.size / cc.rate * float64(time.Second))
		for next <= now {
			sent := next
			next += gap
			seq++
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
			if l.mark > 0 && s > l.mark {
				ce++
			}
			if depart >= half {
				bits += 8 * cc.size
				sojourn += s.Seconds() * 1e3
				cnt++
			}
			pending = append(pending, fb{at: depart + l.base/2, sent: sent, recv: recv, ce: ce, seq: seq})
		}
	}
	res.mbps = bits / (d - half).Seconds() / 1e6
	res.sojournMs = sojourn / cnt
	res.ceRounds = cc.ceRounds
	return res
}

// TestScalableCCOnALink runs the rate control against modelled bottlenecks: a
// marking one (an L4S queue) it must fill with a queue of about the marking
// threshold, and a drop-tail one it must still share out by loss.
func TestScalableCCOnALink(t *testing.T) {
	ms := time.Millisecond
	cfg := scalableConfig{size: 1470, startBps: 1e6, maxBps: 1e9}
	l4s := simLink{rate: 10e6, base: 10 * ms, mark: ms, limit: 1000}
	got := l4s.run(newScalableCC(cfg), 10*time.Second)
	t.Logf("L4S link 10 Mbit/s, 10 ms, marking at 1 ms: %.2f Mbit/s, sojourn %.2f ms, %d marked rounds, %d losses", got.mbps, got.sojournMs, got.ceRounds, got.losses)
	// A rate-based sender has no ACK clock to keep the queue from emptying after
	// a cut, and 1 ms of marking threshold is under a seventh of this path's
	// round trip, where DCTCP too leaves some of the link unused.
	if got.mbps < 8 || got.mbps > 10.01 || got.sojournMs > 3 || got.ceRounds == 0 || got.losses != 0 {
		t.Errorf("on an L4S link: %+v; want at least 8 of 10 Mbit/s, a sojourn below 3 ms, marks and no loss", got)
	}
	fast := simLink{rate: 100e6, base: 20 * ms, mark: ms, limit: 10000}
	got = fast.run(newScalableCC(cfg), 10*time.Second)
	t.Logf("L4S link 100 Mbit/s, 20 ms: %.2f Mbit/s, sojourn %.2f ms", got.mbps, got.sojournMs)
	if got.mbps < 85 || got.sojournMs > 3 {
		t.Errorf("on a 100 Mbit/s L4S link: %+v; want at least 85 Mbit/s and a sojourn below 3 ms", got)
	}
	tail := simLink{rate: 10e6, base: 10 * ms, limit: 50}
	got = tail.run(newScalableCC(cfg), 10*time.Second)
	t.Logf("drop-tail link 10 Mbit/s, 50 packets: %.2f Mbit/s, sojourn %.2f ms, %d losses", got.mbps, got.sojournMs, got.losses)
	if got.mbps < 7 || got.losses == 0 || got.ceRounds != 0 {
		t.Errorf("on a drop-tail link: %+v; want at least 7 of 10 Mbit/s, by loss, no marks", got)
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
		return s.take(t0, from, d, tos, nil)
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
			fb := s.take(time.Unix(1_700_000_000, int64(i)), from, d, tos%4, nil)
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
