package runners

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/bloatbench/bloatbench/datafile"
)

// ListenSpec opens the data listener on the server.
type ListenSpec struct {
	Addr  string  `json:"addr"`  // the server's test_ip
	Token string  `json:"token"` // connections must present it
	Step  float64 `json:"step"`  // sampling interval for streams this side receives, seconds
	// Start is the run's t0 on this host's clock (Unix seconds; 0 = when it
	// listens): the receivers' samples are on its step grid.
	Start float64 `json:"start,omitempty"`
	// Plan is every stream the run's clients will open, by flow name, and
	// Duration the longest they run: a hello that asks for anything else is
	// refused. Nil takes any well-formed hello (a listener started on its own).
	Plan     map[string]StreamFlow
	Duration float64
}

// streamsPlanOf is what the tcp-streams jobs that connect to a listener will open.
func streamsPlanOf(clients []Client) (map[string]StreamFlow, float64, error) {
	if len(clients) == 0 {
		return nil, 0, nil
	}
	plan, longest := map[string]StreamFlow{}, 0.0
	for _, c := range clients {
		if c.Kind != "tcp-streams" {
			return nil, 0, fmt.Errorf("tcp-listen: a %s job connects to it: only tcp-streams can", c.Kind)
		}
		var p streamsPlan
		if err := decodeRaw(c.Params, &p); err != nil {
			return nil, 0, fmt.Errorf("tcp-listen: a client's plan: %w", err)
		}
		for _, f := range p.Flows {
			plan[f.Name] = f
		}
		longest = max(longest, c.Duration)
	}
	return plan, longest, nil
}

// planned refuses a hello that is not one of the plan's streams as planned.
func (l *Listener) planned(h hello) error {
	if l.spec.Plan == nil {
		return nil
	}
	f, ok := l.spec.Plan[h.Flow]
	switch {
	case !ok:
		return fmt.Errorf("stream %q is not one the run planned", truncate(h.Flow))
	case f.Direction != h.Direction || f.CC != h.CC || f.TOS != h.TOS || f.TCPInfo != h.TCPInfo || f.Shape != h.Shape:
		return fmt.Errorf("stream %q asks for direction %q, cc %q, TOS %d, tcp_info %v, sockets %q; the run planned %q, %q, %d, %v, %q",
			truncate(h.Flow), truncate(h.Direction), truncate(h.CC), h.TOS, h.TCPInfo, h.Shape, f.Direction, f.CC, f.TOS, f.TCPInfo, f.Shape)
	case h.Duration > l.spec.Duration:
		return fmt.Errorf("stream %q asks for %gs: the run planned %gs", truncate(h.Flow), h.Duration, l.spec.Duration)
	}
	return nil
}

// StreamsSpec runs TCP streams from the client to a listener.
type StreamsSpec struct {
	Addr     string       `json:"addr"` // host:port of the listener
	Token    string       `json:"token"`
	Step     float64      `json:"step"`
	Duration float64      `json:"duration"` // seconds
	Flows    []StreamFlow `json:"flows"`
	// Start is when the streams start, Unix seconds on this host's clock (the run's
	// t0 plus its delay); they connect before it. 0 = as soon as connected.
	Start float64 `json:"start,omitempty"`
	// env declares the TCP_INFO series of upload flows, named for host.
	env  Env
	host string
}

// StreamFlow is one TCP stream.
type StreamFlow struct {
	Name      string `json:"name"` // series name, e.g. "TCP download::1"
	Direction string `json:"direction"`
	CC        string `json:"cc,omitempty"`
	// TOS is the IP TOS byte (DSCP << 2) both ends mark the stream's packets
	// with, as netperf's -Y marks them; 0 leaves them unmarked.
	TOS int `json:"tos,omitempty"`
	// TCPInfo has the sender read the socket's TCP_INFO each step.
	TCPInfo bool `json:"tcp_info,omitempty"`
	// ECN is what the flow asks its connection to negotiate (off, on, accecn;
	// "" takes the host's setting): checked once connected (tcpecn.go).
	ECN string `json:"ecn,omitempty"`
	// Shape is how both ends use their sockets (sockshape.go).
	Shape SocketShape `json:"shape,omitzero"`
}

