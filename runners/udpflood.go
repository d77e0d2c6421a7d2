package runners

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/bloatbench/bloatbench/datafile"
	linux "golang.org/x/sys/unix"
)

// UDP flood, flent's udp_flood (iperf -u -b): flows of datagrams sent at a target
// rate, or as fast as the socket takes them, to a sink that counts what arrives.
// Unlike TCP, nothing backs off: a flood above the bottleneck's rate keeps its
// queue full and is what a qdisc must protect the other flows from, so the series
// are the receiver's rate, the sender's, and the loss between them.
//
// Wire format. Every datagram starts with a 16-byte header, integers big-endian:
//
//	0..8    key: the first 8 bytes of SHA-256(token)
//	8..12   flow number, from 1; the top bit set marks a control datagram
//	12..16  data: sequence number, from 1 per flow, wrapping at 2^32
//	        control: its type, 1 hello or 2 end
//	16..    data: zero padding up to the packet size
//	        hello: the flow's series name (UTF-8, at most 1024 bytes)
//	        end: 8 bytes, the number of data datagrams the flow sent
//
// The sink tells flows apart by source address and flow number (each flow has a
// socket of its own, so a qdisc that hashes flows sees them apart too). A flow's
// hello names its series: the sink is a background job that knows nothing of the
// floods that will come, as the TCP listener learns its streams' names from their
// hellos. The hello goes three times before the flood starts and once a second
// during it, so a hello a full queue dropped costs a second of the series, not the
// series. Data of a flow not named yet is counted all the same and goes into the
// first sample once the name comes. The end carries the count sent, so that the sink
// can say what was lost at the tail and in all; it goes a few times, spaced out
// while the queue the flood filled drains. A datagram with a wrong key is ignored.
//
// The 8-byte key (the rr runners use 16) keeps the header at 16 bytes, the
// smallest packet_size: 2^64 keys are past guessing by a stray sender.

// UDPFloodSeries is a flood's default series name, flent's udp_flood's.
const UDPFloodSeries = "UDP upload"

// Suffixes of a flow's series beside its receive rate (the series' own name).
const (
	udpSentSuffix = " sent"
	udpLossSuffix = " loss"
	udpTxSuffix   = " tx pps"
	udpRxSuffix   = " rx pps"
)

const (
	udpFloodKeySize = 8
	udpFloodHeader  = 16
	// DefaultUDPPacketSize is iperf2's UDP datagram (-l 1470), which flent's
	// udp_flood runs: 1470 + 8 (UDP) + 20 (IPv4) = 1498 fits a 1500-byte MTU, so no
	// datagram is fragmented, and flent's numbers compare with ours.
	DefaultUDPPacketSize = 1470
	// MaxUDPFloodFlows bounds a job's flows: each is a socket and a goroutine.
	MaxUDPFloodFlows = 1024
	// maxUDPBandwidth bounds a flow's target rate, bits/s: past it a typo (a G
	// for an M) is likelier than a wish.
	maxUDPBandwidth = 100e9
	maxUDPNameLen   = 1024
	// udpControl marks a control datagram in the flow field.
	udpControl = 1 << 31
	udpHello   = 1
	udpEnd     = 2
	// udpHelloEvery is how often a flow repeats its hello while it runs.
	udpHelloEvery = time.Second
	// udpMaxDebt bounds how far behind its schedule the pacer may fall and still
	// catch up, in time at the target rate: a flow the scheduler stalled for a
	// moment sends what it owes in one burst, but a stall of a second must not
	// become a second's worth of datagrams at once. 10 ms was too little: under the
	// race detector on 2 cores stalls past it cost a 50 Mbit/s flow 15% of its rate.
	udpMaxDebt = 100 * time.Millisecond
	// udpUnpacedBatch is how many datagrams an unlimited flow sends between looks
	// at the clock.
	udpUnpacedBatch = 64
	// udpSocketBuffer is the send and receive buffer the flood asks for. A
	// datagram waiting in a qdisc of the sender's own device is charged to its
	// socket: with the default buffer (net.core.wmem_default, 208 KiB of
	// truesize, about 90 full-size datagrams) the socket blocks before a 300 kB
	// bfifo is full, the flood is paced by the queue's drain and never overflows
	// it, and a flood that cannot overflow a queue tests nothing. SO_SNDBUFFORCE
	// (root, as the agents run) passes net.core.wmem_max; the kernel doubles what
	// it is given.
	udpSocketBuffer = 8 << 20
	// udpIdle is how long a flow may send nothing before the sink stops sampling
	// it: a sender whose end datagrams were all lost. A flow that comes back is
	// sampled again, its first sample covering the gap.
	udpIdle = 2 * time.Second
	// maxSinkFlows bounds the flows a sink keeps: only senders with the key make
	// one, but a sink must not grow without bound whatever they do.
	maxSinkFlows = 1 << 16
)

