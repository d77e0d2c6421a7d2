package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/tests"
)

// These tests run whole runs with a setup on a fake bottleneck (faketc_test.go):
// server:bbfake0, whose tc answers as a real one did. The controller snapshots it,
// writes its journal and marks, applies the setup, reads it back, records the
// statistics and puts the device back through the real agent's exec, as it does
// on a real host as root; here no root is needed, and nothing of the machine
// changes.

// The inventory's setups use what the recording kernel has (pfifo, bfifo, htb,
// mq); the built-in fq_codel is there to fail as it fails on such a kernel.
const bottleneckInventory = `hosts:
  client: {ssh: "tester@client.invalid", test_ip: 127.0.0.1}
  server: {ssh: "tester@server.invalid", test_ip: 127.0.0.1}
client: client
server: server
bottleneck:
  - {host: server, dev: bbfake0}
setups:
  bfifo: {title: "BFIFO 100000", root: {kind: bfifo, params: {limit: "100000"}}}
  htb+pfifo: {title: "HTB 100mbit + PFIFO", rate: 100mbit, root: {kind: pfifo, params: {limit: "1000"}}}
  mq+bfifo: {title: "MQ + BFIFO", mq: {kind: bfifo, params: {limit: "100000"}}}
  bql: {extends: bfifo, bql: {limit_max: 30000}}
`

// The tc commands of the setups and of putting the lab's tree back, as the fake's
// log has them.
var (
	tcBfifo     = "tc qdisc replace dev bbfake0 root handle 1: bfifo limit 100000"
	tcHTB       = "tc qdisc replace dev bbfake0 root handle 1: htb default 1"
	tcClass     = "tc class replace dev bbfake0 parent 1: classid 1:1 htb rate 100mbit ceil 100mbit"
	tcPfifoLeaf = "tc qdisc replace dev bbfake0 parent 1:1 handle 10: pfifo limit 1000"
	tcMQ        = []string{"tc qdisc replace dev bbfake0 root handle 1: mq", "tc qdisc replace dev bbfake0 parent 1:1 bfifo limit 100000", "tc qdisc replace dev bbfake0 parent 1:2 bfifo limit 100000"}
	tcDelRoot   = "tc qdisc del dev bbfake0 root"
	// tcLabBack puts the local lab's tree (state lab) back from the default.
	tcLabBack = []string{
		"tc qdisc add dev bbfake0 root handle 1: htb default 1 r2q 10 direct_qlen 1000",
		"tc class add dev bbfake0 parent 1: classid 1:1 htb rate 100Mbit ceil 100Mbit burst 1600b cburst 1600b prio 0 quantum 200000",
		"tc qdisc replace dev bbfake0 parent 1:1 handle 10: bfifo limit 300000",
	}
)

// bottleneckRig is a session on fake hosts whose server has a fake bottleneck.
type bottleneckRig struct {
	dev *fakeBottleneck
	o   Options
	log *testLog
	s   *Session
}

// newBottleneckRig connects to fake hosts whose bottleneck is in recorded state
// found, for runs of setup (none when ""): 200 ms of one download stream, 50 ms
// before and after, with the journals and the hosts' marks in folders of the test.
func newBottleneckRig(t *testing.T, found, setup string) *bottleneckRig {
	t.Helper()
	inv, err := inventory.Parse(filepath.Join(t.TempDir(), "hosts.yaml"), []byte(bottleneckInventory))
	if err != nil {
		t.Fatal(err)
	}
	plan := parsePlan(t, `name: one_down
jobs:
  - {name: listen, kind: tcp-listen, host: server, target: server}
  - name: streams
    kind: tcp-streams
    host: client
    connect: listen
    start: delay
    duration: length
    params: {flows: [{direction: download, count: 1}]}
`)
	// The qdisc sampler runs tc itself, not through the agent's exec, and this
	// machine has no bbfake0; the sojourn sampler loads BPF programs (root).
	for _, k := range []string{"qdisc", "sojourn"} {
		if err := plan.RemoveSampler(k); err != nil {
			t.Fatal(err)
		}
	}
	dev := newFakeBottleneck(t, found)
	hosts := newFakeHosts()
	hosts.bottlenecks = map[string]*fakeBottleneck{"server": dev}
	o, log := fakeRun(t, hosts, inv, plan)
	o.Length, o.Delay, o.Step = 200*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	o.JournalDir, o.MarkDir = t.TempDir(), t.TempDir()
	if setup != "" {
		if o.Setup, err = qdisc.Resolve(setup, inv); err != nil {
			t.Fatal(err)
		}
	}
	return &bottleneckRig{dev: dev, o: o, log: log, s: connectFake(t, o)}
}