// hello is the first line a stream's client sends, once it has the server's
// nonce: the stream's fields and their MAC (auth.go). The token itself is never
// sent.
type hello struct {
	MAC       []byte  `json:"mac"`
	Flow      string  `json:"flow"`
	Direction string  `json:"direction"`
	CC        string  `json:"cc,omitempty"`
	TOS       int     `json:"tos,omitempty"`
	TCPInfo   bool    `json:"tcp_info,omitempty"`
	Duration  float64 `json:"duration"`
	// Shape is the stream's socket use: the server sends or receives so.
	Shape SocketShape `json:"shape,omitzero"`
}

// fields are what the hello's MAC covers: every field the server acts on.
func (h hello) fields() []string {
	return append([]string{h.Flow, h.Direction, h.CC, strconv.Itoa(h.TOS), strconv.FormatBool(h.TCPInfo),
		strconv.FormatFloat(h.Duration, 'g', -1, 64)}, h.Shape.fields()...)
}

const (
	// maxFlowName bounds a hello's flow name: it names a series, which the agent
	// bounds to 512 bytes.
	maxFlowName = 512
	// maxStreamDuration bounds a hello's duration (a day): the server's send
	// deadline is computed from it.
	maxStreamDuration = 86400
)

// check refuses a hello the listener must not act on, before anything is set on
// the socket: a congestion control outside allowed (which root's setsockopt would
// load as a module), a TOS that is not a byte, a name no series could have.
func (h hello) check(allowed map[string]bool) error {
	switch {
	case len(h.Flow) == 0 || len(h.Flow) > maxFlowName || !utf8.ValidString(h.Flow):
		return fmt.Errorf("flow name of %d bytes: want 1 to %d bytes of UTF-8", len(h.Flow), maxFlowName)
	case h.Direction != Upload && h.Direction != Download:
		return fmt.Errorf("flow %q: direction %q", truncate(h.Flow), truncate(h.Direction))
	case h.CC != "" && (!validCC(h.CC) || !allowed[h.CC]):
		return fmt.Errorf("flow %q: congestion control %q is not one this host allows or has loaded", truncate(h.Flow), truncate(h.CC))
	case h.TOS < 0 || h.TOS > 255:
		return fmt.Errorf("flow %q: TOS %d", truncate(h.Flow), h.TOS)
	case !(h.Duration >= 0 && h.Duration <= maxStreamDuration):
		return fmt.Errorf("flow %q: duration %gs", truncate(h.Flow), h.Duration)
	}
	if err := h.Shape.check(); err != nil {
		return fmt.Errorf("flow %q: %w", truncate(h.Flow), err)
	}
	return nil
}

// truncate shortens what a peer sent for a log line.
func truncate(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64])[1:65] + "..."
	}
	return s
}

const (
	// helloTimeout bounds connecting and the hello exchange. Streams may start into a
	// full bottleneck queue where SYNs are dropped and retried at 1, 3, 7, 15 s; the
	// run's own length bounds it as well.
	helloTimeout   = 30 * time.Second
	maxHelloLength = 4096
	// senderGrace bounds how long a server keeps sending after the planned end, should
	// the client never close.
	senderGrace = 10 * time.Second
	// connectAhead is how long before their start time the streams connect, plus
	// connectEach per stream past the first wave of dialing: long enough for the
	// hellos, short as an application that connects when it has data to send.
	// Connected long before their start, the streams run their congestion control
	// on a clock that began at the handshake: BBR takes its minimum RTT there and
	// drains the queue for it (PROBE_RTT) when that sample is 10 s old, so with 2 s
	// ahead every stream drained at once 8 s into the streams (t0 + 10.2 s at
	// -d 2), where iperf3's and netperf's streams, which connect as they start,
	// drain 10 s in. Measured on the shaped local lab (docs/labs.md): 2 s ahead,
	// the loaded ping fell to 2 ms at t0 + 10.2 and 20.4 s in 11 runs of 11; 0.1 s
	// ahead, at t0 + 12.0 s in 4 of 4; iperf3's 10.2-11.0 s after it started.
	connectAhead = 250 * time.Millisecond
	connectEach  = 2 * time.Millisecond
	// dialing bounds the connections in progress at once: a listener's accept queue
	// is 128 connections on kernels before 5.4 (net.core.somaxconn), and a SYN it
	// drops is tried again only after a second, then three.
	dialing = 64
)