// udpEndGaps are the waits before each copy of a flow's end datagram, after its
// last data: the first may meet the queue the flood filled, the later ones find it
// draining (a 300 kB queue drains in 24 ms at 100 Mbit/s).
func udpEndGaps() []time.Duration {
	return []time.Duration{0, 10 * time.Millisecond, 15 * time.Millisecond, 25 * time.Millisecond}
}

// floodKey is the key a flood's datagrams carry: the first bytes of the RR
// requests' key (their header has room for half of it).
func floodKey(token string) [udpFloodKeySize]byte {
	full := tokenKey(token)
	var k [udpFloodKeySize]byte
	copy(k[:], full[:])
	return k
}

// ParseBandwidth reads a target rate as iperf's -b writes it: bits per second, a
// number with an optional k, M or G (either case, powers of 1000). "" and "0" are
// 0: unlimited.
func ParseBandwidth(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	mult := 1.0
	switch s[len(s)-1] {
	case 'k', 'K':
		mult = 1e3
	case 'm', 'M':
		mult = 1e6
	case 'g', 'G':
		mult = 1e9
	}
	num := s
	if mult != 1 {
		num = s[:len(s)-1]
	}
	// Digits and one point only: ParseFloat would take "inf", "1e9" and hex.
	dots := 0
	for _, r := range num {
		if r == '.' {
			dots++
		} else if r < '0' || r > '9' {
			dots = 2
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if num == "" || num == "." || dots > 1 || err != nil {
		return 0, fmt.Errorf("bandwidth %q: want bits/s, a number with an optional k, M or G (200M), or 0 for unlimited", s)
	}
	v *= mult
	if v > maxUDPBandwidth {
		return 0, fmt.Errorf("bandwidth %q is past %gG per flow", s, maxUDPBandwidth/1e9)
	}
	return v, nil
}

// rateParam is a bandwidth written as a string or a number (bandwidth: 1000000).
type rateParam = textParam

// floodParams are a udp-flood job's parameters; a pointer tells a 0 written from
// one left out.
type floodParams struct {
	Series     string       `json:"series,omitempty"`
	Flows      *wholeNumber `json:"flows,omitempty"`
	Bandwidth  rateParam    `json:"bandwidth,omitempty"`
	PacketSize *wholeNumber `json:"packet_size,omitempty"`
	TOS        tosParam     `json:"tos,omitempty"`
	// ECN is the codepoint the datagrams carry (notect, ect0, ect1, ce): an
	// unresponsive ECT(1) flood is what overloads an L4S queue.
	ECN textParam `json:"ecn,omitempty"`
}

// floodConfig is a udp-flood job's parameters resolved.
type floodConfig struct {
	series  string
	flows   int
	bps     float64 // per flow; 0: unlimited
	size    int
	tos     int    // -1: unmarked; the ECN field included
	marking string // as the series record it
}

// resolve checks p and fills in the defaults; the controller and the agent both
// resolve, as for the rr runners.
func (p floodParams) resolve() (floodConfig, error) {
	c := floodConfig{series: p.Series, flows: 1, size: DefaultUDPPacketSize, tos: -1}
	if c.series == "" {
		c.series = UDPFloodSeries
	}
	if len(c.series) > maxUDPNameLen-16 || !utf8.ValidString(c.series) {
		return floodConfig{}, fmt.Errorf("series %.40q...: want valid UTF-8 of at most %d bytes", c.series, maxUDPNameLen-16)
	}
	if p.Flows != nil {
		if n := int(*p.Flows); n < 1 || n > MaxUDPFloodFlows {
			return floodConfig{}, fmt.Errorf("flows is %d: want 1 to %d", n, MaxUDPFloodFlows)
		}
		c.flows = int(*p.Flows)
	}
	bps, err := ParseBandwidth(string(p.Bandwidth))
	if err != nil {
		return floodConfig{}, err
	}
	c.bps = bps
	if p.PacketSize != nil {
		if n := int(*p.PacketSize); n < udpFloodHeader || n > MaxUDPRRSize {
			return floodConfig{}, fmt.Errorf("packet_size is %d: want %d (the header) to %d bytes", n, udpFloodHeader, MaxUDPRRSize)
		}
		c.size = int(*p.PacketSize)
	}
	v, label, err := marking(string(p.TOS), string(p.ECN))
	if err != nil {
		return floodConfig{}, err
	}
	c.tos, c.marking = v, label
	return c, nil
}

// params is what the controller hands the agent: every value spelled out.
func (c floodConfig) params() floodParams {
	flows, size := wholeNumber(c.flows), wholeNumber(c.size)
	p := floodParams{Series: c.series, Flows: &flows, PacketSize: &size,
		Bandwidth: rateParam(strconv.FormatFloat(c.bps, 'f', -1, 64))}
	if c.tos >= 0 {
		p.TOS = tosParam(strconv.Itoa(c.tos))
	}
	return p
}

// names are the flows' series names: the series itself for one flow, flent's
// "NAME::N" for several.
func (c floodConfig) names() []string {
	if c.flows == 1 {
		return []string{c.series}
	}
	out := make([]string, c.flows)
	for i := range out {
		out[i] = fmt.Sprintf("%s::%d", c.series, i+1)
	}
	return out
}

// udpSinkKind counts the datagrams of udp-flood jobs on a port of its Target.
var udpSinkKind = Kind{
	Background: true,
	Plan:       planNone("udp-sink"),
	Start: startNone("udp-sink", func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		s, err := listenSink(ctx, spec, env)
		if err != nil {
			return nil, Started{}, err
		}
		return JobFunc(s.run), Started{Port: s.port,
			Message: fmt.Sprintf("counting UDP flood datagrams on port %d (receive buffer %d bytes)", s.port, s.rcvbuf)}, nil
	}),
}

// udpSink is a started udp-sink job.
type udpSink struct {
	pc     *net.UDPConn
	port   int
	rcvbuf int
	key    [udpFloodKeySize]byte
	spec   JobSpec
	env    Env
	mu     sync.Mutex
	flows  map[sinkKey]*sinkFlow
	// full counts datagrams of flows past maxSinkFlows, for the end's warning.
	full int64
	// drops is the socket's own drop count (its receive buffer full), as last read
	// at a step: the socket may be closed by the time the sink finishes.
	drops uint32
	// declare emits a sample of a series the sink found (a codepoint's rate).
	declare func(datafile.Series, datafile.Sample)
	// sentTOS is the TOS byte its clients mark with (-1 unmarked), where they all
	// say the same: what the census holds the arrivals to.
	sentTOS   int
	sentKnown bool
}

// sinkKey is a flow: its sender's socket and its number.
type sinkKey struct {
	from netip.AddrPort
	flow uint32
}

// sinkFlow is what the sink knows of a flow. The receiving loop writes it and the
// sampler reads it, both under the sink's lock.
type sinkFlow struct {
	name string // "" until its hello comes
	// Since the last sample.
	pkts, bytes int64
	last        time.Time // the last sample's time, or the first data datagram's
	prevMax     uint64    // maxSeq at the last sample
	// The whole flow.
	maxSeq    uint64 // highest sequence number seen, unwrapped past 2^32
	seq32     uint32 // maxSeq as the wire has it, to unwrap the next one
	started   bool   // a data datagram has come
	lastRx    time.Time
	total     int64  // data datagrams received
	reordered int64  // ones that came after a later one
	sent      uint64 // the end's count; 0 until it comes
	ended     bool
	// ecn counts data datagrams by the codepoint they arrived with: since the
	// last sample, and the whole flow.
	ecn, ecnAll ecnCensus
	// mark is the TOS byte the flow's feedback carries: its data's as last
	// seen not CE-marked (so the flow's own codepoint, ECT(1) for an L4S
	// flow), -1 until one comes.
	mark int
}

func listenSink(ctx context.Context, spec JobSpec, env Env) (*udpSink, error) {
	var lc net.ListenConfig
	lc.Control = func(_, _ string, rc syscall.RawConn) error {
		// A bigger receive buffer keeps a burst from being lost in the sink's own
		// socket, which would be counted as the path's loss; best effort.
		setBuffer(rc, syscall.SO_RCVBUFFORCE, syscall.SO_RCVBUF, udpSocketBuffer)
		recvTOS(rc)
		if scalableClients(spec.Clients) {
			recvStamps(rc)
		}
		return nil
	}
	pc, err := lc.ListenPacket(ctx, "udp", net.JoinHostPort(spec.Target, "0"))
	if err != nil {
		return nil, fmt.Errorf("udp-sink: listen on UDP %s: %w", spec.Target, err)
	}
	c := pc.(*net.UDPConn)
	s := &udpSink{pc: c, port: c.LocalAddr().(*net.UDPAddr).Port, key: floodKey(spec.Token), spec: spec, env: env,
		flows: map[sinkKey]*sinkFlow{}, declare: declaring(env)}
	s.sentTOS, s.sentKnown = clientsTOS(spec.Clients)
	if rc, err := c.SyscallConn(); err == nil {
		s.rcvbuf = getBuffer(rc, syscall.SO_RCVBUF)
	}
	return s, nil
}

// setBuffer sets a socket buffer: force (SO_SNDBUFFORCE, SO_RCVBUFFORCE) passes the
// system's maximum but needs CAP_NET_ADMIN; plain is capped at the maximum.
func setBuffer(rc syscall.RawConn, force, plain, size int) {
	rc.Control(func(fd uintptr) {
		if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, force, size) != nil {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, plain, size)
		}
	})
}

