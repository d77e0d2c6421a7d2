package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/e2eutil"
	"github.com/bloatbench/bloatbench/remote"
	"github.com/bloatbench/bloatbench/runners"
)

type recorder struct {
	mu      sync.Mutex
	samples map[string][]datafile.Sample
	done    map[string]error
	doneCh  chan string
	series  []datafile.Series
}

func newRecorder() *recorder {
	return &recorder{samples: map[string][]datafile.Sample{}, done: map[string]error{}, doneCh: make(chan string, 16)}
}

func (r *recorder) Samples(host string, b map[string][]datafile.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range b {
		r.samples[k] = append(r.samples[k], v...)
	}
}
func (r *recorder) JobDone(host, job string, err error) {
	r.mu.Lock()
	r.done[job] = err
	r.mu.Unlock()
	r.doneCh <- job
}
func (r *recorder) Log(host, msg string)   {}
func (r *recorder) Alert(host, msg string) {}
func (r *recorder) Series(host, job string, s datafile.Series) {
	r.mu.Lock()
	r.series = append(r.series, s)
	r.mu.Unlock()
}

// startReq is a start request of a kind with its parameters.
func startReq(job string, spec runners.JobSpec, params string) Request {
	if params != "" {
		spec.Params = json.RawMessage(params)
	}
	return Request{Op: OpStart, Job: job, Start: &spec}
}

// pipeAgent runs a real Server on one end of two pipes and returns a Client on the other.
func pipeAgent(t *testing.T, name string, rec Handler) (*Client, func()) {
	return pipeServer(t, &Server{Version: "test"}, name, rec)
}

// pipeServer is pipeAgent with the Server given.
func pipeServer(t *testing.T, srv *Server, name string, rec Handler) (*Client, func()) {
	reqR, reqW := io.Pipe()
	msgR, msgW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(ctx, reqR, msgW)
		msgW.Close()
		served <- err
	}()
	c := NewClient(name, msgR, reqW, rec)
	return c, func() {
		reqW.Close() // the controller hangs up: the agent must stop and return
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Error("agent did not stop after its input closed")
		}
		cancel()
	}
}

func TestHelloAndClock(t *testing.T) {
	c, stop := pipeAgent(t, "server", newRecorder())
	defer stop()
	ctx := context.Background()
	h, err := c.Hello(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kernel == "" || h.Version != "test" || h.Protocol != ProtocolVersion {
		t.Errorf("hello %+v", h)
	}
	off, rtt, err := c.SyncClock(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	// Same clock on both ends: the offset is within the best round trip.
	if off > rtt || off < -rtt {
		t.Errorf("offset %v outside ±rtt %v", off, rtt)
	}
	if _, err := c.Call(ctx, Request{Op: "bogus"}); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Errorf("unknown op: %v", err)
	}
	if _, err := c.Call(ctx, startReq("j", runners.JobSpec{Kind: "teleport"}, "")); err == nil || !strings.Contains(err.Error(), `no runner of kind "teleport"`) {
		t.Errorf("unknown kind: %v", err)
	}
	if _, err := c.Call(ctx, startReq("j", runners.JobSpec{Kind: "tcp-listen", Target: "127.0.0.1"}, `{"bogus":1}`)); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown parameter: %v", err)
	}
}

// Streams both ways over loopback between two agents, with the token checked.
func TestStreamsBetweenAgents(t *testing.T) {
	rec := newRecorder()
	server, stopS := pipeAgent(t, "server", rec)
	defer stopS()
	client, stopC := pipeAgent(t, "client", rec)
	defer stopC()
	ctx := context.Background()
	m, err := server.Call(ctx, startReq("listen", runners.JobSpec{Kind: "tcp-listen", Target: "127.0.0.1", Token: "secret", Step: 0.1}, ""))
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + itoa(m.Port)
	flows := `{"flows":[{"name":"TCP download::1","direction":"download"},{"name":"TCP upload::1","direction":"upload","cc":"reno"}]}`
	if _, err := client.Call(ctx, startReq("streams", runners.JobSpec{Kind: "tcp-streams", Addr: addr, Token: "secret", Step: 0.1, Duration: 1}, flows)); err != nil {
		t.Fatal(err)
	}
	// A stream with the wrong token is refused.
	if _, err := client.Call(ctx, startReq("intruder", runners.JobSpec{Kind: "tcp-streams", Addr: addr, Token: "guess", Step: 0.1, Duration: 1},
		`{"flows":[{"name":"TCP download::9","direction":"download"}]}`)); err != nil {
		t.Fatal(err)
	}
	for seen := map[string]bool{}; !seen["streams"] || !seen["intruder"]; {
		select {
		case j := <-rec.doneCh:
			seen[j] = true
		case <-time.After(10 * time.Second):
			t.Fatal("streams did not end")
		}
	}
	if _, err := server.Call(ctx, Request{Op: OpStop, Job: "listen"}); err != nil {
		t.Fatal(err)
	}
	select {
	case j := <-rec.doneCh:
		if j != "listen" {
			t.Errorf("done %s", j)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("listener did not stop")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.done["streams"] != nil || rec.done["listen"] != nil {
		t.Errorf("job errors: %v", rec.done)
	}
	if err := rec.done["intruder"]; err == nil || !strings.Contains(err.Error(), "did not accept") {
		t.Errorf("wrong token: %v", err)
	}
	for _, name := range []string{"TCP download::1", "TCP upload::1"} {
		ss := rec.samples[name]
		var bytes int64
		var dur float64
		for _, s := range ss {
			bytes += s.Bytes
			dur += s.Dur
		}
		if len(ss) < 8 || bytes == 0 || dur < 0.9 || dur > 1.5 {
			t.Errorf("%s: %d samples, %d bytes over %.2fs", name, len(ss), bytes, dur)
		}
	}
	if len(rec.samples["TCP download::9"]) != 0 {
		t.Error("a stream with the wrong token was measured")
	}
}

// needPing skips a test that sends ICMP echo when it can open no ICMP socket: raw
// ones need root, and the kernel's unprivileged ones a net.ipv4.ping_group_range
// that holds the user's group (runners.Ping uses whichever it can).
func needPing(t *testing.T) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, syscall.IPPROTO_ICMP)
	if err == nil {
		syscall.Close(fd)
		return
	}
	e2eutil.NeedRoot(t, fmt.Sprintf("sends ICMP echo (unprivileged ICMP socket: %v; sysctl net.ipv4.ping_group_range must hold group %d)", err, os.Getgid()))
}