// Listener is the server side of the TCP streams: it accepts connections that present
// the run's token, sends on download streams and counts bytes on upload streams.
type Listener struct {
	ln   net.Listener
	spec ListenSpec
	emit Emit
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
	// meters samples the upload streams this side receives.
	meters *sampler
	// env and host are for the TCP_INFO of download streams, which this side sends.
	env  Env
	host string
	// pending bounds the connections not yet authenticated; cc is what a hello may
	// ask for, read once; flows are the names taken, each by one stream only.
	pending *pendingGate
	cc      map[string]bool
	flows   map[string]bool
	// listenCC is the congestion control of the listening socket, which every
	// connection starts with (listenerCC), "" for the host's default,
	// defaultCC; a stream that asks for none is set back to the default.
	listenCC, defaultCC string
	// refused counts connections closed unauthenticated or refused, for the
	// warning at the end.
	refused int
	lastRef string
}

// Listen opens the listener on spec.Addr with a port the kernel picks.
func Listen(ctx context.Context, spec ListenSpec, emit Emit) (*Listener, error) {
	allowed := hostCC()
	return listen(ctx, spec, emit, allowed, listenerCC(spec.Plan, allowed))
}

// listen is Listen with the congestion control of the listening socket, cc.
func listen(ctx context.Context, spec ListenSpec, emit Emit, allowed map[string]bool, cc string) (*Listener, error) {
	l := &Listener{spec: spec, emit: emit, meters: newSampler(emit), pending: newPendingGate(maxPending),
		cc: allowed, flows: map[string]bool{}}
	var lc net.ListenConfig
	if cc != "" {
		// The streams that ask for no congestion control then get the host's
		// default back after their hello, not the listener's.
		def, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
		if err != nil {
			return nil, fmt.Errorf("listen for TCP streams: the host's default congestion control: %w", err)
		}
		l.listenCC, l.defaultCC = cc, strings.TrimSpace(string(def))
		lc.Control = func(_, _ string, rc syscall.RawConn) error { return setCongestion(rc, cc) }
	}
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(spec.Addr, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen for TCP streams on %s: %w", spec.Addr, err)
	}
	l.ln = ln
	return l, nil
}

// Port the listener is on.
func (l *Listener) Port() int { return l.ln.Addr().(*net.TCPAddr).Port }

// Serve accepts streams until ctx ends, then closes the listener and every stream.
func (l *Listener) Serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		l.ln.Close()
	}()
	// The meters sample until the listener has served its last stream, past
	// ctx's end.
	sampling, stopSampling := context.WithCancel(context.WithoutCancel(ctx))
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		l.meters.run(sampling, startTime(l.spec.Start), l.spec.Step)
	}()
	defer func() {
		stopSampling()
		<-samplerDone
	}()
	var delay time.Duration
	acceptFailed := false
	for {
		c, err := l.ln.Accept()
		if err != nil {
			// Out of descriptors, the connection waits in the kernel's queue: a
			// pause and another try, so that it fails at worst, not the run.
			if !acceptBackoff(ctx, err, &delay) {
				break
			}
			if !acceptFailed && l.env.Warn != nil {
				acceptFailed = true
				msg := fmt.Sprintf("accepting a TCP stream failed, trying again: %v", err)
				if errors.Is(err, syscall.EMFILE) {
					msg += " (" + fileLimit() + ")"
				}
				l.env.Warn(msg)
			}
			continue
		}
		delay = 0
		if !l.pending.acquire(ctx, c) {
			// Too many connections that have not said who they are, none of
			// which let go: this one is closed at once.
			c.Close()
			l.refuse("too many connections awaiting their hello")
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if err := l.serveConn(ctx, c.(*net.TCPConn)); err != nil {
				l.mu.Lock()
				l.errs = append(l.errs, err)
				l.mu.Unlock()
			}
		}()
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused > 0 && l.env.Warn != nil {
		l.env.Warn(fmt.Sprintf("the TCP stream listener refused %d connections (the last: %s)", l.refused, l.lastRef))
	}
	return errors.Join(l.errs...)
}

