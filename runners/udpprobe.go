package runners

import (
	"context"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	linux "golang.org/x/sys/unix"

	"github.com/bloatbench/bloatbench/datafile"
)

// UDP latency probes, irtt's kind: a probe every interval from the client to an
// echo job on the server, each answered with the server's own receive and send
// times, so that a round trip splits into its two one-way delays (which way the
// queue is in), and the server's time between the two is left out of the RTT. It
// goes beside or instead of ICMP ping in any test: UDP is what a qdisc classifies
// like the traffic it protects (ICMP may be prioritised or rate-limited on a path),
// and it can be marked with a DSCP.
//
// Wire format. Integers big-endian, times Unix nanoseconds.
//
// Request, size bytes (udpProbeHeader to MaxUDPRRSize):
//
//	0..16   MAC: HMAC-SHA256 keyed by the run's secret over the client's address
//	        as the server sees it, bytes 16..40 and the request's size, its first
//	        16 bytes (probeMAC): a request recorded off the link is answered to
//	        its own sender only, and never at another size
//	16..24  sequence number: the probe's index from the start, k
//	24..32  client send time, its clock, taken just before sendto (informational:
//	        the client keeps its own, the kernel's where it has it)
//	32      TOS byte the server marks its reply with (0: unmarked)
//	33..40  zero
//	40..    zero padding up to size
//
// Reply, exactly as long as its request (so both ways carry the same bytes, and a
// reply of another length is not one):
//
//	0..8    the request's sequence number
//	8..16   server receive time: the kernel's receive stamp of the request where
//	        the socket gets one (SO_TIMESTAMPING), else user space after recvmsg
//	16..24  server send time: user space, just before sendto
//	24..32  how many valid requests the server has received from this client
//	        (address and port) so far, this one included: what tells loss on the
//	        way up from loss on the way down
//	32      flags: bit 0 set when the receive time is the kernel's, bit 1 when
//	        byte 33 holds the request's TOS byte as it arrived
//	33      the request's TOS byte as it arrived (IP_RECVTOS): its ECN field says
//	        whether the way up kept, bleached or CE-marked the probe's codepoint;
//	        zero without bit 1
//	34..40  zero
//	40..    zero padding
//
// A request with a wrong MAC, a bad size or non-zero reserved bytes gets no answer.

// UDPProbeSeries is the default base of a probe job's series names.
const UDPProbeSeries = "UDP probe"

// Suffixes of the three series of a probe job.
const (
	udpProbeRTTSuffix  = " RTT"
	udpProbeUpSuffix   = " up"
	udpProbeDownSuffix = " down"
)

const (
	// udpProbeHeader is the length of a request's and a reply's header: the
	// smallest size.
	udpProbeHeader = 40
	// DefaultUDPProbeSize is the default request and reply payload. 56 bytes, not
	// irtt's or a round 64: a 56-byte UDP payload makes an 84-byte IPv4 packet,
	// exactly the ping kind's default echo (56 bytes of data behind an 8-byte ICMP
	// header, as UDP's is 8 bytes), so both probes take the same time to serialise
	// at a slow bottleneck and their RTTs compare with no size correction.
	DefaultUDPProbeSize = 56
	// udpProbeKernelRX is the reply's flag for a kernel receive stamp.
	udpProbeKernelRX = 1
	// udpProbeRxTOS is the reply's flag for the request's TOS byte as it arrived.
	udpProbeRxTOS = 2
	// maxEchoClients bounds the clients an echo job counts requests of: only
	// senders with the key make one, but the server must not grow without bound.
	maxEchoClients = 1 << 16
	// maxProbeSeq bounds a sequence number taken from a reply: past it, it is no
	// probe index (a probe every 10 ms for a year is 2^32).
	maxProbeSeq = 1 << 40
)

// probeMAC is a request's MAC for a client's address (as the server sees it).
func probeMAC(token string, from netip.AddrPort, b []byte) []byte {
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	return macFields(token, ctxUDPProbe, nil, from.String(), string(b[rrKeySize:udpProbeHeader]), strconv.Itoa(len(b)))[:udpMACSize]
}

