package runners

import (
	"bufio"
	"context"
	"crypto/hmac"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// Request/response runners, netperf's TCP_RR and UDP_RR: one transaction in flight,
// a request of request_size bytes answered by a response of response_size bytes,
// over and over. The transaction rate is what an interactive flow sees through a
// queue: every transaction waits a full round trip through it, so its time is the
// queue's delay plus the path's, with no ICMP special-casing on the way.
//
// Wire format. Both protocols run on one port of the rr-server job, and every
// request is authenticated by a MAC keyed by the run's token (auth.go), so that a
// stray or hostile sender gets nothing back, and a request recorded on the test
// network and sent again from another (spoofed) source is not answered either.
//
// UDP request, at least udpRequestHeader (32) bytes, integers big-endian:
//
//	0..16   MAC: HMAC-SHA256(token, ctxUDPRR, the client's address and port as
//	        the server sees them, bytes 16..32) cut to 16 bytes
//	16..24  sequence number
//	24..28  size of the response datagram wanted, udpResponseHeader..MaxUDPRRSize
//	28      TOS byte the server marks its response with (0: unmarked)
//	29..32  zero
//	32..    zero padding up to the request size
//
// UDP response: the request's sequence number (8 bytes), then zero padding up to the
// size asked for. A request with a wrong MAC or size gets no answer: it cannot
// have the server send a third party anything, nor more than the client asked for.
// A client behind a NAT (its address rewritten) is not answered either.
//
// TCP: the server sends a nonce (nonceSize bytes); the client sends a hello line,
// JSON {"mac", "request_size", "response_size", "tos"} and a newline, the MAC over
// the nonce and the other fields; the server answers one byte, '\n', if it
// takes the connection, and closes it otherwise. Then each transaction is
// request_size bytes one way and response_size bytes back, the contents unread.

// Default series names.
const (
	UDPRRSeries = "UDP RR latency"
	TCPRRSeries = "TCP RR latency"
)

const (
	// MaxUDPRRSize is the largest UDP payload IPv4 carries (65535 less the IP and
	// UDP headers): a larger request or response could not be sent at all.
	MaxUDPRRSize = 65507
	// MaxTCPRRSize bounds a TCP request or response: the server holds one response
	// in memory per connection.
	MaxTCPRRSize = 1 << 20
	// udpRequestHeader and udpResponseHeader are the bytes the wire format needs; a
	// smaller size the user asks for is padded up to them on the wire, and the
	// series still carry the user's sizes in their names only.
	udpRequestHeader  = 32
	udpResponseHeader = 8
	// rrKeySize is the length of the key a UDP request carries.
	rrKeySize = 16
	// defaultRRTimeout is how long a UDP transaction waits for its response before
	// it is counted lost and the next one goes. netperf's UDP_RR waits forever on a
	// loss (the test stalls, and flent's series end); counting it lost keeps the
	// series going through a lossy queue.
	defaultRRTimeout = time.Second
	maxRRTimeout     = 60 * time.Second
	// rrBindTries bounds the attempts to get one port number for both protocols:
	// another program may hold the UDP port of the TCP port the kernel picked.
	rrBindTries = 8
)

// rrServerKind answers udp-rr and tcp-rr clients on one port of its Target.
var rrServerKind = Kind{
	Background: true,
	Plan:       planNone("rr-server"),
	Start: startNone("rr-server", func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		tcp, udpResponse, err := rrPlanOf(spec.Clients)
		if err != nil {
			return nil, Started{}, err
		}
		s, err := listenRR(ctx, spec.Target, spec.Token)
		if err != nil {
			return nil, Started{}, err
		}
		s.env, s.tcpPlan, s.udpResponse = env, tcp, udpResponse
		return JobFunc(s.serve), Started{Port: s.port,
			Message: fmt.Sprintf("answering UDP and TCP request/response on port %d", s.port)}, nil
	}),
}

// rrServer is a started rr-server job.
type rrServer struct {
	ln    net.Listener
	pc    *net.UDPConn
	port  int
	token string
	// pending bounds the TCP connections not yet authenticated.
	pending *pendingGate
	// unauthenticated counts UDP requests dropped for their MAC or size, read
	// by tests and for the warning at the end.
	unauthenticated atomic.Int64
	env             Env
	// tcpPlan is the sizes and marks (request, response, TOS) the run's tcp-rr clients will ask for, and
	// udpResponse the largest response its udp-rr clients will: nothing else is
	// answered. Nil and 0 (a server started on its own) answer any within the caps.
	tcpPlan     map[[3]int]bool
	udpResponse int
}

