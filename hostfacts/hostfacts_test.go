package hostfacts

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A host laid out under a scratch root, with its tools' outputs as recorded on a
// veth (ethtool 6.1) and an htb tree: every fact, as the controller keeps it.
func TestGatherFrom(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"proc/sys/kernel/osrelease":                                  "6.1.0-27-amd64\n",
		"proc/cmdline":                                               "BOOT_IMAGE=/vmlinuz root=UUID=x ro quiet\n",
		"proc/cpuinfo":                                               "processor\t: 0\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n",
		"proc/sys/net/ipv4/tcp_congestion_control":                   "cubic\n",
		"proc/sys/net/ipv4/tcp_rmem":                                 "4096\t131072\t6291456\n",
		"proc/sys/net/ipv4/tcp_empty":                                "",
		"proc/sys/net/ipv4/ip_forward":                               "1\n", // not tcp_: left out
		"proc/sys/net/core/dev_weight":                               "64\n",
		"proc/sys/net/core/table":                                    "line one\n\nline two\n",
		"sys/module/sch_fq_codel/version":                            "",
		"sys/module/sch_fq_codel/srcversion":                         "ABC123\n",
		"sys/module/sch_dualpi2/version":                             "1.0\n",
		"sys/module/sch_htb/uevent":                                  "",
		"sys/class/net/eth0/queues/tx-0/byte_queue_limits/limit_max": "1879048192\n",
		"sys/class/net/eth0/queues/tx-0/byte_queue_limits/limit_min": "0\n",
		"sys/class/net/eth0/queues/tx-1/xps_cpus":                    "0\n", // no BQL
		"sys/class/net/eth0/speed":                                   "10000\n",
	}
	for p, c := range files {
		path := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outputs := map[string]string{
		"ethtool -i eth0": "driver: veth\nversion: 1.0\nfirmware-version: \nexpansion-rom-version: \nbus-info: \n",
		"ethtool -k eth0": "Features for eth0:\nrx-checksumming: on\ntcp-segmentation-offload: on\n\ttx-tcp-segmentation: on\n" +
			"generic-segmentation-offload: off\ngeneric-receive-offload: on\nlarge-receive-offload: off [fixed]\n",
		"ethtool -l eth0":        "Channel parameters for eth0:\nPre-set maximums:\nRX:\t\t4\nTX:\t\t4\nOther:\t\tn/a\nCombined:\tn/a\nCurrent hardware settings:\nRX:\t\t1\nTX:\t\t2\nOther:\t\tn/a\nCombined:\tn/a\n",
		"tc qdisc show dev eth0": "qdisc htb 1: root refcnt 3 r2q 10 default 0x10 direct_packets_stat 0 direct_qlen 1000\nqdisc fq_codel 8001: parent 1:10 limit 10240p \n",
		"tc class show dev eth0": "class htb 1:10 root leaf 8001: prio 0 rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b \n",
	}
	run := func(_ context.Context, name string, args ...string) []byte {
		return []byte(outputs[name+" "+strings.Join(args, " ")])
	}
	want := Facts{
		"kernel.release":                                "6.1.0-27-amd64",
		"kernel.cmdline":                                "BOOT_IMAGE=/vmlinuz root=UUID=x ro quiet",
		"cpu.count":                                     "2",
		"cpu.model":                                     "AMD EPYC 7B13",
		"sysctl.net.ipv4.tcp_congestion_control":        "cubic",
		"sysctl.net.ipv4.tcp_rmem":                      "4096 131072 6291456",
		"sysctl.net.core.dev_weight":                    "64",
		"sysctl.net.core.table":                         "line one; line two",
		"module.sch_fq_codel":                           "ABC123",
		"module.sch_dualpi2":                            "1.0",
		"module.sch_htb":                                "built-in",
		"dev.eth0.driver":                               "veth",
		"dev.eth0.driver_version":                       "1.0",
		"dev.eth0.firmware":                             "",
		"dev.eth0.offload.tcp-segmentation-offload":     "on",
		"dev.eth0.offload.generic-segmentation-offload": "off",
		"dev.eth0.offload.generic-receive-offload":      "on",
		"dev.eth0.offload.large-receive-offload":        "off [fixed]",
		"dev.eth0.channels.RX":                          "1",
		"dev.eth0.channels.TX":                          "2",
		"dev.eth0.channels.Combined":                    "n/a",
		"dev.eth0.bql.tx-0.limit_max":                   "1879048192",
		"dev.eth0.bql.tx-0.limit_min":                   "0",
		"dev.eth0.qdiscs":                               "qdisc htb 1: root refcnt 3 r2q 10 default 0x10 direct_packets_stat 0 direct_qlen 1000;qdisc fq_codel 8001: parent 1:10 limit 10240p ;",
		"dev.eth0.classes":                              "class htb 1:10 root leaf 8001: prio 0 rate 10Mbit ceil 10Mbit burst 1600b cburst 1600b ;",
		"dev.eth0.speed":                                "10000",
	}
	got := gatherFrom(context.Background(), root, []string{"eth0"}, run)
	if !reflect.DeepEqual(got, want) {
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: got %q (present %v), want %q", k, g, ok, v)
			}
		}
		for k, v := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: %q, not wanted", k, v)
			}
		}
	}
}

