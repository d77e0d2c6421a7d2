package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
	"github.com/bloatbench/bloatbench/tests"
)

// fakeEndpoints are a session's endpoints on fake hosts client and server, for the
// journal checks; the run's bottleneck is server:eth1.
func fakeEndpoints(t *testing.T) ([]*endpoint, *inventory.Inventory) {
	t.Helper()
	inv := testInventory(t, "127.0.0.1")
	o, _ := fakeRun(t, newFakeHosts(), inv, &tests.Plan{Test: "tcp_4down"})
	s := connectFake(t, o)
	run := *inv
	run.Bottleneck = []inventory.Bottleneck{{Host: "server", Dev: "eth1"}}
	return s.eps, &run
}

// Which journals, in the folder or named by a host's mark, hold a device or host of
// a run, and so refuse it.
func TestStaleJournals(t *testing.T) {
	eps, inv := fakeEndpoints(t)
	server := inv.Hosts["server"]
	client := inv.Hosts["client"]
	ids := map[string]qdisc.HostID{"server": {Addr: "server.invalid:22", ID: "m1 net:[7]"}, "client": {Addr: "client.invalid:22", ID: "m1 net:[8]"}}
	hn, _ := os.Hostname()
	dead := 1 << 22 // above pid_max's default: no such process
	gw := func(j *qdisc.Journal, dev string) {
		j.Hosts["gw"] = &inventory.Host{Name: "gw", SSH: "root@10.0.0.2"}
		j.Identities["gw"] = qdisc.HostID{Addr: "10.0.0.2:22", ID: "m1 net:[7]"}
		j.States = []*qdisc.State{{Host: "gw", Dev: dev}}
	}
	for _, c := range []struct {
		name    string
		journal func(j *qdisc.Journal)
		// mark: the journal is in another folder, and the host's mark names it
		// (controller "" = this one).
		mark       bool
		controller string
		want       string // a host:dev or "sysctls of HOST" named; "" = not stale
		busy       bool
	}{
		{name: "same machine under another name and address", journal: func(j *qdisc.Journal) { gw(j, "eth1") }, want: "device gw:eth1"},
		{name: "another device of the machine", journal: func(j *qdisc.Journal) { gw(j, "eth0") }},
		{name: "another machine at the address now", journal: func(j *qdisc.Journal) {
			j.Hosts["server"] = server
			j.Identities["server"] = qdisc.HostID{Addr: "server.invalid:22", ID: "m1 net:[99]"}
			j.States = []*qdisc.State{{Host: "server", Dev: "eth1"}}
		}},
		{name: "journal from before identities, same SSH destination", journal: func(j *qdisc.Journal) {
			j.Hosts["server"] = server
			j.Identities = nil
			j.States = []*qdisc.State{{Host: "server", Dev: "eth1"}}
		}, want: "device server:eth1"},
		{name: "sysctls of a host of the run, run dead", journal: func(j *qdisc.Journal) {
			j.Hosts["c"] = client
			j.Identities["c"] = ids["client"]
			j.Sysctls = []qdisc.SysctlState{{Host: "c", Key: "net.ipv4.tcp_ecn", Value: "2"}}
		}, want: "the sysctls of c"},
		{name: "sysctls of a run still going on this controller", journal: func(j *qdisc.Journal) {
			j.Hosts["c"] = client
			j.Identities["c"] = ids["client"]
			j.PID, j.Controller = os.Getppid(), hn
			j.Sysctls = []qdisc.SysctlState{{Host: "c", Key: "net.ipv4.tcp_ecn", Value: "2"}}
		}},
		{name: "another journal folder, found by the host's mark", mark: true, journal: func(j *qdisc.Journal) { gw(j, "eth1") },
			want: "device server:eth1"},
		{name: "another controller, found by the host's mark", mark: true, controller: "elsewhere", journal: func(j *qdisc.Journal) { gw(j, "eth1") },
			want: "on controller elsewhere"},
		{name: "another journal folder, its run still going", mark: true, journal: func(j *qdisc.Journal) {
			gw(j, "eth1")
			j.PID, j.Controller = os.Getppid(), hn
		}, busy: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, other, marks := t.TempDir(), t.TempDir(), t.TempDir()
			o := &Options{Inventory: inv, JournalDir: dir, MarkDir: marks}
			j := qdisc.NewJournal("htb+bfifo", "hosts.yaml")
			j.PID = dead
			c.journal(j)
			if c.controller != "" {
				j.Controller = c.controller
			}
			where := dir
			if c.mark {
				where = other
			}
			if err := j.Save(where); err != nil {
				t.Fatal(err)
			}
			if c.mark {
				if err := qdisc.WriteMark(context.Background(), endpointOf(eps, "server"), "server", qdisc.MarkPath(marks, ids["server"].ID, "eth1"), j.MarkOf()); err != nil {
					t.Fatal(err)
				}
			}
			err := o.checkStale(context.Background(), eps, ids)
			if c.busy {
				if !errors.Is(err, qdisc.ErrBusy) || !strings.Contains(err.Error(), j.Path()) {
					t.Errorf("a live run's device: %v", err)
				}
				return
			}
			if c.want == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			var se *StaleJournalsError
			if !errors.As(err, &se) || !errors.Is(err, ErrStaleJournal) {
				t.Fatalf("not refused: %v", err)
			}
			msg := err.Error()
			for _, want := range []string{c.want, j.Path(), "bloatbench restore", "--restore-stale", "htb+bfifo"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the refusal lacks %q: %s", want, msg)
				}
			}
			if p := se.Paths(); c.controller == "" && (len(p) != 1 || p[0] != j.Path()) || c.controller != "" && len(p) != 0 {
				t.Errorf("paths to restore from here: %v", p)
			}
		})
	}
}

