package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/internal/e2eutil"
)

// An untrusted test network, on a lab: during a run, a peer on the client's side
// of the test link (in the client's namespace, as another machine on that network
// would be) replays a stream's hello captured off the link, sends hellos of its
// own (a 4 KB flow name, an unknown congestion control; it has no secret, so they
// cannot be authenticated), and opens 5,000 connections that never say a word.
// Each is refused; the run ends as it would have, every stream's row with data,
// and the data file counts the refusals.
func TestUntrustedTestNetwork(t *testing.T) {
	functional(t)
	invPath, inv := lab(t, "--rate", "100mbit")
	clientNS := inv.Testbed + "-client"
	pcap := filepath.Join(t.TempDir(), "hello.pcap")
	// The hellos are the first data of each stream: a whole packet is kept.
	stopCapture := startCaptureSnap(t, clientNS, "test0", pcap, "tcp", 0)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The run has to outlast the peers, or the last of the 5,000 find its listener
	// gone: in make test's idle lane, beside the tests that measure, 4,330 had
	// connected when a 15 s run ended. 60 s is four times that; the lane ends
	// minutes before the tests it runs beside.
	run := exec.CommandContext(ctx, bin, "run", "-H", invPath, "-l", "60", "-d", "2", "-o", out, "--format", "json", "tcp_4down")
	var stdout, stderr e2eutil.LockedBuffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- run.Wait() }()

	// The streams connect ahead of their start: their hellos are on the wire then.
	var hello []byte
	var addr string
	for hello == nil {
		select {
		case err := <-ended:
			t.Fatalf("the run ended before a hello was seen: %v\n%s", err, stderr.String())
		case <-time.After(200 * time.Millisecond):
		}
		hello, addr = capturedHello(t, pcap)
	}
	t.Logf("captured a hello to %s: %s", addr, hello)

	replay := peer(t, clientNS, "replay", addr, string(hello))
	forgedName := peer(t, clientNS, "hello", addr, fmt.Sprintf(`{"mac":"%s","flow":"%s","direction":"download","duration":1}`,
		strings.Repeat("A", 43)+"=", strings.Repeat("F", 4096)))
	forgedCC := peer(t, clientNS, "hello", addr, `{"mac":"`+strings.Repeat("A", 43)+`=","flow":"TCP download::9","direction":"download","cc":"bogus","duration":1}`)
	for what, got := range map[string]string{"the replayed hello": replay, "a 4 KB flow name": forgedName, "an unknown cc": forgedCC} {
		if got != "refused" {
			t.Errorf("%s: %s", what, got)
		}
	}
	halfOpen := peer(t, clientNS, "half-open", addr, "5000")
	t.Logf("half-open: %s", halfOpen)
	if !strings.HasPrefix(halfOpen, "5000 connected") {
		t.Errorf("half-open: %s, want all 5000 connected", halfOpen)
	}

	if err := <-ended; err != nil {
		t.Fatalf("the run failed: %v\n%s", err, stderr.String())
	}
	stopCapture()
	medians := parseSummary(t, stdout.String())
	for f := 1; f <= 4; f++ {
		if _, ok := medians[fmt.Sprintf("TCP download::%d", f)]; !ok {
			t.Errorf("no row for flow %d:\n%s", f, stdout.String())
		}
	}
	d := dataFile(t, out)
	if d.Incomplete {
		t.Errorf("the run is incomplete: %s", d.Error)
	}
	var refusals []string
	count := regexp.MustCompile(`the TCP stream listener refused (\d+) connections`)
	n := 0
	for _, e := range d.Events {
		if strings.Contains(e.Message, "refused") {
			refusals = append(refusals, e.Message)
		}
		if m := count.FindStringSubmatch(e.Message); m != nil {
			n, _ = strconv.Atoi(m[1])
		}
	}
	t.Logf("refusals: %q", refusals)
	// The three hellos and every silent connection the listener closed (those past
	// its 256 pending, and the rest at the end or after 10 s).
	if n < 3 {
		t.Errorf("the listener counted %d refusals, want the 3 hellos at least: %q", n, refusals)
	}
	if !strings.Contains(strings.Join(refusals, "\n"), "not authenticated by the run's secret") {
		t.Errorf("no refusal names the secret: %q", refusals)
	}
}

