package qdisc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/bloatbench/bloatbench/remote"
)

// Runner runs a shell command line on a host: *remote.Conn over SSH, or a local
// runner in tests.
type Runner interface {
	Output(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error)
}

// State is what a bottleneck device looked like: enough to put it back and to check
// that it was put back.
type State struct {
	Host     string            `json:"host"`
	Dev      string            `json:"dev"`
	TxQueues int               `json:"tx_queues"`
	Qdiscs   []TCQdisc         `json:"qdiscs"`
	Classes  []Class           `json:"classes,omitempty"`
	BQL      []BQLState        `json:"bql,omitempty"`
	Offloads map[string]string `json:"offloads,omitempty"` // gso, tso, gro -> on/off
}

// TCQdisc is one qdisc as `tc -j qdisc show` gives it.
type TCQdisc struct {
	Kind    string          `json:"kind"`
	Handle  string          `json:"handle"`
	Parent  string          `json:"parent,omitempty"`
	Root    bool            `json:"root,omitempty"`
	Options json.RawMessage `json:"options,omitempty"`
}

// Class is one htb class, from `tc class show` (iproute2 prints htb classes as text
// even with -j).
type Class struct {
	Kind    string `json:"kind"`
	ClassID string `json:"classid"`
	Parent  string `json:"parent"` // "root" or a class id
	Rate    string `json:"rate"`
	Ceil    string `json:"ceil"`
	Burst   string `json:"burst"`
	Cburst  string `json:"cburst"`
	Prio    string `json:"prio"`
	Quantum string `json:"quantum,omitempty"`
}

// BQLState is one tx queue's byte queue limits.
type BQLState struct {
	Queue    string `json:"queue"`
	LimitMax string `json:"limit_max"`
	LimitMin string `json:"limit_min"`
}

// stateScript prints a device's state in sections; $1 is the device.
const stateScript = `dev=$1
[ -d "/sys/class/net/$dev" ] || { echo "no device $dev" >&2; exit 3; }
tc -j qdisc show dev "$dev" || exit 4
echo @@classes
tc class show dev "$dev"
echo @@bql
for q in /sys/class/net/"$dev"/queues/tx-*; do
  b="$q/byte_queue_limits"
  if [ -d "$b" ]; then echo "${q##*/} $(cat "$b/limit_max") $(cat "$b/limit_min")"; else echo "${q##*/}"; fi
done
echo @@offloads
ethtool -k "$dev" 2>/dev/null || true
`

// Snapshot reads a device's state.
func Snapshot(ctx context.Context, r Runner, host, dev string) (*State, error) {
	out, err := r.Output(ctx, remote.Command("sh", "-c", stateScript, "sh", dev), nil)
	if err != nil {
		return nil, fmt.Errorf("host %s: read the state of %s: %w", host, dev, err)
	}
	st, err := parseState(out)
	if err != nil {
		return nil, fmt.Errorf("host %s: read the state of %s: %w", host, dev, err)
	}
	st.Host, st.Dev = host, dev
	return st, nil
}

var (
	classRE = regexp.MustCompile(`^class (\S+) (\S+) (root|parent (\S+))(.*)$`)
	wordRE  = regexp.MustCompile(`\b(rate|ceil|burst|cburst|prio|quantum) (\S+)`)
	offName = map[string]string{"generic-segmentation-offload": "gso", "tcp-segmentation-offload": "tso", "generic-receive-offload": "gro"}
)

func parseState(out []byte) (*State, error) {
	sections := map[string][]byte{}
	name := "qdiscs"
	for _, line := range bytes.SplitAfter(out, []byte("\n")) {
		if t := bytes.TrimSpace(line); bytes.HasPrefix(t, []byte("@@")) {
			name = string(t[2:])
			continue
		}
		sections[name] = append(sections[name], line...)
	}
	st := &State{}
	if err := json.Unmarshal(sections["qdiscs"], &st.Qdiscs); err != nil {
		return nil, fmt.Errorf("parse tc -j qdisc show: %w", err)
	}
	for _, line := range strings.Split(string(sections["classes"]), "\n") {
		m := classRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil || m[1] != "htb" {
			continue // mq lists its tx queues as classes: nothing to restore there
		}
		c := Class{Kind: m[1], ClassID: m[2], Parent: "root"}
		if m[4] != "" {
			c.Parent = m[4]
		}
		for _, w := range wordRE.FindAllStringSubmatch(m[5], -1) {
			switch w[1] {
			case "rate":
				c.Rate = w[2]
			case "ceil":
				c.Ceil = w[2]
			case "burst":
				c.Burst = w[2]
			case "cburst":
				c.Cburst = w[2]
			case "prio":
				c.Prio = w[2]
			case "quantum":
				c.Quantum = w[2]
			}
		}
		st.Classes = append(st.Classes, c)
	}
	for _, line := range strings.Split(string(sections["bql"]), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		st.TxQueues++
		if len(f) == 3 {
			st.BQL = append(st.BQL, BQLState{Queue: f[0], LimitMax: f[1], LimitMin: f[2]})
		}
	}
	for _, line := range strings.Split(string(sections["offloads"]), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if short, known := offName[k]; ok && known {
			if f := strings.Fields(v); len(f) > 0 {
				if st.Offloads == nil {
					st.Offloads = map[string]string{}
				}
				st.Offloads[short] = f[0]
			}
		}
	}
	return st, nil
}