// probeRequest is a request's header.
type probeRequest struct {
	key  [rrKeySize]byte // the MAC
	seq  uint64
	sent int64 // client send time, Unix ns
	tos  uint8
}

// encode writes the header into b, at least udpProbeHeader bytes, and zeroes the
// reserved bytes; the padding after it is left as it is.
func (r probeRequest) encode(b []byte) {
	copy(b[:rrKeySize], r.key[:])
	binary.BigEndian.PutUint64(b[16:24], r.seq)
	binary.BigEndian.PutUint64(b[24:32], uint64(r.sent))
	b[32] = r.tos
	clear(b[33:udpProbeHeader])
}

// decodeProbeRequest reads a request; the key is the caller's to check.
func decodeProbeRequest(b []byte) (probeRequest, error) {
	if len(b) < udpProbeHeader || len(b) > MaxUDPRRSize {
		return probeRequest{}, fmt.Errorf("request of %d bytes: want %d to %d", len(b), udpProbeHeader, MaxUDPRRSize)
	}
	for _, c := range b[33:udpProbeHeader] {
		if c != 0 {
			return probeRequest{}, errors.New("request: reserved bytes are not zero")
		}
	}
	var r probeRequest
	copy(r.key[:], b[:rrKeySize])
	r.seq = binary.BigEndian.Uint64(b[16:24])
	r.sent = int64(binary.BigEndian.Uint64(b[24:32]))
	r.tos = b[32]
	return r, nil
}

// probeReply is a reply's header.
type probeReply struct {
	seq      uint64
	serverRX int64 // Unix ns, the server's clock
	serverTX int64
	received uint64
	kernelRX bool
	// rxTOS is the request's TOS byte as it arrived, where tosKnown.
	rxTOS    uint8
	tosKnown bool
}

// arrivedTOS is the request's TOS byte as it arrived; -1: not known.
func (r probeReply) arrivedTOS() int {
	if !r.tosKnown {
		return -1
	}
	return int(r.rxTOS)
}

// encode writes the header into b, at least udpProbeHeader bytes.
func (r probeReply) encode(b []byte) {
	binary.BigEndian.PutUint64(b[0:8], r.seq)
	binary.BigEndian.PutUint64(b[8:16], uint64(r.serverRX))
	binary.BigEndian.PutUint64(b[16:24], uint64(r.serverTX))
	binary.BigEndian.PutUint64(b[24:32], r.received)
	clear(b[32:udpProbeHeader])
	if r.kernelRX {
		b[32] = udpProbeKernelRX
	}
	if r.tosKnown {
		b[32] |= udpProbeRxTOS
		b[33] = r.rxTOS
	}
}

// decodeProbeReply reads a reply to a request of size bytes.
func decodeProbeReply(b []byte, size int) (probeReply, error) {
	if size < udpProbeHeader || len(b) != size {
		return probeReply{}, fmt.Errorf("reply of %d bytes to a request of %d (of at least %d)", len(b), size, udpProbeHeader)
	}
	if b[32]&^(udpProbeKernelRX|udpProbeRxTOS) != 0 {
		return probeReply{}, fmt.Errorf("reply: unknown flags %#x", b[32])
	}
	if b[32]&udpProbeRxTOS == 0 && b[33] != 0 {
		return probeReply{}, errors.New("reply: a TOS byte without its flag")
	}
	for _, c := range b[34:udpProbeHeader] {
		if c != 0 {
			return probeReply{}, errors.New("reply: reserved bytes are not zero")
		}
	}
	r := probeReply{
		seq:      binary.BigEndian.Uint64(b[0:8]),
		serverRX: int64(binary.BigEndian.Uint64(b[8:16])),
		serverTX: int64(binary.BigEndian.Uint64(b[16:24])),
		received: binary.BigEndian.Uint64(b[24:32]),
		kernelRX: b[32]&udpProbeKernelRX != 0,
		rxTOS:    b[33],
		tosKnown: b[32]&udpProbeRxTOS != 0,
	}
	return r, nil
}

