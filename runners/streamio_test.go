package runners

import (
	"net"
	"testing"
	"time"

	linux "golang.org/x/sys/unix"
)

func TestLowWaterFor(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name   string
		rate   float64 // bytes a second
		rcvbuf int
		want   int
	}{
		{"idle", 0, 6 * mb, 1},
		{"shaped 100 Mbit/s", 100e6 / 8, 6 * mb, 1},
		{"just under the floor", 500e6 / 8, 6 * mb, 1},
		{"1 Gbit/s: 250 us of it", 1e9 / 8, 6 * mb, 31250},
		{"25 Gbit/s: the cap", 25e9 / 8, 6 * mb, 256 << 10},
		{"an eighth of the buffer", 25e9 / 8, mb, mb / 8},
		{"a buffer too small for the floor", 25e9 / 8, 64 << 10, 1},
	} {
		if got := lowWaterFor(c.rate, c.rcvbuf); got != c.want {
			t.Errorf("%s: lowWaterFor(%g, %d) = %d, want %d", c.name, c.rate, c.rcvbuf, got, c.want)
		}
	}
}

// rcvlowat is the socket's SO_RCVLOWAT (0 if it cannot be read).
func rcvlowat(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return getBuffer(rc, linux.SO_RCVLOWAT)
}

// A fast stream over loopback raises its receiver's mark; when it slows to a
// trickle, the trickle is still counted (the stalled read takes it) and the mark
// goes back to one byte. Without the stall's deadline the last bytes would wait for a
// mark's worth that never comes.
func TestLowWaterFollowsTheStream(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	snd, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	rcv, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	m := &meter{}
	done := make(chan error, 1)
	go func() { done <- discard(rcv, m, nil) }()

	buf := make([]byte, chunk)
	var sent int64
	raised := 0
	for end := time.Now().Add(20 * time.Second); raised <= 1 && time.Now().Before(end); {
		n, err := snd.Write(buf)
		if err != nil {
			t.Fatal(err)
		}
		sent += int64(n)
		raised = rcvlowat(t, rcv)
	}
	if raised <= 1 {
		t.Fatalf("after %d MB at full speed over loopback the mark is %d bytes", sent>>20, raised)
	}
	// All of it counted: nothing more comes, so the mark's wait stalls.
	waitFor(t, "the fast phase counted", func() bool { return m.bytes.Load() == sent })
	if _, err := snd.Write(buf[:1000]); err != nil {
		t.Fatal(err)
	}
	sent += 1000
	waitFor(t, "the trickle counted", func() bool { return m.bytes.Load() == sent })
	// Each wait that stalls halves the mark, down to one byte.
	waitFor(t, "the mark back to one byte", func() bool { return rcvlowat(t, rcv) == 1 })
	snd.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := m.bytes.Load(); got != sent {
		t.Errorf("counted %d bytes of %d", got, sent)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !ok(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
