package runners

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"unsafe"

	linux "golang.org/x/sys/unix"
)

// A TCP flow may ask for ECN (ecn: on), for Accurate ECN (accecn, RFC 9768: the
// L4S flows' feedback) or for none (off). Linux negotiates ECN per connection in
// the handshake from the host's net.ipv4.tcp_ecn (or a route's `features ecn`, or
// a congestion control that needs it, as dctcp does), not from anything a socket
// sets; so the streams do not ask, they check. Once connected, each stream reads
// what its connection negotiated (tcp_info), and the job says, per group of flows,
// what they asked for and got, warning where the two differ: an L4S test whose
// flows ran without ECN measures something else, and nothing else would say so.

// ECN settings a flow may ask for.
const (
	ECNOff    = "off"
	ECNOn     = "on"
	ECNAccECN = "accecn"
)

// TCPECNSysctl is the sysctl Linux negotiates a connection's ECN from.
const TCPECNSysctl = "net.ipv4.tcp_ecn"

// ecnWant is the net.ipv4.tcp_ecn a group of flows asking for ecn needs on the
// hosts (the client asks for it in its SYN, the server accepts what it allows):
// 1 requests ECN and accepts it, 3 requests Accurate ECN (Linux 6.19; earlier
// kernels refuse the value, and the flows then say what they got), 0 neither.
func ecnWant(ecn, by string) SysctlWant {
	w := SysctlWant{By: by + " (ecn: " + ecn + ")"}
	switch ecn {
	case ECNOn:
		w.Value = "1"
	case ECNAccECN:
		w.Value, w.Optional = "3", true
	default:
		w.Value = "0"
	}
	return w
}

// checkECNParam refuses an ecn: the runner does not know.
func checkECNParam(s string) error {
	switch s {
	case "", ECNOff, ECNOn, ECNAccECN:
		return nil
	}
	return fmt.Errorf("ecn %q: use %s, %s or %s (or leave it out to take the host's setting)", s, ECNOff, ECNOn, ECNAccECN)
}

// ECN modes a connection negotiated.
const (
	ecnNone    = "no ECN"
	ecnClassic = "ECN (RFC 3168)"
	ecnAccECN  = "Accurate ECN"
	ecnPending = "ECN still pending"
	ecnUnknown = "unknown (tcp_info unreadable)"
)

// tcpi_options' bit for an ECN-capable connection, and tcpi_ecn_mode's values
// (include/uapi/linux/tcp.h, Linux 6.19).
const (
	tcpiOptECN      = 8
	tcpiECNModeAcc  = 2
	tcpiECNModePend = 3
)

// ecnModeOffset is where tcp_info's word of tcpi_ecn_mode:2, tcpi_accecn_opt_seen:2,
// tcpi_accecn_fail_mode:4 and tcpi_options2:24 starts in Linux 6.19: after
// tcpi_received_ce_bytes, the last of x/sys's named fields. Older kernels return
// less, or (6.18) the same length with two u16s there, tcpi_accecn_fail_mode
// first, which is 0 where Accurate ECN cannot be negotiated.
const ecnModeOffset = unsafe.Offsetof(linux.TCPInfo{}.Received_ce_bytes) + 4

// negotiatedECN reads what c's connection negotiated: tcpi_options' ECN bit says
// ECN of either kind (since Accurate ECN, any ECN mode sets it), and where the
// kernel reports tcpi_ecn_mode it tells Accurate ECN from RFC 3168's.
func negotiatedECN(c *net.TCPConn) string {
	rc, err := c.SyscallConn()
	if err != nil {
		return ecnUnknown
	}
	var buf [512]byte
	n := uint32(len(buf))
	var errno linux.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = linux.Syscall6(linux.SYS_GETSOCKOPT, fd, linux.IPPROTO_TCP, linux.TCP_INFO,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	}); err != nil || errno != 0 {
		return ecnUnknown
	}
	return ecnOfTCPInfo(buf[:min(int(n), len(buf))])
}

// ecnOfTCPInfo is negotiatedECN's reading of the bytes of a tcp_info.
func ecnOfTCPInfo(b []byte) string {
	if len(b) <= int(unsafe.Offsetof(linux.TCPInfo{}.Options)) {
		return ecnUnknown
	}
	if b[unsafe.Offsetof(linux.TCPInfo{}.Options)]&tcpiOptECN == 0 {
		return ecnNone
	}
	if len(b) >= int(ecnModeOffset)+4 {
		// The word's low bits first (x86-64 and arm64 are little-endian).
		switch b[ecnModeOffset] & 3 {
		case tcpiECNModeAcc:
			return ecnAccECN
		case tcpiECNModePend:
			return ecnPending
		}
	}
	return ecnClassic
}

// ecnAnswers says whether a connection that negotiated got meets what its flow
// asked for.
func ecnAnswers(asked, got string) bool {
	switch asked {
	case ECNOff:
		return got == ecnNone
	case ECNOn:
		return got == ecnClassic || got == ecnAccECN
	case ECNAccECN:
		return got == ecnAccECN
	}
	return true
}

// ecnLine is a line of ecnReport: alert where the flows did not get what they
// asked for.
type ecnLine struct {
	msg   string
	alert bool
}