// A mark whose journal this controller no longer has (removed, to keep the host as
// it is) is passed over; one the run writes is removed once it has restored.
func TestMarksWrittenAndRemoved(t *testing.T) {
	eps, inv := fakeEndpoints(t)
	dir, marks := t.TempDir(), t.TempDir()
	o := &Options{Inventory: inv, JournalDir: dir, MarkDir: marks, Log: &testLog{t: t}}
	ids := map[string]qdisc.HostID{"server": {Addr: "server.invalid:22", ID: "m1 net:[7]"}, "client": {Addr: "client.invalid:22", ID: "m1 net:[8]"}}
	j := qdisc.NewJournal("htb+bfifo", "hosts.yaml")
	j.Hosts["server"] = inv.Hosts["server"]
	j.Identities["server"] = ids["server"]
	j.States = []*qdisc.State{{Host: "server", Dev: "eth1"}}
	j.Sysctls = []qdisc.SysctlState{{Host: "server", Key: "net.ipv4.tcp_ecn", Value: "2"}}
	if err := j.Save(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	o.writeMarks(context.Background(), eps, j)
	files, _ := filepath.Glob(filepath.Join(marks, "*.json"))
	if len(files) != 2 {
		t.Fatalf("marks %v", files)
	}
	if err := o.checkStale(context.Background(), eps, ids); !errors.Is(err, ErrStaleJournal) || !strings.Contains(err.Error(), "the sysctls of server") {
		t.Errorf("marked: %v", err)
	}
	o.removeMarks(context.Background(), eps, j)
	if files, _ := filepath.Glob(filepath.Join(marks, "*.json")); len(files) != 0 {
		t.Errorf("marks left: %v", files)
	}
	o.writeMarks(context.Background(), eps, j)
	j.Remove()
	if err := o.checkStale(context.Background(), eps, ids); err != nil {
		t.Errorf("a mark of a journal that is gone: %v", err)
	}
}

// The run takes its devices, then finds the stale journal: refused with the locks
// let go, so that `bloatbench restore` can take them.
func TestLockBottlenecksRefusesStale(t *testing.T) {
	eps, inv := fakeEndpoints(t)
	dir := t.TempDir()
	ids := map[string]qdisc.HostID{"server": {Addr: "server.invalid:22", ID: "m1 net:[7]"}}
	o := &Options{Inventory: inv, JournalDir: dir, MarkDir: t.TempDir(), Plan: &tests.Plan{Test: "tcp_4down"}}
	j := qdisc.NewJournal("htb+bfifo", "hosts.yaml")
	j.Hosts["server"] = inv.Hosts["server"]
	j.Identities["server"] = ids["server"]
	j.States = []*qdisc.State{{Host: "server", Dev: "eth1"}}
	j.Created = time.Now().Add(-time.Hour)
	if err := j.Save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := o.lockBottlenecks(context.Background(), eps, ids); !errors.Is(err, ErrStaleJournal) {
		t.Fatalf("not refused: %v", err)
	}
	l, err := j.LockForRestore(j.States[0], "server.invalid:22")
	if err != nil {
		t.Fatalf("restore cannot take the device after the refusal: %v", err)
	}
	l.Unlock()
	j.Remove()
	unlock, err := o.lockBottlenecks(context.Background(), eps, ids)
	if err != nil {
		t.Fatalf("after restore: %v", err)
	}
	defer unlock()
	// A second run (another inventory's name and address for the machine) meets it.
	gwInv := *inv
	gwInv.Bottleneck = []inventory.Bottleneck{{Host: "client", Dev: "eth1"}}
	o2 := &Options{Inventory: &gwInv, JournalDir: dir, MarkDir: o.MarkDir, Plan: o.Plan}
	if _, err := o2.lockBottlenecks(context.Background(), eps, map[string]qdisc.HostID{"client": {Addr: "10.0.0.2:22", ID: "m1 net:[7]"}}); !errors.Is(err, qdisc.ErrBusy) {
		t.Errorf("the same device under another name and address: %v", err)
	}
}
