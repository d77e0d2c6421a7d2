package runners

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	linux "golang.org/x/sys/unix"
)

// sysCalls is what the ICMP prober asks of the kernel. Tests give it a fake that
// overrides one method to reach an error path without root (pro-bing's packetConn
// pattern).
type sysCalls interface {
	socket(domain, typ, proto int) (int, error)
	setsockoptInt(fd, level, opt, value int) error
	sendto(fd int, b []byte, to linux.Sockaddr) error
	recvmsg(fd int, p, oob []byte, flags int) (n, oobn int, err error)
}

// kernel is the real thing.
type kernel struct{}

func (kernel) socket(domain, typ, proto int) (int, error) { return linux.Socket(domain, typ, proto) }
func (kernel) setsockoptInt(fd, level, opt, value int) error {
	return linux.SetsockoptInt(fd, level, opt, value)
}
func (kernel) sendto(fd int, b []byte, to linux.Sockaddr) error { return linux.Sendto(fd, b, 0, to) }
func (kernel) recvmsg(fd int, p, oob []byte, flags int) (int, int, error) {
	n, oobn, _, _, err := linux.Recvmsg(fd, p, oob, flags)
	return n, oobn, err
}

// payloadHead is the start of every probe's payload: a cookie of this prober and the
// probe's index, so a reply is matched to its probe exactly, past 65536 probes, and
// another program's echo replies (a raw socket sees them all) are not taken for ours.
const payloadHead = 16

// prober is one ICMP echo socket to one target. Probes are numbered from 0 by the
// caller; the ICMP sequence number is the index modulo 65536.
type prober struct {
	sys sysCalls
	fd  int
	// file holds fd, non-blocking, for Go's netpoller: receive waits there, and
	// a send the socket's buffer cannot take yet too.
	file    *os.File
	rc      syscall.RawConn
	stopped atomic.Bool
	v6      bool
	raw     bool // a raw socket (else the kernel's unprivileged "ping" socket)
	id      int
	to      linux.Sockaddr
	stamps  stamping
	cookie  [8]byte
	size    int
	// interval bounds how long after a send its kernel stamp may be taken.
	interval time.Duration

	mu       sync.Mutex
	pending  map[int]*probe
	lastSent int
	closed   bool
}

// probe is one echo request in flight.
type probe struct {
	sent time.Time // user space, just before sendto
	tx   time.Time // the kernel's, once its stamp has been read
}

// reply is an answered probe: its index, when the reply came, and its RTT, with where
// the two stamps came from.
type reply struct {
	k        int
	at       time.Time
	rtt      time.Duration
	kernelRX bool
	kernelTX bool
}

// openICMP opens an echo socket to target: the unprivileged ICMP socket when
// net.ipv4.ping_group_range allows this process's group, else a raw socket (root or
// CAP_NET_RAW). When neither opens, the error says what is missing.
func openICMP(sc sysCalls, target netip.Addr, size int, interval time.Duration) (*prober, error) {
	p := &prober{sys: sc, v6: target.Is6() && !target.Is4In6(), size: size, interval: interval, pending: map[int]*probe{}, lastSent: -1}
	domain, proto := linux.AF_INET, linux.IPPROTO_ICMP
	if p.v6 {
		domain, proto = linux.AF_INET6, linux.IPPROTO_ICMPV6
		sa := &linux.SockaddrInet6{Addr: target.As16()}
		if z := target.Zone(); z != "" {
			return nil, fmt.Errorf("ping target %s: a zoned (link-local) address is not supported: use a global or ULA address", target)
		}
		p.to = sa
	} else {
		p.to = &linux.SockaddrInet4{Addr: target.Unmap().As4()}
	}
	fd, dgramErr := sc.socket(domain, linux.SOCK_DGRAM|linux.SOCK_CLOEXEC, proto)
	if dgramErr != nil {
		var rawErr error
		fd, rawErr = sc.socket(domain, linux.SOCK_RAW|linux.SOCK_CLOEXEC, proto)
		if rawErr != nil {
			return nil, socketError(p.v6, dgramErr, rawErr)
		}
		p.raw = true
	}
	if err := p.attach(fd); err != nil {
		return nil, err
	}
	if p.raw {
		var id [2]byte
		rand.Read(id[:])
		p.id = int(binary.BigEndian.Uint16(id[:]))
		p.filterEchoReplies()
	}
	rand.Read(p.cookie[:])
	p.stamps = enableStamps(sc, fd)
	return p, nil
}

