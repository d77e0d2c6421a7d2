package runners

import (
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"

	linux "golang.org/x/sys/unix"
)

// The ECN field, the TOS byte's two low bits (RFC 3168): what a UDP flood or
// probe marks its datagrams with, so that an L4S queue (dualpi2's L queue takes
// ECT(1), RFC 9331) or a marking AQM sees the traffic as ECN-capable. TCP sets
// its own from the connection's ECN state; UDP sends what the socket's TOS says.
const (
	ECNNotECT = 0
	ECNECT1   = 1
	ECNECT0   = 2
	ECNCE     = 3
	ecnMask   = 3
)

// ECNName is a codepoint as RFC 3168 writes it.
func ECNName(cp int) string {
	return [...]string{"Not-ECT", "ECT(1)", "ECT(0)", "CE"}[cp&ecnMask]
}

// ParseECN reads a codepoint: notect, ect0, ect1 or ce (any case; "not-ect",
// "ect(0)" and "ect(1)" as RFC 3168 writes them too).
func ParseECN(s string) (int, error) {
	w := strings.NewReplacer("-", "", "(", "", ")", "", "_", "").Replace(strings.ToLower(strings.TrimSpace(s)))
	switch w {
	case "notect":
		return ECNNotECT, nil
	case "ect1":
		return ECNECT1, nil
	case "ect0":
		return ECNECT0, nil
	case "ce":
		return ECNCE, nil
	}
	return 0, fmt.Errorf("ecn %q: want notect, ect0, ect1 or ce", s)
}

// marking is the TOS byte of a job's tos: and ecn: parameters, -1 for neither
// (the socket left unmarked), and how the data file's series name it ("EF",
// "EF, ECT(1)"). ecn sets the byte's ECN field; a tos that sets the field to
// another codepoint is a contradiction, refused.
func marking(tos, ecn string) (int, string, error) {
	if tos == "" && ecn == "" {
		return -1, "", nil
	}
	v, label := 0, tos
	if tos != "" {
		t, err := ParseTOS(tos)
		if err != nil {
			return 0, "", fmt.Errorf("tos: %w", err)
		}
		v = t
	}
	if ecn != "" {
		cp, err := ParseECN(ecn)
		if err != nil {
			return 0, "", err
		}
		if set := v & ecnMask; set != 0 && set != cp {
			return 0, "", fmt.Errorf("tos %s sets the ECN field to %s, and ecn says %s: give the DSCP in tos and the codepoint in ecn", tos, ECNName(set), ECNName(cp))
		}
		v = v&^ecnMask | cp
		if label != "" {
			label += ", "
		}
		label += ECNName(cp)
	}
	return v, label, nil
}

// recvTOS asks the kernel to pass each datagram's TOS byte (IPv4) and traffic
// class (IPv6) with it, for rxTOS; best effort: without it, no census.
func recvTOS(rc syscall.RawConn) {
	rc.Control(func(fd uintptr) {
		linux.SetsockoptInt(int(fd), linux.IPPROTO_IP, linux.IP_RECVTOS, 1)
		linux.SetsockoptInt(int(fd), linux.IPPROTO_IPV6, linux.IPV6_RECVTCLASS, 1)
	})
}

// rxTOS is the TOS byte a datagram arrived with, from recvmsg's control data;
// -1 when the kernel did not say.
func rxTOS(oob []byte) int {
	msgs, err := linux.ParseSocketControlMessage(oob)
	if err != nil {
		return -1
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == linux.IPPROTO_IP && m.Header.Type == linux.IP_TOS && len(m.Data) >= 1:
			return int(m.Data[0])
		case m.Header.Level == linux.IPPROTO_IPV6 && m.Header.Type == linux.IPV6_TCLASS && len(m.Data) >= 4:
			return int(binary.NativeEndian.Uint32(m.Data[:4]) & 0xff)
		}
	}
	return -1
}

// ecnCensus counts datagrams by the codepoint they arrived with.
type ecnCensus [4]int64

func (c *ecnCensus) add(tos int) {
	if tos >= 0 {
		c[tos&ecnMask]++
	}
}

func (c ecnCensus) total() int64 { return c[0] + c[1] + c[2] + c[3] }

// String is the counts of the codepoints that came, "ECT(1) 950, CE 50".
func (c ecnCensus) String() string {
	var parts []string
	for _, cp := range []int{ECNNotECT, ECNECT0, ECNECT1, ECNCE} {
		if c[cp] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", ECNName(cp), c[cp]))
		}
	}
	return strings.Join(parts, ", ")
}

// remarked is how many of the counted datagrams came with a codepoint that sent
// could not have become on the way: a router may set CE on an ECN-capable
// packet, and nothing else (RFC 3168); the rest were bleached or re-marked.
func (c ecnCensus) remarked(sent int) int64 {
	sent &= ecnMask
	var n int64
	for cp, k := range c {
		if cp == sent || cp == ECNCE && sent != ECNNotECT {
			continue
		}
		n += k
	}
	return n
}
