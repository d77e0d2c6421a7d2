package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bloatbench/bloatbench/agent"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/remote"
)

// A fake bottleneck: a device that tc and ethtool answer for from what the real
// ones printed (testdata/faketc, recorded by its record.sh on a veth with two tx
// queues), so that a run applies, reads back and restores setups through the real
// controller, agent and qdisc code with no root and nothing on the machine changed.
//
// The server's agent runs its commands through fakeBottleneck.exec: with sh, as the
// real agent does, but with the fake's tc, ethtool and ip first on PATH, and the
// device's /sys/class/net and /proc/net/psched under a directory of the fake's own.
// The device's state is the name of a recorded state. What a change does is
// decided here, from the recordings, into a table (transitions): a command that
// the recordings take from the current state to another moves it there, a recorded
// failure fails as it was recorded, and anything else fails, naming what to
// record. The tools are shell scripts that look the table and the recorded output
// up, not this test binary run again as a tool (as hostfacts' tests run theirs): a
// start of a test binary of 14 MB costs three times a script's CPU, a snapshot
// runs tc three times or more, and the runs' tests took twice as long so.

// fakeDev is the recorded device's name; the fake's device has it too.
const fakeDev = "bbfake0"

// recordings are what testdata/faketc holds: the states by name, and the failures.
type recordings struct {
	dir    string
	states map[string]recordedState
	// byCommands finds a state by its commands, joined by newlines.
	byCommands map[string]string
	failures   map[string]recordedFailure
}

// recordedState is a state of the device and what tc showed in it.
type recordedState struct {
	name string
	// commands are the tc commands (without "tc") that made it from the default.
	commands []string
	// stderr is what the last of them printed (htb warns of a big quantum).
	stderr string
}

// recordedFailure is a command that failed in a state, as it failed.
type recordedFailure struct {
	state, command, stderr string
	exit                   int
	// asNobody: it failed for want of root, which no state of the device says,
	// so the fake fails so only where a test asks (failOn).
	asNobody bool
}

func loadRecordings(dir string) (*recordings, error) {
	r := &recordings{dir: dir, states: map[string]recordedState{}, byCommands: map[string]string{}, failures: map[string]recordedFailure{}}
	read := func(parts ...string) (string, error) {
		b, err := os.ReadFile(filepath.Join(append([]string{dir}, parts...)...))
		return string(b), err
	}
	states, err := os.ReadDir(filepath.Join(dir, "states"))
	if err != nil {
		return nil, fmt.Errorf("the fake tc's recordings: %w", err)
	}
	for _, e := range states {
		cmds, err := read("states", e.Name(), "commands")
		if err != nil {
			return nil, err
		}
		stderr, err := read("states", e.Name(), "stderr")
		if err != nil {
			return nil, err
		}
		st := recordedState{name: e.Name(), commands: lines(cmds), stderr: stderr}
		k := strings.Join(st.commands, "\n")
		if other, ok := r.byCommands[k]; ok {
			return nil, fmt.Errorf("recorded states %s and %s have the same commands", other, e.Name())
		}
		r.states[e.Name()], r.byCommands[k] = st, e.Name()
	}
	failures, err := os.ReadDir(filepath.Join(dir, "failures"))
	if err != nil {
		return nil, fmt.Errorf("the fake tc's recordings: %w", err)
	}
	for _, e := range failures {
		var f recordedFailure
		var exit, as string
		for _, p := range []struct {
			file string
			to   *string
		}{{"state", &f.state}, {"command", &f.command}, {"stderr", &f.stderr}, {"exit", &exit}, {"as", &as}} {
			if *p.to, err = read("failures", e.Name(), p.file); err != nil {
				return nil, err
			}
		}
		f.state, f.command, f.asNobody = strings.TrimSpace(f.state), strings.TrimSpace(f.command), strings.TrimSpace(as) == "nobody"
		if f.exit, err = strconv.Atoi(strings.TrimSpace(exit)); err != nil {
			return nil, fmt.Errorf("failure %s: exit: %w", e.Name(), err)
		}
		r.failures[e.Name()] = f
	}
	return r, nil
}