// journals are the journals in the run's folder.
func (r *bottleneckRig) journals(t *testing.T) []string {
	t.Helper()
	js, err := qdisc.Journals(r.o.JournalDir)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// marks are the marks on the fake hosts (this machine, in the test's folder).
func (r *bottleneckRig) marks(t *testing.T) []string {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(r.o.MarkDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// server is the session's endpoint on the bottleneck's host: what `bloatbench
// restore` runs its commands on, as any qdisc.Runner.
func (r *bottleneckRig) server() *endpoint { return endpointOf(r.s.eps, "server") }

// asFound fails the test unless the device shows what it showed in state found.
func (r *bottleneckRig) asFound(t *testing.T, found string) {
	t.Helper()
	if now := r.dev.state(t); r.dev.shows(t, now) != r.dev.shows(t, found) {
		t.Errorf("the device is in state %s, which tc shows otherwise than state %s, as it was found", now, found)
	}
}

// sameChanges fails the test unless the tc commands that changed the device (or
// were meant to) are want, in order.
func sameChanges(t *testing.T, dev *fakeBottleneck, want []string) {
	t.Helper()
	if got := dev.changes(t); !slices.Equal(got, want) {
		t.Errorf("tc changed the device with\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A run with a setup: the setup goes on before the streams (with the journal and
// the host's mark written first), is read back and recorded with the statistics
// before and after, and the device is put back as found at the end, the journal
// and mark removed.
func TestRunWithSetup(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, found, setup string
		// applied is the state the run leaves the device in while it runs.
		applied        string
		apply, restore []string
	}{
		{name: "bfifo on the default", found: "default", setup: "bfifo", applied: "bfifo",
			apply: []string{tcBfifo}, restore: []string{tcDelRoot}},
		{name: "htb shaping", found: "default", setup: "htb+pfifo", applied: "htb-pfifo",
			apply: []string{tcHTB, tcClass, tcPfifoLeaf}, restore: []string{tcDelRoot}},
		{name: "mq", found: "default", setup: "mq+bfifo", applied: "mq-bfifo",
			apply: tcMQ, restore: []string{tcDelRoot}},
		// The local lab's tree is taken off first (replace cannot make an htb a
		// bfifo) and rebuilt after, exactly: its htb class from the kernel's ticks.
		{name: "bfifo on the lab's tree", found: "lab", setup: "bfifo", applied: "bfifo",
			apply: []string{tcDelRoot, tcBfifo}, restore: slices.Concat([]string{tcDelRoot}, tcLabBack)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newBottleneckRig(t, c.found, c.setup)
			var mu sync.Mutex
			var during struct {
				state           string
				journals, marks int
			}
			r.log.on("streams started", func() {
				mu.Lock()
				defer mu.Unlock()
				during.state, during.journals, during.marks = r.dev.state(t), len(r.journals(t)), len(r.marks(t))
			})
			path, err := r.s.Run(context.Background(), r.o)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			if during.state != c.applied || during.journals != 1 || during.marks != 1 {
				t.Errorf("while the streams ran: the device in state %s, %d journals, %d marks; want state %s, one journal, one mark",
					during.state, during.journals, during.marks, c.applied)
			}
			mu.Unlock()
			sameChanges(t, r.dev, slices.Concat(c.apply, c.restore))
			r.asFound(t, c.found)
			if js, ms := r.journals(t), r.marks(t); len(js)+len(ms) > 0 {
				t.Errorf("journals %v and marks %v left after the device was put back", js, ms)
			}
			// The host's mark goes on before the first change and comes off after
			// the last, so that no change is unmarked.
			cmds := r.dev.commands()
			// A setup's tc commands go to one batch (qdisc.run).
			first := slices.IndexFunc(cmds, func(s string) bool {
				return strings.HasPrefix(s, "tc qdisc replace") || s == tcDelRoot || s == "tc -batch -"
			})
			wrote := slices.IndexFunc(cmds, func(s string) bool { return strings.Contains(s, "mkdir -p") && strings.Contains(s, r.o.MarkDir) })
			removed := slices.IndexFunc(cmds, func(s string) bool { return strings.HasPrefix(s, "rm -f "+r.o.MarkDir) })
			last := -1
			for i, s := range cmds {
				if strings.HasPrefix(s, "tc qdisc") || strings.HasPrefix(s, "tc class") || s == "tc -batch -" {
					last = i
				}
			}
			if wrote < 0 || first < 0 || wrote > first || removed < last {
				t.Errorf("the mark was written at command %d and removed at %d, the device changed from %d to %d: %q", wrote, removed, first, last, cmds)
			}

			run := readRun(t, path)
			if run.Incomplete {
				t.Errorf("the run is incomplete: %s", run.Error)
			}
			su := run.Metadata.Setup
			if su == nil || su.Name != c.setup || len(su.Devices) != 1 {
				t.Fatalf("the data file's setup: %+v", su)
			}
			d := su.Devices[0]
			if d.Host != "server" || d.Dev != fakeDev || !slices.Equal(d.Commands, c.apply) {
				t.Errorf("the data file's setup on %s:%s ran %q, want %q on server:%s", d.Host, d.Dev, d.Commands, c.apply, fakeDev)
			}
			// The read-back is what tc showed with the setup on.
			var back qdisc.State
			if err := json.Unmarshal(d.ReadBack, &back); err != nil {
				t.Fatal(err)
			}
			var shown []qdisc.TCQdisc
			recorded, err := r.dev.rec.show(c.applied, "qdisc.json")
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(recorded, &shown); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Qdiscs, shown) || back.TxQueues != 2 {
				t.Errorf("read back %+v over %d tx queues, tc showed %+v over 2", back.Qdiscs, back.TxQueues, shown)
			}
			// The statistics before and after the run are tc -s -j's of the device
			// as the setup made it.
			stats, err := r.dev.rec.show(c.applied, "qdisc-s.json")
			if err != nil {
				t.Fatal(err)
			}
			var phases []string
			for _, st := range run.States {
				phases = append(phases, st.Phase)
				if st.Host != "server" || st.Dev != fakeDev || !sameJSON(st.TC, stats) {
					t.Errorf("the %s statistics of %s:%s are %s, tc showed %s", st.Phase, st.Host, st.Dev, st.TC, stats)
				}
			}
			if !slices.Equal(phases, []string{"pre", "post"}) {
				t.Errorf("statistics of phases %v, want pre and post", phases)
			}
		})
	}
}

// sameJSON says whether a and b are the same JSON but for spacing.
func sameJSON(a, b []byte) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && bytes.Equal(x.Bytes(), y.Bytes())
}

// Ctrl-C, while the streams run or right after the setup went on: the run ends
// interrupted, and the device goes back as found all the same.
func TestInterruptedRunRestores(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, at string }{
		{"while the streams run", "streams started"},
		{"once the setup is on", "setup htb+pfifo applied on server:" + fakeDev},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newBottleneckRig(t, "lab", "htb+pfifo")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var state string
			r.log.on(c.at, func() {
				state = r.dev.state(t)
				cancel()
			})
			path, err := r.s.Run(ctx, r.o)
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted") || errors.Is(err, ErrNotRestored) {
				t.Fatalf("the run's error: %v; want it interrupted, and the device restored", err)
			}
			if state != "htb-pfifo" {
				t.Errorf("at %q the device was in state %s, not the setup's", c.at, state)
			}
			sameChanges(t, r.dev, slices.Concat([]string{tcDelRoot, tcHTB, tcClass, tcPfifoLeaf, tcDelRoot}, tcLabBack))
			r.asFound(t, "lab")
			if js, ms := r.journals(t), r.marks(t); len(js)+len(ms) > 0 {
				t.Errorf("journals %v and marks %v left after the device was put back", js, ms)
			}
			if run := readRun(t, path); !run.Incomplete || !strings.Contains(run.Error, "interrupted") {
				t.Errorf("data file: incomplete %v, error %q", run.Incomplete, run.Error)
			}
		})
	}
}

