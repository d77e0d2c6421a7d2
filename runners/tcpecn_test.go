package runners

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	linux "golang.org/x/sys/unix"
)

// tcp_info as kernels return it: tcpi_options' bit says ECN of either kind; from
// 6.19 the two low bits of the word after tcpi_received_ce_bytes (tcpi_ecn_mode,
// beside other bit fields) tell Accurate ECN; 6.18 returns as many bytes with
// tcpi_accecn_fail_mode there, 0 (seen on this machine's kernel).
func TestECNOfTCPInfo(t *testing.T) {
	opts := int(unsafe.Offsetof(linux.TCPInfo{}.Options))
	old := func(options byte) []byte {
		b := make([]byte, ecnModeOffset) // a kernel without the word
		b[opts] = options
		return b
	}
	withMode := func(word uint32, options byte) []byte {
		b := make([]byte, ecnModeOffset+4)
		b[opts] = options
		binary.LittleEndian.PutUint32(b[ecnModeOffset:], word)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"nothing read", nil, ecnUnknown},
		{"cut before tcpi_options", make([]byte, opts), ecnUnknown},
		{"old kernel, ECN", old(tcpiOptECN | 0x7), ecnClassic},
		{"old kernel, no ECN", old(0x7), ecnNone},
		{"mode disabled", withMode(0, 0), ecnNone},
		{"mode RFC 3168", withMode(1, tcpiOptECN), ecnClassic},
		{"mode AccECN, other fields set", withMode(2|3<<2|0xf<<4|0xffffff<<8, tcpiOptECN), ecnAccECN},
		{"mode pending", withMode(3, tcpiOptECN), ecnPending},
		{"6.18's layout, ECN", withMode(0, tcpiOptECN|0x7), ecnClassic},
		{"6.18's layout, no ECN", withMode(0, 0x7), ecnNone},
	} {
		if got := ecnOfTCPInfo(tc.b); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestECNReport(t *testing.T) {
	var flows []StreamFlow
	var got []string
	for i := 1; i <= 6; i++ {
		flows = append(flows, StreamFlow{Name: FlowName(Download, i), ECN: ECNOn})
		got = append(got, ecnNone)
	}
	flows = append(flows, StreamFlow{Name: "TCP upload BK", ECN: ECNOff}, StreamFlow{Name: "TCP upload EF"},
		StreamFlow{Name: "TCP upload BE", ECN: ECNAccECN})
	got = append(got, ecnNone, ecnClassic, ecnClassic)
	lines := ecnReport(flows, got, "2")
	want := []ecnLine{
		{alert: true, msg: `tcp-streams: 6 flows asked for ecn: on and negotiated no ECN (TCP download::1, TCP download::2, TCP download::3, TCP download::4 and 2 more): the client's net.ipv4.tcp_ecn is 2, not the 1 the run sets for these flows: its kernel refused the value, or something set it since`},
		{msg: "tcp-streams: 1 flows asked for ecn: off and negotiated no ECN (TCP upload BK)"},
		{alert: true, msg: `tcp-streams: 1 flows asked for ecn: accecn and negotiated ECN (RFC 3168) (TCP upload BE): the client's net.ipv4.tcp_ecn is 2, not the 3 the run sets for these flows: its kernel refused the value, or something set it since (Accurate ECN needs Linux 6.19 or later at both ends)`},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %+v", len(lines), len(want), lines)
	}
	// At the value the run set, the server or the path is to blame.
	if l := ecnReport(flows[:1], got[:1], "1"); len(l) != 1 || !strings.HasSuffix(l[0].msg, "the client's net.ipv4.tcp_ecn is 1, as the run set it: the server did not take it up, or the path cleared the handshake's ECN bits") {
		t.Errorf("at the run's value: %+v", l)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %+v\nwant %+v", i, lines[i], want[i])
		}
	}
	if l := ecnReport([]StreamFlow{{Name: "x"}}, []string{ecnClassic}, "1"); len(l) != 0 {
		t.Errorf("a flow that asks nothing got lines %+v", l)
	}
	if l := ecnReport([]StreamFlow{{Name: "x", ECN: ECNOff}}, []string{ecnClassic}, ""); len(l) != 1 || !l[0].alert || !strings.Contains(l[0].msg, "tcp_ecn is unreadable") {
		t.Errorf("ECN where off was asked, tcp_ecn unreadable: %+v", l)
	}
}

