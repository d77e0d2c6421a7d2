package inventory

import (
	"strings"
	"testing"
)

// Without HOME a ~ path is refused with what to do, not resolved under the
// working directory (where a systemd service would look for ./~/.ssh/...).
func TestHomeUnset(t *testing.T) {
	for _, home := range []string{"", "relative/home"} {
		t.Setenv("HOME", home)
		if _, err := HomeDir(); err == nil || !strings.Contains(err.Error(), "HOME") || !strings.Contains(err.Error(), "Environment=HOME=") {
			t.Errorf("HOME=%q: HomeDir gave %v, want an error naming HOME and systemd's Environment=HOME=", home, err)
		}
		inv := "hosts:\n  a: {ssh: root@192.0.2.10, test_ip: 10.0.0.1, identity_file: ~/.ssh/lab}\n  b: {ssh: root@192.0.2.20, test_ip: 10.0.0.2}\nclient: a\nserver: b\n"
		_, err := Parse("/etc/lab/hosts.yaml", []byte(inv))
		if err == nil || !strings.Contains(err.Error(), "identity_file") || !strings.Contains(err.Error(), "set HOME") {
			t.Errorf("HOME=%q: an identity_file under ~ gave %v, want an error naming the key and HOME", home, err)
		}
		// Paths that need no home still resolve.
		inv = strings.Replace(inv, "~/.ssh/lab", "keys/lab", 1)
		if got, err := Parse("/etc/lab/hosts.yaml", []byte(inv)); err != nil || got.Hosts["a"].IdentityFile != "/etc/lab/keys/lab" {
			t.Errorf("HOME=%q: a relative identity_file: %v", home, err)
		}
	}
	t.Setenv("HOME", "/home/ann")
	inv := "hosts:\n  a: {ssh: root@192.0.2.10, test_ip: 10.0.0.1, known_hosts: ~/lab/known_hosts}\n  b: {ssh: root@192.0.2.20, test_ip: 10.0.0.2}\nclient: a\nserver: b\n"
	if got, err := Parse("/etc/lab/hosts.yaml", []byte(inv)); err != nil || got.Hosts["a"].KnownHosts != "/home/ann/lab/known_hosts" {
		t.Errorf("known_hosts under ~ with HOME set: %+v, %v", got, err)
	}
}
