package runners

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	linux "golang.org/x/sys/unix"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/e2eutil"
)

// cmsg builds one control message as the kernel lays it out.
func cmsg(level, typ int, data []byte) []byte {
	b := make([]byte, linux.CmsgSpace(len(data)))
	h := (*linux.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(linux.CmsgLen(len(data)))
	copy(b[linux.CmsgLen(0):], data)
	return b
}

func timespec(sec, nsec int64) []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint64(b, uint64(sec))
	binary.NativeEndian.PutUint64(b[8:], uint64(nsec))
	return b
}

func extErr(origin uint8, info uint32) []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint32(b, uint32(linux.ENOMSG))
	b[4] = origin
	binary.NativeEndian.PutUint32(b[8:], info)
	return b
}

func cat(bs ...[]byte) []byte { return slices.Concat(bs...) }

func TestPingRxStampParsing(t *testing.T) {
	when := time.Unix(1764480000, 123456789)
	three := cat(timespec(1764480000, 123456789), timespec(0, 0), timespec(0, 0))
	tv := make([]byte, 16)
	binary.NativeEndian.PutUint64(tv, 1764480000)
	binary.NativeEndian.PutUint64(tv[8:], 123456)
	for _, c := range []struct {
		name string
		oob  []byte
		want time.Time
		ok   bool
	}{
		{"SCM_TIMESTAMPING software", cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMPING, three), when, true},
		{"SCM_TIMESTAMPING hardware only", cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMPING, cat(timespec(0, 0), timespec(0, 0), timespec(5, 6))), time.Unix(5, 6), true},
		{"SCM_TIMESTAMPNS", cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMPNS, timespec(1764480000, 123456789)), when, true},
		{"SCM_TIMESTAMP (microseconds)", cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMP, tv), time.Unix(1764480000, 123456000), true},
		{"after an unrelated cmsg", cat(cmsg(linux.SOL_IP, linux.IP_TTL, []byte{64, 0, 0, 0}), cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMPNS, timespec(1764480000, 123456789))), when, true},
		{"32-bit timespec", cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMPNS, []byte{1, 0, 0, 0, 2, 0, 0, 0}), time.Unix(1, 2), true},
		{"all zero", cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMPING, make([]byte, 48)), time.Time{}, false},
		{"nanoseconds out of range", cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMPNS, timespec(1, 2e9)), time.Time{}, false},
		{"none", nil, time.Time{}, false},
		{"truncated header", []byte{1, 2, 3}, time.Time{}, false},
		{"other level", cmsg(linux.SOL_IP, linux.SO_TIMESTAMPNS, timespec(1, 2)), time.Time{}, false},
	} {
		got, ok := rxStamp(c.oob)
		if ok != c.ok || !got.Equal(c.want) {
			t.Errorf("%s: got %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestPingTxStampParsing(t *testing.T) {
	stamp := cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMPING, cat(timespec(1764480000, 5), timespec(0, 0), timespec(0, 0)))
	for _, c := range []struct {
		name string
		oob  []byte
		ok   bool
	}{
		{"IPv4 TX_SCHED", cat(stamp, cmsg(linux.SOL_IP, linux.IP_RECVERR, extErr(linux.SO_EE_ORIGIN_TIMESTAMPING, linux.SCM_TSTAMP_SCHED))), true},
		{"IPv6 TX_SCHED, error first", cat(cmsg(linux.SOL_IPV6, linux.IPV6_RECVERR, extErr(linux.SO_EE_ORIGIN_TIMESTAMPING, linux.SCM_TSTAMP_SCHED)), stamp), true},
		{"TX_SOFTWARE (the driver's) is not the one asked", cat(stamp, cmsg(linux.SOL_IP, linux.IP_RECVERR, extErr(linux.SO_EE_ORIGIN_TIMESTAMPING, linux.SCM_TSTAMP_SND))), false},
		{"an ICMP error", cat(cmsg(linux.SOL_IP, linux.IP_RECVERR, extErr(linux.SO_EE_ORIGIN_ICMP, 0))), false},
		{"stamp without its error", stamp, false},
		{"short extended error", cat(stamp, cmsg(linux.SOL_IP, linux.IP_RECVERR, []byte{0, 0, 0, 0, 4})), false},
	} {
		got, ok := txStamp(c.oob)
		if ok != c.ok || (ok && !got.Equal(time.Unix(1764480000, 5))) {
			t.Errorf("%s: got %v %v, want ok=%v", c.name, got, ok, c.ok)
		}
	}
}

// echoReply is what the kernel hands a socket for probe k of p.
func echoReply(t *testing.T, p *prober, id, seq, k int, cookie [8]byte) []byte {
	t.Helper()
	data := make([]byte, 56)
	copy(data, cookie[:])
	binary.BigEndian.PutUint64(data[8:], uint64(k))
	var typ icmp.Type = ipv4.ICMPTypeEchoReply
	if p.v6 {
		typ = ipv6.ICMPTypeEchoReply
	}
	b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: data}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.raw && !p.v6 {
		h := ipv4.Header{Version: 4, Len: 20, TotalLen: 20 + len(b), TTL: 64, Protocol: 1, Src: []byte{127, 0, 0, 1}, Dst: []byte{127, 0, 0, 1}}
		hb, _ := h.Marshal()
		b = append(hb, b...)
	}
	return b
}