// probeDelays turns a probe's four times (Unix ns: client send, server receive,
// server send, client receive; the server's on its own clock) and peerOffset (the
// server's clock minus the client's, seconds) into its RTT and one-way delays, ms.
//
// The RTT is (client_rx - client_tx) - (server_tx - server_rx), irtt's: the time
// the server held the request (its socket buffer, its wake-up, its work) is not the
// path's and is left out. The offset cancels in it. The one-way delays put the
// server's times on the client's clock: up = server_rx - client_tx - offset, down
// = client_rx - server_tx + offset. The three come from the same four integers, so
// up + down = RTT exactly before the conversion to ms. ok is false when the
// server's times make no sense beside the client's (its send before its receive,
// or its hold longer than the whole round trip: a clock step on either host):
// then only the client's span is to be trusted.
func probeDelays(clientTX, serverRX, serverTX, clientRX int64, peerOffset float64) (rtt, up, down float64, ok bool) {
	span, hold := clientRX-clientTX, serverTX-serverRX
	if span <= 0 || hold < 0 || hold > span {
		return 0, 0, 0, false
	}
	off := int64(math.Round(peerOffset * 1e9))
	const ms = float64(time.Millisecond)
	return float64(span-hold) / ms, float64(serverRX-clientTX-off) / ms, float64(clientRX-serverTX+off) / ms, true
}

// udpProbeParams are a udp-probe job's parameters.
type udpProbeParams struct {
	Series   string      `json:"series,omitempty"`
	Interval seconds     `json:"interval,omitempty"`
	Size     wholeNumber `json:"size,omitempty"`
	TOS      tosParam    `json:"tos,omitempty"`
	// ECN is the codepoint the probes and their replies carry (notect, ect0,
	// ect1, ce): ect1 takes an L4S queue, notect the classic one.
	ECN textParam `json:"ecn,omitempty"`
}

// udpProbeConfig is a probe job's parameters resolved.
type udpProbeConfig struct {
	series   string
	interval float64 // seconds; 0: the run's step
	size     int
	tos      int    // -1: unmarked; the ECN field included
	marking  string // as the series record it
}

// resolve checks p and fills in the defaults. The controller and the agent both
// resolve: the agent trusts no plan it did not check.
func (p udpProbeParams) resolve() (udpProbeConfig, error) {
	c := udpProbeConfig{series: p.Series, interval: float64(p.Interval), size: int(p.Size), tos: -1}
	if c.series == "" {
		c.series = UDPProbeSeries
	}
	if c.interval != 0 && c.interval < MinPingInterval {
		return udpProbeConfig{}, fmt.Errorf("interval %gs is below the minimum %gs", c.interval, MinPingInterval)
	}
	if c.size == 0 {
		c.size = DefaultUDPProbeSize
	}
	if c.size < udpProbeHeader || c.size > MaxUDPRRSize {
		return udpProbeConfig{}, fmt.Errorf("size %d: want 0 (the default, %d) or %d (the header) to %d bytes",
			p.Size, DefaultUDPProbeSize, udpProbeHeader, MaxUDPRRSize)
	}
	v, label, err := marking(string(p.TOS), string(p.ECN))
	if err != nil {
		return udpProbeConfig{}, err
	}
	c.tos, c.marking = v, label
	return c, nil
}

// params is what the controller hands the agent: every value spelled out (the
// codepoint in the TOS byte).
func (c udpProbeConfig) params() udpProbeParams {
	p := udpProbeParams{Series: c.series, Interval: seconds(c.interval), Size: wholeNumber(c.size)}
	if c.tos >= 0 {
		p.TOS = tosParam(strconv.Itoa(c.tos))
	}
	return p
}

// udpEchoKind answers udp-probe jobs on a port of its Target.
var udpEchoKind = Kind{
	Background: true,
	Plan:       planNone("udp-echo"),
	Start: startNone("udp-echo", func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		s, err := listenEcho(ctx, spec.Target, spec.Token)
		if err != nil {
			return nil, Started{}, err
		}
		rx := "user space after recvmsg"
		if s.stamps.rx != "" {
			rx = "kernel (" + s.stamps.rx + ")"
		}
		// No Timestamps: the echo has no series of its own, and its times go into
		// each reply, flagged.
		return JobFunc(s.serve), Started{Port: s.port,
			Message: fmt.Sprintf("answering UDP probes on port %d; receive times: %s; send times: user space before sendto", s.port, rx)}, nil
	}),
}