// ecnReport is a tcp-streams job's lines of what its flows asked for and
// negotiated: one line for each pair of the two, naming up to a few flows, and an
// alert where they differ, with what to change. tcpECN is the client's
// net.ipv4.tcp_ecn as read ("" when unreadable).
func ecnReport(flows []StreamFlow, got []string, tcpECN string) []ecnLine {
	// needer is the congestion control of flows that asked for nothing but run
	// one that needs ECN.
	type key struct{ asked, needer, got string }
	groups := map[key][]string{}
	var order []key
	for i, f := range flows {
		if f.wantECN() == "" || i >= len(got) {
			continue
		}
		k := key{asked: f.wantECN(), got: got[i]}
		if f.ECN == "" {
			k.needer = f.CC
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], f.Name)
	}
	var out []ecnLine
	for _, k := range order {
		names := groups[k]
		named := strings.Join(names[:min(len(names), 4)], ", ")
		if len(names) > 4 {
			named += fmt.Sprintf(" and %d more", len(names)-4)
		}
		asked := "asked for ecn: " + k.asked
		if k.needer != "" {
			asked = "run " + k.needer + ", which needs ECN,"
		}
		if ecnAnswers(k.asked, k.got) {
			out = append(out, ecnLine{msg: fmt.Sprintf("tcp-streams: %d flows %s and negotiated %s (%s)", len(names), asked, k.got, named)})
			continue
		}
		fix := ecnFix(k.asked, tcpECN)
		if k.needer != "" {
			fix = fmt.Sprintf("%s runs as Reno without it; the server's listener runs %[1]s so that its kernel takes up an ECT-marked SYN's ECN: the path cleared the handshake's ECN bits, or the server's agent predates that (ecn: on or accecn on the flows says more)", k.needer)
		}
		out = append(out, ecnLine{alert: true, msg: fmt.Sprintf("tcp-streams: %d flows %s and negotiated %s (%s): %s",
			len(names), asked, k.got, named, fix)})
	}
	return out
}

// ecnFix says why the kernel did not negotiate what a flow asked for. The client
// opens every stream, so its net.ipv4.tcp_ecn asks; the server's accepts (2, the
// default, accepts ECN; Accurate ECN needs 3 or more at both ends). The run sets
// the value the flows need on every host (ecnWant), so a client without it had
// it refused by its kernel or changed since.
func ecnFix(asked, tcpECN string) string {
	now := "unreadable"
	if tcpECN != "" {
		now = tcpECN
	}
	want := ecnWant(asked, "").Value
	var fix string
	if now == want {
		fix = fmt.Sprintf("the client's net.ipv4.tcp_ecn is %s, as the run set it: the server did not take it up", now)
		if asked == ECNOn {
			fix += ", or the path cleared the handshake's ECN bits"
		}
	} else {
		fix = fmt.Sprintf("the client's net.ipv4.tcp_ecn is %s, not the %s the run sets for these flows: its kernel refused the value, or something set it since", now, want)
	}
	if asked == ECNAccECN {
		fix += " (Accurate ECN needs Linux 6.19 or later at both ends)"
	}
	return fix
}

// clientTCPECN reads this host's net.ipv4.tcp_ecn, "" when it cannot.
func clientTCPECN() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_ecn")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// anyECN says whether a flow asks for an ECN setting, or runs a congestion
// control that needs ECN.
func anyECN(flows []StreamFlow) bool {
	return slices.ContainsFunc(flows, func(f StreamFlow) bool { return f.wantECN() != "" })
}

// ecnNeeders are the congestion controls that set TCP_CONG_NEEDS_ECN: dctcp
// upstream, and TCP Prague out of tree. A BPF congestion control may set it too,
// under any name; it is not known here, and its flows are then taken as not
// needing ECN (they can still say ecn:).
var ecnNeeders = []string{"dctcp", "prague"}

// needsECN says whether the kernel runs cc only with ECN: it marks every packet
// ECT, the SYN too, and falls back to Reno where ECN was not negotiated.
func needsECN(cc string) bool { return slices.Contains(ecnNeeders, cc) }

// wantECN is what a flow's connection should negotiate: what it asks for, else
// ECN when its congestion control needs it (which sets nothing on the hosts,
// and is reported all the same: dctcp without ECN is Reno), else "".
func (f StreamFlow) wantECN() string {
	if f.ECN == "" && needsECN(f.CC) {
		return ECNOn
	}
	return f.ECN
}

// listenerCC is the congestion control the streams' listening socket runs, ""
// for the host's default. Linux declines the ECN a SYN asks for when the SYN is
// itself ECT-marked, as every SYN of dctcp is (RFC 3168 takes that for a path
// that rewrites the field; tcp_ecn_create_request), unless the SYN also asks for
// Accurate ECN, the route says `features ecn`, or the listener's own
// congestion control needs ECN: so a dctcp flow gets ECN from a dctcp listener,
// whatever net.ipv4.tcp_ecn says, and from no other. Each connection accepted
// then starts with the listener's congestion control and is set to its own
// flow's after the hello. Flows that ask for ecn: off keep the default, so the
// kernel declines theirs; allowed is what the host lets a listener set without
// loading a module.
func listenerCC(plan map[string]StreamFlow, allowed map[string]bool) string {
	var ccs []string
	for _, f := range plan {
		if needsECN(f.CC) && f.ECN != ECNOff && allowed[f.CC] {
			ccs = append(ccs, f.CC)
		}
	}
	if len(ccs) == 0 {
		return ""
	}
	// Any one of them makes the kernel accept every such SYN: the least by name,
	// so that a run's listener is the same from run to run.
	return slices.Min(ccs)
}
