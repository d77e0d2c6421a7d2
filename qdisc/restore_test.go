package qdisc

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
)

func pfifoState(limit string) *State {
	return &State{Host: "lab", Dev: "eth1", TxQueues: 1,
		Qdiscs: []TCQdisc{{Kind: "pfifo", Handle: "1:", Root: true, Options: json.RawMessage(`{"limit":` + limit + `}`)}}}
}

// htbState is a device shaped by a setup's htb at rate (as tc prints it), its
// class's burst htb's default for that rate; fq_codel under it.
func htbState(rate, burst string, quantum string, prio ...string) *State {
	st := pfifoState("50")
	st.Qdiscs = []TCQdisc{{Kind: "htb", Handle: "1:", Root: true}, {Kind: "fq_codel", Handle: "10:", Parent: "1:1"}}
	st.Classes = []Class{{Kind: "htb", ClassID: "1:1", Parent: "root", Rate: rate, Ceil: rate, Burst: burst, Cburst: burst, Prio: "0", Quantum: quantum}}
	if len(prio) > 0 {
		st.Classes[0].Prio = prio[0]
	}
	return st
}

// A device a rate schedule left at one of its rates is as the run left it; at
// another rate, or changed otherwise, it is not.
func TestPlanRestoreUnderRateSchedule(t *testing.T) {
	found := pfifoState("1000")
	applied := htbState("50Mbit", "1600b", "200000")
	applied.ShaperRates = []string{"25mbit", "5mbit", "50mbit"}
	unscheduled := htbState("50Mbit", "1600b", "200000")
	for _, c := range []struct {
		name         string
		applied, now *State
		want         Verdict
	}{
		{"at the setup's rate", applied, htbState("50Mbit", "1600b", "200000"), PutBack},
		{"at a step's rate, bursts and quantum and all", applied, htbState("5Mbit", "1599b", "62500"), PutBack},
		{"at a rate the schedule has not", applied, htbState("7Mbit", "1600b", "200000"), Changed},
		{"at a step's rate, changed otherwise too", applied, htbState("25Mbit", "1600b", "200000", "3"), Changed},
		{"at a step's rate without a schedule", unscheduled, htbState("25Mbit", "1600b", "200000"), Changed},
	} {
		t.Run(c.name, func(t *testing.T) {
			if v, diff := PlanRestore(found, c.applied, c.now); v != c.want {
				t.Errorf("PlanRestore = %v (%s); want %v", v, diff, c.want)
			}
		})
	}
	now := htbState("25Mbit", "1600b", "200000")
	now.Classes[0].Ceil = "50Mbit"
	if v, _ := PlanRestore(found, applied, now); v != Changed {
		t.Errorf("rate and ceiling apart, not a step of the schedule: %v", v)
	}
}

// The restore decision for each way a device can be found after a crash.
func TestPlanRestore(t *testing.T) {
	found, applied := pfifoState("1000"), pfifoState("50")
	for _, c := range []struct {
		name         string
		applied, now *State
		want         Verdict
		diff         string
	}{
		{"as the run left it", applied, pfifoState("50"), PutBack, ""},
		{"as found already", applied, pfifoState("1000"), AsFound, ""},
		{"changed by hand since", applied, pfifoState("77"), Changed, `"limit":50`},
		{"as found, no record of what was applied", nil, pfifoState("1000"), AsFound, ""},
		{"killed while applying (no record)", nil, pfifoState("77"), Unknown, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, diff := PlanRestore(found, c.applied, c.now)
			if v != c.want || !strings.Contains(diff, c.diff) {
				t.Errorf("PlanRestore = %v, %q; want %v, %q", v, diff, c.want, c.diff)
			}
		})
	}
}

func TestPlanSysctl(t *testing.T) {
	for _, c := range []struct {
		found, applied, now string
		want                Verdict
	}{
		{"2", "1", "1", PutBack},
		{"2", "1", "2", AsFound},
		{"2", "1", "0", Changed},
		{"2", "", "0", Unknown}, // an older journal: put back, as before
		{"2", "", "2", AsFound},
	} {
		if got := PlanSysctl(c.found, c.applied, c.now); got != c.want {
			t.Errorf("PlanSysctl(%q, %q, %q) = %v, want %v", c.found, c.applied, c.now, got, c.want)
		}
	}
}

