package runners

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

func TestRRPlan(t *testing.T) {
	lat := func(name string) datafile.Series {
		return datafile.Series{Name: name, Kind: datafile.KindRR, Units: "ms", Measure: datafile.MeasureRTT}
	}
	rate := func(name string) datafile.Series {
		return datafile.Series{Name: name, Kind: datafile.KindRR, Units: "transactions/s"}
	}
	checkPlans(t, []planCase{
		{kind: "udp-rr", params: nil,
			want:   `{"series":"UDP RR latency","request_size":1,"response_size":1,"timeout":1}`,
			series: []datafile.Series{lat(UDPRRSeries)}},
		{kind: "tcp-rr", params: map[string]any{},
			want:   `{"series":"TCP RR latency","request_size":1,"response_size":1}`,
			series: []datafile.Series{lat(TCPRRSeries)}},
		{kind: "udp-rr", params: map[string]any{"series": "rr", "rate_series": "rr rate", "request_size": "100",
			"response_size": 65507, "tos": "EF", "timeout": "0.25"},
			want:   `{"series":"rr","rate_series":"rr rate","request_size":100,"response_size":65507,"tos":"184","timeout":0.25}`,
			series: []datafile.Series{lat("rr"), rate("rr rate")}},
		{kind: "tcp-rr", params: map[string]any{"request_size": 1 << 20, "tos": 32},
			want:   `{"series":"TCP RR latency","request_size":1048576,"response_size":1,"tos":"32"}`,
			series: []datafile.Series{lat(TCPRRSeries)}},
		{kind: "tcp-rr", params: map[string]any{"tos": ""},
			want:   `{"series":"TCP RR latency","request_size":1,"response_size":1}`,
			series: []datafile.Series{lat(TCPRRSeries)}},
		{kind: "udp-rr", params: map[string]any{"bogus": 1}, want: `error: unknown field "bogus"`},
		{kind: "tcp-rr", params: map[string]any{"request_sise": 1}, want: `error: unknown field "request_sise"`},
		{kind: "udp-rr", params: map[string]any{"request_size": 0}, want: "error: request_size is 0: want 1 to 65507"},
		{kind: "udp-rr", params: map[string]any{"response_size": 65508}, want: "error: response_size is 65508: want 1 to 65507"},
		{kind: "tcp-rr", params: map[string]any{"response_size": 1<<20 + 1}, want: "error: response_size is 1048577: want 1 to 1048576"},
		{kind: "tcp-rr", params: map[string]any{"request_size": -5}, want: "error: request_size is -5"},
		{kind: "tcp-rr", params: map[string]any{"request_size": "lots"}, want: `error: "lots" is not a whole number`},
		{kind: "udp-rr", params: map[string]any{"tos": "XX"}, want: `error: tos: TOS "XX"`},
		{kind: "udp-rr", params: map[string]any{"tos": 256}, want: `error: tos: TOS "256"`},
		{kind: "udp-rr", params: map[string]any{"tos": true}, want: "error: true is neither text nor a number"},
		{kind: "udp-rr", params: map[string]any{"timeout": 0}, want: "error: timeout is 0s"},
		{kind: "udp-rr", params: map[string]any{"timeout": 61}, want: "error: timeout is 61s"},
		{kind: "tcp-rr", params: map[string]any{"timeout": 1}, want: "error: timeout is for udp-rr only"},
		{kind: "udp-rr", params: map[string]any{"series": "x", "rate_series": "x"}, want: `error: series "x" would be yielded twice`},
		{kind: "rr-server", params: nil, want: ""},
		{kind: "rr-server", params: map[string]any{"port": 1}, want: "error: rr-server takes no parameters"},
	}, func(kind string, raw json.RawMessage) error {
		if kind == "rr-server" {
			return nil
		}
		var p rrParams
		if err := decodeRaw(raw, &p); err != nil {
			return err
		}
		_, err := p.resolve(kind == "udp-rr")
		return err
	})
}

