// Package vmlab is the VM lab stage of the tests: it brings up `testbed up --vm
// --router` (three QEMU guests on Debian's 7.3.4 kernel, which has every AQM of the
// mission, with sch_dualpi2 built for it: client, server and a router between them
// whose two devices the setups apply to) and runs tcp_4down for every built-in setup
// behind a 10 Mbit/s line, then checks what only a real kernel can show: each setup applied,
// its statistics moved by the traffic, the AQMs' loaded ping well below
// pfifo_fast's, a BQL limit_max honoured, cake shaping the router's ingress on an
// IFB, and every guest restored after each run; then the same lab with a 50 ms path
// in its inventory, as --rtt writes it.
//
// Every setup of the checks runs with BQL's limit_max at four packets, as the seeds'
// comparisons do: left to itself, BQL on this emulated virtio-net grows to 60-90 KB
// in flight per queue (completions come in bursts), and that ring, not the qdisc
// under test, would set the loaded ping.
// It needs root, QEMU and the image's build tools (scripts/install-deps --vm).
package vmlab

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/e2eutil"
	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/report"
	"github.com/bloatbench/bloatbench/testbed"
)

var bin string

func TestMain(m *testing.M) {
	// Without root every test here skips (e2eutil.NeedRoot), saying why: there is
	// nothing to build or check for them.
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		fmt.Fprintln(os.Stderr, "vmlab: qemu-system-x86_64 is missing: bash scripts/install-deps --vm")
		os.Exit(1)
	}
	e2eutil.Main(m, "vmlab", "../../cmd/bloatbench", &bin)
}

func bb(t *testing.T, timeout time.Duration, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}

// The rate is low enough for software emulation to fill it with three guests on a
// 2-core machine. The bottleneck is a router's, not the sender's: on the sender, TCP
// small queues keeps each flow's share of qdisc and ring to about a millisecond of
// its rate or two packets, and pfifo_fast's queue there came out anywhere from 30 to
// 230 ms from one run to the next; on the router it fills (about a second).
const rate = 10e6

// bqlLimit is the limit_max of the BQL check: four MTU packets, as the VM lab's
// "+bql" setups have it.
const bqlLimit = testbed.VMBQLLimit

// addSetup adds a setup of the test's own to the lab's inventory.
func addSetup(t *testing.T, invPath, name string, spec *inventory.SetupSpec) {
	t.Helper()
	inv, err := inventory.Load(invPath)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Setups == nil {
		inv.Setups = map[string]*inventory.SetupSpec{}
	}
	inv.Setups[name] = spec
	if err := inv.Write(invPath, "# The VM lab's inventory, with a setup of the test's own\n"); err != nil {
		t.Fatal(err)
	}
}

