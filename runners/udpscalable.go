package runners

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// A scalable UDP sender (RFC 9331's "scalable congestion control", as DCTCP and
// TCP Prague are): L4S traffic made on any kernel, without the Prague module the
// mainline lacks. It sends ECT(1) datagrams to a udp-sink in a window it adjusts
// once a round trip from the sink's feedback, as DCTCP adjusts its own
// (scalableCC):
//
//   - alpha, the moving average of the fraction of datagrams that arrived CE
//     marked (gain 1/16 a round, starting at 1 as Linux's DCTCP does);
//   - a round with CE marks in it cuts the window by alpha/2 and adds a
//     datagram; a round with loss and no marks halves it (a classic queue's
//     signal); a clean round adds a datagram, or doubles the window until the
//     first signal (slow start);
//   - no feedback for max(200 ms, 3 x the feedback loop) with datagrams in
//     flight takes them as lost and starts again from two, as a retransmission
//     timeout would, so that a lost sink does not leave a flood behind.
//
// It runs in user space at both ends, where DCTCP runs in the kernel, so it
// tells two round trips apart. The path's (srtt) runs from a datagram's send to
// the kernel's receive stamp of its feedback, less the time the sink held the
// datagram (from its own receive stamp to its answer); the window is paced over
// it, as a kernel paces a window over the path's round trip. The feedback loop's
// runs to when the sender's goroutine reads the feedback, longer by both ends'
// wake-ups (30-48 ms against the path's 15-20 in a loaded emulated guest). The
// datagrams in flight are counted over the loop, so the window lets loop/srtt
// times itself be in flight (at most 4 times): counted against the window alone,
// the flow's rate would be window/loop, a penalty no kernel's DCTCP pays, and a
// rate balance against a kernel's TCP would measure the hosts' CPUs.
//
// Wire format: the flood's (udpflood.go), with two additions.
//
//	data      the flow field's bit 30 set (udpWantsFeedback), and bytes 16..24
//	          the datagram's send time, nanoseconds since the flow's epoch on the
//	          sender's monotonic clock (the sink only echoes it)
//	feedback  a control datagram of type 3 from the sink, 56 bytes: bytes
//	          16..24 the echoed send time of the datagram it answers, 24..32 the
//	          data datagrams of the flow received so far, 32..40 those that arrived
//	          CE, 40..48 the highest sequence number seen (unwrapped), 48..56 the
//	          nanoseconds from the kernel's receive stamp of the datagram it
//	          answers to its send (0 when the sink's kernel gave no stamp)
//
// The sink answers every second data datagram and every CE-marked one, and only
// datagrams with the key of at least the feedback's size: it never sends more than
// it was sent. The counts are cumulative, so a lost or reordered feedback loses
// nothing but an RTT sample.

const (
	// udpWantsFeedback marks a data datagram whose sender wants the sink's
	// feedback; flow numbers stay below it (MaxUDPFloodFlows).
	udpWantsFeedback = 1 << 30
	udpFeedback      = 3
	// udpFeedbackSize is a feedback datagram's size, and the smallest datagram a
	// scalable flow sends.
	udpFeedbackSize = udpFloodHeader + 40
	// scalableGain is alpha's gain a round (DCTCP's g, 1/16).
	scalableGain = 1.0 / 16
	// scalableStartRate is where a flow starts when the test gives no start_rate:
	// slow start doubles it each round.
	scalableStartRate = 1e6
	// scalableMinPPS bounds start_rate and max_rate from below: a flow capped
	// under 10 datagrams a second measures nothing.
	scalableMinPPS = 10
	// scalableStall is the least time without feedback that halves the rate.
	scalableStall = 200 * time.Millisecond
	// scalableMaxLoop bounds how many times its window the flow may have in
	// flight over the feedback loop (loop/srtt).
	scalableMaxLoop = 4
)