// TestRRPlanClaims refuses two jobs that would yield one series, across kinds.
func TestRRPlanClaims(t *testing.T) {
	for _, tc := range []struct {
		name        string
		kinds       [2]string
		first, then map[string]any
		err         string // of the second job; "" = none
	}{
		{name: "two defaults", kinds: [2]string{"udp-rr", "udp-rr"}, err: `series "UDP RR latency" would be yielded twice`},
		{name: "udp and tcp defaults", kinds: [2]string{"udp-rr", "tcp-rr"}},
		{name: "named apart", kinds: [2]string{"tcp-rr", "tcp-rr"}, then: map[string]any{"series": "TCP RR 2"}},
		{name: "rate on latency", kinds: [2]string{"tcp-rr", "udp-rr"}, first: map[string]any{"rate_series": "r"},
			then: map[string]any{"series": "r"}, err: `series "r" would be yielded twice`},
		{name: "ping's name", kinds: [2]string{"ping", "udp-rr"}, then: map[string]any{"series": PingSeries},
			err: "would be yielded twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := NewPlanner()
			if _, _, err := Kinds()[tc.kinds[0]].Plan(tc.first, pl); err != nil {
				t.Fatal(err)
			}
			_, _, err := Kinds()[tc.kinds[1]].Plan(tc.then, pl)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
}

// rrRecorder is an Env that keeps what a job emits and warns, and the samples the
// data file would refuse.
type rrRecorder struct {
	mu      sync.Mutex
	samples map[string][]datafile.Sample
	warns   []string
	errs    []string
	// mayDeclare lets a job declare series it finds (the sink's codepoints):
	// they are kept in declared; for the others a declaration is an error but
	// a connection's (declareConn), which every flow and probe declares.
	mayDeclare bool
	declared   []datafile.Series
}

func (r *rrRecorder) env() Env {
	return Env{
		Emit: func(name string, s datafile.Sample) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if err := datafile.CheckSample(name, s); err != nil {
				r.errs = append(r.errs, err.Error())
			}
			if r.samples == nil {
				r.samples = map[string][]datafile.Sample{}
			}
			r.samples[name] = append(r.samples[name], s)
		},
		Declare: func(s datafile.Series) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.mayDeclare || s.Kind == datafile.KindConn {
				r.declared = append(r.declared, s)
				return
			}
			r.errs = append(r.errs, "declared a series the plan has not: "+s.Name)
		},
		Warn: func(msg string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.warns = append(r.warns, msg)
		},
	}
}

// startRRServer runs an rr-server job on addr until the test ends.
func startRRServer(t *testing.T, addr, token string, clients ...Client) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kind := Kinds()["rr-server"]
	if !kind.Background {
		t.Error("rr-server is not a background kind")
	}
	job, st, err := kind.Start(ctx, JobSpec{Kind: "rr-server", Target: addr, Token: token, Step: 0.1, Clients: clients}, Env{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if st.Port == 0 {
		t.Fatalf("started %+v: no port", st)
	}
	done := make(chan error, 1)
	go func() { done <- job.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("rr-server: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("rr-server did not stop")
		}
	})
	return st.Port
}

// runRRClient plans and runs one client job to its end.
func runRRClient(t *testing.T, kind, addr, token string, params map[string]any, duration float64) (*rrRecorder, error) {
	t.Helper()
	raw, _, err := Kinds()[kind].Plan(params, NewPlanner())
	if err != nil {
		t.Fatalf("plan %s: %v", kind, err)
	}
	rec := &rrRecorder{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(duration*float64(time.Second))+10*time.Second)
	defer cancel()
	spec := JobSpec{Kind: kind, Addr: addr, Token: token, Step: 0.1, Duration: duration,
		Start: float64(time.Now().Add(100*time.Millisecond).UnixNano()) / 1e9, Params: raw}
	job, _, err := Kinds()[kind].Start(ctx, spec, rec.env())
	if err != nil {
		t.Fatalf("start %s: %v", kind, err)
	}
	err = job.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("%s ran past its duration", kind)
	}
	return rec, err
}