func TestPingReplyMatching(t *testing.T) {
	sent := time.Unix(1764480000, 0)
	rx := sent.Add(1500 * time.Microsecond)
	rxCmsg := cmsg(linux.SOL_SOCKET, linux.SO_TIMESTAMPING, cat(timespec(rx.Unix(), int64(rx.Nanosecond())), make([]byte, 32)))
	other := [8]byte{9, 9, 9, 9, 9, 9, 9, 9}
	for _, c := range []struct {
		name      string
		raw, v6   bool
		reply     func(p *prober) []byte
		oob       []byte
		txStamp   time.Duration // after sent; 0 = none
		wantK     int
		wantOK    bool
		wantRTT   time.Duration
		kernelRX  bool
		kernelTX  bool
		stampless bool // the socket has no kernel stamps
	}{
		{name: "dgram v4, kernel both ways", reply: func(p *prober) []byte { return echoReply(t, p, 4242, 7, 7, p.cookie) },
			oob: rxCmsg, txStamp: 200 * time.Microsecond, wantK: 7, wantOK: true, wantRTT: 1300 * time.Microsecond, kernelRX: true, kernelTX: true},
		{name: "dgram v4, kernel receive stamp only", reply: func(p *prober) []byte { return echoReply(t, p, 1, 7, 7, p.cookie) },
			oob: rxCmsg, wantK: 7, wantOK: true, wantRTT: 1500 * time.Microsecond, kernelRX: true},
		{name: "raw v4 (IP header first)", raw: true, reply: func(p *prober) []byte { return echoReply(t, p, p.id, 7, 7, p.cookie) },
			oob: rxCmsg, wantK: 7, wantOK: true, wantRTT: 1500 * time.Microsecond, kernelRX: true},
		{name: "raw v4, another program's identifier", raw: true, reply: func(p *prober) []byte { return echoReply(t, p, p.id^1, 7, 7, p.cookie) }, oob: rxCmsg},
		{name: "raw v6", raw: true, v6: true, reply: func(p *prober) []byte { return echoReply(t, p, p.id, 7, 7, p.cookie) },
			oob: rxCmsg, wantK: 7, wantOK: true, wantRTT: 1500 * time.Microsecond, kernelRX: true},
		{name: "dgram v6", v6: true, reply: func(p *prober) []byte { return echoReply(t, p, 3, 7, 7, p.cookie) },
			oob: rxCmsg, wantK: 7, wantOK: true, wantRTT: 1500 * time.Microsecond, kernelRX: true},
		{name: "another prober's cookie", reply: func(p *prober) []byte { return echoReply(t, p, 1, 7, 7, other) }, oob: rxCmsg},
		{name: "sequence number disagrees with the index", reply: func(p *prober) []byte { return echoReply(t, p, 1, 8, 7, p.cookie) }, oob: rxCmsg},
		{name: "no probe of that index pending", reply: func(p *prober) []byte { return echoReply(t, p, 1, 9, 9, p.cookie) }, oob: rxCmsg},
		{name: "past 65536 probes the index decides", reply: func(p *prober) []byte { return echoReply(t, p, 1, 65537&0xffff, 65537, p.cookie) },
			oob: rxCmsg, wantK: 65537, wantOK: true, wantRTT: 1500 * time.Microsecond, kernelRX: true},
		{name: "an echo request is not a reply", reply: func(p *prober) []byte {
			b, _ := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 1, Seq: 7, Data: make([]byte, 56)}}).Marshal(nil)
			return b
		}, oob: rxCmsg},
		{name: "truncated", reply: func(p *prober) []byte { return []byte{0, 0} }, oob: rxCmsg},
		{name: "no receive stamp: user space", reply: func(p *prober) []byte { return echoReply(t, p, 1, 7, 7, p.cookie) },
			wantK: 7, wantOK: true, wantRTT: 2 * time.Millisecond},
		{name: "socket without stamps ignores a cmsg", stampless: true, reply: func(p *prober) []byte { return echoReply(t, p, 1, 7, 7, p.cookie) },
			oob: rxCmsg, wantK: 7, wantOK: true, wantRTT: 2 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &prober{raw: c.raw, v6: c.v6, id: 0x1234, cookie: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, interval: 10 * time.Millisecond,
				pending: map[int]*probe{}, stamps: stamping{rx: "SO_TIMESTAMPING"}}
			if c.stampless {
				p.stamps = stamping{}
			}
			for _, k := range []int{6, 7, 8} {
				p.pending[k] = &probe{sent: sent.Add(time.Duration(k-7) * 10 * time.Millisecond)}
			}
			p.pending[65537] = &probe{sent: sent}
			p.lastSent = 65537
			if c.txStamp != 0 {
				p.lastSent = 8
				p.stampSend(sent.Add(c.txStamp))
			}
			r, ok := p.match(c.reply(p), c.oob, sent.Add(2*time.Millisecond))
			if ok != c.wantOK {
				t.Fatalf("matched %v, want %v (%+v)", ok, c.wantOK, r)
			}
			if !ok {
				return
			}
			if r.k != c.wantK || r.rtt != c.wantRTT || r.kernelRX != c.kernelRX || r.kernelTX != c.kernelTX {
				t.Errorf("reply %+v, want k %d rtt %v kernel rx %v tx %v", r, c.wantK, c.wantRTT, c.kernelRX, c.kernelTX)
			}
			if _, again := p.match(c.reply(p), c.oob, sent.Add(3*time.Millisecond)); again {
				t.Error("a duplicate reply matched again")
			}
		})
	}
}