// rrPlanOf is what the jobs that connect to an rr-server will ask of it.
func rrPlanOf(clients []Client) (map[[3]int]bool, int, error) {
	if len(clients) == 0 {
		return nil, 0, nil
	}
	tcp, udpResponse := map[[3]int]bool{}, udpResponseHeader
	for _, c := range clients {
		udp := c.Kind == "udp-rr"
		if !udp && c.Kind != "tcp-rr" {
			return nil, 0, fmt.Errorf("rr-server: a %s job connects to it: only udp-rr and tcp-rr can", c.Kind)
		}
		var p rrParams
		if err := decodeRaw(c.Params, &p); err != nil {
			return nil, 0, fmt.Errorf("rr-server: a client's plan: %w", err)
		}
		cfg, err := p.resolve(udp)
		if err != nil {
			return nil, 0, fmt.Errorf("rr-server: a client's plan: %w", err)
		}
		if udp {
			udpResponse = max(udpResponse, cfg.response)
		} else {
			tcp[[3]int{cfg.request, cfg.response, max(cfg.tos, 0)}] = true
		}
	}
	return tcp, udpResponse, nil
}

// listenRR binds TCP and UDP on one port of addr: a client needs one port
// whichever protocol it speaks, and a firewall rule for the run covers both.
func listenRR(ctx context.Context, addr, token string) (*rrServer, error) {
	var lc net.ListenConfig
	var lastErr error
	for range rrBindTries {
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(addr, "0"))
		if err != nil {
			return nil, fmt.Errorf("rr-server: listen on TCP %s: %w", addr, err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := lc.ListenPacket(ctx, "udp", net.JoinHostPort(addr, strconv.Itoa(port)))
		if err == nil {
			return &rrServer{ln: ln, pc: pc.(*net.UDPConn), port: port, token: token, pending: newPendingGate(maxPending)}, nil
		}
		ln.Close()
		lastErr = err
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("rr-server: listen on UDP %s on the TCP port: %w", addr, lastErr)
}

// serve answers requests until ctx ends, then closes every socket.
func (s *rrServer) serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		s.ln.Close()
		s.pc.Close()
	})
	defer stop()
	var wg sync.WaitGroup
	udpErr := make(chan error, 1)
	wg.Go(func() { udpErr <- s.serveUDP(ctx) })
	var delay time.Duration
	for {
		c, aerr := s.ln.Accept()
		if aerr != nil {
			// A passing failure (out of descriptors) costs a connection, which
			// waits in the kernel's queue for the next try, not the run.
			if !acceptBackoff(ctx, aerr, &delay) {
				break
			}
			continue
		}
		delay = 0
		if !s.pending.acquire(ctx, c) {
			c.Close() // too many connections that have not said who they are
			continue
		}
		wg.Go(func() { s.serveTCP(ctx, c.(*net.TCPConn)) })
	}
	// The run ended: the UDP side stops too.
	s.ln.Close()
	s.pc.Close()
	wg.Wait()
	if n := s.unauthenticated.Load(); n > 0 && s.env.Warn != nil {
		s.env.Warn(fmt.Sprintf("rr-server dropped %d UDP datagrams that were not authenticated requests", n))
	}
	return <-udpErr
}

// serveUDP answers datagrams one at a time: each client has one transaction in
// flight, so a queue of requests here would only be the clients' own.
func (s *rrServer) serveUDP(ctx context.Context) error {
	in := make([]byte, 1<<16)
	// out's padding stays zero: only the sequence number is ever written into it.
	out := make([]byte, MaxUDPRRSize)
	// The socket's mark, kept so that the system call is made only when a request
	// asks for another one.
	curTOS, curV4 := 0, false
	for {
		n, from, err := s.pc.ReadFromUDPAddrPort(in)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("rr-server: receive UDP: %w", err)
		}
		if n < udpRequestHeader || !hmac.Equal(in[:rrKeySize], udpRequestMAC(s.token, from, in[rrKeySize:udpRequestHeader])) {
			s.unauthenticated.Add(1)
			continue // not one of ours: say nothing to it
		}
		size := binary.BigEndian.Uint32(in[24:28])
		if size < udpResponseHeader || size > MaxUDPRRSize || s.udpResponse > 0 && int(size) > s.udpResponse {
			s.unauthenticated.Add(1)
			continue
		}
		// The response carries the request's mark, as netperf -Y marks both ends: a
		// qdisc that sorts by DSCP must see it on the way back too.
		if tos, v4 := int(in[28]), isV4(from.Addr()); tos != curTOS || v4 != curV4 {
			if setTOS(s.pc, v4, tos) == nil {
				curTOS, curV4 = tos, v4
			}
		}
		copy(out[:8], in[16:24])
		// A send that fails (a full socket buffer, a route gone) loses the response,
		// as the path might: the client counts it lost.
		s.pc.WriteToUDPAddrPort(out[:size], from)
	}
}

