package qdisc

// Applying a setup, verifying it by reading it back, and restoring a device: the
// operations run on a host, in order, with errors that say what to do.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/bloatbench/bloatbench/remote"
)

// run runs ops in order, stopping at the first failure. Consecutive tc commands
// go to one `tc -batch -` (see runBatch), consecutive sysfs writes to one shell
// (see runWrites); the others run one a process.
func run(ctx context.Context, r Runner, host string, ops []Op) ([]string, error) {
	var done []string
	for i := 0; i < len(ops); {
		opts, _, ok := tcLine(ops[i])
		j := i + 1
		for ok && j < len(ops) {
			o, _, same := tcLine(ops[j])
			if !same || !slices.Equal(o, opts) {
				break
			}
			j++
		}
		if j-i > 1 {
			d, err := runBatch(ctx, r, host, opts, ops[i:j])
			done = append(done, d...)
			if err != nil {
				return done, err
			}
			i = j
			continue
		}
		for j < len(ops) && isWrite(ops[i]) && isWrite(ops[j]) {
			j++
		}
		if j-i > 1 {
			d, n, err := runWrites(ctx, r, ops[i:j])
			done = append(done, d...)
			if err == nil {
				i = j
				continue
			}
			if n < 0 {
				return done, explain(host, writesOp(ops[i:j]), err)
			}
			// The write that failed runs again alone, below, so that its error is
			// tee's own, with explain's advice; the writes after it are not tried.
			i += n
		}
		o := ops[i]
		var stdin io.Reader
		if o.Stdin != "" {
			stdin = strings.NewReader(o.Stdin + "\n")
		}
		if _, err := r.Output(ctx, o.run(), stdin); err != nil {
			return done, explain(host, o, err)
		}
		done = append(done, o.Shell())
		i++
	}
	return done, nil
}

// tcLine splits a tc command into the options before its object (none, or -n and
// a namespace) and the line a batch would hold; ok is false for any other command,
// and for one with a word tc's batch reader would split, unquote or cut short
// (white space, quotes, a backslash, '#'), which then runs alone as typed.
func tcLine(o Op) (opts []string, line string, ok bool) {
	a := o.Argv
	if o.Stdin != "" || len(a) < 2 || a[0] != "tc" {
		return nil, "", false
	}
	i := 1
	if a[1] == "-n" && len(a) > 3 {
		i = 3
	}
	switch a[i] {
	case "qdisc", "class", "filter":
	default:
		return nil, "", false
	}
	for _, w := range a[1:] {
		if w == "" || strings.ContainsAny(w, " \t\n\r\v\f\"'\\#") {
			return nil, "", false
		}
	}
	return a[1:i], strings.Join(a[i:], " "), true
}

var batchFailedRE = regexp.MustCompile(`(?m)^Command failed -:(\d+)\s*$`)

// runBatch runs tc commands through one `tc -batch -`: a process start is 0.1-0.2 s
// of an emulated guest's CPU under load (a setup of mq and four children was five),
// and a large htb tree is dozens. tc stops at the first command that fails and
// names its line ("Command failed -:3"): the commands before it are done, and the
// error is that command's, as if it had run alone. A batch that fails without
// naming a line (tc missing, killed, timed out) counts none of its commands done,
// and its error names the batch.
func runBatch(ctx context.Context, r Runner, host string, opts []string, ops []Op) ([]string, error) {
	var in strings.Builder
	for _, o := range ops {
		_, line, _ := tcLine(o)
		in.WriteString(line + "\n")
	}
	batch := Op{Argv: append(append([]string{"tc"}, opts...), "-batch", "-")}
	var done []string
	_, err := r.Output(ctx, batch.run(), strings.NewReader(in.String()))
	if err == nil {
		for _, o := range ops {
			done = append(done, o.Shell())
		}
		return done, nil
	}
	msg := err.Error()
	n := 0
	if m := batchFailedRE.FindStringSubmatch(msg); m != nil {
		n, _ = strconv.Atoi(m[1])
	}
	if n < 1 || n > len(ops) {
		return nil, explain(host, batch, err)
	}
	for _, o := range ops[:n-1] {
		done = append(done, o.Shell())
	}
	failed := ops[n-1]
	msg = strings.TrimSpace(batchFailedRE.ReplaceAllString(msg, ""))
	msg = strings.Replace(msg, batch.run(), failed.run(), 1)
	return done, explain(host, failed, errors.New(msg))
}

// isWrite says o writes one line to a file (a BQL limit under sysfs): `tee FILE`
// with its stdin.
func isWrite(o Op) bool {
	return len(o.Argv) == 2 && o.Argv[0] == "tee" && o.Stdin != "" && !strings.ContainsAny(o.Stdin, "\n\x00")
}