// TestRROverLoopback runs both clients against one server at once, through the
// kinds as an agent would, and checks the series agree with each other.
func TestRROverLoopback(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			if host == "::1" {
				if c, err := net.ListenPacket("udp", "[::1]:0"); err != nil {
					t.Fatalf("no IPv6 loopback (::1): %v; enable IPv6 on lo (sysctl net.ipv6.conf.lo.disable_ipv6=0)", err)
				} else {
					c.Close()
				}
			}
			port := startRRServer(t, host, token)
			addr := net.JoinHostPort(host, strconv.Itoa(port))
			var wg sync.WaitGroup
			for _, kind := range []string{"udp-rr", "tcp-rr"} {
				wg.Go(func() {
					params := map[string]any{"series": kind, "rate_series": kind + " rate",
						"request_size": 100, "response_size": 1000, "tos": "EF"}
					rec, err := runRRClient(t, kind, addr, token, params, 1)
					if err != nil {
						t.Errorf("%s: %v", kind, err)
						return
					}
					rec.mu.Lock()
					defer rec.mu.Unlock()
					if len(rec.errs) > 0 || len(rec.warns) > 0 {
						t.Errorf("%s: %s", kind, strings.Join(append(rec.errs, rec.warns...), "\n"))
					}
					lat, rate := rec.samples[kind], rec.samples[kind+" rate"]
					if len(lat) < 5 {
						t.Errorf("%s: %d latency samples, want at least 5", kind, len(lat))
					}
					if len(rate) != len(lat) {
						t.Fatalf("%s: %d rate samples for %d latency samples", kind, len(rate), len(lat))
					}
					for i, s := range lat {
						r := rate[i]
						if !(s.V > 0 && s.V < 100) || s.Dur <= 0 || s.Dur > 0.5 {
							t.Errorf("%s[%d] = %+v: not a loopback transaction time", kind, i, s)
						}
						// The transactions completed in an interval took at most the
						// interval, plus what the first of them ran in the interval
						// before (it began after that interval's last completion): rate
						// x latency <= 1 + the previous interval / this one, however
						// slow the machine. Less when the loop itself waits (a busy
						// CPU), so no lower bound.
						prev := s.Dur // the first began at the job's start, within its interval
						if i > 0 {
							prev = lat[i-1].Dur
						}
						if f := r.V * s.V / 1000; r.T != s.T || r.Dur != s.Dur || !(f > 0 && f <= 1+prev/s.Dur+1e-9) {
							t.Errorf("%s[%d]: rate %+v does not match latency %+v", kind, i, r, s)
						}
						if i > 0 && s.T <= lat[i-1].T {
							t.Errorf("%s[%d]: time %v not after %v", kind, i, s.T, lat[i-1].T)
						}
					}
					t.Logf("%s: %d samples, first %+v", kind, len(lat), lat[0])
				})
			}
			wg.Wait()

			// A client with another token gets nothing.
			rec, err := runRRClient(t, "udp-rr", addr, "wrong", map[string]any{"timeout": 0.2}, 1)
			if err != nil {
				t.Errorf("udp-rr, wrong token: %v", err)
			}
			if len(rec.samples) > 0 || len(rec.errs) > 0 {
				t.Errorf("udp-rr, wrong token: samples %v, errors %v", rec.samples, rec.errs)
			}
			if len(rec.warns) != 1 || !strings.Contains(rec.warns[0], "transactions got no response within 0.2s") {
				t.Errorf("udp-rr, wrong token: warnings %q", rec.warns)
			}
			rec, err = runRRClient(t, "tcp-rr", addr, "wrong", nil, 1)
			if err == nil || !strings.Contains(err.Error(), "the server refused the connection") {
				t.Errorf("tcp-rr, wrong token: error %v, want a refusal", err)
			}
			if len(rec.samples) > 0 {
				t.Errorf("tcp-rr, wrong token: samples %v", rec.samples)
			}
		})
	}
}