func (st *State) root() *TCQdisc {
	for i := range st.Qdiscs {
		if st.Qdiscs[i].Root {
			return &st.Qdiscs[i]
		}
	}
	return nil
}

// kernelDefault is true when the root qdisc is one the kernel attached itself
// (handle 0:): deleting whatever replaced it brings the same back.
func (st *State) kernelDefault() bool {
	r := st.root()
	return r == nil || r.Handle == "0:"
}

// restorable kinds: those whose tc -j options map back to tc arguments exactly.
var restorable = map[string]func(json.RawMessage) ([]string, error){
	"pfifo":      limitOpts,
	"bfifo":      limitOpts,
	"pfifo_fast": noOpts,
	"mq":         noOpts,
	"htb":        htbOpts,
}

func noOpts(json.RawMessage) ([]string, error) { return nil, nil }

func limitOpts(raw json.RawMessage) ([]string, error) {
	var o struct {
		Limit *int64 `json:"limit"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Limit == nil {
		return nil, fmt.Errorf("options %s have no limit", raw)
	}
	return []string{"limit", strconv.FormatInt(*o.Limit, 10)}, nil
}

func htbOpts(raw json.RawMessage) ([]string, error) {
	var o struct {
		R2Q        *int64  `json:"r2q"`
		Default    *string `json:"default"`
		DirectQlen *int64  `json:"direct_qlen"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("htb options %s: %w", raw, err)
	}
	var out []string
	if o.Default != nil {
		out = append(out, "default", strings.TrimPrefix(*o.Default, "0x"))
	}
	if o.R2Q != nil {
		out = append(out, "r2q", strconv.FormatInt(*o.R2Q, 10))
	}
	if o.DirectQlen != nil {
		out = append(out, "direct_qlen", strconv.FormatInt(*o.DirectQlen, 10))
	}
	return out, nil
}

// RestoreOps are the operations that bring the device back to st from whatever a
// setup made of it. An error means bloatbench cannot put this state back exactly, and
// so must not touch the device.
func (st *State) RestoreOps() ([]Op, error) {
	var ops []Op
	tc := func(args ...string) Op { return Op{Argv: append([]string{"tc"}, args...)} }
	// The root goes first: deleting it takes every qdisc and class below with it.
	ops = append(ops, tc("qdisc", "del", "dev", st.Dev, "root"))
	if !st.kernelDefault() {
		r := st.root()
		mk := restorable[r.Kind]
		if mk == nil {
			return nil, fmt.Errorf("host %s: %s has root qdisc %s %s, which bloatbench cannot yet put back exactly: it would not leave the host as it found it, so it leaves it alone. Remove it first (tc qdisc del dev %s root), or use a device whose qdisc is the kernel's default or pfifo, bfifo, pfifo_fast, mq or htb",
				st.Host, st.Dev, r.Kind, r.Handle, st.Dev)
		}
		opts, err := mk(r.Options)
		if err != nil {
			return nil, fmt.Errorf("host %s: %s: %w", st.Host, st.Dev, err)
		}
		ops = append(ops, tc(append([]string{"qdisc", "add", "dev", st.Dev, "root", "handle", r.Handle, r.Kind}, opts...)...))
		classes := append([]Class(nil), st.Classes...)
		// Parents before children.
		sort.SliceStable(classes, func(i, j int) bool { return classes[i].Parent == "root" && classes[j].Parent != "root" })
		for _, c := range classes {
			args := []string{"class", "add", "dev", st.Dev}
			if c.Parent == "root" {
				args = append(args, "parent", r.Handle)
			} else {
				args = append(args, "parent", c.Parent)
			}
			args = append(args, "classid", c.ClassID, "htb", "rate", c.Rate, "ceil", c.Ceil, "burst", c.Burst, "cburst", c.Cburst, "prio", c.Prio)
			if c.Quantum != "" {
				args = append(args, "quantum", c.Quantum)
			}
			ops = append(ops, tc(args...))
		}
		for _, q := range st.Qdiscs {
			if q.Root {
				continue
			}
			mk := restorable[q.Kind]
			if mk == nil {
				return nil, fmt.Errorf("host %s: %s has qdisc %s %s under %s, which bloatbench cannot yet put back exactly; remove it first (tc qdisc del dev %s root)",
					st.Host, st.Dev, q.Kind, q.Handle, q.Parent, st.Dev)
			}
			opts, err := mk(q.Options)
			if err != nil {
				return nil, fmt.Errorf("host %s: %s: %w", st.Host, st.Dev, err)
			}
			ops = append(ops, tc(append([]string{"qdisc", "replace", "dev", st.Dev, "parent", q.Parent, "handle", q.Handle, q.Kind}, opts...)...))
		}
	}
	for i, b := range st.BQL {
		ops = append(ops,
			Op{Argv: []string{"tee", bqlPath(st.Dev, i, "limit_max")}, Stdin: b.LimitMax},
			Op{Argv: []string{"tee", bqlPath(st.Dev, i, "limit_min")}, Stdin: b.LimitMin})
	}
	if len(st.Offloads) > 0 {
		argv := []string{"ethtool", "-K", st.Dev}
		for _, k := range offloads {
			if v, ok := st.Offloads[k]; ok {
				argv = append(argv, k, v)
			}
		}
		ops = append(ops, Op{Argv: argv})
	}
	return ops, nil
}