// rrHello is the line a TCP client opens with.
type rrHello struct {
	MAC          []byte `json:"mac"`
	RequestSize  int    `json:"request_size"`
	ResponseSize int    `json:"response_size"`
	TOS          int    `json:"tos,omitempty"`
}

// serveTCP answers one client's transactions until it closes or ctx ends. What goes
// wrong is the client's business: it sees the connection close.
func (s *rrServer) serveTCP(ctx context.Context, c *net.TCPConn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	h, br, ok := s.authenticate(c)
	if !ok {
		return // the close tells the client
	}
	if h.RequestSize < 1 || h.RequestSize > MaxTCPRRSize || h.ResponseSize < 1 || h.ResponseSize > MaxTCPRRSize ||
		h.TOS < 0 || h.TOS > 255 {
		return
	}
	if s.tcpPlan != nil && !s.tcpPlan[[3]int{h.RequestSize, h.ResponseSize, h.TOS}] {
		return // not what any of the run's clients asks for
	}
	if h.TOS != 0 {
		if setTOS(c, isV4(c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()), h.TOS) != nil {
			return // the client asked for marked responses: none unmarked
		}
	}
	c.SetReadDeadline(time.Time{})
	if _, err := c.Write([]byte{'\n'}); err != nil {
		return
	}
	resp := make([]byte, h.ResponseSize)
	for {
		// The request's bytes are not looked at: only their count matters.
		if _, err := io.CopyN(io.Discard, br, int64(h.RequestSize)); err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// fields are what the hello's MAC covers.
func (h rrHello) fields() []string {
	return []string{strconv.Itoa(h.RequestSize), strconv.Itoa(h.ResponseSize), strconv.Itoa(h.TOS)}
}

// authenticate sends the nonce and reads and checks the hello, holding a pending
// slot meanwhile. The reader it returns has the requests after the hello.
func (s *rrServer) authenticate(c *net.TCPConn) (rrHello, *bufio.Reader, bool) {
	defer s.pending.release(c)
	var h rrHello
	c.SetReadDeadline(time.Now().Add(pendingHello))
	nonce, err := sendNonce(c)
	if err != nil {
		return h, nil, false
	}
	// The reader's size bounds the hello; it reads the requests after it as well,
	// so nothing it buffered past the hello is lost.
	br := bufio.NewReaderSize(c, maxHelloLength)
	line, err := br.ReadSlice('\n')
	if err != nil || json.Unmarshal(line, &h) != nil || !checkMAC(s.token, ctxTCPRR, nonce[:], h.MAC, h.fields()...) {
		return h, nil, false
	}
	return h, br, true
}

// rrParams are a udp-rr or tcp-rr job's parameters. Sizes and the timeout are
// pointers so that a 0 written is told from one left out.
type rrParams struct {
	Series       string       `json:"series,omitempty"`
	RateSeries   string       `json:"rate_series,omitempty"`
	RequestSize  *wholeNumber `json:"request_size,omitempty"`
	ResponseSize *wholeNumber `json:"response_size,omitempty"`
	TOS          tosParam     `json:"tos,omitempty"`
	Timeout      *seconds     `json:"timeout,omitempty"`
}

// tosParam is a TOS written as a name or a number (tos: 184 in YAML is a number).
type tosParam = textParam

// rrConfig is a client job's parameters resolved: defaults filled in, checked.
type rrConfig struct {
	series, rateSeries string
	request, response  int
	tos                int // -1: the socket is left unmarked
	timeout            time.Duration
}

// resolve checks p for a udp-rr (udp) or tcp-rr job and fills in the defaults. The
// controller and the agent both resolve: the agent trusts no plan it did not check.
func (p rrParams) resolve(udp bool) (rrConfig, error) {
	c := rrConfig{series: p.Series, rateSeries: p.RateSeries, request: 1, response: 1, tos: -1, timeout: defaultRRTimeout}
	maxSize := MaxTCPRRSize
	if udp {
		maxSize = MaxUDPRRSize
	}
	if c.series == "" {
		c.series = TCPRRSeries
		if udp {
			c.series = UDPRRSeries
		}
	}
	for _, f := range []struct {
		name string
		v    *wholeNumber
		into *int
	}{{"request_size", p.RequestSize, &c.request}, {"response_size", p.ResponseSize, &c.response}} {
		if f.v == nil {
			continue
		}
		if n := int(*f.v); n < 1 || n > maxSize {
			return rrConfig{}, fmt.Errorf("%s is %d: want 1 to %d bytes", f.name, n, maxSize)
		}
		*f.into = int(*f.v)
	}
	if p.TOS != "" {
		v, err := ParseTOS(string(p.TOS))
		if err != nil {
			return rrConfig{}, fmt.Errorf("tos: %w", err)
		}
		c.tos = v
	}
	if p.Timeout != nil {
		if !udp {
			return rrConfig{}, fmt.Errorf("timeout is for udp-rr only: TCP retransmits what is lost")
		}
		d := time.Duration(float64(*p.Timeout) * float64(time.Second))
		if d < time.Millisecond || d > maxRRTimeout {
			return rrConfig{}, fmt.Errorf("timeout is %gs: want 0.001 to %g seconds", float64(*p.Timeout), maxRRTimeout.Seconds())
		}
		c.timeout = d
	}
	return c, nil
}

// params is what the controller hands the agent: every value spelled out.
func (c rrConfig) params(udp bool) rrParams {
	req, resp := wholeNumber(c.request), wholeNumber(c.response)
	p := rrParams{Series: c.series, RateSeries: c.rateSeries, RequestSize: &req, ResponseSize: &resp}
	if c.tos >= 0 {
		p.TOS = tosParam(strconv.Itoa(c.tos))
	}
	if udp {
		t := seconds(c.timeout.Seconds())
		p.Timeout = &t
	}
	return p
}

var (
	udpRRKind = rrClientKind(true)
	tcpRRKind = rrClientKind(false)
)

// rrClientKind is udp-rr (udp) or tcp-rr: a client of an rr-server job, which it
// names with connect:.
func rrClientKind(udp bool) Kind {
	name := "tcp-rr"
	if udp {
		name = "udp-rr"
	}
	return Kind{
		Plan: planWith(func(p rrParams, pl *Planner) (any, []datafile.Series, error) {
			c, err := p.resolve(udp)
			if err != nil {
				return nil, nil, err
			}
			// The latency is a round trip as a probe's is (idle and loaded rows,
			// the latency axis), each sample an interval's mean.
			series := []datafile.Series{{Name: c.series, Kind: datafile.KindRR, Units: "ms", Measure: datafile.MeasureRTT}}
			if c.rateSeries != "" {
				series = append(series, datafile.Series{Name: c.rateSeries, Kind: datafile.KindRR, Units: "transactions/s"})
			}
			for _, s := range series {
				if err := pl.Claim(s.Name); err != nil {
					return nil, nil, err
				}
			}
			return c.params(udp), series, nil
		}),
		Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
			var p rrParams
			if err := decodeRaw(spec.Params, &p); err != nil {
				return nil, Started{}, fmt.Errorf("%s: %w", name, err)
			}
			c, err := p.resolve(udp)
			if err != nil {
				return nil, Started{}, fmt.Errorf("%s: %w", name, err)
			}
			if spec.Addr == "" {
				return nil, Started{}, fmt.Errorf("%s: no rr-server to connect to (the job needs connect:)", name)
			}
			if _, port, err := net.SplitHostPort(spec.Addr); err != nil {
				return nil, Started{}, fmt.Errorf("%s: server address %q: %w", name, spec.Addr, err)
			} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return nil, Started{}, fmt.Errorf("%s: server address %q: port %q is not a port number", name, spec.Addr, port)
			}
			if spec.Duration <= 0 {
				return nil, Started{}, fmt.Errorf("%s: duration is %gs: a client runs for a time", name, spec.Duration)
			}
			cl := &rrClient{name: name, udp: udp, cfg: c, spec: spec, env: env}
			return JobFunc(cl.run), Started{}, nil
		},
	}
}