// refuse counts a connection refused and warns of the first: a peer on the test
// network that is not one of the run's agents, or a bug.
func (l *Listener) refuse(why string) {
	l.mu.Lock()
	l.refused++
	l.lastRef = why
	first := l.refused == 1
	l.mu.Unlock()
	if first && l.env.Warn != nil {
		l.env.Warn("the TCP stream listener refused a connection: " + why + "; later refusals are counted at the end")
	}
}

// authenticate runs the challenge and the hello on a connection just accepted,
// holding one of the pending slots until it is done. ok is false for a
// connection that failed them, which is then refused (why) and closed.
func (l *Listener) authenticate(c *net.TCPConn) (h hello, ok bool, why string) {
	defer l.pending.release(c)
	c.SetReadDeadline(time.Now().Add(pendingHello))
	defer c.SetReadDeadline(time.Time{})
	nonce, err := sendNonce(c)
	if err != nil {
		return h, false, err.Error()
	}
	line, err := bufio.NewReader(io.LimitReader(c, maxHelloLength)).ReadBytes('\n')
	if err != nil {
		return h, false, fmt.Sprintf("no hello from %v: %v", c.RemoteAddr(), err)
	}
	if json.Unmarshal(line, &h) != nil || !checkMAC(l.spec.Token, ctxStream, nonce[:], h.MAC, h.fields()...) {
		return h, false, fmt.Sprintf("a hello from %v that is not authenticated by the run's secret", c.RemoteAddr())
	}
	if err := h.check(l.cc); err != nil {
		return h, false, fmt.Sprintf("a hello from %v: %v", c.RemoteAddr(), err)
	}
	if err := l.planned(h); err != nil {
		return h, false, fmt.Sprintf("a hello from %v: %v", c.RemoteAddr(), err)
	}
	l.mu.Lock()
	taken := l.flows[h.Flow]
	l.flows[h.Flow] = true
	l.mu.Unlock()
	if taken {
		return h, false, fmt.Sprintf("a second stream %q from %v", truncate(h.Flow), c.RemoteAddr())
	}
	return h, true, ""
}

func (l *Listener) serveConn(ctx context.Context, c *net.TCPConn) error {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	h, ok, why := l.authenticate(c)
	if !ok {
		// Closed without a word: nothing here ends the run.
		l.refuse(why)
		return nil
	}
	if cc := h.CC; cc != "" || l.listenCC != "" {
		if cc == "" {
			cc = l.defaultCC
		}
		rc, err := c.SyscallConn()
		if err == nil {
			err = setCongestion(rc, cc)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", h.Flow, err)
		}
	}
	if rc, err := c.SyscallConn(); err != nil {
		return fmt.Errorf("%s: %w", h.Flow, err)
	} else if err := setStreamBuffer(rc, h.Direction == Download, bufferOf(h.Shape, h.Direction == Download)); err != nil {
		// This end sends a download and receives an upload.
		return fmt.Errorf("%s: %w", h.Flow, err)
	}
	if h.TOS != 0 {
		// This end's packets carry the mark too: a download's data, an upload's ACKs.
		if err := setTOS(c, c.LocalAddr().(*net.TCPAddr).IP.To4() != nil, h.TOS); err != nil {
			return fmt.Errorf("%s: %w", h.Flow, err)
		}
	}
	// The ack byte tells the client the stream is accepted; it sends nothing past the
	// hello before it, so the buffered reader above cannot have swallowed stream data.
	// Then the client's go byte, once all its streams are accepted, starts this one.
	if _, err := c.Write([]byte{'\n'}); err != nil {
		return nil
	}
	c.SetReadDeadline(time.Now().Add(2 * helloTimeout))
	var start [1]byte
	if _, err := io.ReadFull(c, start[:]); err != nil {
		return nil // the client gave up on its streams
	}
	c.SetReadDeadline(time.Time{})
	switch h.Direction {
	case "download":
		deadline := time.Now().Add(time.Duration(h.Duration*float64(time.Second)) + senderGrace)
		c.SetWriteDeadline(deadline)
		if h.TCPInfo {
			defer startTCPInfo(ctx, c, h.Flow, h.Direction, l.host, startTime(l.spec.Start), l.spec.Step, l.env)()
		}
		send(c, l.env.Streams, h.Shape.SendSize)
		return nil
	case "upload":
		return receive(c, h.Flow, l.meters, l.env.Streams, h.Shape.RecvSize)
	}
	return nil
}

