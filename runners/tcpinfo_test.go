package runners

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sysunix "golang.org/x/sys/unix"

	"github.com/bloatbench/bloatbench/datafile"
)

// recordEnv is an Env that keeps what a job declares and emits.
type recordEnv struct {
	samples
	mu       sync.Mutex
	declared map[string]datafile.Series
	early    []string // samples of a series not declared before them
}

func (r *recordEnv) env() Env {
	return Env{
		Emit: func(series string, s datafile.Sample) {
			r.mu.Lock()
			// Throughput series are the plan's; TCP_INFO's are the job's to declare.
			if _, ok := r.declared[series]; !ok && isTCPInfoSeries(series) {
				r.early = append(r.early, series)
			}
			r.mu.Unlock()
			r.emit(series, s)
		},
		Declare: func(s datafile.Series) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.declared == nil {
				r.declared = map[string]datafile.Series{}
			}
			r.declared[s.Name] = s
		},
		Warn: func(string) {},
	}
}

// Both ends read TCP_INFO of the streams they send, through the registry's kinds
// as an agent runs them, and declare each series before its first sample; the
// marks a test asks for are planned as the TOS byte.
func TestTCPInfoAndMarksThroughTheKinds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kinds := Kinds()
	var server, client recordEnv
	lj, st, err := kinds["tcp-listen"].Start(ctx, JobSpec{Kind: "tcp-listen", Target: "127.0.0.1", Token: "tok", Step: 0.05, Host: "srv"}, server.env())
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- lj.Run(ctx) }()
	params, series, err := kinds["tcp-streams"].Plan(map[string]any{"flows": []any{
		map[string]any{"direction": "download", "count": "1", "tcp_info": "true", "tos": "EF", "name": "TCP download EF"},
		map[string]any{"direction": "upload", "count": 1, "tcp_info": true, "tos": "CS1"},
	}}, NewPlanner())
	if err != nil {
		t.Fatal(err)
	}
	var plan streamsPlan
	if err := json.Unmarshal(params, &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Flows) != 2 || plan.Flows[0].TOS != 0xb8 || plan.Flows[1].TOS != 0x20 || !plan.Flows[0].TCPInfo || plan.Flows[1].Name != "TCP upload::1" {
		t.Fatalf("planned flows %+v", plan.Flows)
	}
	if series[0].Marking != "EF" || series[1].Host != datafile.HostPeer {
		t.Errorf("planned series %+v", series)
	}
	sj, _, err := kinds["tcp-streams"].Start(ctx, JobSpec{Kind: "tcp-streams", Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(st.Port)),
		Token: "tok", Step: 0.05, Duration: 0.5, Host: "cli", Params: params}, client.env())
	if err != nil {
		t.Fatal(err)
	}
	if err := sj.Run(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the upload's receiver takes its last sample after the half-close
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  *recordEnv
		flow string
		host string
	}{{&server, "TCP download EF", "srv"}, {&client, "TCP upload::1", "cli"}} {
		c.env.mu.Lock()
		for _, stat := range []string{"srtt", "rttvar", "cwnd", "retransmits", "delivery_rate", "pacing_rate", "delivered_ce",
			datafile.StatBusyTime, datafile.StatRwndLimited, datafile.StatSndbufLimited} {
			name := TCPInfoSeries(c.flow, stat)
			se, ok := c.env.declared[name]
			if !ok || se.Kind != datafile.KindTCPInfo || se.Host != c.host || se.Stat != stat {
				t.Errorf("%s: declared %+v", name, se)
			}
			ss := c.env.m[name]
			if len(ss) < 3 {
				t.Errorf("%s: %d samples over 0.5 s at 0.05 s steps", name, len(ss))
			}
			for _, s := range ss {
				if err := datafile.CheckSample(name, s); err != nil || s.V < 0 {
					t.Errorf("%s: %+v %v", name, s, err)
				}
				if stat == "cwnd" && s.V < 1 {
					t.Errorf("%s: a congestion window of %v", name, s.V)
				}
			}
		}
		c.env.mu.Unlock()
	}
	for _, e := range []*recordEnv{&server, &client} {
		if len(e.early) > 0 {
			t.Errorf("samples before their declaration: %v", e.early)
		}
	}
	// The receiving ends read nothing.
	if _, ok := client.declared[TCPInfoSeries("TCP download EF", "srtt")]; ok {
		t.Error("the download's receiver read TCP_INFO")
	}
}

func isTCPInfoSeries(name string) bool {
	for _, s := range tcpInfoStats {
		if strings.HasSuffix(name, " "+s.stat) {
			return true
		}
	}
	return false
}

func TestPacingRate(t *testing.T) {
	for in, want := range map[uint64]float64{^uint64(0): 0, uint64(^uint32(0)): 0, 125000: 1, 0: 0} {
		if got := pacingRate(in); got != want {
			t.Errorf("pacingRate(%d) = %v, want %v", in, got, want)
		}
	}
}