func TestStreamsPlanECN(t *testing.T) {
	plan := func(ecn any) (streamsPlan, error) {
		raw, _, err := tcpStreamsKind.Plan(map[string]any{"flows": []any{map[string]any{"direction": "download", "count": 2, "ecn": ecn}}}, NewPlanner())
		var p streamsPlan
		if err == nil {
			err = decodeRaw(raw, &p)
		}
		return p, err
	}
	for _, ecn := range []string{"", ECNOff, ECNOn, ECNAccECN} {
		p, err := plan(ecn)
		if err != nil || len(p.Flows) != 2 || p.Flows[0].ECN != ecn || p.Flows[1].ECN != ecn {
			t.Errorf("ecn %q: %v %+v", ecn, err, p)
		}
	}
	if _, err := plan("yes"); err == nil || !strings.Contains(err.Error(), `flows[0].ecn "yes": use off, on or accecn`) {
		t.Errorf("ecn yes: %v", err)
	}
}

// The flows' ecn asks the run for the net.ipv4.tcp_ecn that negotiates it, on
// every host; two groups that need it different cannot run together.
func TestStreamsWantTCPECN(t *testing.T) {
	group := func(ecn string, count int) map[string]any {
		return map[string]any{"direction": "download", "count": count, "ecn": ecn}
	}
	for _, c := range []struct {
		name   string
		flows  []any
		want   map[string]SysctlWant
		errMsg string
	}{
		{"none asked", []any{group("", 2)}, map[string]SysctlWant{}, ""},
		{"on", []any{group(ECNOn, 2)}, map[string]SysctlWant{TCPECNSysctl: {Value: "1", By: "TCP download::1 to TCP download::2 (ecn: on)"}}, ""},
		{"two groups, one value", []any{group(ECNOn, 1), group(ECNOn, 1)},
			map[string]SysctlWant{TCPECNSysctl: {Value: "1", By: "TCP download::1 (ecn: on), TCP download::2 (ecn: on)"}}, ""},
		{"accecn, which a kernel may refuse", []any{group(ECNAccECN, 1)}, map[string]SysctlWant{TCPECNSysctl: {Value: "3", By: "TCP download::1 (ecn: accecn)", Optional: true}}, ""},
		{"off", []any{group(ECNOff, 1), group("", 1)}, map[string]SysctlWant{TCPECNSysctl: {Value: "0", By: "TCP download::1 (ecn: off)"}}, ""},
		{"on beside off", []any{group(ECNOn, 1), group(ECNOff, 1)}, nil,
			"flows[1].ecn: TCP download::2 (ecn: off) needs net.ipv4.tcp_ecn = 0, and TCP download::1 (ecn: on) needs 1: one host cannot have both"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pl := NewPlanner()
			_, _, err := tcpStreamsKind.Plan(map[string]any{"flows": c.flows}, pl)
			if c.errMsg != "" {
				if err == nil || !strings.Contains(err.Error(), c.errMsg) {
					t.Errorf("error %v, want %q", err, c.errMsg)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(pl.Sysctls(), c.want) {
				t.Errorf("%v: wants %+v, want %+v", err, pl.Sysctls(), c.want)
			}
		})
	}
}

// Streams over loopback that ask for ECN say what they negotiated: what this
// host's net.ipv4.tcp_ecn makes of a connection to itself (1 asks and accepts;
// 0 and 2, the default, do not ask), an alert where that is not ECN.
func TestStreamsSayWhatECNNegotiated(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got samples
	l, err := Listen(ctx, ListenSpec{Addr: "127.0.0.1", Token: "tok", Step: 0.05}, got.emit)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve(ctx) }()
	var mu sync.Mutex
	var warned, alerted []string
	env := Env{Warn: func(m string) { mu.Lock(); warned = append(warned, m); mu.Unlock() },
		Alert: func(m string) { mu.Lock(); alerted = append(alerted, m); mu.Unlock() }}
	flows := []StreamFlow{{Name: "TCP download::1", Direction: Download, ECN: ECNOn}, {Name: "TCP download::2", Direction: Download}}
	spec := StreamsSpec{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port())), Token: "tok", Step: 0.05,
		Duration: 0.2, Flows: flows, env: env}
	if err := RunStreams(ctx, spec, got.emit); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-served
	tcpECN := clientTCPECN()
	t.Logf("net.ipv4.tcp_ecn %q; warned %q; alerted %q", tcpECN, warned, alerted)
	switch tcpECN {
	case "1":
		if len(alerted) != 0 || len(warned) != 1 || warned[0] != "tcp-streams: 1 flows asked for ecn: on and negotiated ECN (RFC 3168) (TCP download::1)" {
			t.Errorf("with tcp_ecn 1: warned %q, alerted %q", warned, alerted)
		}
	case "0", "2":
		want := "tcp-streams: 1 flows asked for ecn: on and negotiated no ECN (TCP download::1): the client's net.ipv4.tcp_ecn is " + tcpECN
		if len(warned) != 0 || len(alerted) != 1 || !strings.HasPrefix(alerted[0], want) {
			t.Errorf("with tcp_ecn %s: warned %q, alerted %q; want an alert beginning %q", tcpECN, warned, alerted, want)
		}
	default:
		t.Logf("tcp_ecn %q: not checked", tcpECN)
	}
}

