package remote

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// sshServer runs an in-process SSH server with the given host keys that lets any
// client in and refuses every channel: enough for a handshake and its host key
// check. It returns the server's host:port.
func sshServer(t *testing.T, hostKeys ...ssh.Signer) string {
	t.Helper()
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	for _, k := range hostKeys {
		cfg.AddHostKey(k)
	}
	return serveSSH(t, cfg, func(nch ssh.NewChannel) { nch.Reject(ssh.Prohibited, "test server") })
}

// serveSSH accepts SSH connections on a loopback port until the test ends and hands
// each channel asked for to onChannel. It returns the server's host:port.
func serveSSH(t *testing.T, cfg *ssh.ServerConfig, onChannel func(ssh.NewChannel)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				sc, chans, reqs, err := ssh.NewServerConn(nc, cfg)
				if err != nil {
					return
				}
				defer sc.Close()
				go ssh.DiscardRequests(reqs)
				for nch := range chans {
					onChannel(nch)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func newSigner(t *testing.T, kind string) ssh.Signer {
	t.Helper()
	var key any
	var err error
	switch kind {
	case "ed25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	case "ecdsa":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "rsa":
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clientTarget is a target for addr whose known_hosts holds lines, with a fresh
// client key.
func clientTarget(t *testing.T, addr string, lines ...string) Target {
	t.Helper()
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	id := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(id, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(kh, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Target{Name: "server", User: "u", Addr: addr, IdentityFiles: []string{id}, KnownHosts: []string{kh},
		ConnectTimeout: 10 * time.Second, CommandTimeout: 10 * time.Second}
}

// A host known by its ed25519 key that also has an ECDSA one, which x/crypto/ssh's
// default order asks for first: the client must ask for the key it knows, as
// OpenSSH does, not refuse the host as changed.
func TestHostKnownByEd25519AlsoOffersECDSA(t *testing.T) {
	ed, ec := newSigner(t, "ed25519"), newSigner(t, "ecdsa")
	addr := sshServer(t, ec, ed)
	for _, c := range []struct {
		name string
		line string
	}{
		{"plain", knownhosts.Line([]string{addr}, ed.PublicKey())},
		{"hashed", knownhosts.HashHostname(knownhosts.Normalize(addr)) + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ed.PublicKey())))},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := clientTarget(t, addr, "# other hosts first", knownhosts.Line([]string{"192.0.2.9"}, ec.PublicKey()), c.line)
			conn, err := (&Dialer{}).DialTarget(context.Background(), tg)
			if err != nil {
				t.Fatalf("host known by its ed25519 key: %v", err)
			}
			conn.Close()
		})
	}
	// A host that really presents another key is still refused as changed.
	t.Run("changed", func(t *testing.T) {
		other := newSigner(t, "ed25519")
		tg := clientTarget(t, addr, knownhosts.Line([]string{addr}, other.PublicKey()))
		_, err := (&Dialer{}).DialTarget(context.Background(), tg)
		var hk *HostKeyError
		if !errors.As(err, &hk) || !hk.Changed || hk.KeyType != ssh.KeyAlgoED25519 {
			t.Fatalf("want a changed ed25519 key refused, got %v", err)
		}
	})
	// An unknown host is offered the default order; accept-new records the key the
	// server picked.
	t.Run("unknown", func(t *testing.T) {
		tg := clientTarget(t, addr)
		conn, err := (&Dialer{AcceptNew: true}).DialTarget(context.Background(), tg)
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		b, _ := os.ReadFile(tg.KnownHosts[0])
		if !strings.Contains(string(b), ssh.KeyAlgoECDSA256) {
			t.Errorf("known_hosts after accept-new: %s", b)
		}
	})
}

func TestHostKeyAlgorithms(t *testing.T) {
	ed, ec, rs := newSigner(t, "ed25519"), newSigner(t, "ecdsa"), newSigner(t, "rsa")
	const addr = "192.0.2.5:2222"
	authorized := func(k ssh.PublicKey) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) }
	all := defaultHostKeyAlgorithms()
	var certs []string
	for _, a := range all {
		if strings.Contains(a, "-cert-") {
			certs = append(certs, a)
		}
	}
	if !slices.Contains(certs, ssh.CertAlgoED25519v01) || !slices.Contains(all, ssh.KeyAlgoRSA) {
		t.Fatalf("algorithms %v", all)
	}
	cases := []struct {
		name  string
		lines []string
		first []string // nil: the default order, unchanged
	}{
		{"unknown host", []string{knownhosts.Line([]string{"192.0.2.6:2222"}, ed.PublicKey())}, nil},
		{"ed25519", []string{knownhosts.Line([]string{addr}, ed.PublicKey())}, []string{ssh.KeyAlgoED25519}},
		{"rsa and ecdsa, hashed", []string{
			knownhosts.HashHostname("[192.0.2.5]:2222") + " " + authorized(rs.PublicKey()),
			"[192.0.2.5]:2222 " + authorized(ec.PublicKey()),
		}, []string{ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoECDSA256, ssh.KeyAlgoRSA}},
		// A CA signs host keys of any type: every certificate algorithm first, and
		// not the plain ed25519 one, the CA's own key type.
		{"cert authority", []string{"@cert-authority [192.0.2.*]:2222 " + authorized(ed.PublicKey())}, certs},
		{"wrong port", []string{knownhosts.Line([]string{"192.0.2.5"}, ed.PublicKey())}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kh := filepath.Join(t.TempDir(), "known_hosts")
			os.WriteFile(kh, []byte(strings.Join(c.lines, "\n")+"\n"), 0o600)
			got := hostKeyAlgorithms([]string{kh, filepath.Join(t.TempDir(), "absent")}, addr)
			if c.first == nil {
				if got != nil {
					t.Errorf("got %v, want the default order (nil)", got)
				}
				return
			}
			if !reflect.DeepEqual(got[:len(c.first)], c.first) {
				t.Errorf("first algorithms %v, want %v", got[:len(c.first)], c.first)
			}
			// The others follow, so that a host that changed its key type is
			// still told apart from one with no algorithm in common.
			rest := map[string]bool{}
			for _, a := range got {
				rest[a] = true
			}
			for _, a := range all {
				if !rest[a] {
					t.Errorf("%s missing from %v", a, got)
				}
			}
			if len(got) != len(all) {
				t.Errorf("%d algorithms, want %d: %v", len(got), len(all), got)
			}
		})
	}
}