// rxStampsOnly is a kernel that refuses send stamps, so that enableStamps falls
// back to receive stamps alone. The echo server never reads its error queue: send
// stamps queued there would be charged to its receive buffer until requests were
// dropped for want of room.
type rxStampsOnly struct{ sysCalls }

func (k rxStampsOnly) setsockoptInt(fd, level, opt, value int) error {
	if level == linux.SOL_SOCKET && opt == linux.SO_TIMESTAMPING && value&txFlags != 0 {
		return linux.EINVAL
	}
	return k.sysCalls.setsockoptInt(fd, level, opt, value)
}

// udpEcho is a started udp-echo job.
type udpEcho struct {
	pc     *net.UDPConn
	port   int
	token  string
	stamps stamping
}

// listenEcho binds UDP on a port of addr the kernel picks, with receive stamps.
func listenEcho(ctx context.Context, addr, token string) (*udpEcho, error) {
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(ctx, "udp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return nil, fmt.Errorf("udp-echo: listen on UDP %s: %w", addr, err)
	}
	s := &udpEcho{pc: pc.(*net.UDPConn), token: token}
	s.port = s.pc.LocalAddr().(*net.UDPAddr).Port
	rc, err := s.pc.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) { s.stamps = enableStamps(rxStampsOnly{kernel{}}, int(fd)) })
		recvTOS(rc)
	}
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("udp-echo: enable timestamps: %w", err)
	}
	return s, nil
}

// serve answers requests one at a time until ctx ends, then closes the socket.
func (s *udpEcho) serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.pc.Close() })
	defer stop()
	defer s.pc.Close()
	in := make([]byte, 1<<16)
	oob := make([]byte, 512)
	// out's padding stays zero: only the header is ever written into it.
	out := make([]byte, MaxUDPRRSize)
	// received counts each client's requests: what its replies carry. A map full
	// of clients (only senders with the key make one) starts again empty.
	received := map[netip.AddrPort]uint64{}
	// The socket's mark, kept so that the system call is made only when a request
	// asks for another one.
	curTOS, curV4 := 0, false
	for {
		n, oobn, _, from, err := s.pc.ReadMsgUDPAddrPort(in, oob)
		now := time.Now()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("udp-echo: receive: %w", err)
		}
		req, err := decodeProbeRequest(in[:n])
		if err != nil || !hmac.Equal(req.key[:], probeMAC(s.token, from, in[:n])) {
			continue // not one of ours: say nothing to it
		}
		rep := probeReply{seq: req.seq, serverRX: now.UnixNano()}
		if tos := rxTOS(oob[:oobn]); tos >= 0 {
			rep.rxTOS, rep.tosKnown = uint8(tos), true
		}
		if s.stamps.rx != "" {
			if t, ok := rxStamp(oob[:oobn]); ok {
				rep.serverRX, rep.kernelRX = t.UnixNano(), true
			}
		}
		// One client however its address came (IPv4-mapped on a dual-stack socket).
		client := netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if _, ok := received[client]; !ok && len(received) >= maxEchoClients {
			clear(received)
		}
		received[client]++
		rep.received = received[client]
		// The reply carries the request's mark, as udp-rr's does: a qdisc that
		// sorts by DSCP must see it on the way back too.
		if tos, v4 := int(req.tos), isV4(from.Addr()); tos != curTOS || v4 != curV4 {
			if setTOS(s.pc, v4, tos) == nil {
				curTOS, curV4 = tos, v4
			}
		}
		// The send time is taken last, just before sendto: what the server held the
		// request for is all between the two times, and the RTT leaves it out.
		rep.serverTX = time.Now().UnixNano()
		rep.encode(out)
		// A send that fails (a full socket buffer, a route gone) loses the reply, as
		// the path might: the client counts it lost.
		s.pc.WriteToUDPAddrPort(out[:n], from)
	}
}