// writesScript writes each pair of its arguments (a file, then its line) in
// order, with the shell's own redirection, and stops at the first that fails,
// naming it by number on stderr.
const writesScript = `n=0
while [ $# -gt 1 ]; do
  n=$((n + 1))
  printf '%s\n' "$2" > "$1" || { echo "` + writeFailed + ` $n" >&2; exit 1; }
  shift 2
done`

const writeFailed = "bloatbench: write failed:"

// writesOp is the one command that makes the writes ops.
func writesOp(ops []Op) Op {
	args := []string{"sh", "-c", writesScript, "sh"}
	for _, o := range ops {
		args = append(args, o.Argv[1], o.Stdin)
	}
	return Op{Argv: args}
}

var writeFailedRE = regexp.MustCompile(writeFailed + ` (\d+)`)

// runWrites makes sysfs writes (BQL's limit_max and limit_min of every tx queue,
// eight a device to restore on a four-queue NIC) in one shell: each tee was a
// process and a round trip, 60-80 ms of an emulated guest's CPU. It returns the
// writes done; n is the index of the one that failed, or -1 when the shell failed
// without naming one (none counts as done then).
func runWrites(ctx context.Context, r Runner, ops []Op) (done []string, n int, err error) {
	_, err = r.Output(ctx, writesOp(ops).run(), nil)
	if err == nil {
		for _, o := range ops {
			done = append(done, o.Shell())
		}
		return done, len(ops), nil
	}
	m := writeFailedRE.FindStringSubmatch(err.Error())
	if m == nil {
		return nil, -1, err
	}
	k, _ := strconv.Atoi(m[1])
	if k < 1 || k > len(ops) {
		return nil, -1, err
	}
	for _, o := range ops[:k-1] {
		done = append(done, o.Shell())
	}
	return done, k - 1, err
}

var unknownQdiscRE = regexp.MustCompile(`Unknown qdisc "([^"]+)"`)

// tcKind finds the qdisc or class kind in a tc command line: the first word after
// the device that is not root, parent X, handle X or classid X.
func tcKind(argv []string) string {
	if len(argv) == 0 || argv[0] != "tc" {
		return ""
	}
	i := 0
	for i < len(argv) && argv[i] != "dev" {
		i++
	}
	for i += 2; i < len(argv); i++ {
		switch argv[i] {
		case "root":
		case "parent", "handle", "classid":
			i++
		default:
			return argv[i]
		}
	}
	return ""
}

// explain turns tc's and the kernel's words into what to do.
func explain(host string, o Op, err error) error {
	msg := err.Error()
	kind := tcKind(o.Argv)
	var hint string
	switch {
	// The kernel's refusal first: the words a parameter error has below can be
	// in the rest of the message too (a test host's name ends in ".invalid").
	case strings.Contains(msg, "Operation not permitted"):
		hint = "it needs root (CAP_NET_ADMIN) on the host: connect as root"
	case strings.Contains(msg, "Specified qdisc kind is unknown"):
		hint = fmt.Sprintf("the kernel on host %s has no %s qdisc: load it (modprobe sch_%s), build it, or use a kernel that has it (the QEMU lab)", host, kind, kind)
	case unknownQdiscRE.MatchString(msg) || strings.Contains(msg, "is unparsable"):
		hint = fmt.Sprintf("tc on host %s does not know %s: install an iproute2 that does (dualpi2 needs iproute2 7.x)", host, kind)
	case strings.Contains(msg, "What is") || strings.Contains(msg, "unknown parameter") || strings.Contains(msg, "Illegal") || strings.Contains(msg, "invalid"):
		hint = fmt.Sprintf("tc rejected a parameter of %s: check it against man tc-%s", kind, kind)
	case strings.Contains(msg, "No such file or directory") && strings.Contains(o.Shell(), "byte_queue_limits"):
		hint = "the device has no BQL (byte_queue_limits): its driver does not support it"
	}
	if hint != "" {
		return fmt.Errorf("`%s`: %w; %s", o.Shell(), err, hint)
	}
	return fmt.Errorf("`%s`: %w", o.Shell(), err)
}