// Diff says how now differs from st, or "" when it does not.
func (st *State) Diff(now *State) string {
	var d []string
	if a, b := qdiscKey(st.Qdiscs), qdiscKey(now.Qdiscs); a != b {
		d = append(d, fmt.Sprintf("qdiscs were %s, are %s", a, b))
	}
	if a, b := fmt.Sprint(st.Classes), fmt.Sprint(now.Classes); a != b {
		d = append(d, fmt.Sprintf("classes were %s, are %s", a, b))
	}
	if a, b := fmt.Sprint(st.BQL), fmt.Sprint(now.BQL); a != b {
		d = append(d, fmt.Sprintf("BQL was %s, is %s", a, b))
	}
	if a, b := fmt.Sprint(st.Offloads), fmt.Sprint(now.Offloads); a != b {
		d = append(d, fmt.Sprintf("offloads were %s, are %s", a, b))
	}
	return strings.Join(d, "; ")
}

// statsInOptions are counters some kinds print among their options: not configuration.
var statsInOptions = []string{"direct_packets_stat"}

func qdiscKey(qs []TCQdisc) string {
	var keys []string
	for _, q := range qs {
		var opts map[string]any
		json.Unmarshal(q.Options, &opts)
		for _, k := range statsInOptions {
			delete(opts, k)
		}
		b, _ := json.Marshal(opts) // map keys come out sorted
		keys = append(keys, fmt.Sprintf("%s %s parent %q root=%v %s", q.Kind, q.Handle, q.Parent, q.Root, b))
	}
	sort.Strings(keys)
	return "[" + strings.Join(keys, ", ") + "]"
}

// run runs ops in order, stopping at the first failure.
func run(ctx context.Context, r Runner, host string, ops []Op) ([]string, error) {
	var done []string
	for _, o := range ops {
		var stdin io.Reader
		if o.Stdin != "" {
			stdin = strings.NewReader(o.Stdin + "\n")
		}
		if _, err := r.Output(ctx, o.run(), stdin); err != nil {
			return done, explain(host, o, err)
		}
		done = append(done, o.Shell())
	}
	return done, nil
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
	case strings.Contains(msg, "Specified qdisc kind is unknown"):
		hint = fmt.Sprintf("the kernel on host %s has no %s qdisc: load it (modprobe sch_%s), build it, or use a kernel that has it (the QEMU lab)", host, kind, kind)
	case unknownQdiscRE.MatchString(msg) || strings.Contains(msg, "is unparsable"):
		hint = fmt.Sprintf("tc on host %s does not know %s: install an iproute2 that does (dualpi2 needs iproute2 7.x)", host, kind)
	case strings.Contains(msg, "What is") || strings.Contains(msg, "unknown parameter") || strings.Contains(msg, "Illegal") || strings.Contains(msg, "invalid"):
		hint = fmt.Sprintf("tc rejected a parameter of %s: check it against man tc-%s", kind, kind)
	case strings.Contains(msg, "No such file or directory") && strings.Contains(o.Shell(), "byte_queue_limits"):
		hint = "the device has no BQL (byte_queue_limits): its driver does not support it"
	case strings.Contains(msg, "Operation not permitted"):
		hint = "it needs root (CAP_NET_ADMIN) on the host: connect as root"
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
	ops := s.Commands(before.Dev, before.TxQueues)
	if !before.kernelDefault() {
		// `replace` cannot turn one kind into another under the same handle.
		ops = append([]Op{{Argv: []string{"tc", "qdisc", "del", "dev", before.Dev, "root"}}}, ops...)
	}
	done, err := run(ctx, r, before.Host, ops)
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
	ops, err := before.RestoreOps()
	if err != nil {
		return err
	}
	now, err := Snapshot(ctx, r, before.Host, before.Dev)
	if err != nil {
		return err
	}
	if now.Diff(before) == "" {
		return nil // nothing was changed, or it is back already
	}
	if now.kernelDefault() {
		ops = ops[1:] // nothing to delete: the root is the kernel's again
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

// CheckRestorable fails when bloatbench could not put the device back exactly.
func (st *State) CheckRestorable() error {
	_, err := st.RestoreOps()
	return err
}