// udpProbeKind is a client of a udp-echo job, which it names with connect:.
var udpProbeKind = Kind{
	Plan: planWith(func(p udpProbeParams, pl *Planner) (any, []datafile.Series, error) {
		c, err := p.resolve()
		if err != nil {
			return nil, nil, err
		}
		var series []datafile.Series
		for _, suffix := range []string{udpProbeRTTSuffix, udpProbeUpSuffix, udpProbeDownSuffix} {
			se := datafile.Series{Name: c.series + suffix, Kind: datafile.KindUDPProbe, Units: "ms", Marking: c.marking}
			if suffix == udpProbeRTTSuffix {
				// The round trips get idle and loaded rows, as ping's do; the
				// one-way delays' samples are timed at the reply too, not at
				// the probe's send, so they keep their one row.
				se.Measure = datafile.MeasureRTT
			}
			if err := pl.Claim(se.Name); err != nil {
				return nil, nil, err
			}
			series = append(series, se)
		}
		return c.params(), series, nil
	}),
	// The socket opens before the answer, as ping's does: the answer says what
	// stamps the probes get.
	Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		var p udpProbeParams
		if err := decodeRaw(spec.Params, &p); err != nil {
			return nil, Started{}, fmt.Errorf("udp-probe: %w", err)
		}
		c, err := p.resolve()
		if err != nil {
			return nil, Started{}, fmt.Errorf("udp-probe: %w", err)
		}
		if c.interval == 0 {
			c.interval = spec.Step
		}
		if c.interval < MinPingInterval {
			return nil, Started{}, fmt.Errorf("udp-probe %s: interval %gs is below the minimum %gs", c.series, c.interval, MinPingInterval)
		}
		if spec.Duration <= 0 {
			return nil, Started{}, fmt.Errorf("udp-probe %s: duration is %gs: a probe runs for a time", c.series, spec.Duration)
		}
		if spec.Addr == "" {
			return nil, Started{}, fmt.Errorf("udp-probe %s: no udp-echo to connect to (the job needs connect:)", c.series)
		}
		server, err := netip.ParseAddrPort(spec.Addr)
		if err != nil || server.Port() == 0 {
			return nil, Started{}, fmt.Errorf("udp-probe %s: server address %q is not an IP address and port: %w", c.series, spec.Addr, err)
		}
		up, err := openUDPProbe(kernel{}, server, c, spec)
		if err != nil {
			return nil, Started{}, fmt.Errorf("udp-probe %s: %w", c.series, err)
		}
		up.env = env
		// Declared with the first sample, when the run's file takes it.
		var once sync.Once
		emit := env.Emit
		up.env.Emit = func(name string, x datafile.Sample) {
			once.Do(func() { declareConn(env, spec.Host, c.series+udpProbeRTTSuffix, "udp", up.local, server) })
			emit(name, x)
		}
		return JobFunc(up.run), Started{Timestamps: up.p.stamps.label(), Message: up.describe()}, nil
	},
}

// udpProber is a started udp-probe job. Its socket, pending probes and send stamps
// are an ICMP prober's (icmp.go): the error queue and the matching of send stamps
// to probes are the same for a UDP socket.
type udpProber struct {
	p    *prober
	cfg  udpProbeConfig
	spec JobSpec
	env  Env
	// local is the socket's address, which the requests' MAC covers.
	local netip.AddrPort
	// answered marks the probes replied to, for duplicates; read and written by
	// the receiving goroutine only, until it has ended.
	answered []bool
	tally    probeTally
}

// probeTally is what the receiving goroutine counts, read once it has ended.
type probeTally struct {
	replies, reordered, duplicates int
	maxSeq                         int
	received                       uint64 // the largest count of requests the server reported
	fellBackRX, fellBackTX         int    // replies without the client's kernel stamps
	serverUserRX                   int    // replies whose server receive time was user space
	inconsistent                   int    // replies whose server times made no sense
	// up and down count the probes by the codepoint they arrived with: at the
	// server (its replies say), and the replies at the client.
	up, down ecnCensus
}

// probeArrival is an answered probe: its four times, Unix ns, and where the
// client's came from.
type probeArrival struct {
	k                  int
	clientTX, clientRX int64
	rep                probeReply
	kernelRX, kernelTX bool
	rxTOS              int // the reply's TOS byte as it arrived; -1: not known
}