// Apply snapshots nothing: it runs the setup's operations on a device whose state was
// taken as before, reads the device back and checks the kernel shows what was asked.
// It returns the commands run and the state read back. On error the caller restores.
func Apply(ctx context.Context, r Runner, s *Setup, before *State) ([]string, *State, error) {
	if s.BQL != nil && len(before.BQL) == 0 {
		return nil, nil, fmt.Errorf("host %s: setup %s sets BQL limits, but %s has no byte_queue_limits (its driver lacks BQL)", before.Host, s.Name, before.Dev)
	}
	for k := range s.Offloads {
		if _, ok := before.Offloads[k]; !ok {
			return nil, nil, fmt.Errorf("host %s: setup %s sets offload %s, but ethtool -k %s does not show it (is ethtool installed?)", before.Host, s.Name, k, before.Dev)
		}
	}
	if s.Ingress != nil {
		if q := before.ingress(); q != nil {
			return nil, nil, fmt.Errorf("host %s: setup %s shapes the ingress of %s, which has a %s qdisc already: its filters could not be put back exactly, so bloatbench leaves the device alone; remove it first (%s) or shape another device",
				before.Host, s.Name, before.Dev, q.Kind, remote.Command("tc", "qdisc", "del", "dev", before.Dev, q.Kind))
		}
		if before.IFB != nil {
			return nil, nil, fmt.Errorf("host %s: setup %s shapes the ingress of %s on device %s, which exists already: if a run left it, bloatbench restore puts the host back; else remove it (%s)",
				before.Host, s.Name, before.Dev, before.IFB.Name, remote.Command("ip", "link", "del", "dev", before.IFB.Name))
		}
	}
	var done []string
	txQueues := before.TxQueues
	if len(s.Channels) > 0 {
		if before.Channels == nil {
			return nil, nil, fmt.Errorf("host %s: setup %s sets channels, but ethtool -l %s shows none (is ethtool installed? does the driver support it?)", before.Host, s.Name, before.Dev)
		}
		// The queues change first; BQL and mq then follow the new count.
		d, err := run(ctx, r, before.Host, []Op{s.channelOp(before.Dev)})
		done = d
		if err != nil {
			return done, nil, fmt.Errorf("host %s: apply setup %s to %s: %w", before.Host, s.Name, before.Dev, err)
		}
		mid, err := Snapshot(ctx, r, before.Host, before.Dev)
		if err != nil {
			return done, nil, err
		}
		txQueues = mid.TxQueues
	}
	if s.Steer != nil {
		if err := s.Steer.check(before, txQueues); err != nil {
			return done, nil, fmt.Errorf("host %s: setup %s on %s: %w", before.Host, s.Name, before.Dev, err)
		}
	}
	ops := s.commands(before.Dev, txQueues, before.CPUs)
	if (s.Root != nil || s.MQ != nil) && !before.kernelDefault() {
		// `replace` cannot turn one kind into another under the same handle.
		ops = append([]Op{{Argv: []string{"tc", "qdisc", "del", "dev", before.Dev, "root"}}}, ops...)
	}
	more, err := run(ctx, r, before.Host, ops)
	done = append(done, more...)
	if err != nil {
		return done, nil, fmt.Errorf("host %s: apply setup %s to %s: %w", before.Host, s.Name, before.Dev, err)
	}
	now, err := Snapshot(ctx, r, before.Host, before.Dev)
	if err != nil {
		return done, nil, err
	}
	if err := s.verify(now); err != nil {
		return done, now, fmt.Errorf("host %s: setup %s on %s: the kernel does not show what was asked: %w", before.Host, s.Name, before.Dev, err)
	}
	return done, now, nil
}

func (s *Setup) verify(now *State) error {
	if s.Ingress != nil {
		if err := s.Ingress.verify(now); err != nil {
			return err
		}
	}
	if s.Root != nil || s.MQ != nil {
		if err := s.verifyRoot(now); err != nil {
			return err
		}
	}
	return s.verifyDevice(now)
}

