package runners

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  string
	}{
		{"", 0, ""},
		{"0", 0, ""},
		{"16384", 16384, ""},
		{"128K", 131072, ""},
		{"2M", 2 << 20, ""},
		{"64k", 64000, ""},
		{"1m", 1000000, ""},
		{"64M", 64 << 20, ""},
		{"65M", 0, "more than"},
		{"-1", 0, "not a size"},
		{"K", 0, "not a size"},
		{"1.5K", 0, "not a size"},
		{"12 KB", 0, "not a size"},
		{"99999999999999999999", 0, "not a size"},
	} {
		got, err := parseByteSize(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%q = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestSocketShapeInNetperfWords(t *testing.T) {
	for _, tc := range []struct {
		s    SocketShape
		want string
	}{
		{SocketShape{}, ""},
		{SocketShape{SendSize: 16384}, "-m 16384"},
		{SocketShape{SendSize: 16384, RecvSize: 131072, SendBuffer: 16384, RecvBuffer: 131072}, "-m 16384 -M 131072 -s 16384 -S 131072"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v = %q, want %q", tc.s, got, tc.want)
		}
	}
	if (SocketShape{RecvBuffer: maxSocketShape + 1}).check() == nil {
		t.Error("a buffer past the bound accepted")
	}
	if (SocketShape{SendSize: maxIOSize + 1}).check() == nil {
		t.Error("a send size past the bound accepted")
	}
	// 1024 streams of a megabyte each way would be 2 GB of the agents' memory.
	_, _, err := Kinds()["tcp-streams"].Plan(map[string]any{"flows": []any{
		map[string]any{"direction": "download", "count": 1024, "send_size": "1M", "recv_size": "1M"}}}, NewPlanner())
	if err == nil || !strings.Contains(err.Error(), "MB of buffers") {
		t.Errorf("1024 streams of 2 MB of buffers: %v", err)
	}
}

// TestShapedStreamsOverLoopback runs both directions with every part of a shape
// set: plain writes and reads of the sizes asked for, and the buffers fixed. The
// buffers are read back from the sockets as the kernel has them (it doubles what
// setsockopt asks for), on the end that sets each.
func TestShapedStreamsOverLoopback(t *testing.T) {
	shape := SocketShape{SendSize: 16384, RecvSize: 131072, SendBuffer: 65536, RecvBuffer: 131072}
	flows := []StreamFlow{
		{Name: "TCP download::1", Direction: Download, Shape: shape},
		{Name: "TCP upload::1", Direction: Upload, Shape: shape},
	}
	plan := map[string]StreamFlow{}
	for _, f := range flows {
		plan[f.Name] = f
	}
	lab := startPlannedLab(t, ListenSpec{Addr: "127.0.0.1", Token: "tok", Step: 0.05, Plan: plan, Duration: 0.3}, nil)
	lab.run(t, "tok", flows...)
	if err := lab.stop(); err != nil {
		t.Fatalf("the run failed: %v", err)
	}

	// The buffers, on a pair of sockets connected as the streams connect.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error { return setStreamBuffer(rc, false, shape.RecvBuffer) }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src, err := s.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := setStreamBuffer(src, true, shape.SendBuffer); err != nil {
		t.Fatal(err)
	}
	if got := getBuffer(src, syscall.SO_SNDBUF); got != 2*shape.SendBuffer {
		t.Errorf("SO_SNDBUF %d, want %d (the kernel doubles what is set)", got, 2*shape.SendBuffer)
	}
	crc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	max, err := readSysctlInt("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := getBuffer(crc, syscall.SO_RCVBUF), 2*min(shape.RecvBuffer, max); got != want {
		t.Errorf("SO_RCVBUF %d, want %d (doubled, capped at rmem_max %d)", got, want, max)
	}
	if err := setStreamBuffer(crc, false, 0); err != nil {
		t.Errorf("0 (autotuned) refused: %v", err)
	}
}

func readSysctlInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// TestCopyingStreamsHoldNoSlotWhileWaiting: with the gate engaged and one slot,
// a copying receiver with nothing to read must not keep the slot while it waits
// (a blocking c.Read would), or a second stream, whose bytes are there, never
// reads them; and a copying sender blocked on a full socket must not keep it
// either.
func TestCopyingStreamsHoldNoSlotWhileWaiting(t *testing.T) {
	g := newStreamGate(1, 1)
	// Streams counted in from the start (a run's others): the gate is engaged
	// before the first wait.
	defer g.stream()()
	defer g.stream()()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (client, server *net.TCPConn) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		return c.(*net.TCPConn), s.(*net.TCPConn)
	}
	idleC, _ := pair()     // nothing is ever sent to idleC
	busyC, busyS := pair() // busyS sends, busyC reads
	stuckC, _ := pair()    // stuckC sends to a peer that never reads: its socket fills

	var idle, busy meter
	done := make(chan error, 3)
	go func() { done <- readCopy(idleC, &idle, g, 4096) }()
	time.Sleep(100 * time.Millisecond) // the idle reader waits first
	go func() { writeCopy(stuckC, g, make([]byte, 65536)); done <- nil }()
	time.Sleep(100 * time.Millisecond) // and the stuck sender
	go func() { done <- readCopy(busyC, &busy, g, 4096) }()
	if _, err := busyS.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for busy.bytes.Load() < 1<<20 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := busy.bytes.Load(); got != 1<<20 {
		t.Errorf("the busy stream read %d of %d bytes beside an idle reader and a blocked sender on one slot", got, 1<<20)
	}
	idleC.Close()
	busyC.Close()
	stuckC.Close()
	for range 3 {
		if err := <-done; err != nil {
			t.Errorf("a stream closed here: %v", err)
		}
	}
}
