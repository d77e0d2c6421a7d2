package runners

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// Marking: the TOS byte (DSCP and ECN bits) a test asks its packets to carry, by
// name or number, and setting it on a socket. Every kind that marks (streams,
// request/response, the UDP flood and probe) reads and sets it here.

// dscpTOS is the TOS byte of a DSCP name (the DSCP shifted past the two ECN bits).
// It is a function, not a table: the package keeps no state.
func dscpTOS(name string) (int, bool) {
	switch name {
	case "EF":
		return 46 << 2, true
	case "VA":
		return 44 << 2, true
	case "LE":
		return 1 << 2, true
	}
	if len(name) == 3 && name[:2] == "CS" && name[2] >= '0' && name[2] <= '7' {
		return int(name[2]-'0') << 5, true
	}
	if len(name) == 4 && name[:2] == "AF" && name[2] >= '1' && name[2] <= '4' && name[3] >= '1' && name[3] <= '3' {
		class, drop := int(name[2]-'0'), int(name[3]-'0')
		return (8*class + 2*drop) << 2, true
	}
	return 0, false
}

// ParseTOS reads a TOS byte: a DSCP name (CS0..CS7, EF, AF11..AF43, LE, VA; any
// case), or the raw byte as a number from 0 to 255, decimal or 0x hex. A number
// is the whole byte, ECN bits included: "184" is EF, as netperf -Y takes it.
func ParseTOS(s string) (int, error) {
	s = strings.TrimSpace(s)
	if v, ok := dscpTOS(strings.ToUpper(s)); ok {
		return v, nil
	}
	var v uint64
	var err error
	if hex, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		v, err = strconv.ParseUint(hex, 16, 8)
	} else {
		// Base 10, not 0: "010" must not be octal.
		v, err = strconv.ParseUint(s, 10, 8)
	}
	if err != nil {
		return 0, fmt.Errorf("TOS %q: want a DSCP name (CS0..CS7, EF, AF11..AF43, LE, VA) or a number from 0 to 255", s)
	}
	return int(v), nil
}

// setTOS marks what a socket sends with a TOS byte: IP_TOS on IPv4, the traffic
// class on IPv6. v4 is the family of the traffic, not of the socket: IP_TOS on an
// IPv6 socket marks its IPv4-mapped traffic.
func setTOS(conn syscall.Conn, v4 bool, tos int) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("set TOS: %w", err)
	}
	return setTOSRaw(rc, v4, tos)
}

func setTOSRaw(rc syscall.RawConn, v4 bool, tos int) error {
	level, opt, name := syscall.IPPROTO_IP, syscall.IP_TOS, "IP_TOS"
	if !v4 {
		level, opt, name = syscall.IPPROTO_IPV6, syscall.IPV6_TCLASS, "IPV6_TCLASS"
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), level, opt, tos)
	}); err != nil {
		return fmt.Errorf("set %s: %w", name, err)
	}
	if serr != nil {
		return fmt.Errorf("set %s to %#x: %w", name, tos, serr)
	}
	return nil
}

// isV4 is whether an address is IPv4 traffic (IPv4-mapped included).
func isV4(a netip.Addr) bool { return a.Unmap().Is4() }