// Two crashed runs' journals for one device are restored newest first, however
// they are listed: the later run's snapshot is the earlier run's setup.
func TestNewestFirst(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	js := []*Journal{{Setup: "a", Created: t0}, {Setup: "c", Created: t0.Add(2 * time.Second)}, {Setup: "b", Created: t0.Add(time.Second)},
		{Setup: "b2", Created: t0.Add(time.Second), path: "/j/z.json"}}
	NewestFirst(js)
	var got []string
	for _, j := range js {
		got = append(got, j.Setup)
	}
	if strings.Join(got, " ") != "c b2 b a" {
		t.Errorf("order %v", got)
	}
}

// Every name a journal hands to a root command is checked when it is read back.
func TestJournalValidated(t *testing.T) {
	good := func() *Journal {
		j := NewJournal("htb+bfifo", "hosts.yaml")
		j.Hosts["lab"] = &inventory.Host{Name: "lab", SSH: "root@10.0.0.1"}
		st := pfifoState("1000")
		st.BQL = []BQLState{{Queue: "tx-0", LimitMax: "1879048192", LimitMin: "0"}}
		st.Features = map[string]string{"tx-tcp6-segmentation": "off [requested on]"}
		st.Offloads = map[string]string{"gso": "on"}
		st.Channels = map[string]string{"combined": "4"}
		st.IFB = &IFBState{Name: "ifb4eth1"}
		st.Classes = []Class{{Kind: "htb", ClassID: "1:1", Parent: "root", Rate: "30Mbit", Ceil: "30Mbit", Burst: "1600b", Cburst: "1600b", Prio: "0", Quantum: "3750"}}
		j.States = []*State{st}
		j.Sysctls = []SysctlState{{Host: "lab", Key: "net.ipv4.tcp_ecn", Value: "2"}}
		j.SysctlsApplied = []SysctlState{{Host: "lab", Key: "net.ipv4.tcp_ecn", Value: "1"}}
		return j
	}
	for _, c := range []struct {
		name  string
		spoil func(j *Journal)
		want  string // "" = valid
	}{
		{"as bloatbench writes it", func(*Journal) {}, ""},
		{"sysctl key climbs out of /proc/sys", func(j *Journal) { j.Sysctls[0].Key = "../../etc/shadow" }, "not a sysctl name"},
		{"sysctl key with a slash", func(j *Journal) { j.Sysctls[0].Key = "net/ipv4/tcp_ecn" }, "not a sysctl name"},
		{"applied sysctl value with a newline", func(j *Journal) { j.SysctlsApplied[0].Value = "1\nrm -rf /" }, "not a plain value"},
		{"queue name climbs out of sysfs", func(j *Journal) { j.States[0].BQL[0].Queue = "../../../../etc/x" }, "not a tx queue name"},
		{"BQL limit not a number", func(j *Journal) { j.States[0].BQL[0].LimitMax = "1; reboot" }, "not numbers"},
		{"device name with a slash", func(j *Journal) { j.States[0].Dev = "../eth0" }, "character Linux does not allow"},
		{"device name too long", func(j *Journal) { j.States[0].Dev = "abcdefghijklmnop" }, "longer than Linux allows"},
		{"IFB is another device", func(j *Journal) { j.States[0].IFB.Name = "eth0" }, "is not eth1's"},
		{"feature name", func(j *Journal) { j.States[0].Features["--reset"] = "on" }, "not a feature name"},
		{"channel kind", func(j *Journal) { j.States[0].Channels["rx;x"] = "1" }, "the channels are"},
		{"qdisc handle", func(j *Journal) { j.States[0].Qdiscs[0].Handle = "1: root" }, "not a tc id"},
		{"class rate", func(j *Journal) { j.States[0].Classes[0].Rate = "30Mbit burst 1" }, "not a rate"},
		{"host name", func(j *Journal) { j.Hosts["a b"] = &inventory.Host{SSH: "root@x"} }, `host "a b"`},
		{"host's ssh", func(j *Journal) { j.Hosts["lab"].SSH = "-oProxyCommand=x" }, "ssh:"},
		{"agent path", func(j *Journal) { j.Hosts["lab"].AgentPath = "../bin/x" }, "agent_path"},
		{"state on a host the journal lacks", func(j *Journal) { j.States[0].Host = "other" }, "not among the journal's hosts"},
		{"applied state checked too", func(j *Journal) {
			a := pfifoState("50")
			a.Dev = "eth1/x"
			j.Applied = []*State{a}
		}, "applied state 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := good()
			c.spoil(j)
			if err := j.Save(t.TempDir()); err != nil {
				t.Fatal(err)
			}
			_, err := LoadJournal(j.Path())
			switch {
			case c.want == "" && err != nil:
				t.Errorf("a good journal refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "ran nothing")):
				t.Errorf("error %v, want one with %q", err, c.want)
			}
		})
	}
}

