package e2e

import (
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/e2eutil"
)

// rateStepsSetup steps the server's shaper 40 -> 20 -> 5 -> 40 Mbit/s in a run
// of 1 + 14 + 1 seconds.
const rateStepsSetup = `setups:
  steps:
    rate: 40mbit
    root: {kind: bfifo, params: {limit: "100000"}}
    rate_schedule:
      - {at: 5s, rate: 20mbit}
      - {at: 9s, rate: 5mbit}
      - {at: 13s, rate: 40mbit}
`

// rate_steps on the local lab with a schedule: the data file has the rate in
// force each step, going through the schedule in order; the bottleneck drained
// at each step's rate while it held a queue; the summary neither warns of a slow
// drain nor lacks the configured rate row; flent 2.1.1 prints our numbers for
// the export; the lab is as found after. Then a run killed after a step of its
// schedule is put back by `bloatbench restore`: the schedule's change is the
// run's own, not a change by hand since.
func TestRateStepsOnTheLocalLab(t *testing.T) {
	needLab(t)
	if _, err := exec.LookPath("flent"); err != nil {
		t.Fatalf("flent is missing: bash scripts/install-deps: %v", err)
	}
	invPath, inv := lab(t, "--rate", "100mbit", "--queue", "bfifo:300000", "--gso", "off")
	appendSetups(t, invPath, rateStepsSetup)
	before := labState(t, inv)

	r, data, exported := runFlent(t, "-H", invPath, "--setup", "steps", "-l", "14", "-d", "1", "rate_steps")
	if strings.Contains(r.stderr, "drained at a median") {
		t.Errorf("the run warned of a slow drain under its schedule:\n%s", r.stderr)
	}
	run, err := datafile.Read(data)
	if err != nil || run.Incomplete {
		t.Fatalf("%s: %v (incomplete %v)", data, err, run != nil && run.Incomplete)
	}
	shaper := run.Samples["shaper server:test0 rate"]
	var seen []float64
	for _, x := range shaper {
		if len(seen) == 0 || seen[len(seen)-1] != x.V {
			seen = append(seen, x.V)
		}
	}
	if want := []float64{40, 20, 5, 40}; !slices.Equal(seen, want) {
		t.Fatalf("the shaper's rate went %v, want %v", seen, want)
	}
	// The drain of each phase of the schedule, a second after its change (a
	// queue built at the faster rate drains first) to its end, from the root
	// qdisc's byte counter.
	bytes := run.Samples["qdisc server:test0 root bytes"]
	t0 := run.Metadata.T0
	for _, p := range []struct {
		from, to, rate float64
	}{{6, 9, 20}, {10, 13, 5}} {
		mbit := e2eutil.DrainMbit(bytes, t0+p.from, t0+p.to)
		t.Logf("%g-%gs: drained at %.2f Mbit/s under a rate of %g", p.from, p.to, mbit, p.rate)
		if mbit > p.rate*1.05 || mbit < p.rate*0.7 {
			t.Errorf("%g-%gs: drained at %.2f Mbit/s, want the schedule's %g", p.from, p.to, mbit, p.rate)
		}
	}
	ours := summaryJSON(t, "--p99", data)
	row, ok := ours["Qdisc server:test0 configured rate"]
	// Over the loaded 1-15 s: 40 for 4 s, 20 for 4, 5 for 4, 40 for 2.
	if want := (4*40 + 4*20 + 4*5 + 2*40) / 14.0; !ok || row.Avg == nil || math.Abs(*row.Avg-want) > 2 || *row.P99 != 40 {
		t.Errorf("configured rate row %+v, want an avg near %.1f and a p99 of 40", row, want)
	}
	theirs := flentSummary(t, "-i", exported)
	if n := sameRows(t, ours, theirs, true); n < 10 {
		t.Errorf("flent and we share %d rows", n)
	}
	for name := range theirs {
		if strings.HasPrefix(name, "shaper ") {
			t.Errorf("the export carries the schedule as a flow of the test: %q", name)
		}
	}
	if now := labState(t, inv); now != before {
		t.Errorf("the lab is not as found:\nbefore\n%s\nafter\n%s", before, now)
	}

	// Killed at 5 Mbit/s: restore puts the device back, as the run left it.
	state := t.TempDir()
	k := startRun(t, []string{"XDG_STATE_HOME=" + state}, "run", "-H", invPath, "--setup", "steps", "-l", "30", "-d", "1", "-o", t.TempDir(), "rate_steps")
	k.waitLog(t, "classic started")
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(roleState(t, inv, "server"), "rate 5Mbit ceil 5Mbit") {
		if time.Now().After(deadline) {
			t.Fatalf("the schedule never set 5 Mbit/s:\n%s\n%s", roleState(t, inv, "server"), k.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	k.cmd.Process.Signal(syscall.SIGKILL)
	k.wait(t)
	j, _ := filepath.Glob(filepath.Join(state, "bloatbench", "journal", "*.json"))
	if len(j) != 1 {
		t.Fatalf("journals after the kill: %v", j)
	}
	rr := bbEnv(t, []string{"XDG_STATE_HOME=" + state}, "restore")
	if rr.err != nil || !strings.Contains(rr.stdout, "restored server:test0") {
		t.Fatalf("restore after a kill mid-schedule: %v\n%s%s", rr.err, rr.stdout, rr.stderr)
	}
	if now := labState(t, inv); now != before {
		t.Errorf("not as found after restore:\nbefore\n%s\nafter\n%s", before, now)
	}
}