func TestVMLab(t *testing.T) {
	e2eutil.NeedRoot(t, "starts QEMU guests on taps and a bridge in a network namespace")
	dir := t.TempDir()
	invPath := filepath.Join(dir, "vmlab.yaml")
	start := time.Now()
	image, stderr, err := bb(t, 20*time.Minute, "testbed", "image")
	if err != nil {
		t.Fatalf("testbed image: %v\n%s", err, stderr)
	}
	t.Logf("VM image ready in %v: %s", time.Since(start).Round(time.Second), strings.TrimSpace(image))
	// The image's own dualpi2 module, given again as a user's module: the guests load
	// it from QEMU's fw_cfg before anything else.
	module := filepath.Join(strings.TrimSpace(image), "sch_dualpi2.ko")
	start = time.Now()
	_, stderr, err = bb(t, 5*time.Minute, "testbed", "up", "--vm", "--router", "--out", invPath, "--rate", "10mbit", "--module", module)
	if err != nil {
		t.Fatalf("testbed up --vm: %v\n%s", err, stderr)
	}
	t.Logf("VM lab up in %v:\n%s", time.Since(start).Round(time.Second), stderr)
	for _, role := range []string{"client", "server", "router"} {
		if !strings.Contains(stderr, role+": module module0 loaded") {
			t.Errorf("the %s guest did not report --module %s loaded", role, module)
		}
	}
	inv, err := inventory.Load(invPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkDown(t, inv.Testbed) })

	// The inventory's own setups, as testbed up --vm writes them: every built-in
	// with BQL's limit_max, and mq+fq_codel with GSO off too, where each skb is one
	// packet, for the BQL check. The test adds one of its own.
	builtins := []string{"pfifo_fast", "fq_codel", "mq+fq_codel", "mq+fq_pie", "mq+dualpi2", "cake", "cake-no-split-gso"}
	for _, b := range builtins {
		name := b + "+bql"
		if s := inv.Setups[name]; s == nil || s.BQL == nil || s.BQL.LimitMax == nil || *s.BQL.LimitMax != bqlLimit {
			t.Fatalf("testbed up --vm wrote no setup %s with limit_max %d: %+v", name, bqlLimit, inv.Setups[name])
		}
	}
	s, err := qdisc.Resolve("mq+fq_codel+bql-gso", inv)
	if err != nil {
		t.Fatal(err)
	}
	if gso, set := s.Offloads["gso"]; !set || gso || s.BQL == nil || s.BQL.LimitMax == nil || *s.BQL.LimitMax != bqlLimit {
		t.Fatalf("mq+fq_codel+bql-gso: offloads %v, BQL %+v: want GSO off and limit_max %d", s.Offloads, s.BQL, bqlLimit)
	}
	limit := bqlLimit
	addSetup(t, invPath, "mq+pfifo", &inventory.SetupSpec{Title: "MQ + PFIFO 10",
		MQ: &inventory.QdiscSpec{Kind: "pfifo", Params: map[string]string{"limit": "10"}}, BQL: &inventory.BQLSpec{LimitMax: &limit}})

	before := guestState(t, inv)
	out := filepath.Join(dir, "results")
	run := func(setups ...string) string {
		args := []string{"run", "-H", invPath, "-l", "20", "-d", "2", "-o", out}
		for _, s := range setups {
			args = append(args, "--setup", s)
		}
		began := time.Now()
		stdout, stderr, err := bb(t, 10*time.Minute, append(args, "tcp_4down")...)
		if err != nil {
			t.Fatalf("run %v: %v\n%s\n%s", setups, err, stdout, stderr)
		}
		t.Logf("run %v took %v", setups, time.Since(began).Round(time.Second))
		if after := guestState(t, inv); after != before {
			t.Errorf("after %v the guests are not as they were:\nbefore:\n%s\nafter:\n%s", setups, before, after)
		}
		return stdout
	}

	// The command: three setups in one run, three summaries with qdisc rows.
	three := run("mq+dualpi2", "mq+fq_codel", "mq+fq_pie")
	t.Logf("bloatbench run -H vmlab.yaml --setup mq+dualpi2 --setup mq+fq_codel --setup mq+fq_pie -l 20 tcp_4down:\n%s", three)
	// Each run's summary starts a line; the comparison after them indents its own.
	blocks := strings.Split("\n"+three, "\nSummary of tcp_4down")[1:]
	if len(blocks) != 3 {
		t.Fatalf("want 3 summaries, got %d", len(blocks))
	}
	if !strings.Contains(three, "Side by side:") {
		t.Errorf("no side-by-side table after the three runs")
	}
	for i, title := range []string{"MQ + DUALPI2", "MQ + FQ_CODEL", "MQ + FQ_PIE"} {
		if !strings.Contains(blocks[i], title) || !strings.Contains(blocks[i], "Qdisc router:test0 drops") {
			t.Errorf("summary %d is not %s with qdisc rows:\n%s", i+1, title, blocks[i])
		}
	}
	// Where the delay went is checked on one tx queue: on the lab's four, mq
	// gives the ping the child of whichever queue its hash picks, which in about
	// a third of runs holds none of the four flows, and the ping's own wait in
	// dualpi2 is then nothing with or without a BQL limit.
	for _, name := range []string{"mq+dualpi2", "mq+dualpi2+bql"} {
		addSetup(t, invPath, name+"-1q", &inventory.SetupSpec{Extends: name, Channels: map[string]int{"combined": 1}})
	}
	checked := append([]string(nil), builtins...)
	for i := range checked {
		checked[i] += "+bql"
		if checked[i] == "mq+dualpi2+bql" {
			checked[i] += "-1q"
		}
	}
	checked = append(checked, "mq+fq_codel+bql-gso", "mq+dualpi2-1q")
	// These through a batch file, as a lab's nightly job runs them: one run a setup,
	// each restored, the batch's summary and page at the end.
	batchFile := filepath.Join(dir, "vmstage.yaml")
	if err := os.WriteFile(batchFile, []byte(fmt.Sprintf("name: vmstage\ninventory: %s\noutput: %s\nlength: 20\ndelay: 2\nshuffle: false\ntests: [{test: tcp_4down}]\nsetups: [%s]\n",
		invPath, out, strings.Join(checked, ", "))), 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	stdout, stderr, err := bb(t, 20*time.Minute, "batch", batchFile)
	if err != nil {
		t.Fatalf("batch %s: %v\n%s\n%s", batchFile, err, stdout, stderr)
	}
	t.Logf("batch of %d setups took %v: %s", len(checked), time.Since(began).Round(time.Second), stdout)
	if after := guestState(t, inv); after != before {
		t.Errorf("after the batch the guests are not as they were:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	batchDirs, _ := filepath.Glob(filepath.Join(out, "vmstage-*"))
	if len(batchDirs) != 1 {
		t.Fatalf("batch folders %v", batchDirs)
	}
	for _, name := range []string{"summary.md", "index.html", "runs.jsonl"} {
		if _, err := os.Stat(filepath.Join(batchDirs[0], name)); err != nil {
			t.Errorf("the batch wrote no %s: %v", name, err)
		}
	}

	runs := map[string]*datafile.Run{}
	files, _ := filepath.Glob(filepath.Join(out, "*.bb.json.gz"))
	batchFiles, _ := filepath.Glob(filepath.Join(batchDirs[0], "data", "*.bb.json.gz"))
	files = append(files, batchFiles...)
	for _, p := range files {
		r, err := datafile.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		if r.Metadata.Setup == nil {
			t.Fatalf("%s records no setup", p)
		}
		runs[r.Metadata.Setup.Name] = r
	}

	type check struct {
		setup, what, got string
		ok               bool
	}
	var checks []check
	add := func(setup, what string, ok bool, format string, args ...any) {
		checks = append(checks, check{setup, what, fmt.Sprintf(format, args...), ok})
	}
	pings := map[string]float64{}
	for _, s := range checked {
		r := runs[s]
		if r == nil {
			t.Fatalf("no data file for setup %s", s)
		}
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s, "-1q"), "-gso"), "+bql")
		kinds := map[string][]string{"pfifo_fast": {"pfifo_fast"}, "fq_codel": {"fq_codel"}, "mq+fq_codel": {"mq", "fq_codel"},
			"mq+fq_pie": {"mq", "fq_pie"}, "mq+dualpi2": {"mq", "dualpi2"}, "cake": {"cake"}, "cake-no-split-gso": {"cake"}}[base]
		applied := true
		for _, d := range r.Metadata.Setup.Devices {
			for _, k := range kinds {
				applied = applied && strings.Contains(string(d.ReadBack), `"kind":"`+k+`"`)
			}
		}
		add(s, "applied (kernel's read-back)", applied, "%s on %d devices", strings.Join(kinds, "+"), len(r.Metadata.Setup.Devices))

		from, to := r.Metadata.T0+r.Metadata.Delay, r.Metadata.T0+r.Metadata.Delay+r.Metadata.Length
		var loaded []float64
		for _, p := range r.Samples["Ping (ms) ICMP"] {
			if !p.Lost && p.T >= from && p.T <= to {
				loaded = append(loaded, p.V)
			}
		}
		pings[s] = median(loaded)

		const dev = "router:test0" // towards the client: the downloads' bottleneck
		switch base {
		case "pfifo_fast":
			b := gaugeMax(r, dev, "backlog")
			add(s, "backlog builds", b > 0, "max backlog %.0f bytes", b)
		case "fq_codel", "mq+fq_codel":
			d, m := counterSum(r, dev, "drops"), counterSum(r, dev, "ecn_mark")
			add(s, "drops or ECN marks", d+m > 0, "%.0f drops, %.0f marks", d, m)
		case "mq+fq_pie":
			d, m := counterSum(r, dev, "drops"), counterSum(r, dev, "ecn_mark")
			add(s, "drops or ECN marks", d+m > 0, "%.0f drops, %.0f marks", d, m)
		case "mq+dualpi2":
			p, dc := gaugeMax(r, dev, "prob"), gaugeMax(r, dev, "delay_c")
			add(s, "prob and delay_c move", p > 0 && dc > 0, "max prob %g, max delay_c %g", p, dc)
		case "cake", "cake-no-split-gso":
			pk, dl := counterSum(r, dev, ".sent_packets"), gaugeMax(r, dev, ".peak_delay_us")
			add(s, "tin stats move", pk > 0 && dl > 0, "%.0f packets sent by the tins, max peak_delay %.0f us", pk, dl)
		}
		if s == "mq+fq_codel+bql-gso" {
			// limit_max caps BQL's limit; inflight may pass the limit by the packet
			// that crossed it (an MTU: GSO is off and the VM link offers no TSO). On
			// this emulated virtio-net, completions arrive in bursts and inflight
			// briefly reaches about twice the limit: the check holds the limit in
			// every sample and inflight in the median one, and shows the largest.
			limit, inflight := bqlSamples(r, dev, "limit"), bqlSamples(r, dev, "inflight")
			add(s, "BQL limit_max honoured", slices.Max(limit) <= bqlLimit && median(inflight) <= bqlLimit+1514,
				"limit <= %.0f in all %d samples, inflight median %.0f, max %.0f (limit_max %d)",
				slices.Max(limit), len(limit), median(inflight), slices.Max(inflight), bqlLimit)
		}
	}
	for _, s := range checked[1 : len(checked)-2] { // the setups with limit_max
		base := pings["pfifo_fast+bql"]
		add(s, "loaded ping < half of pfifo_fast's", pings[s] < base/2, "median %.1f ms vs %.1f ms", pings[s], base)
	}
	// Where the delay went (seed 000's question): without a BQL limit the loaded
	// ping waits mostly in the driver's ring, behind dualpi2; limit_max moves
	// that queue up into dualpi2, where its AQM acts on it (on one tx queue, so
	// that the ping shares dualpi2 with the flows). Each run shows both of
	// dualpi2's queues, and its histogram holds the packets dualpi2 sent (it
	// splits GSO skbs as it takes them: those segments are followed), from the
	// run's first second.
	const dev = "router:test0"
	var attr [2]*report.DelayAttribution
	for i, s := range []string{"mq+dualpi2-1q", "mq+dualpi2+bql-1q", "mq+dualpi2"} {
		r := runs[s]
		if r == nil {
			t.Fatalf("no data file for setup %s", s)
		}
		sum := report.Summarize(r)
		rows := map[string]report.Row{}
		for _, row := range sum.Rows {
			rows[row.Name] = row
		}
		l, c := rows["Qdisc "+dev+" L queue delay"], rows["Qdisc "+dev+" C queue delay"]
		add(s, "L and C queue rows", l.Points > 0 && c.Points > 0, "L %.2f ms, C %.2f ms median (%d, %d steps)", l.Median, c.Median, l.Points, c.Points)
		d := sum.Delay
		if d == nil {
			add(s, "delay attributed", false, "no attribution")
			continue
		}
		if i < len(attr) {
			attr[i] = d
		}
		add(s, "delay attributed", true, "excess %.2f ms: qdisc %.2f ms (%.0f%%, %s), ring %.2f ms", d.ExcessMs, d.QdiscMs, 100*d.QdiscShare, d.Source, d.RingMs)
		// Over the steps the tracer saw, against tc's counter over them. Its
		// programs are loaded before t0 (seconds of an emulated guest's CPU, once
		// longer than the whole run): its first step is the run's first.
		var traced uint64
		t1, t2 := math.Inf(1), math.Inf(-1)
		for _, se := range r.Series {
			// Every packet's histograms, not the echo packets' (counted in both).
			if se.Kind == datafile.KindSojourn && se.Host+":"+se.Dev == dev && !strings.HasSuffix(se.Stat, report.EchoSuffix) {
				for _, smp := range r.Samples[se.Name] {
					traced += uint64(smp.N)
					t1, t2 = math.Min(t1, smp.T-smp.Dur), math.Max(t2, smp.T)
				}
			}
		}
		sent, first := 0.0, math.NaN()
		for _, smp := range r.Samples["qdisc "+dev+" root packets"] {
			if smp.T >= t1-0.05 && smp.T <= t2+0.05 {
				if math.IsNaN(first) {
					first = smp.V
				}
				sent = smp.V - first
			}
		}
		add(s, "sojourn holds what dualpi2 sent", float64(traced) > 0.9*sent && float64(traced) < 1.1*sent,
			"%d packets in the histograms, %.0f sent by tc's count", traced, sent)
		// A step may pass without a packet (the ping's may fall into the next).
		add(s, "sojourn from the run's first second", t1-r.Metadata.T0 <= 1,
			"first step from %.2f s after t0 (step %.2f s)", t1-r.Metadata.T0, r.Metadata.Step)
	}
	// Held on the parts the attribution measures in the kernel (sojourn, BQL
	// inflight over the drain rate), not on their shares of the ping's excess: the
	// emulated guests' ping medians move by tens of ms from run to run (7.8 and
	// 52 ms of excess for the same setup), the parts much less.
	if a, b := attr[0], attr[1]; a != nil && b != nil {
		add("mq+dualpi2+bql-1q", "limit_max moves the delay from ring to qdisc", a.RingMs > a.QdiscMs && b.QdiscMs > b.RingMs && b.RingMs < a.RingMs/2,
			"without a BQL limit ring %.2f ms, qdisc %.2f; with limit_max %d ring %.2f, qdisc %.2f", a.RingMs, a.QdiscMs, bqlLimit, b.RingMs, b.QdiscMs)
	}
	for s, r := range runs {
		ok := !r.Incomplete
		add(s, "run complete, guests restored", ok, "checked after each run")
	}

	var tab bytes.Buffer
	w := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "setup\tcheck\tresult\tmeasured")
	for _, c := range checks {
		res := "ok"
		if !c.ok {
			res = "FAIL"
			t.Errorf("%s: %s: %s", c.setup, c.what, c.got)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.setup, c.what, res, c.got)
	}
	w.Flush()
	t.Logf("VM lab checks (tcp_4down, 20 s, line rate %.0f Mbit/s):\n%s", rate/1e6, tab.String())

	mqPfifo(t, invPath, inv, before, out)
	cakeIngress(t, invPath, inv, before, out)
	seedWorkloads(t, invPath, inv, before, out)
	l4sChecks(t, invPath, inv, before, out)
	pathChecks(t, invPath, out)
}