// The kernel's own negotiation, in a network namespace of the test's whose
// net.ipv4.tcp_ecn it sets: 1 negotiates ECN, 0 none (this machine's kernel,
// 6.18, reports it through tcpi_options; 6.19 and later through tcpi_ecn_mode).
func TestNegotiatedECNOfARealConnection(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a network namespace")
	}
	for _, tc := range []struct{ sysctl, want string }{{"1", ecnClassic}, {"0", ecnNone}} {
		t.Run("tcp_ecn="+tc.sysctl, func(t *testing.T) {
			done := make(chan string, 1)
			// A thread of its own, left to die with its namespace.
			go func() {
				runtime.LockOSThread()
				done <- func() string {
					if err := linux.Unshare(linux.CLONE_NEWNET); err != nil {
						return "unshare: " + err.Error()
					}
					if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
						return "lo up: " + err.Error() + " " + string(out)
					}
					if err := os.WriteFile("/proc/sys/net/ipv4/tcp_ecn", []byte(tc.sysctl), 0); err != nil {
						return "tcp_ecn: " + err.Error()
					}
					ln, err := net.Listen("tcp4", "127.0.0.1:0")
					if err != nil {
						return err.Error()
					}
					defer ln.Close()
					go func() {
						if c, err := ln.Accept(); err == nil {
							defer c.Close()
							c.Read(make([]byte, 1))
						}
					}()
					c, err := net.Dial("tcp4", ln.Addr().String())
					if err != nil {
						return err.Error()
					}
					defer c.Close()
					return negotiatedECN(c.(*net.TCPConn))
				}()
			}()
			if got := <-done; got != tc.want {
				t.Errorf("negotiated %q, want %q", got, tc.want)
			}
		})
	}
}