// A setup that cannot go on fails the run before it starts, and the device is left
// as found: what went on before the failure comes off again, and nothing is done
// where the setup was refused before any change.
func TestSetupFailsHostAsFound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, found, setup string
		// failOn makes tc fail on that command as it fails without root.
		failOn  string
		changes []string
		wantErr []string
	}{
		{name: "the kernel has no such qdisc", found: "default", setup: "fq_codel",
			changes: []string{"tc qdisc replace dev bbfake0 root handle 1: fq_codel"},
			wantErr: []string{"Specified qdisc kind is unknown", "has no fq_codel qdisc"}},
		{name: "tc refuses the class", found: "default", setup: "htb+pfifo", failOn: tcClass,
			changes: []string{tcHTB, tcClass, tcDelRoot},
			wantErr: []string{"Operation not permitted", "htb rate 100mbit", "needs root"}},
		{name: "tc refuses the leaf on the lab's tree", found: "lab", setup: "htb+pfifo", failOn: tcPfifoLeaf,
			changes: slices.Concat([]string{tcDelRoot, tcHTB, tcClass, tcPfifoLeaf, tcDelRoot}, tcLabBack),
			wantErr: []string{"Operation not permitted", "pfifo limit 1000", "needs root"}},
		{name: "BQL on a device without", found: "default", setup: "bql",
			wantErr: []string{"no byte_queue_limits"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newBottleneckRig(t, c.found, c.setup)
			if c.failOn != "" {
				r.dev.failOn(t, strings.TrimPrefix(c.failOn, "tc "), "not-permitted")
			}
			path, err := r.s.Run(context.Background(), r.o)
			if err == nil {
				t.Fatal("the run succeeded")
			}
			t.Logf("the run's error: %v", err)
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q", w)
				}
			}
			if errors.Is(err, ErrNotRestored) || path != "" {
				t.Errorf("the run failed unrestored (%v) or with a data file %q", errors.Is(err, ErrNotRestored), path)
			}
			sameChanges(t, r.dev, c.changes)
			r.asFound(t, c.found)
			if js, ms := r.journals(t), r.marks(t); len(js)+len(ms) > 0 {
				t.Errorf("journals %v and marks %v left after the device was put back", js, ms)
			}
		})
	}
}

