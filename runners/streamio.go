package runners

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	linux "golang.org/x/sys/unix"
)

// How a stream moves its bytes. On a fast path (an unshaped veth, a 10 GigE link)
// the endpoints' CPU, not the link, can set the throughput, and nearly all of a
// stream's CPU is in the kernel: pprof of the agents during an unshaped tcp_4down
// put 96-97% of their own time in read and write system calls. So the cost that
// counts is the kernel's copying (measured in docs/benchmark.md):
//   - the sender hands the kernel pages of a shared file of zeros with sendfile, so
//     nothing is copied from user memory (iperf3 -Z does the same);
//   - the receiver reads with MSG_TRUNC, which TCP takes as "discard": the kernel
//     acknowledges and frees the data without copying it out, and the stream needs
//     no receive buffer (1024 streams of 1 MB buffers were 1 GB of agent memory).
// The sender falls back to plain writes when the kernel refuses (no memfd, sendfile
// unsupported for the socket); TCP has taken MSG_TRUNC since Linux 2.4.

// chunk is what one system call asks to move: large, so that the per-call cost is
// spread over many bytes.
const chunk = 1 << 20

// zeroSource is the file senders send from: chunk bytes of zeros in memory, shared
// by every stream of the process (each sendfile takes its own references to its
// pages).
var zeroSource = sync.OnceValues(func() (*os.File, error) {
	fd, err := linux.MemfdCreate("bloatbench-zeros", linux.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "bloatbench-zeros")
	// Written, not only truncated: real pages, not holes the kernel might treat
	// specially on the way out.
	if _, err := f.Write(zeros); err != nil {
		f.Close()
		return nil, fmt.Errorf("fill memfd: %w", err)
	}
	return f, nil
})

// zeros is the fallback sender's buffer, shared: senders never modify it.
var zeros = make([]byte, chunk)

// send writes until the connection fails, is closed or passes its write deadline:
// that is how a stream ends. A size above 0 has it write that many bytes a call
// from a buffer of the stream's own, as an ordinary application does (netperf's
// -m); 0 sends shared pages with sendfile.
func send(c *net.TCPConn, g *StreamGate, size int) {
	defer g.stream()()
	if size > 0 {
		writeCopy(c, g, make([]byte, size))
		return
	}
	if src, err := zeroSource(); err == nil {
		if sendFile(c, src, g) == nil {
			return
		}
	}
	writeCopy(c, g, zeros)
}

// writeCopy writes buf over and over until the stream ends. The gate is held
// for each non-blocking write(2) alone, as sendFile holds it: a stream waiting
// for room in its socket waits in Go's netpoller without a slot, which a
// blocking c.Write would keep.
func writeCopy(c *net.TCPConn, g *StreamGate, buf []byte) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	rc.Write(func(fd uintptr) bool {
		for {
			held := g.enter()
			_, err := linux.Write(int(fd), buf)
			g.leave(held)
			switch {
			case err == linux.EAGAIN:
				return false // wait until the socket takes more
			case err == linux.EINTR:
			case err != nil:
				return true // the stream ended: closed, reset or past its deadline
			}
		}
	})
}

// readCopy receives until the stream ends as an ordinary application does (netperf's
// -M): each read copies up to size bytes into the stream's own buffer, the gate
// held for the non-blocking read(2) alone, as discard holds it. It returns as
// discard does.
func readCopy(c *net.TCPConn, m *meter, g *StreamGate, size int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	defer g.stream()()
	buf := make([]byte, size)
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			held := g.enter()
			n, e := linux.Read(int(fd), buf)
			g.leave(held)
			switch {
			case e == linux.EAGAIN:
				return false
			case e == linux.EINTR:
				continue
			case e != nil:
				rerr = e
				return true
			case n == 0:
				return true // the peer closed
			}
			m.add(int64(n))
		}
	})
	if err == nil {
		err = rerr
	}
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, linux.ECONNRESET) {
		return nil
	}
	return fmt.Errorf("receive: %w", err)
}

// errFallback says sendfile is not supported for this socket: send plain writes.
var errFallback = errors.New("sendfile not supported")