// TestRRServerAnswers speaks the UDP wire format by hand: only a request with the
// right MAC (for its own source address) and a size in range gets an answer, sized
// as asked, with its sequence number; a recorded request sent from another source
// (as a spoofer would reflect it) gets none.
func TestRRServerAnswers(t *testing.T) {
	const token = "tok"
	port := startRRServer(t, "127.0.0.1", token)
	c, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	other := netip.AddrPortFrom(local.Addr(), local.Port()+1)
	request := func(token string, from netip.AddrPort, seq uint64, size uint32, length int) []byte {
		b := make([]byte, length)
		b[16], b[23] = byte(seq>>56), byte(seq)
		b[24], b[25], b[26], b[27] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
		if length >= udpRequestHeader {
			copy(b, udpRequestMAC(token, from, b[rrKeySize:udpRequestHeader]))
		}
		return b
	}
	tampered := request(token, local, 14, 8, 32)
	tampered[26] = 0xff // a larger response asked for under the MAC of 8 bytes
	for _, tc := range []struct {
		name string
		req  []byte
		want int // response length; 0 = none
	}{
		{name: "minimal", req: request(token, local, 7, 8, 32), want: 8},
		{name: "padded", req: request(token, local, 8, 1000, 100), want: 1000},
		{name: "largest", req: request(token, local, 9, MaxUDPRRSize, 32), want: MaxUDPRRSize},
		{name: "wrong token", req: request("other", local, 10, 8, 32)},
		{name: "another source's", req: request(token, other, 10, 8, 32)},
		{name: "tampered size", req: tampered},
		{name: "old key", req: func() []byte {
			b := request(token, local, 15, 8, 32)
			k := tokenKey(token)
			copy(b, k[:])
			return b
		}()},
		{name: "short", req: request(token, local, 11, 8, 31)},
		{name: "response too small", req: request(token, local, 12, 7, 32)},
		{name: "response too large", req: request(token, local, 13, MaxUDPRRSize+1, 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.Write(tc.req); err != nil {
				t.Fatal(err)
			}
			wait := 2 * time.Second
			if tc.want == 0 {
				wait = 200 * time.Millisecond
			}
			c.SetReadDeadline(time.Now().Add(wait))
			buf := make([]byte, 1<<16)
			n, err := c.Read(buf)
			if tc.want == 0 {
				if err == nil {
					t.Fatalf("answered %d bytes", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.want || string(buf[:8]) != string(tc.req[16:24]) {
				t.Fatalf("answered %d bytes, seq %x; want %d, seq %x", n, buf[:8], tc.want, tc.req[16:24])
			}
		})
	}
}

// TestRRStartChecks fails a client at its start for what it cannot run with.
func TestRRStartChecks(t *testing.T) {
	raw, _, err := Kinds()["udp-rr"].Plan(nil, NewPlanner())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind string
		spec JobSpec
		err  string
	}{
		{kind: "udp-rr", spec: JobSpec{Duration: 1, Params: raw}, err: "needs connect:"},
		{kind: "tcp-rr", spec: JobSpec{Duration: 1, Addr: "127.0.0.1"}, err: "missing port"},
		{kind: "tcp-rr", spec: JobSpec{Duration: 1, Addr: "127.0.0.1:http"}, err: "not a port number"},
		{kind: "tcp-rr", spec: JobSpec{Duration: 1, Addr: "127.0.0.1:0"}, err: "not a port number"},
		{kind: "udp-rr", spec: JobSpec{Addr: "127.0.0.1:9"}, err: "duration"},
		{kind: "tcp-rr", spec: JobSpec{Duration: 1, Addr: "127.0.0.1:9", Params: json.RawMessage(`{"x":1}`)}, err: `unknown field "x"`},
		{kind: "tcp-rr", spec: JobSpec{Duration: 1, Addr: "127.0.0.1:9", Params: raw}, err: "timeout is for udp-rr only"},
	} {
		_, _, err := Kinds()[tc.kind].Start(context.Background(), tc.spec, Env{})
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s %+v: error %v, want one containing %q", tc.kind, tc.spec, err, tc.err)
		}
	}
}

// TestRRSetTOS reads the mark back from sockets dialed as the clients dial, and
// from one marked afterwards as the server marks its responses.
func TestRRSetTOS(t *testing.T) {
	getTOS := func(t *testing.T, c net.Conn, v4 bool) int {
		t.Helper()
		rc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var gerr error
		rc.Control(func(fd uintptr) {
			if v4 {
				v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TOS)
			} else {
				v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_TCLASS)
			}
		})
		if gerr != nil {
			t.Fatal(gerr)
		}
		return v
	}
	for _, host := range []string{"127.0.0.1", "::1"} {
		v4 := host == "127.0.0.1"
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			if !v4 {
				t.Logf("no IPv6 loopback: %v", err)
				continue
			}
			t.Fatal(err)
		}
		defer ln.Close()
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network+" "+host, func(t *testing.T) {
				c, err := dialRR(context.Background(), network, ln.Addr().String(), 0xb8)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if got := getTOS(t, c, v4); got != 0xb8 {
					t.Errorf("dialed with TOS %#x, want 0xb8", got)
				}
				if err := setTOS(c.(syscall.Conn), v4, 0x28); err != nil {
					t.Fatal(err)
				}
				if got := getTOS(t, c, v4); got != 0x28 {
					t.Errorf("set TOS %#x, want 0x28", got)
				}
				// Unmarked when asked for none.
				u, err := dialRR(context.Background(), network, ln.Addr().String(), -1)
				if err != nil {
					t.Fatal(err)
				}
				defer u.Close()
				if got := getTOS(t, u, v4); got != 0 {
					t.Errorf("dialed without TOS: %#x", got)
				}
			})
		}
	}
}

