package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/bloatbench/bloatbench/inventory"
)

func authorizedLine(host string, k ssh.PublicKey) string {
	return host + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

func writeFile(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// The user's known_hosts and the global one (GlobalKnownHostsFile, by default
// /etc/ssh/ssh_known_hosts, here a temporary file through Dialer.GlobalKnownHosts)
// are read together, as ssh reads them: accept-new adds only a host neither knows,
// and a key either pins otherwise is refused.
func TestGlobalKnownHosts(t *testing.T) {
	key, other := newSigner(t, "ed25519"), newSigner(t, "ed25519")
	addr := sshServer(t, key)
	name := knownhosts.Normalize(addr)
	cases := []struct {
		name        string
		user        []string // lines of the inventory's known_hosts; nil: no such file
		global      []string // lines of the global file; nil: no such file
		globalIsDir bool     // the global file cannot be read
		acceptNew   bool
		wantErr     []string // in the error; nil: the connection is made
		changed     bool     // the error is a changed key
		added       bool     // accept-new added a line to the user's file
	}{
		{name: "AcceptanceGlobalOnlyPinnedChangedKeyRefusedWithAcceptNew",
			user: []string{}, global: []string{"# pinned by the admin", authorizedLine(name, other.PublicKey())}, acceptNew: true,
			wantErr: []string{"HOST KEY HAS CHANGED", "pinned in GLOBAL:2", "ssh-keygen -R " + Quote(name) + " -f GLOBAL", "with --accept-new-host-keys or not"}, changed: true},
		{name: "global-only pinned changed key refused without accept-new",
			global: []string{authorizedLine(name, other.PublicKey())}, wantErr: []string{"HOST KEY HAS CHANGED", "pinned in GLOBAL:1"}, changed: true},
		{name: "global-only pinned key accepted, nothing added",
			user: []string{}, global: []string{authorizedLine(name, key.PublicKey())}, acceptNew: true},
		{name: "user file's key accepted though the global file has an old one",
			user: []string{authorizedLine(name, key.PublicKey())}, global: []string{authorizedLine(name, other.PublicKey())}},
		{name: "user file's changed key refused though the global file is empty",
			user: []string{authorizedLine(name, other.PublicKey())}, global: []string{}, acceptNew: true,
			wantErr: []string{"HOST KEY HAS CHANGED", "pinned in USER:1"}, changed: true},
		{name: "known nowhere: accept-new adds it to the user's file only",
			user: []string{}, global: []string{authorizedLine("192.0.2.1", other.PublicKey())}, acceptNew: true, added: true},
		{name: "known nowhere, no global file: accept-new adds it",
			acceptNew: true, added: true},
		{name: "known nowhere without accept-new: refused naming both files",
			global: []string{}, wantErr: []string{"unknown host key", "USER", "GLOBAL"}},
		{name: "revoked in the global file though pinned in the user's",
			user: []string{authorizedLine(name, key.PublicKey())}, global: []string{"@revoked * " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key.PublicKey())))},
			acceptNew: true, wantErr: []string{"is revoked", "GLOBAL:1"}},
		{name: "unreadable global file is an error naming it",
			user: []string{authorizedLine(name, key.PublicKey())}, globalIsDir: true, acceptNew: true, wantErr: []string{"read known_hosts file GLOBAL"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := clientTarget(t, addr) // for its key
			dir := t.TempDir()
			userKH, global := filepath.Join(dir, "inventory_known_hosts"), filepath.Join(dir, "ssh_known_hosts")
			if c.user != nil {
				writeFile(t, userKH, c.user...)
			}
			if c.global != nil {
				writeFile(t, global, c.global...)
			}
			if c.globalIsDir {
				os.Mkdir(global, 0o755)
			}
			before := readFile(t, userKH)
			d := &Dialer{Home: t.TempDir(), AcceptNew: c.acceptNew, GlobalKnownHosts: []string{global}}
			h := &inventory.Host{Name: "server", SSH: "u@" + addr, IdentityFile: tg.IdentityFiles[0], KnownHosts: userKH}
			conn, err := d.Dial(context.Background(), h)
			if c.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				conn.Close()
			} else {
				if err == nil {
					conn.Close()
					t.Fatal("connected")
				}
				for _, w := range c.wantErr {
					w = strings.NewReplacer("GLOBAL", global, "USER", userKH).Replace(w)
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the error does not say %q: %v", w, err)
					}
				}
				var hk *HostKeyError
				if changed := errors.As(err, &hk) && hk.Changed; changed != c.changed {
					t.Errorf("changed: want %v, got %#v", c.changed, err)
				}
			}
			after := readFile(t, userKH)
			if c.added {
				if !strings.HasPrefix(after, before) || !strings.Contains(after[len(before):], authorizedLine(name, key.PublicKey())) {
					t.Errorf("user's known_hosts after accept-new: %q", after)
				}
			} else if after != before {
				t.Errorf("user's known_hosts changed: %q, was %q", after, before)
			}
			if !c.globalIsDir && c.global != nil && readFile(t, global) != strings.Join(c.global, "\n")+"\n" {
				t.Errorf("the global file was written: %q", readFile(t, global))
			}
		})
	}
}