// openUDPProbe opens a UDP socket connected to server (the kernel then passes it
// the server's datagrams only), marked, with the best stamps the kernel gives.
func openUDPProbe(sc sysCalls, server netip.AddrPort, c udpProbeConfig, spec JobSpec) (*udpProber, error) {
	addr := server.Addr().Unmap()
	p := &prober{sys: sc, v6: addr.Is6(), size: c.size, interval: time.Duration(c.interval * float64(time.Second)),
		pending: map[int]*probe{}, lastSent: -1}
	domain := linux.AF_INET
	if p.v6 {
		if addr.Zone() != "" {
			return nil, fmt.Errorf("server %s: a zoned (link-local) address is not supported: use a global or ULA address", server)
		}
		domain, p.to = linux.AF_INET6, &linux.SockaddrInet6{Addr: addr.As16(), Port: int(server.Port())}
	} else {
		p.to = &linux.SockaddrInet4{Addr: addr.As4(), Port: int(server.Port())}
	}
	fd, err := sc.socket(domain, linux.SOCK_DGRAM|linux.SOCK_CLOEXEC, linux.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("open a UDP socket: %w", err)
	}
	if err := p.attach(fd); err != nil {
		return nil, err
	}
	if err := linux.Connect(fd, p.to); err != nil {
		p.file.Close()
		return nil, fmt.Errorf("connect to %s: %w", server, err)
	}
	if c.tos >= 0 {
		level, opt, name := linux.IPPROTO_IP, linux.IP_TOS, "IP_TOS"
		if p.v6 {
			level, opt, name = linux.IPPROTO_IPV6, linux.IPV6_TCLASS, "IPV6_TCLASS"
		}
		if err := sc.setsockoptInt(fd, level, opt, c.tos); err != nil {
			p.file.Close()
			return nil, fmt.Errorf("set %s to %#x: %w", name, c.tos, err)
		}
	}
	p.stamps = enableStamps(sc, fd)
	// The replies' codepoints as they arrive, for the census; best effort.
	sc.setsockoptInt(fd, linux.IPPROTO_IP, linux.IP_RECVTOS, 1)
	if p.v6 {
		sc.setsockoptInt(fd, linux.IPPROTO_IPV6, linux.IPV6_RECVTCLASS, 1)
	}
	local, err := localAddrPort(fd)
	if err != nil {
		p.file.Close()
		return nil, err
	}
	return &udpProber{p: p, cfg: c, spec: spec, local: local, tally: probeTally{maxSeq: -1}}, nil
}

// localAddrPort is a connected socket's own address.
func localAddrPort(fd int) (netip.AddrPort, error) {
	sa, err := linux.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockname: %w", err)
	}
	switch a := sa.(type) {
	case *linux.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), nil
	case *linux.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), nil
	}
	return netip.AddrPort{}, fmt.Errorf("getsockname: address %T", sa)
}

// describe says where its times come from, in words.
func (u *udpProber) describe() string {
	return fmt.Sprintf("UDP socket to %s, %d-byte probes; %s", u.spec.Addr, u.cfg.size, u.p.stamps.describe())
}

// send sends probe k. The probe is pending before the datagram leaves, so a reply
// that beats sendto's return (loopback) finds it.
func (u *udpProber) send(k int, buf []byte) error {
	pr := &probe{}
	u.p.mu.Lock()
	u.p.pending[k] = pr
	u.p.lastSent = k
	pr.sent = time.Now()
	u.p.mu.Unlock()
	probeRequest{seq: uint64(k), sent: pr.sent.UnixNano(), tos: uint8(max(u.cfg.tos, 0))}.encode(buf)
	copy(buf[:rrKeySize], probeMAC(u.spec.Token, u.local, buf))
	// A connected socket: no address.
	if err := u.p.sendto(buf, nil); err != nil {
		return fmt.Errorf("send probe %d: %w", k, err)
	}
	return nil
}

// receive reads replies and send stamps until stop is called, calling got for every
// first reply to a pending probe, and counting the rest.
func (u *udpProber) receive(got func(probeArrival)) error {
	return u.p.receiveEach(func(b, oob []byte, now time.Time) {
		if a, ok := u.match(b, oob, now); ok {
			got(a)
		}
	})
}

