package qdisc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
	sh("ip", "-n", ns, "link", "add", "name", dev, "numtxqueues", "4", "numrxqueues", "4", "type", "veth", "peer", "name", "peer0")
	sh("ip", "-n", ns, "link", "set", dev, "up")
	sh("ip", "-n", ns, "link", "set", "peer0", "up")
	return localRunner{ns: ns, dir: t.TempDir()}
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
