package qdisc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/bloatbench/bloatbench/internal/tcrate"
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
	Filters  []Filter          `json:"filters,omitempty"`
	BQL      []BQLState        `json:"bql,omitempty"`
	Offloads map[string]string `json:"offloads,omitempty"` // gso, tso, gro -> on/off
	// Features is every ethtool feature that can be changed, by the name ethtool -k
	// prints, with its value as printed ("on", "off [requested on]"). `ethtool -K tso
	// off` also switches tx-tcp6-segmentation and the other tx-tcp*-segmentation, and
	// `tso on` switches them all back on: only each sub-feature's own value puts a
	// device back as it was.
	Features map[string]string `json:"features,omitempty"`
	// TickInUsec is tc's clock on the host (from /proc/net/psched): htb keeps a
	// class's burst as a time in its ticks, which tc -d prints rounded to bytes.
	TickInUsec float64 `json:"tick_in_usec,omitempty"`
	// Channels are ethtool -l's current counts (rx, tx, other, combined; "n/a" left
	// out), nil when the device or ethtool shows none.
	Channels map[string]string `json:"channels,omitempty"`
	// IngressFilters are the lines of tc filter show for the ingress (ffff:), which a
	// setup's ingress shaping adds and restore must see gone.
	IngressFilters []string `json:"ingress_filters,omitempty"`
	// IFB is the device that shapes this one's ingress (IFBName), when it exists.
	IFB *IFBState `json:"ifb,omitempty"`
	// ShaperRates, on a state a journal keeps as what its run applied, are the rates
	// the run's rate schedule sets the htb class 1:1 to while it runs: the device
	// at one of them is still as the run left it (asRunLeft).
	ShaperRates []string `json:"shaper_rates,omitempty"`
	// legacy marks a state read from a version 1 journal, which recorded neither
	// features, filters nor the htb class details of tc -d: those are not compared.
	legacy bool
}

// IFBState is an IFB device and its qdiscs.
type IFBState struct {
	Name   string    `json:"name"`
	Qdiscs []TCQdisc `json:"qdiscs"`
}

// TCQdisc is one qdisc as `tc -j qdisc show` gives it.
type TCQdisc struct {
	Kind    string          `json:"kind"`
	Handle  string          `json:"handle"`
	Parent  string          `json:"parent,omitempty"`
	Root    bool            `json:"root,omitempty"`
	Options json.RawMessage `json:"options,omitempty"`
}

// Class is one htb class, from `tc -d class show` (iproute2 prints htb classes as
// text even with -j). iproute2 prints prio and quantum for leaf classes only: an inner
// class has them empty, and is rebuilt without them. A default (mpu 0, linklayer
// ethernet, no overhead) is left empty too.
type Class struct {
	Kind      string `json:"kind"`
	ClassID   string `json:"classid"`
	Parent    string `json:"parent"` // "root" or a class id
	Rate      string `json:"rate"`
	Ceil      string `json:"ceil"`
	Burst     string `json:"burst"`
	Cburst    string `json:"cburst"`
	Prio      string `json:"prio,omitempty"`
	Quantum   string `json:"quantum,omitempty"`
	MPU       string `json:"mpu,omitempty"`
	Overhead  string `json:"overhead,omitempty"`
	Linklayer string `json:"linklayer,omitempty"`
	// Buffer and Cbuffer are burst and cburst as the kernel keeps them, in ticks (tc
	// -raw): the printed bytes are rounded, and a burst set from them comes back a few
	// bytes off.
	Buffer  uint32 `json:"buffer,omitempty"`
	Cbuffer uint32 `json:"cbuffer,omitempty"`
}

// Filter is one line of `tc filter show` for a qdisc or class of the root's tree,
// with the lines that continue it.
type Filter struct {
	Parent string `json:"parent"` // the qdisc handle or class id it hangs from
	Spec   string `json:"spec"`   // as tc prints it; "?" when tc could not list them
}

// BQLState is one tx queue's byte queue limits.
type BQLState struct {
	Queue    string `json:"queue"`
	LimitMax string `json:"limit_max"`
	LimitMin string `json:"limit_min"`
}

