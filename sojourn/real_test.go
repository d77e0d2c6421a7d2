package sojourn

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// The programs loaded into the running kernel, on a real veth shaped by htb to 10
// Mbit/s with a bfifo of 60,000 bytes under it, flooded with UDP: every packet the
// qdisc sent is in the histogram (none unstamped: htb on a veth never requeues),
// and the waits are a full bfifo's drain: the burst fills it, and the k-th packet
// out waited k frames' time, up to the whole bfifo's, 60,000 bytes at 10 Mbit/s
// (47 ms); the mean is what that makes of the packets the qdisc sent.
func TestTracerOnARealQdisc(t *testing.T) {
	a, sh := vethPair(t)
	shapeTo10Mbit(sh, a)
	enter(t, a)

	tr, err := Open([]string{"v0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	udpBurst(t, 1000)
	// The queue drains in 48 ms; the rest of a second is for the last dequeue.
	time.Sleep(time.Second)
	hs, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}

	var stats []struct {
		Kind    string `json:"kind"`
		Packets uint64 `json:"packets"`
	}
	if err := json.Unmarshal([]byte(sh("tc", "-n", a, "-s", "-j", "qdisc", "show", "dev", "v0", "root")), &stats); err != nil || len(stats) != 1 {
		t.Fatalf("tc -s -j: %v %+v", err, stats)
	}
	if len(hs) != 1 {
		t.Fatalf("want one qdisc's histogram, have %d: %+v", len(hs), hs)
	}
	for k, h := range hs {
		n := h.Counts.Total()
		t.Logf("qdisc %x:, parent %x on %s: %d packets (tc: %d sent), %d unstamped; mean %.2f ms, p50 %.2f, p99 %.2f, max %.2f (exact mean %.2f)",
			k.Handle>>16, k.Parent, tr.Devs[k.Ifindex], n, stats[0].Packets, h.Unstamped,
			h.Counts.Mean()/1e6, h.Counts.Quantile(0.5)/1e6, h.Counts.Quantile(0.99)/1e6, float64(h.MaxNs)/1e6, float64(h.SumNs)/float64(n)/1e6)
		if k.Handle != 0x10000 || tr.Devs[k.Ifindex] != "v0" {
			t.Errorf("histogram of qdisc %+v, want htb 1: on v0", k)
		}
		if n != stats[0].Packets || h.Unstamped != 0 {
			t.Errorf("%d packets in the histogram and %d unstamped; the qdisc sent %d", n, h.Unstamped, stats[0].Packets)
		}
		// htb has no bypass: every packet went through its queue.
		if h.Bypassed != 0 {
			t.Errorf("%d packets counted as past htb, which none can pass", h.Bypassed)
		}
		// 60,000 bytes of 1442-byte frames (1400 + UDP, IP and Ethernet headers) at
		// 10 Mbit/s: a full bfifo holds 41 of them, 47.3 ms.
		bound := 41 * 1442 * 8 / 10e6 * 1e9
		if m := float64(h.MaxNs); m < bound*0.9 || m > bound*1.05+2e6 {
			t.Errorf("max sojourn %.2f ms, not the full bfifo's %.2f ms", m/1e6, bound/1e6)
		}
		// The mean a bfifo draining as a line gives, from the packet count alone:
		// 41 packets filled it and the k-th out waited k frames. Those past 41
		// either left before it filled (htb's burst, the first frames dequeued
		// while the burst was still being sent: waits near 0) or came into a full
		// queue as one left (waits of all 41 frames), so the mean lies between
		// the two. A burst sent at once makes about 41 packets and half the
		// maximum; one the sender spread out (its process slowed by other work: 62
		// packets, 0.62 of the maximum, in a CI run) makes more, at the top.
		frame := 1442 * 8 / 10e6 * 1e9
		q := min(41, float64(n))
		low := frame * q * (q + 1) / 2 / float64(n)
		high := low + frame*(float64(n)-q)*q/float64(n)
		if mean := float64(h.SumNs) / float64(n); mean < 0.85*low || mean > 1.15*high {
			t.Errorf("mean sojourn %.2f ms, not within the %.2f-%.2f ms of a bfifo draining %d packets as a line", mean/1e6, low/1e6, high/1e6, n)
		}
		// The last bucket's midpoint against the exact maximum: within 1.6%.
		if top, m := h.Counts.Quantile(1), float64(h.MaxNs); top < m*0.984 || top > m*1.016 {
			t.Errorf("the top bucket's %.3f ms is not within 1.6%% of the max %.3f", top/1e6, m/1e6)
		}
		if mid, exact := h.Counts.Mean(), float64(h.SumNs)/float64(n); mid < exact*0.98 || mid > exact*1.02 {
			t.Errorf("the buckets' mean %.3f ms is not within 2%% of the exact %.3f", mid/1e6, exact/1e6)
		}
	}
}

// vethPair makes two network namespaces joined by a veth (v0 in the first, at
// 10.9.0.1, v1 in the second at 10.9.0.2), gone when t ends; sh runs a command,
// failing t if it fails.
func vethPair(t *testing.T) (a string, sh func(args ...string) string) {
	return vethPairQueues(t, 1)
}

// vethPairQueues is vethPair with n tx and rx queues on each end.
func vethPairQueues(t *testing.T, n int) (a string, sh func(args ...string) string) {
	if os.Geteuid() != 0 {
		t.Skipf("%s needs root: loads BPF programs and makes network namespaces", t.Name())
	}
	a, b := fmt.Sprintf("bbsj-%d-a", os.Getpid()), fmt.Sprintf("bbsj-%d-b", os.Getpid())
	sh = func(args ...string) string {
		t.Helper()
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
		return string(out)
	}
	for _, ns := range []string{a, b} {
		sh("ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		// No IPv6: its neighbour discovery would pass the qdisc at times of its own.
		sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	q := fmt.Sprint(n)
	sh("ip", "-n", a, "link", "add", "v0", "numtxqueues", q, "numrxqueues", q, "type", "veth", "peer", "name", "v1", "netns", b, "numtxqueues", q, "numrxqueues", q)
	sh("ip", "-n", a, "addr", "add", "10.9.0.1/24", "dev", "v0")
	sh("ip", "-n", b, "addr", "add", "10.9.0.2/24", "dev", "v1")
	sh("ip", "-n", a, "link", "set", "v0", "up")
	sh("ip", "-n", b, "link", "set", "v1", "up")
	return a, sh
}

// enter moves the test's goroutine, locked to its thread, into network namespace
// ns until t ends: the tracer keys devices by the caller's namespace.
func enter(t *testing.T, ns string) {
	t.Helper()
	runtime.LockOSThread()
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	there, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(there)
	if err := unix.Setns(there, unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Setns(home, unix.CLONE_NEWNET); err != nil {
			t.Errorf("back to the test's network namespace: %v", err)
		}
		unix.Close(home)
		runtime.UnlockOSThread()
	})
}

// A qdisc that cuts GSO skbs as it takes them: tbf segments a TCP flow's 64 KB
// skbs (veth offers TSO) that are longer than its burst, as dualpi2 and cake's
// split-gso do. Where the kernel lets the tracer follow segments (fexit on
// __skb_gso_segment), they are stamped where they are cut: every packet tbf sent
// is in the histogram, and none is unstamped. Where it does not (this machine's
// kernel refuses every fentry and fexit program with EPERM, as a locked-down one
// does), Segments says why, and every packet tbf sent is either in the histogram
// or counted unstamped: the segments, at least one for each of the skbs cut.
func TestTracerFollowsSegmentsCutInTheQdisc(t *testing.T) {
	a, sh := vethPair(t)
	sh("tc", "-n", a, "qdisc", "replace", "dev", "v0", "root", "handle", "1:", "tbf", "rate", "50mbit", "burst", "3000", "limit", "200000")
	b := strings.Replace(a, "-a", "-b", 1)
	// The sink's socket is made in the far namespace and stays there.
	enter(t, b)
	l, err := net.Listen("tcp4", "10.9.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	enter(t, a)

	tr, err := Open([]string{"v0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	t.Logf("segments followed: %v", tr.Segments == nil)
	if tr.Segments != nil {
		t.Logf("not followed: %v", tr.Segments)
		if !strings.Contains(tr.Segments.Error(), "__skb_gso_segment") {
			t.Errorf("Segments does not say which function it could not trace: %v", tr.Segments)
		}
	}
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := <-got; n != size {
		t.Fatalf("the sink got %d bytes of %d", n, size)
	}
	// The last segments' dequeue is done when the sink has them; the FIN's too
	// within a second.
	time.Sleep(time.Second)
	// A late packet (an ARP probe, the FIN's ACK's answer) may pass while the
	// histograms are read: tc's count is taken before and after.
	sent := func() uint64 {
		var stats []struct {
			Packets uint64 `json:"packets"`
		}
		if err := json.Unmarshal([]byte(sh("tc", "-n", a, "-s", "-j", "qdisc", "show", "dev", "v0", "root")), &stats); err != nil || len(stats) != 1 {
			t.Fatalf("tc -s -j: %v %+v", err, stats)
		}
		return stats[0].Packets
	}
	before := sent()
	hs, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	after := sent()
	if len(hs) != 1 {
		t.Fatalf("want one qdisc's histogram, have %d: %+v", len(hs), hs)
	}
	for k, h := range hs {
		n := h.Counts.Total()
		t.Logf("tbf %x: on %s: %d packets (tc: %d-%d sent), %d unstamped, %d past a bulk dequeue's %d; p50 %.2f ms, max %.2f", k.Handle>>16, tr.Devs[k.Ifindex], n, before, after, h.Unstamped, h.BeyondBulk, MaxBulk,
			h.Counts.Quantile(0.5)/1e6, float64(h.MaxNs)/1e6)
		// 4 MiB in 1448-byte segments is 2897 of them: tbf cut most. On a loaded
		// machine some were seen missing from both counts (26 of 2,904 beside a
		// QEMU guest, 80 of 2,904 under go test -race with other packages), with
		// no recursion misses on the programs; the cause is not known, and 10% is
		// allowed for it. None may be counted twice.
		if all := n + h.Unstamped + h.BeyondBulk; float64(all) < 0.9*float64(before) || all > after || before < size/1448 {
			t.Errorf("%d packets in the histogram, %d unstamped and %d past the bulk dequeues followed; tbf sent %d to %d (of at least %d segments)", n, h.Unstamped, h.BeyondBulk, before, after, size/1448)
		}
		// tbf has no bypass: the segments it cut and gave up unstamped went
		// through it, and must not be taken at the driver for packets that
		// passed it.
		if h.Bypassed != 0 {
			t.Errorf("%d packets counted as past tbf, which none can pass", h.Bypassed)
		}
		if tr.Segments == nil && h.Unstamped != 0 {
			t.Errorf("segments followed, yet %d of %d packets unstamped", h.Unstamped, n+h.Unstamped)
		}
		if tr.Segments != nil && h.Unstamped < size/1448/2 {
			t.Errorf("segments not followed, yet only %d of %d packets unstamped: did tbf not cut the flow's GSO skbs?", h.Unstamped, n+h.Unstamped)
		}
	}
}

// The echo packets of a ping have a histogram of their own beside every packet's:
// one echo request sent behind a UDP burst in a bfifo waits its drain, two sent
// once it has drained wait nothing; the UDP packets are not in it.
//
// The burst fits the bfifo (36 datagrams of 1442 bytes on the wire, 51912 of its
// 60000), so that no packet of the test is dropped: with a burst of 200 filling it,
// one CI run counted 2 echo requests, not 3, and 41 of the burst, not 44 (every
// packet 43). The bfifo's own counts are in the log to tell a qdisc that did not
// send a packet from a tracer that did not see it.
func TestTracerCountsEchoPacketsApart(t *testing.T) {
	const burst = 36
	a, sh := vethPair(t)
	shapeTo10Mbit(sh, a)
	// The neighbour entry first, so that the burst is not held for ARP.
	sh("ip", "netns", "exec", a, "ping", "-c", "1", "-W", "2", "10.9.0.2")
	enter(t, a)
	sent0 := sentBy(t, sh, a, "bfifo")
	tr, err := Open([]string{"v0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	udpBurst(t, burst)
	// The request behind the burst goes from this process, at once: a ping
	// started after it (a fork and exec, microseconds to tens of ms on a busy
	// machine) found the burst drained to 6.87 ms of its 47 in one CI run.
	echoRequest(t)
	time.Sleep(200 * time.Millisecond)
	sh("ip", "netns", "exec", a, "ping", "-c", "2", "-i", "0.2", "-W", "2", "10.9.0.2")
	hs, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	sent := sentBy(t, sh, a, "bfifo")
	var all, echo *Hist
	for k, h := range hs {
		switch k.Class {
		case All:
			all = &h
		case Echo:
			echo = &h
		}
	}
	if all == nil || echo == nil {
		t.Fatalf("want both histograms of htb 1:, have %+v", hs)
	}
	n := echo.Counts.Total()
	t.Logf("every packet: %d (unstamped %d), max %.2f ms; echo requests: %d, max %.2f ms, min bucket %.3f ms; the bfifo sent %d and dropped %d meanwhile",
		all.Counts.Total(), all.Unstamped, float64(all.MaxNs)/1e6, n, float64(echo.MaxNs)/1e6, echo.Counts.Quantile(0)/1e6,
		sent.packets-sent0.packets, sent.drops-sent0.drops)
	if n != 3 {
		t.Errorf("%d echo packets, want the 3 requests (the replies leave by the other namespace)", n)
	}
	if d := sent.drops - sent0.drops; d != 0 {
		t.Errorf("the bfifo dropped %d packets: the burst should fit", d)
	}
	if got, want := all.Counts.Total(), sent.packets-sent0.packets; got != want {
		t.Errorf("every packet's histogram has %d, the bfifo sent %d", got, want)
	}
	if all.Counts.Total() < burst+n {
		t.Errorf("every packet's histogram has %d: not the burst's %d", all.Counts.Total(), burst)
	}
	// The first request met the burst in the bfifo (up to 41 ms of it); the
	// others an empty queue.
	if m := float64(echo.MaxNs) / 1e6; m < 20 || m > 60 {
		t.Errorf("the request sent behind the burst waited %.2f ms, not the bfifo's drain", m)
	}
	if q := echo.Counts.Quantile(0.5) / 1e6; q > 1 {
		t.Errorf("the requests sent into an empty queue waited %.2f ms (median)", q)
	}
}

type qdiscCounts struct{ packets, drops uint64 }

// sentBy is what the qdiscs of one kind on v0 have sent and dropped, by tc -s.
func sentBy(t *testing.T, sh func(args ...string) string, ns, kind string) (c qdiscCounts) {
	t.Helper()
	var stats []struct {
		Kind    string `json:"kind"`
		Packets uint64 `json:"packets"`
		Drops   uint64 `json:"drops"`
	}
	if err := json.Unmarshal([]byte(sh("tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", "v0")), &stats); err != nil {
		t.Fatalf("tc -s -j: %v", err)
	}
	for _, s := range stats {
		if s.Kind == kind {
			c.packets += s.Packets
			c.drops += s.Drops
		}
	}
	return c
}

// A qdisc that finds a packet's queue empty may hand it straight to the driver
// (TCQ_F_CAN_BYPASS), past both qdisc tracepoints: an mq's pfifo children on an
// unshaped veth, whose driver never pushes back, pass every packet so. Each is
// counted at the driver, in its tx queue's child, with a wait of 0: every packet
// the children sent is in their histograms, and the ping's requests are in the
// echo histogram of the one child its flow hashed to, none of another's.
func TestTracerCountsPacketsThatPassAnEmptyQdisc(t *testing.T) {
	a, sh := vethPairQueues(t, 4)
	sh("tc", "-n", a, "qdisc", "replace", "dev", "v0", "root", "handle", "1:", "mq")
	for i := 1; i <= 4; i++ {
		sh("tc", "-n", a, "qdisc", "replace", "dev", "v0", "parent", fmt.Sprintf("1:%d", i), "handle", fmt.Sprintf("%d0:", i), "pfifo", "limit", "1000")
	}
	sh("ip", "netns", "exec", a, "ping", "-c", "1", "-W", "2", "10.9.0.2")
	enter(t, a)
	tr, err := Open([]string{"v0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sent := func() uint64 { return sentBy(t, sh, a, "pfifo").packets }
	base := sent()
	for range 4 {
		udpBurst(t, 50)
		time.Sleep(20 * time.Millisecond)
	}
	sh("ip", "netns", "exec", a, "ping", "-c", "3", "-i", "0.05", "-W", "2", "10.9.0.2")
	before := sent() - base
	hs, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	after := sent() - base
	var n, bypassed, echo uint64
	echoChildren := map[uint32]uint64{}
	for k, h := range hs {
		t.Logf("qdisc %x: parent %x class %d: %d packets, %d passed it empty, %d unstamped, max %.3f ms", k.Handle>>16, k.Parent, k.Class, h.Counts.Total(), h.Bypassed, h.Unstamped, float64(h.MaxNs)/1e6)
		if k.Handle == 0x10000 {
			t.Errorf("a histogram of the mq root, not of its children: %+v", k)
		}
		switch k.Class {
		case All:
			n += h.Counts.Total()
			bypassed += h.Bypassed
		case Echo:
			echo += h.Counts.Total()
			echoChildren[k.Handle] += h.Counts.Total()
			if q := h.Counts.Quantile(1); q > 1e3 {
				t.Errorf("an echo request that passed an empty pfifo waited %.3f ms", q/1e6)
			}
		}
	}
	// Each counted once. A burst's datagram may be lost before the qdisc (the
	// socket's errors are not looked at), so of the 200 most, not all.
	if n < before || n > after || n < 153 {
		t.Errorf("%d packets in the children's histograms; the children sent %d to %d (most of the bursts' 200, and 3 requests)", n, before, after)
	}
	if bypassed*10 < n*9 {
		t.Errorf("%d of %d packets counted as past their empty pfifo: an unshaped veth queues almost none", bypassed, n)
	}
	if echo != 3 || len(echoChildren) != 1 {
		t.Errorf("%d echo requests in %d children's echo histograms (%v), want the 3 in the one child the ping's flow hashed to", echo, len(echoChildren), echoChildren)
	}
	// Each connection is counted in the tx queue it went through: the ping's
	// (ICMP, its identifier as both ports) in the child whose echo histogram
	// has its requests, each burst's socket (a port of its own) in one queue,
	// and the children's packets are the connections' packets.
	conns, err := tr.Conns()
	if err != nil {
		t.Fatal(err)
	}
	perChild := map[uint32]uint64{}
	queuesOf := map[netip.AddrPort]map[uint16]bool{}
	var pings uint64
	for k, c := range conns {
		t.Logf("tx-%d (qdisc %x: parent %x) proto %d %s > %s: %d packets, %d bytes", k.TxQueue, k.Handle>>16, k.Parent, k.Proto, k.Src, k.Dst, c.Packets, c.Bytes)
		if want := 0x10000 | (uint32(k.TxQueue) + 1); k.Parent != want {
			t.Errorf("tx-%d counted under qdisc parent %x, not mq's child %x", k.TxQueue, k.Parent, want)
		}
		perChild[k.Handle] += c.Packets
		switch k.Proto {
		case 1:
			if k.Src.Port() != k.Dst.Port() || k.Dst.Addr() != netip.MustParseAddr("10.9.0.2") {
				t.Errorf("an echo request counted as %s > %s", k.Src, k.Dst)
			}
			if echoChildren[k.Handle] > 0 {
				pings += c.Packets
			}
		case 17:
			if queuesOf[k.Src] == nil {
				queuesOf[k.Src] = map[uint16]bool{}
			}
			queuesOf[k.Src][k.TxQueue] = true
		}
	}
	if pings < 3 {
		t.Errorf("%d echo requests counted in the connection whose child has the echo histogram, want the 3", pings)
	}
	for src, qs := range queuesOf {
		if len(qs) != 1 {
			t.Errorf("socket %s counted in %d tx queues: %v", src, len(qs), qs)
		}
	}
	if len(queuesOf) != 4 {
		t.Errorf("%d UDP sockets counted, want the 4 bursts'", len(queuesOf))
	}
	for k, h := range hs {
		if k.Class == All && perChild[k.Handle] < h.Counts.Total() {
			t.Errorf("qdisc %x: has %d packets in its histogram, its connections %d", k.Handle>>16, h.Counts.Total(), perChild[k.Handle])
		}
	}
}

// shapeTo10Mbit puts htb at 10 Mbit/s with a 60,000-byte bfifo under it on v0 of
// namespace a.
func shapeTo10Mbit(sh func(args ...string) string, a string) {
	sh("tc", "-n", a, "qdisc", "replace", "dev", "v0", "root", "handle", "1:", "htb", "default", "1")
	sh("tc", "-n", a, "class", "add", "dev", "v0", "parent", "1:", "classid", "1:1", "htb", "rate", "10mbit")
	sh("tc", "-n", a, "qdisc", "add", "dev", "v0", "parent", "1:1", "handle", "10:", "bfifo", "limit", "60000")
}

// echoRequest sends one ICMP echo request to the veth's far end from a raw
// socket of the namespace the test is in.
func echoRequest(t *testing.T) {
	t.Helper()
	c, err := net.DialIP("ip4:icmp", nil, &net.IPAddr{IP: net.IPv4(10, 9, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 0xbb, Seq: 1, Data: []byte("bloatbench")}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// udpBurst sends n datagrams of 1400 bytes to the far end (10.9.0.2) at once, from
// an unconnected socket: the far end answers each with a port unreachable, which a
// connected socket would return as the next write's ECONNREFUSED, that datagram
// unsent (2 of a burst of 36 went so).
func udpBurst(t *testing.T, n int) {
	t.Helper()
	c, err := net.ListenUDP("udp4", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	to := &net.UDPAddr{IP: net.IPv4(10, 9, 0, 2), Port: 9}
	payload := make([]byte, 1400)
	for range n {
		c.WriteToUDP(payload, to) // the qdisc's drops are not the socket's errors
	}
}