// sendFile sends src's pages over and over until the connection ends (nil) or
// sendfile turns out not to work for it (errFallback, before any byte went).
func sendFile(c *net.TCPConn, src *os.File, g *StreamGate) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return errFallback
	}
	in := int(src.Fd())
	var sent bool
	var serr error
	werr := rc.Write(func(fd uintptr) bool {
		for {
			// Each call starts at offset 0 of the file: the bytes are all zeros and
			// where a partial send stopped does not matter.
			var off int64
			held := g.enter()
			n, err := linux.Sendfile(int(fd), in, &off, chunk)
			g.leave(held)
			switch {
			case err == linux.EAGAIN:
				return false // wait until the socket takes more
			case err == linux.EINTR:
				continue
			case err != nil:
				serr = err
				return true
			}
			if n > 0 {
				sent = true
			}
		}
	})
	if !sent && (errors.Is(serr, linux.EINVAL) || errors.Is(serr, linux.ENOSYS) || errors.Is(serr, linux.EOPNOTSUPP)) {
		return errFallback
	}
	_ = werr // the stream ended: closed, reset or past its deadline
	return nil
}

// discard receives until the stream ends, counting the bytes into m without copying
// them out of the kernel. It returns nil when the peer closed the stream, or when it
// was closed here, and the error otherwise.
func discard(c *net.TCPConn, m *meter, g *StreamGate) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	defer g.stream()()
	var rerr error
	lw := lowWater{mark: 1, start: time.Now()}
	for {
		err = rc.Read(func(fd uintptr) bool {
			for {
				// No buffer: with MSG_TRUNC TCP frees what it would have copied.
				held := g.enter()
				n, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, 0, chunk, linux.MSG_TRUNC, 0, 0)
				g.leave(held)
				switch {
				case e == linux.EAGAIN:
					lw.wait(c)
					return false
				case e == linux.EINTR:
					continue
				case e != 0:
					rerr = e
					return true
				case n == 0:
					return true // the peer closed
				}
				m.add(int64(n))
				lw.read(int(fd), int64(n))
			}
		})
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		// Less than the mark came within lowWaterStall: the stream slowed down.
		rc.Control(func(fd uintptr) { lw.stalled(c, int(fd)) })
	}
	if err == nil {
		err = rerr
	}
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, linux.ECONNRESET) {
		return nil
	}
	return fmt.Errorf("receive: %w", err)
}

// A fast stream's receiver reads in batches: it sets the socket's receive low-water
// mark (SO_RCVLOWAT) to what the stream brings in lowWaterDelay, so that the kernel
// wakes it when that much has arrived, not for every segment. Woken per segment,
// the receiver emptied the queue as fast as it filled, and each read sent the
// sender a window update: on the unshaped lab the kernel's receive work spilled
// into ksoftirqd (1.1 s of 8.5 s of CPU against iperf3's 0.1), whose deferred
// deliveries arrived out of order and were retransmitted (200-300 thousand
// segments in 5 s against iperf3's 75-115 thousand, nearly all spurious). With a
// fixed 256 KB mark, three rounds of 5 s beside iperf3 -P N -R: 1 stream 16.8 ->
// 23.4 Gbit/s (iperf3 18.3), 2 streams 24.1 -> 27.5 (29.4), 4 streams 28.2 -> 37.4
// (26.7); 128 KB and 512 KB did as well on 2 streams, 64 KB less.
//
// The mark follows the stream's rate, measured over lowWaterWindow, so that a read
// waits for about lowWaterDelay of data: a slow stream (under about 500 Mbit/s)
// keeps the kernel's mark of one byte and reads every segment as it lands, as
// before. A stream that slows down is not held: a read that waits lowWaterStall
// without the mark's worth arriving takes what is there, and the mark halves. So a
// byte is counted within about lowWaterDelay of its arrival while the rate holds,
// and at most lowWaterStall after it when the rate falls, against samples a step
// apart (200 ms by default, 10 ms at the least). The adaptive mark,
// 5 rounds of 5 s beside iperf3: 2 streams 22.8 -> 24.9 Gbit/s (iperf3 28.9, from
// 22.4 to 54.7), 4 streams 25.7 -> 34.2 (26.7); 3 rounds, 1 stream 17.2 -> 22.3
// (16.5).
const (
	lowWaterDelay  = 250 * time.Microsecond
	lowWaterMin    = 16 << 10  // below this the mark stays one byte
	lowWaterMax    = 256 << 10 // more gained nothing measured
	lowWaterWindow = 10 * time.Millisecond
	lowWaterStall  = 10 * time.Millisecond
)

