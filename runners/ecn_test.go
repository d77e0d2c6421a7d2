package runners

import (
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	linux "golang.org/x/sys/unix"
)

func TestMarking(t *testing.T) {
	for _, c := range []struct {
		tos, ecn string
		want     int
		label    string
		err      string
	}{
		{"", "", -1, "", ""},
		{"EF", "", 184, "EF", ""},
		{"", "ect1", 1, "ECT(1)", ""},
		{"", "ECT(0)", 2, "ECT(0)", ""},
		{"", "Not-ECT", 0, "Not-ECT", ""},
		{"", "ce", 3, "CE", ""},
		{"EF", "ect1", 185, "EF, ECT(1)", ""},
		{"0x01", "ect1", 1, "0x01, ECT(1)", ""},
		{"0x01", "ect0", 0, "", "sets the ECN field to ECT(1), and ecn says ECT(0)"},
		{"", "ect2", 0, "", `ecn "ect2": want notect, ect0, ect1 or ce`},
		{"XX", "ect1", 0, "", "tos: TOS \"XX\""},
	} {
		v, label, err := marking(c.tos, c.ecn)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("marking(%q, %q): %v, want an error with %q", c.tos, c.ecn, err, c.err)
			}
			continue
		}
		if err != nil || v != c.want || label != c.label {
			t.Errorf("marking(%q, %q) = %d %q %v, want %d %q", c.tos, c.ecn, v, label, err, c.want, c.label)
		}
	}
}

// tosListener is a plain UDP socket on loopback that records the TOS byte of each
// datagram it gets (IP_RECVTOS): what the sender's packets carried on the wire.
func tosListener(t *testing.T) (addr string, got func() []int) {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := pc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = linux.SetsockoptInt(int(fd), linux.IPPROTO_IP, linux.IP_RECVTOS, 1) }); err != nil || serr != nil {
		t.Fatalf("IP_RECVTOS: %v %v", err, serr)
	}
	var mu sync.Mutex
	var toss []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, oob := make([]byte, 1<<16), make([]byte, 256)
		for {
			_, oobn, _, _, err := pc.ReadMsgUDP(b, oob)
			if err != nil {
				return
			}
			msgs, err := linux.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				continue
			}
			for _, m := range msgs {
				if m.Header.Level == linux.IPPROTO_IP && m.Header.Type == linux.IP_TOS && len(m.Data) >= 1 {
					mu.Lock()
					toss = append(toss, int(m.Data[0]))
					mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String(), func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(toss)
	}
}

// The probes' and the flood's datagrams leave with the codepoint ecn: asks for,
// beside the DSCP tos: gives, as the kernel puts them on the wire.
func TestECNOnTheWire(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		kind   string
		params map[string]any
		tos    int
	}{
		{"udp-probe", map[string]any{"ecn": "ect1", "interval": 0.02}, 0x01},
		{"udp-probe", map[string]any{"ecn": "notect", "tos": "EF", "interval": 0.02}, 0xb8},
		{"udp-flood", map[string]any{"ecn": "ect1", "bandwidth": "1M"}, 0x01},
		{"udp-flood", map[string]any{"ecn": "ect0", "tos": "CS1", "bandwidth": "1M"}, 0x22},
	} {
		addr, got := tosListener(t)
		if c.kind == "udp-flood" {
			runFlood(t, addr, token, c.params, 0.2)
		} else {
			runProbe(t, JobSpec{Addr: addr, Token: token, Step: 0.02, Duration: 0.2, Start: float64(time.Now().UnixNano()) / 1e9}, c.params)
		}
		toss := got()
		if len(toss) == 0 {
			t.Errorf("%s %v: no datagram arrived", c.kind, c.params)
			continue
		}
		for _, tos := range toss {
			if tos != c.tos {
				t.Errorf("%s %v: a datagram arrived with TOS %#x, want %#x (%s)", c.kind, c.params, tos, c.tos, ECNName(c.tos))
				break
			}
		}
		t.Logf("%s %v: %d datagrams, TOS %#x", c.kind, c.params, len(toss), toss[0])
	}
}