func (s *Setup) verifyRoot(now *State) error {
	r := now.root()
	if r == nil {
		return errors.New("no root qdisc")
	}
	want := s.Kinds()
	if r.Kind != want[0] {
		return fmt.Errorf("root qdisc is %s, not %s", r.Kind, want[0])
	}
	if s.MQ != nil {
		n := 0
		for _, q := range now.Qdiscs {
			if !q.Root && q.Parent != "" && strings.HasPrefix(q.Parent, strings.TrimSuffix(r.Handle, ":")+":") {
				if q.Kind != s.MQ.Kind {
					return fmt.Errorf("qdisc under %s is %s, not %s", q.Parent, q.Kind, s.MQ.Kind)
				}
				n++
			}
		}
		if n != now.TxQueues {
			return fmt.Errorf("%d %s qdiscs under mq for %d tx queues", n, s.MQ.Kind, now.TxQueues)
		}
	}
	if s.L4SNetem != nil {
		for _, band := range []string{l4sBand, classicBand} {
			if !slices.ContainsFunc(now.Qdiscs, func(q TCQdisc) bool { return q.Parent == band && q.Kind == "netem" }) {
				return fmt.Errorf("no netem under prio band %s", band)
			}
		}
		if !slices.ContainsFunc(now.Filters, func(f Filter) bool { return f.Parent == "1:" && strings.Contains(f.Spec, "flowid "+l4sBand) }) {
			return fmt.Errorf("no filter sends packets to prio band %s, the L4S packets' netem", l4sBand)
		}
	}
	if s.Rate != "" {
		found := false
		for _, q := range now.Qdiscs {
			if q.Parent == "1:1" && q.Kind == s.Root.Kind {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("no %s under htb class 1:1", s.Root.Kind)
		}
	}
	return nil
}

// check says why a device cannot be steered: a queue it lacks, no XPS, or a CPU
// count the snapshot could not read.
func (st *Steer) check(before *State, txQueues int) error {
	switch {
	case st.TxQueue >= txQueues:
		return fmt.Errorf("steer: tx_queue %d, but the device has %d tx queues (tx-0 to tx-%d)", st.TxQueue, txQueues, txQueues-1)
	case len(before.XPS) == 0:
		return errors.New("steer: the device shows no XPS masks (queues/tx-N/xps_cpus): the kernel lacks CONFIG_XPS, or the device has one tx queue")
	case before.CPUs == 0:
		return errors.New("steer: /sys/devices/system/cpu/possible could not be read: the XPS mask needs the host's CPU count")
	}
	return nil
}

// verifyDevice checks channels, BQL limits, the steering and offloads.
func (s *Setup) verifyDevice(now *State) error {
	if s.Steer != nil {
		want := fmt.Sprintf("tx-%d", s.Steer.TxQueue)
		for _, x := range now.XPS {
			switch {
			case x.Queue == want && !sameMask(x.CPUs, CPUMask(now.CPUs)):
				return fmt.Errorf("%s xps_cpus is %s, not every CPU (%s)", x.Queue, x.CPUs, CPUMask(now.CPUs))
			case x.Queue != want && !sameMask(x.CPUs, "0"):
				return fmt.Errorf("%s xps_cpus is %s, not 0: packets may still go to it", x.Queue, x.CPUs)
			}
		}
	}
	for k, v := range s.Channels {
		if now.Channels[k] != strconv.Itoa(v) {
			return fmt.Errorf("channels %s is %q, not %d", k, now.Channels[k], v)
		}
	}
	if s.BQL != nil {
		for _, b := range now.BQL {
			if s.BQL.LimitMax != nil && b.LimitMax != strconv.Itoa(*s.BQL.LimitMax) {
				return fmt.Errorf("%s limit_max is %s, not %d", b.Queue, b.LimitMax, *s.BQL.LimitMax)
			}
			if s.BQL.LimitMin != nil && b.LimitMin != strconv.Itoa(*s.BQL.LimitMin) {
				return fmt.Errorf("%s limit_min is %s, not %d", b.Queue, b.LimitMin, *s.BQL.LimitMin)
			}
		}
	}
	for k, on := range s.Offloads {
		if want := map[bool]string{true: "on", false: "off"}[on]; now.Offloads[k] != want {
			return fmt.Errorf("offload %s is %s, not %s", k, now.Offloads[k], want)
		}
	}
	return nil
}

// Restore puts the device back as before was, and checks it.
func Restore(ctx context.Context, r Runner, before *State) error {
	now, err := Snapshot(ctx, r, before.Host, before.Dev)
	if err != nil {
		return err
	}
	return restoreFrom(ctx, r, before, now)
}

// RestoreJournaled puts a device a journal names back as found, if it is still as
// the run left it (applied; nil when the journal does not say), or whatever it is
// now when force is set. It returns the verdict; a Changed device is left alone
// with an error wrapping ErrChangedSince, unless forced.
func RestoreJournaled(ctx context.Context, r Runner, found, applied *State, force bool) (Verdict, error) {
	now, err := Snapshot(ctx, r, found.Host, found.Dev)
	if err != nil {
		return 0, err
	}
	v, diff := PlanRestore(found, applied, now)
	switch {
	case v == AsFound:
		return v, nil
	case v == Changed && !force:
		return v, fmt.Errorf("host %s: %s: %w (%s), and is not as it was found either, so bloatbench leaves it alone", found.Host, found.Dev, ErrChangedSince, diff)
	}
	return v, restoreFrom(ctx, r, found, now)
}

// restoreFrom puts the device back as before, from now, and checks it.
func restoreFrom(ctx context.Context, r Runner, before, now *State) error {
	if now.Diff(before) == "" {
		return nil // nothing was changed, or it is back already
	}
	// Only what differs from now is set (ethtool features), so that restore touches
	// as little as it can; an error here comes before any change.
	ops, err := before.restoreOps(now)
	if err != nil {
		return err
	}
	if _, err := run(ctx, r, before.Host, ops); err != nil {
		return fmt.Errorf("host %s: restore %s: %w", before.Host, before.Dev, err)
	}
	after, err := Snapshot(ctx, r, before.Host, before.Dev)
	if err != nil {
		return err
	}
	if d := before.Diff(after); d != "" {
		return fmt.Errorf("host %s: %s was not put back as it was: %s", before.Host, before.Dev, d)
	}
	return nil
}
