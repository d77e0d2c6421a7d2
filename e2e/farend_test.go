package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/inventory"
)

// flent's model: run from inside the lab's client namespace, this machine (the
// namespace) the client and -H the far end, reached over SSH as ~/.ssh/config says,
// with no inventory. The far end's sshd listens on the lab's management network
// only, so the config reaches it as a user's config reaches a host behind a jump:
// a ProxyCommand into the server's namespace. -H names the server's test address,
// which is then its test address (flent's -H), and a setup on the far end's
// --bottleneck is applied over SSH and undone.
func TestFarEndAsFlentHasIt(t *testing.T) {
	functional(t)
	_, inv := lab(t)
	srv := inv.Hosts[inv.Server]
	_, mgmt, _, err := inventory.SplitSSH(srv.SSH)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	config := strings.Join([]string{
		"Host " + srv.TestIP,
		"  User root",
		"  IdentityFile " + srv.IdentityFile,
		"  UserKnownHostsFile " + srv.KnownHosts,
		// known_hosts names the server by its management address.
		"  HostKeyAlias " + mgmt,
		"  ProxyCommand ip netns exec " + inv.Testbed + "-" + inv.Server + " busybox nc " + mgmt + " 22",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	before := bothStates(t, inv)
	inClient := []string{"netns", "exec", inv.Testbed + "-" + inv.Client, bin}
	extra := []string{"HOME=" + home, "XDG_STATE_HOME=" + t.TempDir()}
	env := append(os.Environ(), extra...)
	out := t.TempDir()
	cmd := exec.Command("ip", append(inClient, "run", "-H", srv.TestIP,
		"--bottleneck", "server:test0", "--setup", "pfifo_fast",
		"-l", "5", "-d", "1", "-o", out, "--format", "json", "tcp_4down")...)
	cmd.Env = env
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("run -H %s: %v\n%s", srv.TestIP, err, e.String())
	}
	m := parseSummary(t, o.String())
	for _, row := range []string{"TCP download sum", "Ping (ms) ICMP loaded", "Ping (ms) ICMP idle"} {
		if m[row] <= 0 {
			t.Errorf("row %q is %v:\n%s", row, m[row], o.String())
		}
	}
	run := dataFile(t, out)
	hosts := map[string]string{}
	for _, h := range run.Metadata.Hosts {
		hosts[h.Role] = h.SSH + " " + h.TestIP
	}
	if want := "local " + inv.Hosts[inv.Client].TestIP; hosts["client"] != want {
		t.Errorf("the client is %q in the data file, want %q (this machine, its route's source address)", hosts["client"], want)
	}
	if want := srv.TestIP + " " + srv.TestIP; hosts["server"] != want {
		t.Errorf("the server is %q in the data file, want %q", hosts["server"], want)
	}
	if run.Metadata.Setup == nil || !strings.Contains(e.String(), "applied") {
		t.Errorf("setup pfifo_fast on server:test0 not applied (setup %v):\n%s", run.Metadata.Setup, e.String())
	}
	if after := bothStates(t, inv); after != before {
		t.Errorf("the hosts are not as found:\nbefore\n%s\nafter\n%s", before, after)
	}

	// A controller killed mid-run with a setup on both ends, this machine's (ssh:
	// local) and the far end's: restore puts back the first on this machine, as
	// root, and the second over SSH.
	k := startCmd(t, extra, "ip", append(inClient, "run", "-H", srv.TestIP,
		"--bottleneck", "client:test0", "--bottleneck", "server:test0", "--setup", "pfifo_fast",
		"-l", "30", "-d", "1", "-o", t.TempDir(), "tcp_4down")...)
	k.waitLog(t, "streams started")
	if mid := bothStates(t, inv); mid == before {
		t.Errorf("the setup changed nothing:\n%s", mid)
	}
	k.cmd.Process.Kill()
	k.wait(t)
	cmd = exec.Command("ip", append(inClient, "restore")...)
	cmd.Env = env
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, b)
	}
	for _, want := range []string{"restored client:test0", "restored server:test0"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("restore does not say %q:\n%s", want, b)
		}
	}
	if after := bothStates(t, inv); after != before {
		t.Errorf("after restore the hosts are not as found:\nbefore\n%s\nafter\n%s", before, after)
	}
}