// A restore that fails is the run's error, marked ErrNotRestored and naming the
// journal, which is kept with the host's mark: the next run is refused. Once the
// cause is fixed, `bloatbench restore` (Restore) puts the device back from the
// journal, removes the mark and the journal, and a run may go again.
func TestFailedRestoreKeepsJournal(t *testing.T) {
	t.Parallel()
	r := newBottleneckRig(t, "default", "bfifo")
	r.dev.failOn(t, strings.TrimPrefix(tcDelRoot, "tc "), "not-permitted")
	ctx := context.Background()
	path, err := r.s.Run(ctx, r.o)
	if !errors.Is(err, ErrNotRestored) {
		t.Fatalf("the run's error: %v; want ErrNotRestored", err)
	}
	t.Logf("the run's error: %v", err)
	js := r.journals(t)
	if len(js) != 1 {
		t.Fatalf("journals %v, want the run's", js)
	}
	for _, w := range []string{"Operation not permitted", "bloatbench restore --journal " + js[0]} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error lacks %q", w)
		}
	}
	if run := readRun(t, path); run.Incomplete {
		t.Errorf("the run itself went through, but its file is incomplete: %s", run.Error)
	}
	sameChanges(t, r.dev, []string{tcBfifo, tcDelRoot})
	if s := r.dev.state(t); s != "bfifo" {
		t.Errorf("the device is in state %s, not as the run left it", s)
	}
	j, err := qdisc.LoadJournal(js[0])
	if err != nil {
		t.Fatal(err)
	}
	found, applied := j.States[0], j.AppliedOf("server", fakeDev)
	if len(j.States) != 1 || found.Host != "server" || found.Dev != fakeDev || found.Qdiscs[0].Kind != "noqueue" || applied == nil || applied.Qdiscs[0].Kind != "bfifo" {
		t.Fatalf("the journal holds %+v, applied %+v", j.States, applied)
	}
	ms := r.marks(t)
	marks, err := qdisc.ReadMarks(ctx, r.server(), "server", ms)
	if err != nil || len(marks) != 1 || marks[0].Journal != js[0] {
		t.Fatalf("the host's marks %v: %+v, %v; want one of %s", ms, marks, err, js[0])
	}

	// The next run is refused before it changes anything.
	n := len(r.dev.changes(t))
	if _, err := r.s.Run(ctx, r.o); !errors.Is(err, ErrStaleJournal) || !strings.Contains(err.Error(), js[0]) {
		t.Errorf("the next run: %v; want it refused for %s", err, js[0])
	}
	if got := r.dev.changes(t); len(got) != n {
		t.Errorf("the refused run changed the device: %q", got[n:])
	}

	r.dev.fix(t)
	var out bytes.Buffer
	if err := Restore(ctx, r.o, js, false, &out); err != nil {
		t.Fatalf("restore from the journal: %v", err)
	}
	if want := "restored server:" + fakeDev + " (setup bfifo of "; !strings.HasPrefix(out.String(), want) {
		t.Errorf("restore said %q, want %q...", out.String(), want)
	}
	if js := r.journals(t); len(js) > 0 {
		t.Errorf("journals left after the restore: %v", js)
	}
	sameChanges(t, r.dev, []string{tcBfifo, tcDelRoot, tcDelRoot})
	r.asFound(t, "default")
	if ms := r.marks(t); len(ms) > 0 {
		t.Errorf("marks left: %v", ms)
	}
	if err := r.s.StaleJournals(ctx, r.o); err != nil {
		t.Errorf("restored, a run is still refused: %v", err)
	}
}