func TestTimeCounterStep(t *testing.T) {
	for _, c := range []struct {
		name  string
		reads []uint64
		want  []uint64
	}{
		{"the first read counts all since the connection began", []uint64{5000, 7000, 7000, 12000}, []uint64{5000, 2000, 0, 5000}},
		{"zero all along", []uint64{0, 0, 0}, []uint64{0, 0, 0}},
		// The kernel's 32-bit jiffies wrapped, or the counter started over: the
		// step counts what it holds, not 2^64 less a little.
		{"backwards", []uint64{90000, 100000, 3000, 8000}, []uint64{90000, 10000, 3000, 5000}},
		{"backwards to zero", []uint64{4000, 0, 1000}, []uint64{4000, 0, 1000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tc timeCounter
			for i, r := range c.reads {
				if got := tc.step(r); got != c.want[i] {
					t.Errorf("read %d (%d): step %d, want %d", i, r, got, c.want[i])
				}
			}
		})
	}
}

// A sender whose receiver keeps a small receive buffer and reads slowly is
// held back by the receiver's window: its rwnd_limited time grows step by step,
// and is within its busy time. A loopback connection has no bottleneck to be
// limited by otherwise.
func TestTCPInfoRwndLimitedOnLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Set before listen, so the accepted socket has it from the handshake: its
	// window scale and first window are of the small buffer, and the kernel does
	// not autotune a buffer the application set.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = sysunix.SetsockoptInt(int(fd), sysunix.SOL_SOCKET, sysunix.SO_RCVBUF, 8192)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	received := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- err
			return
		}
		defer c.Close()
		// 2 KB every 5 ms: 400 KB/s, far below what loopback carries.
		buf := make([]byte, 2048)
		for ctx.Err() == nil {
			if _, err := c.Read(buf); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				received <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		received <- nil
	}()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn := nc.(*net.TCPConn)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		buf := make([]byte, 64<<10)
		for {
			// Blocked while the window is full; closing conn ends it.
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
	}()
	var env recordEnv
	wctx, wcancel := context.WithTimeout(ctx, 1200*time.Millisecond)
	stop := startTCPInfo(wctx, conn, "TCP upload::1", "upload", "cli", time.Now(), 0.1, env.env())
	<-wctx.Done()
	stop()
	wcancel()
	conn.Close()
	<-sent
	cancel()
	if err := <-received; err != nil && !errors.Is(err, net.ErrClosed) {
		t.Logf("receiver: %v", err)
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	busy := env.m[TCPInfoSeries("TCP upload::1", datafile.StatBusyTime)]
	rwnd := env.m[TCPInfoSeries("TCP upload::1", datafile.StatRwndLimited)]
	sndbuf := env.m[TCPInfoSeries("TCP upload::1", datafile.StatSndbufLimited)]
	if len(rwnd) < 8 || len(busy) != len(rwnd) || len(sndbuf) != len(rwnd) {
		t.Fatalf("%d busy, %d rwnd_limited, %d sndbuf_limited samples over 1.2 s at 0.1 s steps", len(busy), len(rwnd), len(sndbuf))
	}
	var sumBusy, sumRwnd, sumSndbuf float64
	growing := 0
	for i := range rwnd {
		if rwnd[i].V < 0 || busy[i].V < 0 || sndbuf[i].V < 0 {
			t.Errorf("step %d: busy %v, rwnd_limited %v, sndbuf_limited %v ms", i, busy[i].V, rwnd[i].V, sndbuf[i].V)
		}
		// Jiffies: a step may count one tick more or less than it lasted.
		if rwnd[i].V+sndbuf[i].V > busy[i].V+10 {
			t.Errorf("step %d: limited %v+%v ms of a busy %v ms", i, rwnd[i].V, sndbuf[i].V, busy[i].V)
		}
		if i > 0 && rwnd[i].V > 0 {
			growing++
		}
		sumBusy += busy[i].V
		sumRwnd += rwnd[i].V
		sumSndbuf += sndbuf[i].V
	}
	t.Logf("over %d steps: busy %.0f ms, rwnd_limited %.0f ms, sndbuf_limited %.0f ms", len(rwnd), sumBusy, sumRwnd, sumSndbuf)
	// The window is full from the first steps on: all but the first few grow it.
	if growing < len(rwnd)-3 {
		t.Errorf("rwnd_limited grew in %d of %d steps", growing, len(rwnd)-1)
	}
	if sumRwnd < 0.5*sumBusy || sumBusy < 500 {
		t.Errorf("rwnd_limited %.0f ms of a busy %.0f ms over 1.2 s", sumRwnd, sumBusy)
	}
}