// RunStreams runs the client side: it connects every flow, then, at spec.Start,
// starts them all at once, receiving on download streams and sending on upload
// streams for spec.Duration, then closes them. Connecting first matters behind a full tail-drop
// queue: a SYN racing streams already at full rate can lose every retry (lock-out).
func RunStreams(ctx context.Context, spec StreamsSpec, emit Emit) error {
	// Connecting takes milliseconds on an idle link; the server waits for the go
	// byte 2*helloTimeout at most, whatever the run's delay.
	start := startTime(spec.Start)
	if err := checkFileLimit(len(spec.Flows)); err != nil {
		return err
	}
	ahead := connectAhead + time.Duration(max(0, len(spec.Flows)-dialing))*connectEach
	if sleepUntil(ctx, start.Add(-ahead)) != nil {
		return nil
	}
	conns := make([]*net.TCPConn, len(spec.Flows))
	errs := make([]error, len(spec.Flows))
	var wg sync.WaitGroup
	inProgress := newGate(dialing)
	for i, f := range spec.Flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inProgress.acquire()
			defer inProgress.release()
			if conns[i], errs[i] = connectFlow(ctx, spec, f); errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", f.Name, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || ctx.Err() != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return err
	}
	if anyECN(spec.Flows) {
		got := make([]string, len(conns))
		for i, c := range conns {
			got[i] = negotiatedECN(c)
		}
		for _, l := range ecnReport(spec.Flows, got, clientTCPECN()) {
			spec.env.warn(l.msg, l.alert)
		}
	}
	if sleepUntil(ctx, start) != nil {
		for _, c := range conns {
			c.Close()
		}
		return nil
	}
	for i, f := range spec.Flows {
		declareConn(spec.env, spec.host, f.Name, "tcp", addrPortOf(conns[i].LocalAddr()), addrPortOf(conns[i].RemoteAddr()))
	}
	// Connected late, the streams still run their whole duration.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(spec.Duration*float64(time.Second)))
	defer cancel()
	meters := newSampler(emit)
	sampling, stopSampling := context.WithCancel(context.WithoutCancel(ctx))
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		meters.run(sampling, start, spec.Step)
	}()
	for i, f := range spec.Flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f.TCPInfo && f.Direction == Upload {
				defer startTCPInfo(ctx, conns[i], f.Name, f.Direction, spec.host, start, spec.Step, spec.env)()
			}
			if err := runFlow(ctx, conns[i], f, meters, spec.env.Streams); err != nil {
				errs[i] = fmt.Errorf("%s: %w", f.Name, err)
			}
		}()
	}
	wg.Wait()
	stopSampling()
	<-samplerDone
	return errors.Join(errs...)
}

