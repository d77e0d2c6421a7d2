package sojourn

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The programs loaded into the running kernel, on a real veth shaped by htb to 10
// Mbit/s with a bfifo of 60,000 bytes under it, flooded with UDP: every packet the
// qdisc sent is in the histogram (none unstamped: htb on a veth never requeues),
// and the waits are a full bfifo's drain: the burst fills it at once, and the k-th
// packet out waited k frames' time, up to the whole bfifo's, 60,000 bytes at 10
// Mbit/s (47 ms), so that the mean is half the maximum.
func TestTracerOnARealQdisc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("%s needs root: loads BPF programs and makes network namespaces", t.Name())
	}
	a, b := fmt.Sprintf("bbsj-%d-a", os.Getpid()), fmt.Sprintf("bbsj-%d-b", os.Getpid())
	sh := func(args ...string) string {
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
	sh("ip", "-n", a, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", b)
	sh("ip", "-n", a, "addr", "add", "10.9.0.1/24", "dev", "v0")
	sh("ip", "-n", b, "addr", "add", "10.9.0.2/24", "dev", "v1")
	sh("ip", "-n", a, "link", "set", "v0", "up")
	sh("ip", "-n", b, "link", "set", "v1", "up")
	sh("tc", "-n", a, "qdisc", "replace", "dev", "v0", "root", "handle", "1:", "htb", "default", "1")
	sh("tc", "-n", a, "class", "add", "dev", "v0", "parent", "1:", "classid", "1:1", "htb", "rate", "10mbit")
	sh("tc", "-n", a, "qdisc", "add", "dev", "v0", "parent", "1:1", "handle", "10:", "bfifo", "limit", "60000")

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(home)
	there, err := unix.Open("/run/netns/"+a, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(there)
	if err := unix.Setns(there, unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	defer unix.Setns(home, unix.CLONE_NEWNET)

	tr, err := Open([]string{"v0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 9, 0, 2), Port: 9})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1400)
	for range 1000 {
		c.Write(payload) // the bfifo's drops are not the socket's errors
	}
	c.Close()
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
		// 60,000 bytes of 1442-byte frames (1400 + UDP, IP and Ethernet headers) at
		// 10 Mbit/s: a full bfifo holds 41 of them, 47.3 ms.
		bound := 41 * 1442 * 8 / 10e6 * 1e9
		if m := float64(h.MaxNs); m < bound*0.9 || m > bound*1.05+2e6 {
			t.Errorf("max sojourn %.2f ms, not the full bfifo's %.2f ms", m/1e6, bound/1e6)
		}
		if mean, m := float64(h.SumNs)/float64(n), float64(h.MaxNs); mean < 0.4*m || mean > 0.6*m {
			t.Errorf("mean sojourn %.2f ms is not about half the max %.2f: the bfifo did not drain as a line", mean/1e6, m/1e6)
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