// lines are s's non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// show is a file of what tc printed in state name: qdisc.json (tc -j qdisc show),
// qdisc-s.json (tc -s -j), qdisc.txt, class.txt, class-d.txt (tc -d -raw class show).
func (r *recordings) show(name, file string) ([]byte, error) {
	return os.ReadFile(filepath.Join(r.dir, "states", name, file))
}

// transitions is the fake tc's table, one row a line: from a state, a command
// (tc's words) leads to a state and prints a recorded stderr (a file of the
// recordings, "" for none) with an exit status. The first row that matches is
// taken. From is "*" for any state and to "*" for the state kept.
func (r *recordings) transitions() string {
	var b strings.Builder
	row := func(from, cmd, to, stderr string, exit int) {
		fmt.Fprintf(&b, "%s|%s|%s|%s|%d\n", from, cmd, to, stderr, exit)
	}
	for _, name := range slices.Sorted(maps.Keys(r.failures)) {
		// One for want of root fails only where a test makes it (failOn).
		if f := r.failures[name]; !f.asNobody {
			row(f.state, f.command, f.state, "failures/"+name+"/stderr", f.exit)
		}
	}
	def := r.byCommands[""]
	for _, from := range slices.Sorted(maps.Keys(r.states)) {
		cmds := r.states[from].commands
		for _, to := range slices.Sorted(maps.Keys(r.states)) {
			next := r.states[to]
			if len(next.commands) == len(cmds)+1 && slices.Equal(next.commands[:len(cmds)], cmds) {
				stderr := ""
				if next.stderr != "" {
					stderr = "states/" + to + "/stderr"
				}
				row(from, next.commands[len(cmds)], to, stderr, 0)
			}
		}
		// Deleting the root gives the kernel's default back, whatever was there,
		// silently (from the default itself, a recorded failure answers).
		if from != def {
			row(from, "qdisc del dev "+fakeDev+" root", def, "", 0)
		}
	}
	return b.String()
}

// The fake's tools; each logs its words in the order run (tools.log). %[1]s is the
// fake's directory, %[2]s the recordings', %[3]s the device.
const (
	fakeTCScript = `#!/bin/sh
# The fake bottleneck's tc (controller/faketc_test.go).
dir=%[1]s rec=%[2]s dev=%[3]s
printf 'tc %%s\n' "$*" >>"$dir/tools.log"
read -r state <"$dir/state"
show() { exec cat "$rec/states/$state/$1"; }
# change runs one changing command ($1, its words) on the device: the first row of
# the injected failures, then of the transitions, that has it from this state.
change() {
	for table in "$dir/inject" "$dir/transitions"; do
		[ -f "$table" ] || continue
		while IFS='|' read -r from cmd to stderr status; do
			if [ "$from" != "$state" ] && [ "$from" != "*" ] || [ "$cmd" != "$1" ]; then
				continue
			fi
			if [ "$to" != "*" ]; then
				echo "$to" >"$dir/state.new" && mv "$dir/state.new" "$dir/state"
				state=$to
			fi
			[ -z "$stderr" ] || cat "$rec/$stderr" >&2
			return "$status"
		done <"$table"
	done
	echo "fake tc: no recording of $dev in state $state after \"tc $1\": add it to testdata/faketc/record.sh" >&2
	return 99
}
case "$*" in
"-j qdisc show dev $dev") show qdisc.json ;;
"-s -j qdisc show dev $dev") show qdisc-s.json ;;
"qdisc show dev $dev") show qdisc.txt ;;
"class show dev $dev") show class.txt ;;
"-d -raw class show dev $dev") show class-d.txt ;;
# record.sh checks that no recorded state has filters: tc lists none.
"filter show dev $dev parent "*) exit 0 ;;
"-j -batch -")
	while read -r line; do
		case $line in
		"filter show dev $dev parent "*) echo "[]" ;;
		*)
			echo "fake tc: \"$line\" in a batch is not modelled" >&2
			exit 99
			;;
		esac
	done
	exit 0
	;;
"-batch -")
	# As tc's: the lines in order, stopping at the first that fails, which it
	# names after its error.
	n=0
	while IFS= read -r line; do
		n=$((n + 1))
		printf 'tc %%s\n' "$line" >>"$dir/tools.log"
		case $line in
		"qdisc "* | "class "*) change "$line" || { echo "Command failed -:$n" >&2; exit 1; } ;;
		*)
			echo "fake tc: \"$line\" in a batch is not modelled" >&2
			echo "Command failed -:$n" >&2
			exit 1
			;;
		esac
	done
	exit 0
	;;
"qdisc "* | "class "*) ;;
*)
	echo "fake tc: \"tc $*\" is not modelled" >&2
	exit 99
	;;
esac
change "$*"
exit
`
	fakeEthtoolScript = `#!/bin/sh
# The fake bottleneck's ethtool (controller/faketc_test.go): what it shows.
dir=%[1]s rec=%[2]s dev=%[3]s
printf 'ethtool %%s\n' "$*" >>"$dir/tools.log"
case "$*" in
"-k $dev") exec cat "$rec/ethtool-k.txt" ;;
"-l $dev") exec cat "$rec/ethtool-l.txt" ;;
esac
echo "fake ethtool: \"ethtool $*\" is not modelled" >&2
exit 99
`
	// ip is there so that no command of the fake host reaches the real one (an
	// ingress setup's IFB); none is modelled.
	fakeIPScript = `#!/bin/sh
dir=%[1]s
printf 'ip %%s\n' "$*" >>"$dir/tools.log"
echo "fake ip: \"ip $*\" is not modelled" >&2
exit 99
`
)