// startCaptureSnap is startCapture keeping snap bytes of each packet (0: all).
func startCaptureSnap(t *testing.T, ns, dev, pcap, filter string, snap int) (stop func() string) {
	t.Helper()
	return startCaptureArgs(t, ns, dev, pcap, filter, strconv.Itoa(snap))
}

// helloLine is a stream's hello in tcpdump -A's print of a packet, and the packet's
// destination before it.
var (
	packetLine = regexp.MustCompile(`^\d+\.\d+ IP (\S+) > (\S+): `)
	helloLine  = regexp.MustCompile(`\{"mac":"[A-Za-z0-9+/=]+","flow":"[^"]*"[^\n]*\}`)
)

// capturedHello reads the capture so far for a stream's hello: its JSON line (with
// the newline that ends it) and the listener's address.
func capturedHello(t *testing.T, pcap string) ([]byte, string) {
	t.Helper()
	out, err := exec.Command("tcpdump", "-r", pcap, "-n", "-tt", "-A").Output()
	if err != nil && len(out) == 0 {
		return nil, "" // not written yet
	}
	dst := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := packetLine.FindStringSubmatch(line); m != nil {
			dst = strings.TrimSuffix(m[2], ":")
			continue
		}
		if h := helloLine.FindString(line); h != "" && dst != "" {
			// tcpdump prints an address as a.b.c.d.port.
			i := strings.LastIndexByte(dst, '.')
			return []byte(h + "\n"), net.JoinHostPort(dst[:i], dst[i+1:])
		}
	}
	return nil, ""
}

// peer runs this test binary in a namespace as a peer on the test network (see
// peerMain) and returns what it printed.
func peer(t *testing.T, ns, mode, addr, arg string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self)
	cmd.Env = append(os.Environ(), "BB_E2E_PEER="+mode, "BB_E2E_PEER_ADDR="+addr, "BB_E2E_PEER_ARG="+arg)
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("peer %s: %v\n%s", mode, err, got)
	}
	return strings.TrimSpace(string(got))
}

// peerMain is the peer's side, run from TestMain when BB_E2E_PEER says so:
// "replay" and "hello" send BB_E2E_PEER_ARG as the hello once the listener's nonce
// has come, and print "refused" when the listener closes without accepting;
// "half-open" opens BB_E2E_PEER_ARG connections, holds them all, and prints how
// many connected.
func peerMain(mode string) int {
	addr, arg := os.Getenv("BB_E2E_PEER_ADDR"), os.Getenv("BB_E2E_PEER_ARG")
	switch mode {
	case "replay", "hello":
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			fmt.Println("connect:", err)
			return 1
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		nonce := make([]byte, 64)
		if _, err := c.Read(nonce); err != nil {
			fmt.Println("no nonce:", err)
			return 1
		}
		line := arg
		if !strings.HasSuffix(line, "\n") {
			line += "\n"
		}
		if _, err := io.WriteString(c, line); err != nil {
			fmt.Println("send:", err)
			return 1
		}
		var ack [1]byte
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			fmt.Println("refused")
			return 0
		}
		fmt.Println("accepted")
		return 0
	case "half-open":
		n, _ := strconv.Atoi(arg)
		lim := syscall.Rlimit{Cur: uint64(n + 100), Max: uint64(n + 100)}
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		var conns []net.Conn
		var firstErr error
		for range n {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			conns = append(conns, c)
		}
		// Held a moment, silent, then let go.
		time.Sleep(2 * time.Second)
		for _, c := range conns {
			c.Close()
		}
		fmt.Printf("%d connected (%v)\n", len(conns), firstErr)
		return 0
	}
	b, _ := json.Marshal(mode)
	fmt.Println("unknown peer mode", string(b))
	return 2
}