// connectFlow opens a stream and has the server accept it; nothing flows yet.
func connectFlow(ctx context.Context, spec StreamsSpec, f StreamFlow) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: helloTimeout}
	// Set before connecting, so that the SYN is marked and runs the right
	// congestion control from its first packet.
	d.Control = func(network, _ string, rc syscall.RawConn) error {
		if f.CC != "" {
			if err := setCongestion(rc, f.CC); err != nil {
				return err
			}
		}
		// Before connecting, as netperf sets them: the window scale the SYN
		// offers is chosen from the receive buffer.
		if err := setStreamBuffer(rc, f.Direction == Upload, bufferOf(f.Shape, f.Direction == Upload)); err != nil {
			return err
		}
		if f.TOS != 0 {
			return setTOS(rawConn{rc}, network == "tcp4", f.TOS)
		}
		return nil
	}
	nc, err := d.DialContext(ctx, "tcp", spec.Addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", spec.Addr, err)
	}
	c := nc.(*net.TCPConn)
	nonce, err := readNonce(c, helloTimeout)
	if err != nil {
		c.Close()
		return nil, err
	}
	hl := hello{Flow: f.Name, Direction: f.Direction, CC: f.CC, TOS: f.TOS, TCPInfo: f.TCPInfo, Duration: spec.Duration, Shape: f.Shape}
	hl.MAC = macFields(spec.Token, ctxStream, nonce, hl.fields()...)
	h, _ := json.Marshal(hl)
	if _, err := c.Write(append(h, '\n')); err != nil {
		c.Close()
		return nil, fmt.Errorf("send stream hello: %w", err)
	}
	// The server answers one byte when it has accepted the stream.
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("the server did not accept the stream (wrong token, a hello it refused, or listener gone): %w", err)
	}
	c.SetReadDeadline(time.Time{})
	return c, nil
}

// runFlow starts an accepted stream with the go byte and runs it until ctx ends.
func runFlow(ctx context.Context, c *net.TCPConn, f StreamFlow, meters *sampler, g *StreamGate) error {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Write([]byte{'g'}); err != nil {
		return fmt.Errorf("start stream: %w", err)
	}
	switch f.Direction {
	case "download":
		return receive(c, f.Name, meters, g, f.Shape.RecvSize)
	case "upload":
		send(c, g, f.Shape.SendSize)
		// Half-close so the receiver sees the end and counts its last interval.
		c.CloseWrite()
		io.Copy(io.Discard, c)
		return nil
	}
	return fmt.Errorf("unknown direction %q", f.Direction)
}

// receive counts a stream's bytes until it ends, one throughput sample every step
// (bytes in the interval and its exact length, measured at the receiver) and a last
// one at its end.
func receive(c *net.TCPConn, series string, meters *sampler, g *StreamGate, size int) error {
	m := meters.start(series, time.Now())
	var err error
	if size > 0 {
		err = readCopy(c, m, g, size)
	} else {
		err = discard(c, m, g)
	}
	meters.stop(m, time.Now())
	return err
}

// checkFileLimit refuses streams the process could not open: each is a file
// descriptor. Go raises the soft limit to the hard one at start; a host whose hard
// limit is low (1024 on some) must raise it.
func checkFileLimit(streams int) error {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return nil // the kernel will say so at the stream that fails
	}
	// The agent's own files (SSH pipes, sockets for ping, tc) besides the streams.
	if need := uint64(streams) + 64; lim.Cur < need {
		return fmt.Errorf("%d streams need about %d open files, and %s", streams, need, fileLimit())
	}
	return nil
}

// fileLimit says what the open-file limit is and how to raise it.
func fileLimit() string {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return "the open-file limit is unknown"
	}
	return fmt.Sprintf("this host's open-file limit is %d (hard %d): raise it for the login, e.g. LimitNOFILE in sshd's systemd unit or nofile in /etc/security/limits.conf", lim.Cur, lim.Max)
}

// rawConn gives a dialer's raw connection the syscall.Conn that setTOS takes.
type rawConn struct{ rc syscall.RawConn }

func (r rawConn) SyscallConn() (syscall.RawConn, error) { return r.rc, nil }