// getBuffer is a socket buffer's size as the kernel has it (doubled), 0 if unknown.
func getBuffer(rc syscall.RawConn, opt int) int {
	v := 0
	rc.Control(func(fd uintptr) {
		v, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, opt)
	})
	return v
}

// run receives and samples until ctx ends.
func (s *udpSink) run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.pc.Close() })
	defer stop()
	recvErr := make(chan error, 1)
	go func() { recvErr <- s.receive(ctx) }()
	step := s.spec.Step
	if step <= 0 {
		step = 0.2 // as the other samplers do
	}
	onSteps(ctx, startTime(s.spec.Start), time.Time{}, step, recvErr, s.tick)
	if drops, ok := socketDrops(s.pc); ok { // unless ctx's end closed it first
		s.mu.Lock()
		s.drops = drops
		s.mu.Unlock()
	}
	s.pc.Close()
	err := <-recvErr
	s.finish(time.Now())
	return err
}

// receive counts datagrams until the socket is closed.
func (s *udpSink) receive(ctx context.Context) error {
	buf, oob, reply := make([]byte, 1<<16), make([]byte, 128), make([]byte, 0, udpFeedbackSize)
	// The socket's TOS, set when a feedback needs another.
	curTOS, curV4 := -1, false
	for {
		n, oobn, _, from, err := s.pc.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("udp-sink: receive: %w", err)
		}
		if n < udpFloodHeader || subtle.ConstantTimeCompare(buf[:udpFloodKeySize], s.key[:]) != 1 {
			continue // not one of ours
		}
		if fb, mark := s.take(time.Now(), from, buf[:n], rxTOS(oob[:oobn]), reply[:0]); len(fb) > 0 {
			if rx, ok := rxStamp(oob[:oobn]); ok {
				setFeedbackHeld(fb, rx)
			}
			if v4 := isV4(from.Addr()); mark >= 0 && (mark != curTOS || v4 != curV4) {
				// Unmarked when it cannot be set: the feedback still counts.
				if setTOS(s.pc, v4, mark) == nil {
					curTOS, curV4 = mark, v4
				}
			}
			// A failed send is a lost feedback, which the sender survives.
			s.pc.WriteToUDPAddrPort(fb, from)
		}
	}
}