func TestPingLoopback(t *testing.T) {
	needPing(t)
	rec := newRecorder()
	c, stop := pipeAgent(t, "client", rec)
	defer stop()
	if _, err := c.Call(context.Background(), startReq("ping", runners.JobSpec{Kind: "ping", Target: "127.0.0.1", Step: 0.05, Duration: 0.5}, "")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rec.doneCh:
	case <-time.After(5 * time.Second):
		t.Fatal("ping did not end")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err := rec.done["ping"]; err != nil {
		t.Fatal(err)
	}
	ss := rec.samples["Ping (ms) ICMP"]
	if len(ss) < 8 || len(ss) > 11 {
		t.Errorf("%d replies for 10 probes", len(ss))
	}
	for _, s := range ss {
		if s.Lost || s.V <= 0 || s.V > 50 {
			t.Errorf("sample %+v", s)
		}
	}
}

func TestAgentDeathFailsPendingCalls(t *testing.T) {
	reqR, reqW := io.Pipe()
	msgR, msgW := io.Pipe()
	go io.Copy(io.Discard, reqR)
	c := NewClient("server (root@192.0.2.2)", msgR, reqW, newRecorder())
	errc := make(chan error, 1)
	go func() { _, err := c.Call(context.Background(), Request{Op: OpHello}); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	msgW.Close()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "agent on host server (root@192.0.2.2) stopped") {
			t.Errorf("error %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("pending call not failed")
	}
	<-c.Dead()
}

func itoa(i int) string { return strconv.Itoa(i) }

// Commands run through the agent as through sh: output, input, a failure with its
// stderr, and a command past its timeout killed, while other requests go on.
func TestExec(t *testing.T) {
	c, stop := pipeAgent(t, "host h", newRecorder())
	defer stop()
	ctx := context.Background()
	cases := []struct {
		name, cmd, stdin string
		timeout          time.Duration
		want             string
		wantErr          []string
	}{
		{name: "output", cmd: `printf '%s\n' "a b" c`, timeout: 5 * time.Second, want: "a b\nc\n"},
		{name: "stdin", cmd: "tr a-z A-Z", stdin: "tc qdisc\n", timeout: 5 * time.Second, want: "TC QDISC\n"},
		{name: "failure", cmd: "echo partial; echo 'RTNETLINK answers: No such device' >&2; exit 2", timeout: 5 * time.Second,
			want: "partial\n", wantErr: []string{"host host h", "RTNETLINK answers: No such device"}},
		{name: "silent failure", cmd: "exit 3", timeout: 5 * time.Second, wantErr: []string{"exit status 3"}},
		{name: "timeout", cmd: "sleep 30", timeout: 300 * time.Millisecond, wantErr: []string{`"sleep 30" did not finish within 300ms`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var in io.Reader
			if tc.stdin != "" {
				in = strings.NewReader(tc.stdin)
			}
			out, err := c.Output(ctx, tc.cmd, in, tc.timeout)
			if string(out) != tc.want {
				t.Errorf("output %q, want %q", out, tc.want)
			}
			if (err != nil) != (len(tc.wantErr) > 0) {
				t.Fatalf("error %v, want one with %q", err, tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// A slow command holds up no other request.
	slow := make(chan error, 1)
	go func() {
		_, err := c.Output(ctx, "sleep 1", nil, 5*time.Second)
		slow <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := c.Call(ctx, Request{Op: OpClock}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-slow:
		t.Error("the clock request waited for the slow command")
	default:
	}
	if err := <-slow; err != nil {
		t.Error(err)
	}
}

// A Server given its own Exec runs every command through it: the command, its
// input and timeout as the client sent them, and what it returns is the client's
// result, a failure's stderr and exit status included. Nothing runs on the host.
func TestServerExec(t *testing.T) {
	var mu sync.Mutex
	var got []ExecSpec
	srv := &Server{Version: "test", Exec: func(ctx context.Context, spec ExecSpec) *ExecResult {
		mu.Lock()
		got = append(got, spec)
		mu.Unlock()
		if strings.HasPrefix(spec.Cmd, "tc qdisc del") {
			return &ExecResult{Stderr: []byte("RTNETLINK answers: Operation not permitted\n"), Exit: 2}
		}
		return &ExecResult{Stdout: append([]byte("ran: "), spec.Stdin...)}
	}}
	c, stop := pipeServer(t, srv, "host h", newRecorder())
	defer stop()
	ctx := context.Background()
	out, err := c.Output(ctx, "tee /sys/class/net/eth0/queues/tx-0/byte_queue_limits/limit_max", strings.NewReader("30000"), 5*time.Second)
	if err != nil || string(out) != "ran: 30000" {
		t.Errorf("output %q, %v; want the fake's %q", out, err, "ran: 30000")
	}
	_, err = c.Output(ctx, "tc qdisc del dev eth0 root", nil, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "RTNETLINK answers: Operation not permitted") {
		t.Errorf("the fake's failure came back as %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []ExecSpec{
		{Cmd: "tee /sys/class/net/eth0/queues/tx-0/byte_queue_limits/limit_max", Stdin: []byte("30000"), Timeout: 5},
		{Cmd: "tc qdisc del dev eth0 root", Timeout: 2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the Exec was given %+v, want %+v", got, want)
	}
}

// Execute runs a line of plain words without a shell, and everything else, or a
// program it cannot start itself, through sh, with sh's answers: the same output,
// stdin, exit status and "not found" as before. A sh first on PATH says when it ran.
func TestExecuteShellOnlyWhenNeeded(t *testing.T) {
	dir := t.TempDir()
	shell, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sh"), []byte("#!"+shell+"\necho via-sh >&2\nexec "+shell+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A program with no #! line: the kernel will not run it, sh does.
	if err := os.WriteFile(filepath.Join(dir, "bb-script"), []byte("echo script \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cases := []struct {
		cmd, stdin, out string
		exit            int
		viaSh           bool
		stderr          string
	}{
		{cmd: "tr a-z A-Z", stdin: "tc qdisc\n", out: "TC QDISC\n"},
		{cmd: remote.Command("/usr/bin/printf", "%s|", "a b", "it's", "$HOME"), out: "a b|it's|$HOME|"},
		{cmd: remote.Command("sh", "-c", `echo "$1"; exit 4`, "sh", "x y"), out: "x y\n", exit: 4, viaSh: true},
		{cmd: "echo a | tr a-z A-Z", out: "A\n", viaSh: true},
		{cmd: "echo builtin", out: "builtin\n", viaSh: true},
		{cmd: "X=1 env", viaSh: true},
		{cmd: "bb-no-such-program x", exit: 127, viaSh: true, stderr: "not found"},
		{cmd: "bb-script 1 2", out: "script 1 2\n", viaSh: true},
		{cmd: "false", exit: 1, viaSh: true},
		{cmd: "ls /bb-no-such-file", exit: 2},
		{cmd: remote.Command("sh", "-c", "kill -TERM $$"), exit: 128 + int(syscall.SIGTERM), viaSh: true},
		{cmd: "sh -c 'kill -TERM $$' | cat", exit: 0, viaSh: true},
	}
	for _, c := range cases {
		r := Execute(context.Background(), ExecSpec{Cmd: c.cmd, Stdin: []byte(c.stdin), Timeout: 30})
		viaSh := strings.Contains(string(r.Stderr), "via-sh")
		if c.cmd == "X=1 env" {
			if !strings.Contains(string(r.Stdout), "\nX=1\n") {
				t.Errorf("%q: the assignment did not reach env: %q", c.cmd, r.Stdout)
			}
		} else if string(r.Stdout) != c.out {
			t.Errorf("%q: output %q, want %q", c.cmd, r.Stdout, c.out)
		}
		if r.Exit != c.exit || viaSh != c.viaSh || !strings.Contains(string(r.Stderr), c.stderr) {
			t.Errorf("%q: exit %d, through sh %v, stderr %q; want exit %d, through sh %v, stderr with %q",
				c.cmd, r.Exit, viaSh, r.Stderr, c.exit, c.viaSh, c.stderr)
		}
	}
}