// ends are the echo socket's connection as the packets name it: an ICMP echo's
// identifier stands in both ports. An unprivileged socket's identifier is its
// local port, bound at its first send; a raw socket's is the prober's own. Its
// local address is bound to none: the route's source is asked of a UDP socket
// connected to the target (which sends nothing), so that another host's echo
// with the same identifier is not taken for this one's.
func (p *prober) ends() (local, remote netip.AddrPort) {
	var to netip.Addr
	switch a := p.to.(type) {
	case *linux.SockaddrInet4:
		to = netip.AddrFrom4(a.Addr)
	case *linux.SockaddrInet6:
		to = netip.AddrFrom16(a.Addr)
	}
	id := uint16(p.id)
	unspecified := netip.IPv4Unspecified()
	if p.v6 {
		unspecified = netip.IPv6Unspecified()
	}
	local = netip.AddrPortFrom(unspecified, id)
	if !p.raw {
		a, err := localAddrPort(p.fd)
		if err != nil {
			return netip.AddrPort{}, netip.AddrPort{}
		}
		local, id = a, a.Port()
	}
	if local.Addr().IsUnspecified() {
		if c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, 9))); err == nil {
			if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
				local = netip.AddrPortFrom(a.AddrPort().Addr().Unmap(), id)
			}
			c.Close()
		}
	}
	return local, netip.AddrPortFrom(to, id)
}

// protoName is the echo's protocol as a connection names it.
func (p *prober) protoName() string {
	if p.v6 {
		return "icmpv6"
	}
	return "icmp"
}

// socketError explains why no ICMP socket opened: the sysctl for unprivileged ICMP
// sockets, and the capability for raw ones.
func socketError(v6 bool, dgramErr, rawErr error) error {
	family := "ICMP"
	if v6 {
		family = "ICMPv6"
	}
	var why []string
	if errors.Is(dgramErr, linux.EACCES) || errors.Is(dgramErr, linux.EPERM) {
		rng := "unreadable"
		if b, err := os.ReadFile("/proc/sys/net/ipv4/ping_group_range"); err == nil {
			rng = strings.Join(strings.Fields(string(b)), " ")
		}
		why = append(why, fmt.Sprintf("unprivileged %s sockets: %v (group %d is outside net.ipv4.ping_group_range, now %q: sysctl -w net.ipv4.ping_group_range=\"0 2147483647\")",
			family, dgramErr, os.Getegid(), rng))
	} else {
		why = append(why, fmt.Sprintf("unprivileged %s sockets: %v", family, dgramErr))
	}
	if errors.Is(rawErr, linux.EPERM) || errors.Is(rawErr, linux.EACCES) {
		why = append(why, fmt.Sprintf("raw %s sockets: %v (they need root or CAP_NET_RAW: run the agent as root, or setcap cap_net_raw+ep on it)", family, rawErr))
	} else {
		why = append(why, fmt.Sprintf("raw %s sockets: %v", family, rawErr))
	}
	if errors.Is(dgramErr, linux.EAFNOSUPPORT) && errors.Is(rawErr, linux.EAFNOSUPPORT) {
		why = append(why, "IPv6 is disabled on this host (net.ipv6.conf.all.disable_ipv6, or ipv6.disable=1)")
	}
	return fmt.Errorf("cannot open an %s socket: %s", family, strings.Join(why, "; "))
}

// filterEchoReplies asks the kernel to pass a raw socket echo replies only, so that
// a busy host's other ICMP never wakes us. Best effort: we check the type anyway.
func (p *prober) filterEchoReplies() {
	if p.v6 {
		var f linux.ICMPv6Filter
		for i := range f.Data {
			f.Data[i] = ^uint32(0) // a set bit blocks its type
		}
		t := int(ipv6.ICMPTypeEchoReply)
		f.Data[t>>5] &^= 1 << (t & 31)
		linux.SetsockoptICMPv6Filter(p.fd, linux.SOL_ICMPV6, linux.ICMPV6_FILTER, &f)
		return
	}
	p.sys.setsockoptInt(p.fd, linux.SOL_RAW, linux.ICMP_FILTER, -2 /* ^uint32(1): only type 0, echo reply, passes */)
}

// send sends probe k. The probe is pending before the packet leaves, so a reply that
// beats sendto's return (loopback) finds it.
func (p *prober) send(k int) error {
	payload := make([]byte, max(p.size, payloadHead))
	copy(payload, p.cookie[:])
	binary.BigEndian.PutUint64(payload[8:], uint64(k))
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if p.v6 {
		typ = ipv6.ICMPTypeEchoRequest
	}
	// The kernel sets the identifier of an unprivileged socket's echo, and ICMPv6's
	// checksum.
	b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: p.id, Seq: k & 0xffff, Data: payload}}).Marshal(nil)
	if err != nil {
		return err
	}
	pr := &probe{}
	p.mu.Lock()
	p.pending[k] = pr
	p.lastSent = k
	pr.sent = time.Now()
	p.mu.Unlock()
	if err := p.sendto(b, p.to); err != nil {
		return fmt.Errorf("send echo request %d: %w", k, err)
	}
	return nil
}

