package qdisc

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The shell's glob lists tx-0, tx-1, tx-10, tx-11, tx-2 ...: each queue's limits go
// back to the queue of that name, whatever its place in the list.
func TestBQLRestoreOpsByQueueName(t *testing.T) {
	st := &State{Host: "lab", Dev: "eth0", Qdiscs: []TCQdisc{{Kind: "noqueue", Handle: "0:", Root: true}}}
	for _, q := range []int{0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9} {
		st.BQL = append(st.BQL, BQLState{Queue: fmt.Sprintf("tx-%d", q), LimitMax: fmt.Sprint(100000 + q), LimitMin: fmt.Sprint(q)})
	}
	st.TxQueues = len(st.BQL)
	ops, err := st.RestoreOps()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range ops {
		if o.Argv[0] == "tee" {
			got[o.Argv[1]] = o.Stdin
		}
	}
	for q := 0; q < 12; q++ {
		for file, want := range map[string]string{"limit_max": fmt.Sprint(100000 + q), "limit_min": fmt.Sprint(q)} {
			path := fmt.Sprintf("/sys/class/net/eth0/queues/tx-%d/byte_queue_limits/%s", q, file)
			if got[path] != want {
				t.Errorf("%s gets %q, want %q", path, got[path], want)
			}
		}
	}
}

// ethtool -k as this machine's ethtool 6.1 prints it for a veth, with a sub-feature the
// kernel holds off against the request.
const ethtoolK = `Features for test0:
rx-checksumming: on
tx-checksumming: on
	tx-checksum-ipv4: off [fixed]
	tx-checksum-ip-generic: on
scatter-gather: on
	tx-scatter-gather: on
	tx-scatter-gather-fraglist: on
tcp-segmentation-offload: on
	tx-tcp-segmentation: on
	tx-tcp-ecn-segmentation: off [requested on]
	tx-tcp-mangleid-segmentation: on
	tx-tcp6-segmentation: off
generic-segmentation-offload: on
generic-receive-offload: off
large-receive-offload: off [fixed]
highdma: on
`

// The snapshot keeps ethtool -l whole: the channels are its current settings, not
// the pre-set maximums above them; a device whose driver prints no current
// settings has none.
func TestParseChannels(t *testing.T) {
	for _, c := range []struct {
		name, out, want string
	}{
		{"virtio", "Channel parameters for test0:\nPre-set maximums:\nRX:\t\tn/a\nTX:\t\tn/a\nOther:\t\tn/a\nCombined:\t4\n" +
			"Current hardware settings:\nRX:\t\tn/a\nTX:\t\tn/a\nOther:\t\tn/a\nCombined:\t1\n", "map[combined:1]"},
		{"veth", "Channel parameters for v0:\nPre-set maximums:\nRX:\t\t4\nTX:\t\t4\nOther:\t\tn/a\nCombined:\tn/a\n" +
			"Current hardware settings:\nRX:\t\t2\nTX:\t\t3\nOther:\t\tn/a\nCombined:\tn/a\n", "map[rx:2 tx:3]"},
		{"maximums only", "Channel parameters for x:\nPre-set maximums:\nCombined:\t4\n", "map[]"},
		{"no ethtool", "", "map[]"},
	} {
		st, err := parseState([]byte("[]\n@@channels\n" + c.out))
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(st.Channels); got != c.want {
			t.Errorf("%s: channels %s, want %s", c.name, got, c.want)
		}
	}
}