// The listening socket runs a congestion control that needs ECN when a planned
// flow does and does not refuse ECN, so that the kernel takes up the ECN of the
// flow's ECT-marked SYN; one the host has not loaded is never set (root's
// setsockopt would load it).
func TestListenerCC(t *testing.T) {
	allowed := map[string]bool{"reno": true, "cubic": true, "dctcp": true, "prague": true}
	plan := func(flows ...StreamFlow) map[string]StreamFlow {
		m := map[string]StreamFlow{}
		for i, f := range flows {
			m[FlowName(Download, i+1)] = f
		}
		return m
	}
	for _, c := range []struct {
		name    string
		plan    map[string]StreamFlow
		allowed map[string]bool
		want    string
	}{
		{"no plan", nil, allowed, ""},
		{"cubic only", plan(StreamFlow{CC: "cubic", ECN: ECNOn}, StreamFlow{}), allowed, ""},
		{"dctcp asking nothing", plan(StreamFlow{CC: "dctcp"}), allowed, "dctcp"},
		{"dctcp beside cubic", plan(StreamFlow{CC: "cubic"}, StreamFlow{CC: "dctcp", ECN: ECNOn}), allowed, "dctcp"},
		{"dctcp asking for accecn", plan(StreamFlow{CC: "dctcp", ECN: ECNAccECN}), allowed, "dctcp"},
		{"dctcp refusing ECN", plan(StreamFlow{CC: "dctcp", ECN: ECNOff}), allowed, ""},
		{"dctcp not loaded", plan(StreamFlow{CC: "dctcp"}), map[string]bool{"cubic": true}, ""},
		{"two that need it: the first by name", plan(StreamFlow{CC: "prague"}, StreamFlow{CC: "dctcp"}), allowed, "dctcp"},
	} {
		if got := listenerCC(c.plan, c.allowed); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// A flow of dctcp that asks for nothing is reported as one that asked for ECN:
// without it dctcp runs as Reno, and nothing else would say so.
func TestECNReportOfACCThatNeedsECN(t *testing.T) {
	flows := []StreamFlow{{Name: "TCP download::1", CC: "dctcp"}, {Name: "TCP download::2", CC: "dctcp"},
		{Name: "TCP download::3", CC: "cubic"}, {Name: "TCP download::4", CC: "dctcp", ECN: ECNOn}}
	got := []string{ecnClassic, ecnNone, ecnNone, ecnClassic}
	want := []ecnLine{
		{msg: "tcp-streams: 1 flows run dctcp, which needs ECN, and negotiated ECN (RFC 3168) (TCP download::1)"},
		{alert: true, msg: "tcp-streams: 1 flows run dctcp, which needs ECN, and negotiated no ECN (TCP download::2): dctcp runs as Reno without it; the server's listener runs dctcp so that its kernel takes up an ECT-marked SYN's ECN: the path cleared the handshake's ECN bits, or the server's agent predates that (ecn: on or accecn on the flows says more)"},
		{msg: "tcp-streams: 1 flows asked for ecn: on and negotiated ECN (RFC 3168) (TCP download::4)"},
	}
	if lines := ecnReport(flows, got, "2"); !reflect.DeepEqual(lines, want) {
		t.Errorf("lines:\n%+v\nwant\n%+v", lines, want)
	}
}

// The listening socket runs the congestion control it was given, and streams
// that ask for none, or for another, are served all the same.
func TestListenerRunsItsCC(t *testing.T) {
	allowed := hostCC()
	if !allowed["reno"] {
		t.Fatal("reno, which every kernel has built in, is not listed in /proc/sys/net/ipv4/tcp_available_congestion_control")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got samples
	l, err := listen(ctx, ListenSpec{Addr: "127.0.0.1", Token: "tok", Step: 0.05}, got.emit, allowed, "reno")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cc string
	var serr error
	rc.Control(func(fd uintptr) { cc, serr = linux.GetsockoptString(int(fd), linux.IPPROTO_TCP, linux.TCP_CONGESTION) })
	if serr != nil || strings.TrimRight(cc, "\x00") != "reno" {
		t.Errorf("the listening socket runs %q (%v), want reno", cc, serr)
	}
	if l.defaultCC == "" {
		t.Error("no default congestion control read for the streams that ask for none")
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve(ctx) }()
	flows := []StreamFlow{{Name: "TCP download::1", Direction: Download}, {Name: "TCP download::2", Direction: Download, CC: "reno"}}
	spec := StreamsSpec{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port())), Token: "tok", Step: 0.05, Duration: 0.2, Flows: flows}
	if err := RunStreams(ctx, spec, got.emit); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	for _, f := range flows {
		if len(got.m[f.Name]) == 0 {
			t.Errorf("%s: no samples", f.Name)
		}
	}
}
