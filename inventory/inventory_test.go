package inventory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExampleParses(t *testing.T) {
	inv, err := Load("../hosts.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if inv.Role("client").TestIP != "10.0.0.1" || inv.Role("server").SSH != "root@192.0.2.20:22" {
		t.Errorf("parsed %+v", inv)
	}
	if len(inv.Bottleneck) != 2 || inv.Bottleneck[0].Dev != "eth0" {
		t.Errorf("bottleneck %+v", inv.Bottleneck)
	}
}

const good = `hosts:
  a:
    ssh: root@192.0.2.10
    test_ip: 10.0.0.1
    identity_file: keys/id
    connect_timeout: 3s
  b:
    ssh: b-alias
    test_ip: fd00::2
client: a
server: b
`

func TestGood(t *testing.T) {
	inv, err := Parse("/etc/lab/hosts.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	a := inv.Hosts["a"]
	if a.IdentityFile != "/etc/lab/keys/id" {
		t.Errorf("identity_file not resolved against the inventory's folder: %q", a.IdentityFile)
	}
	if a.ConnectTimeout.Or(time.Minute) != 3*time.Second || inv.Hosts["b"].ConnectTimeout.Or(time.Minute) != time.Minute {
		t.Errorf("timeouts %v %v", a.ConnectTimeout, inv.Hosts["b"].ConnectTimeout)
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string // every one must be in the message
	}{
		{"unknown key", strings.Replace(good, "    test_ip: 10.0.0.1\n", "    test_ip: 10.0.0.1\n    tset_ip: x\n", 1),
			[]string{"hosts.yaml:5:", "hosts.a.tset_ip", "unknown key tset_ip (did you mean test_ip?); valid here: agent_path, command_timeout,", "known_hosts, ssh, sudo, test_ip"}},
		{"bad address", strings.Replace(good, "10.0.0.1", "10.0.0.300", 1),
			[]string{"hosts.yaml:4:", "hosts.a.test_ip", `"10.0.0.300" is not an IP address`}},
		{"bad duration", strings.Replace(good, "3s", "3 seconds", 1),
			[]string{"hosts.yaml:6:", "hosts.a.connect_timeout", "not a duration"}},
		{"missing host", strings.Replace(good, "server: b", "server: c", 1),
			[]string{"hosts.yaml:11:", "server", `no host "c"`, "a, b"}},
		{"missing ssh", strings.Replace(good, "    ssh: b-alias\n", "", 1),
			[]string{"hosts.yaml:7:", "hosts.b", "missing ssh"}},
		{"bad port", strings.Replace(good, "root@192.0.2.10", "root@192.0.2.10:99999", 1),
			[]string{"hosts.yaml:3:", "hosts.a.ssh", "port"}},
		{"shell in ssh", strings.Replace(good, "b-alias", "b;reboot", 1),
			[]string{"hosts.yaml:8:", "hosts.b.ssh", "not a host name"}},
		{"same host twice", strings.Replace(good, "server: b", "server: a", 1),
			[]string{"hosts.yaml:11:", "both"}},
		{"no client", strings.Replace(good, "client: a\n", "", 1),
			[]string{"hosts.yaml", "missing client"}},
		{"bad device", good + "bottleneck:\n  - {host: a, dev: \"eth 0\"}\n",
			[]string{"hosts.yaml:13:", "bottleneck[0].dev", "character"}},
		{"long device", good + "bottleneck:\n  - {host: b, dev: thisnameistoolong}\n",
			[]string{"hosts.yaml:13:", "bottleneck[0].dev", "15 bytes"}},
		{"bottleneck host", good + "bottleneck:\n  - {host: z, dev: eth0}\n",
			[]string{"hosts.yaml:13:", "bottleneck[0].host", `no host "z"`}},
		{"bad rate", good + "bottleneck:\n  - {host: b, dev: eth0, rate: 100}\n",
			[]string{"hosts.yaml:13:", "bottleneck[0].rate", `"100" is not a rate`, "100mbit"}},
		{"rate on a path device", good + "path_devices:\n  - {host: b, dev: eth1, rate: 10mbit}\n",
			[]string{"hosts.yaml:13:", "path_devices[0].rate", "netem"}},
		{"path device host", good + "path_devices:\n  - {host: z, dev: eth1}\n",
			[]string{"hosts.yaml:13:", "path_devices[0].host", `no host "z"`}},
		{"path device is a bottleneck", good + "bottleneck:\n  - {host: b, dev: eth0}\npath_devices:\n  - {host: b, dev: eth0}\n",
			[]string{"hosts.yaml:15:", "path_devices[0]", "also a bottleneck", "qdisc under test"}},
		{"netem without path devices", good + "netem: {delay: 25ms}\n",
			[]string{"hosts.yaml:12:", "netem", "path_devices:"}},
		{"netem typo", good + "path_devices:\n  - {host: b, dev: eth1}\nnetem: {dealy: 25ms}\n",
			[]string{"hosts.yaml:14:", "netem.dealy", "unknown key dealy (did you mean delay?); valid here: delay, distribution, jitter"}},
		// Host names go into series names ("qdisc HOST:DEV root drops"), which readers
		// split at spaces and colons.
		{"space in host name", strings.Replace(strings.Replace(good, "  b:\n", "  \"lab b\":\n", 1), "server: b", "server: lab b", 1),
			[]string{"hosts.yaml:7:", "hosts.lab b", `host name "lab b"`, "' '", "letters, digits"}},
		{"colon in host name", strings.Replace(strings.Replace(good, "  b:\n", "  \"b:1\":\n", 1), "server: b", "server: \"b:1\"", 1),
			[]string{"hosts.yaml:7:", "hosts.b:1", `host name "b:1"`, "':'"}},
		{"empty host name", strings.Replace(strings.Replace(good, "  b:\n", "  \"\":\n", 1), "server: b", "server: \"\"", 1),
			[]string{"hosts.yaml:7:", "empty host name"}},
		{"dash first", strings.Replace(strings.Replace(good, "  b:\n", "  -b:\n", 1), "server: b", "server: -b", 1),
			[]string{"hosts.yaml:7:", `host name "-b"`, "starting with a letter or digit"}},
		{"dot dot", strings.Replace(strings.Replace(good, "  b:\n", "  ..:\n", 1), "server: b", "server: ..", 1),
			[]string{"hosts.yaml:7:", `host name ".."`}},
		{"newline in host name", strings.Replace(strings.Replace(good, "  b:\n", "  \"b\\nc\":\n", 1), "server: b", "server: \"b\\nc\"", 1),
			[]string{"hosts.yaml:7:", `host name "b\nc"`}},
		{"syntax", "hosts: [\n", []string{"hosts.yaml"}},
		{"empty", "", []string{"hosts.yaml", "empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("hosts.yaml", []byte(c.in))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestSplitSSH(t *testing.T) {
	cases := []struct {
		in         string
		user, host string
		port       int
		bad        bool
	}{
		{"root@192.0.2.1", "root", "192.0.2.1", 0, false},
		{"root@192.0.2.1:2222", "root", "192.0.2.1", 2222, false},
		{"lab-server", "", "lab-server", 0, false},
		{"me@[2001:db8::1]:22", "me", "2001:db8::1", 22, false},
		{"2001:db8::1", "", "2001:db8::1", 0, false},
		{"@host", "", "", 0, true},
		{"root@host:0", "", "", 0, true},
		{"root@$(reboot)", "", "", 0, true},
	}
	for _, c := range cases {
		u, h, p, err := SplitSSH(c.in)
		if (err != nil) != c.bad || (!c.bad && (u != c.user || h != c.host || p != c.port)) {
			t.Errorf("SplitSSH(%q) = %q %q %d %v", c.in, u, h, p, err)
		}
	}
}

func TestCheckDevName(t *testing.T) {
	for dev, ok := range map[string]bool{"eth0": true, "enp3s0f1": true, "veth-a.10": true, "": false, ".": false,
		"a/b": false, "a:b": false, "a b": false, "a$(x)": true, "0123456789abcdef": false} {
		// "$" and "(" are legal in Linux interface names: quoting, not this check,
		// keeps them from a shell.
		if err := CheckDevName(dev); (err == nil) != ok {
			t.Errorf("CheckDevName(%q) = %v", dev, err)
		}
	}
}

func TestWriteReadBack(t *testing.T) {
	inv, err := Parse("x.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "out.yaml")
	if err := inv.Write(p, "# written by a test\n"); err != nil {
		t.Fatal(err)
	}
	back, err := Load(p)
	if err != nil {
		b, _ := os.ReadFile(p)
		t.Fatalf("%v\n%s", err, b)
	}
	if back.Hosts["a"].ConnectTimeout != inv.Hosts["a"].ConnectTimeout || back.Client != "a" {
		t.Errorf("read back %+v", back)
	}
}

func TestSudo(t *testing.T) {
	in := strings.Replace(good, "    connect_timeout: 3s\n", "    connect_timeout: 3s\n    sudo: false\n", 1)
	in = strings.Replace(in, "    test_ip: fd00::2\n", "    test_ip: fd00::2\n    sudo: true\n", 1)
	inv, err := Parse("hosts.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	a, b := inv.Hosts["a"], inv.Hosts["b"]
	auto := &Host{Name: "c"}
	for _, c := range []struct {
		h        *Host
		user     string
		needRoot bool
		want     bool
		err      string
	}{
		{auto, "root", true, false, ""},
		{auto, "ann", false, false, ""},
		{auto, "ann", true, true, ""},
		{b, "ann", false, true, ""},
		{b, "root", true, false, ""},
		{a, "ann", false, false, ""},
		{a, "ann", true, false, "host a logs in as ann and says sudo: false"},
	} {
		got, err := c.h.UseSudo(c.user, c.needRoot)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s as %s, needRoot %v: %v, %v", c.h.Name, c.user, c.needRoot, got, err)
		}
	}
	if _, err := Parse("hosts.yaml", []byte(strings.Replace(in, "sudo: true", "sudo: maybe", 1))); err == nil {
		t.Error("sudo: maybe was taken")
	}
}

// TestPairs: pairs: lists every client/server pair; client: and server: are the
// first pair's, written or not; a pair is named in its errors.
func TestPairs(t *testing.T) {
	hosts := `hosts:
  c1: {ssh: root@192.0.2.1, test_ip: 10.0.1.1}
  s1: {ssh: root@192.0.2.2, test_ip: 10.0.2.1}
  c2: {ssh: root@192.0.2.3, test_ip: 10.0.1.2}
  s2: {ssh: root@192.0.2.4, test_ip: 10.0.2.2}
`
	cases := []struct {
		name, in string
		pairs    []Pair
		err      []string
	}{
		{"one pair, no pairs key", hosts + "client: c1\nserver: s1\n", []Pair{{"c1", "s1"}}, nil},
		{"pairs alone", hosts + "pairs:\n  - {client: c1, server: s1}\n  - {client: c2, server: s2}\n",
			[]Pair{{"c1", "s1"}, {"c2", "s2"}}, nil},
		{"pairs and the first pair's client", hosts + "client: c1\npairs:\n  - {client: c1, server: s1}\n  - {client: c2, server: s1}\n",
			[]Pair{{"c1", "s1"}, {"c2", "s1"}}, nil},
		{"client not the first pair's", hosts + "client: c2\npairs:\n  - {client: c1, server: s1}\n",
			nil, []string{"hosts.yaml:6: client", `the first pair's client is "c1"`}},
		{"unknown host in a pair", hosts + "pairs:\n  - {client: c1, server: s1}\n  - {client: c3, server: s2}\n",
			nil, []string{"hosts.yaml:8: pairs[1].client", `no host "c3"`}},
		{"pair to itself", hosts + "pairs:\n  - {client: c1, server: s1}\n  - {client: c2, server: c2}\n",
			nil, []string{"pairs[1].server", `both "c2"`}},
		{"pair twice", hosts + "pairs:\n  - {client: c1, server: s1}\n  - {client: c1, server: s1}\n",
			nil, []string{"pairs[1].client", "pairs 1 and 2 are the same"}},
		{"missing server", hosts + "pairs:\n  - {client: c1}\n", nil, []string{"pairs[0].server", "missing server"}},
		{"neither", hosts, nil, []string{"missing client"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inv, err := Parse("hosts.yaml", []byte(c.in))
			if c.err != nil {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range c.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := inv.PairsOf()
			if len(got) != len(c.pairs) {
				t.Fatalf("pairs %v, want %v", got, c.pairs)
			}
			for i := range got {
				if got[i] != c.pairs[i] {
					t.Errorf("pair %d: %v, want %v", i, got[i], c.pairs[i])
				}
			}
			if inv.Role("client").Name != c.pairs[0].Client || inv.Role("server").Name != c.pairs[0].Server {
				t.Errorf("client %s, server %s: not the first pair's", inv.Client, inv.Server)
			}
		})
	}
}