// A send stamp goes to the latest probe sent before it, not to an older one still
// unanswered, and not to one sent after it.
func TestPingSendStampGoesToItsProbe(t *testing.T) {
	base := time.Unix(1764480000, 0)
	p := &prober{interval: 10 * time.Millisecond, pending: map[int]*probe{}}
	for k := 0; k < 3; k++ {
		p.pending[k] = &probe{sent: base.Add(time.Duration(k) * 10 * time.Millisecond)}
		p.lastSent = k
	}
	p.stampSend(base.Add(10*time.Millisecond + 30*time.Microsecond))
	p.stampSend(base.Add(20*time.Millisecond + 40*time.Microsecond))
	p.stampSend(base.Add(-5 * time.Millisecond)) // before every send: nobody's
	for k, want := range []time.Duration{0, 10*time.Millisecond + 30*time.Microsecond, 20*time.Millisecond + 40*time.Microsecond} {
		got := p.pending[k].tx
		if (want == 0) != got.IsZero() || (want != 0 && !got.Equal(base.Add(want))) {
			t.Errorf("probe %d: send stamp %v, want base+%v", k, got, want)
		}
	}
}

// failingSocket is the kernel with socket() failing as an unprivileged user's does:
// no ICMP sockets for the group, no raw sockets without CAP_NET_RAW.
type failingSocket struct {
	kernel
	dgram, raw error
}

func (f failingSocket) socket(domain, typ, proto int) (int, error) {
	if typ&linux.SOCK_RAW != 0 {
		return -1, f.raw
	}
	return -1, f.dgram
}

func TestPingSocketErrorsNameTheFix(t *testing.T) {
	for _, c := range []struct {
		target string
		sys    failingSocket
		want   []string
	}{
		{"198.18.0.2", failingSocket{dgram: linux.EACCES, raw: linux.EPERM},
			[]string{"cannot open an ICMP socket", "net.ipv4.ping_group_range", "sysctl -w", "CAP_NET_RAW", "root"}},
		{"2001:db8::2", failingSocket{dgram: linux.EACCES, raw: linux.EPERM},
			[]string{"cannot open an ICMPv6 socket", "net.ipv4.ping_group_range", "CAP_NET_RAW"}},
		{"2001:db8::2", failingSocket{dgram: linux.EAFNOSUPPORT, raw: linux.EAFNOSUPPORT},
			[]string{"IPv6 is disabled"}},
	} {
		_, err := openPing(c.sys, PingSpec{Target: c.target, Interval: 0.2, Duration: 1})
		if err == nil {
			t.Fatalf("%s: opened with %+v", c.target, c.sys)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.target, err, w)
			}
		}
	}
	for _, spec := range []PingSpec{{Target: "server", Interval: 0.2}, {Target: "::1", Interval: 0.001}} {
		if _, err := OpenPing(spec); err == nil {
			t.Errorf("%+v accepted", spec)
		}
	}
}