// scalableClients says whether a udp-scalable flow sends to the sink: its
// feedback says how long the sink held each datagram, from the kernel's receive
// stamp, which a flood's receiver need not pay for.
func scalableClients(clients []Client) bool {
	return slices.ContainsFunc(clients, func(c Client) bool { return c.Kind == "udp-scalable" })
}

// clientsTOS is the TOS byte the sink's udp-flood and udp-scalable clients mark
// with, when they agree (-1: unmarked); ok is false when they do not or none
// says.
func clientsTOS(clients []Client) (tos int, ok bool) {
	for _, c := range clients {
		var ctos int
		var err error
		switch c.Kind {
		case "udp-flood":
			ctos, err = resolvedTOS[floodParams](c.Params)
		case "udp-scalable":
			ctos, err = resolvedTOS[scalableParams](c.Params)
		default:
			continue
		}
		if err != nil {
			return 0, false
		}
		if ok && ctos != tos {
			return 0, false
		}
		tos, ok = ctos, true
	}
	return tos, ok
}

// resolvedTOS is the TOS byte a udp-sink client's parameters resolve to.
func resolvedTOS[P interface{ tosOf() (int, error) }](raw json.RawMessage) (int, error) {
	var p P
	if err := decodeRaw(raw, &p); err != nil {
		return 0, err
	}
	return p.tosOf()
}

func (p floodParams) tosOf() (int, error) {
	c, err := p.resolve()
	return c.tos, err
}

func (p scalableParams) tosOf() (int, error) {
	c, err := p.resolve()
	return c.tos, err
}

// ecnSeriesSuffix ends the series of a flow's datagrams that arrived with a
// codepoint, per second: "UDP upload CE marks", "UDP upload rx ECT(1) pps".
func ecnSeriesSuffix(cp int) string {
	if cp == ECNCE {
		return " CE marks"
	}
	return " rx " + ECNName(cp) + " pps"
}

