package remote

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kevinburke/ssh_config"

	"github.com/bloatbench/bloatbench/inventory"
)

const sshConfig = `
Host lab-server
  HostName 192.0.2.20
  User admin
  Port 2222
  IdentityFile ~/.ssh/lab_key
  UserKnownHostsFile ~/.ssh/lab_known_hosts /etc/lab/known_hosts
  ProxyJump bastion,root@192.0.2.99:22

Host bastion
  HostName 192.0.2.1
  User jump

Host *.example
  User wild
`

func TestResolve(t *testing.T) {
	cfg, err := ssh_config.Decode(strings.NewReader(sshConfig))
	if err != nil {
		t.Fatal(err)
	}
	d := &Dialer{Config: cfg, Home: "/home/me"}
	cases := []struct {
		name string
		host inventory.Host
		want Target
	}{
		{"alias", inventory.Host{Name: "server", SSH: "lab-server", CommandTimeout: inventory.Duration(time.Minute)}, Target{
			Name: "server", User: "admin", Addr: "192.0.2.20:2222",
			IdentityFiles:    []string{"/home/me/.ssh/lab_key", "/home/me/.ssh/id_ed25519", "/home/me/.ssh/id_ecdsa", "/home/me/.ssh/id_rsa"},
			KnownHosts:       []string{"/home/me/.ssh/lab_known_hosts", "/etc/lab/known_hosts", "/home/me/.ssh/known_hosts", "/home/me/.ssh/known_hosts2"},
			ProxyJump:        []string{"bastion", "root@192.0.2.99:22"},
			GlobalKnownHosts: []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"},
			ConnectTimeout:   DefaultConnectTimeout, CommandTimeout: time.Minute,
		}},
		{"inventory wins", inventory.Host{Name: "s", SSH: "root@lab-server:22", IdentityFile: "/k", KnownHosts: "/kh"}, Target{
			Name: "s", User: "root", Addr: "192.0.2.20:22",
			IdentityFiles:       []string{"/k", "/home/me/.ssh/lab_key", "/home/me/.ssh/id_ed25519", "/home/me/.ssh/id_ecdsa", "/home/me/.ssh/id_rsa"},
			InventoryKnownHosts: "/kh",
			KnownHosts:          []string{"/kh", "/home/me/.ssh/lab_known_hosts", "/etc/lab/known_hosts", "/home/me/.ssh/known_hosts", "/home/me/.ssh/known_hosts2"},
			ProxyJump:           []string{"bastion", "root@192.0.2.99:22"},
			GlobalKnownHosts:    []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"},
			ConnectTimeout:      DefaultConnectTimeout, CommandTimeout: DefaultCommandTimeout,
		}},
		{"wildcard", inventory.Host{Name: "w", SSH: "box.example"}, Target{
			Name: "w", User: "wild", Addr: "box.example:22",
			IdentityFiles:    []string{"/home/me/.ssh/id_ed25519", "/home/me/.ssh/id_ecdsa", "/home/me/.ssh/id_rsa"},
			KnownHosts:       []string{"/home/me/.ssh/known_hosts", "/home/me/.ssh/known_hosts2"},
			GlobalKnownHosts: []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"},
			ConnectTimeout:   DefaultConnectTimeout, CommandTimeout: DefaultCommandTimeout,
		}},
		{"ipv6", inventory.Host{Name: "v6", SSH: "me@[2001:db8::5]:2200"}, Target{
			Name: "v6", User: "me", Addr: "[2001:db8::5]:2200",
			IdentityFiles:    []string{"/home/me/.ssh/id_ed25519", "/home/me/.ssh/id_ecdsa", "/home/me/.ssh/id_rsa"},
			KnownHosts:       []string{"/home/me/.ssh/known_hosts", "/home/me/.ssh/known_hosts2"},
			GlobalKnownHosts: []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"},
			ConnectTimeout:   DefaultConnectTimeout, CommandTimeout: DefaultCommandTimeout,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := d.Resolve(&c.host)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}