func TestParseFeatures(t *testing.T) {
	st, err := parseState([]byte("[]\n@@offloads\n" + ethtoolK))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"rx-checksumming": "on", "tx-checksum-ip-generic": "on", "tx-scatter-gather": "on", "tx-scatter-gather-fraglist": "on",
		"tx-tcp-segmentation": "on", "tx-tcp-ecn-segmentation": "off [requested on]", "tx-tcp-mangleid-segmentation": "on",
		"tx-tcp6-segmentation": "off", "generic-segmentation-offload": "on", "generic-receive-offload": "off", "highdma": "on",
	}
	if fmt.Sprint(st.Features) != fmt.Sprint(want) {
		t.Errorf("features\n%v\nwant\n%v", st.Features, want)
	}
	if fmt.Sprint(st.Offloads) != "map[gro:off gso:on tso:on]" {
		t.Errorf("offloads %v", st.Offloads)
	}
	// From a device that had tso switched off: only what differs is set, each
	// sub-feature by its own name, as it was requested.
	now, _ := parseState([]byte("[]\n@@offloads\n" + strings.NewReplacer(
		"tx-tcp-segmentation: on", "tx-tcp-segmentation: off",
		"tx-tcp-ecn-segmentation: off [requested on]", "tx-tcp-ecn-segmentation: off",
		"tx-tcp-mangleid-segmentation: on", "tx-tcp-mangleid-segmentation: off",
		"generic-receive-offload: off", "generic-receive-offload: on").Replace(ethtoolK)))
	st.Dev = "test0"
	ops, err := st.restoreOps(now)
	if err != nil {
		t.Fatal(err)
	}
	got := Script(ops)
	if !strings.Contains(got, "ethtool -K test0 generic-receive-offload off tx-tcp-ecn-segmentation on tx-tcp-mangleid-segmentation on tx-tcp-segmentation on\n") {
		t.Errorf("ops:\n%s", got)
	}
}

