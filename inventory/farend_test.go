package inventory

import (
	"strings"
	"testing"
)

func TestForFarEnd(t *testing.T) {
	inv, err := ForFarEnd(FarEnd{SSH: "root@server.lab", TestIP: "10.0.0.2", ClientTestIP: "10.0.0.1",
		Bottlenecks: []string{"server:eth1", "local:eth0", "root@server.lab:eth2"}})
	if err != nil {
		t.Fatal(err)
	}
	c, s := inv.Hosts[inv.Client], inv.Hosts[inv.Server]
	if !c.Local() || c.TestIP != "10.0.0.1" || c.Name != "client" || s.Local() || s.SSH != "root@server.lab" || s.TestIP != "10.0.0.2" {
		t.Errorf("hosts: client %+v, server %+v", c, s)
	}
	want := []Bottleneck{{Host: "server", Dev: "eth1"}, {Host: "client", Dev: "eth0"}, {Host: "server", Dev: "eth2"}}
	if len(inv.Bottleneck) != 3 || inv.Bottleneck[0] != want[0] || inv.Bottleneck[1] != want[1] || inv.Bottleneck[2] != want[2] {
		t.Errorf("bottleneck %+v", inv.Bottleneck)
	}
	for _, tc := range []struct {
		f    FarEnd
		want string
	}{
		{FarEnd{SSH: "", TestIP: "10.0.0.2", ClientTestIP: "10.0.0.1"}, "name the far end"},
		{FarEnd{SSH: "a b", TestIP: "10.0.0.2", ClientTestIP: "10.0.0.1"}, "-H:"},
		{FarEnd{SSH: "s", TestIP: "nope", ClientTestIP: "10.0.0.1"}, `--test-ip "nope"`},
		{FarEnd{SSH: "s", TestIP: "10.0.0.2", ClientTestIP: "10.0.0.1", Bottlenecks: []string{"router:eth0"}}, "HOST client (this machine) or server (s)"},
		{FarEnd{SSH: "s", TestIP: "10.0.0.2", ClientTestIP: "10.0.0.1", Bottlenecks: []string{"server:"}}, "write HOST:DEV"},
		{FarEnd{SSH: "s", TestIP: "10.0.0.2", ClientTestIP: "10.0.0.1", Bottlenecks: []string{"server:a/b"}}, `--bottleneck "server:a/b"`},
	} {
		if _, err := ForFarEnd(tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.f, err, tc.want)
		}
	}
}

// ssh: local in a file: this machine as one of the hosts, with nothing of SSH.
func TestLocalHost(t *testing.T) {
	base := "client: a\nserver: b\nbottleneck: [{host: b, dev: eth1}]\nhosts:\n  b: {ssh: root@10.1.0.2, test_ip: 10.0.0.2}\n"
	inv, err := Parse("hosts.yaml", []byte(base+"  a: {ssh: local, test_ip: 10.0.0.1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !inv.Hosts["a"].Local() || inv.Hosts["b"].Local() {
		t.Errorf("local: %v %v", inv.Hosts["a"].Local(), inv.Hosts["b"].Local())
	}
	_, err = Parse("hosts.yaml", []byte(base+"  a: {ssh: local, test_ip: 10.0.0.1, identity_file: k}\n"))
	if err == nil || !strings.Contains(err.Error(), "hosts.a.identity_file: ssh: local runs the agent on this machine without SSH") {
		t.Errorf("identity_file with ssh: local: %v", err)
	}
}