// Resolve takes the global files from GlobalKnownHostsFile, else the Dialer's,
// else OpenSSH's default; and UserKnownHostsFile none leaves the defaults.
func TestResolveKnownHostsFiles(t *testing.T) {
	cases := []struct {
		name, config string
		dialer       []string
		wantUser     []string
		wantGlobal   []string
	}{
		{"defaults", "", nil,
			[]string{"/h/.ssh/known_hosts", "/h/.ssh/known_hosts2"}, []string{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"}},
		{"dialer's global files", "", []string{"/tmp/g"},
			[]string{"/h/.ssh/known_hosts", "/h/.ssh/known_hosts2"}, []string{"/tmp/g"}},
		{"GlobalKnownHostsFile", "Host x\n  GlobalKnownHostsFile /etc/lab_hosts ~/g2\n  UserKnownHostsFile ~/.ssh/known_hosts ~/u\n", []string{"/tmp/g"},
			[]string{"/h/.ssh/known_hosts", "/h/u", "/h/.ssh/known_hosts2"}, []string{"/etc/lab_hosts", "/h/g2"}},
		{"none", "Host x\n  GlobalKnownHostsFile none\n  UserKnownHostsFile none\n", nil,
			[]string{"/h/.ssh/known_hosts", "/h/.ssh/known_hosts2"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ssh_config.Decode(strings.NewReader(c.config))
			if err != nil {
				t.Fatal(err)
			}
			tg, err := (&Dialer{Config: cfg, Home: "/h", GlobalKnownHosts: c.dialer}).Resolve(&inventory.Host{Name: "x", SSH: "x"})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tg.KnownHosts, c.wantUser) || !reflect.DeepEqual(tg.GlobalKnownHosts, c.wantGlobal) {
				t.Errorf("user %q global %q, want %q %q", tg.KnownHosts, tg.GlobalKnownHosts, c.wantUser, c.wantGlobal)
			}
		})
	}
}

// dialConfig dials inventory host h with an ~/.ssh/config of cfg (%[1]s is
// replaced by the server's port).
func dialConfig(t *testing.T, d *Dialer, cfg string, h *inventory.Host) (*Conn, error) {
	t.Helper()
	c, err := ssh_config.Decode(strings.NewReader(cfg))
	if err != nil {
		t.Fatal(err)
	}
	d.Config = c
	if d.Home == "" {
		d.Home = t.TempDir()
	}
	if d.GlobalKnownHosts == nil {
		d.GlobalKnownHosts = []string{} // not this machine's /etc/ssh/ssh_known_hosts
	}
	return d.Dial(context.Background(), h)
}

// HostKeyAlias: the key is looked up and recorded under the alias, not host:port;
// HashKnownHosts: recorded hashed, and found again by knownhosts.
func TestHostKeyAliasAndHashKnownHosts(t *testing.T) {
	key, other := newSigner(t, "ed25519"), newSigner(t, "ed25519")
	addr := sshServer(t, key)
	_, port, _ := net.SplitHostPort(addr)
	addrName := knownhosts.Normalize(addr)
	cases := []struct {
		name      string
		options   string // for Host lab, besides HostName and Port
		lines     []string
		acceptNew bool
		wantErr   string // "": connects
		wantNew   string // the line accept-new adds starts with this; "": none
		lookupAs  string // the added line is found by knownhosts for this address
	}{
		{name: "alias pinned", options: "HostKeyAlias labalias", lines: []string{authorizedLine("labalias", key.PublicKey())}},
		{name: "alias pinned, hashed", options: "HostKeyAlias labalias", lines: []string{authorizedLine(knownhosts.HashHostname("labalias"), key.PublicKey())}},
		{name: "alias changed", options: "HostKeyAlias labalias", lines: []string{authorizedLine("labalias", other.PublicKey()), authorizedLine(addrName, key.PublicKey())},
			acceptNew: true, wantErr: "HOST KEY HAS CHANGED"},
		// Pinned under host:port only: with an alias that is another name, so
		// unknown, and the message says under which name it was looked for.
		{name: "alias unknown though addr pinned", options: "HostKeyAlias labalias", lines: []string{authorizedLine(addrName, key.PublicKey())},
			wantErr: "unknown host key"},
		{name: "alias accept-new", options: "HostKeyAlias labalias", acceptNew: true, wantNew: "labalias ", lookupAs: "labalias:22"},
		{name: "accept-new plain", acceptNew: true, wantNew: addrName + " ", lookupAs: addr},
		{name: "accept-new hashed", options: "HashKnownHosts yes", acceptNew: true, wantNew: "|1|", lookupAs: addr},
		{name: "accept-new hashed alias", options: "HostKeyAlias labalias\n  HashKnownHosts yes", acceptNew: true, wantNew: "|1|", lookupAs: "labalias:22"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := clientTarget(t, addr, c.lines...)
			cfg := fmt.Sprintf("Host lab\n  HostName 127.0.0.1\n  Port %s\n  %s\n", port, c.options)
			h := &inventory.Host{Name: "server", SSH: "u@lab", IdentityFile: tg.IdentityFiles[0], KnownHosts: tg.KnownHosts[0]}
			before := readFile(t, tg.KnownHosts[0])
			conn, err := dialConfig(t, &Dialer{AcceptNew: c.acceptNew}, cfg, h)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("want an error saying %q, got %v", c.wantErr, err)
				}
				if strings.Contains(c.options, "HostKeyAlias") && !strings.Contains(err.Error(), "labalias") {
					t.Errorf("the error does not name the alias: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()
			added := strings.TrimPrefix(readFile(t, tg.KnownHosts[0]), before)
			if c.wantNew == "" {
				if added != "" {
					t.Errorf("known_hosts got %q", added)
				}
				return
			}
			if !strings.HasPrefix(added, c.wantNew) || strings.Count(added, "\n") != 1 {
				t.Fatalf("added %q, want one line starting %q", added, c.wantNew)
			}
			if strings.HasPrefix(c.wantNew, "|1|") && (strings.Contains(added, "127.0.0.1") || strings.Contains(added, "labalias")) {
				t.Errorf("hashed line names the host: %q", added)
			}
			// knownhosts reads the line back for the name it was written under.
			only := filepath.Join(t.TempDir(), "kh")
			writeFile(t, only, strings.TrimSpace(added))
			cb, err := knownhosts.New(only)
			if err != nil {
				t.Fatal(err)
			}
			if err := cb(c.lookupAs, knownHostsRemote(), key.PublicKey()); err != nil {
				t.Errorf("knownhosts does not find the added line for %s: %v", c.lookupAs, err)
			}
			// And the next connection, without accept-new, takes it.
			conn, err = dialConfig(t, &Dialer{}, cfg, h)
			if err != nil {
				t.Fatalf("after accept-new: %v", err)
			}
			conn.Close()
		})
	}
}

// serveAgent runs an ssh-agent holding keys on a socket, until the test ends.
func serveAgent(t *testing.T, keys ...ed25519.PrivateKey) string {
	t.Helper()
	kr := sshagent.NewKeyring()
	for _, k := range keys {
		if err := kr.Add(sshagent.AddedKey{PrivateKey: k}); err != nil {
			t.Fatal(err)
		}
	}
	// Not t.TempDir(): a socket's path must be short.
	dir, err := os.MkdirTemp("", "bbagent")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		os.RemoveAll(dir)
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sshagent.ServeAgent(kr, c)
			}()
		}
	}()
	return sock
}

