package remote

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// hostKeyAlgorithms orders the host key algorithms the client offers so that the
// ones whose keys known_hosts already holds for addr come first, as OpenSSH does.
// The server presents its key for the first algorithm in the client's list that it
// has, and x/crypto/ssh's default list puts ECDSA before ed25519: a host known by
// its ed25519 key that also has an ECDSA one would present the ECDSA key and be
// refused as changed.
//
// It returns nil (x/crypto/ssh's default order) for a host known_hosts does not
// know, and when the files cannot be read: the host key check reads them again and
// reports that error naming the file.
func hostKeyAlgorithms(files []string, addr string) []string {
	var existing []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			existing = append(existing, f)
		}
	}
	if len(existing) == 0 {
		return nil
	}
	cb, err := knownhosts.New(existing...)
	if err != nil {
		return nil
	}
	// knownhosts has no lookup by host, but its check of a key that matches no line
	// lists every line that names the host (hashed ones too) in KeyError.Want. The
	// address is the one the handshake's check gets (NewClientConn's addr), so both
	// find the same lines; the remote address is only used when that is empty.
	err = cb(addr, &net.TCPAddr{IP: net.IPv4zero}, probeKey{})
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	plain := map[string]bool{} // key types known for the host
	ca := false                // a @cert-authority line names the host
	lines := map[string][][]byte{}
	for _, k := range ke.Want {
		// KnownKey does not say whether its line is a @cert-authority one, and a
		// CA's key type says nothing of the type of the host keys it signs.
		if _, ok := lines[k.Filename]; !ok {
			b, _ := os.ReadFile(k.Filename)
			lines[k.Filename] = bytes.Split(b, []byte("\n"))
		}
		if l := lines[k.Filename]; k.Line >= 1 && k.Line <= len(l) && bytes.HasPrefix(bytes.TrimSpace(l[k.Line-1]), []byte("@cert-authority")) {
			ca = true
			continue
		}
		plain[k.Key.Type()] = true
	}
	var first, last []string
	for _, alg := range defaultHostKeyAlgorithms() {
		if isCertAlgorithm(alg) && ca || !isCertAlgorithm(alg) && plain[keyFormat(alg)] {
			first = append(first, alg)
		} else {
			last = append(last, alg)
		}
	}
	if len(first) == 0 {
		// Only key types x/crypto/ssh cannot check (ssh-dss, security keys): the
		// default order gets the host's key refused with its fingerprint all the same.
		return nil
	}
	// The others still follow: a host that now presents a key of another type is
	// then refused as changed, with both fingerprints, rather than failing the
	// handshake with no algorithm in common.
	return append(first, last...)
}

// defaultHostKeyAlgorithms is every host key algorithm x/crypto/ssh implements, in
// its order of preference, with the insecure ones (ssh-rsa's SHA-1 signatures,
// which its own default list still offers for old servers) last.
func defaultHostKeyAlgorithms() []string {
	algs := ssh.SupportedAlgorithms().HostKeys
	for _, a := range ssh.InsecureAlgorithms().HostKeys {
		if !slices.Contains(algs, a) {
			algs = append(algs, a)
		}
	}
	return algs
}

func isCertAlgorithm(alg string) bool { return strings.HasSuffix(alg, "-cert-v01@openssh.com") }

// keyFormat is the key type an algorithm signs with: RSA keys sign with SHA-2
// under other names (RFC 8332).
func keyFormat(alg string) string {
	switch alg {
	case ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSASHA512:
		return ssh.KeyAlgoRSA
	}
	return alg
}

// probeKey is a public key no known_hosts line can hold: its encoding is not a
// valid key's.
type probeKey struct{}

func (probeKey) Type() string    { return "bloatbench-probe" }
func (probeKey) Marshal() []byte { return []byte("\x00\x00\x00\x10bloatbench-probe") }
func (probeKey) Verify([]byte, *ssh.Signature) error {
	return errors.New("bloatbench-probe verifies nothing")
}

// OpenSSH's GlobalKnownHostsFile default: the host keys the administrator pinned
// for every user. Read, never written.
const (
	defaultGlobalKnownHosts  = "/etc/ssh/ssh_known_hosts"
	defaultGlobalKnownHosts2 = "/etc/ssh/ssh_known_hosts2"
)

// knownHostsCheck loads the known_hosts files that exist among files into one host
// key check. A missing file is skipped, as ssh skips the defaults most hosts lack;
// one that exists but cannot be read is an error naming it: checking the host
// without it could take a key it pins as changed for a new one and accept it.
//
// The files go into one knownhosts callback (each is first loaded alone only so
// that an error says which one it is): a key is then accepted when any line in any
// file holds it, a @revoked or @cert-authority line applies whichever file it is
// in, and a host some file knows under other keys is refused as changed, which is
// OpenSSH's reading of several files.
func knownHostsCheck(files []string) (ssh.HostKeyCallback, error) {
	var existing []string
	for _, f := range files {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if _, err := knownhosts.New(f); err != nil {
			return nil, fmt.Errorf("read known_hosts file %s: %w (fix its permissions or contents, or remove it from the configuration)", f, err)
		}
		existing = append(existing, f)
	}
	if len(existing) == 0 {
		// Nothing pinned: every key is unknown.
		return func(string, net.Addr, ssh.PublicKey) error { return &knownhosts.KeyError{} }, nil
	}
	cb, err := knownhosts.New(existing...)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts files %s: %w", strings.Join(existing, ", "), err)
	}
	return cb, nil
}

// knownHostsRemote stands in for the remote address knownhosts insists on (a TCP
// one, split into host and port), which it uses only when it is given no host
// name: the host is always looked up by name here, the address the handshake
// dialed or the HostKeyAlias, not by whatever a ProxyCommand or jump host connects
// to.
func knownHostsRemote() net.Addr { return &net.TCPAddr{IP: net.IPv4zero, Port: 22} }

// appendKnownHost adds a line for the host known_hosts knows as addr (host:port,
// or the HostKeyAlias with port 22) to file, hashed as `ssh-keygen -H` does when
// hash is set (ssh_config's HashKnownHosts), so that the file does not list the
// hosts this user reaches.
func appendKnownHost(file, addr string, key ssh.PublicKey, hash bool) error {
	host := knownhosts.Normalize(addr)
	if hash {
		host = knownhosts.HashHostname(host)
	}
	line := host + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("add host key to %s: %w", file, err)
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("add host key to %s: %w", file, err)
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return fmt.Errorf("add host key to %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("add host key to %s: %w", file, err)
	}
	return nil
}