// Suffixes of a scalable flow's own series, besides the flood's.
const (
	udpRTTSuffix = " RTT"
	udpCESuffix  = " CE fraction"
)

// scalableParams are a udp-scalable job's parameters.
type scalableParams struct {
	Series string `json:"series,omitempty"`
	// Flows is how many flows, each a socket and a window of its own (named
	// "SERIES::N" when more than one, as the flood's are).
	Flows *wholeNumber `json:"flows,omitempty"`
	// MaxRate caps each flow's rate (bandwidth as iperf writes it); 0 or "" is no cap
	// below maxUDPBandwidth.
	MaxRate    rateParam    `json:"max_rate,omitempty"`
	StartRate  rateParam    `json:"start_rate,omitempty"`
	PacketSize *wholeNumber `json:"packet_size,omitempty"`
	TOS        tosParam     `json:"tos,omitempty"`
	// ECN is the codepoint the data carries: ect1 (the default) takes dualpi2's L
	// queue; ect0 makes it a DCTCP-like flow a classic ECN queue marks.
	ECN textParam `json:"ecn,omitempty"`
}

// scalableConfig is a udp-scalable job's parameters resolved.
type scalableConfig struct {
	series   string
	flows    int
	maxBps   float64
	startBps float64
	size     int
	tos      int
	marking  string
}

func (p scalableParams) resolve() (scalableConfig, error) {
	c := scalableConfig{series: p.Series, flows: 1, size: DefaultUDPPacketSize, maxBps: maxUDPBandwidth, startBps: scalableStartRate}
	if c.series == "" {
		c.series = "UDP scalable"
	}
	// The flood's checks of the name, flows, size and marking.
	ecn := p.ECN
	if ecn == "" {
		ecn = "ect1"
	}
	fc, err := floodParams{Series: c.series, Flows: p.Flows, PacketSize: p.PacketSize, TOS: p.TOS, ECN: ecn}.resolve()
	if err != nil {
		return scalableConfig{}, err
	}
	c.flows = fc.flows
	if fc.size < udpFeedbackSize {
		return scalableConfig{}, fmt.Errorf("packet_size is %d: a scalable flow's datagrams are at least %d bytes (the sink's feedback is that big, and never bigger than what it answers)", fc.size, udpFeedbackSize)
	}
	c.size, c.tos, c.marking = fc.size, fc.tos, fc.marking
	for _, r := range []struct {
		name string
		v    rateParam
		into *float64
	}{{"max_rate", p.MaxRate, &c.maxBps}, {"start_rate", p.StartRate, &c.startBps}} {
		bps, err := ParseBandwidth(string(r.v))
		if err != nil {
			return scalableConfig{}, fmt.Errorf("%s: %w", r.name, err)
		}
		if bps > 0 {
			*r.into = bps
		}
	}
	if least := c.minBps(); c.startBps < least || c.maxBps < least {
		return scalableConfig{}, fmt.Errorf("start_rate %g and max_rate %g bit/s: want both at least %g bit/s (%d datagrams of %d bytes a second)",
			c.startBps, c.maxBps, least, scalableMinPPS, c.size)
	}
	c.startBps = math.Min(c.startBps, c.maxBps)
	return c, nil
}

// minBps is the least start_rate and max_rate a test may give.
func (c scalableConfig) minBps() float64 { return float64(8 * c.size * scalableMinPPS) }

func (c scalableConfig) params() scalableParams {
	size, flows := wholeNumber(c.size), wholeNumber(c.flows)
	p := scalableParams{Series: c.series, Flows: &flows, PacketSize: &size,
		MaxRate:   rateParam(strconv.FormatFloat(c.maxBps, 'f', -1, 64)),
		StartRate: rateParam(strconv.FormatFloat(c.startBps, 'f', -1, 64)),
		TOS:       tosParam(strconv.Itoa(c.tos))}
	return p
}