// attach makes fd the prober's socket, non-blocking and in Go's netpoller. It
// closes fd if it fails.
func (p *prober) attach(fd int) error {
	if err := linux.SetNonblock(fd, true); err != nil {
		linux.Close(fd)
		return fmt.Errorf("probe socket: %w", err)
	}
	p.fd, p.file = fd, os.NewFile(uintptr(fd), "probe socket")
	rc, err := p.file.SyscallConn()
	if err != nil {
		p.file.Close()
		return fmt.Errorf("probe socket: %w", err)
	}
	p.rc = rc
	return nil
}

// sendto sends b, waiting in the netpoller while the socket's buffer is full, as
// a blocking send would wait in the kernel.
func (p *prober) sendto(b []byte, to linux.Sockaddr) error {
	var err error
	werr := p.rc.Write(func(uintptr) bool {
		err = p.sys.sendto(p.fd, b, to)
		return err != linux.EAGAIN
	})
	if werr != nil {
		return werr
	}
	return err
}

// unanswered lists the probes still pending and when each was sent.
func (p *prober) unanswered() map[int]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int]time.Time, len(p.pending))
	for k, pr := range p.pending {
		out[k] = pr.sent
	}
	return out
}

// receive reads replies and send stamps until stop is called, calling got for every
// reply to a pending probe (once: duplicates are dropped).
func (p *prober) receive(got func(reply)) error {
	return p.receiveEach(func(b, oob []byte, now time.Time) {
		if r, ok := p.match(b, oob, now); ok {
			got(r)
		}
	})
}

// receiveEach reads the socket until stop is called: the kernel's send stamps go to
// their probes, and each datagram to each with its control messages and the time
// it was read. The ICMP and UDP probes' one receive loop.
//
// It waits in Go's netpoller, not in a blocking poll(2): the runtime's monitor
// takes the processor of a goroutine blocked in a system call, and after each
// such take it checks every 20 us for a millisecond and more. A probe's send
// stamp and its reply, each a blocking poll, kept it waking: with ping and the
// qdisc samplers alone, a lab's two agents' threads were switched 1429 times a
// second at a 50 ms step and 4959 at 10 ms; waiting here, 787 and 2655. A send
// stamp alone wakes the netpoller too (EPOLLERR, with EPOLLOUT while the socket
// can send); should the runtime take an error-only event for an error on the
// socket, one bounded poll(2) waits in its place.
func (p *prober) receiveEach(each func(b, oob []byte, now time.Time)) error {
	buf := make([]byte, 1<<16)
	oob := make([]byte, 1024)
	var rerr error
	drain := func(fd uintptr) bool {
		// Always drained: a message left on the error queue would keep the socket
		// ready for ever.
		p.readSendStamps()
		for {
			n, oobn, err := p.sys.recvmsg(p.fd, buf, oob, linux.MSG_DONTWAIT)
			if err == linux.EINTR {
				continue
			}
			if err == linux.EAGAIN {
				return p.stopped.Load()
			}
			if err == linux.ECONNREFUSED {
				// A UDP probe's ICMP port unreachable for an earlier probe (the
				// echo not there yet, or gone): that probe is lost, the next may
				// not be.
				continue
			}
			if err != nil {
				rerr = err
				return true
			}
			each(buf[:n], oob[:oobn], time.Now())
		}
	}
	for !p.stopped.Load() {
		err := p.rc.Read(drain)
		switch {
		case rerr != nil:
			return fmt.Errorf("receive: %w", rerr)
		case err == nil, errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, os.ErrClosed):
			continue // stopped
		}
		// Not pollable this once (an error-only event): wait in the kernel, a
		// while at most, and go round.
		fds := []linux.PollFd{{Fd: int32(p.fd), Events: linux.POLLIN}}
		if _, err := linux.Poll(fds, 10); err != nil && err != linux.EINTR {
			return fmt.Errorf("poll: %w", err)
		}
	}
	return nil
}

// stop ends receive.
func (p *prober) stop() {
	p.stopped.Store(true)
	p.file.SetReadDeadline(time.Unix(1, 0))
}

func (p *prober) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.file.Close()
	}
}

// readSendStamps drains the error queue of the kernel's send stamps, giving each to
// its probe.
func (p *prober) readSendStamps() {
	var buf [256]byte
	oob := make([]byte, 512)
	for {
		_, oobn, err := p.sys.recvmsg(p.fd, buf[:], oob, linux.MSG_ERRQUEUE|linux.MSG_DONTWAIT)
		if err == linux.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if t, ok := txStamp(oob[:oobn]); ok {
			p.mu.Lock()
			p.stampSend(t)
			p.mu.Unlock()
		}
	}
}