// fakeBottleneck is one host's fake device, and what its host was asked to run.
type fakeBottleneck struct {
	rec *recordings
	// dir holds the tools (bin/), the device's sysfs and psched (root/), its state,
	// the table of transitions, an injected failure and the tools' log.
	dir string

	mu   sync.Mutex
	cmds []string
}

// newFakeBottleneck makes a fake device in state found (a recorded state's name).
func newFakeBottleneck(t *testing.T, found string) *fakeBottleneck {
	t.Helper()
	testdata, err := filepath.Abs(filepath.Join("testdata", "faketc"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := loadRecordings(testdata)
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: the directory goes into shell commands as they were quoted
	// for the real paths, so it must need no quoting itself.
	dir, err := os.MkdirTemp("", "bbfake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if remote.Quote(dir) != dir {
		t.Fatalf("the fake's directory %s would need quoting in a shell command", dir)
	}
	b := &fakeBottleneck{rec: rec, dir: dir}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "transitions"), []byte(rec.transitions()), 0o600))
	must(os.MkdirAll(filepath.Join(dir, "bin"), 0o700))
	for tool, script := range map[string]string{"tc": fakeTCScript, "ethtool": fakeEthtoolScript, "ip": fakeIPScript} {
		text := fmt.Sprintf(script, dir, remote.Quote(testdata), fakeDev)
		must(os.WriteFile(filepath.Join(dir, "bin", tool), []byte(text), 0o700))
	}
	// The recorded veth's queues: two each way, no byte_queue_limits.
	for _, q := range []string{"tx-0", "tx-1", "rx-0", "rx-1"} {
		must(os.MkdirAll(filepath.Join(b.root(), "sys/class/net", fakeDev, "queues", q), 0o700))
	}
	psched, err := os.ReadFile(filepath.Join(testdata, "psched"))
	must(err)
	must(os.MkdirAll(filepath.Join(b.root(), "proc/net"), 0o700))
	must(os.WriteFile(filepath.Join(b.root(), "proc/net/psched"), psched, 0o600))
	must(os.MkdirAll(filepath.Join(b.root(), "sys/devices/system/cpu"), 0o700))
	must(os.WriteFile(filepath.Join(b.root(), "sys/devices/system/cpu/possible"), []byte("0-1\n"), 0o600))
	b.setState(t, found)
	return b
}