// setCongestion sets TCP_CONGESTION on a socket.
func setCongestion(rc syscall.RawConn, cc string) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, cc)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("congestion control %q: %w (see /proc/sys/net/ipv4/tcp_available_congestion_control)", cc, serr)
	}
	return nil
}

// sampleOf is a throughput sample: bytes over an interval ending at now.
func sampleOf(now time.Time, dur float64, bytes int64) datafile.Sample {
	return datafile.Sample{T: unix(now), V: float64(bytes) * 8 / dur / 1e6, Dur: dur, Bytes: bytes}
}

// MaxStreams bounds a test's TCP streams, all jobs and directions together: each
// stream is a socket and a goroutine on both ends.
const MaxStreams = 1024

// tcpListenKind is the server side of TCP streams: it binds to its Target and
// answers with its port; it takes no parameters.
var tcpListenKind = Kind{
	Background: true,
	Plan:       planNone("tcp-listen"),
	Start: startNone("tcp-listen", func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		plan, longest, err := streamsPlanOf(spec.Clients)
		if err != nil {
			return nil, Started{}, err
		}
		l, err := Listen(ctx, ListenSpec{Addr: spec.Target, Token: spec.Token, Step: spec.Step, Start: spec.Start, Plan: plan, Duration: longest}, env.Emit)
		if err != nil {
			return nil, Started{}, err
		}
		l.env, l.host = env, spec.Host
		return JobFunc(l.Serve), Started{Port: l.Port()}, nil
	}),
}

// streamsParams are a tcp-streams job's parameters as a test writes them: groups
// of flows.
type streamsParams struct {
	Flows []flowGroup `json:"flows"`
}

// flowGroup is Count streams one way; CC lists congestion controls given
// round-robin.
type flowGroup struct {
	Direction string      `json:"direction"`
	Count     wholeNumber `json:"count"`
	CC        string      `json:"cc,omitempty"`
	// TOS marks the group's streams: a DSCP name (CS1, EF) or the TOS byte.
	TOS string `json:"tos,omitempty"`
	// Name names the series of a group of one stream, as flent's rrul names
	// "TCP upload BK"; flows are "TCP DIRECTION::N" otherwise.
	Name string `json:"name,omitempty"`
	// TCPInfo has each stream's sender read TCP_INFO every step.
	TCPInfo boolFlag `json:"tcp_info,omitempty"`
	// ECN is what the group's connections must negotiate: off, on or accecn.
	ECN string `json:"ecn,omitempty"`
	// The group's socket use (SocketShape), as a test writes it: bytes, or
	// with netperf's suffixes.
	SendSize   byteSize `json:"send_size,omitempty"`
	RecvSize   byteSize `json:"recv_size,omitempty"`
	SendBuffer byteSize `json:"send_buffer,omitempty"`
	RecvBuffer byteSize `json:"recv_buffer,omitempty"`
}

// streamsPlan is what the agent gets: every flow, named.
type streamsPlan struct {
	Flows []StreamFlow `json:"flows"`
}

// Stream directions; the client side of a tcp-streams job originates every
// connection.
const (
	Upload   = "upload"   // from the job's host to its peer
	Download = "download" // from the peer to the job's host
)

// FlowName is a TCP flow's series name, flent's: "TCP download::3".
func FlowName(direction string, index int) string {
	return fmt.Sprintf("TCP %s::%d", direction, index)
}

