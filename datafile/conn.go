package datafile

import (
	"net/netip"
	"strconv"
	"strings"
)

// A probe's or flow's connection, and which of a bottleneck's tx queues its
// packets went through. The runner that opens a socket declares a series of
// kind KindConn for it (no samples): Of names the series the connection
// carries, Conn the connection. The sojourn tracer counts every connection's
// packets through each tx queue of the bottleneck devices it traces, a series
// of kind KindConnQueue per connection and queue: Dev, Queue ("tx-2"), Stat
// (the queue's qdisc as tc names its parent: "1:3" for an mq child, "root"
// for a qdisc every queue shares), Conn (as the packets name it: source first),
// and samples of the packets (V) and bytes (Bytes) counted since the tracer
// started. Reports match the two by Conn (Attribution in package report).
const (
	KindConn      = "conn"
	KindConnQueue = "conn-queue"
	// ConnPrefix starts the name of a KindConn series: "conn Ping (ms) ICMP".
	ConnPrefix = "conn "
)

// Conn is a connection: its protocol (tcp, udp, icmp, icmpv6, or the IP
// protocol's number) and two ends. An ICMP echo's identifier stands for both
// ports; an end whose address is unspecified (a socket bound to none) matches
// any address.
type Conn struct {
	Proto    string
	Src, Dst netip.AddrPort
}

// String is the Conn field's form: "udp 198.18.1.1:40000 198.18.1.2:5000".
func (c Conn) String() string {
	return c.Proto + " " + c.Src.String() + " " + c.Dst.String()
}

// ParseConn reads String's form.
func ParseConn(s string) (Conn, bool) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Conn{}, false
	}
	src, err1 := netip.ParseAddrPort(f[1])
	dst, err2 := netip.ParseAddrPort(f[2])
	if err1 != nil || err2 != nil {
		return Conn{}, false
	}
	return Conn{Proto: f[0], Src: src, Dst: dst}, true
}

// Matches says whether packets named p belong to connection c, either way.
func (c Conn) Matches(p Conn) bool {
	if c.Proto != p.Proto {
		return false
	}
	return sameEnd(c.Src, p.Src) && sameEnd(c.Dst, p.Dst) || sameEnd(c.Src, p.Dst) && sameEnd(c.Dst, p.Src)
}

func sameEnd(a, b netip.AddrPort) bool {
	if a.Port() != b.Port() {
		return false
	}
	x, y := a.Addr().Unmap(), b.Addr().Unmap()
	return x == y || x.IsUnspecified() || y.IsUnspecified()
}

// ProtoName is an IP protocol's name in a Conn.
func ProtoName(proto uint8) string {
	switch proto {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 1:
		return "icmp"
	case 58:
		return "icmpv6"
	}
	return strconv.Itoa(int(proto))
}
