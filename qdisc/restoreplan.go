package qdisc

// Restore planning: from a device's state as found (and as the run left it, and
// as it is now), the operations that put it back, and what a journal's device is
// to be made of. No host is touched here.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/bloatbench/bloatbench/internal/tcrate"
	"github.com/bloatbench/bloatbench/remote"
)

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
	ops = append(ops, st.xpsOps(now)...)
	if o, ok := st.featureOp(now); ok {
		ops = append(ops, o)
	}
	return ops, nil
}

// xpsOps put every tx queue's XPS mask back where now's differs (every one when
// now is nil). Only those: a run that did not steer writes none, and a kernel
// that lists a mask it will not take back (a single-queue device's) is not
// asked to.
func (st *State) xpsOps(now *State) []Op {
	cur := map[string]string{}
	if now != nil {
		for _, x := range now.XPS {
			cur[x.Queue] = x.CPUs
		}
	}
	var ops []Op
	for _, x := range st.XPS {
		if c, ok := cur[x.Queue]; ok && sameMask(c, x.CPUs) {
			continue
		}
		ops = append(ops, Op{Argv: []string{"tee", xpsPath(st.Dev, x.Queue)}, Stdin: x.CPUs})
	}
	return ops
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
	// A journal from before XPS was recorded has none to compare.
	if a.XPS != nil && b.XPS != nil && !sameXPS(a.XPS, b.XPS) {
		d = append(d, fmt.Sprintf("XPS was %v, is %v", a.XPS, b.XPS))
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

// sameXPS says whether two devices' queues have the same XPS masks.
func sameXPS(a, b []XPSState) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Queue != b[i].Queue || !sameMask(a[i].CPUs, b[i].CPUs) {
			return false
		}
	}
	return true
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

// CheckRestorable fails when bloatbench could not put the device back exactly.
func (st *State) CheckRestorable() error {
	_, err := st.RestoreOps()
	return err
}