func (b *fakeBottleneck) root() string { return filepath.Join(b.dir, "root") }

// setState puts the device in a recorded state, as a person with tc would.
func (b *fakeBottleneck) setState(t *testing.T, name string) {
	t.Helper()
	if _, ok := b.rec.states[name]; !ok {
		t.Fatalf("no recorded state %q", name)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "state"), []byte(name+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// state is the device's recorded state now.
func (b *fakeBottleneck) state(t *testing.T) string {
	t.Helper()
	s, err := os.ReadFile(filepath.Join(b.dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(s))
}

// shows is what tc shows of the device in state name: two states that show the
// same are one to the kernel (the lab's tree, and the same tree put back).
func (b *fakeBottleneck) shows(t *testing.T, name string) string {
	t.Helper()
	var all []string
	for _, f := range []string{"qdisc.json", "qdisc.txt", "class.txt", "class-d.txt"} {
		out, err := b.rec.show(name, f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, string(out))
	}
	return strings.Join(all, "\n")
}

// failOn makes tc fail on command (its words after "tc") as the recorded failure
// as failed, in any state, until fixed: the test's choice of command, with the
// words real tc printed.
func (b *fakeBottleneck) failOn(t *testing.T, command, as string) {
	t.Helper()
	f, ok := b.rec.failures[as]
	if !ok {
		t.Fatalf("no recorded failure %q", as)
	}
	row := fmt.Sprintf("*|%s|*|failures/%s/stderr|%d\n", command, as, f.exit)
	if err := os.WriteFile(filepath.Join(b.dir, "inject"), []byte(row), 0o600); err != nil {
		t.Fatal(err)
	}
}

// fix takes the injected failure away.
func (b *fakeBottleneck) fix(t *testing.T) {
	t.Helper()
	if err := os.Remove(filepath.Join(b.dir, "inject")); err != nil {
		t.Fatal(err)
	}
}

// changes are the tc commands that change the device (or were meant to), in the
// order the tools were run, as "tc ..." lines.
func (b *fakeBottleneck) changes(t *testing.T) []string {
	t.Helper()
	out, err := os.ReadFile(filepath.Join(b.dir, "tools.log"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var ch []string
	for _, l := range lines(string(out)) {
		f := strings.Fields(l)
		if f[0] == "tc" && len(f) > 2 && (f[1] == "qdisc" || f[1] == "class") && f[2] != "show" {
			ch = append(ch, l)
		}
	}
	return ch
}

// commands are the shell commands the host's agent was given, as given.
func (b *fakeBottleneck) commands() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.cmds)
}

// sandboxed are the paths of the host the fake has a copy of: the device's sysfs,
// under which a setup's BQL writes go too, tc's clock, and the CPUs an XPS
// mask spans.
var sandboxed = []string{"/sys/class/net/", "/proc/net/psched", "/sys/devices/system/cpu/possible"}

// exec is the fake host's agent.Server.Exec: the command as the real agent runs
// it, with the fake's tools first on PATH and the sandboxed paths in its directory.
// A command that would touch any other path of /sys or /proc is refused: the fake
// host changes nothing of this machine, run as root or not.
func (b *fakeBottleneck) exec(ctx context.Context, spec agent.ExecSpec) *agent.ExecResult {
	b.mu.Lock()
	b.cmds = append(b.cmds, spec.Cmd)
	b.mu.Unlock()
	cmd, rest := spec.Cmd, spec.Cmd
	for _, p := range sandboxed {
		cmd = strings.ReplaceAll(cmd, p, b.root()+p)
		rest = strings.ReplaceAll(rest, p, "")
	}
	if strings.Contains(rest, "/sys/") || strings.Contains(rest, "/proc/") {
		return &agent.ExecResult{Exit: 126, Stderr: []byte("fake host: the command reads or writes /sys or /proc beyond the fake device's: " + spec.Cmd)}
	}
	spec.Cmd = "export PATH=" + remote.Quote(filepath.Join(b.dir, "bin")) + `:"$PATH"` + "\n" + cmd
	return agent.Execute(ctx, spec)
}

// execRunner runs commands through an agent.Server's Exec, as a qdisc.Runner: the
// fake's own tests need no agent around it.
type execRunner func(ctx context.Context, spec agent.ExecSpec) *agent.ExecResult

func (r execRunner) Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	spec := agent.ExecSpec{Cmd: cmd, Timeout: 30}
	if stdin != nil {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, err
		}
		spec.Stdin = b
	}
	res := r(ctx, spec)
	if res.Exit != 0 {
		return res.Stdout, fmt.Errorf("%s: exit status %d: %s", cmd, res.Exit, strings.TrimSpace(string(res.Stderr)))
	}
	return res.Stdout, nil
}

// The fake tc answers as the real one did: every recorded state is reached by its
// commands from the default and shows what was recorded, each recorded failure
// fails as it did, and what was not recorded fails saying so, the state unchanged.
// The host's commands see the fake's device alone.
func TestFakeTCAsRecorded(t *testing.T) {
	t.Parallel()
	b := newFakeBottleneck(t, "default")
	ctx := context.Background()
	run := func(words ...string) *agent.ExecResult {
		return b.exec(ctx, agent.ExecSpec{Cmd: remote.Command(words...), Timeout: 30})
	}
	for _, name := range slices.Sorted(maps.Keys(b.rec.states)) {
		st := b.rec.states[name]
		var last *agent.ExecResult
		for _, c := range st.commands {
			if last = run(append([]string{"tc"}, strings.Fields(c)...)...); last.Exit != 0 {
				t.Fatalf("state %s: tc %s: exit %d: %s", name, c, last.Exit, last.Stderr)
			}
		}
		if got := b.state(t); got != name {
			t.Errorf("state %s's commands led to state %s", name, got)
		}
		if last != nil && string(last.Stderr) != st.stderr {
			t.Errorf("state %s: the last command printed %q, recorded %q", name, last.Stderr, st.stderr)
		}
		for show, file := range map[string]string{"-j qdisc show": "qdisc.json", "-s -j qdisc show": "qdisc-s.json", "qdisc show": "qdisc.txt",
			"class show": "class.txt", "-d -raw class show": "class-d.txt"} {
			got := run(append(append([]string{"tc"}, strings.Fields(show)...), "dev", fakeDev)...)
			want, err := b.rec.show(name, file)
			if err != nil {
				t.Fatal(err)
			}
			if got.Exit != 0 || string(got.Stdout) != string(want) {
				t.Errorf("state %s: tc %s: exit %d, %q; recorded %q", name, show, got.Exit, got.Stdout, want)
			}
		}
		if name != "default" {
			if r := run("tc", "qdisc", "del", "dev", fakeDev, "root"); r.Exit != 0 || b.state(t) != "default" {
				t.Errorf("state %s: deleting the root: exit %d %s, state %s", name, r.Exit, r.Stderr, b.state(t))
			}
		}
	}
	for name, f := range b.rec.failures {
		if f.asNobody {
			b.failOn(t, f.command, name)
		}
		b.setState(t, f.state)
		r := run(append([]string{"tc"}, strings.Fields(f.command)...)...)
		if r.Exit != f.exit || string(r.Stderr) != f.stderr || b.state(t) != f.state {
			t.Errorf("failure %s: exit %d %q, state %s; recorded exit %d %q in state %s", name, r.Exit, r.Stderr, b.state(t), f.exit, f.stderr, f.state)
		}
		if f.asNobody {
			b.fix(t)
		}
	}
	b.setState(t, "bfifo")
	r := run("tc", "qdisc", "replace", "dev", fakeDev, "root", "handle", "1:", "pfifo", "limit", "7")
	if r.Exit != 99 || !strings.Contains(string(r.Stderr), "record.sh") || b.state(t) != "bfifo" {
		t.Errorf("a change not recorded: exit %d %q, state %s", r.Exit, r.Stderr, b.state(t))
	}
	b.failOn(t, "qdisc del dev "+fakeDev+" root", "not-permitted")
	if r := run("tc", "qdisc", "del", "dev", fakeDev, "root"); r.Exit != 2 || string(r.Stderr) != b.rec.failures["not-permitted"].stderr || b.state(t) != "bfifo" {
		t.Errorf("the injected failure: exit %d %q, state %s", r.Exit, r.Stderr, b.state(t))
	}
	b.fix(t)
	if r := run("tc", "qdisc", "del", "dev", fakeDev, "root"); r.Exit != 0 || b.state(t) != "default" {
		t.Errorf("fixed: exit %d %q, state %s", r.Exit, r.Stderr, b.state(t))
	}
	// The host's commands see the fake's device and clock alone.
	qdiscs, err := b.rec.show("default", "qdisc.json")
	if err != nil {
		t.Fatal(err)
	}
	psched, err := os.ReadFile(filepath.Join(b.rec.dir, "psched"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd  string
		exit int
		out  string
	}{
		{cmd: "tc -j qdisc show dev " + fakeDev, out: string(qdiscs)},
		{cmd: "cat /proc/net/psched", out: string(psched)},
		{cmd: "test -d /sys/class/net/" + fakeDev + "/queues/tx-1"},
		{cmd: "test -d /sys/class/net/lo", exit: 1},
		{cmd: "cat /proc/sys/net/core/default_qdisc", exit: 126},
		{cmd: "ip link del dev ifb4" + fakeDev, exit: 99},
	} {
		if r := b.exec(ctx, agent.ExecSpec{Cmd: c.cmd, Timeout: 30}); r.Exit != c.exit || string(r.Stdout) != c.out {
			t.Errorf("%s: exit %d %q (%s), want %d %q", c.cmd, r.Exit, r.Stdout, r.Stderr, c.exit, c.out)
		}
	}
}

// What qdisc reads of the fake is the recorded device, and what it would put the
// lab's tree back with is what record.sh recorded as the tree put back (state
// lab-restored): when qdisc's restore changes its commands, the recordings must be
// made again.
func TestFakeSnapshot(t *testing.T) {
	t.Parallel()
	b := newFakeBottleneck(t, "lab")
	st, err := qdisc.Snapshot(context.Background(), execRunner(b.exec), "server", fakeDev)
	if err != nil {
		t.Fatal(err)
	}
	if st.TxQueues != 2 || len(st.BQL) != 0 || st.TickInUsec != 15.625 || fmt.Sprint(st.Channels) != "map[rx:2 tx:2]" || st.Offloads["gso"] != "on" {
		t.Errorf("device: %d tx queues, BQL %v, tick %v, channels %v, offloads %v", st.TxQueues, st.BQL, st.TickInUsec, st.Channels, st.Offloads)
	}
	if q := st.Qdiscs; len(q) != 2 || q[0].Kind != "htb" || q[0].Handle != "1:" || !q[0].Root ||
		q[1].Kind != "bfifo" || q[1].Handle != "10:" || q[1].Parent != "1:1" || string(q[1].Options) != `{"limit":300000}` {
		t.Errorf("qdiscs %+v", q)
	}
	if len(st.Classes) != 1 || st.Classes[0].Rate != "100Mbit" || st.Classes[0].Buffer != 2000 {
		t.Errorf("classes %+v", st.Classes)
	}
	ops, err := st.RestoreOps()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range ops {
		if o.Argv[0] == "tc" {
			got = append(got, o.Shell())
		}
	}
	want := []string{"tc qdisc del dev " + fakeDev + " root"}
	for _, c := range b.rec.states["lab-restored"].commands {
		want = append(want, "tc "+c)
	}
	if !slices.Equal(got, want) {
		t.Errorf("restore's tc commands\n%s\nrecorded as\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