// take counts one datagram with the right key; tos is the byte it arrived with
// (-1: the kernel did not say). For a scalable flow's data it returns the
// feedback to send back, appended to fb (udpscalable.go): for every second
// datagram and every CE-marked one; and the TOS byte to mark it with (-1:
// none known). The feedback carries its flow's DSCP and codepoint, as a probe's
// reply carries its request's: what sorts the flow's packets by their marks (an
// L4S queue, a path's netem for the L4S packets) then sorts its feedback alike.
func (s *udpSink) take(now time.Time, from netip.AddrPort, d []byte, tos int, fb []byte) ([]byte, int) {
	flow := binary.BigEndian.Uint32(d[8:12])
	k := sinkKey{from: from, flow: flow &^ (udpControl | udpWantsFeedback)}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flows[k]
	if f == nil {
		if len(s.flows) >= maxSinkFlows {
			s.full++
			return nil, -1
		}
		f = &sinkFlow{mark: -1}
		s.flows[k] = f
	}
	if f.ended {
		return nil, -1 // a late copy of its end, or data that came after it
	}
	f.lastRx = now
	if flow&udpControl != 0 {
		// A control datagram is no data: a flow's first interval starts with its
		// first datagram of data, not with a hello sent before the flood began.
		switch binary.BigEndian.Uint32(d[12:16]) {
		case udpHello:
			if name := string(d[udpFloodHeader:]); f.name == "" && name != "" && len(name) <= maxUDPNameLen && utf8.ValidString(name) {
				f.name = name
			}
		case udpEnd:
			if len(d) >= udpFloodHeader+8 {
				f.sent = binary.BigEndian.Uint64(d[16:24])
				// Datagrams lost at the tail are past the highest number seen.
				f.maxSeq = max(f.maxSeq, f.sent)
				s.sample(f, now, true)
				f.ended = true
				s.summary(k, f)
			}
		}
		return nil, -1
	}
	seq := binary.BigEndian.Uint32(d[12:16])
	switch {
	case !f.started:
		f.started, f.maxSeq, f.seq32, f.last = true, uint64(seq), seq, now
	default:
		// Serial number arithmetic: a step forward of less than 2^31 is new.
		if d := int32(seq - f.seq32); d > 0 {
			f.maxSeq += uint64(d)
			f.seq32 = seq
		} else if d < 0 {
			f.reordered++
		}
	}
	f.pkts++
	f.bytes += int64(len(d))
	f.total++
	f.ecn.add(tos)
	f.ecnAll.add(tos)
	if tos >= 0 && tos&ecnMask != ECNCE {
		f.mark = tos
	}
	// Feedback only as big as what it answers, so that the sink amplifies nothing.
	ce := tos >= 0 && tos&ecnMask == ECNCE
	if flow&udpWantsFeedback == 0 || len(d) < udpFeedbackSize || f.total%2 == 1 && !ce {
		return nil, -1
	}
	return appendFeedback(fb, s.key, k.flow, d[16:24], f.total, f.ecnAll[ECNCE], int64(min(f.maxSeq, math.MaxInt64))), f.mark
}

// tick samples every flow at now.
func (s *udpSink) tick(now time.Time) {
	drops, ok := socketDrops(s.pc)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.drops = drops
	}
	for _, f := range s.flows {
		if !f.ended && now.Sub(f.lastRx) < udpIdle {
			s.sample(f, now, false)
		}
	}
}

// sample emits a flow's interval since its last sample: the receive rate, the
// packet rate, and the share of the datagrams sent in it that did not come: the
// sink cannot know what was sent, but the sequence numbers say how far the sender
// got (the highest seen now less the highest seen at the last sample). A datagram
// late from the interval before counts in this one, so the loss is clamped to
// 0..100%; an interval in which nothing new came says nothing of loss, and the next
// one that does takes the whole gap. A flow not named yet is not sampled: its
// counts wait for its name.
//
// An interval shorter than half a step gives no rates: the flood's first datagram
// comes a hair before the step at which it starts, and its end a hair after the
// last, and a rate over a millisecond says nothing (a few datagrams read as 90
// Mbit/s, none as 0). Such an interval's counts go into the next one; at the
// flow's end (final) there is no next, and only its loss is sampled: the
// datagrams lost at the tail.
func (s *udpSink) sample(f *sinkFlow, now time.Time, final bool) {
	dur := now.Sub(f.last).Seconds()
	step := s.spec.Step
	if step <= 0 {
		step = 0.2
	}
	short := dur < step/2
	if f.name == "" || !f.started || dur <= 0 || short && !final {
		return
	}
	t := unix(now)
	if !short {
		s.env.Emit(f.name, sampleOf(now, dur, f.bytes))
		s.env.Emit(f.name+udpRxSuffix, datafile.Sample{T: t, V: float64(f.pkts) / dur, Dur: dur})
		// Each codepoint the flow has arrived with, from the step it first came
		// on: a qdisc's CE marks per second, what an L4S sender reacts to.
		for cp, n := range f.ecnAll {
			if n > 0 {
				se := datafile.Series{Name: f.name + ecnSeriesSuffix(cp), Kind: datafile.KindUDP, Units: "packets/s", Host: s.spec.Host}
				s.declare(se, datafile.Sample{T: t, V: float64(f.ecn[cp]) / dur, Dur: dur})
			}
		}
		f.ecn = ecnCensus{}
	}
	if expected := f.maxSeq - f.prevMax; expected > 0 {
		loss := 100 * (1 - float64(f.pkts)/float64(expected))
		s.env.Emit(f.name+udpLossSuffix, datafile.Sample{T: t, V: math.Min(100, math.Max(0, loss)), Dur: dur})
	}
	f.pkts, f.bytes, f.prevMax, f.last = 0, 0, f.maxSeq, now
}

// summary warns what a flow came to, once it has ended or the sink stops.
func (s *udpSink) summary(k sinkKey, f *sinkFlow) {
	if s.env.Warn == nil || f.name == "" && f.total == 0 {
		return
	}
	name := f.name
	if name == "" {
		name = fmt.Sprintf("flow %d (its hello never came, so it has no series)", k.flow)
	}
	sent, how := f.sent, "sent"
	if !f.ended {
		sent, how = f.maxSeq, "sent at least (its end never came)"
	}
	lost := max(int64(sent)-f.total, 0)
	pct := 0.0
	if sent > 0 {
		pct = 100 * float64(lost) / float64(sent)
	}
	census := ""
	if f.ecnAll.total() > 0 {
		census = "; they arrived " + f.ecnAll.String()
	}
	s.env.Warn(fmt.Sprintf("udp-sink %s from %s: %d datagrams %s, %d received, %d lost (%.1f%%), %d out of order%s",
		name, k.from, sent, how, f.total, lost, pct, f.reordered, census))
	if s.sentKnown {
		if n := f.ecnAll.remarked(max(s.sentTOS, 0)); n > 0 {
			s.env.Warn(fmt.Sprintf("udp-sink %s from %s: sent %s, and %d of %d datagrams arrived %s: the path bleached or re-marked their ECN field",
				name, k.from, ECNName(max(s.sentTOS, 0)), n, f.ecnAll.total(), f.ecnAll))
		}
	}
}