// udpScalableKind sends a scalable flow to a udp-sink job, named with connect:.
var udpScalableKind = Kind{
	Plan: planWith(func(p scalableParams, pl *Planner) (any, []datafile.Series, error) {
		c, err := p.resolve()
		if err != nil {
			return nil, nil, err
		}
		series, err := udpFlowSeries(pl, c.names(), c.marking, "scalable")
		if err != nil {
			return nil, nil, err
		}
		return c.params(), series, nil
	}),
	Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		var p scalableParams
		if err := decodeRaw(spec.Params, &p); err != nil {
			return nil, Started{}, fmt.Errorf("udp-scalable: %w", err)
		}
		c, err := p.resolve()
		if err != nil {
			return nil, Started{}, fmt.Errorf("udp-scalable: %w", err)
		}
		if err := checkSinkSpec("udp-scalable", spec); err != nil {
			return nil, Started{}, err
		}
		fl := &flood{cfg: floodConfig{series: c.series, flows: 1, size: c.size, tos: c.tos, marking: c.marking},
			spec: spec, env: env, key: floodKey(spec.Token)}
		var flows []*scalable
		for _, name := range c.names() {
			flows = append(flows, &scalable{fl: fl, cfg: c, name: name})
		}
		// Each flow a socket, a window and a sampler of its own, as separate
		// senders would be; the job is done when they all are.
		run := func(ctx context.Context) error {
			errs := make([]error, len(flows))
			var wg sync.WaitGroup
			for i, s := range flows {
				wg.Go(func() { errs[i] = s.run(ctx) })
			}
			wg.Wait()
			return errors.Join(errs...)
		}
		return JobFunc(run), Started{Message: fmt.Sprintf("scalable UDP flows %s: %d, %s, %d-byte datagrams, from %g Mbit/s, at most %g each",
			c.series, c.flows, ECNName(max(c.tos, 0)), c.size, c.startBps/1e6, c.maxBps/1e6)}, nil
	},
}

// names are the flows' series names: the series itself for one flow, flent's
// "NAME::N" for several.
func (c scalableConfig) names() []string {
	return floodConfig{series: c.series, flows: c.flows}.names()
}

// scalableCC is the flow's congestion control, apart from any socket so that a
// test can drive it with feedback of its choosing. Like DCTCP it keeps a window,
// the datagrams it may have in flight (sent past the highest sequence number the
// sink has reported), and paces them over the smoothed round trip: a rate alone,
// with nothing in flight to bound it, kept sending into a queue that grew to
// seconds under fq_codel's slow classic marking, each round of reaction taking
// as long as the queue. Times are since the flow's epoch.
type scalableCC struct {
	size      float64 // bytes a datagram
	startRate float64 // bits/s, the pace until a round trip is measured
	maxRate   float64 // bits/s
	cwnd      float64 // datagrams
	slowStart bool
	alpha     float64
	srtt      time.Duration // the path's, 0 until the first sample
	loop      time.Duration // the feedback loop's, 0 until the first sample
	// sent is the highest sequence number sent (the sender's), and the others
	// the latest feedback's (the highest of each: feedback may come out of order).
	sent, recv, ce, maxSeq int64
	lastFeedback           time.Duration
	// The round: it ends with the feedback for a datagram sent at or after
	// roundStart, and the counts are the feedback's at its start.
	roundStart                   time.Duration
	roundRecv, roundCE, roundGap int64
	// What the flow came to, for its closing line.
	rounds, ceRounds, lossRounds, stalls int
}

const (
	// scalableInitialWindow is Linux's initial window (RFC 6928), in datagrams.
	scalableInitialWindow = 10
	// scalableMinWindow is the least window: two datagrams keep feedback coming.
	scalableMinWindow = 2
)

func newScalableCC(c scalableConfig) *scalableCC {
	return &scalableCC{size: float64(c.size), startRate: c.startBps, maxRate: c.maxBps, cwnd: scalableInitialWindow,
		slowStart: true, alpha: 1}
}