// killedRun applies the rig's setup as a run does and leaves it on, as a controller
// killed then leaves it: nothing restores it. It returns the run's journal.
func (r *bottleneckRig) killedRun(t *testing.T) *qdisc.Journal {
	t.Helper()
	ctx := context.Background()
	o := r.o
	o.Plan = &tests.Plan{Test: "one_down"}
	if _, _, err := o.applySetup(ctx, r.s.eps, o.identities(ctx, r.s.eps)); err != nil {
		t.Fatal(err)
	}
	js := r.journals(t)
	if len(js) != 1 {
		t.Fatalf("journals %v", js)
	}
	j, err := qdisc.LoadJournal(js[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.AppliedOf("server", fakeDev) == nil {
		t.Fatal("the journal does not say what the run left")
	}
	return j
}

// rewrite saves journal j again after a test changed it.
func rewrite(t *testing.T, j *qdisc.Journal) {
	t.Helper()
	if err := j.Save(filepath.Dir(j.Path())); err != nil {
		t.Fatal(err)
	}
}

// What `bloatbench restore` (Restore) makes of a journal left by a controller
// killed while its setup was on, depending on what became of the device since.
func TestRestoreFromJournal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// since is the state the device is put in after the controller died ("": as
		// the run left it); noApplied drops the journal's read-back, as a run
		// killed while applying leaves it.
		since     string
		noApplied bool
		force     bool
		// said is how Restore's report on the device begins, and ends is how it
		// ends.
		said, ends string
		// changedSince: restore refuses, and leaves the device alone.
		changedSince bool
		restore      []string
	}{
		{name: "as the run left it", said: "restored server:bbfake0 (setup bfifo of ", ends: ")\n", restore: slices.Concat([]string{tcDelRoot}, tcLabBack)},
		{name: "put back by hand", since: "lab", said: "server:bbfake0 is as setup bfifo of ", ends: "found it already: nothing to do\n"},
		{name: "changed since", since: "mq-bfifo", changedSince: true},
		{name: "changed since, forced", since: "mq-bfifo", force: true, said: "restored server:bbfake0 (setup bfifo of ", ends: "forced: it had been changed since that run left it\n",
			restore: slices.Concat([]string{tcDelRoot}, tcLabBack)},
		{name: "read-back not recorded", noApplied: true, said: "restored server:bbfake0 (setup bfifo of ", ends: ")\n", restore: slices.Concat([]string{tcDelRoot}, tcLabBack)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newBottleneckRig(t, "lab", "bfifo")
			ctx := context.Background()
			j := r.killedRun(t)
			if c.noApplied {
				j.Applied = nil
				rewrite(t, j)
			}
			if c.since != "" {
				r.dev.setState(t, c.since)
			}
			before := r.dev.state(t)
			n := len(r.dev.changes(t))
			var out bytes.Buffer
			err := Restore(ctx, r.o, []string{j.Path()}, c.force, &out)
			if got := r.dev.changes(t)[n:]; !slices.Equal(got, c.restore) {
				t.Errorf("restore ran %q, want %q", got, c.restore)
			}
			if c.changedSince {
				if !errors.Is(err, qdisc.ErrChangedSince) || !strings.Contains(err.Error(), "bloatbench restore --force --journal "+j.Path()) || out.Len() > 0 {
					t.Fatalf("restore: %v, and said %q; want it refused, naming --force", err, out.String())
				}
				if s := r.dev.state(t); s != before {
					t.Errorf("refused, restore left the device in state %s, not %s", s, before)
				}
				if js, ms := r.journals(t), r.marks(t); len(js) != 1 || len(ms) != 1 {
					t.Errorf("refused, restore left journals %v and marks %v; want the run's one of each", js, ms)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if said := out.String(); !strings.HasPrefix(said, c.said) || !strings.HasSuffix(said, c.ends) || strings.Count(said, "\n") != 1 {
				t.Errorf("restore said %q, want %q...%q", said, c.said, c.ends)
			}
			r.asFound(t, "lab")
			if js, ms := r.journals(t), r.marks(t); len(js)+len(ms) > 0 {
				t.Errorf("journals %v and marks %v left after the device was put back", js, ms)
			}
		})
	}
}

// newerJournal writes a journal that a second run, killed like the first, left on
// the rig's device after putting it in state setup: it found the device as the
// first journal's run left it. It goes in a folder of its own, as a controller
// with another journal folder writes it (a run here would be refused).
func (r *bottleneckRig) newerJournal(t *testing.T, older *qdisc.Journal, setup string) *qdisc.Journal {
	t.Helper()
	ctx := context.Background()
	found, err := qdisc.Snapshot(ctx, r.server(), "server", fakeDev)
	if err != nil {
		t.Fatal(err)
	}
	r.dev.setState(t, setup)
	now, err := qdisc.Snapshot(ctx, r.server(), "server", fakeDev)
	if err != nil {
		t.Fatal(err)
	}
	j := qdisc.NewJournal(setup, older.Inventory)
	j.Created = older.Created.Add(time.Second)
	j.Hosts, j.Identities = older.Hosts, older.Identities
	j.States = []*qdisc.State{found}
	j.SetApplied(now)
	if err := j.Save(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	return j
}

// Two runs killed one after the other on one device: the newer is undone first
// (back to the older run's setup), then the older (back as found), whatever order
// the journals are given in. When the newer one cannot be undone, the older one is
// left alone too: what it would put back is not what the device was before the
// newer run.
func TestRestoreNewestFirst(t *testing.T) {
	t.Parallel()
	t.Run("both", func(t *testing.T) {
		t.Parallel()
		r := newBottleneckRig(t, "lab", "bfifo")
		older := r.killedRun(t)
		newer := r.newerJournal(t, older, "mq-bfifo")
		n := len(r.dev.changes(t))
		var out bytes.Buffer
		if err := Restore(context.Background(), r.o, []string{older.Path(), newer.Path()}, false, &out); err != nil {
			t.Fatal(err)
		}
		if got, want := r.dev.changes(t)[n:], slices.Concat([]string{tcDelRoot, "tc qdisc add dev bbfake0 root handle 1: bfifo limit 100000", tcDelRoot}, tcLabBack); !slices.Equal(got, want) {
			t.Errorf("restore ran\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		said := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(said) != 2 || !strings.HasPrefix(said[0], "restored server:bbfake0 (setup mq-bfifo of ") || !strings.HasPrefix(said[1], "restored server:bbfake0 (setup bfifo of ") {
			t.Errorf("restore said %q; want the newer run's setup restored, then the older's", said)
		}
		r.asFound(t, "lab")
		for _, j := range []*qdisc.Journal{older, newer} {
			if _, err := qdisc.LoadJournal(j.Path()); err == nil {
				t.Errorf("journal %s is left after its device was put back", j.Path())
			}
		}
	})
	t.Run("the newer changed since", func(t *testing.T) {
		t.Parallel()
		r := newBottleneckRig(t, "lab", "bfifo")
		older := r.killedRun(t)
		newer := r.newerJournal(t, older, "mq-bfifo")
		r.dev.setState(t, "htb-pfifo")
		n := len(r.dev.changes(t))
		var out bytes.Buffer
		err := Restore(context.Background(), r.o, []string{older.Path(), newer.Path()}, false, &out)
		if !errors.Is(err, qdisc.ErrChangedSince) || !strings.Contains(err.Error(), newer.Path()) ||
			!strings.Contains(err.Error(), "a newer journal for it was not restored (above); journal "+older.Path()) {
			t.Errorf("restore: %v; want the newer journal's device refused, and the older's left for it", err)
		}
		if got := r.dev.changes(t)[n:]; len(got) > 0 || out.Len() > 0 {
			t.Errorf("restore ran %q and said %q; want the device left alone", got, out.String())
		}
		for _, j := range []*qdisc.Journal{older, newer} {
			if k, err := qdisc.LoadJournal(j.Path()); err != nil || len(k.States) != 1 {
				t.Errorf("journal %s: %v; want it kept as it was", j.Path(), err)
			}
		}
	})
}

// A restore is refused, leaving the device and the journal alone: while a run (or
// another restore) holds the device, naming it; and on another machine than the one
// the journal was written on, now at the host's address, unless forced.
func TestRestoreRefused(t *testing.T) {
	t.Parallel()
	t.Run("device busy", func(t *testing.T) {
		t.Parallel()
		r := newBottleneckRig(t, "lab", "bfifo")
		j := r.killedRun(t)
		l, err := qdisc.LockDeviceOf(r.o.JournalDir, "server", j.Identities["server"], fakeDev, "run of setup mq+bfifo")
		if err != nil {
			t.Fatal(err)
		}
		n := len(r.dev.changes(t))
		err = Restore(context.Background(), r.o, []string{j.Path()}, false, io.Discard)
		l.Unlock()
		if !errors.Is(err, qdisc.ErrBusy) || !strings.Contains(err.Error(), "run of setup mq+bfifo") {
			t.Errorf("restore while a run holds the device: %v; want it refused, naming the run", err)
		}
		if got := r.dev.changes(t)[n:]; len(got) > 0 {
			t.Errorf("restore ran %q on a busy device", got)
		}
		if js := r.journals(t); len(js) != 1 {
			t.Errorf("journals %v; want the run's kept", js)
		}
	})
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("another machine, force %v", force), func(t *testing.T) {
			t.Parallel()
			r := newBottleneckRig(t, "lab", "bfifo")
			j := r.killedRun(t)
			id := j.Identities["server"]
			id.ID = "0123456789abcdef0123456789abcdef net:[4026531840]"
			j.Identities["server"] = id
			rewrite(t, j)
			n := len(r.dev.changes(t))
			var out bytes.Buffer
			err := Restore(context.Background(), r.o, []string{j.Path()}, force, &out)
			got := r.dev.changes(t)[n:]
			if force {
				if err != nil || !slices.Equal(got, slices.Concat([]string{tcDelRoot}, tcLabBack)) {
					t.Errorf("forced: %v, ran %q; want the device put back", err, got)
				}
				return
			}
			if !errors.Is(err, qdisc.ErrChangedSince) || !strings.Contains(err.Error(), "another machine (or network namespace) is at its address") {
				t.Errorf("restore on another machine: %v; want it refused", err)
			}
			if len(got) > 0 || out.Len() > 0 {
				t.Errorf("restore ran %q and said %q on another machine", got, out.String())
			}
			if js := r.journals(t); len(js) != 1 {
				t.Errorf("journals %v; want the run's kept", js)
			}
		})
	}
}