// mqPfifo is the qdisc setups' check of mq with pfifo children on a link that pushes
// back (this machine's veth does not): applied, read back, sampled with backlog and
// drops under load, and restored, also after SIGINT 3 s into the traffic and after
// the server's agent is killed mid-run.
func mqPfifo(t *testing.T, invPath string, inv *inventory.Inventory, before, out string) {
	t.Run("mq+pfifo", func(t *testing.T) {
		dir := filepath.Join(out, "mq+pfifo")
		stdout, stderr, err := bb(t, 5*time.Minute, "run", "-H", invPath, "--setup", "mq+pfifo", "-l", "10", "-d", "1", "-o", dir, "tcp_4down")
		if err != nil {
			t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.bb.json.gz"))
		if len(files) != 1 {
			t.Fatalf("want one data file, got %v", files)
		}
		r, err := datafile.Read(files[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range r.Metadata.Setup.Devices {
			if !strings.Contains(string(d.ReadBack), `"kind":"mq"`) || !strings.Contains(string(d.ReadBack), `"kind":"pfifo"`) {
				t.Errorf("%s:%s read back without mq and pfifo: %s", d.Host, d.Dev, d.ReadBack)
			}
		}
		backlog, drops := gaugeMax(r, "router:test0", "backlog"), counterSum(r, "router:test0", "drops")
		t.Logf("mq+pfifo under load: max backlog %.0f bytes, %.0f drops", backlog, drops)
		if backlog == 0 || drops == 0 {
			t.Errorf("mq+pfifo under load: backlog %.0f, drops %.0f; want both non-zero", backlog, drops)
		}
		if after := guestState(t, inv); after != before {
			t.Errorf("not restored:\n%s\nvs\n%s", before, after)
		}
	})
	interrupted := func(t *testing.T, stop func(*exec.Cmd), want string) {
		cmd := exec.Command(bin, "run", "-H", invPath, "--setup", "mq+pfifo", "-l", "30", "-d", "1", "-o", t.TempDir(), "tcp_4down")
		stderr := &e2eutil.LockedBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(stderr.String(), "running tcp_4down") && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		stop(cmd)
		if err := cmd.Wait(); err == nil || !strings.Contains(stderr.String(), want) {
			t.Errorf("exit %v, want an error with %q:\n%s", err, want, stderr.String())
		}
		if after := guestState(t, inv); after != before {
			t.Errorf("not restored:\n%s\nvs\n%s", before, after)
		}
	}
	t.Run("mq+pfifo SIGINT 3s into traffic", func(t *testing.T) {
		interrupted(t, func(c *exec.Cmd) { c.Process.Signal(syscall.SIGINT) }, "interrupted")
	})
	t.Run("mq+pfifo server's agent killed", func(t *testing.T) {
		interrupted(t, func(*exec.Cmd) {
			// The agent runs from the cache the controller copied it to; the shell
			// that looks for it does not (its command line starts with dash).
			guestSSH(t, inv, "server", `for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in .cache/bloatbench/agent-*" agent "|/root/.cache/bloatbench/agent-*" agent ") kill -9 ${p#/proc/};; esac; done`)
		}, "agent on host server")
	})
}

// guestState is the qdiscs, BQL limits and offloads of every bottleneck device, read
// over SSH with OpenSSH's client (not ours) and the lab's keys.
func guestState(t *testing.T, inv *inventory.Inventory) string {
	t.Helper()
	// One login a host (each is about a second of an emulated guest's CPU),
	// its devices in the inventory's order.
	var hosts []string
	script := map[string]string{}
	for _, bn := range inv.Bottleneck {
		if _, ok := script[bn.Host]; !ok {
			hosts = append(hosts, bn.Host)
		}
		script[bn.Host] += fmt.Sprintf("echo '%[2]s:%[1]s:'; tc qdisc show dev %[1]s; grep . /sys/class/net/%[1]s/queues/tx-*/byte_queue_limits/limit_m* /sys/class/net/%[1]s/queues/tx-*/xps_cpus; ethtool -k %[1]s | grep -E '^(generic|tcp)-segmentation|generic-receive'\n", bn.Dev, bn.Host)
	}
	var b strings.Builder
	for _, h := range hosts {
		b.WriteString(guestSSH(t, inv, h, script[h]))
	}
	return b.String()
}

func guestSSH(t *testing.T, inv *inventory.Inventory, role, command string) string {
	t.Helper()
	h := inv.Hosts[role]
	user, host, port, err := inventory.SplitSSH(h.SSH)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ssh", "-i", h.IdentityFile, "-o", "UserKnownHostsFile="+h.KnownHosts, "-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes", "-p", fmt.Sprint(port), user+"@"+host, command).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh %s: %v\n%s", role, err, out)
	}
	return string(out)
}

// statSeries returns the samples of every qdisc statistic of dev whose name ends in
// field (in any qdisc of the tree: root, mq's children, cake's tins).
func statSeries(r *datafile.Run, dev, field string) [][]datafile.Sample {
	var out [][]datafile.Sample
	prefix := "qdisc " + dev + " "
	for name, ss := range r.Samples {
		if strings.HasPrefix(name, prefix) && (strings.HasSuffix(name, " "+field) || strings.HasPrefix(field, ".") && strings.HasSuffix(name, field)) {
			out = append(out, ss)
		}
	}
	return out
}

// counterSum adds up how much each matching counter grew during the run.
func counterSum(r *datafile.Run, dev, field string) float64 {
	sum := 0.0
	for _, ss := range statSeries(r, dev, field) {
		if len(ss) > 1 {
			sum += math.Max(0, ss[len(ss)-1].V-ss[0].V)
		}
	}
	return sum
}

func gaugeMax(r *datafile.Run, dev, field string) float64 {
	m := 0.0
	for _, ss := range statSeries(r, dev, field) {
		for _, s := range ss {
			m = math.Max(m, s.V)
		}
	}
	return m
}

// bqlSamples gathers every tx queue's samples of a BQL statistic of dev, taken
// while the streams ran.
func bqlSamples(r *datafile.Run, dev, stat string) []float64 {
	from, to := r.Metadata.T0+r.Metadata.Delay, r.Metadata.T0+r.Metadata.Delay+r.Metadata.Length
	var out []float64
	for name, ss := range r.Samples {
		if strings.HasPrefix(name, "bql "+dev+" ") && strings.HasSuffix(name, " "+stat) {
			if stat == "inflight" && !slices.ContainsFunc(ss, func(s datafile.Sample) bool { return s.V > 0 }) {
				continue // a queue no flow hashed to
			}
			for _, s := range ss {
				if s.T >= from && s.T <= to {
					out = append(out, s.V)
				}
			}
		}
	}
	if len(out) == 0 {
		out = []float64{math.NaN()}
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// checkDown takes the lab down and checks it left no QEMU, tap, bridge or namespace.
func checkDown(t *testing.T, name string) {
	if _, stderr, err := bb(t, time.Minute, "testbed", "down", "--vm"); err != nil {
		t.Errorf("testbed down --vm: %v\n%s", err, stderr)
	}
	if out, _ := exec.Command("pgrep", "-af", "qemu-system.*"+name).Output(); len(out) > 0 {
		t.Errorf("QEMU still runs after testbed down --vm:\n%s", out)
	}
	if _, err := os.Stat("/run/netns/" + name); err == nil {
		t.Errorf("namespace %s is still there", name)
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	if strings.Contains(string(links), name) {
		t.Errorf("a tap or bridge of %s is still there:\n%s", name, links)
	}
}
