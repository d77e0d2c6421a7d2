package controller

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

func TestParseFacts(t *testing.T) {
	out := strings.Join([]string{
		"kernel.release=6.1.0-27-amd64",
		"kernel.cmdline=BOOT_IMAGE=/vmlinuz root=UUID=x ro quiet",
		"a motd line with = in it but spaces in the key",
		"/proc/sys/net/ipv4/tcp_congestion_control:cubic",
		"/proc/sys/net/ipv4/tcp_rmem:4096\t131072\t6291456",
		"/proc/sys/net/core/dev_weight:64",
		"/proc/sys/net/core/table:line one",
		"/proc/sys/net/core/table:line two",
		"dev.eth0.qdiscs=qdisc mq 0: root;qdisc fq_codel 0: parent :1 limit 10240p;",
		"",
	}, "\n")
	want := map[string]string{
		"kernel.release":                         "6.1.0-27-amd64",
		"kernel.cmdline":                         "BOOT_IMAGE=/vmlinuz root=UUID=x ro quiet",
		"sysctl.net.ipv4.tcp_congestion_control": "cubic",
		"sysctl.net.ipv4.tcp_rmem":               "4096 131072 6291456",
		"sysctl.net.core.dev_weight":             "64",
		"sysctl.net.core.table":                  "line one; line two",
		"dev.eth0.qdiscs":                        "qdisc mq 0: root;qdisc fq_codel 0: parent :1 limit 10240p;",
	}
	if got := parseFacts(out); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

// The script itself, on this machine with loopback as the device: it runs under sh
// and gives the facts every host has.
func TestFactsScriptRunsHere(t *testing.T) {
	out, err := exec.Command("sh", "-c", factsOfHost, "sh", "lo").Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f := parseFacts(string(out))
	for _, k := range []string{"kernel.release", "kernel.cmdline", "cpu.count", "sysctl.net.ipv4.tcp_congestion_control", "sysctl.net.core.somaxconn", "dev.lo.qdiscs"} {
		if f[k] == "" {
			t.Errorf("no %s in %d facts", k, len(f))
		}
	}
}