func newEd25519(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// IdentitiesOnly: ssh-agent's keys are left out, but for those of the identity
// files (one whose private key needs a passphrase, one kept only as KEY.pub), as
// ssh does; and the default ~/.ssh keys are not added to the given ones.
func TestIdentitiesOnly(t *testing.T) {
	plain, locked, pubOnly, agentOnly := newEd25519(t), newEd25519(t), newEd25519(t), newEd25519(t)
	sock := serveAgent(t, locked, pubOnly, agentOnly)
	dir := t.TempDir()
	pubOf := func(k ed25519.PrivateKey) string {
		s, err := ssh.NewSignerFromKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return string(s.PublicKey().Marshal())
	}
	blk, _ := ssh.MarshalPrivateKey(plain, "")
	writeFile(t, filepath.Join(dir, "plain"), strings.TrimSpace(string(pem.EncodeToMemory(blk))))
	blk, err := ssh.MarshalPrivateKeyWithPassphrase(locked, "", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "locked"), strings.TrimSpace(string(pem.EncodeToMemory(blk))))
	pk, _ := ssh.NewPublicKey(pubOnly.Public())
	writeFile(t, filepath.Join(dir, "pubonly.pub"), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk))))
	home := t.TempDir()
	cases := []struct {
		name, config string
		identity     string // the inventory's identity_file
		wantFiles    []string
		wantKeys     []ed25519.PrivateKey
	}{
		{"agent keys offered without IdentitiesOnly", "Host lab\n  IdentityFile " + dir + "/locked\n  IdentityFile " + dir + "/pubonly\n", dir + "/plain",
			[]string{dir + "/plain", dir + "/locked", dir + "/pubonly", home + "/.ssh/id_ed25519", home + "/.ssh/id_ecdsa", home + "/.ssh/id_rsa"},
			[]ed25519.PrivateKey{plain, locked, pubOnly, agentOnly}},
		{"IdentitiesOnly leaves the agent's other keys out", "Host lab\n  IdentitiesOnly yes\n  IdentityFile " + dir + "/locked\n  IdentityFile " + dir + "/pubonly\n", dir + "/plain",
			[]string{dir + "/plain", dir + "/locked", dir + "/pubonly"},
			[]ed25519.PrivateKey{plain, locked, pubOnly}},
		{"IdentitiesOnly with the inventory's key only", "Host lab\n  IdentitiesOnly yes\n", dir + "/plain",
			[]string{dir + "/plain"}, []ed25519.PrivateKey{plain}},
		{"IdentitiesOnly with no key given tries the defaults", "Host *\n  IdentitiesOnly yes\n", "",
			[]string{home + "/.ssh/id_ed25519", home + "/.ssh/id_ecdsa", home + "/.ssh/id_rsa"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ssh_config.Decode(strings.NewReader(c.config))
			if err != nil {
				t.Fatal(err)
			}
			d := &Dialer{Config: cfg, Home: home, AgentSocket: sock}
			tg, err := d.Resolve(&inventory.Host{Name: "lab", SSH: "lab", IdentityFile: c.identity})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tg.IdentityFiles, c.wantFiles) {
				t.Errorf("identity files %q, want %q", tg.IdentityFiles, c.wantFiles)
			}
			signers, closer, err := d.signers(context.Background(), tg)
			defer closer()
			if c.wantKeys == nil {
				if err == nil || !strings.Contains(err.Error(), "IdentitiesOnly") {
					t.Errorf("want an error saying IdentitiesOnly kept the agent's keys out, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, want := map[string]bool{}, map[string]bool{}
			for _, s := range signers {
				got[string(s.PublicKey().Marshal())] = true
			}
			for _, k := range c.wantKeys {
				want[pubOf(k)] = true
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("offered %d keys, want %d (agent-only offered: %v)", len(got), len(want), got[pubOf(agentOnly)])
			}
		})
	}
}

func TestExpandProxyCommand(t *testing.T) {
	cases := []struct {
		cmd, host, port, user, alias string
		want, wantErr                string
	}{
		{cmd: "nc %h %p", host: "192.0.2.1", port: "2222", want: "nc 192.0.2.1 2222"},
		{cmd: "ssh -W %h:%p -l %r bastion # %n 100%%", host: "lab.example", port: "22", user: "ann", alias: "lab", want: "ssh -W lab.example:22 -l ann bastion # lab 100%"},
		{cmd: "nc %h %p", host: "a b;rm -rf ~", port: "22", want: "nc 'a b;rm -rf ~' 22"},
		{cmd: "connect %r", user: "o'neil", want: `connect 'o'\''neil'`},
		{cmd: "nc %h %x", wantErr: "unknown token %x"},
		{cmd: "nc %h %", wantErr: "lone %"},
	}
	for _, c := range cases {
		t.Run(c.cmd, func(t *testing.T) {
			got, err := expandProxyCommand(c.cmd, c.host, c.port, c.user, c.alias)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %q, %v; want an error saying %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// ProxyJump and ProxyCommand: the first one set for the host applies, "none"
// included, as in ssh.
func TestResolveProxy(t *testing.T) {
	const cfg = `Host direct
  ProxyCommand none
Host viajump
  ProxyJump bastion
Host both
  ProxyCommand nc -X connect %h %p
  ProxyJump bastion
Host *
  ProxyCommand ssh -W %h:%p -l %r gw
`
	c, err := ssh_config.Decode(strings.NewReader(cfg))
	if err != nil {
		t.Fatal(err)
	}
	d := &Dialer{Config: c, Home: "/h"}
	for _, tc := range []struct {
		dest, wantCommand string
		wantJump          []string
	}{
		{"direct", "", nil},
		{"viajump", "", []string{"bastion"}},
		{"both", "nc -X connect both 22", nil},
		{"me@other:2200", "ssh -W other:2200 -l me gw", nil},
	} {
		tg, err := d.Resolve(&inventory.Host{Name: "h", SSH: tc.dest})
		if err != nil {
			t.Fatal(err)
		}
		if tg.ProxyCommand != tc.wantCommand || !reflect.DeepEqual(tg.ProxyJump, tc.wantJump) {
			t.Errorf("%s: ProxyCommand %q ProxyJump %q, want %q %q", tc.dest, tg.ProxyCommand, tg.ProxyJump, tc.wantCommand, tc.wantJump)
		}
	}
}

const proxyHelperEnv = "BLOATBENCH_TEST_PROXY_HELPER"

// TestMain runs the tests, or, as a ProxyCommand of the tests below (this test
// binary, with proxyHelperEnv set), proxyHelper.
func TestMain(m *testing.M) {
	if os.Getenv(proxyHelperEnv) != "" {
		proxyHelper(os.Args[1:])
	}
	os.Exit(m.Run())
}

// proxyHelper is nc HOST PORT PIDFILE (after a "--"): it writes its pid to PIDFILE
// and joins its stdin and stdout to a TCP connection, then exits.
func proxyHelper(args []string) {
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "helper: want -- HOST PORT PIDFILE, got", args)
		os.Exit(2)
	}
	os.WriteFile(args[2], []byte(strconv.Itoa(os.Getpid())), 0o600)
	c, err := net.Dial("tcp", net.JoinHostPort(args[0], args[1]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	go func() {
		io.Copy(c, os.Stdin)
		c.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(os.Stdout, c)
	os.Exit(0)
}

// gone waits for the process whose pid is in file to be gone.
func gone(t *testing.T, file string) {
	t.Helper()
	var pid int
	deadline := time.Now().Add(5 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(file)
		if pid, _ = strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
			break
		}
	}
	if pid <= 0 {
		t.Fatalf("the ProxyCommand wrote no pid to %s", file)
	}
	for ; time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// A zombie counts as gone: an orphan's reaper (PID 1 of a container)
		// may never wait for it.
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) || bytes.Contains(stat, []byte(") Z ")) {
			return
		}
	}
	t.Errorf("the ProxyCommand (pid %d) is still running", pid)
}

// A connection through a ProxyCommand, to the in-process server on 127.0.0.1: the
// command's stdin and stdout carry it, its host key is checked under the host's
// address, and closing the connection ends the command.
func TestProxyCommand(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	addr, hostKey := execServer(t, home, "")
	host, port, _ := net.SplitHostPort(addr)
	cfg := func(command string) string {
		return fmt.Sprintf("Host lab\n  HostName %s\n  Port %s\n  ProxyCommand %s\n", host, port, command)
	}
	pidFile := func(t *testing.T) string { return filepath.Join(t.TempDir(), "pid") }
	helper := func(pid string) string {
		return "env " + proxyHelperEnv + "=1 " + Quote(self) + " -- %h %p " + Quote(pid)
	}
	target := func(t *testing.T) *inventory.Host {
		tg := clientTarget(t, addr, authorizedLine(knownhosts.Normalize(addr), hostKey.PublicKey()))
		return &inventory.Host{Name: "server", SSH: "u@lab", IdentityFile: tg.IdentityFiles[0], KnownHosts: tg.KnownHosts[0],
			ConnectTimeout: inventory.Duration(10 * time.Second)}
	}

	t.Run("connects and runs a command", func(t *testing.T) {
		pid := pidFile(t)
		conn, err := dialConfig(t, &Dialer{}, cfg(helper(pid)), target(t))
		if err != nil {
			t.Fatal(err)
		}
		out, err := conn.Output(context.Background(), "echo through the proxy", nil)
		if err != nil || string(out) != "through the proxy\n" {
			t.Errorf("output %q, %v", out, err)
		}
		if err := conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Logf("close: %v", err)
		}
		gone(t, pid)
	})
	t.Run("a command that fails says why", func(t *testing.T) {
		_, err := dialConfig(t, &Dialer{}, cfg(`sh -c "echo no route to %h >&2; exit 1"`), target(t))
		if err == nil {
			t.Fatal("connected")
		}
		for _, want := range []string{"host server", "ProxyCommand", "the ProxyCommand said: no route to " + host} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q: %v", want, err)
			}
		}
	})
	t.Run("cancelling the dial kills the command", func(t *testing.T) {
		pid := pidFile(t)
		// A command that never answers: the handshake waits on it.
		command := "sh -c " + Quote("echo $$ > "+Quote(pid)+"; exec sleep 30")
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		c, err := ssh_config.Decode(strings.NewReader(cfg(command)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = (&Dialer{Config: c, Home: t.TempDir(), GlobalKnownHosts: []string{}}).Dial(ctx, target(t))
		if err == nil {
			t.Fatal("connected")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the dial took %v after its context was cancelled", d)
		}
		gone(t, pid)
	})
}

// proxyConn alone: Close ends a command that ignores its stdin's EOF, and its group.
func TestProxyConnCloseKillsGroup(t *testing.T) {
	pid := filepath.Join(t.TempDir(), "pid")
	// The shell stays (two commands) and its child is in its group.
	c, err := startProxyCommand(context.Background(), "sh -c "+Quote("sleep 30 & echo $! > "+Quote(pid)+"; wait"), "x:22")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500 && readFile(t, pid) == ""; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > proxyKillDelay+time.Second {
		t.Errorf("Close took %v", d)
	}
	gone(t, pid)
	if _, err := c.Write([]byte("x")); err == nil {
		t.Error("write after Close")
	}
}

// A ProxyJump host is checked against the inventory's known_hosts too: pinned only
// there it is let through, and with a changed key there it is refused, accept-new
// or not.
func TestJumpHostUsesInventoryKnownHosts(t *testing.T) {
	jumpKey, other := newSigner(t, "ed25519"), newSigner(t, "ed25519")
	jcfg := &ssh.ServerConfig{NoClientAuth: true}
	jcfg.AddHostKey(jumpKey)
	jumpAddr := serveSSH(t, jcfg, forwardTCP)
	home := t.TempDir()
	addr, hostKey := execServer(t, home, "")
	_, jport, _ := net.SplitHostPort(jumpAddr)
	cfg := fmt.Sprintf("Host lab\n  HostName 127.0.0.1\n  Port %s\n  ProxyJump bastion\nHost bastion\n  HostName 127.0.0.1\n  Port %s\n", strings.Split(addr, ":")[1], jport)
	cases := []struct {
		name      string
		jumpLine  string
		acceptNew bool
		wantErr   string
	}{
		{"jump host pinned in the inventory's known_hosts", authorizedLine(knownhosts.Normalize(jumpAddr), jumpKey.PublicKey()), false, ""},
		{"jump host changed in the inventory's known_hosts", authorizedLine(knownhosts.Normalize(jumpAddr), other.PublicKey()), true, "jump host bastion: host server via bastion"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := clientTarget(t, addr, authorizedLine(knownhosts.Normalize(addr), hostKey.PublicKey()), c.jumpLine)
			// The jump host has no identity_file: it gets the default key.
			dHome := t.TempDir()
			b, _ := os.ReadFile(tg.IdentityFiles[0])
			writeFile(t, filepath.Join(dHome, ".ssh", "id_ed25519"), strings.TrimSpace(string(b)))
			before := readFile(t, tg.KnownHosts[0])
			h := &inventory.Host{Name: "server", SSH: "u@lab", IdentityFile: tg.IdentityFiles[0], KnownHosts: tg.KnownHosts[0]}
			conn, err := dialConfig(t, &Dialer{Home: dHome, AcceptNew: c.acceptNew}, cfg, h)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				out, err := conn.Output(context.Background(), "echo via the jump host", nil)
				if err != nil || string(out) != "via the jump host\n" {
					t.Errorf("output %q, %v", out, err)
				}
				conn.Close()
				return
			}
			var hk *HostKeyError
			if !errors.As(err, &hk) || !hk.Changed || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), tg.KnownHosts[0]+":2") {
				t.Fatalf("want the jump host's changed key refused, got %v", err)
			}
			if after := readFile(t, tg.KnownHosts[0]); after != before {
				t.Errorf("known_hosts changed: %q", after)
			}
		})
	}
}

// forwardTCP serves a direct-tcpip channel (what a jump host's sshd does for
// ProxyJump) by dialing where it asks.
func forwardTCP(nch ssh.NewChannel) {
	if nch.ChannelType() != "direct-tcpip" {
		nch.Reject(ssh.UnknownChannelType, "direct-tcpip only")
		return
	}
	var p struct {
		Host     string
		Port     uint32
		OrigHost string
		OrigPort uint32
	}
	if err := ssh.Unmarshal(nch.ExtraData(), &p); err != nil {
		nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	c, err := net.Dial("tcp", net.JoinHostPort(p.Host, strconv.Itoa(int(p.Port))))
	if err != nil {
		nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nch.Accept()
	if err != nil {
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	go func() {
		io.Copy(ch, c)
		ch.CloseWrite()
	}()
	go func() {
		io.Copy(c, ch)
		c.Close()
		ch.Close()
	}()
}