// rrClient is a started udp-rr or tcp-rr job.
type rrClient struct {
	name string
	udp  bool
	cfg  rrConfig
	spec JobSpec
	env  Env
}

// rrTally is what a transaction loop reports when it ends.
type rrTally struct {
	lost    int64 // UDP transactions that got no response in time
	lastErr error // the last error that made one lost, if not the timeout
}

// dialRR connects to the server on network ("udp" or "tcp"), marking the socket
// before it sends anything: a TCP connection's SYN carries the mark too.
func dialRR(ctx context.Context, network, addr string, tos int) (net.Conn, error) {
	d := net.Dialer{Timeout: helloTimeout}
	if tos >= 0 {
		// network is "udp4", "tcp6" and so on here: the family of the socket the
		// address needs.
		d.Control = func(network, _ string, rc syscall.RawConn) error {
			return setTOSRaw(rc, strings.HasSuffix(network, "4"), tos)
		}
	}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return c, nil
}

// run connects (TCP ahead of the start time, as the streams do, so that the first
// transaction goes at the start), runs transactions from the start time for the
// duration, and samples their count at every step of the run's grid.
func (cl *rrClient) run(ctx context.Context) error {
	start := startTime(cl.spec.Start)
	end := start.Add(time.Duration(cl.spec.Duration * float64(time.Second)))
	var conn net.Conn
	var err error
	if cl.udp {
		if sleepUntil(ctx, start) != nil {
			return nil
		}
		conn, err = dialRR(ctx, "udp", cl.spec.Addr, cl.cfg.tos)
	} else {
		if sleepUntil(ctx, start.Add(-connectAhead)) != nil {
			return nil
		}
		conn, err = cl.connectTCP(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%s %s: %w", cl.name, cl.cfg.series, err)
	}
	defer conn.Close()
	if sleepUntil(ctx, start) != nil {
		return nil
	}

	var done rrDone
	loopCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Closing the socket is what stops a transaction blocked in a read or write.
	stop := context.AfterFunc(loopCtx, func() { conn.Close() })
	defer stop()
	var tally rrTally
	loopErr := make(chan error, 1)
	go func() {
		if cl.udp {
			loopErr <- cl.transactUDP(loopCtx, conn, &done, &tally)
		} else {
			loopErr <- cl.transactTCP(loopCtx, conn, &done)
		}
	}()

	step := cl.spec.Step
	if step <= 0 {
		step = 0.2 // as the other samplers do
	}
	// A sample covers the time since the last one: a step in which no transaction
	// completed (one takes longer than a step, behind a full queue) says nothing,
	// and the next covers both, as netperf's interim results do. Its latency is
	// the mean of the transactions that completed in it, each timed from its
	// request to its response: the interval over their number (flent's rr_to_ms)
	// would count the part of the interval before the first one began.
	last, lastN, lastBusy := time.Now(), int64(0), time.Duration(0)
	sample := func() {
		now := time.Now()
		n, busy := done.read()
		if n > lastN {
			cl.emit(now, now.Sub(last).Seconds(), n-lastN, busy-lastBusy)
			last, lastN, lastBusy = now, n, busy
		}
	}
	var runErr error
	loopEnded := false
	g := newStepGrid(start, step, 1, true).until(end, true)
	defer g.close()
ticks:
	for {
		_, ev, err := g.wait(ctx, loopErr)
		switch ev {
		case stepTick:
			sample()
		case stepStop:
			// The connection failed: what was done up to now is still measured.
			sample()
			runErr, loopEnded = err, true
			break ticks
		default:
			break ticks
		}
	}
	if !loopEnded {
		cancel()
		runErr = <-loopErr
	}
	// Received from the loop's goroutine after it returned: tally is settled.
	if tally.lost > 0 && cl.env.Warn != nil {
		msg := fmt.Sprintf("%s %s: %d of %d transactions got no response within %gs", cl.name, cl.cfg.series,
			tally.lost, tally.lost+done.count(), cl.cfg.timeout.Seconds())
		if tally.lastErr != nil {
			msg += fmt.Sprintf(" (last error: %v)", tally.lastErr)
		}
		cl.env.Warn(msg)
	}
	if runErr != nil {
		return fmt.Errorf("%s %s: %w", cl.name, cl.cfg.series, runErr)
	}
	return nil
}

// emit samples an interval of dur seconds ending at now in which n transactions
// completed, taking busy together: their mean time and the interval's rate.
func (cl *rrClient) emit(now time.Time, dur float64, n int64, busy time.Duration) {
	if n <= 0 || dur <= 0 || busy <= 0 {
		return
	}
	t := unix(now)
	cl.env.Emit(cl.cfg.series, datafile.Sample{T: t, V: busy.Seconds() * 1000 / float64(n), Dur: dur})
	if cl.cfg.rateSeries != "" {
		cl.env.Emit(cl.cfg.rateSeries, datafile.Sample{T: t, V: float64(n) / dur, Dur: dur})
	}
}

// rrDone counts completed transactions and their time together, so that a
// sample reads a count and the time of exactly those.
type rrDone struct {
	mu   sync.Mutex
	n    int64
	busy time.Duration
}

func (d *rrDone) add(took time.Duration) {
	d.mu.Lock()
	d.n++
	d.busy += took
	d.mu.Unlock()
}

func (d *rrDone) count() int64 {
	n, _ := d.read()
	return n
}

func (d *rrDone) read() (int64, time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n, d.busy
}

// connectTCP connects and has the server take the connection.
func (cl *rrClient) connectTCP(ctx context.Context) (net.Conn, error) {
	c, err := dialRR(ctx, "tcp", cl.spec.Addr, cl.cfg.tos)
	if err != nil {
		return nil, err
	}
	nonce, err := readNonce(c, helloTimeout)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("the server refused the connection (not an rr-server?): %w", err)
	}
	hl := rrHello{RequestSize: cl.cfg.request, ResponseSize: cl.cfg.response, TOS: max(cl.cfg.tos, 0)}
	hl.MAC = macFields(cl.spec.Token, ctxTCPRR, nonce, hl.fields()...)
	h, err := json.Marshal(hl)
	if err == nil {
		_, err = c.Write(append(h, '\n'))
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("send hello: %w", err)
	}
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil || ack[0] != '\n' {
		c.Close()
		if err == nil {
			err = fmt.Errorf("answer %q", ack[0])
		}
		return nil, fmt.Errorf("the server refused the connection (wrong token, or not an rr-server): %w", err)
	}
	c.SetReadDeadline(time.Time{})
	return c, nil
}