// finish samples the flows that never ended and says what each came to, in a
// stable order.
func (s *udpSink) finish(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]sinkKey, 0, len(s.flows))
	for k, f := range s.flows {
		if !f.ended {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if c := keys[i].from.Compare(keys[j].from); c != 0 {
			return c < 0
		}
		return keys[i].flow < keys[j].flow
	})
	for _, k := range keys {
		f := s.flows[k]
		if now.Sub(f.lastRx) < udpIdle {
			s.sample(f, now, true)
		}
		s.summary(k, f)
	}
	if s.full > 0 && s.env.Warn != nil {
		s.env.Warn(fmt.Sprintf("udp-sink: %d datagrams ignored: more than %d flows", s.full, maxSinkFlows))
	}
	if s.drops > 0 && s.env.Warn != nil {
		s.env.Warn(fmt.Sprintf("udp-sink: %d datagrams dropped by this host's own receive buffer (%d bytes), counted as lost above: "+
			"lost at the receiver, not on the path", s.drops, s.rcvbuf))
	}
}

// socketDrops is the kernel's count of datagrams a socket dropped because its
// receive buffer was full (SO_MEMINFO's SK_MEMINFO_DROPS): loss at the sink that
// the sequence numbers alone would put on the path.
func socketDrops(c *net.UDPConn) (uint32, bool) {
	if c == nil {
		return 0, false
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info [skMeminfoVars]uint32
	var errno syscall.Errno
	rc.Control(func(fd uintptr) {
		size := uint32(unsafe.Sizeof(info))
		_, _, errno = syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.SOL_SOCKET, linux.SO_MEMINFO,
			uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&size)), 0)
	})
	if errno != 0 {
		return 0, false
	}
	return info[skMeminfoDrops], true
}

// SK_MEMINFO_DROPS and SK_MEMINFO_VARS of linux/sock_diag.h (x/sys/unix has only
// SO_MEMINFO).
const skMeminfoDrops, skMeminfoVars = 8, 9

// onSteps calls sample at start + k*step for k = 1, 2, ... before end (for ever
// when end is zero), each computed from the start so that the samples never drift
// off the run's grid; a tick already past when the one before it was taken is taken
// at once, and one past before the job began is skipped. It returns when the next
// tick would be at or past end, when ctx ends, or when stop delivers (it puts the
// value back for the caller).
func onSteps(ctx context.Context, start, end time.Time, step float64, stop chan error, sample func(now time.Time)) {
	g := newStepGrid(start, step, 1, true).until(end, false)
	defer g.close()
	for {
		now, ev, err := g.wait(ctx, stop)
		switch ev {
		case stepTick:
			sample(now)
			continue
		case stepStop:
			stop <- err
		}
		return
	}
}

// udpFloodKind sends flows to a udp-sink job, which it names with connect:.
var udpFloodKind = Kind{
	Plan: planWith(func(p floodParams, pl *Planner) (any, []datafile.Series, error) {
		c, err := p.resolve()
		if err != nil {
			return nil, nil, err
		}
		series, err := udpFlowSeries(pl, c.names(), c.marking, "")
		if err != nil {
			return nil, nil, err
		}
		return c.params(), series, nil
	}),
	Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		var p floodParams
		if err := decodeRaw(spec.Params, &p); err != nil {
			return nil, Started{}, fmt.Errorf("udp-flood: %w", err)
		}
		c, err := p.resolve()
		if err != nil {
			return nil, Started{}, fmt.Errorf("udp-flood: %w", err)
		}
		if err := checkSinkSpec("udp-flood", spec); err != nil {
			return nil, Started{}, err
		}
		fl := &flood{cfg: c, spec: spec, env: env, key: floodKey(spec.Token)}
		rate := "unlimited"
		if c.bps > 0 {
			rate = fmt.Sprintf("%g Mbit/s", c.bps/1e6)
		}
		return JobFunc(fl.run), Started{Message: fmt.Sprintf("UDP flood: %d flow(s) at %s each, %d-byte datagrams",
			c.flows, rate, c.size)}, nil
	},
}