// stampSend gives a send stamp to its probe: the latest one sent (by the user-space
// clock, the same CLOCK_REALTIME) no later than the stamp, with no stamp yet. The
// kernel takes it inside sendto, microseconds after. Sends are sequential, so the
// next probe's user-space time is always later than this one's stamp: however long
// the sender was preempted between its clock read and sendto (tens of ms on a busy
// machine), the latest probe sent before the stamp is its own. With p.mu held.
func (p *prober) stampSend(t time.Time) {
	const slack = time.Millisecond // clock reads on two CPUs
	for k := p.lastSent; k >= 0 && k > p.lastSent-4; k-- {
		pr := p.pending[k]
		if pr == nil || !pr.tx.IsZero() {
			continue
		}
		if t.Sub(pr.sent.Round(0)) >= -slack {
			pr.tx = t
			return
		}
	}
}

// match parses a received datagram: an echo reply to one of our pending probes
// becomes a reply, with the kernel's stamps where it gave them.
func (p *prober) match(b, oob []byte, now time.Time) (reply, bool) {
	k, ok := p.parse(b)
	if !ok {
		return reply{}, false
	}
	c, ok := p.claim(k, oob, now)
	if !ok {
		return reply{}, false // a duplicate, or one given up on
	}
	r := reply{k: k, at: c.rx, kernelTX: c.kernelTX, kernelRX: c.kernelRX}
	r.rtt = c.rx.Round(0).Sub(c.tx.Round(0))
	if !r.kernelRX && !r.kernelTX {
		r.rtt = now.Sub(c.sent) // both user space: the monotonic clock
	}
	if r.rtt < 0 {
		// The wall clock stepped between the two stamps: the monotonic user-space
		// pair is the only one to trust.
		r.at, r.rtt, r.kernelRX, r.kernelTX = now, now.Sub(c.sent), false, false
	}
	return r, true
}

// claimed is a pending probe a reply answered: when it was sent (user space,
// before sendto, with the monotonic clock), the send time to use (the kernel's
// TX_SCHED stamp where it came) and the reply's receive time (the kernel's where
// it gave one, else now).
type claimed struct {
	sent, tx, rx       time.Time
	kernelTX, kernelRX bool
}

// claim takes pending probe k for a reply that arrived at now with control data
// oob: the one reply matcher of the probers (ICMP's and the UDP probe's). It is
// false for a probe not pending: a duplicate, or one given up on.
func (p *prober) claim(k int, oob []byte, now time.Time) (claimed, bool) {
	p.mu.Lock()
	pr := p.pending[k]
	p.mu.Unlock()
	if pr == nil {
		return claimed{}, false
	}
	if p.stamps.tx {
		// Its send stamp was queued inside sendto, before the reply existed; it may
		// still be unread if both came in one wake-up.
		p.mu.Lock()
		noTX := pr.tx.IsZero()
		p.mu.Unlock()
		if noTX {
			p.readSendStamps()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending[k] != pr {
		return claimed{}, false
	}
	delete(p.pending, k)
	c := claimed{sent: pr.sent, tx: pr.sent, rx: now}
	if !pr.tx.IsZero() {
		c.tx, c.kernelTX = pr.tx, true
	}
	if p.stamps.rx != "" {
		if t, ok := rxStamp(oob); ok {
			c.rx, c.kernelRX = t, true
		}
	}
	return c, true
}

// parse reads an echo reply of ours and returns its probe's index.
func (p *prober) parse(b []byte) (int, bool) {
	proto := 1 // ICMP
	if p.v6 {
		proto = 58
	}
	if p.raw && !p.v6 {
		// A raw IPv4 socket reads the IP header too.
		h, err := ipv4.ParseHeader(b)
		if err != nil || h.Len > len(b) {
			return 0, false
		}
		b = b[h.Len:]
	}
	m, err := icmp.ParseMessage(proto, b)
	if err != nil {
		return 0, false
	}
	if m.Type != ipv4.ICMPTypeEchoReply && m.Type != ipv6.ICMPTypeEchoReply {
		return 0, false
	}
	e, ok := m.Body.(*icmp.Echo)
	if !ok || len(e.Data) < payloadHead || [8]byte(e.Data[:8]) != p.cookie {
		return 0, false
	}
	if p.raw && e.ID != p.id {
		return 0, false
	}
	k := binary.BigEndian.Uint64(e.Data[8:16])
	if k > 1<<40 || int(k)&0xffff != e.Seq {
		return 0, false
	}
	return int(k), true
}
