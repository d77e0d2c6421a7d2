package runners

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// Data connections authenticate with a challenge and a response keyed by the run's
// secret (the job's token). The test network is not trusted: anything on it may
// read the hellos and send its own. So the secret never crosses the wire: the
// server sends a fresh random nonce on every connection it accepts, and the
// client's hello carries HMAC-SHA256(secret, context || nonce || the hello's
// fields). A hello recorded on the link is worth nothing against the next
// connection's nonce, and a field changed on the way breaks its MAC.

const (
	// nonceSize is the challenge's length: 128 random bits never repeat in a run.
	nonceSize = 16
	// macSize is the length of a full HMAC-SHA256.
	macSize = sha256.Size
	// udpMACSize is the truncated MAC a UDP datagram carries in the place of the old
	// key: 128 bits are beyond forging by trial on any link.
	udpMACSize = 16
	// pendingHello bounds how long an accepted connection may take to send its
	// hello. The client sends it as soon as the nonce arrives (connecting, whose
	// SYN retries take longer, is over by then), so this is a few retransmissions
	// of one segment behind a full queue, and what a silent connection costs.
	pendingHello = 10 * time.Second
	// maxPending bounds the accepted connections not yet authenticated: each is a
	// descriptor and a goroutine, and a flood of silent connections must not use
	// up the agent's descriptors. Past it connections are closed at once.
	maxPending = 256
	// acceptBackoffMin and acceptBackoffMax bound the pause after a failed accept
	// (out of descriptors, of memory): the connection waits in the kernel's queue
	// and the listener tries again, rather than the run failing.
	acceptBackoffMin = 10 * time.Millisecond
	acceptBackoffMax = 100 * time.Millisecond
)

// Contexts keep a MAC made for one protocol from passing for another's.
const (
	ctxStream = "bloatbench stream hello v2"
	ctxTCPRR  = "bloatbench tcp-rr hello v2"
	ctxUDPRR  = "bloatbench udp-rr request v2"
	// ctxUDPProbe is udp-probe's request.
	ctxUDPProbe = "bloatbench udp-probe request v2"
)

// newNonce is a fresh challenge.
func newNonce() ([nonceSize]byte, error) {
	var n [nonceSize]byte
	if _, err := rand.Read(n[:]); err != nil {
		return n, fmt.Errorf("nonce: %w", err)
	}
	return n, nil
}

// macFields is HMAC-SHA256(secret, context || nonce || fields), each field
// length-prefixed so that no two lists of fields encode alike ("a","bc" and
// "ab","c").
func macFields(secret, context string, nonce []byte, fields ...string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	var n [4]byte
	for _, f := range append([]string{context, string(nonce)}, fields...) {
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return m.Sum(nil)
}

// checkMAC says whether mac is fields' MAC for nonce, in constant time.
func checkMAC(secret, context string, nonce, mac []byte, fields ...string) bool {
	if len(mac) != macSize || secret == "" {
		return false
	}
	return hmac.Equal(mac, macFields(secret, context, nonce, fields...))
}

// sendNonce writes a fresh nonce to a connection just accepted.
func sendNonce(c net.Conn) ([nonceSize]byte, error) {
	n, err := newNonce()
	if err != nil {
		return n, err
	}
	c.SetWriteDeadline(time.Now().Add(pendingHello))
	_, err = c.Write(n[:])
	c.SetWriteDeadline(time.Time{})
	if err != nil {
		return n, fmt.Errorf("send nonce: %w", err)
	}
	return n, nil
}

// readNonce reads the server's challenge, the first bytes of a connection.
func readNonce(c net.Conn, timeout time.Duration) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	n := make([]byte, nonceSize)
	if _, err := io.ReadFull(c, n); err != nil {
		return nil, fmt.Errorf("read the server's nonce: %w", err)
	}
	return n, nil
}

// pendingGate bounds the connections a listener holds before they authenticate.
// When it is full the oldest is closed to make room: a flood of silent connections
// then pushes out only its own older ones, while a real client, which sends its
// hello within a round trip of connecting, is rarely the oldest.
type pendingGate struct {
	mu    sync.Mutex
	n     int
	conns []net.Conn // oldest first
	freed chan struct{}
}

func newPendingGate(n int) *pendingGate {
	return &pendingGate{n: max(n, 1), freed: make(chan struct{}, 1)}
}

// acquire takes a slot for c, closing the oldest pending connection if need be and
// waiting for it to let go (its read fails at once) for at most a second; false
// means no slot and c should be closed.
func (g *pendingGate) acquire(ctx context.Context, c net.Conn) bool {
	wait := time.NewTimer(time.Second)
	defer wait.Stop()
	for {
		g.mu.Lock()
		if len(g.conns) < g.n {
			g.conns = append(g.conns, c)
			g.mu.Unlock()
			return true
		}
		g.conns[0].Close()
		g.mu.Unlock()
		select {
		case <-g.freed:
		case <-wait.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// release gives c's slot back, once it authenticated or failed.
func (g *pendingGate) release(c net.Conn) {
	g.mu.Lock()
	for i, p := range g.conns {
		if p == c {
			g.conns = append(g.conns[:i], g.conns[i+1:]...)
			break
		}
	}
	g.mu.Unlock()
	select {
	case g.freed <- struct{}{}:
	default:
	}
}

// len is how many connections hold a slot.
func (g *pendingGate) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

// acceptBackoff decides what a listener does after Accept failed: false when the
// listener is closed or ctx ended (stop), true after a pause otherwise. Every other
// error is taken as passing (EMFILE, ENFILE, ENOBUFS, ECONNABORTED): one connection
// fails, not the run. *delay is the pause, doubled each time; a success resets it.
func acceptBackoff(ctx context.Context, err error, delay *time.Duration) bool {
	if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
		return false
	}
	*delay = min(max(*delay*2, acceptBackoffMin), acceptBackoffMax)
	t := time.NewTimer(*delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// allowedCC reads the congestion controls a hello may ask for: those the kernel
// lets anyone set (tcp_allowed_congestion_control) and those already loaded
// (tcp_available_congestion_control). Setting either loads nothing, whereas a
// name outside them, set as root, would have the kernel load a tcp_* module. A
// file that cannot be read contributes nothing: no congestion control is then
// allowed, and the hellos that ask for one are refused and say so.
func allowedCC(readFile func(string) ([]byte, error)) map[string]bool {
	ok := map[string]bool{}
	for _, f := range []string{"/proc/sys/net/ipv4/tcp_allowed_congestion_control", "/proc/sys/net/ipv4/tcp_available_congestion_control"} {
		b, err := readFile(f)
		if err != nil {
			continue
		}
		for _, cc := range strings.Fields(string(b)) {
			ok[cc] = true
		}
	}
	return ok
}

// hostCC is allowedCC of this host.
func hostCC() map[string]bool { return allowedCC(os.ReadFile) }

// tokenKey is the key UDP requests carry: 16 bytes whatever the token's length
// (the controller's are 32 hex digits), and every byte of the token counts.
// udp-probe's echo still uses it; rr-server's requests carry udpRequestMAC.
func tokenKey(token string) [rrKeySize]byte {
	sum := sha256.Sum256([]byte(token))
	var k [rrKeySize]byte
	copy(k[:], sum[:])
	return k
}

// udpRequestMAC is the MAC a UDP request carries in its first rrKeySize bytes:
// over the request's header past it and the client's address. The address in it
// keeps a recorded request from being answered to any other address.
func udpRequestMAC(token string, from netip.AddrPort, header []byte) []byte {
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	return macFields(token, ctxUDPRR, nil, from.String(), string(header))[:udpMACSize]
}