// udpFlowSeries claims and returns the series of flows sent to a udp-sink, a
// flow number each: the receiver measures what arrives and what was lost (the
// peer), the sender what it sent (this host); a scalable flow (cc "scalable")
// also the feedback's round trip and CE fraction.
func udpFlowSeries(pl *Planner, names []string, marking, cc string) ([]datafile.Series, error) {
	kinds := []struct{ suffix, units, host string }{
		{"", "Mbits/s", datafile.HostPeer},
		{udpSentSuffix, "Mbits/s", ""},
		{udpLossSuffix, "%", datafile.HostPeer},
		{udpTxSuffix, "packets/s", ""},
		{udpRxSuffix, "packets/s", datafile.HostPeer},
	}
	if cc == "scalable" {
		kinds = append(kinds, struct{ suffix, units, host string }{udpRTTSuffix, "ms", ""},
			struct{ suffix, units, host string }{udpCESuffix, "%", ""})
	}
	var series []datafile.Series
	for _, name := range names {
		flow := pl.Next(datafile.KindUDP)
		for _, k := range kinds {
			se := datafile.Series{Name: name + k.suffix, Kind: datafile.KindUDP, Units: k.units, Host: k.host,
				Direction: Upload, Flow: flow, Marking: marking, CC: cc}
			if err := pl.Claim(se.Name); err != nil {
				return nil, err
			}
			series = append(series, se)
		}
	}
	return series, nil
}

// checkSinkSpec checks what a sender of kind needs of its spec: a udp-sink's
// address to send to, and a duration.
func checkSinkSpec(kind string, spec JobSpec) error {
	if spec.Addr == "" {
		return fmt.Errorf("%s: no udp-sink to send to (the job needs connect:)", kind)
	}
	if _, port, err := net.SplitHostPort(spec.Addr); err != nil {
		return fmt.Errorf("%s: sink address %q: %w", kind, spec.Addr, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%s: sink address %q: port %q is not a port number", kind, spec.Addr, port)
	}
	if spec.Duration <= 0 {
		return fmt.Errorf("%s: duration is %gs: a flow runs for a time", kind, spec.Duration)
	}
	return nil
}

// flood is a started udp-flood job.
type flood struct {
	cfg  floodConfig
	spec JobSpec
	env  Env
	key  [udpFloodKeySize]byte
}

// floodFlow is one flow: its socket and counts. sent is read by the sampler while
// the flow sends; the rest is the flow's goroutine's until it is done.
type floodFlow struct {
	num     uint32
	name    string
	conn    *net.UDPConn
	sent    atomic.Int64
	failed  int64
	lastErr error
	// The sampler's alone.
	last     time.Time
	lastSent int64
}

// run opens every flow's socket, floods from the start for the duration, samples
// what the flows sent at every step of the run's grid, and says what each came to.
func (fl *flood) run(ctx context.Context) error {
	start := startTime(fl.spec.Start)
	end := start.Add(time.Duration(fl.spec.Duration * float64(time.Second)))
	var flows []*floodFlow
	defer func() {
		for _, f := range flows {
			f.conn.Close()
		}
	}()
	for i, name := range fl.cfg.names() {
		c, err := fl.dial(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("udp-flood %s: %w", name, err)
		}
		flows = append(flows, &floodFlow{num: uint32(i + 1), name: name, conn: c, last: start})
	}
	if rc, err := flows[0].conn.SyscallConn(); err == nil && fl.env.Warn != nil {
		if got := getBuffer(rc, syscall.SO_SNDBUF); got < udpSocketBuffer {
			fl.env.Warn(fmt.Sprintf("udp-flood %s: the send buffer is %d bytes, not %d (SO_SNDBUFFORCE needs root): "+
				"a queue of this host's own device holding more than that is not overflowed, the socket waits instead",
				fl.cfg.series, got, udpSocketBuffer))
		}
	}
	// Closing the sockets is what stops a send blocked on a full buffer.
	stop := context.AfterFunc(ctx, func() {
		for _, f := range flows {
			f.conn.Close()
		}
	})
	defer stop()
	// The hellos go ahead of the data, three times, while the path is quiet.
	for range 3 {
		for _, f := range flows {
			fl.hello(f)
		}
		if sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) != nil {
			return nil
		}
	}
	if sleepUntil(ctx, start) != nil {
		return nil
	}
	var data, ends sync.WaitGroup
	dataDone := make(chan error, 1)
	for _, f := range flows {
		data.Add(1)
		ends.Go(func() {
			fl.send(ctx, f, start, end)
			data.Done()
			fl.end(ctx, f)
		})
	}
	go func() { data.Wait(); dataDone <- nil }()
	step := fl.spec.Step
	if step <= 0 {
		step = 0.2
	}
	sample := func(now time.Time) {
		for _, f := range flows {
			fl.sample(f, now)
		}
	}
	// Ticks inside the flood; the last sample, at its end, waits for the flows to
	// stop so that nothing they sent falls after it.
	onSteps(ctx, start, end, step, dataDone, sample)
	select {
	case <-dataDone:
	case <-ctx.Done():
	}
	sample(time.Now())
	ends.Wait()
	if ctx.Err() != nil {
		return nil
	}
	var errs []error
	for _, f := range flows {
		if f.failed > 0 && fl.env.Warn != nil {
			fl.env.Warn(fmt.Sprintf("udp-flood %s: %d sends failed and were not counted sent (last: %v)", f.name, f.failed, f.lastErr))
		}
		if f.sent.Load() == 0 && f.failed > 0 {
			errs = append(errs, fmt.Errorf("udp-flood %s: no datagram could be sent: %w", f.name, f.lastErr))
		}
	}
	return errors.Join(errs...)
}