// TestRREmit samples an interval: nothing without a completed transaction; the
// latency is the mean time of those that completed, the rate their number over
// the interval.
func TestRREmit(t *testing.T) {
	rec := &rrRecorder{}
	cl := &rrClient{cfg: rrConfig{series: "lat", rateSeries: "rate"}, env: rec.env()}
	now := time.Unix(1000, 0)
	cl.emit(now, 0.1, 0, 0)
	cl.emit(now, 0, 3, time.Second)
	cl.emit(now, 0.2, 4, 180*time.Millisecond)
	want := map[string][]datafile.Sample{
		"lat":  {{T: 1000, V: 45, Dur: 0.2}},
		"rate": {{T: 1000, V: 20, Dur: 0.2}},
	}
	if !reflect.DeepEqual(rec.samples, want) || len(rec.errs) > 0 {
		t.Errorf("got %v (%v), want %v", rec.samples, rec.errs, want)
	}
}

// A transaction longer than a step (a response behind a full queue) reads as
// its own length: the steps in which none completed say nothing, and the sample
// that follows covers them, as netperf's interim results do. Cut at every step, a
// 250 ms transaction would read as 100 ms.
func TestRRTransactionsLongerThanAStep(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const hold = 250 * time.Millisecond
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(make([]byte, nonceSize))
		r := bufio.NewReader(c)
		if _, err := r.ReadBytes('\n'); err != nil { // the hello; any MAC will do here
			return
		}
		c.Write([]byte{'\n'})
		one := make([]byte, 1)
		for {
			if _, err := io.ReadFull(r, one); err != nil {
				return
			}
			time.Sleep(hold)
			if _, err := c.Write(one); err != nil {
				return
			}
		}
	}()
	rec, err := runRRClient(t, "tcp-rr", ln.Addr().String(), "tok", map[string]any{"series": "rr"}, 1.2)
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	lat := rec.samples["rr"]
	if len(lat) < 3 {
		t.Fatalf("%d samples of 250 ms transactions over 1.2 s", len(lat))
	}
	for i, s := range lat {
		if s.V < 245 || s.V > 300 || s.Dur < 0.15 {
			t.Errorf("sample %d = %+v: not a transaction of %v", i, s, hold)
		}
	}
}

// TestRRServerHoldsToPlan: given its clients' plans, the server answers what they
// ask (authenticated) and nothing else: no larger UDP response, no TCP hello of
// other sizes or mark.
func TestRRServerHoldsToPlan(t *testing.T) {
	const token = "tok"
	plan := func(kind string, params map[string]any) Client {
		raw, _, err := Kinds()[kind].Plan(params, NewPlanner())
		if err != nil {
			t.Fatal(err)
		}
		return Client{Kind: kind, Duration: 1, Params: raw}
	}
	port := startRRServer(t, "127.0.0.1", token,
		plan("udp-rr", map[string]any{"response_size": 100}),
		plan("tcp-rr", map[string]any{"request_size": 10, "response_size": 20, "series": "TCP RR 2", "rate_series": "TCP RR 2 rate"}))
	c, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	for _, tc := range []struct {
		size uint32
		want bool
	}{{100, true}, {8, true}, {101, false}, {MaxUDPRRSize, false}} {
		b := make([]byte, 32)
		b[24], b[25], b[26], b[27] = byte(tc.size>>24), byte(tc.size>>16), byte(tc.size>>8), byte(tc.size)
		copy(b, udpRequestMAC(token, local, b[rrKeySize:udpRequestHeader]))
		c.Write(b)
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := c.Read(make([]byte, 1<<16))
		if got := err == nil; got != tc.want || got && n != int(tc.size) {
			t.Errorf("UDP response of %d asked: answered %v (%d bytes), want %v", tc.size, got, n, tc.want)
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for _, tc := range []struct {
		h    rrHello
		want bool
	}{
		{rrHello{RequestSize: 10, ResponseSize: 20}, true},
		{rrHello{RequestSize: 10, ResponseSize: 21}, false},
		{rrHello{RequestSize: 1, ResponseSize: 1}, false},
		{rrHello{RequestSize: 10, ResponseSize: 20, TOS: 184}, false},
	} {
		tc := tc
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nonce, err := readNonce(conn, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tc.h.MAC = macFields(token, ctxTCPRR, nonce, tc.h.fields()...)
		b, _ := json.Marshal(tc.h)
		conn.Write(append(b, '\n'))
		if got := !refused(conn); got != tc.want {
			t.Errorf("TCP hello %d/%d TOS %d: accepted %v, want %v", tc.h.RequestSize, tc.h.ResponseSize, tc.h.TOS, got, tc.want)
		}
		conn.Close()
	}
}