// On this machine, with loopback and a device with an htb tree as the bottlenecks,
// the agent's reading gives what the shell script the controller ran before gave
// (testdata/facts-script.sh, its output parsed as the controller parsed it): the
// same keys and the same values, so that facts of runs before and after compare.
func TestGatherAgreesWithTheScript(t *testing.T) {
	devs := []string{"lo"}
	if os.Geteuid() == 0 {
		// A device of this test's own, in a namespace of its own, with classes.
		ns := fmt.Sprintf("bbfacts%d", os.Getpid())
		for _, c := range [][]string{
			{"ip", "netns", "add", ns},
			{"ip", "-n", ns, "link", "add", "fa0", "type", "veth", "peer", "name", "fb0"},
			{"ip", "-n", ns, "link", "set", "fa0", "up"},
			{"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "fa0", "root", "handle", "1:", "htb", "default", "10"},
			{"ip", "netns", "exec", ns, "tc", "class", "add", "dev", "fa0", "parent", "1:", "classid", "1:10", "htb", "rate", "10mbit"},
		} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				exec.Command("ip", "netns", "del", ns).Run()
				t.Fatalf("%v: %v: %s", c, err, out)
			}
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		script, err := os.ReadFile("testdata/facts-script.sh")
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", string(script), "sh", "lo", "fa0").Output()
		if err != nil {
			t.Fatal(err)
		}
		// Gather runs in the namespace as the agent would there: this test binary
		// again, run by ip netns exec.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", ns, self)
		cmd.Env = append(os.Environ(), "HOSTFACTS_PRINT=lo,fa0")
		printed, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %s", err, printed)
		}
		compareFacts(t, parseScript(string(out)), parseScript(string(printed)), "fa0")
		return
	}
	script, err := os.ReadFile("testdata/facts-script.sh")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", string(script), "sh", devs[0]).Output()
	if err != nil {
		t.Fatal(err)
	}
	compareFacts(t, parseScript(string(out)), Gather(context.Background(), devs), "lo")
}

// TestMain doubles as the agent of TestGatherAgreesWithTheScript: with
// HOSTFACTS_PRINT set (to devices, comma-separated) it prints Gather's facts as
// key=value lines, run in another network namespace, and runs no test.
func TestMain(m *testing.M) {
	if devs := os.Getenv("HOSTFACTS_PRINT"); devs != "" {
		for k, v := range Gather(context.Background(), strings.Split(devs, ",")) {
			os.Stdout.WriteString(k + "=" + v + "\n")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// compareFacts checks got against the script's facts, key for key; dev is a device
// that must have qdiscs.
func compareFacts(t *testing.T, script, got Facts, dev string) {
	t.Helper()
	for _, k := range []string{"kernel.release", "kernel.cmdline", "cpu.count", "sysctl.net.ipv4.tcp_congestion_control", "sysctl.net.core.somaxconn", "dev." + dev + ".qdiscs"} {
		if script[k] == "" {
			t.Errorf("the script gave no %s: %v", k, script)
		}
	}
	for k, v := range script {
		// A sysctl that counts (tcp_fastopen's key is random) may move between
		// the two readings; the set of keys may not.
		if g, ok := got[k]; !ok || g != v && !strings.HasSuffix(k, "fastopen_key") {
			t.Errorf("%s: got %q (present %v), the script %q", k, g, ok, v)
		}
	}
	for k, v := range got {
		if _, ok := script[k]; !ok {
			t.Errorf("%s: %q, which the script did not give", k, v)
		}
	}
}

// parseScript reads the script's output as the controller did: key=value lines,
// and grep's /proc/sys/PATH:VALUE lines as sysctl.DOTTED.PATH.
func parseScript(out string) Facts {
	f := Facts{}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "/proc/sys/"); ok {
			if path, v, ok := strings.Cut(rest, ":"); ok && path != "" {
				f.add("sysctl."+strings.ReplaceAll(path, "/", "."), v)
			}
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && k != "" && !strings.ContainsAny(k, " \t") {
			f.add(k, v)
		}
	}
	return f
}
