package e2e

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

// runDelay is a run's JSON summary: its rows' medians and where its delay went.
func runDelay(t *testing.T, stdout string) (map[string]float64, report.DelayAttribution) {
	t.Helper()
	var s struct {
		Runs []struct {
			DelayAttribution *report.DelayAttribution `json:"delay_attribution"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(stdout), &s); err != nil || len(s.Runs) != 1 || s.Runs[0].DelayAttribution == nil {
		t.Fatalf("no delay_attribution in the JSON summary (%v):\n%s", err, stdout)
	}
	return parseSummary(t, stdout), *s.Runs[0].DelayAttribution
}

// Where the delay went, on the local lab shaped by htb 100mbit + bfifo 300000 at
// both ends, tcp_4down: the queue builds in the server's bfifo. With both ends'
// devices under test, the kernel's sojourn there agrees with its backlog over the
// rate it drained at and with the loaded ping's excess over idle (within 20%), and
// the qdiscs under test hold at least 80% of that excess. With only the client's
// device under test (an inventory that misses where the queue is), the run warns,
// naming it, and the share is below 30%. The tracers are loaded before t0. A
// queue that drains at half its configured rate is warned of.
func TestDelayAttributionOnTheLab(t *testing.T) {
	invPath, _ := lab(t, "--rate", "100mbit", "--queue", "bfifo:300000", "--gso", "off")
	r := bb(t, "run", "-H", invPath, "-l", "8", "-d", "2", "-o", t.TempDir(), "--format", "json", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	m, d := runDelay(t, r.stdout)
	b, _ := json.Marshal(d)
	t.Logf("both ends under test: %s", b)
	soj := m["Qdisc server:test0 sojourn"]
	byBacklog := m["Qdisc server:test0 backlog"] / (m["Qdisc server:test0 drain rate"] * 1e6 / 8) * 1e3
	excess := m["Ping (ms) ICMP loaded"] - m["Ping (ms) ICMP idle"]
	t.Logf("server's sojourn median %.2f ms, backlog over drain rate %.2f ms, ping's excess %.2f ms", soj, byBacklog, excess)
	for _, c := range []struct {
		what string
		v    float64
	}{{"the backlog over the drain rate", byBacklog}, {"the loaded ping's excess over idle", excess}} {
		if math.Abs(soj-c.v) > 0.2*c.v {
			t.Errorf("the server's median sojourn %.2f ms is not within 20%% of %s, %.2f ms", soj, c.what, c.v)
		}
	}
	// The lab's htb, as the run found it, beside the rate the queue drained at.
	if cr := m["Qdisc server:test0 configured rate"]; cr != 100 {
		t.Errorf("the server's configured rate row is %v Mbit/s, want the lab's htb 100", cr)
	}
	t.Logf("the server's queue drained at a median %.2f Mbit/s of its configured 100", m["Qdisc server:test0 drain rate"])
	if d.Source != "sojourn" || d.QdiscShare < 0.8 || len(d.Devices) != 2 {
		t.Errorf("attribution %s: want the sojourn of both devices holding 80%% or more", b)
	}
	if strings.Contains(r.stderr, "warning: the qdiscs under test") {
		t.Errorf("warned of the qdiscs under test:\n%s", r.stderr)
	}
	// The tracers are loaded before the run's clock starts, on both hosts, so that
	// the kernel's work on them is not in the idle phase's ping (the controller's
	// own log, in order).
	running := strings.Index(r.stderr, "running tcp_4down")
	for _, h := range []string{"client", "server"} {
		if i := strings.Index(r.stderr, " prepared on "+h+" ("); i < 0 || running < 0 || i > running {
			t.Errorf("the log does not say the %s's sojourn job was prepared before the run began:\n%s", h, r.stderr)
		}
	}

	// The same lab, the inventory naming only the client's device.
	inv, err := os.ReadFile(invPath)
	if err != nil {
		t.Fatal(err)
	}
	server := "    - host: server\n      dev: test0\n"
	if !strings.Contains(string(inv), server) {
		t.Fatalf("the lab's inventory lists no server:test0 bottleneck:\n%s", inv)
	}
	clientOnly := strings.TrimSuffix(invPath, ".yaml") + "-client-only.yaml"
	if err := os.WriteFile(clientOnly, []byte(strings.Replace(string(inv), server, "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	r = bb(t, "run", "-H", clientOnly, "-l", "8", "-d", "2", "-o", out, "--format", "json", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	_, d = runDelay(t, r.stdout)
	b, _ = json.Marshal(d)
	t.Logf("only the client under test: %s", b)
	if d.QdiscShare >= 0.3 || len(d.Devices) != 1 || d.Devices[0].Dev != "client:test0" {
		t.Errorf("attribution %s: want the client's device alone, holding less than 30%%", b)
	}
	if want := "warning: the qdiscs under test (client:test0) held"; !strings.Contains(r.stderr, want) {
		t.Errorf("the run does not say %q:\n%s", want, r.stderr)
	}
	// The data file says it too, as a warning event.
	files, _ := filepath.Glob(filepath.Join(out, "*.bb.json.gz"))
	if len(files) != 1 {
		t.Fatalf("want one data file in %s, have %v", out, files)
	}
	run, err := datafile.Read(files[0])
	if err != nil || run.Incomplete {
		t.Fatalf("%s: %v (incomplete %v)", files[0], err, run != nil && run.Incomplete)
	}
	if !slices.ContainsFunc(run.Events, func(e datafile.Event) bool {
		return e.Level == "warning" && strings.HasPrefix(e.Message, "the qdiscs under test (client:test0) held")
	}) {
		t.Errorf("the data file has no warning event of the qdiscs under test: %+v", run.Events)
	}

	// A queue that drains slower than its configured rate: a setup shaping with
	// htb at 100mbit whose child, a tbf at 50mbit, is a slower link behind it.
	slow := strings.TrimSuffix(invPath, ".yaml") + "-slow.yaml"
	spec := "setups:\n  slow-link:\n    rate: 100mbit\n    root: {kind: tbf, params: {rate: 50mbit, burst: \"6000\", latency: 100ms}}\n"
	if err := os.WriteFile(slow, append(inv, spec...), 0o600); err != nil {
		t.Fatal(err)
	}
	r = bb(t, "run", "-H", slow, "--setup", "slow-link", "-l", "8", "-d", "2", "-o", t.TempDir(), "--format", "json", "tcp_4down")
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	m, _ = runDelay(t, r.stdout)
	t.Logf("slow link: configured %.2f Mbit/s, drained at %.2f", m["Qdisc server:test0 configured rate"], m["Qdisc server:test0 drain rate"])
	if want := "warning: qdisc server:test0 drained at a median "; !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "of its configured 100.00 Mbit/s (htb rate)") {
		t.Errorf("the run does not say %q of its configured rate:\n%s", want, r.stderr)
	}
}