// stateScript prints a device's state in sections; $1 is the device. Filters are
// listed for every qdisc and htb class but ingress and clsact (ffff:), which deleting
// the root leaves alone, and the kernel's own qdiscs (0:), which take none; a listing
// that fails shows as "?", so that it cannot pass for no filters.
const stateScript = `dev=$1
[ -d "/sys/class/net/$dev" ] || { echo "no device $dev" >&2; exit 3; }
tc -j qdisc show dev "$dev" || exit 4
echo @@classes
tc -d -raw class show dev "$dev" || exit 5
echo @@psched
cat /proc/net/psched
echo @@filters
{ tc qdisc show dev "$dev" | while read -r _ _ id _; do echo "$id"; done
  tc class show dev "$dev" | while read -r _ kind id _; do if [ "$kind" = htb ]; then echo "$id"; fi; done
} | while read -r id; do
  case $id in ffff:|0:) continue ;; esac
  f=$(tc filter show dev "$dev" parent "$id") || { echo "$id ?"; continue; }
  [ -z "$f" ] || printf '%s\n' "$f" | while IFS= read -r line; do echo "$id $line"; done
done
echo @@bql
for q in /sys/class/net/"$dev"/queues/tx-*; do
  b="$q/byte_queue_limits"
  if [ -d "$b" ]; then echo "${q##*/} $(cat "$b/limit_max") $(cat "$b/limit_min")"; else echo "${q##*/}"; fi
done
echo @@offloads
ethtool -k "$dev" 2>/dev/null || true
echo @@channels
ethtool -l "$dev" 2>/dev/null | sed -n '/^Current hardware settings/,$p' || true
echo @@ingress
if tc qdisc show dev "$dev" | grep -Eq '^qdisc (ingress|clsact) ffff:'; then
  tc filter show dev "$dev" parent ffff: || echo "?"
fi
ifb=$(printf '%.15s' "ifb4$dev")
echo @@ifb
if [ -d "/sys/class/net/$ifb" ]; then echo "$ifb"; tc -j qdisc show dev "$ifb" || exit 6; fi
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
	wordRE  = regexp.MustCompile(`\b(rate|ceil|burst|cburst|prio|quantum|mpu|overhead|linklayer|buffer|cbuffer) (\S+)`)
	offName = map[string]string{"generic-segmentation-offload": "gso", "tcp-segmentation-offload": "tso", "generic-receive-offload": "gro"}
)

// parseClass reads one line of tc -d class show; ok is false for a class of another
// kind (mq lists its tx queues as classes: nothing to restore there).
func parseClass(line string) (c Class, ok bool) {
	m := classRE.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil || m[1] != "htb" {
		return c, false
	}
	c = Class{Kind: m[1], ClassID: m[2], Parent: "root"}
	if m[4] != "" {
		c.Parent = m[4]
	}
	for _, w := range wordRE.FindAllStringSubmatch(m[5], -1) {
		v := w[2]
		switch w[1] {
		case "rate":
			c.Rate = v
		case "ceil":
			c.Ceil = v
		case "burst", "cburst":
			// tc -d adds the rate table's cell size ("1600b/1"): tc picks it again.
			v, _, _ = strings.Cut(v, "/")
			if w[1] == "burst" {
				c.Burst = v
			} else {
				c.Cburst = v
			}
		case "prio":
			c.Prio = v
		case "quantum":
			c.Quantum = v
		case "mpu":
			// Printed after burst and again after cburst; htb takes one mpu for both,
			// in bytes without a unit.
			if c.MPU == "" && v != "0b" {
				c.MPU = sizeBytes(v)
			}
		case "overhead":
			c.Overhead = v
		case "linklayer":
			if v != "ethernet" {
				c.Linklayer = v
			}
		case "buffer", "cbuffer":
			n, err := strconv.ParseUint(strings.Trim(v, "[]"), 16, 32)
			if err != nil {
				continue
			}
			if w[1] == "buffer" {
				c.Buffer = uint32(n)
			} else {
				c.Cbuffer = uint32(n)
			}
		}
	}
	return c, true
}

// sizeBytes turns tc's printed size ("64b", "2Kb") into bytes; a size it cannot read
// is kept as it is, for tc to refuse in the open.
func sizeBytes(v string) string {
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"Mb", 1 << 20}, {"Kb", 1 << 10}, {"b", 1}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			if f, err := strconv.ParseFloat(n, 64); err == nil {
				return strconv.FormatInt(int64(f*u.mult+0.5), 10)
			}
			break
		}
	}
	return v
}

// parseFeatures reads ethtool -k: the gso/tso/gro summary and every feature that is
// not [fixed]. A line followed by indented ones (tcp-segmentation-offload) only sums
// them up, and is not a feature of its own.
func parseFeatures(out string) (offloads, features map[string]string) {
	type line struct {
		name, val string
		sub       bool
	}
	var ls []line
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || strings.HasPrefix(l, "Features for") {
			continue
		}
		ls = append(ls, line{strings.TrimSpace(k), strings.Join(strings.Fields(v), " "), strings.HasPrefix(l, "\t") || strings.HasPrefix(l, " ")})
	}
	for i, l := range ls {
		if l.val == "" {
			continue
		}
		if short, ok := offName[l.name]; ok && !l.sub {
			if offloads == nil {
				offloads = map[string]string{}
			}
			offloads[short] = strings.Fields(l.val)[0]
		}
		header := !l.sub && i+1 < len(ls) && ls[i+1].sub
		if header || strings.Contains(l.val, "[fixed]") {
			continue
		}
		if features == nil {
			features = map[string]string{}
		}
		features[l.name] = l.val
	}
	return offloads, features
}

// wanted is the value a feature was asked for: ethtool shows "off [requested on]" when
// the kernel holds a feature off that was asked on.
func wanted(v string) string {
	if _, req, ok := strings.Cut(v, "[requested "); ok {
		return strings.TrimSuffix(req, "]")
	}
	if f := strings.Fields(v); len(f) > 0 {
		return f[0]
	}
	return v
}

// idKey orders tc ids ("1:", "1:a", "10:2") by major then minor number.
func idKey(id string) [2]uint64 {
	maj, min, _ := strings.Cut(id, ":")
	a, _ := strconv.ParseUint(maj, 16, 32)
	b, _ := strconv.ParseUint(min, 16, 32)
	return [2]uint64{a, b}
}

func idLess(a, b string) bool {
	x, y := idKey(a), idKey(b)
	return x[0] < y[0] || x[0] == y[0] && x[1] < y[1]
}

// major is the qdisc handle a class or queue id belongs to: "1:10" -> "1:".
func major(id string) string {
	m, _, _ := strings.Cut(id, ":")
	return m + ":"
}

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
		if c, ok := parseClass(line); ok {
			st.Classes = append(st.Classes, c)
		}
	}
	// The kernel lists classes in hash order, which a rebuilt tree need not repeat.
	sort.Slice(st.Classes, func(i, j int) bool { return idLess(st.Classes[i].ClassID, st.Classes[j].ClassID) })
	for _, line := range strings.Split(string(sections["filters"]), "\n") {
		id, text, _ := strings.Cut(line, " ")
		text = strings.TrimSpace(text)
		switch {
		case text == "":
		case text == "?" || strings.HasPrefix(text, "filter "):
			text = strings.TrimPrefix(strings.TrimPrefix(text, "filter "), "parent "+id+" ")
			st.Filters = append(st.Filters, Filter{Parent: id, Spec: text})
		case len(st.Filters) > 0:
			st.Filters[len(st.Filters)-1].Spec += " " + text // u32's "match ..." lines
		}
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
	// The shell's glob puts tx-10 before tx-2; queues are kept by name, listed by number.
	sort.Slice(st.BQL, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(st.BQL[i].Queue, "tx-"))
		b, _ := strconv.Atoi(strings.TrimPrefix(st.BQL[j].Queue, "tx-"))
		return a < b
	})
	st.Offloads, st.Features = parseFeatures(string(sections["offloads"]))
	st.Channels = parseChannels(string(sections["channels"]))
	for _, line := range strings.Split(string(sections["ingress"]), "\n") {
		if t := strings.TrimSpace(line); t != "" {
			st.IngressFilters = append(st.IngressFilters, t)
		}
	}
	if ifb := sections["ifb"]; len(bytes.TrimSpace(ifb)) > 0 {
		name, qd, _ := bytes.Cut(bytes.TrimLeft(ifb, " \n"), []byte("\n"))
		st.IFB = &IFBState{Name: string(bytes.TrimSpace(name))}
		if err := json.Unmarshal(qd, &st.IFB.Qdiscs); err != nil {
			return nil, fmt.Errorf("parse tc -j qdisc show of %s: %w", st.IFB.Name, err)
		}
	}
	st.TickInUsec = tickInUsec(string(sections["psched"]))
	return st, nil
}

// tickInUsec is what tc_core_init in iproute2 makes of /proc/net/psched; 0 when it
// cannot be read.
func tickInUsec(psched string) float64 {
	f := strings.Fields(psched)
	if len(f) < 3 {
		return 0
	}
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 16, 32)
		if err != nil {
			return 0
		}
		v[i] = n
	}
	t2us, us2t, res := v[0], v[1], v[2]
	if res == 1000000000 { // the kernel's hack for old tc: a nanosecond clock is 1
		t2us = us2t
	}
	if us2t == 0 {
		return 0
	}
	return float64(t2us) / float64(us2t) * (float64(res) / 1e6)
}

// rateBytes is a rate as tc prints it ("30Mbit", "1234Kbit") in bytes per second,
// as tc's get_rate64 reads it back.
func rateBytes(s string) (uint64, bool) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	scale, ok := map[string]float64{"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}[strings.ToLower(s[i:])]
	if err != nil || !ok {
		return 0, false
	}
	return uint64(v * scale / 8), true
}

// burstBytes finds the burst in bytes from which tc computes exactly ticks at rate:
// tc_calc_xmittime is long(long(1e6*(size/rate)) * tick_in_usec).
func burstBytes(ticks uint32, rate string, tick float64) (uint64, bool) {
	r, ok := rateBytes(rate)
	if !ok || r == 0 || tick <= 0 {
		return 0, false
	}
	us0 := int64(float64(ticks) / tick)
	for us := us0 - 2; us <= us0+2; us++ {
		if us < 0 || uint32(int64(float64(us)*tick)) != ticks {
			continue
		}
		s0 := int64(float64(us) * float64(r) / 1e6)
		for size := s0 - 2; size <= s0+3; size++ {
			if size >= 0 && int64(1e6*(float64(size)/float64(r))) == us {
				return uint64(size), true
			}
		}
	}
	return 0, false
}

// bursts are the burst and cburst to give tc for c: exact from the ticks when the
// snapshot has them, else as printed (a journal of version 1).
func (st *State) bursts(c Class) (burst, cburst string, err error) {
	burst, cburst = c.Burst, c.Cburst
	if c.Buffer == 0 && c.Cbuffer == 0 {
		return burst, cburst, nil
	}
	b, ok1 := burstBytes(c.Buffer, c.Rate, st.TickInUsec)
	cb, ok2 := burstBytes(c.Cbuffer, c.Ceil, st.TickInUsec)
	if !ok1 || !ok2 {
		return "", "", fmt.Errorf("host %s: %s: htb class %s (rate %s burst %s, ceil %s cburst %s) has a burst that no byte count gives tc exactly at that rate (the rate tc prints may be rounded), so bloatbench cannot put it back exactly and leaves the device alone. Remove the tree first (%s), or give the class a whole-kbit rate",
			st.Host, st.Dev, c.ClassID, c.Rate, c.Burst, c.Ceil, c.Cburst, remote.Command("tc", "qdisc", "del", "dev", st.Dev, "root"))
	}
	return fmt.Sprintf("%db", b), fmt.Sprintf("%db", cb), nil
}

// parseChannels reads the current settings of ethtool -l.
func parseChannels(out string) map[string]string {
	var ch map[string]string
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ":")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || !contains(channelKinds, k) {
			continue
		}
		if _, err := strconv.Atoi(v); err != nil {
			continue // n/a
		}
		if ch == nil {
			ch = map[string]string{}
		}
		ch[k] = v
	}
	return ch
}

// channelOp sets the channels of st that differ from now's (all when now is nil).
func (st *State) channelOp(now *State) (Op, bool) {
	argv := []string{"ethtool", "-L", st.Dev}
	for _, k := range channelKinds {
		v, ok := st.Channels[k]
		if !ok || now != nil && now.Channels[k] == v {
			continue
		}
		argv = append(argv, k, v)
	}
	return Op{Argv: argv}, len(argv) > 3
}

// ingress is the device's ingress or clsact qdisc, nil when it has none.
func (st *State) ingress() *TCQdisc {
	for i := range st.Qdiscs {
		if q := &st.Qdiscs[i]; strings.HasPrefix(q.Parent, "ffff:") {
			return q
		}
	}
	return nil
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

var hexRE = regexp.MustCompile(`^[0-9a-fA-F]{1,8}$`)

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
		d := strings.TrimPrefix(*o.Default, "0x")
		// From a journal, it is a word of tc's command line: a class minor, in hex.
		if !hexRE.MatchString(d) {
			return nil, fmt.Errorf("htb default %q is not a class number", *o.Default)
		}
		out = append(out, "default", d)
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
func (st *State) RestoreOps() ([]Op, error) { return st.restoreOps(nil) }

// restoreOps brings the device back to st from now, or from anything when now is nil.
func (st *State) restoreOps(now *State) ([]Op, error) {
	if err := st.checkFilters(); err != nil {
		return nil, err
	}
	var ops []Op
	if now != nil && st.Channels != nil && now.Channels != nil {
		// The queues come back first: the tree and the BQL limits below are the
		// original queues'.
		if o, ok := st.channelOp(now); ok {
			ops = append(ops, o)
		}
	}
	if now != nil {
		// The ingress redirect goes before its IFB (deleting the qdisc takes its
		// filters with it), so that no packet is sent to a device being removed.
		if q := now.ingress(); q != nil && st.ingress() == nil {
			ops = append(ops, Op{Argv: []string{"tc", "qdisc", "del", "dev", st.Dev, q.Kind}})
		}
		if now.IFB != nil && st.IFB == nil {
			ops = append(ops, Op{Argv: []string{"ip", "link", "del", "dev", now.IFB.Name}})
		}
	}
	// The tree is checked even when it is left alone: a state that could not be
	// put back is refused before anything changes.
	tree, err := st.treeOps()
	if err != nil {
		return nil, err
	}
	// The root goes first: deleting it takes every qdisc and class below with it, and
	// gives the kernel's default back. Nothing to delete when that is what is there,
	// and nothing to do when the tree is as it was (a setup that shaped the ingress).
	if now == nil || !st.sameTree(now) {
		if now == nil || !now.kernelDefault() {
			ops = append(ops, Op{Argv: []string{"tc", "qdisc", "del", "dev", st.Dev, "root"}})
		}
		ops = append(ops, tree...)
	}
	for _, b := range st.BQL {
		ops = append(ops,
			Op{Argv: []string{"tee", bqlPath(st.Dev, b.Queue, "limit_max")}, Stdin: b.LimitMax},
			Op{Argv: []string{"tee", bqlPath(st.Dev, b.Queue, "limit_min")}, Stdin: b.LimitMin})
	}
	if o, ok := st.featureOp(now); ok {
		ops = append(ops, o)
	}
	return ops, nil
}

// checkFilters refuses a device with filters in its root's tree. Replacing the root
// deletes them, and they cannot be put back exactly: tc prints u32 keys as hex
// offsets under handles it made up (fh 800::800), a bpf filter as the id of a program
// whose code is not in the output, actions in yet another form. Re-adding a near copy
// would leave the host not as found, so bloatbench does not touch the device at all.
func (st *State) checkFilters() error {
	if len(st.Filters) == 0 {
		return nil
	}
	var seen []string
	var dels []string
	for _, f := range st.Filters {
		if !contains(seen, f.Parent) {
			seen = append(seen, f.Parent)
			dels = append(dels, remote.Command("tc", "filter", "del", "dev", st.Dev, "parent", f.Parent))
		}
	}
	f := st.Filters[0]
	what := fmt.Sprintf("tc filters on %s, the first %q on %s", strings.Join(seen, ", "), f.Spec, f.Parent)
	if f.Spec == "?" {
		what = fmt.Sprintf("filters on %s that tc filter show could not list", f.Parent)
	}
	return fmt.Errorf("host %s: %s has %s: a setup replaces the root qdisc, which deletes them, and bloatbench cannot put tc filters back exactly, so it leaves the device alone. Remove them first (%s; note them down to add them back after), or use a device without filters",
		st.Host, st.Dev, what, strings.Join(dels, "; "))
}

// treeOps rebuild the qdisc and class tree under the root, parents before children:
// a class after its qdisc or parent class, a qdisc after the class (or mq queue) it
// hangs from. A root of the kernel's own comes back with `tc qdisc del root` alone.
func (st *State) treeOps() ([]Op, error) {
	r := st.root()
	if r == nil {
		return nil, nil
	}
	tc := func(args ...string) Op { return Op{Argv: append([]string{"tc"}, args...)} }
	refuse := func(q TCQdisc, where string) error {
		return fmt.Errorf("host %s: %s has qdisc %s %s %s, which bloatbench cannot yet put back exactly: it would not leave the host as it found it, so it leaves it alone. Remove it first (%s), or use a device whose qdisc is the kernel's default or pfifo, bfifo, pfifo_fast, mq or htb",
			st.Host, st.Dev, q.Kind, q.Handle, where, remote.Command("tc", "qdisc", "del", "dev", st.Dev, "root"))
	}
	classes := map[string]Class{}
	for _, c := range st.Classes {
		classes[c.ClassID] = c
	}
	// kids: qdisc handle or class id -> what hangs from it.
	kids := map[string][]string{}
	qdiscs := map[string]TCQdisc{}
	for _, c := range st.Classes {
		p := c.Parent
		if p == "root" {
			p = major(c.ClassID)
		}
		kids[p] = append(kids[p], c.ClassID)
	}
	pending := len(st.Classes)
	for _, q := range st.Qdiscs {
		switch {
		case q.Root:
		case strings.HasPrefix(q.Parent, "ffff:"):
			// ingress and clsact: not under the root, a setup leaves them alone.
		case q.Handle == "0:":
			// The kernel's own (pfifo_fast under each mq queue): it attaches them again
			// with their parent; a `replace` would give them a new handle instead.
		default:
			p := q.Parent
			if _, ok := classes[p]; !ok {
				p = major(p) // an mq tx queue: no class to wait for but its qdisc's
			}
			kids[p] = append(kids[p], q.Handle)
			qdiscs[q.Handle] = q
			pending++
		}
	}
	var ops []Op
	var visit func(id string) error
	visit = func(id string) error {
		ks := kids[id]
		sort.Slice(ks, func(i, j int) bool { return idLess(ks[i], ks[j]) })
		for _, k := range ks {
			pending--
			if c, ok := classes[k]; ok {
				parent := c.Parent
				if parent == "root" {
					parent = major(c.ClassID)
				}
				burst, cburst, err := st.bursts(c)
				if err != nil {
					return err
				}
				args := []string{"class", "add", "dev", st.Dev, "parent", parent, "classid", c.ClassID, "htb",
					"rate", c.Rate, "ceil", c.Ceil, "burst", burst, "cburst", cburst}
				for _, kv := range [][2]string{{"prio", c.Prio}, {"quantum", c.Quantum}, {"mpu", c.MPU}, {"overhead", c.Overhead}, {"linklayer", c.Linklayer}} {
					if kv[1] != "" {
						args = append(args, kv[0], kv[1])
					}
				}
				ops = append(ops, tc(args...))
			} else {
				q := qdiscs[k]
				mk := restorable[q.Kind]
				if mk == nil {
					return refuse(q, "under "+q.Parent)
				}
				opts, err := mk(q.Options)
				if err != nil {
					return fmt.Errorf("host %s: %s: qdisc %s %s: %w", st.Host, st.Dev, q.Kind, q.Handle, err)
				}
				ops = append(ops, tc(append([]string{"qdisc", "replace", "dev", st.Dev, "parent", q.Parent, "handle", q.Handle, q.Kind}, opts...)...))
			}
			if err := visit(k); err != nil {
				return err
			}
		}
		return nil
	}
	if r.Handle != "0:" {
		mk := restorable[r.Kind]
		if mk == nil {
			return nil, refuse(*r, "at the root")
		}
		opts, err := mk(r.Options)
		if err != nil {
			return nil, fmt.Errorf("host %s: %s: root qdisc %s %s: %w", st.Host, st.Dev, r.Kind, r.Handle, err)
		}
		ops = append(ops, tc(append([]string{"qdisc", "add", "dev", st.Dev, "root", "handle", r.Handle, r.Kind}, opts...)...))
	}
	if err := visit(r.Handle); err != nil {
		return nil, err
	}
	if pending != 0 {
		return nil, fmt.Errorf("host %s: %s: %d classes or qdiscs hang from none of the tree tc showed under root %s %s, so bloatbench cannot rebuild it in order and leaves the device alone; look at tc -d class show dev %s and tc qdisc show dev %s",
			st.Host, st.Dev, pending, r.Kind, r.Handle, remote.Quote(st.Dev), remote.Quote(st.Dev))
	}
	return ops, nil
}

// featureOp sets every ethtool feature whose requested value differs between now
// and st (all of them when now is nil), each by its own name, in one ethtool -K.
// A state from before features were recorded has only gso, tso and gro.
func (st *State) featureOp(now *State) (Op, bool) {
	argv := []string{"ethtool", "-K", st.Dev}
	if len(st.Features) == 0 {
		for _, k := range offloads {
			if v, ok := st.Offloads[k]; ok {
				argv = append(argv, k, v)
			}
		}
		return Op{Argv: argv}, len(argv) > 3
	}
	names := make([]string, 0, len(st.Features))
	for k := range st.Features {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		want := wanted(st.Features[k])
		if now != nil {
			if cur, ok := now.Features[k]; ok && wanted(cur) == want {
				continue
			}
		}
		argv = append(argv, k, want)
	}
	return Op{Argv: argv}, len(argv) > 3
}

// sameTree says whether now's egress tree (qdiscs but the ingress's, classes,
// filters) is st's.
func (st *State) sameTree(now *State) bool {
	egress := func(qs []TCQdisc) []TCQdisc {
		var out []TCQdisc
		for _, q := range qs {
			if !strings.HasPrefix(q.Parent, "ffff:") {
				out = append(out, q)
			}
		}
		return out
	}
	return !st.legacy && !now.legacy && qdiscKey(egress(st.Qdiscs)) == qdiscKey(egress(now.Qdiscs)) &&
		fmt.Sprint(st.Classes) == fmt.Sprint(now.Classes) && fmt.Sprint(st.Filters) == fmt.Sprint(now.Filters)
}

// Diff says how now differs from st, or "" when it does not.
func (st *State) Diff(now *State) string {
	a, b := st, now
	if st.legacy || now.legacy {
		a, b = st.v1(), now.v1()
	}
	var d []string
	if x, y := qdiscKey(a.Qdiscs), qdiscKey(b.Qdiscs); x != y {
		d = append(d, fmt.Sprintf("qdiscs were %s, are %s", x, y))
	}
	if x, y := fmt.Sprint(a.Classes), fmt.Sprint(b.Classes); x != y {
		d = append(d, fmt.Sprintf("classes were %s, are %s", x, y))
	}
	if x, y := fmt.Sprint(a.Filters), fmt.Sprint(b.Filters); x != y {
		d = append(d, fmt.Sprintf("filters were %s, are %s", x, y))
	}
	if x, y := fmt.Sprint(a.BQL), fmt.Sprint(b.BQL); x != y {
		d = append(d, fmt.Sprintf("BQL was %s, is %s", x, y))
	}
	if x, y := fmt.Sprint(a.Offloads), fmt.Sprint(b.Offloads); x != y {
		d = append(d, fmt.Sprintf("offloads were %s, are %s", x, y))
	}
	if x, y := fmt.Sprint(a.Features), fmt.Sprint(b.Features); x != y {
		d = append(d, fmt.Sprintf("ethtool features were %s, are %s", x, y))
	}
	// A journal from before channels were recorded has none to compare.
	if x, y := fmt.Sprint(a.Channels), fmt.Sprint(b.Channels); a.Channels != nil && b.Channels != nil && x != y {
		d = append(d, fmt.Sprintf("channels were %s, are %s", x, y))
	}
	if x, y := strings.Join(a.IngressFilters, " "), strings.Join(b.IngressFilters, " "); x != y {
		d = append(d, fmt.Sprintf("ingress filters were [%s], are [%s]", x, y))
	}
	if x, y := a.IFB.key(), b.IFB.key(); x != y {
		d = append(d, fmt.Sprintf("IFB was %s, is %s", x, y))
	}
	return strings.Join(d, "; ")
}

func (i *IFBState) key() string {
	if i == nil {
		return "none"
	}
	return i.Name + " " + qdiscKey(i.Qdiscs)
}

// v1 is the state as a version 1 journal recorded it, for comparing with one.
func (st *State) v1() *State {
	c := *st
	c.Filters, c.Features, c.TickInUsec, c.legacy = nil, nil, 0, false
	c.Classes = nil
	for _, cl := range st.Classes {
		c.Classes = append(c.Classes, Class{Kind: cl.Kind, ClassID: cl.ClassID, Parent: cl.Parent, Rate: cl.Rate, Ceil: cl.Ceil, Burst: cl.Burst, Cburst: cl.Cburst, Prio: cl.Prio})
	}
	sort.Slice(c.Classes, func(i, j int) bool { return idLess(c.Classes[i].ClassID, c.Classes[j].ClassID) })
	return &c
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
	ops := s.commands(before.Dev, txQueues)
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

// verifyDevice checks channels, BQL limits and offloads.
func (s *Setup) verifyDevice(now *State) error {
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

// Verdict is what restore makes of a device a journal names, from how it is now.
type Verdict int

const (
	// PutBack: the device is as the run left it; restore puts it back as found.
	PutBack Verdict = iota
	// AsFound: the device is as the run found it already (it was never changed, or
	// was put back since): nothing to do.
	AsFound
	// Changed: the device is neither as found nor as the run left it: someone, or a
	// later run, changed it since; restore leaves it alone unless forced.
	Changed
	// Unknown: the journal does not say what the run left (a journal from before
	// that was recorded, or a run killed while applying): the device is put back,
	// as restore always did.
	Unknown
)

func (v Verdict) String() string {
	return [...]string{"put back", "as found", "changed since", "not recorded"}[v]
}

// PlanRestore decides what to do with a device found as the journal's snapshot
// says, left as applied (nil when not recorded), and now as now; diff says how now
// differs from what the run left, for a Changed device.
func PlanRestore(found, applied, now *State) (v Verdict, diff string) {
	switch {
	case found.Diff(now) == "":
		return AsFound, ""
	case applied == nil:
		return Unknown, ""
	}
	if d := applied.asRunLeft(now).Diff(now); d != "" {
		return Changed, d
	}
	return PutBack, ""
}

// asRunLeft is applied as the run may have left it, seen against now: when the
// run's rate schedule (ShaperRates) may have changed the htb class 1:1 and now
// has that class at one of its rates (rate and ceiling both), applied with the
// class's rate, ceiling, bursts and quantum (which htb derives from the rate:
// the quantum is rate/r2q, from 1,000 to 200,000 bytes) as now's.
// Anything else about the class, or the device, must still be as applied.
func (st *State) asRunLeft(now *State) *State {
	if len(st.ShaperRates) == 0 {
		return st
	}
	var cur *Class
	for i := range now.Classes {
		if now.Classes[i].ClassID == "1:1" && now.Classes[i].Kind == "htb" {
			cur = &now.Classes[i]
		}
	}
	if cur == nil {
		return st
	}
	rate, err1 := tcrate.Parse(cur.Rate)
	ceil, err2 := tcrate.Parse(cur.Ceil)
	if err1 != nil || err2 != nil || rate != ceil || !slices.ContainsFunc(st.ShaperRates, func(r string) bool {
		v, err := tcrate.Parse(r)
		// tc prints a rate rounded (25Mbit, 1.5Mbit): within a thousandth.
		return err == nil && math.Abs(v-rate) <= v*1e-3
	}) {
		return st
	}
	out := *st
	out.Classes = slices.Clone(st.Classes)
	for i := range out.Classes {
		c := &out.Classes[i]
		if c.ClassID == "1:1" && c.Kind == "htb" {
			c.Rate, c.Ceil, c.Burst, c.Cburst, c.Buffer, c.Cbuffer, c.Quantum = cur.Rate, cur.Ceil, cur.Burst, cur.Cburst, cur.Buffer, cur.Cbuffer, cur.Quantum
		}
	}
	return &out
}

// ErrChangedSince marks a device, or a sysctl, that is neither as its journal's run
// found it nor as it left it: restore leaves it alone.
var ErrChangedSince = errors.New("changed since the run left it")

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

// CheckRestorable fails when bloatbench could not put the device back exactly.
func (st *State) CheckRestorable() error {
	_, err := st.RestoreOps()
	return err
}