// noStamps is a kernel that refuses every timestamping option.
type noStamps struct{ kernel }

func (noStamps) setsockoptInt(fd, level, opt, value int) error {
	if level == linux.SOL_SOCKET && (opt == linux.SO_TIMESTAMPING || opt == linux.SO_TIMESTAMPNS) {
		return linux.ENOPROTOOPT
	}
	return linux.SetsockoptInt(fd, level, opt, value)
}

// noTXStamps refuses send stamps only.
type noTXStamps struct{ kernel }

func (noTXStamps) setsockoptInt(fd, level, opt, value int) error {
	if level == linux.SOL_SOCKET && opt == linux.SO_TIMESTAMPING && value&linux.SOF_TIMESTAMPING_TX_SCHED != 0 {
		return linux.EINVAL
	}
	return linux.SetsockoptInt(fd, level, opt, value)
}

// collect runs a Pinger and returns its samples.
func collect(t *testing.T, pg *Pinger) []datafile.Sample {
	t.Helper()
	var mu sync.Mutex
	var got []datafile.Sample
	err := pg.Run(context.Background(), func(series string, s datafile.Sample) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b datafile.Sample) int { return a.Seq - b.Seq })
	return got
}

func needPingSocket(t *testing.T) {
	t.Helper()
	e2eutil.NeedRoot(t, "opens raw ICMP sockets (net.ipv4.ping_group_range allows no group here)")
}

// Real probes on loopback, IPv4 and IPv6, with every kind of stamping: each probe
// answered once, in order, from the start time on, with the stamps the socket says.
func TestPingLoopback(t *testing.T) {
	needPingSocket(t)
	for _, c := range []struct {
		target string
		sys    sysCalls
		want   string
	}{
		{"127.0.0.1", kernel{}, datafile.StampsKernel},
		{"::1", kernel{}, datafile.StampsKernel},
		{"127.0.0.1", noTXStamps{}, datafile.StampsKernelRX},
		{"127.0.0.1", noStamps{}, datafile.StampsUser},
	} {
		t.Run(c.target+"/"+c.want, func(t *testing.T) {
			start := time.Now().Add(100 * time.Millisecond)
			pg, err := openPing(c.sys, PingSpec{Series: "ping", Target: c.target, Interval: 0.02, Duration: 0.4, Start: datafile.Unix(start)})
			if err != nil {
				t.Fatal(err)
			}
			if pg.Timestamps() != c.want {
				t.Fatalf("stamps %q (%s), want %q", pg.Timestamps(), pg.Describe(), c.want)
			}
			var warned []string
			pg.Warn = func(m string) { warned = append(warned, m) }
			got := collect(t, pg)
			// A runner held up for a whole interval (a busy machine) skips the
			// slots it missed, and says how many; those are not samples.
			skipped := 0
			for i, w := range warned {
				if strings.Contains(w, "probes were not sent") {
					fmt.Sscanf(w[strings.Index(w, ": ")+2:], "%d probes", &skipped)
					warned = append(warned[:i], warned[i+1:]...)
					t.Logf("busy machine: %s", w)
					break
				}
			}
			if len(got)+skipped != 20 || skipped > 2 {
				t.Fatalf("%d samples and %d skipped, want 20: %+v", len(got), skipped, got)
			}
			for i, s := range got {
				if s.Seq < i || s.Seq > i+skipped || s.Lost || s.V <= 0 || s.V > 50 {
					t.Errorf("sample %d: %+v", i, s)
				}
			}
			firstSent := got[0].T - got[0].V/1e3
			if d := firstSent - datafile.Unix(start); d < -0.001 || d > 0.02 { // within one interval
				t.Errorf("first probe sent %.4f s from the start time", d)
			}
			// The kernel turns receive stamping on for the machine through deferred
			// work (the netstamp static key): on a busy machine the first replies
			// after a socket asks for it may come unstamped. Those fall back to user
			// space, counted in a warning; more than the first few would be a fault.
			fellBack := 0
			for _, w := range warned {
				var n int
				if _, err := fmt.Sscanf(w[strings.Index(w, ": ")+2:], "%d of", &n); err != nil || n > 2 {
					t.Errorf("warning: %q", w)
				} else {
					fellBack += n
					t.Logf("warning (allowed: the first replies): %q", w)
				}
			}
			// Each sample a user-space time stood in for says so; a socket with no
			// kernel stamps at all has nothing stood in for.
			user := 0
			for _, s := range got {
				if s.UserStamp {
					user++
				}
			}
			if user > fellBack || (fellBack > 0) != (user > 0) {
				t.Errorf("%d samples marked user_stamp; the warnings counted %d fallbacks", user, fellBack)
			}
		})
	}
}