// lowWaterFor is the mark for a stream receiving rate bytes a second into a receive
// buffer of rcvbuf bytes. It stays under an eighth of the buffer: Linux grows the
// buffer and clamps the window to the mark when the mark would not fit in it
// (tcp_set_rcvlowat), and the window is the sender's to use, not the mark's.
func lowWaterFor(rate float64, rcvbuf int) int {
	n := min(int(rate*lowWaterDelay.Seconds()), lowWaterMax, rcvbuf/8)
	if n < lowWaterMin {
		return 1
	}
	return n
}

// lowWater is one receiving stream's mark and the rate it is measured from.
type lowWater struct {
	mark     int       // the socket's SO_RCVLOWAT
	off      bool      // the kernel refused it: one byte, as every stream had
	start    time.Time // of the rate's window
	bytes    int64     // read since start
	deadline time.Time // the read deadline set while the mark is above one byte
}

// read counts n bytes read and, once a window has passed, sets the mark for the
// rate measured over it.
func (l *lowWater) read(fd int, n int64) {
	if l.off {
		return
	}
	l.bytes += n
	now := time.Now()
	el := now.Sub(l.start)
	if el < lowWaterWindow {
		return
	}
	rcvbuf, err := linux.GetsockoptInt(fd, linux.SOL_SOCKET, linux.SO_RCVBUF)
	if err == nil {
		mark := lowWaterFor(float64(l.bytes)/el.Seconds(), rcvbuf)
		// A few percent either way is not worth a system call.
		if mark != l.mark && (mark == 1 || l.mark == 1 || mark > l.mark*5/4 || mark < l.mark*3/4) {
			err = l.set(fd, mark)
		}
	}
	if err != nil {
		l.off = true
	}
	l.start, l.bytes = now, 0
}

func (l *lowWater) set(fd, mark int) error {
	if err := linux.SetsockoptInt(fd, linux.SOL_SOCKET, linux.SO_RCVLOWAT, mark); err != nil {
		return err
	}
	l.mark = mark
	return nil
}

// wait is called before the receiver waits for the socket: above one byte, the wait
// ends at a deadline lowWaterStall/2 to lowWaterStall away (renewed only when half
// of it is gone, not on every wait).
func (l *lowWater) wait(c *net.TCPConn) {
	if l.mark <= 1 {
		if !l.deadline.IsZero() {
			l.deadline = time.Time{}
			c.SetReadDeadline(l.deadline)
		}
		return
	}
	if now := time.Now(); l.deadline.Sub(now) < lowWaterStall/2 {
		l.deadline = now.Add(lowWaterStall)
		c.SetReadDeadline(l.deadline)
	}
}

// stalled is called when a wait reached its deadline: the mark halves (to one byte
// below lowWaterMin), which also wakes the socket if anything is queued
// (tcp_set_rcvlowat). Halved, not reset: with more streams than cores a receiver
// can be off its core for a few milliseconds, and its stream has not slowed.
func (l *lowWater) stalled(c *net.TCPConn, fd int) {
	l.deadline = time.Time{}
	c.SetReadDeadline(l.deadline)
	mark := l.mark / 2
	if mark < lowWaterMin {
		mark = 1
	}
	if l.set(fd, mark) != nil {
		l.off = true
	}
}

// StreamGate bounds how many of an agent's streams are in a send or receive system
// call at once, once there are many streams. On a fast path those calls are long
// (on veth the receiver's softirq runs in the sender's call), and with 1024 streams
// nearly all of them are runnable at once: the agent's other goroutines, the qdisc
// sampler and the ping, waited behind them in Go's run queue, and the tc it reads
// got little CPU. The server's qdisc series missed 68-72% of their grid with 1024
// streams; bounded, none. Streams past the bound wait parked in Go. With 1024
// streams on 2 cores, side by side: no bound 25.0 Gbit/s and 67% of the server's
// qdisc grid missed; 16 per processor 20.0 and 7% missed; 4 per processor 18.5 and
// none missed.
//
// The bound costs throughput wherever it holds streams back, whatever its size: on
// 2 cores, 20 s runs, 64 streams made 36 Gbit/s unbounded, 28 with 16 slots per
// processor and 27 with 4; 16 streams 32-37 unbounded against 29-33 with 4 per
// processor (NewStreamGate's, which held 16 streams back then). And it is not
// needed below a few dozen streams: unbounded, 16 and 32 streams kept every qdisc
// and ping sample on its grid (110 of 110, twice each), 64 streams lost 6 of the
// server's 110. So the gate engages only past engageAt streams (16 per processor),
// and then bounds them to its slots (4 per processor). Below that it costs an
// atomic load per system call.
//
// One agent has one, shared by all its stream jobs (Env.Streams); a nil gate
// bounds nothing.
type StreamGate struct {
	slots    chan struct{}
	engageAt int64        // more streams than this, and the slots bound them
	active   atomic.Int64 // streams moving bytes
}