// transactTCP runs transactions until ctx ends (nil) or the connection fails.
func (cl *rrClient) transactTCP(ctx context.Context, c net.Conn, done *rrDone) error {
	req := make([]byte, cl.cfg.request)
	for {
		began := time.Now()
		if _, err := c.Write(req); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("send request: %w", err)
		}
		// The response's bytes are not looked at: only their count matters.
		if _, err := io.CopyN(io.Discard, c, int64(cl.cfg.response)); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("the server closed the connection")
			}
			return fmt.Errorf("receive response: %w", err)
		}
		done.add(time.Since(began))
	}
}

// transactUDP runs transactions until ctx ends. A transaction whose response does
// not come within the timeout is counted lost, and the next one goes: a late
// response is told from the current one by its sequence number and ignored.
func (cl *rrClient) transactUDP(ctx context.Context, c net.Conn, done *rrDone, tally *rrTally) error {
	// The MAC covers this socket's address as the server will see it.
	local, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return fmt.Errorf("local address %v: %w", c.LocalAddr(), err)
	}
	req := make([]byte, max(cl.cfg.request, udpRequestHeader))
	binary.BigEndian.PutUint32(req[24:28], uint32(max(cl.cfg.response, udpResponseHeader)))
	req[28] = byte(max(cl.cfg.tos, 0))
	resp := make([]byte, 1<<16)
	// lose counts a transaction lost to err and, for an error that came before the
	// timeout (a refused port, a send the qdisc refused), waits out the rest of it:
	// the next transaction goes no sooner than after a loss on the path.
	lose := func(deadline time.Time, err error) {
		tally.lost++
		if err != nil {
			tally.lastErr = err
			sleepUntil(ctx, deadline)
		}
	}
	for seq := uint64(1); ; seq++ {
		binary.BigEndian.PutUint64(req[16:24], seq)
		copy(req[:rrKeySize], udpRequestMAC(cl.spec.Token, local, req[rrKeySize:udpRequestHeader]))
		began := time.Now()
		deadline := began.Add(cl.cfg.timeout)
		if _, err := c.Write(req); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			lose(deadline, err)
			continue
		}
		c.SetReadDeadline(deadline)
		for {
			n, err := c.Read(resp)
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				lose(deadline, nil)
				break
			}
			if err != nil {
				lose(deadline, err)
				break
			}
			if n >= udpResponseHeader && binary.BigEndian.Uint64(resp[:8]) == seq {
				done.add(time.Since(began))
				break
			}
		}
	}
}