var tcpStreamsKind = Kind{
	Plan: planWith(func(p streamsParams, pl *Planner) (any, []datafile.Series, error) {
		var plan streamsPlan
		var series []datafile.Series
		ioTotal := 0
		for i, g := range p.Flows {
			if g.Direction != Upload && g.Direction != Download {
				return nil, nil, fmt.Errorf("flows[%d].direction is %q: use %q or %q", i, g.Direction, Upload, Download)
			}
			n := int(g.Count)
			if n < 0 || n > MaxStreams {
				return nil, nil, fmt.Errorf("flows[%d].count is %d: want a whole number from 0 to %d", i, n, MaxStreams)
			}
			if total := pl.Count(Upload) + pl.Count(Download) + n; total > MaxStreams {
				return nil, nil, fmt.Errorf("flows[%d].count %d makes %d streams in the test: at most %d", i, n, total, MaxStreams)
			}
			var ccs []string
			if g.CC != "" {
				ccs = strings.Split(g.CC, ",")
				for _, cc := range ccs {
					if !validCC(cc) {
						return nil, nil, fmt.Errorf("flows[%d].cc %q: %q is not a congestion control name", i, g.CC, cc)
					}
				}
			}
			tos := 0
			if g.TOS != "" {
				var err error
				if tos, err = ParseTOS(g.TOS); err != nil {
					return nil, nil, fmt.Errorf("flows[%d].tos: %w", i, err)
				}
			}
			if g.Name != "" && n != 1 {
				return nil, nil, fmt.Errorf("flows[%d].name %q names one stream; the group has %d", i, g.Name, n)
			}
			if err := checkECNParam(g.ECN); err != nil {
				return nil, nil, fmt.Errorf("flows[%d].%w", i, err)
			}
			shape := SocketShape{SendSize: int(g.SendSize), RecvSize: int(g.RecvSize), SendBuffer: int(g.SendBuffer), RecvBuffer: int(g.RecvBuffer)}
			if err := shape.check(); err != nil {
				return nil, nil, fmt.Errorf("flows[%d]: %w", i, err)
			}
			if ioTotal += n * shape.ioBytes(); ioTotal > maxIOTotal {
				return nil, nil, fmt.Errorf("flows[%d]: the test's streams would take %d MB of buffers for send_size and recv_size: at most %d MB; use fewer streams or smaller sizes", i, ioTotal>>20, maxIOTotal>>20)
			}
			for k := 0; k < n; k++ {
				f := StreamFlow{Name: FlowName(g.Direction, pl.Next(g.Direction)), Direction: g.Direction, TOS: tos, TCPInfo: bool(g.TCPInfo), ECN: g.ECN,
					Shape: shape}
				if g.Name != "" {
					f.Name = g.Name
				}
				if len(ccs) > 0 {
					f.CC = ccs[k%len(ccs)]
				}
				if err := pl.Claim(f.Name); err != nil {
					return nil, nil, err
				}
				// The receiver counts a stream: the peer for uploads.
				host := ""
				if f.Direction == Upload {
					host = datafile.HostPeer
				}
				series = append(series, datafile.Series{Name: f.Name, Kind: datafile.KindTCP, Units: "Mbits/s", Host: host,
					Direction: f.Direction, Flow: pl.Count(f.Direction), CC: f.CC, Marking: g.TOS})
				plan.Flows = append(plan.Flows, f)
			}
			if g.ECN != "" {
				group := plan.Flows[len(plan.Flows)-n:]
				by := group[0].Name
				if n > 1 {
					by += " to " + group[n-1].Name
				}
				if err := pl.WantSysctl(TCPECNSysctl, ecnWant(g.ECN, by)); err != nil {
					return nil, nil, fmt.Errorf("flows[%d].ecn: %w", i, err)
				}
			}
		}
		return plan, series, nil
	}),
	Start: func(ctx context.Context, spec JobSpec, env Env) (Job, Started, error) {
		var p streamsPlan
		if err := decodeRaw(spec.Params, &p); err != nil {
			return nil, Started{}, err
		}
		if spec.Addr == "" {
			return nil, Started{}, fmt.Errorf("tcp-streams: no listener to connect to (the job needs connect:)")
		}
		s := StreamsSpec{Addr: spec.Addr, Token: spec.Token, Step: spec.Step, Duration: spec.Duration, Flows: p.Flows, Start: spec.Start,
			env: env, host: spec.Host}
		return JobFunc(func(ctx context.Context) error { return RunStreams(ctx, s, env.Emit) }), Started{}, nil
	},
}

// validCC accepts what the kernel accepts as a TCP_CONGESTION name (TCP_CA_NAME_MAX 16).
func validCC(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