func TestParseHTBClassesDetails(t *testing.T) {
	out := "[]\n@@classes\n" +
		"class htb 1:101 parent 1:10 prio 0 quantum 200000 rate 30Mbit ceil 30Mbit linklayer ethernet burst 1593b/1 mpu 0b cburst 1593b/1 mpu 0b level 0 \n" +
		"class htb 1:1 root rate 100Mbit ceil 100Mbit linklayer ethernet burst 1600b/1 mpu 0b cburst 1600b/1 mpu 0b level 7 \n" +
		"class htb 1:100 parent 1:10 leaf 100: prio 0 quantum 200000 rate 30Mbit overhead 4 ceil 30Mbit linklayer ethernet burst 1593b/1 mpu 64b cburst 1593b/1 mpu 64b level 0 \n" +
		"class mq :1 root \n"
	st, err := parseState([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []Class{
		{Kind: "htb", ClassID: "1:1", Parent: "root", Rate: "100Mbit", Ceil: "100Mbit", Burst: "1600b", Cburst: "1600b"},
		{Kind: "htb", ClassID: "1:100", Parent: "1:10", Rate: "30Mbit", Ceil: "30Mbit", Burst: "1593b", Cburst: "1593b", Prio: "0", Quantum: "200000", MPU: "64", Overhead: "4"},
		{Kind: "htb", ClassID: "1:101", Parent: "1:10", Rate: "30Mbit", Ceil: "30Mbit", Burst: "1593b", Cburst: "1593b", Prio: "0", Quantum: "200000"},
	}
	if !reflect.DeepEqual(st.Classes, want) {
		t.Errorf("classes\n%+v\nwant\n%+v", st.Classes, want)
	}
}

// Bursts tc set from a byte count come back as a byte count that tc turns into the
// same ticks, on this machine's clock (15.625 ticks a microsecond) and a coarse one.
func TestBurstBytesRoundTrip(t *testing.T) {
	for _, tick := range []float64{15.625, 1} {
		for _, rate := range []string{"30Mbit", "100Mbit", "5Mbit", "999Kbit", "10Gbit", "64Kbit"} {
			r, _ := rateBytes(rate)
			for _, size := range []int64{1514, 1593, 1600, 20480, 123457, 1 << 20} {
				ticks := uint32(int64(float64(int64(1e6*(float64(size)/float64(r)))) * tick))
				b, ok := burstBytes(ticks, rate, tick)
				if !ok {
					t.Errorf("%s %d bytes (%d ticks at %v): none found", rate, size, ticks, tick)
					continue
				}
				if got := uint32(int64(float64(int64(1e6*(float64(b)/float64(r)))) * tick)); got != ticks {
					t.Errorf("%s %d bytes: %d bytes give %d ticks, not %d", rate, size, b, got, ticks)
				}
			}
		}
	}
	if tickInUsec("000003e8 00000040 000f4240 3b9aca00\n") != 15.625 {
		t.Error("psched of this machine")
	}
}

// A filter listing that failed is not taken for no filters.
func TestUnlistableFiltersRefused(t *testing.T) {
	st, err := parseState([]byte(`[{"kind":"htb","handle":"1:","root":true,"options":{}}]` + "\n@@filters\n1: ?\n"))
	if err != nil {
		t.Fatal(err)
	}
	st.Host, st.Dev = "lab", "eth1"
	if err := st.CheckRestorable(); err == nil || !strings.Contains(err.Error(), "could not list") || !strings.Contains(err.Error(), "host lab: eth1") {
		t.Errorf("error %v", err)
	}
}

// A path device given a netem for the L4S packets is checked for what the kernel
// shows: prio at the root, a netem under each band, and the filter that sends
// packets to the L4S band. Restoring deletes the root, and the filters with it.
func TestVerifyL4SPath(t *testing.T) {
	s := PathSetup("path", "", "", []string{"delay", "25ms"}, []string{"delay", "5ms"})
	ops := Script(s.Commands("eth1", 1))
	want := `tc qdisc replace dev eth1 root handle 1: prio bands 2 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1
tc qdisc replace dev eth1 parent 1:1 handle 10: netem delay 5ms
tc qdisc replace dev eth1 parent 1:2 handle 20: netem delay 25ms
tc filter replace dev eth1 parent 1: protocol ip prio 1 u32 match ip tos 0x01 0x01 flowid 1:1
tc filter replace dev eth1 parent 1: protocol ipv6 prio 2 u32 match ip6 priority 0x01 0x01 flowid 1:1
`
	if ops != want {
		t.Errorf("commands:\n%s\nwant\n%s", ops, want)
	}
	applied := func(filters ...Filter) *State {
		return &State{Host: "h", Dev: "eth1", TxQueues: 1, Filters: filters, Qdiscs: []TCQdisc{
			{Kind: "prio", Handle: "1:", Root: true},
			{Kind: "netem", Handle: "10:", Parent: "1:1"},
			{Kind: "netem", Handle: "20:", Parent: "1:2"},
		}}
	}
	// As iproute2 prints a u32 filter: a line per hash table and key, then the match.
	filter := Filter{Parent: "1:", Spec: "filter protocol ip pref 1 u32 chain 0 fh 800::800 order 2048 key ht 800 bkt 0 flowid 1:1 not_in_hw \n  match 00010000/00010000 at 0"}
	if err := s.verify(applied(filter)); err != nil {
		t.Errorf("as applied: %v", err)
	}
	if err := s.verify(applied()); err == nil || !strings.Contains(err.Error(), "no filter sends packets to prio band 1:1") {
		t.Errorf("without its filter: %v", err)
	}
	st := applied(filter)
	st.Qdiscs = st.Qdiscs[:2]
	if err := s.verify(st); err == nil || !strings.Contains(err.Error(), "no netem under prio band 1:2") {
		t.Errorf("without the classic band's netem: %v", err)
	}
	// Back to the kernel's default: the root goes, with its filters.
	before := &State{Host: "h", Dev: "eth1", TxQueues: 1, Qdiscs: []TCQdisc{{Kind: "noqueue", Handle: "0:", Root: true}}}
	restore, err := before.restoreOps(applied(filter))
	if err != nil || len(restore) != 1 || restore[0].Shell() != "tc qdisc del dev eth1 root" {
		t.Errorf("restore: %v %+v", err, restore)
	}
}

// An XPS mask is as wide as the host's possible CPUs: the kernel refuses a bit
// past them (a write of ffffffff on a 2-CPU machine fails with EIO... as
// -EOVERFLOW from bitmap_parse), and prints its groups padded.
func TestCPUMasks(t *testing.T) {
	for _, c := range []struct {
		cpus int
		mask string
	}{{0, "0"}, {1, "1"}, {2, "3"}, {4, "f"}, {32, "ffffffff"}, {33, "1,ffffffff"}, {70, "3f,ffffffff,ffffffff"}} {
		if got := CPUMask(c.cpus); got != c.mask {
			t.Errorf("CPUMask(%d) = %q, want %q", c.cpus, got, c.mask)
		}
	}
	for _, c := range []struct {
		list string
		n    int
	}{{"0-1\n", 2}, {"0", 1}, {"0,2-5", 6}, {"", 0}, {"x", 0}} {
		if got := possibleCPUs(c.list); got != c.n {
			t.Errorf("possibleCPUs(%q) = %d, want %d", c.list, got, c.n)
		}
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{{"3", "00000003", true}, {"00000000,00000003", "3", true}, {"0", "00000000,00000000", true}, {"1,ffffffff", "00000001,ffffffff", true}, {"1", "3", false}, {"0", "1", false}} {
		if got := sameMask(c.a, c.b); got != c.same {
			t.Errorf("sameMask(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

// Steering writes every CPU to the target queue first and 0 to the others; a
// queue the device lacks, no XPS or no CPU count refuse it before any write; the
// read-back must show it; restore writes back only the masks that changed.
func TestSteerOpsCheckVerifyRestore(t *testing.T) {
	s := &Setup{Name: "steered", MQ: &Qdisc{Kind: "pfifo"}, Steer: &Steer{TxQueue: 2}}
	var got []string
	for _, o := range s.CommandsOn("eth0", 4, 2) {
		if o.Argv[0] == "tee" {
			got = append(got, o.Shell())
		}
	}
	want := []string{
		"echo 3 > /sys/class/net/eth0/queues/tx-2/xps_cpus",
		"echo 0 > /sys/class/net/eth0/queues/tx-0/xps_cpus",
		"echo 0 > /sys/class/net/eth0/queues/tx-1/xps_cpus",
		"echo 0 > /sys/class/net/eth0/queues/tx-3/xps_cpus",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}
	found := &State{Host: "lab", Dev: "eth0", TxQueues: 4, CPUs: 2, XPS: []XPSState{{"tx-0", "00000001"}, {"tx-1", "00000002"}, {"tx-2", "00000001"}, {"tx-3", "00000002"}}}
	for _, c := range []struct {
		st     *State
		queues int
		want   string
	}{
		{found, 2, "tx_queue 2, but the device has 2 tx queues"},
		{&State{TxQueues: 4, CPUs: 2}, 4, "no XPS masks"},
		{&State{TxQueues: 4, XPS: found.XPS}, 4, "cpu/possible"},
		{found, 4, ""},
	} {
		err := s.Steer.check(c.st, c.queues)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("check with %d queues, %+v: %v, want %q", c.queues, c.st, err, c.want)
		}
	}
	steered := &State{Host: "lab", Dev: "eth0", TxQueues: 4, CPUs: 2, XPS: []XPSState{{"tx-0", "00000000"}, {"tx-1", "00000000"}, {"tx-2", "00000003"}, {"tx-3", "00000000"}}}
	if err := s.verifyDevice(steered); err != nil {
		t.Errorf("verify the steered device: %v", err)
	}
	if err := s.verifyDevice(found); err == nil || !strings.Contains(err.Error(), "tx-0 xps_cpus is 00000001, not 0") {
		t.Errorf("verify the unsteered device: %v", err)
	}
	if d := found.Diff(steered); !strings.Contains(d, "XPS was") {
		t.Errorf("diff %q says nothing of XPS", d)
	}
	// A journal from before XPS was recorded compares none.
	if d := (&State{Host: "lab", Dev: "eth0"}).Diff(&State{Host: "lab", Dev: "eth0", XPS: steered.XPS}); d != "" {
		t.Errorf("diff against a state without XPS: %q", d)
	}
	var restore []string
	for _, o := range found.xpsOps(steered) {
		restore = append(restore, o.Shell())
	}
	if want := []string{
		"echo 00000001 > /sys/class/net/eth0/queues/tx-0/xps_cpus",
		"echo 00000002 > /sys/class/net/eth0/queues/tx-1/xps_cpus",
		"echo 00000001 > /sys/class/net/eth0/queues/tx-2/xps_cpus",
		"echo 00000002 > /sys/class/net/eth0/queues/tx-3/xps_cpus",
	}; !reflect.DeepEqual(restore, want) {
		t.Errorf("restore writes %q, want %q", restore, want)
	}
	if ops := found.xpsOps(found); len(ops) != 0 {
		t.Errorf("restore of an unsteered device writes %v", ops)
	}
	bad := *found
	bad.XPS = []XPSState{{"tx-0", "3; reboot"}}
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "not a CPU mask") {
		t.Errorf("a journal's mask %q: %v", bad.XPS[0].CPUs, err)
	}
}