// dial opens a flow's socket to the sink, marked and with a send buffer that lets
// the flood overflow a queue of this host's own device.
func (fl *flood) dial(ctx context.Context) (*net.UDPConn, error) {
	tos := fl.cfg.tos
	d := net.Dialer{Control: func(network, _ string, rc syscall.RawConn) error {
		setBuffer(rc, syscall.SO_SNDBUFFORCE, syscall.SO_SNDBUF, udpSocketBuffer)
		if tos >= 0 {
			return setTOSRaw(rc, strings.HasSuffix(network, "4"), tos)
		}
		return nil
	}}
	c, err := d.DialContext(ctx, "udp", fl.spec.Addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", fl.spec.Addr, err)
	}
	return c.(*net.UDPConn), nil
}

// control sends a control datagram of type typ with body; a failure is the same
// as a loss on the way, which the sink survives.
func (fl *flood) control(f *floodFlow, typ uint32, body []byte) {
	b := make([]byte, udpFloodHeader, udpFloodHeader+len(body))
	copy(b, fl.key[:])
	binary.BigEndian.PutUint32(b[8:12], f.num|udpControl)
	binary.BigEndian.PutUint32(b[12:16], typ)
	f.conn.Write(append(b, body...))
}

func (fl *flood) hello(f *floodFlow) { fl.control(f, udpHello, []byte(f.name)) }

// end tells the sink the flow is done and how many datagrams it sent.
func (fl *flood) end(ctx context.Context, f *floodFlow) {
	var body [8]byte
	binary.BigEndian.PutUint64(body[:], uint64(f.sent.Load()))
	// The data's deadline has passed: these sends must not fail on it.
	f.conn.SetWriteDeadline(time.Time{})
	for _, gap := range udpEndGaps() {
		if sleepUntil(ctx, time.Now().Add(gap)) != nil {
			return
		}
		fl.control(f, udpEnd, body[:])
	}
}

// send floods from start until end. Paced, datagram i (from 0) is due at start +
// i x size/rate: each wakeup sends every datagram due by then, so the rate holds
// however coarse the sleeps (at 200 Mbit/s a datagram is due every 59 us, far
// finer than a sleep can be trusted to be); a debt past udpMaxDebt is forgiven
// rather than sent in one burst. Unlimited, it sends as fast as the socket takes
// datagrams. What the socket accepted counts as sent, as iperf counts it, even if
// a full qdisc of this host then drops it (UDP reports that only with IP_RECVERR,
// which is not set): that is the flood meeting the bottleneck, and the sink counts
// it lost. A send that fails is not counted, and its sequence number is used again.
func (fl *flood) send(ctx context.Context, f *floodFlow, start, end time.Time) {
	f.conn.SetWriteDeadline(end)
	buf := make([]byte, fl.cfg.size)
	copy(buf, fl.key[:])
	binary.BigEndian.PutUint32(buf[8:12], f.num)
	pps := fl.cfg.bps / float64(8*fl.cfg.size)
	maxDebt := int64(math.Max(1, pps*udpMaxDebt.Seconds()))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var released int64 // datagrams the pacer has let go, sent or failed
	nextHello := start.Add(udpHelloEvery)
	for {
		now := time.Now()
		if !now.Before(end) || ctx.Err() != nil {
			return
		}
		if !now.Before(nextHello) {
			fl.hello(f)
			nextHello = nextHello.Add(udpHelloEvery)
		}
		n := int64(udpUnpacedBatch)
		if pps > 0 {
			due := int64(now.Sub(start).Seconds()*pps) + 1
			released = max(released, due-maxDebt)
			n = due - released
			if n <= 0 {
				next := start.Add(time.Duration(float64(released) / pps * float64(time.Second)))
				timer.Reset(time.Until(next))
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
				continue
			}
		}
		for range n {
			released++
			binary.BigEndian.PutUint32(buf[12:16], uint32(f.sent.Load()+1))
			if _, err := f.conn.Write(buf); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
					return
				}
				f.failed++
				f.lastErr = err
				continue
			}
			f.sent.Add(1)
		}
	}
}

// sample emits what a flow sent since its last sample.
func (fl *flood) sample(f *floodFlow, now time.Time) {
	dur := now.Sub(f.last).Seconds()
	if dur <= 0 {
		return
	}
	n := f.sent.Load()
	d := n - f.lastSent
	fl.env.Emit(f.name+udpSentSuffix, sampleOf(now, dur, d*int64(fl.cfg.size)))
	fl.env.Emit(f.name+udpTxSuffix, datafile.Sample{T: unix(now), V: float64(d) / dur, Dur: dur})
	f.last, f.lastSent = now, n
}
