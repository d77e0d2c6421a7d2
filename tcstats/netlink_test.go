package tcstats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/bloatbench/bloatbench/internal/e2eutil"
	"golang.org/x/sys/unix"
)

// Same name, same number: on real qdiscs of this machine's kernel, each after
// traffic, the kernel's dump read by Netlink gives exactly the statistics Flatten
// makes of `tc -s -j qdisc show` (names and values), and a qdisc with something
// only tc prints (a rate estimator) is left to tc.
func TestNetlinkReadsWhatTCPrints(t *testing.T) {
	e2eutil.NeedRoot(t, "makes network namespaces and qdiscs")
	a, b := fmt.Sprintf("bbnl-%d-a", os.Getpid()), fmt.Sprintf("bbnl-%d-b", os.Getpid())
	sh := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
		return out
	}
	for _, ns := range []string{a, b} {
		sh("ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		// No IPv6: its neighbour discovery would move counters between the reads.
		sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	sh("ip", "-n", a, "link", "add", "v0", "numtxqueues", "4", "numrxqueues", "4", "type", "veth", "peer", "name", "v1", "netns", b)
	sh("ip", "-n", a, "addr", "add", "10.9.1.1/24", "dev", "v0")
	sh("ip", "-n", b, "addr", "add", "10.9.1.2/24", "dev", "v1")
	sh("ip", "-n", a, "link", "set", "v0", "up")
	sh("ip", "-n", b, "link", "set", "v1", "up")
	tc := func(args ...string) []byte { return sh(append([]string{"ip", "netns", "exec", a, "tc"}, args...)...) }

	// The reader opens its socket and looks the device up in a's namespace.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Setns(home, unix.CLONE_NEWNET); err != nil {
			t.Errorf("back to the test's network namespace: %v", err)
		}
		unix.Close(home)
	}()
	there, err := unix.Open("/run/netns/"+a, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Setns(there, unix.CLONE_NEWNET)
	unix.Close(there)
	if err != nil {
		t.Fatal(err)
	}
	nl, err := DialNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()

	setups := []struct {
		name    string
		cmds    [][]string
		needsTC bool
	}{
		{name: "noqueue"},
		{name: "pfifo", cmds: [][]string{{"qdisc", "replace", "dev", "v0", "root", "pfifo", "limit", "100"}}},
		{name: "mq+pfifo,bfifo,pfifo_fast and an ingress", cmds: [][]string{
			{"qdisc", "replace", "dev", "v0", "root", "handle", "1:", "mq"},
			{"qdisc", "replace", "dev", "v0", "parent", "1:1", "pfifo", "limit", "50"},
			{"qdisc", "replace", "dev", "v0", "parent", "1:2", "bfifo", "limit", "30000"},
			{"qdisc", "add", "dev", "v0", "ingress"},
		}},
		{name: "htb+bfifo", cmds: [][]string{
			{"qdisc", "del", "dev", "v0", "ingress"},
			{"qdisc", "del", "dev", "v0", "root"},
			{"qdisc", "add", "dev", "v0", "root", "handle", "1:", "htb", "default", "1"},
			{"class", "add", "dev", "v0", "parent", "1:", "classid", "1:1", "htb", "rate", "20mbit"},
			{"qdisc", "add", "dev", "v0", "parent", "1:1", "handle", "10:", "bfifo", "limit", "20000"},
		}},
		{name: "tbf", cmds: [][]string{{"qdisc", "replace", "dev", "v0", "root", "tbf", "rate", "20mbit", "burst", "5000", "limit", "20000"}}},
		{name: "htb with a rate estimator", needsTC: true, cmds: [][]string{
			{"qdisc", "del", "dev", "v0", "root"},
			{"qdisc", "add", "dev", "v0", "root", "handle", "1:", "estimator", "250ms", "1sec", "htb", "default", "1"},
		}},
	}
	for _, s := range setups {
		for _, c := range s.cmds {
			tc(c...)
		}
		// Traffic through the qdiscs, over every tx queue's flow hash, then none.
		sh("ip", "netns", "exec", a, "ping", "-q", "-c", "40", "-i", "0.002", "-s", "1200", "10.9.1.2")
		want, err := Flatten(tc("-s", "-j", "qdisc", "show", "dev", "v0"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := nl.Read("v0")
		if s.needsTC {
			if !errors.Is(err, ErrNeedsTC) {
				t.Errorf("%s: %v, want ErrNeedsTC; tc prints %v", s.name, err, want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s:\nnetlink %v\ntc      %v", s.name, got, want)
		}
		if want["root packets"] == 0 && s.name != "noqueue" {
			t.Errorf("%s: the root sent no packets: %v", s.name, want)
		}
		t.Logf("%s: %d statistics alike, root sent %.0f packets", s.name, len(got), want["root packets"])
	}
	if _, err := nl.Read("nosuch0"); err == nil {
		t.Errorf("a device that is not there read without error")
	}
}

// A dump's bytes, crafted: the kernel's messages are bounds-checked, a qdisc
// with extended statistics asks for tc, the rest of an earlier dump is skipped by
// its sequence number, and handles print as tc prints them.
func TestNetlinkDumpParse(t *testing.T) {
	attr := func(typ uint16, payload []byte) []byte {
		b := make([]byte, 4, 4+len(payload)+3)
		binary.NativeEndian.PutUint16(b, uint16(4+len(payload)))
		binary.NativeEndian.PutUint16(b[2:], typ)
		b = append(b, payload...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	u32s := func(vs ...uint32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			binary.NativeEndian.PutUint32(b[4*i:], v)
		}
		return b
	}
	basic := make([]byte, 16)
	binary.NativeEndian.PutUint64(basic, 1<<40)
	binary.NativeEndian.PutUint32(basic[8:], 7)
	stats2 := attr(tcaStats2, append(attr(statsBasic, basic), attr(statsQueue, u32s(1, 1500, 2, 3, 4))...))
	msg := func(typ uint16, seq uint32, ifindex int32, parent uint32, attrs ...[]byte) []byte {
		body := u32s(0, uint32(ifindex), 0, parent, 0)
		for _, a := range attrs {
			body = append(body, a...)
		}
		h := make([]byte, 16)
		binary.NativeEndian.PutUint32(h, uint32(16+len(body)))
		binary.NativeEndian.PutUint16(h[4:], typ)
		binary.NativeEndian.PutUint32(h[8:], seq)
		return append(h, body...)
	}
	done := func(seq uint32) []byte {
		h := make([]byte, 20)
		binary.NativeEndian.PutUint32(h, 20)
		binary.NativeEndian.PutUint16(h[4:], unix.NLMSG_DONE)
		binary.NativeEndian.PutUint32(h[8:], seq)
		return h
	}
	kind := attr(tcaKind, []byte("pfifo\x00"))
	cat := func(bs ...[]byte) (out []byte) {
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}

	t.Run("named as tc names them", func(t *testing.T) {
		d := dump{seq: 9, ifindex: 3, out: map[string]float64{}}
		err := d.batch(cat(
			msg(unix.RTM_NEWQDISC, 8, 3, tcHRoot, kind, stats2), // an earlier dump's
			msg(unix.RTM_NEWQDISC, 9, 3, tcHRoot, kind, stats2),
			msg(unix.RTM_NEWQDISC, 9, 3, 0x10001, kind, stats2),
			msg(unix.RTM_NEWQDISC, 9, 3, 0xfffffff1, kind, stats2),
			msg(unix.RTM_NEWQDISC, 9, 4, 0x20000, kind, stats2), // another device's
			done(9)))
		if err != nil || !d.done || d.found != 3 || d.needsTC {
			t.Fatalf("err %v done %v found %d needsTC %v", err, d.done, d.found, d.needsTC)
		}
		want := map[string]float64{}
		for _, id := range []string{"root", "1:1", "ffff:fff1"} {
			for k, v := range map[string]float64{"bytes": 1 << 40, "packets": 7, "qlen": 1, "backlog": 1500, "drops": 2, "requeues": 3, "overlimits": 4} {
				want[id+" "+k] = v
			}
		}
		if !maps.Equal(d.out, want) {
			t.Errorf("got %v\nwant %v", d.out, want)
		}
	})
	t.Run("extended statistics go to tc", func(t *testing.T) {
		for name, m := range map[string][]byte{
			"TCA_XSTATS":     msg(unix.RTM_NEWQDISC, 1, 3, tcHRoot, kind, stats2, attr(tcaXstats, u32s(1, 2))),
			"TCA_STATS_APP":  msg(unix.RTM_NEWQDISC, 1, 3, tcHRoot, kind, attr(tcaStats2, attr(statsApp, u32s(1)))),
			"a rate":         msg(unix.RTM_NEWQDISC, 1, 3, tcHRoot, kind, attr(tcaStats2, attr(statsRateEst64, u32s(1, 0, 2, 0)))),
			"no TCA_STATS2":  msg(unix.RTM_NEWQDISC, 1, 3, tcHRoot, kind),
			"an unknown TCA": msg(unix.RTM_NEWQDISC, 1, 3, tcHRoot, kind, stats2, attr(99, nil)),
		} {
			d := dump{seq: 1, ifindex: 3, out: map[string]float64{}}
			if err := d.batch(cat(m, done(1))); err != nil || !d.needsTC || !d.done {
				t.Errorf("%s: err %v needsTC %v done %v", name, err, d.needsTC, d.done)
			}
		}
	})
	t.Run("short or odd bytes are errors", func(t *testing.T) {
		short := msg(unix.RTM_NEWQDISC, 1, 3, tcHRoot, kind, attr(tcaStats2, attr(statsBasic, u32s(1))))
		badAttr := msg(unix.RTM_NEWQDISC, 1, 3, tcHRoot, kind)
		badAttr = append(badAttr, 0xff, 0x00, 0x07, 0x00) // an attribute longer than the message
		binary.NativeEndian.PutUint32(badAttr, uint32(len(badAttr)))
		for name, b := range map[string][]byte{
			"a basic of 4 bytes":   short,
			"no tcmsg":             msg(unix.RTM_NEWQDISC, 1, 3, tcHRoot)[:24],
			"an attribute overrun": badAttr,
		} {
			d := dump{seq: 1, ifindex: 3, out: map[string]float64{}}
			if err := d.batch(b); err == nil {
				t.Errorf("%s: no error; out %v", name, d.out)
			}
		}
	})
	t.Run("an error ends the dump", func(t *testing.T) {
		e := make([]byte, 20)
		binary.NativeEndian.PutUint32(e, 20)
		binary.NativeEndian.PutUint16(e[4:], unix.NLMSG_ERROR)
		binary.NativeEndian.PutUint32(e[8:], 1)
		binary.NativeEndian.PutUint32(e[16:], uint32(0x100000000-int(unix.EPERM)))
		d := dump{seq: 1, ifindex: 3, out: map[string]float64{}}
		if err := d.batch(e); !errors.Is(err, unix.EPERM) || !d.done {
			t.Errorf("err %v done %v", err, d.done)
		}
	})
	for h, want := range map[uint32]string{0x10000: "1:", 0x5: ":5", 0x10005: "1:5", 0xfffffff1: "ffff:fff1"} {
		if got := classID(h); got != want {
			t.Errorf("classID(%#x) = %q, want %q", h, got, want)
		}
	}
}

// The dump parser takes bytes from the kernel: whatever they are, it returns
// (an error or statistics) without panicking or reading past them.
func FuzzNetlinkDump(f *testing.F) {
	f.Add([]byte{20, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := dump{seq: 1, ifindex: 0, out: map[string]float64{}}
		d.batch(b)
		if len(d.out) > 7*maxQdiscs {
			t.Fatalf("%d statistics", len(d.out))
		}
	})
}