// NewStreamGate is the bound an agent's streams share: past 16 streams per
// processor, 4 per processor in system calls at once.
func NewStreamGate() *StreamGate {
	p := runtime.GOMAXPROCS(0)
	return newStreamGate(4*p, 16*p)
}

func newStreamGate(slots, engageAt int) *StreamGate {
	slots = max(slots, 1)
	return &StreamGate{slots: make(chan struct{}, slots), engageAt: int64(max(engageAt, slots))}
}

// stream counts a stream in for as long as it moves bytes; call the result when it
// stops.
func (g *StreamGate) stream() (done func()) {
	if g == nil {
		return func() {}
	}
	g.active.Add(1)
	return func() { g.active.Add(-1) }
}

// enter waits for a slot when the streams are more than engageAt; held says whether
// it took one, for leave. Below that it costs an atomic load, not a channel's lock,
// per system call.
func (g *StreamGate) enter() (held bool) {
	if g == nil || g.active.Load() <= g.engageAt {
		return false
	}
	g.slots <- struct{}{}
	return true
}

func (g *StreamGate) leave(held bool) {
	if held {
		<-g.slots
	}
}

// gate is a counting semaphore.
type gate chan struct{}

func newGate(n int) gate { return make(gate, max(n, 1)) }

func (g gate) acquire() { g <- struct{}{} }
func (g gate) release() { <-g }

// meter counts one stream's bytes; the receiving loop adds, the sampler reads once
// a step.
type meter struct {
	series string
	bytes  atomic.Int64
	// last sample's time and byte count: the sampler's alone.
	last      time.Time
	lastBytes int64
}

func (m *meter) add(n int64) { m.bytes.Add(n) }

// sampler emits one throughput sample per stream and step, for every stream of a
// runner at once: one timer for all of them, whatever their number (1024 streams
// with a ticker each were 5000 wakeups a second).
type sampler struct {
	emit   Emit
	mu     sync.Mutex
	meters map[*meter]struct{}
}

func newSampler(emit Emit) *sampler {
	return &sampler{emit: emit, meters: map[*meter]struct{}{}}
}

// start begins measuring a stream at now.
func (s *sampler) start(series string, now time.Time) *meter {
	m := &meter{series: series, last: now}
	s.mu.Lock()
	s.meters[m] = struct{}{}
	s.mu.Unlock()
	return m
}

// stop takes the stream's last sample, at now, and stops measuring it.
func (s *sampler) stop(m *meter, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.meters[m]; !ok {
		return
	}
	delete(s.meters, m)
	s.sample(m, now)
}

// tick takes every stream's sample at now.
func (s *sampler) tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for m := range s.meters {
		s.sample(m, now)
	}
}

// sample emits the bytes since m's last sample over the interval since; an empty
// interval (two samples at one instant) emits nothing.
func (s *sampler) sample(m *meter, now time.Time) {
	dur := now.Sub(m.last).Seconds()
	if dur <= 0 {
		return
	}
	b := m.bytes.Load()
	s.emit(m.series, sampleOf(now, dur, b-m.lastBytes))
	m.last, m.lastBytes = now, b
}

// run ticks every step of the grid from start on until ctx ends.
func (s *sampler) run(ctx context.Context, start time.Time, step float64) {
	g := newStepGrid(start, step, 1, true)
	defer g.close()
	for {
		now, ev, _ := g.wait(ctx, nil)
		if ev != stepTick {
			return
		}
		s.tick(now)
	}
}