// Probes nobody answers are recorded as lost, at their send times, once the wait
// for them is over.
func TestPingLostProbes(t *testing.T) {
	needPingSocket(t)
	// A namespace's own loopback, down: every send fails or goes nowhere.
	pg, err := OpenPing(PingSpec{Series: "ping", Target: "198.51.100.1", Interval: 0.05, Duration: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []datafile.Sample
	began := time.Now()
	err = pg.Run(context.Background(), func(_ string, s datafile.Sample) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	})
	// With no route the sends fail: an error naming why; with one, 4 lost probes.
	if err != nil {
		if !strings.Contains(err.Error(), "every probe failed to send") {
			t.Fatal(err)
		}
		return
	}
	if len(got) != 4 {
		t.Fatalf("%d samples, want 4 lost: %+v", len(got), got)
	}
	for i, s := range got {
		if !s.Lost || s.Seq != i || s.T < datafile.Unix(began) {
			t.Errorf("sample %+v", s)
		}
	}
	if took := time.Since(began); took < 1100*time.Millisecond {
		t.Errorf("gave up after %v, before the second's wait for late replies", took)
	}
}

// Cancelling ends a run at once and records no losses.
func TestPingCancel(t *testing.T) {
	needPingSocket(t)
	pg, err := OpenPing(PingSpec{Series: "ping", Target: "127.0.0.1", Interval: 0.05, Duration: 60})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	n := 0
	if err := pg.Run(ctx, func(string, datafile.Sample) { n++ }); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > time.Second || n < 3 {
		t.Errorf("cancelled run took %v with %d samples", took, n)
	}
}

var iputilsRTT = regexp.MustCompile(`time=([0-9.]+) ms`)

// Our idle median on loopback against iputils ping run alongside (kernel receive
// stamps, send stamps before sendto): kernel stamps put us at iputils' figure or
// below, where pro-bing's user-space stamps were 0.04-0.09 ms above it.
func TestPingLoopbackAgreesWithIputils(t *testing.T) {
	needPingSocket(t)
	if _, err := exec.LookPath("ping"); err != nil {
		t.Fatal("iputils ping is not installed: bash scripts/install-deps")
	}
	cmd := exec.Command("ping", "-n", "-c", "50", "-i", "0.01", "127.0.0.1")
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pg, err := OpenPing(PingSpec{Series: "ping", Target: "127.0.0.1", Interval: 0.01, Duration: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	ours := []float64{}
	for _, s := range collect(t, pg) {
		if !s.Lost {
			ours = append(ours, s.V)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ping: %v\n%s", err, out.String())
	}
	var theirs []float64
	for _, m := range iputilsRTT.FindAllStringSubmatch(out.String(), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		theirs = append(theirs, v)
	}
	// A probe whose slot has passed when the next one is due is skipped, not sent
	// late: under the race detector, with other packages' tests beside it, a 10 ms
	// timer was once that late. The medians are the point here.
	if len(ours) < 45 || len(theirs) < 45 {
		t.Fatalf("%d replies of ours, %d of iputils'", len(ours), len(theirs))
	}
	om, tm := medianOf(ours), medianOf(theirs)
	t.Logf("loopback idle median: bloatbench %.4f ms, iputils %.4f ms (%s)", om, tm, pg.Describe())
	// iputils prints three decimals; 0.01 ms is the bar against fping.
	if om > tm+0.01 {
		t.Errorf("our idle median %.4f ms is above iputils' %.4f ms by more than 0.01 ms", om, tm)
	}
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// The unprivileged socket, where the sysctl allows it: in a network namespace of
// its own (the sysctl is per namespace), with this process's group let in.
func TestPingUnprivilegedSocket(t *testing.T) {
	needPingSocket(t)
	if os.Getenv("BB_PING_IN_NETNS") == "1" {
		pg, err := OpenPing(PingSpec{Series: "ping", Target: "127.0.0.1", Interval: 0.02, Duration: 0.2})
		if err != nil {
			t.Fatal(err)
		}
		if pg.p.raw {
			t.Fatalf("opened a raw socket with ping_group_range open: %s", pg.Describe())
		}
		got := collect(t, pg)
		if len(got) != 10 || got[0].Lost || pg.Timestamps() != datafile.StampsKernel {
			t.Fatalf("%d samples, stamps %s: %+v", len(got), pg.Timestamps(), got)
		}
		fmt.Println("unprivileged:", pg.Describe())
		return
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare is not installed (util-linux)")
	}
	script := `ip link set lo up && sysctl -qw net.ipv4.ping_group_range="0 2147483647" && exec "$0" -test.run '^TestPingUnprivilegedSocket$' -test.v`
	cmd := exec.Command("unshare", "--net", "sh", "-c", script, os.Args[0])
	cmd.Env = append(os.Environ(), "BB_PING_IN_NETNS=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "unprivileged: unprivileged ICMP socket") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// A runner that starts late sends only the latest probe due, then keeps to the grid:
// no burst of the probes it missed, and a warning that counts them.
func TestPingLateStartSkipsMissedSlots(t *testing.T) {
	needPingSocket(t)
	start := time.Now().Add(-time.Second) // ten 0.1 s slots ago
	pg, err := openPing(kernel{}, PingSpec{Series: "ping", Target: "127.0.0.1", Interval: 0.1, Duration: 1.5, Start: datafile.Unix(start)})
	if err != nil {
		t.Fatal(err)
	}
	var warned []string
	pg.Warn = func(m string) { warned = append(warned, m) }
	got := collect(t, pg)
	if len(got) < 3 || len(got) > 6 || got[0].Seq < 9 {
		t.Fatalf("%d samples from seq %d, want the last 5 or so of 15 from seq 9 or later: %+v", len(got), got[0].Seq, got)
	}
	for i := 1; i < len(got); i++ {
		sent, prev := got[i].T-got[i].V/1e3, got[i-1].T-got[i-1].V/1e3
		if sent-prev < 0.05 {
			t.Errorf("probes %d and %d went out %.3f s apart: a burst", got[i-1].Seq, got[i].Seq, sent-prev)
		}
	}
	if len(warned) == 0 || !strings.Contains(strings.Join(warned, " "), fmt.Sprintf("%d probes were not sent", 15-len(got))) {
		t.Errorf("warnings %q: want the %d skipped probes counted", warned, 15-len(got))
	}
}

// The ping job declares its socket's connection with its first sample, as the
// sojourn tracer counts the echo packets: the route's source, the target, and
// the echo identifier in both ports, so that the reports find which tx queue
// the probes went through.
func TestPingDeclaresItsConnection(t *testing.T) {
	needPingSocket(t)
	for _, target := range []string{"127.0.0.1", "::1"} {
		t.Run(target, func(t *testing.T) {
			raw, _, err := Kinds()["ping"].Plan(map[string]any{"series": "ping"}, NewPlanner())
			if err != nil {
				t.Fatal(err)
			}
			rec := &rrRecorder{}
			spec := JobSpec{Kind: "ping", Host: "client", Target: target, Step: 0.02, Duration: 0.1, Params: raw}
			job, _, err := Kinds()["ping"].Start(t.Context(), spec, rec.env())
			if err != nil {
				t.Fatal(err)
			}
			if err := job.Run(t.Context()); err != nil {
				t.Fatal(err)
			}
			if len(rec.declared) != 1 {
				t.Fatalf("declared %+v, want the ping's connection", rec.declared)
			}
			se := rec.declared[0]
			c, ok := datafile.ParseConn(se.Conn)
			proto := map[string]string{"127.0.0.1": "icmp", "::1": "icmpv6"}[target]
			if !ok || se.Kind != datafile.KindConn || se.Of != "ping" || se.Name != "conn ping" || se.Host != "client" ||
				c.Proto != proto || c.Src.Addr().String() != target || c.Dst.Addr().String() != target || c.Src.Port() != c.Dst.Port() {
				t.Errorf("declared %+v", se)
			}
		})
	}
}