func TestHTBDefaultValidated(t *testing.T) {
	if _, err := htbOpts(json.RawMessage(`{"r2q":10,"default":"0x10"}`)); err != nil {
		t.Error(err)
	}
	if _, err := htbOpts(json.RawMessage(`{"default":"1 r2q 1"}`)); err == nil {
		t.Error("a default that is not a class number was taken")
	}
}

// What restore settles leaves the journal; a journal with nothing left goes.
func TestJournalKeep(t *testing.T) {
	dir := t.TempDir()
	j := NewJournal("s", "hosts.yaml")
	j.Hosts["lab"] = &inventory.Host{Name: "lab", SSH: "root@10.0.0.1"}
	a, b := pfifoState("1"), pfifoState("2")
	b.Dev = "eth2"
	j.States = []*State{a, b}
	j.SetApplied(pfifoState("9"))
	j.Sysctls = []SysctlState{{Host: "lab", Key: "net.ipv4.tcp_ecn", Value: "2"}}
	if err := j.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := j.Keep(func(st *State) bool { return st.Dev == "eth2" }, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	got, err := LoadJournal(j.Path())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.States) != 1 || got.States[0].Dev != "eth2" || len(got.Applied) != 0 || len(got.Sysctls) != 1 {
		t.Errorf("kept %+v, applied %+v, sysctls %+v", got.States, got.Applied, got.Sysctls)
	}
	if err := got.Keep(func(*State) bool { return false }, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(j.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal with nothing left is still there: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Errorf("left in the folder: %v", m)
	}
}

func TestHostIDSame(t *testing.T) {
	for _, c := range []struct {
		a, b HostID
		want bool
	}{
		{HostID{"10.0.0.2:22", "m1 net:[1]"}, HostID{"router.lab:22", "m1 net:[1]"}, true},
		{HostID{"10.0.0.2:22", "m1 net:[1]"}, HostID{"10.0.0.2:22", "m1 net:[2]"}, false}, // a new namespace at the address
		{HostID{"10.0.0.2:22", ""}, HostID{"10.0.0.2:22", "m1 net:[1]"}, true},
		{HostID{"10.0.0.2:22", ""}, HostID{"router.lab:22", ""}, false},
		{HostID{}, HostID{}, false},
	} {
		if got := c.a.Same(c.b); got != c.want {
			t.Errorf("%+v.Same(%+v) = %v", c.a, c.b, got)
		}
	}
}

// On a real device: two crashed runs, one over the other, restored newest first,
// give the device as first found; oldest first would leave the first run's setup,
// so the oldest journal finds the device changed and leaves it. A device changed by
// hand since is left alone and named, unless forced.
func TestRestoreJournaledOnDevice(t *testing.T) {
	r := scratch(t, "test0")
	ctx := context.Background()
	snap := func() *State {
		t.Helper()
		st, err := Snapshot(ctx, r, "lab", "test0")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	apply := func(name string) (found, applied *State) {
		t.Helper()
		found = snap()
		_, applied, err := Apply(ctx, r, mustSetup(t, name), found)
		if err != nil {
			t.Fatal(err)
		}
		return found, applied
	}
	first := snap()
	f1, a1 := apply("htb+bfifo") // run 1, killed
	f2, a2 := apply("mq+pfifo")  // run 2 over it, killed

	// Oldest first: run 1's journal sees run 2's setup, not its own.
	if v, err := RestoreJournaled(ctx, r, f1, a1, false); v != Changed || !errors.Is(err, ErrChangedSince) || !strings.Contains(err.Error(), "test0") {
		t.Fatalf("oldest first: %v, %v", v, err)
	}
	if d := a2.Diff(snap()); d != "" {
		t.Fatalf("a device left alone was changed: %s", d)
	}
	// Newest first.
	for i, j := range [][2]*State{{f2, a2}, {f1, a1}} {
		if v, err := RestoreJournaled(ctx, r, j[0], j[1], false); v != PutBack || err != nil {
			t.Fatalf("journal %d: %v, %v", i, v, err)
		}
	}
	if d := first.Diff(snap()); d != "" {
		t.Fatalf("not as first found: %s", d)
	}
	// Again: nothing to do.
	if v, err := RestoreJournaled(ctx, r, f1, a1, false); v != AsFound || err != nil {
		t.Errorf("restored twice: %v, %v", v, err)
	}

	// Changed by hand after a crash.
	f3, a3 := apply("htb+bfifo")
	r.sh(t, "tc qdisc del dev test0 root", "tc qdisc add dev test0 root handle 2: pfifo limit 77")
	byHand := snap()
	if v, err := RestoreJournaled(ctx, r, f3, a3, false); v != Changed || !errors.Is(err, ErrChangedSince) {
		t.Fatalf("changed by hand: %v, %v", v, err)
	}
	if d := byHand.Diff(snap()); d != "" {
		t.Fatalf("the hand's change was clobbered: %s", d)
	}
	if v, err := RestoreJournaled(ctx, r, f3, a3, true); v != Changed || err != nil {
		t.Fatalf("forced: %v, %v", v, err)
	}
	if d := first.Diff(snap()); d != "" {
		t.Errorf("forced restore: not as found: %s", d)
	}
}

func TestRestoreSysctlsJournaled(t *testing.T) {
	r := scratch(t, "test0")
	ctx := context.Background()
	r.sh(t, "echo 2 > /proc/sys/net/ipv4/tcp_ecn")
	s := mustSetup(t, "ecn")
	before, err := s.SnapshotSysctls(ctx, r, "lab")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ApplySysctls(ctx, r, "lab"); err != nil {
		t.Fatal(err)
	}
	applied := s.AppliedSysctls("lab")
	ecn := func() string { return strings.TrimSpace(r.sh(t, "cat /proc/sys/net/ipv4/tcp_ecn")) }
	r.sh(t, "echo 0 > /proc/sys/net/ipv4/tcp_ecn") // by hand, after the crash
	out, err := RestoreSysctlsJournaled(ctx, r, "lab", before, applied, false)
	if !errors.Is(err, ErrChangedSince) || !strings.Contains(err.Error(), "net.ipv4.tcp_ecn") || ecn() != "0" {
		t.Fatalf("changed by hand: %+v, %v, tcp_ecn %s", out, err, ecn())
	}
	if len(out.Changed) != 1 {
		t.Errorf("outcome %+v", out)
	}
	if _, err := RestoreSysctlsJournaled(ctx, r, "lab", before, applied, true); err != nil || ecn() != "2" {
		t.Fatalf("forced: %v, tcp_ecn %s", err, ecn())
	}
	if out, err := RestoreSysctlsJournaled(ctx, r, "lab", before, applied, false); err != nil || len(out.Restored) != 0 {
		t.Errorf("as found: %+v, %v", out, err)
	}
}
