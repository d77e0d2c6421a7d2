package controller

import (
	"testing"

	"github.com/bloatbench/bloatbench/inventory"
	"github.com/bloatbench/bloatbench/qdisc"
)

// A device left by a newer journal is matched in older ones by identity, else (a
// journal from before identities) by the inventory's SSH destination.
func TestJournalDevSame(t *testing.T) {
	j := func(host, ssh string, id qdisc.HostID) *qdisc.Journal {
		jj := qdisc.NewJournal("s", "hosts.yaml")
		jj.Hosts[host] = &inventory.Host{Name: host, SSH: ssh}
		if id != (qdisc.HostID{}) {
			jj.Identities[host] = id
		}
		return jj
	}
	m1 := qdisc.HostID{Addr: "10.0.0.2:22", ID: "m1 net:[1]"}
	for _, c := range []struct {
		name string
		a, b journalDev
		want bool
	}{
		{"same identity, other names", devOf(j("gw", "root@10.0.0.2", m1), "gw", "eth1"), devOf(j("router", "root@router.lab", qdisc.HostID{Addr: "router.lab:22", ID: "m1 net:[1]"}), "router", "eth1"), true},
		{"same identity, other device", devOf(j("gw", "root@10.0.0.2", m1), "gw", "eth1"), devOf(j("gw", "root@10.0.0.2", m1), "gw", "eth0"), false},
		{"other namespace at the address", devOf(j("gw", "root@10.0.0.2", m1), "gw", "eth1"), devOf(j("gw", "root@10.0.0.2", qdisc.HostID{Addr: "10.0.0.2:22", ID: "m1 net:[2]"}), "gw", "eth1"), false},
		{"old journals, same destination", devOf(j("gw", "root@10.0.0.2", qdisc.HostID{}), "gw", "eth1"), devOf(j("x", "root@10.0.0.2", qdisc.HostID{}), "x", "eth1"), true},
		{"old journals, other destination", devOf(j("gw", "root@10.0.0.2", qdisc.HostID{}), "gw", "eth1"), devOf(j("gw", "root@10.0.0.3", qdisc.HostID{}), "gw", "eth1"), false},
	} {
		if got := c.a.same(c.b); got != c.want {
			t.Errorf("%s: same = %v", c.name, got)
		}
	}
}