// match reads a datagram: a reply to a pending probe becomes an arrival, with the
// kernel's stamps where it gave them. A reply to a probe already answered is
// counted a duplicate.
func (u *udpProber) match(b, oob []byte, now time.Time) (probeArrival, bool) {
	rep, err := decodeProbeReply(b, u.cfg.size)
	if err != nil || rep.seq >= maxProbeSeq {
		return probeArrival{}, false
	}
	k := int(rep.seq)
	c, ok := u.p.claim(k, oob, now)
	if !ok {
		if k < len(u.answered) && u.answered[k] {
			u.tally.duplicates++
		}
		return probeArrival{}, false // a duplicate, or one given up on
	}
	if k < len(u.answered) {
		u.answered[k] = true
	}
	a := probeArrival{k: k, rep: rep, rxTOS: rxTOS(oob), kernelTX: c.kernelTX, kernelRX: c.kernelRX}
	a.clientTX, a.clientRX = c.tx.UnixNano(), c.rx.UnixNano()
	if (!a.kernelRX && !a.kernelTX) || a.clientRX <= a.clientTX {
		// Both in user space, or the wall clock stepped between the two stamps: the
		// monotonic user-space pair is the one to trust, put on the wall clock from
		// the send so that the four times stay one consistent set.
		a.clientTX = c.sent.UnixNano()
		a.clientRX = a.clientTX + now.Sub(c.sent).Nanoseconds()
		a.kernelRX, a.kernelTX = false, false
	}
	return a, true
}

// run sends the probes from Start on (probe k at Start + k*interval, on the
// monotonic clock, as the ping kind does), waits for their replies until Duration
// plus a second after Start, then records the unanswered ones as lost and says in
// a warning what was lost which way. A context that ends stops it without
// recording losses. It closes the socket.
func (u *udpProber) run(ctx context.Context) error {
	p := u.p
	defer p.close()
	spec, cfg := u.spec, u.cfg
	base := cfg.series
	rttName, upName, downName := base+udpProbeRTTSuffix, base+udpProbeUpSuffix, base+udpProbeDownSuffix
	interval := time.Duration(cfg.interval * float64(time.Second))
	count := max(int(spec.Duration/cfg.interval+0.5), 1)
	u.answered = make([]bool, count)
	start := startTime(spec.Start)
	deadline := start.Add(time.Duration(spec.Duration*float64(time.Second)) + lossWait)

	buf := make([]byte, cfg.size)
	sched := probeSchedule{start: start, interval: interval, count: count, deadline: deadline}
	st, err := sched.run(ctx, func(k int) error { return u.send(k, buf) }, func(answered func()) error {
		t := &u.tally
		return u.receive(func(a probeArrival) {
			at := datafile.Unix(time.Unix(0, a.clientRX))
			rtt, up, down, ok := probeDelays(a.clientTX, a.rep.serverRX, a.rep.serverTX, a.clientRX, spec.PeerOffset)
			user := (!a.kernelRX && p.stamps.rx != "") || (!a.kernelTX && p.stamps.tx)
			if ok {
				u.env.Emit(rttName, datafile.Sample{T: at, V: rtt, Seq: a.k, UserStamp: user})
				u.env.Emit(upName, datafile.Sample{T: at, V: up, Seq: a.k, UserStamp: user})
				u.env.Emit(downName, datafile.Sample{T: at, V: down, Seq: a.k, UserStamp: user})
			} else {
				// The server's times are not to be trusted: the client's span, with
				// the server's hold in it, is the RTT, and there is no split.
				t.inconsistent++
				u.env.Emit(rttName, datafile.Sample{T: at, V: float64(a.clientRX-a.clientTX) / float64(time.Millisecond), Seq: a.k, UserStamp: user})
			}
			t.replies++
			if a.k < t.maxSeq {
				t.reordered++
			}
			t.maxSeq = max(t.maxSeq, a.k)
			t.received = max(t.received, a.rep.received)
			if !a.kernelRX && p.stamps.rx != "" {
				t.fellBackRX++
			}
			if !a.kernelTX && p.stamps.tx {
				t.fellBackTX++
			}
			if !a.rep.kernelRX {
				t.serverUserRX++
			}
			t.up.add(a.rep.arrivedTOS())
			t.down.add(a.rxTOS)
			answered()
		})
	}, p.stop)
	if err != nil {
		return fmt.Errorf("udp-probe %s to %s: %w", base, spec.Addr, err)
	}
	if st.interrupted {
		return nil
	}
	sent, skipped, failed, sendErr := st.sent, st.skipped, st.failed, st.sendErr
	recordLost(p, u.env.Emit, rttName)
	if failed == sent && sent > 0 {
		return fmt.Errorf("udp-probe %s to %s: every probe failed to send: %w", base, spec.Addr, sendErr)
	}
	u.warn(sent, skipped, failed, sendErr)
	return nil
}

