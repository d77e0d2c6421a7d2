package runners

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

func TestMAC(t *testing.T) {
	nonce := []byte("0123456789abcdef")
	other := []byte("fedcba9876543210")
	h := hello{Flow: "TCP download::1", Direction: Download, CC: "reno", TOS: 184, Duration: 60}
	good := macFields("secret", ctxStream, nonce, h.fields()...)
	tampered := h
	tampered.CC = "bogus"
	// The socket shape is the server's to act on: a hello whose shape was
	// changed on the way fails too.
	reshaped := h
	reshaped.Shape.RecvBuffer = 4096
	for _, tc := range []struct {
		name   string
		secret string
		ctx    string
		nonce  []byte
		mac    []byte
		fields []string
		want   bool
	}{
		{"right MAC", "secret", ctxStream, nonce, good, h.fields(), true},
		{"replayed against a new nonce", "secret", ctxStream, other, good, h.fields(), false},
		{"tampered field", "secret", ctxStream, nonce, good, tampered.fields(), false},
		{"tampered socket shape", "secret", ctxStream, nonce, good, reshaped.fields(), false},
		{"wrong secret", "other", ctxStream, nonce, good, h.fields(), false},
		{"empty secret", "", ctxStream, nonce, macFields("", ctxStream, nonce, h.fields()...), h.fields(), false},
		{"another protocol's", "secret", ctxTCPRR, nonce, good, h.fields(), false},
		{"truncated", "secret", ctxStream, nonce, good[:16], h.fields(), false},
		{"none", "secret", ctxStream, nonce, nil, h.fields(), false},
		// Length prefixes: moving a byte from one field to the next changes the MAC.
		{"fields re-split", "secret", ctxStream, nonce, macFields("secret", ctxStream, nonce, "ab", "c"), []string{"a", "bc"}, false},
	} {
		if got := checkMAC(tc.secret, tc.ctx, tc.nonce, tc.mac, tc.fields...); got != tc.want {
			t.Errorf("%s: checkMAC = %v, want %v", tc.name, got, tc.want)
		}
	}
	a, err := newNonce()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := newNonce(); a == b {
		t.Error("two nonces alike")
	}
}

func TestHelloCheck(t *testing.T) {
	allowed := map[string]bool{"reno": true, "bbr": true}
	ok := hello{Flow: "TCP upload::1", Direction: Upload, CC: "bbr", TOS: 32, Duration: 30}
	if err := ok.check(allowed); err != nil {
		t.Errorf("a planned hello refused: %v", err)
	}
	for name, mod := range map[string]func(*hello){
		"4 KB flow name":  func(h *hello) { h.Flow = strings.Repeat("x", 4096) },
		"empty flow name": func(h *hello) { h.Flow = "" },
		"bad UTF-8":       func(h *hello) { h.Flow = "\xff" },
		"direction":       func(h *hello) { h.Direction = "sideways" },
		"cc not allowed":  func(h *hello) { h.CC = "cubic" },
		"cc bogus":        func(h *hello) { h.CC = "bogus" },
		"cc path":         func(h *hello) { h.CC = "../../x" },
		"TOS":             func(h *hello) { h.TOS = 256 },
		"duration":        func(h *hello) { h.Duration = -1 },
		"send size":       func(h *hello) { h.Shape.SendSize = -1 },
		"1 GB buffer":     func(h *hello) { h.Shape.RecvBuffer = 1 << 30 },
	} {
		h := ok
		mod(&h)
		if h.check(allowed) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestAllowedCC(t *testing.T) {
	got := allowedCC(func(name string) ([]byte, error) {
		if strings.HasSuffix(name, "allowed_congestion_control") {
			return []byte("reno bbr\n"), nil
		}
		return nil, os.ErrNotExist
	})
	if !got["reno"] || !got["bbr"] || got["cubic"] || len(got) != 2 {
		t.Errorf("allowedCC = %v", got)
	}
}

// failingListener fails its first accepts as a process out of descriptors does.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (f *failingListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	if f.fails > 0 {
		f.fails--
		f.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

// streamLab is a listener on 127.0.0.1 serving in the background.
type streamLab struct {
	l      *Listener
	got    *samples
	cancel context.CancelFunc
	served chan error
	mu     sync.Mutex
	warns  []string
}

func startStreamLab(t *testing.T, token string, wrap func(net.Listener) net.Listener) *streamLab {
	t.Helper()
	return startPlannedLab(t, ListenSpec{Addr: "127.0.0.1", Token: token, Step: 0.05}, wrap)
}

// startPlannedLab is startStreamLab with a spec of the test's own (a plan).
func startPlannedLab(t *testing.T, spec ListenSpec, wrap func(net.Listener) net.Listener) *streamLab {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lab := &streamLab{got: &samples{}, cancel: cancel, served: make(chan error, 1)}
	l, err := Listen(ctx, spec, lab.got.emit)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		l.ln = wrap(l.ln)
	}
	l.env.Warn = func(msg string) {
		lab.mu.Lock()
		lab.warns = append(lab.warns, msg)
		lab.mu.Unlock()
	}
	lab.l = l
	go func() { lab.served <- l.Serve(ctx) }()
	t.Cleanup(func() { cancel() })
	return lab
}

func (lab *streamLab) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(lab.l.Port())) }

