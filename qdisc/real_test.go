package qdisc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// localRunner runs commands on this machine, in network namespace ns when it is
// set: the same shell lines a remote host gets over SSH, run by a real sh against
// the real kernel.
type localRunner struct{ ns, dir string }

func (r localRunner) Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	argv := []string{"sh", "-c", cmd}
	if r.ns != "" {
		argv = append([]string{"ip", "netns", "exec", r.ns}, argv...)
	}
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Dir, c.Stdin = r.dir, stdin
	var errb bytes.Buffer
	c.Stderr = &errb
	out, err := c.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %s", cmd, strings.TrimSpace(errb.String()))
	}
	return out, nil
}

// scratch makes a namespace with a 4-queue veth pair named dev and its peer.
func scratch(t *testing.T, dev string) localRunner {
	t.Helper()
	return scratchDev(t, "veth", dev, 4)
}

// scratchDev makes a namespace with a device of the kind (veth, with a peer, or ifb)
// and queues tx and rx queues. ifb is there for BQL: this kernel's veth has no
// byte_queue_limits, ifb has them for every tx queue.
func scratchDev(t *testing.T, kind, dev string, queues int) localRunner {
	t.Helper()
	// Skipped, not failed, without root, so that a user's `go test ./...` runs the
	// rest of the package (as e2eutil.NeedRoot does; as root nothing skips).
	if os.Geteuid() != 0 {
		t.Skipf("%s needs root: changes qdiscs in a network namespace", t.Name())
	}
	ns := fmt.Sprintf("bbqt-%d-%d", os.Getpid(), len(t.Name()))
	sh := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	sh("ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	q := fmt.Sprint(queues)
	link := []string{"ip", "-n", ns, "link", "add", "name", dev, "numtxqueues", q, "numrxqueues", q, "type", kind}
	if kind == "veth" {
		link = append(link, "peer", "name", "peer0")
	}
	sh(link...)
	sh("ip", "-n", ns, "link", "set", dev, "up")
	if kind == "veth" {
		sh("ip", "-n", ns, "link", "set", "peer0", "up")
	}
	return localRunner{ns: ns, dir: t.TempDir()}
}

// sh runs shell lines in the scratch namespace, failing the test on the first error.
func (r localRunner) sh(t *testing.T, lines ...string) string {
	t.Helper()
	var out []byte
	for _, l := range lines {
		b, err := r.Output(context.Background(), l, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return string(out)
}

// sortedLines sorts a command's output by line: the kernel lists classes in hash order.
func sortedLines(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}

func mustSetup(t *testing.T, name string) *Setup {
	t.Helper()
	s, err := Resolve(name, testInventory(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func applyAndRestore(t *testing.T, r localRunner, dev string, s *Setup) {
	t.Helper()
	ctx := context.Background()
	before, err := Snapshot(ctx, r, "lab", dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := before.CheckRestorable(); err != nil {
		t.Fatal(err)
	}
	done, now, err := Apply(ctx, r, s, before)
	if err != nil {
		t.Fatalf("apply %s: %v (ran %v)", s.Name, err, done)
	}
	if now.root().Kind != s.Kinds()[0] || len(done) == 0 {
		t.Errorf("%s read back %+v", s.Name, now.Qdiscs)
	}
	if err := Restore(ctx, r, before); err != nil {
		t.Fatal(err)
	}
	after, _ := Snapshot(ctx, r, "lab", dev)
	if d := before.Diff(after); d != "" {
		t.Errorf("%s: not restored: %s", s.Name, d)
	}
}

func TestApplyRestoreFromKernelDefault(t *testing.T) {
	r := scratch(t, "test0")
	for _, name := range []string{"mq+pfifo", "htb+bfifo", "pfifo_fast"} {
		applyAndRestore(t, r, "test0", mustSetup(t, name))
	}
}

// The local lab's --rate leaves htb with a class and a bfifo: a hand-made tree that
// must come back exactly, class parameters and all.
func TestApplyRestoreOverHTB(t *testing.T) {
	r := scratch(t, "test0")
	ctx := context.Background()
	for _, cmd := range []string{
		"tc qdisc replace dev test0 root handle 1: htb default 1",
		"tc class add dev test0 parent 1: classid 1:1 htb rate 100mbit ceil 100mbit",
		"tc qdisc add dev test0 parent 1:1 handle 10: bfifo limit 300000",
	} {
		if _, err := r.Output(ctx, cmd, nil); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := Snapshot(ctx, r, "lab", "test0")
	if len(before.Classes) != 1 || before.Classes[0].Rate != "100Mbit" || before.root().Kind != "htb" {
		t.Fatalf("snapshot %+v", before)
	}
	for _, name := range []string{"mq+pfifo", "htb+bfifo"} {
		applyAndRestore(t, r, "test0", mustSetup(t, name))
	}
}

func TestUnknownKindLeavesDeviceUntouched(t *testing.T) {
	r := scratch(t, "test0")
	ctx := context.Background()
	before, _ := Snapshot(ctx, r, "server", "test0")
	// A kind no kernel has: the failure is the kernel's (or tc's) and names the fix.
	s := &Setup{Name: "bogus", Root: &Qdisc{Kind: "nosuchqdisc"}}
	_, _, err := Apply(ctx, r, s, before)
	if err == nil || !strings.Contains(err.Error(), "host server") || !strings.Contains(err.Error(), "nosuchqdisc") {
		t.Fatalf("error %v", err)
	}
	if err := Restore(ctx, r, before); err != nil {
		t.Fatal(err)
	}
	now, _ := Snapshot(ctx, r, "server", "test0")
	if d := before.Diff(now); d != "" {
		t.Error(d)
	}
}

// An mq whose children are of a kind the kernel lacks: tc's batch takes the root
// and stops at the first child. The error is that child's command, with the fix;
// the root is counted done; restore puts the device back.
func TestBatchStopsAtTheFailingCommand(t *testing.T) {
	r := scratch(t, "test0")
	ctx := context.Background()
	before, err := Snapshot(ctx, r, "server", "test0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Setup{Name: "mq+bogus", MQ: &Qdisc{Kind: "nosuchqdisc"}}
	done, _, err := Apply(ctx, r, s, before)
	want := "tc qdisc replace dev test0 parent 1:1 nosuchqdisc"
	if err == nil || !strings.Contains(err.Error(), "`"+want+"`") || !strings.Contains(err.Error(), "host server") ||
		strings.Contains(err.Error(), "batch") || strings.Contains(err.Error(), "Command failed") {
		t.Fatalf("error %v, want one naming %q alone", err, want)
	}
	if len(done) != 1 || !strings.Contains(done[0], "root handle 1: mq") {
		t.Errorf("done %q, want the mq root alone", done)
	}
	mid, _ := Snapshot(ctx, r, "server", "test0")
	if mid.Diff(before) == "" {
		t.Errorf("the root did not go in before the failing child")
	}
	if err := Restore(ctx, r, before); err != nil {
		t.Fatal(err)
	}
	now, _ := Snapshot(ctx, r, "server", "test0")
	if d := before.Diff(now); d != "" {
		t.Error(d)
	}
}

func TestUnrestorableRootIsRefused(t *testing.T) {
	r := scratch(t, "test0")
	ctx := context.Background()
	if _, err := r.Output(ctx, "tc qdisc replace dev test0 root tbf rate 10mbit burst 10k latency 50ms", nil); err != nil {
		t.Fatal(err)
	}
	st, _ := Snapshot(ctx, r, "server", "test0")
	if err := st.CheckRestorable(); err == nil || !strings.Contains(err.Error(), "tbf") || !strings.Contains(err.Error(), "tc qdisc del dev test0 root") {
		t.Errorf("error %v", err)
	}
}

// Linux allows ';', '>' and '$' in device names. Quoting, not luck, keeps them from
// the shell: a name that would run `id>bbpwn` unquoted must create no file.
func TestDeviceNameMetacharactersNeverExecute(t *testing.T) {
	dev := "v;id>bbpwn"
	r := scratch(t, dev)
	applyAndRestore(t, r, dev, mustSetup(t, "mq+pfifo"))
	if _, err := os.Stat(filepath.Join(r.dir, "bbpwn")); err == nil {
		t.Fatal("a device name was executed by the shell")
	}
}

// The dry run answers for the kernel and for tc without touching real devices.
func TestDryRun(t *testing.T) {
	r := scratch(t, "test0")
	ctx := context.Background()
	before, _ := Snapshot(ctx, r, "server", "test0")
	host := localRunner{dir: t.TempDir()} // the dry run makes its own namespace
	if err := DryRun(ctx, host, "server", mustSetup(t, "mq+pfifo"), 4); err != nil {
		t.Errorf("mq+pfifo: %v", err)
	}
	bad := &Setup{Name: "typo", Root: &Qdisc{Kind: "bfifo", Params: map[string]string{"limt": "5"}}}
	if err := DryRun(ctx, host, "server", bad, 4); err == nil || !strings.Contains(err.Error(), "rejected a parameter of bfifo") {
		t.Errorf("typo: %v", err)
	}
	// A kind this machine's kernel lacks (testbed-facts.md: no fq_codel here); on a
	// kernel that has it the dry run must pass instead.
	err := DryRun(ctx, host, "server", mustSetup(t, "fq_codel"), 4)
	if err != nil && !strings.Contains(err.Error(), "the kernel on host server has no fq_codel qdisc") {
		t.Errorf("fq_codel: %v", err)
	}
	now, _ := Snapshot(ctx, r, "server", "test0")
	if d := before.Diff(now); d != "" {
		t.Errorf("the dry run touched the device: %s", d)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), "bbdry-") {
		t.Errorf("a scratch namespace was left: %s", out)
	}
}

// A hand-made htb tree three levels deep: inner classes (for which tc prints no prio
// and no quantum), leaves with their own prio and quantum, qdiscs under leaves, and a
// second htb under a leaf with classes of its own. It must come back exactly as tc -d
// shows it, and be rebuilt parents first, whatever order the kernel lists it in.
func TestRestoreHTBTreeThreeLevels(t *testing.T) {
	r := scratch(t, "test0")
	r.sh(t,
		"tc qdisc replace dev test0 root handle 1: htb default 20 r2q 5",
		"tc class add dev test0 parent 1: classid 1:1 htb rate 100mbit ceil 100mbit prio 3",
		"tc class add dev test0 parent 1:1 classid 1:10 htb rate 60mbit ceil 100mbit prio 1 quantum 3000",
		"tc class add dev test0 parent 1:1 classid 1:20 htb rate 40mbit ceil 90mbit prio 2 burst 20k quantum 1514",
		"tc class add dev test0 parent 1:10 classid 1:100 htb rate 30mbit mpu 64 overhead 4",
		"tc class add dev test0 parent 1:10 classid 1:101 htb rate 30mbit prio 5",
		"tc qdisc add dev test0 parent 1:100 handle 100: bfifo limit 300000",
		"tc qdisc add dev test0 parent 1:20 handle 20: pfifo limit 50",
		"tc qdisc add dev test0 parent 1:101 handle 30: htb default 2",
		"tc class add dev test0 parent 30: classid 30:1 htb rate 10mbit",
		"tc class add dev test0 parent 30:1 classid 30:2 htb rate 5mbit ceil 10mbit prio 4",
		"tc qdisc add dev test0 parent 30:2 handle 32: pfifo limit 7",
	)
	// direct_packets_stat counts packets (the link's own IPv6 chatter), not settings.
	stat := regexp.MustCompile(`direct_packets_stat \d+ `)
	show := func() string {
		return stat.ReplaceAllString(sortedLines(r.sh(t, "tc -d qdisc show dev test0", "tc -d class show dev test0")), "")
	}
	was := show()
	for _, name := range []string{"mq+pfifo", "htb+bfifo", "pfifo_fast"} {
		applyAndRestore(t, r, "test0", mustSetup(t, name))
		if now := show(); now != was {
			t.Fatalf("after %s the tree is\n%s\nnot\n%s", name, now, was)
		}
	}
}

// A hand-made mq root keeps the kernel's own pfifo_fast (handle 0:) under each of 12
// tx queues; those come back with mq, and must not be replaced by numbered copies.
func TestRestoreMQRootTwelveQueues(t *testing.T) {
	r := scratchDev(t, "veth", "test0", 12)
	r.sh(t, "tc qdisc replace dev test0 root handle 1: mq")
	was := sortedLines(r.sh(t, "tc qdisc show dev test0"))
	applyAndRestore(t, r, "test0", mustSetup(t, "htb+bfifo"))
	if now := sortedLines(r.sh(t, "tc qdisc show dev test0")); now != was {
		t.Fatalf("qdiscs are\n%s\nnot\n%s", now, was)
	}
}

// Replacing the root qdisc deletes every filter on it and its classes, and tc prints
// u32 and bpf filters in a form it cannot read back: such a device is refused before
// anything changes, naming the device, the filter and the command that removes it.
func TestFiltersRefused(t *testing.T) {
	r := scratch(t, "test0")
	r.sh(t,
		"tc qdisc replace dev test0 root handle 1: htb default 1",
		"tc class add dev test0 parent 1: classid 1:1 htb rate 100mbit",
		"tc class add dev test0 parent 1:1 classid 1:10 htb rate 50mbit",
		"tc filter add dev test0 parent 1:1 protocol ip prio 7 u32 match ip dst 10.9.9.9/32 flowid 1:10",
	)
	ctx := context.Background()
	st, err := Snapshot(ctx, r, "server", "test0")
	if err != nil {
		t.Fatal(err)
	}
	err = st.CheckRestorable()
	for _, want := range []string{"host server", "test0", "filter", "u32", "pref 7", "tc filter del dev test0 parent 1:1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	r.sh(t, "tc filter del dev test0 parent 1:1",
		"tc filter add dev test0 parent 1: protocol ip prio 3 u32 match ip dst 10.9.9.8/32 flowid 1:10")
	st, _ = Snapshot(ctx, r, "server", "test0")
	if err := st.CheckRestorable(); err == nil || !strings.Contains(err.Error(), "tc filter del dev test0 parent 1:") || !strings.Contains(err.Error(), "pref 3") {
		t.Errorf("a filter on the root qdisc: error %v", err)
	}
}

// Ingress is not under the root: a setup neither deletes it nor its filters, so a
// device that has them is restorable and keeps them.
func TestIngressAndItsFiltersLeftAlone(t *testing.T) {
	r := scratch(t, "test0")
	r.sh(t,
		"tc qdisc replace dev test0 root handle 1: htb default 1",
		"tc class add dev test0 parent 1: classid 1:1 htb rate 100mbit",
		"tc qdisc add dev test0 ingress",
		"tc filter add dev test0 parent ffff: protocol ip prio 1 u32 match ip src 10.0.0.1/32 flowid 1:1",
	)
	was := r.sh(t, "tc filter show dev test0 parent ffff:")
	applyAndRestore(t, r, "test0", mustSetup(t, "htb+bfifo"))
	if now := r.sh(t, "tc filter show dev test0 parent ffff:"); now != was || was == "" {
		t.Errorf("ingress filters were\n%s\nare\n%s", was, now)
	}
}

// BQL limits go back to the queue they were read from. With 12 tx queues the shell
// lists tx-0, tx-1, tx-10, tx-11, tx-2...: a restore by position wrote tx-10's limits
// to tx-2. ifb, because this kernel's veth has no byte_queue_limits.
func TestBQLRestoredByQueueName(t *testing.T) {
	r := scratchDev(t, "ifb", "test0", 12)
	read := func() string {
		return r.sh(t, `for q in 0 1 2 3 4 5 6 7 8 9 10 11; do b=/sys/class/net/test0/queues/tx-$q/byte_queue_limits; echo "tx-$q $(cat $b/limit_max) $(cat $b/limit_min)"; done`)
	}
	for q := 0; q < 12; q++ {
		b := fmt.Sprintf("/sys/class/net/test0/queues/tx-%d/byte_queue_limits", q)
		r.sh(t, fmt.Sprintf("echo %d > %s/limit_max", 100000+q*1000, b), fmt.Sprintf("echo %d > %s/limit_min", q*100, b))
	}
	was := read()
	limit := 45000
	s := &Setup{Name: "bql", MQ: &Qdisc{Kind: "pfifo", Params: map[string]string{"limit": "100"}}, BQL: &BQL{LimitMax: &limit}}
	applyAndRestore(t, r, "test0", s)
	if now := read(); now != was {
		t.Errorf("BQL is\n%s\nwas\n%s", now, was)
	}
}

// ethtool -K tso off switches every tx-tcp*-segmentation; tso on switches them all
// back on, including one that was off before. Each sub-feature goes back as it was.
func TestOffloadSubFeaturesRestored(t *testing.T) {
	r := scratch(t, "test0")
	r.sh(t, "ethtool -K test0 tx-tcp6-segmentation off")
	was := r.sh(t, "ethtool -k test0")
	if !strings.Contains(was, "tx-tcp6-segmentation: off") || !strings.Contains(was, "tx-tcp-segmentation: on") {
		t.Fatalf("set-up: %s", was)
	}
	s := &Setup{Name: "notso", Root: &Qdisc{Kind: "pfifo_fast"}, Offloads: map[string]bool{"tso": false, "gro": true}}
	applyAndRestore(t, r, "test0", s)
	if now := r.sh(t, "ethtool -k test0"); now != was {
		t.Errorf("ethtool -k is\n%s\nwas\n%s", now, was)
	}
}

// tc prints a rate of 1234567bit as 1234Kbit: such a class cannot be read back
// exactly, and the burst kept in ticks gives it away, so the device is refused.
func TestHTBRoundedRateRefused(t *testing.T) {
	r := scratch(t, "test0")
	r.sh(t,
		"tc qdisc replace dev test0 root handle 1: htb",
		"tc class add dev test0 parent 1: classid 1:1 htb rate 1234567bit",
	)
	st, err := Snapshot(context.Background(), r, "server", "test0")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CheckRestorable(); err == nil || !strings.Contains(err.Error(), "class 1:1") {
		t.Errorf("error %v", err)
	}
}

// Ingress shaping makes an IFB, an ingress qdisc and a redirect filter, shapes on the
// IFB, and restore removes all three; the egress tree (the lab's htb here) is left
// as it was, not rebuilt.
func TestIngressShapingAppliedAndRemoved(t *testing.T) {
	r := scratch(t, "test0")
	r.sh(t,
		"tc qdisc replace dev test0 root handle 1: htb default 1",
		"tc class add dev test0 parent 1: classid 1:1 htb rate 100mbit ceil 100mbit",
		"tc qdisc add dev test0 parent 1:1 handle 10: bfifo limit 300000",
	)
	ctx := context.Background()
	before, err := Snapshot(ctx, r, "lab", "test0")
	if err != nil {
		t.Fatal(err)
	}
	if before.IFB != nil || before.ingress() != nil || len(before.IngressFilters) != 0 {
		t.Fatalf("a fresh device shows ingress state: %+v", before)
	}
	s := mustSetup(t, "ingress-htb")
	done, now, err := Apply(ctx, r, s, before)
	if err != nil {
		t.Fatalf("apply: %v (ran %v)", err, done)
	}
	if now.IFB == nil || now.IFB.Name != "ifb4test0" || now.ingress() == nil || !strings.Contains(strings.Join(now.IngressFilters, " "), "mirred") {
		t.Fatalf("read back %+v", now)
	}
	kinds := map[string]bool{}
	for _, q := range now.IFB.Qdiscs {
		kinds[q.Kind] = true
	}
	if !kinds["htb"] || !kinds["bfifo"] {
		t.Errorf("IFB qdiscs %+v", now.IFB.Qdiscs)
	}
	if strings.Contains(strings.Join(done, "\n"), "dev test0 root") || !before.sameTree(now) {
		t.Errorf("an ingress-only setup touched the egress tree: %v", done)
	}
	// Traffic through the redirect: the IFB's qdisc counts what test0 received. Both
	// ends are in one namespace, so a broadcast bound to peer0 is what crosses the
	// veth rather than the loopback.
	r.sh(t, "ip addr add 10.9.0.1/24 dev test0", "ip addr add 10.9.0.2/24 dev peer0", "ping -b -c 2 -i 0.2 -W 1 -I peer0 10.9.0.255 >/dev/null 2>&1 || true")
	if out := r.sh(t, "tc -s qdisc show dev ifb4test0"); !regexp.MustCompile(`Sent [1-9]`).MatchString(out) {
		t.Errorf("nothing went through the IFB:\n%s", out)
	}
	r.sh(t, "ip addr del 10.9.0.1/24 dev test0", "ip addr del 10.9.0.2/24 dev peer0")
	if err := Restore(ctx, r, before); err != nil {
		t.Fatal(err)
	}
	after, _ := Snapshot(ctx, r, "lab", "test0")
	if d := before.Diff(after); d != "" || after.IFB != nil || after.ingress() != nil {
		t.Errorf("not restored: %s", d)
	}
	if out := r.sh(t, "ip -o link show"); strings.Contains(out, "ifb") {
		t.Errorf("an IFB stayed:\n%s", out)
	}
}

// A device that has an ingress qdisc or whose IFB exists (a run that was not put
// back) is refused before anything changes.
func TestIngressShapingRefusedOverExistingState(t *testing.T) {
	ctx := context.Background()
	for name, pre := range map[string]string{"ingress": "tc qdisc add dev test0 ingress", "an_ifb_left": "ip link add name ifb4test0 type ifb"} {
		t.Run(name, func(t *testing.T) {
			r := scratch(t, "test0")
			r.sh(t, pre)
			before, err := Snapshot(ctx, r, "lab", "test0")
			if err != nil {
				t.Fatal(err)
			}
			done, _, err := Apply(ctx, r, mustSetup(t, "ingress-htb"), before)
			if err == nil || len(done) != 0 || !strings.Contains(err.Error(), "host lab") {
				t.Errorf("%s: apply ran %v, error %v", pre, done, err)
			}
			after, _ := Snapshot(ctx, r, "lab", "test0")
			if d := before.Diff(after); d != "" {
				t.Errorf("%s: changed: %s", pre, d)
			}
		})
	}
}

// channels: changes the queue count first, and mq then has one child per queue
// left; restore gives the queues back before it rebuilds the tree.
func TestChannelsAppliedAndRestored(t *testing.T) {
	r := scratch(t, "test0")
	ctx := context.Background()
	before, err := Snapshot(ctx, r, "lab", "test0")
	if err != nil {
		t.Fatal(err)
	}
	if before.Channels["tx"] != "4" || before.TxQueues != 4 {
		t.Fatalf("snapshot channels %v, %d tx queues", before.Channels, before.TxQueues)
	}
	s := mustSetup(t, "one-queue")
	done, now, err := Apply(ctx, r, s, before)
	if err != nil {
		t.Fatalf("apply: %v (ran %v)", err, done)
	}
	if done[0] != "ethtool -L test0 rx 1 tx 1" || now.TxQueues != 1 || now.Channels["tx"] != "1" {
		t.Errorf("ran %v, read back %d tx queues, channels %v", done, now.TxQueues, now.Channels)
	}
	if n := strings.Count(strings.Join(done, "\n"), "pfifo limit 100"); n != 1 {
		t.Errorf("%d pfifo children for one queue: %v", n, done)
	}
	if err := Restore(ctx, r, before); err != nil {
		t.Fatal(err)
	}
	after, _ := Snapshot(ctx, r, "lab", "test0")
	if d := before.Diff(after); d != "" || after.TxQueues != 4 {
		t.Errorf("not restored (%d tx queues): %s", after.TxQueues, d)
	}
}

// sysctls: read before, set, read back with the kernel's tabs as spaces, put back.
func TestSysctlsAppliedAndRestored(t *testing.T) {
	r := scratch(t, "test0")
	ctx := context.Background()
	r.sh(t, "echo 2 > /proc/sys/net/ipv4/tcp_ecn")
	s := mustSetup(t, "ecn")
	before, err := s.SnapshotSysctls(ctx, r, "lab")
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 2 || before[0].Key != "net.ipv4.tcp_ecn" || before[0].Value != "2" || strings.Contains(before[1].Value, "\t") {
		t.Fatalf("snapshot %+v", before)
	}
	done, _, err := s.ApplySysctls(ctx, r, "lab")
	if err != nil || len(done) != 2 {
		t.Fatalf("apply: %v (ran %v)", err, done)
	}
	if got := strings.TrimSpace(r.sh(t, "cat /proc/sys/net/ipv4/tcp_ecn")); got != "1" {
		t.Errorf("tcp_ecn %s after apply", got)
	}
	if err := RestoreSysctls(ctx, r, "lab", before); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(r.sh(t, "cat /proc/sys/net/ipv4/tcp_ecn")); got != "2" {
		t.Errorf("tcp_ecn %s after restore", got)
	}
	// A value a test would like and the kernel refuses: a warning, the rest set.
	opt := &Setup{Name: "sysctls", Sysctls: map[string]string{"net.ipv4.tcp_ecn": "9", "net.ipv4.tcp_ecn_fallback": "0"},
		OptionalSysctls: map[string]string{"net.ipv4.tcp_ecn": "TCP download::1 (ecn: accecn)"}}
	before, err = opt.SnapshotSysctls(ctx, r, "lab")
	if err != nil {
		t.Fatal(err)
	}
	done, refused, err := opt.ApplySysctls(ctx, r, "lab")
	if err != nil || len(refused) != 1 || !strings.Contains(refused[0], "host lab: net.ipv4.tcp_ecn = 9, which TCP download::1 (ecn: accecn) would like, was refused") || len(done) != 1 {
		t.Errorf("an optional value refused: %v, refused %q, ran %v", err, refused, done)
	}
	if got := strings.TrimSpace(r.sh(t, "cat /proc/sys/net/ipv4/tcp_ecn /proc/sys/net/ipv4/tcp_ecn_fallback")); got != "2\n0" {
		t.Errorf("tcp_ecn and tcp_ecn_fallback %q after apply, want 2 (as found) and 0", got)
	}
	if err := RestoreSysctls(ctx, r, "lab", before); err != nil {
		t.Fatal(err)
	}
	bad := &Setup{Name: "typo", Sysctls: map[string]string{"net.ipv4.tcp_ecnn": "1"}}
	if _, err := bad.SnapshotSysctls(ctx, r, "lab"); err == nil || !strings.Contains(err.Error(), "net.ipv4.tcp_ecnn") {
		t.Errorf("a sysctl the kernel lacks: error %v", err)
	}
}

// steer: maps every CPU to one tx queue of a 4-queue veth: datagrams to 40 ports
// (40 flow hashes) all go through that queue's mq child, and restore gives every
// queue its mask back, after which they spread again.
func TestSteerAppliedAndRestored(t *testing.T) {
	r := scratch(t, "test0")
	// A neighbour of test0's that is no address of the namespace: datagrams to
	// it go out through test0's qdiscs (the peer drops them).
	r.sh(t, "ip addr add 198.18.250.1/24 dev test0", "ip neigh replace 198.18.250.2 lladdr 02:00:00:00:00:02 nud permanent dev test0")
	ctx := context.Background()
	before, err := Snapshot(ctx, r, "lab", "test0")
	if err != nil {
		t.Fatal(err)
	}
	if len(before.XPS) != 4 || before.CPUs == 0 {
		t.Fatalf("snapshot XPS %v, %d CPUs", before.XPS, before.CPUs)
	}
	s := mustSetup(t, "steered")
	done, now, err := Apply(ctx, r, s, before)
	if err != nil {
		t.Fatalf("apply: %v (ran %v)", err, done)
	}
	if !slices.Contains(done, fmt.Sprintf("echo %s > /sys/class/net/test0/queues/tx-2/xps_cpus", CPUMask(before.CPUs))) {
		t.Errorf("ran %q", done)
	}
	send := func() map[string]int {
		r.sh(t, `bash -c 'for p in $(seq 5001 5040); do echo x > /dev/udp/198.18.250.2/$p; done'`)
		return childPackets(t, r.sh(t, "tc -s -j qdisc show dev test0"))
	}
	steered := send()
	for parent, n := range steered {
		if parent != "1:3" && n > 0 {
			t.Errorf("steered to tx-2 (1:3), %d packets went through %s: %v", n, parent, steered)
		}
	}
	if steered["1:3"] < 40 {
		t.Errorf("steered: %v", steered)
	}
	if now.XPS[2].CPUs == before.XPS[2].CPUs && before.CPUs > 1 {
		t.Errorf("read back %v", now.XPS)
	}
	if err := Restore(ctx, r, before); err != nil {
		t.Fatal(err)
	}
	after, _ := Snapshot(ctx, r, "lab", "test0")
	if d := before.Diff(after); d != "" {
		t.Errorf("not restored: %s", d)
	}
	if !sameXPS(before.XPS, after.XPS) {
		t.Errorf("XPS %v, was %v", after.XPS, before.XPS)
	}
	// The hash spreads the 40 flows again (over a fresh mq: the restore rebuilt
	// the kernel's default, and the setup's children are gone, so mq again).
	r.sh(t, "tc qdisc replace dev test0 root handle 1: mq")
	for q := 1; q <= 4; q++ {
		r.sh(t, fmt.Sprintf("tc qdisc replace dev test0 parent 1:%d pfifo", q))
	}
	used := 0
	for _, n := range send() {
		if n > 0 {
			used++
		}
	}
	if used < 2 {
		t.Errorf("after restore 40 flows went through %d of the 4 children", used)
	}
}

// childPackets are the packets each of an mq root's children sent, by parent,
// from tc -s -j.
func childPackets(t *testing.T, tcJSON string) map[string]int {
	t.Helper()
	var qs []struct {
		Kind    string `json:"kind"`
		Parent  string `json:"parent"`
		Packets int    `json:"packets"`
	}
	if err := json.Unmarshal([]byte(tcJSON), &qs); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, q := range qs {
		if q.Parent != "" && q.Kind != "mq" {
			out[q.Parent] = q.Packets
		}
	}
	return out
}