// warn says what the run's probes met: a line of counts always, and lines for what
// went wrong.
func (u *udpProber) warn(sent, skipped, failed int, sendErr error) {
	if u.env.Warn == nil {
		return
	}
	// The tally is settled: the receiving goroutine has ended.
	t := u.tally
	name := fmt.Sprintf("udp-probe %s to %s", u.cfg.series, u.spec.Addr)
	// Requests that reached the server are counted by it; the latest count is in
	// the reply that came with the largest. Probes sent after that reply's, and
	// lost, are counted lost up: which way they went is not known.
	lostUp := max(sent-int(min(t.received, uint64(sent))), 0)
	lostDown := max(int(min(t.received, uint64(sent)))-t.replies, 0)
	u.env.Warn(fmt.Sprintf("%s: sent %d, replies %d, lost up %d, lost down %d, reordered %d, duplicates %d; one-way delays are ±%.3g ms (the controller's clock offset estimate)",
		name, sent, t.replies, lostUp, lostDown, t.reordered, t.duplicates, u.spec.PeerOffsetErr*1e3))
	if skipped > 0 {
		u.env.Warn(fmt.Sprintf("%s: %d probes were not sent: their slots had passed when the runner got to them (it started or ran late), and only the latest one due was sent", name, skipped))
	}
	if t.fellBackRX > 0 {
		u.env.Warn(fmt.Sprintf("%s: %d of %d replies came without the kernel's receive timestamp; their receive times were taken in user space", name, t.fellBackRX, t.replies))
	}
	if t.fellBackTX > 0 {
		u.env.Warn(fmt.Sprintf("%s: %d of %d probes got no kernel send timestamp; their send times were taken in user space before sendto", name, t.fellBackTX, t.replies))
	}
	if t.serverUserRX > 0 {
		u.env.Warn(fmt.Sprintf("%s: %d of %d replies carried a server receive time taken in user space (the server's kernel gave no stamp): their up and RTT include the server's wake-up", name, t.serverUserRX, t.replies))
	}
	if t.inconsistent > 0 {
		u.env.Warn(fmt.Sprintf("%s: %d of %d replies carried server times out of order with the client's (a clock stepped): their RTT includes the server's hold, and they have no up or down", name, t.inconsistent, t.replies))
	}
	if failed > 0 {
		u.env.Warn(fmt.Sprintf("%s: %d of %d probes could not be sent (recorded as lost): %v", name, failed, sent, sendErr))
	}
	if t.up.total()+t.down.total() > 0 {
		// Both ways carry the probe's mark: the echo marks its replies as asked.
		sentCP := max(u.cfg.tos, 0) & ecnMask
		u.env.Warn(fmt.Sprintf("%s: sent %s; the server got %s; the replies came back %s",
			name, ECNName(sentCP), orNone(t.up.String()), orNone(t.down.String())))
		for _, way := range []struct {
			name string
			c    ecnCensus
		}{{"up", t.up}, {"down", t.down}} {
			if n := way.c.remarked(sentCP); n > 0 {
				u.env.Warn(fmt.Sprintf("%s: sent %s, and %d of %d probes arrived %s on the way %s: the path bleached or re-marked their ECN field",
					name, ECNName(sentCP), n, way.c.total(), way.c, way.name))
			}
		}
	}
}

// orNone is s, or "no codepoint known" for nothing.
func orNone(s string) string {
	if s == "" {
		return "no codepoint known"
	}
	return s
}