// run runs flows against the lab and checks each counted bytes.
func (lab *streamLab) run(t *testing.T, token string, flows ...StreamFlow) {
	t.Helper()
	spec := StreamsSpec{Addr: lab.addr(), Token: token, Step: 0.05, Duration: 0.3, Flows: flows}
	var got samples
	if err := RunStreams(context.Background(), spec, got.emit); err != nil {
		t.Fatalf("streams: %v", err)
	}
	for _, f := range flows {
		if f.Direction != Download {
			continue
		}
		var n int64
		got.mu.Lock()
		for _, s := range got.m[f.Name] {
			n += s.Bytes
		}
		got.mu.Unlock()
		if n == 0 {
			t.Errorf("%s: no bytes", f.Name)
		}
	}
}

// stop ends the listener and returns what Serve returned.
func (lab *streamLab) stop() error {
	lab.cancel()
	select {
	case err := <-lab.served:
		return err
	case <-time.After(20 * time.Second):
		return errors.New("the listener did not stop")
	}
}

// record opens a connection as a client would and returns its nonce and the
// connection, with a hello for it sent if h is not nil.
func dialHello(t *testing.T, addr, token string, h *hello) (net.Conn, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nonce, err := readNonce(c, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h != nil {
		h.MAC = macFields(token, ctxStream, nonce, h.fields()...)
		b, _ := json.Marshal(h)
		c.Write(append(b, '\n'))
	}
	return c, nonce
}

// refused says whether the server closed c without its ack byte.
func refused(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err := io.ReadFull(c, b[:])
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestListenerRefusesReplay sends a real client's hello, recorded off its
// connection, again on a connection of its own: the new nonce makes it worthless.
func TestListenerRefusesReplay(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	lab := startStreamLab(t, token, nil)
	// Record: a proxy between a real client and the listener keeps what the client
	// sent, as a sniffer on the test link would.
	px, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	recorded := make(chan []byte, 1)
	go func() {
		c, err := px.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		up, err := net.Dial("tcp", lab.addr())
		if err != nil {
			return
		}
		defer up.Close()
		go io.Copy(c, up)
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		recorded <- line
		up.Write(line)
		io.Copy(up, c)
	}()
	spec := StreamsSpec{Addr: px.Addr().String(), Token: token, Step: 0.05, Duration: 0.2,
		Flows: []StreamFlow{{Name: "TCP download::1", Direction: Download}}}
	if err := RunStreams(context.Background(), spec, func(string, datafile.Sample) {}); err != nil {
		t.Fatalf("the real client through the recorder: %v", err)
	}
	line := <-recorded
	if strings.Contains(string(line), token) {
		t.Errorf("the hello carries the token: %s", line)
	}
	// The replay, on a fresh connection (a new flow name would break the MAC too).
	c, _ := dialHello(t, lab.addr(), token, nil)
	defer c.Close()
	c.Write(line)
	if !refused(c) {
		t.Error("a replayed hello was accepted")
	}
	// The listener goes on: a real stream still runs.
	lab.run(t, token, StreamFlow{Name: "TCP download::2", Direction: Download})
	if err := lab.stop(); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
}

// TestListenerRefusesBadHellos: authenticated hellos the plan cannot have made
// (a 4 KB flow name, an unknown cc, a name taken) are refused, and the run goes on.
func TestListenerRefusesBadHellos(t *testing.T) {
	const token = "tok"
	lab := startStreamLab(t, token, nil)
	for name, h := range map[string]hello{
		"4 KB flow name": {Flow: strings.Repeat("F", 4000), Direction: Download, Duration: 1},
		"cc bogus":       {Flow: "TCP download::9", Direction: Download, CC: "bogus", Duration: 1},
		"wrong token":    {Flow: "TCP download::8", Direction: Download, Duration: 1},
	} {
		tok := token
		if name == "wrong token" {
			tok = "other"
		}
		c, _ := dialHello(t, lab.addr(), tok, &h)
		if !refused(c) {
			t.Errorf("%s: accepted", name)
		}
		c.Close()
	}
	lab.run(t, token, StreamFlow{Name: "TCP download::1", Direction: Download})
	// The same flow twice would count one series twice.
	h := hello{Flow: "TCP download::1", Direction: Download, Duration: 1}
	c, _ := dialHello(t, lab.addr(), token, &h)
	if !refused(c) {
		t.Error("a second stream of one flow accepted")
	}
	c.Close()
	if err := lab.stop(); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	lab.mu.Lock()
	defer lab.mu.Unlock()
	if len(lab.warns) == 0 || !strings.Contains(strings.Join(lab.warns, "\n"), "refused 4 connections") {
		t.Errorf("warnings %q", lab.warns)
	}
}

// TestListenerHoldsToPlan: a listener given its clients' plans (as the controller
// gives them) refuses authenticated hellos for streams the run did not plan, or
// planned otherwise, and serves the planned ones.
func TestListenerHoldsToPlan(t *testing.T) {
	const token = "tok"
	raw, _, err := Kinds()["tcp-streams"].Plan(map[string]any{"flows": []any{
		map[string]any{"direction": "download", "count": 1, "send_size": "16K", "recv_buffer": "131072"},
		map[string]any{"direction": "upload", "count": 1, "tcp_info": true}}}, NewPlanner())
	if err != nil {
		t.Fatal(err)
	}
	plan, longest, err := streamsPlanOf([]Client{{Kind: "tcp-streams", Duration: 2, Params: raw}})
	if err != nil || len(plan) != 2 || longest != 2 {
		t.Fatalf("plan %+v, %g, %v", plan, longest, err)
	}
	if _, _, err := streamsPlanOf([]Client{{Kind: "udp-rr"}}); err == nil {
		t.Error("a udp-rr client of tcp-listen planned")
	}
	netperfish := SocketShape{SendSize: 16384, RecvBuffer: 131072}
	if got := plan["TCP download::1"].Shape; got != netperfish {
		t.Fatalf("the plan's socket shape %+v, want %+v", got, netperfish)
	}
	lab := startPlannedLab(t, ListenSpec{Addr: "127.0.0.1", Token: token, Step: 0.05, Plan: plan, Duration: longest}, nil)
	for name, h := range map[string]hello{
		"unplanned flow":   {Flow: "TCP download::7", Direction: Download, Duration: 1, Shape: netperfish},
		"other direction":  {Flow: "TCP download::1", Direction: Upload, Duration: 1, Shape: netperfish},
		"cc not planned":   {Flow: "TCP download::1", Direction: Download, CC: "reno", Duration: 1, Shape: netperfish},
		"TOS not planned":  {Flow: "TCP download::1", Direction: Download, TOS: 4, Duration: 1, Shape: netperfish},
		"tcp_info not set": {Flow: "TCP upload::1", Direction: Upload, Duration: 1},
		"longer than plan": {Flow: "TCP download::1", Direction: Download, Duration: 3, Shape: netperfish},
		"shape not planned": {Flow: "TCP download::1", Direction: Download, Duration: 1,
			Shape: SocketShape{SendSize: 16384, RecvBuffer: 1 << 20}},
	} {
		c, _ := dialHello(t, lab.addr(), token, &h)
		if !refused(c) {
			t.Errorf("%s: accepted", name)
		}
		c.Close()
	}
	lab.run(t, token, plan["TCP download::1"])
	if err := lab.stop(); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	lab.mu.Lock()
	defer lab.mu.Unlock()
	if w := strings.Join(lab.warns, "\n"); !strings.Contains(w, "refused 7 connections") || !strings.Contains(w, "the run planned") {
		t.Errorf("warnings %q", lab.warns)
	}
}

// TestListenerSurvivesHalfOpen: 5,000 connections that never send a hello, and
// accepts failing with EMFILE, leave the listener serving real streams.
func TestListenerSurvivesHalfOpen(t *testing.T) {
	// Both ends of 5,000 connections are in this process: raise the soft limit
	// (to the hard one, which root may raise too) rather than skip.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if need := uint64(2*5000 + maxPending + 256); lim.Cur < need {
		old := lim
		lim.Cur, lim.Max = need, max(lim.Max, need)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatalf("open-file limit %d (hard %d) is too low for 5,000 connections and cannot be raised to %d: %v", old.Cur, old.Max, need, err)
		}
		t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	}
	const token = "tok"
	lab := startStreamLab(t, token, func(ln net.Listener) net.Listener { return &failingListener{Listener: ln, fails: 20} })
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 5000 {
		c, err := net.DialTimeout("tcp", lab.addr(), 5*time.Second)
		if err != nil {
			break // the accept queue is full: the rest would be SYNs the kernel drops
		}
		conns = append(conns, c)
	}
	if len(conns) < 1000 {
		t.Fatalf("only %d connections opened", len(conns))
	}
	if pending := lab.l.pending.len(); pending > maxPending {
		t.Errorf("%d pending", pending)
	}
	lab.run(t, token, StreamFlow{Name: "TCP download::1", Direction: Download}, StreamFlow{Name: "TCP upload::1", Direction: Upload})
	if err := lab.stop(); err != nil {
		t.Fatalf("the run failed: %v", err)
	}
}