// rate is the pace, bits/s: the window over the smoothed round trip, a quarter
// faster so that the window, not the pace, is what limits (Linux paces TCP at
// 1.2 times in congestion avoidance), at most the cap.
func (cc *scalableCC) rate() float64 {
	if cc.srtt <= 0 {
		return cc.startRate
	}
	return math.Min(cc.maxRate, 1.25*8*cc.size*cc.cwnd/cc.srtt.Seconds())
}

// canSend says whether the window has room for one more datagram, its
// datagrams in flight counted over the feedback loop (see scalableCC).
func (cc *scalableCC) canSend() bool { return float64(cc.sent-cc.maxSeq) < cc.cwnd*cc.loopFactor() }

// loopFactor is the feedback loop over the path's round trip, within 1..4.
func (cc *scalableCC) loopFactor() float64 {
	if cc.srtt <= 0 || cc.loop <= cc.srtt {
		return 1
	}
	return min(scalableMaxLoop, float64(cc.loop)/float64(cc.srtt))
}

// feedback takes the sink's answer to a datagram sent at sent: the kernel took it
// in at rx and the flow read it at seen (at or after rx), and the sink held the
// datagram it answers for held. It returns the path's round trip the answer
// measured (0: none).
func (cc *scalableCC) feedback(rx, seen, sent, held time.Duration, recv, ce, maxSeq int64) time.Duration {
	now := seen
	cc.lastFeedback = now
	var path time.Duration
	if loop := seen - sent; loop > 0 && sent >= 0 {
		path = min(max(rx, sent)-sent, loop)
		// A hold the round trip cannot contain (a sink's clock stepped, or a
		// hostile one) is not taken off.
		if held > 0 && held < path {
			path -= held
		}
		if path <= 0 {
			path = loop
		}
		smooth(&cc.srtt, path)
		smooth(&cc.loop, loop)
	}
	cc.recv, cc.ce, cc.maxSeq = max(cc.recv, recv), max(cc.ce, ce), min(max(cc.maxSeq, maxSeq), cc.sent)
	if sent < cc.roundStart {
		return path
	}
	cc.rounds++
	dRecv, dCE := cc.recv-cc.roundRecv, cc.ce-cc.roundCE
	gap := cc.maxSeq - cc.recv // datagrams not (yet) received below the highest seen
	lost := gap > cc.roundGap
	if dRecv > 0 {
		cc.alpha += scalableGain * (float64(dCE)/float64(dRecv) - cc.alpha)
	}
	// DCTCP's round: a cut of alpha/2 when marks came, and the additive increase
	// of a datagram a round trip all the same; a window of 2/alpha is where the
	// two balance.
	switch {
	case dCE > 0:
		cc.ceRounds++
		cc.slowStart = false
		cc.cwnd = cc.cwnd*(1-cc.alpha/2) + 1
	case lost:
		cc.lossRounds++
		cc.slowStart = false
		cc.cwnd /= 2
	case cc.slowStart:
		cc.cwnd *= 2
	default:
		cc.cwnd++
	}
	// A window past what the cap lets through in four smoothed round trips
	// would only grow while the cap holds the pace; at least 16 datagrams, so
	// that a round trip longer than the smoothed one (a loopback's, which a
	// busy CPU's scheduling stretches from microseconds to milliseconds) does
	// not leave the window, rather than the cap, setting the pace.
	top := math.Inf(1)
	if cc.srtt > 0 {
		top = math.Max(16, 4*cc.maxRate*cc.srtt.Seconds()/(8*cc.size))
	}
	cc.cwnd = math.Min(top, math.Max(scalableMinWindow, cc.cwnd))
	cc.roundStart, cc.roundRecv, cc.roundCE, cc.roundGap = now, cc.recv, cc.ce, gap
	return path
}

