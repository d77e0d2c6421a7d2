package runners

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// SocketShape is how a stream's two ends use their sockets, as netperf's options
// set them: the bytes each send and receive call asks for (-m and -M) and fixed
// socket buffers (-s and -S; a buffer set by the application turns the kernel's
// autotuning off for it). The zero shape is the default: autotuned buffers and
// the fast path (sendfile and MSG_TRUNC, streamio.go).
//
// Why a run would want another: an old flent table was measured with netperf,
// whose socket use sets the flows' windows, and so the queue they keep and how
// they share the link (docs/reports.md, "flent with netperf"). These reproduce it
// on the same lab.
type SocketShape struct {
	// SendSize is the bytes of each write the sender makes from a buffer of its
	// own (0: sendfile from shared pages).
	SendSize int `json:"send_size,omitempty"`
	// RecvSize is the bytes each read of the receiver asks for, copied into a
	// buffer of its own (0: MSG_TRUNC, nothing copied).
	RecvSize int `json:"recv_size,omitempty"`
	// SendBuffer and RecvBuffer are the sender's SO_SNDBUF and the receiver's
	// SO_RCVBUF as set by setsockopt (0: autotuned). Linux doubles what is asked
	// for and caps it at net.core.wmem_max or rmem_max, as netperf's reports show.
	SendBuffer int `json:"send_buffer,omitempty"`
	RecvBuffer int `json:"recv_buffer,omitempty"`
}

// maxSocketShape bounds a shape's socket buffers (the kernel's memory, capped
// again by net.core.wmem_max and rmem_max), maxIOSize its send and receive sizes
// (a buffer of that size in the agent, per stream: more than a megabyte a call
// gains nothing, the fast path's own calls are a megabyte), and maxIOTotal the
// agent's buffers for all of a test's streams together.
const (
	maxSocketShape = 64 << 20
	maxIOSize      = 1 << 20
	maxIOTotal     = 256 << 20
)

func (s SocketShape) check() error {
	for _, f := range []struct {
		name string
		v    int
		max  int
	}{{"send_size", s.SendSize, maxIOSize}, {"recv_size", s.RecvSize, maxIOSize},
		{"send_buffer", s.SendBuffer, maxSocketShape}, {"recv_buffer", s.RecvBuffer, maxSocketShape}} {
		if f.v < 0 || f.v > f.max {
			return fmt.Errorf("%s %d: want 0 (the default) to %d bytes", f.name, f.v, f.max)
		}
	}
	return nil
}

// ioBytes is what a stream of this shape allocates in the agents for its calls.
func (s SocketShape) ioBytes() int { return s.SendSize + s.RecvSize }

// fields are the shape as the hello's MAC covers it.
func (s SocketShape) fields() []string {
	return []string{strconv.Itoa(s.SendSize), strconv.Itoa(s.RecvSize), strconv.Itoa(s.SendBuffer), strconv.Itoa(s.RecvBuffer)}
}

// String is the shape in netperf's words, for a log line: "-m 16384 -S 131072".
func (s SocketShape) String() string {
	var b []string
	for _, f := range []struct {
		flag string
		v    int
	}{{"-m", s.SendSize}, {"-M", s.RecvSize}, {"-s", s.SendBuffer}, {"-S", s.RecvBuffer}} {
		if f.v > 0 {
			b = append(b, f.flag+" "+strconv.Itoa(f.v))
		}
	}
	return strings.Join(b, " ")
}

// bufferOf is the buffer a stream's end sets: the send buffer on the end that
// sends, the receive buffer on the end that receives.
func bufferOf(s SocketShape, sends bool) int {
	if sends {
		return s.SendBuffer
	}
	return s.RecvBuffer
}

// setStreamBuffer sets a socket's SO_SNDBUF (send) or SO_RCVBUF to n bytes; 0 leaves it
// autotuned.
func setStreamBuffer(rc syscall.RawConn, send bool, n int) error {
	if n <= 0 {
		return nil
	}
	opt, name := syscall.SO_RCVBUF, "SO_RCVBUF"
	if send {
		opt, name = syscall.SO_SNDBUF, "SO_SNDBUF"
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, n)
	}); err != nil {
		return fmt.Errorf("set %s: %w", name, err)
	}
	if serr != nil {
		return fmt.Errorf("set %s to %d: %w", name, n, serr)
	}
	return nil
}

// byteSize is a test parameter in bytes: a whole number, or one with netperf's
// suffixes, K, M (1024 and 1048576) or k, m (1000 and 1000000); "" is 0.
type byteSize int

func (n *byteSize) UnmarshalJSON(b []byte) error {
	v, err := parseByteSize(strings.TrimSpace(strings.Trim(string(b), `"`)))
	if err != nil {
		return fmt.Errorf("%s: %w", b, err)
	}
	*n = byteSize(v)
	return nil
}

func parseByteSize(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	mult := 1
	switch s[len(s)-1] {
	case 'K':
		mult = 1 << 10
	case 'M':
		mult = 1 << 20
	case 'k':
		mult = 1000
	case 'm':
		mult = 1000000
	}
	if mult != 1 {
		s = s[:len(s)-1]
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("not a size in bytes (a whole number, with K, M, k or m after it as netperf takes them)")
	}
	if v > maxSocketShape/mult {
		return 0, fmt.Errorf("more than %d bytes", maxSocketShape)
	}
	return v * mult, nil
}
