package inventory

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// fuzzPath is absolute so that relative key paths resolve the same way when the
// inventory written back is parsed again.
const fuzzPath = "/fuzz/hosts.yaml"

// FuzzParse feeds inventories to Parse. Whatever the bytes: no panic, an error names
// the file, and an inventory that parses keeps every promise check makes, and
// writes out (as testbed's Write does) to one that parses to the same.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("../hosts.example.yaml")
	more, _ := filepath.Glob("../qdisc/testdata/*.yaml")
	for _, p := range append(seeds, more...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(good))
	f.Add([]byte(good + "bottleneck:\n  - {host: a, dev: eth0}\nsetups:\n  x: {extends: cake, params: {bandwidth: 1mbit}, bql: {limit_max: 6056}}\n"))
	f.Add([]byte("hosts: {a: {ssh: 'u@[::1]:22', test_ip: '::1'}, b: {ssh: b, test_ip: 10.0.0.2}}\nclient: a\nserver: b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := Parse(fuzzPath, data)
		if err != nil {
			if !strings.Contains(err.Error(), fuzzPath) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		checkPromises(t, inv)
		out, err := yaml.Marshal(inv)
		if err != nil {
			t.Fatalf("a parsed inventory does not encode: %v", err)
		}
		back, err := Parse(fuzzPath, out)
		if err != nil {
			t.Fatalf("the inventory written back does not parse: %v\n%s", err, out)
		}
		checkPromises(t, back)
		// Compared as written (nil and empty lists are the same inventory).
		again, err := yaml.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(out) {
			t.Fatalf("written back and read, the inventory changed:\n%s\n---\n%s", out, again)
		}
	})
}

// checkPromises asserts what Parse promises of an inventory it returns.
func checkPromises(t *testing.T, inv *Inventory) {
	t.Helper()
	for name, h := range inv.Hosts {
		if err := CheckHostName(name); err != nil {
			t.Fatalf("host name let through: %v", err)
		}
		if h == nil || h.Name != name {
			t.Fatalf("host %q: %+v", name, h)
		}
		if _, _, _, err := SplitSSH(h.SSH); err != nil {
			t.Fatalf("host %q: ssh let through: %v", name, err)
		}
		if net.ParseIP(h.TestIP) == nil {
			t.Fatalf("host %q: test_ip %q let through", name, h.TestIP)
		}
		for _, p := range []string{h.IdentityFile, h.KnownHosts} {
			if p != "" && !filepath.IsAbs(p) {
				t.Fatalf("host %q: path %q not made absolute", name, p)
			}
		}
		if h.ConnectTimeout < 0 || h.CommandTimeout < 0 {
			t.Fatalf("host %q: negative timeout", name)
		}
	}
	if inv.Role("client") == nil || inv.Role("server") == nil || inv.Client == inv.Server {
		t.Fatalf("client %q, server %q", inv.Client, inv.Server)
	}
	for _, b := range inv.Bottleneck {
		if inv.Hosts[b.Host] == nil {
			t.Fatalf("bottleneck on unknown host %q", b.Host)
		}
		if err := CheckDevName(b.Dev); err != nil {
			t.Fatalf("bottleneck device let through: %v", err)
		}
	}
}