// smooth takes a sample into a smoothed round trip, with TCP's gain of 1/8.
func smooth(s *time.Duration, x time.Duration) {
	if *s == 0 {
		*s = x
	} else {
		*s += (x - *s) / 8
	}
}

// stalled takes it that what is in flight was lost when no feedback has come
// for max(200 ms, 3 loops) with datagrams in flight, as a retransmission timeout
// would: the window falls to its least and the flow sends again; it says
// whether it did. A sink that is gone so gets two datagrams a wait, no flood.
func (cc *scalableCC) stalled(now time.Duration) bool {
	if cc.sent == cc.maxSeq || now-cc.lastFeedback < max(scalableStall, 3*cc.loop) {
		return false
	}
	cc.stalls++
	cc.slowStart = false
	cc.cwnd = scalableMinWindow
	cc.maxSeq = cc.sent
	cc.roundGap = cc.maxSeq - cc.recv
	cc.lastFeedback = now
	// The round in progress ends without a verdict: the datagrams it waits for
	// may never be answered.
	cc.roundStart = now
	return true
}

// scalable is a started udp-scalable job.
type scalable struct {
	fl   *flood
	cfg  scalableConfig
	name string // the flow's series
	mu   sync.Mutex
	cc   *scalableCC
	// opened wakes the sender when feedback may have opened the window.
	opened chan struct{}
	// Since the last sample, for the RTT and CE series (under mu).
	rttSum   time.Duration
	rttN     int
	feedback int64
	// The counts and the time at the last sample.
	lastRecv, lastCE int64
	lastSample       time.Time
	epoch            time.Time
}

func (s *scalable) since() time.Duration { return time.Since(s.epoch) }

// run sends the flow from the start for the duration, its window set by the
// sink's feedback, and samples what it sent at every step of the run's grid.
func (s *scalable) run(ctx context.Context) error {
	fl := s.fl
	start := startTime(fl.spec.Start)
	end := start.Add(time.Duration(fl.spec.Duration * float64(time.Second)))
	s.epoch = time.Now()
	s.cc = newScalableCC(s.cfg)
	s.opened = make(chan struct{}, 1)
	conn, err := fl.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("udp-scalable %s: %w", s.name, err)
	}
	if rc, err := conn.SyscallConn(); err == nil {
		recvStamps(rc) // the feedback's arrival, apart from the goroutine's wake-up
	}
	f := &floodFlow{num: 1, name: s.name, conn: conn, last: start}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	recvDone := make(chan struct{})
	go func() { defer close(recvDone); s.receive(conn) }()
	for range 3 {
		fl.hello(f)
		if sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) != nil {
			return nil
		}
	}
	if sleepUntil(ctx, start) != nil {
		return nil
	}
	declareConn(fl.env, fl.spec.Host, s.name, "udp", addrPortOf(conn.LocalAddr()), addrPortOf(conn.RemoteAddr()))
	s.mu.Lock()
	s.cc.lastFeedback = s.since() // the wait for feedback starts with the data
	s.lastSample = start
	s.mu.Unlock()
	dataDone := make(chan error, 1)
	go func() {
		s.send(ctx, f, end)
		dataDone <- nil
	}()
	step := fl.spec.Step
	if step <= 0 {
		step = 0.2
	}
	sample := func(now time.Time) {
		fl.sample(f, now)
		s.sample(now)
	}
	onSteps(ctx, start, end, step, dataDone, sample)
	select {
	case <-dataDone:
	case <-ctx.Done():
	}
	sample(time.Now())
	fl.end(ctx, f)
	conn.Close()
	<-recvDone
	if ctx.Err() != nil {
		return nil
	}
	s.mu.Lock()
	cc, fb := *s.cc, s.feedback
	s.mu.Unlock()
	if f.sent.Load() == 0 && f.failed > 0 {
		return fmt.Errorf("udp-scalable %s: no datagram could be sent: %w", f.name, f.lastErr)
	}
	if fl.env.Warn != nil {
		fl.env.Warn(fmt.Sprintf("udp-scalable %s: %d datagrams sent, %d feedback; %d rounds (%d with CE marks, %d with loss and none), %d stalls; "+
			"ended with a window of %.1f datagrams at %.3f Mbit/s, alpha %.3f, srtt %.3f ms (the feedback loop %.3f ms); the sink got %d, %d CE",
			f.name, f.sent.Load(), fb, cc.rounds, cc.ceRounds, cc.lossRounds, cc.stalls, cc.cwnd, cc.rate()/1e6, cc.alpha,
			float64(cc.srtt)/float64(time.Millisecond), float64(cc.loop)/float64(time.Millisecond), cc.recv, cc.ce))
	}
	if f.sent.Load() > 0 && fb == 0 {
		fl.env.warn(fmt.Sprintf("udp-scalable %s: the sink at %s never answered %d datagrams: the flow sent two a wait. "+
			"A path that drops the feedback, or an agent on the sink's host from before udp-scalable", f.name, fl.spec.Addr, f.sent.Load()), true)
	}
	return nil
}

