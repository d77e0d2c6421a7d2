package qdisc

// A device's state: what a snapshot reads of it (tc, ethtool, sysfs) and the
// parsing of that output.

import (
	"bytes"
	"context"
	"encoding/json"
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
	Host     string     `json:"host"`
	Dev      string     `json:"dev"`
	TxQueues int        `json:"tx_queues"`
	Qdiscs   []TCQdisc  `json:"qdiscs"`
	Classes  []Class    `json:"classes,omitempty"`
	Filters  []Filter   `json:"filters,omitempty"`
	BQL      []BQLState `json:"bql,omitempty"`
	// XPS is every tx queue's XPS CPU mask (xps_cpus, as sysfs prints it), which
	// a setup's steer: changes; none where the kernel has no XPS.
	XPS []XPSState `json:"xps,omitempty"`
	// CPUs is the host's possible CPUs (the last in
	// /sys/devices/system/cpu/possible, plus one): the width of an XPS mask.
	CPUs     int               `json:"cpus,omitempty"`
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

// XPSState is one tx queue's XPS CPU mask.
type XPSState struct {
	Queue string `json:"queue"`
	CPUs  string `json:"cpus"`
}

// stateScript prints a device's state in sections; $1 is the device. Filters are
// listed for every qdisc and htb class but ingress and clsact (ffff:), which deleting
// the root leaves alone, and the kernel's own qdiscs (0:), which take none; a listing
// that fails shows as "?", so that it cannot pass for no filters.
//
// It starts as few tc processes as it can: a snapshot is taken four to six times
// a run, and on a slow host (an emulated guest, 0.1 s a tc under load) each tc
// was a tenth of a second of a run's fixed cost. The qdisc and class listings are
// read once and the filters' parents and the ingress found in them; one tc -j
// -batch asks every parent at once, which prints a line per command ("[]" for
// none), and only parents with filters are listed again in text, the form
// Filters keep. Where the batch fails, or the device's name is one tc's batch
// reader could split, or the lines do not match the parents one for one, every
// parent is listed alone, as before.
//
// Past tc and ethtool it starts one process (the grep of the qdiscs' handles):
// the rest is the shell's own (read, case, here-documents in place of cat, sed,
// cut and pipes). Each process is 10-100 ms of an emulated guest's CPU, and a
// snapshot of the grep-and-pipe kind took 0.63 s of the router's there, four
// snapshots a device a run. The channels section is ethtool -l whole; the parser
// keeps its current settings.
const stateScript = `dev=$1
[ -d "/sys/class/net/$dev" ] || { echo "no device $dev" >&2; exit 3; }
qs=$(tc -j qdisc show dev "$dev") || exit 4
printf '%s\n' "$qs"
echo @@classes
c=$(tc -d -raw class show dev "$dev") || exit 5
[ -z "$c" ] || printf '%s\n' "$c"
echo @@psched
IFS= read -r p < /proc/net/psched && printf '%s\n' "$p"
echo @@filters
hs=$(grep -o '"handle":"[0-9a-f]*:"' <<EOF
$qs
EOF
)
ids=
for w in $hs; do
  h=${w#'"handle":"'}
  h=${h%'"'}
  case $h in ffff:|0:) ;; *) ids="$ids $h" ;; esac
done
while read -r _ kind id _; do
  if [ "$kind" = htb ]; then case $id in ffff:|0:) ;; *) ids="$ids $id" ;; esac; fi
done <<EOF
$c
EOF
list=$ids
case $dev in
*[!A-Za-z0-9_.@-]*) ;;
*)
  if [ -n "$ids" ]; then
    cmds= n=0
    for id in $ids; do
      cmds="$cmds${cmds:+
}filter show dev $dev parent $id"
      n=$((n + 1))
    done
    if j=$(tc -j -batch - 2>/dev/null <<EOF
$cmds
EOF
); then
      m=0
      while IFS= read -r l; do case $l in '['*) m=$((m + 1)) ;; esac; done <<EOF
$j
EOF
      if [ "$m" -eq "$n" ]; then
        list=
        { for id in $ids; do IFS= read -r l; [ "$l" = "[]" ] || list="$list $id"; done; } <<EOF
$j
EOF
      fi
    fi
  fi ;;
esac
for id in $list; do
  f=$(tc filter show dev "$dev" parent "$id") || { echo "$id ?"; continue; }
  [ -z "$f" ] || while IFS= read -r line; do echo "$id $line"; done <<EOF
$f
EOF
done
echo @@bql
for q in /sys/class/net/"$dev"/queues/tx-*; do
  b="$q/byte_queue_limits"
  if [ -d "$b" ]; then
    mx= mn=
    read -r mx < "$b/limit_max"
    read -r mn < "$b/limit_min"
    echo "${q##*/} $mx $mn"
  else echo "${q##*/}"; fi
done
echo @@xps
for q in /sys/class/net/"$dev"/queues/tx-*; do
  x=
  [ -r "$q/xps_cpus" ] && read -r x < "$q/xps_cpus" 2>/dev/null && echo "${q##*/} $x"
done
echo @@cpus
read -r p < /sys/devices/system/cpu/possible 2>/dev/null && echo "$p"
echo @@offloads
ethtool -k "$dev" 2>/dev/null || true
echo @@channels
ethtool -l "$dev" 2>/dev/null || true
echo @@ingress
case $qs in
*'"kind":"ingress","handle":"ffff:"'* | *'"kind":"clsact","handle":"ffff:"'*)
  tc filter show dev "$dev" parent ffff: || echo "?" ;;
esac
ifb=ifb4$dev
while [ ${#ifb} -gt 15 ]; do ifb=${ifb%?}; done
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
	for _, line := range strings.Split(string(sections["xps"]), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			st.XPS = append(st.XPS, XPSState{Queue: f[0], CPUs: f[1]})
		}
	}
	sort.Slice(st.XPS, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(st.XPS[i].Queue, "tx-"))
		b, _ := strconv.Atoi(strings.TrimPrefix(st.XPS[j].Queue, "tx-"))
		return a < b
	})
	st.CPUs = possibleCPUs(string(sections["cpus"]))
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

// possibleCPUs is the number of CPU ids a kernel's possible list ("0-3", "0,2-5")
// spans: its last id plus one; 0 when it cannot be read.
func possibleCPUs(list string) int {
	list = strings.TrimSpace(list)
	if list == "" {
		return 0
	}
	last := list[strings.LastIndexAny(list, ",-")+1:]
	n, err := strconv.Atoi(last)
	if err != nil || n < 0 || n > 1<<16 {
		return 0
	}
	return n + 1
}

// sameMask says whether two sysfs CPU masks are the same set: sysfs pads its
// groups with zeros ("00000000,00000003"), a write need not.
func sameMask(a, b string) bool {
	norm := func(m string) string {
		var groups []string
		for _, g := range strings.Split(m, ",") {
			v, err := strconv.ParseUint(g, 16, 32)
			if err != nil {
				return m
			}
			groups = append(groups, strconv.FormatUint(v, 16))
		}
		// Leading empty groups are no CPUs.
		for len(groups) > 1 && groups[0] == "0" {
			groups = groups[1:]
		}
		return strings.Join(groups, ",")
	}
	return norm(a) == norm(b)
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

// parseChannels reads the current settings of ethtool -l.
func parseChannels(out string) map[string]string {
	var ch map[string]string
	current := false
	for _, line := range strings.Split(out, "\n") {
		// The pre-set maximums come first; only the current settings count.
		if strings.HasPrefix(line, "Current hardware settings") {
			current = true
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !current || !ok || !contains(channelKinds, k) {
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