// receive takes the sink's feedback until the socket is closed. The socket is
// connected: only the sink's address reaches it, and only with the key counts.
func (s *scalable) receive(conn *net.UDPConn) {
	buf, oob := make([]byte, 256), make([]byte, 128)
	for {
		n, oobn, _, _, err := conn.ReadMsgUDP(buf, oob)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				// An ICMP port unreachable for a datagram sent before the sink
				// was listening, or after it stopped: the next may do better.
				continue
			}
			return
		}
		seen := s.since()
		fb, ok := parseFeedback(buf[:n], s.fl.key)
		if !ok {
			continue
		}
		rx := seen
		if t, ok := rxStamp(oob[:oobn]); ok {
			// The kernel's stamp is on the wall clock; a lag past a second
			// is a clock stepped under the flow, not a wake-up.
			if lag := time.Since(t); lag >= 0 && lag < time.Second {
				rx = seen - lag
			}
		}
		s.mu.Lock()
		s.feedback++
		if rtt := s.cc.feedback(rx, seen, fb.sent, fb.held, fb.recv, fb.ce, fb.maxSeq); rtt > 0 {
			s.rttSum += rtt
			s.rttN++
		}
		s.mu.Unlock()
		select {
		case s.opened <- struct{}{}:
		default:
		}
	}
}

// feedbackMsg is a sink's feedback, decoded.
type feedbackMsg struct {
	sent, held       time.Duration
	recv, ce, maxSeq int64
}

// parseFeedback reads a feedback datagram for flow 1 with key; anything else is
// not one.
func parseFeedback(b []byte, key [udpFloodKeySize]byte) (feedbackMsg, bool) {
	if len(b) != udpFeedbackSize || subtle.ConstantTimeCompare(b[:udpFloodKeySize], key[:]) != 1 ||
		binary.BigEndian.Uint32(b[8:12]) != 1|udpControl || binary.BigEndian.Uint32(b[12:16]) != udpFeedback {
		return feedbackMsg{}, false
	}
	u := func(i int) int64 { return int64(min(binary.BigEndian.Uint64(b[i:i+8]), math.MaxInt64)) }
	return feedbackMsg{sent: time.Duration(u(16)), recv: u(24), ce: u(32), maxSeq: u(40), held: time.Duration(u(48))}, true
}

// appendFeedback is the sink's feedback for flow, answering a datagram that
// carried sent (its bytes 16..24, echoed as they came); the time the sink held it
// is 0 until setFeedbackHeld says.
func appendFeedback(b []byte, key [udpFloodKeySize]byte, flow uint32, sent []byte, recv, ce, maxSeq int64) []byte {
	b = append(b, key[:]...)
	b = binary.BigEndian.AppendUint32(b, flow|udpControl)
	b = binary.BigEndian.AppendUint32(b, udpFeedback)
	b = append(b, sent[:8]...)
	for _, v := range []int64{recv, ce, maxSeq, 0} {
		b = binary.BigEndian.AppendUint64(b, uint64(max(v, 0)))
	}
	return b
}

// setFeedbackHeld writes into a feedback the time from the kernel's receive stamp
// of the datagram it answers to now, just before it is sent.
func setFeedbackHeld(fb []byte, rx time.Time) {
	if held := time.Since(rx); len(fb) == udpFeedbackSize && held > 0 && held < time.Second {
		binary.BigEndian.PutUint64(fb[48:56], uint64(held))
	}
}

// send sends the flow's datagrams until end, each stamped with its send time,
// while the window has room, paced at the control's rate: each wakeup sends
// every datagram due by then (a debt past udpMaxDebt is forgiven, as the
// flood's is) that the window allows. A full window waits for feedback.
func (s *scalable) send(ctx context.Context, f *floodFlow, end time.Time) {
	f.conn.SetWriteDeadline(end)
	buf := make([]byte, s.cfg.size)
	copy(buf, s.fl.key[:])
	binary.BigEndian.PutUint32(buf[8:12], f.num|udpWantsFeedback)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := s.since()
	nextHello := next + udpHelloEvery
	for {
		now := s.since()
		if !s.epoch.Add(now).Before(end) || ctx.Err() != nil {
			return
		}
		if now >= nextHello {
			s.fl.hello(f)
			nextHello += udpHelloEvery
		}
		s.mu.Lock()
		s.cc.stalled(now)
		gap := time.Duration(8 * float64(s.cfg.size) / s.cc.rate() * float64(time.Second))
		s.mu.Unlock()
		next = max(next, now-udpMaxDebt)
		for next <= now {
			s.mu.Lock()
			open := s.cc.canSend()
			if open {
				s.cc.sent++
			}
			seq := s.cc.sent
			s.mu.Unlock()
			if !open {
				// The pace's schedule starts again when the window opens: a
				// datagram the window held back is not owed.
				next = now
				break
			}
			next += gap
			binary.BigEndian.PutUint32(buf[12:16], uint32(seq))
			binary.BigEndian.PutUint64(buf[16:24], uint64(s.since()))
			if _, err := f.conn.Write(buf); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
					return
				}
				// Counted sent all the same: the sequence number is used, and
				// the sink counts it lost, as a drop in this host's qdisc is.
				if !errors.Is(err, syscall.ECONNREFUSED) {
					f.failed++
					f.lastErr = err
				}
				continue
			}
			f.sent.Add(1)
		}
		wait := next - s.since()
		if next <= now {
			// A full window: until feedback comes, or the stall check is due.
			wait = scalableStall
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.opened:
		case <-ctx.Done():
			return
		}
	}
}

// sample emits the feedback's round trip and CE fraction since the last sample;
// a step with no feedback has neither.
func (s *scalable) sample(now time.Time) {
	s.mu.Lock()
	rttSum, rttN := s.rttSum, s.rttN
	dRecv, dCE := s.cc.recv-s.lastRecv, s.cc.ce-s.lastCE
	s.rttSum, s.rttN, s.lastRecv, s.lastCE = 0, 0, s.cc.recv, s.cc.ce
	dur := now.Sub(s.lastSample).Seconds()
	s.lastSample = now
	s.mu.Unlock()
	if dur <= 0 {
		return
	}
	t := unix(now)
	if rttN > 0 {
		s.fl.env.Emit(s.name+udpRTTSuffix, datafile.Sample{T: t, V: float64(rttSum) / float64(rttN) / float64(time.Millisecond), Dur: dur})
	}
	if dRecv > 0 {
		s.fl.env.Emit(s.name+udpCESuffix, datafile.Sample{T: t, V: 100 * float64(dCE) / float64(dRecv), Dur: dur})
	}
}
