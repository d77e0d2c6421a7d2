package runners

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

func TestParseBandwidth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64 // -1: an error
	}{
		{"200M", 200e6}, {"10m", 10e6}, {"1G", 1e9}, {"1g", 1e9}, {"500k", 500e3}, {"500K", 500e3},
		{"1.5M", 1.5e6}, {"64000", 64000}, {" 100M ", 100e6}, {"0", 0}, {"", 0}, {"0M", 0}, {"100G", 100e9},
		{"101G", -1}, {"-1M", -1}, {"M", -1}, {".", -1}, {"1.2.3M", -1}, {"inf", -1}, {"NaN", -1}, {"1e9", -1},
		{"0x10", -1}, {"10 M", -1}, {"10Mbit", -1}, {"10T", -1},
	} {
		got, err := ParseBandwidth(tc.in)
		if tc.want < 0 {
			if err == nil {
				t.Errorf("ParseBandwidth(%q) = %g, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseBandwidth(%q) = %g, %v; want %g", tc.in, got, err, tc.want)
		}
	}
}

// floodSeries are the series the plan declares for a flow.
func floodSeries(name string, flow int, marking string) []datafile.Series {
	var out []datafile.Series
	for _, s := range []struct{ suffix, units, host string }{
		{"", "Mbits/s", datafile.HostPeer}, {" sent", "Mbits/s", ""}, {" loss", "%", datafile.HostPeer},
		{" tx pps", "packets/s", ""}, {" rx pps", "packets/s", datafile.HostPeer},
	} {
		out = append(out, datafile.Series{Name: name + s.suffix, Kind: datafile.KindUDP, Units: s.units, Host: s.host,
			Direction: Upload, Flow: flow, Marking: marking})
	}
	return out
}

func TestUDPFloodPlan(t *testing.T) {
	checkPlans(t, []planCase{
		{kind: "udp-flood", params: nil,
			want:   `{"series":"UDP upload","flows":1,"bandwidth":"0","packet_size":1470}`,
			series: floodSeries("UDP upload", 1, "")},
		{kind: "udp-flood", params: map[string]any{"bandwidth": "200M", "packet_size": "1472", "flows": "1", "tos": "EF"},
			want:   `{"series":"UDP upload","flows":1,"bandwidth":"200000000","packet_size":1472,"tos":"184"}`,
			series: floodSeries("UDP upload", 1, "EF")},
		{kind: "udp-flood", params: map[string]any{"bandwidth": "10m", "packet_size": 16, "flows": 2, "series": "UDP BK", "tos": 32},
			want:   `{"series":"UDP BK","flows":2,"bandwidth":"10000000","packet_size":16,"tos":"32"}`,
			series: append(floodSeries("UDP BK::1", 1, "32"), floodSeries("UDP BK::2", 2, "32")...)},
		{kind: "udp-flood", params: map[string]any{"bandwidth": 1000000, "packet_size": 65507},
			want:   `{"series":"UDP upload","flows":1,"bandwidth":"1000000","packet_size":65507}`,
			series: floodSeries("UDP upload", 1, "")},
		{kind: "udp-flood", params: map[string]any{"bandwidth": "1.5k"},
			want:   `{"series":"UDP upload","flows":1,"bandwidth":"1500","packet_size":1470}`,
			series: floodSeries("UDP upload", 1, "")},
		{kind: "udp-flood", params: map[string]any{"bandwidth": ""},
			want:   `{"series":"UDP upload","flows":1,"bandwidth":"0","packet_size":1470}`,
			series: floodSeries("UDP upload", 1, "")},
		{kind: "udp-flood", params: map[string]any{"bandwith": "1M"}, want: `error: unknown field "bandwith"`},
		{kind: "udp-flood", params: map[string]any{"bandwidth": "fast"}, want: `error: bandwidth "fast"`},
		{kind: "udp-flood", params: map[string]any{"bandwidth": "-5M"}, want: `error: bandwidth "-5M"`},
		{kind: "udp-flood", params: map[string]any{"bandwidth": "1T"}, want: `error: bandwidth "1T"`},
		{kind: "udp-flood", params: map[string]any{"bandwidth": true}, want: "error: true is neither text nor a number"},
		{kind: "udp-flood", params: map[string]any{"packet_size": 15}, want: "error: packet_size is 15: want 16 (the header) to 65507"},
		{kind: "udp-flood", params: map[string]any{"packet_size": 65508}, want: "error: packet_size is 65508"},
		{kind: "udp-flood", params: map[string]any{"packet_size": "big"}, want: `error: "big" is not a whole number`},
		{kind: "udp-flood", params: map[string]any{"flows": 0}, want: "error: flows is 0: want 1 to 1024"},
		{kind: "udp-flood", params: map[string]any{"flows": 1025}, want: "error: flows is 1025"},
		{kind: "udp-flood", params: map[string]any{"tos": "XX"}, want: `error: tos: TOS "XX"`},
		{kind: "udp-flood", params: map[string]any{"bandwidth": "5M", "ecn": "ect1"},
			want:   `{"series":"UDP upload","flows":1,"bandwidth":"5000000","packet_size":1470,"tos":"1"}`,
			series: floodSeries("UDP upload", 1, "ECT(1)")},
		{kind: "udp-flood", params: map[string]any{"ecn": "maybe"}, want: `error: ecn "maybe"`},
		{kind: "udp-flood", params: map[string]any{"series": strings.Repeat("x", 1020)}, want: "error: series"},
		{kind: "udp-sink", params: nil, want: ""},
		{kind: "udp-sink", params: map[string]any{"port": 1}, want: "error: udp-sink takes no parameters"},
	}, func(kind string, raw json.RawMessage) error {
		if kind == "udp-sink" {
			return nil
		}
		var p floodParams
		if err := decodeRaw(raw, &p); err != nil {
			return err
		}
		_, err := p.resolve()
		return err
	})
}

// Two floods of one name are refused; named apart they number their flows across
// the test.
func TestUDPFloodPlanClaims(t *testing.T) {
	pl := NewPlanner()
	if _, _, err := Kinds()["udp-flood"].Plan(nil, pl); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Kinds()["udp-flood"].Plan(nil, pl); err == nil || !strings.Contains(err.Error(), "yielded twice") {
		t.Fatalf("a second default flood: %v", err)
	}
	_, series, err := Kinds()["udp-flood"].Plan(map[string]any{"series": "UDP 2"}, pl)
	if err != nil || series[0].Flow != 3 {
		t.Fatalf("a flood named apart: %+v, %v", series, err)
	}
}

// startSink runs a udp-sink job on addr until the test ends; wait stops it and
// waits for it.
func startSink(t *testing.T, addr, token string, rec *rrRecorder, clients ...Client) (port int, wait func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kind := Kinds()["udp-sink"]
	if !kind.Background {
		t.Error("udp-sink is not a background kind")
	}
	job, st, err := kind.Start(ctx, JobSpec{Kind: "udp-sink", Target: addr, Token: token, Step: 0.1,
		Start: float64(time.Now().UnixNano()) / 1e9, Clients: clients}, rec.env())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if st.Port == 0 {
		t.Fatalf("started %+v: no port", st)
	}
	done := make(chan error, 1)
	go func() { done <- job.Run(ctx) }()
	stopped := false
	wait = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("udp-sink: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("udp-sink did not stop")
		}
	}
	t.Cleanup(wait)
	return st.Port, wait
}

// runFlood plans and runs a udp-flood job to its end.
func runFlood(t *testing.T, addr, token string, params map[string]any, duration float64) *rrRecorder {
	t.Helper()
	raw, _, err := Kinds()["udp-flood"].Plan(params, NewPlanner())
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	rec := &rrRecorder{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(duration*float64(time.Second))+10*time.Second)
	defer cancel()
	spec := JobSpec{Kind: "udp-flood", Addr: addr, Token: token, Step: 0.1, Duration: duration,
		Start: float64(time.Now().Add(100*time.Millisecond).UnixNano()) / 1e9, Params: raw}
	job, _, err := Kinds()["udp-flood"].Start(ctx, spec, rec.env())
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := job.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("udp-flood ran past its duration")
	}
	return rec
}

// rateOf is a series' rate over its samples, from their bytes and durations.
func rateOf(samples []datafile.Sample) (mbps, secs float64) {
	var bytes int64
	for _, s := range samples {
		bytes += s.Bytes
		secs += s.Dur
	}
	if secs == 0 {
		return 0, 0
	}
	return float64(bytes) * 8 / secs / 1e6, secs
}

// TestUDPFloodLoopback floods a sink at 50 Mbit/s for a second through the kinds,
// as an agent runs them.
func TestUDPFloodLoopback(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	sinkRec := &rrRecorder{mayDeclare: true}
	port, stopSink := startSink(t, "127.0.0.1", token, sinkRec)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rec := runFlood(t, addr, token, map[string]any{"bandwidth": "50M", "tos": "CS1"}, 1)
	// The end datagrams have gone; give the sink a moment for the last of them.
	time.Sleep(100 * time.Millisecond)
	stopSink()

	for _, r := range []*rrRecorder{rec, sinkRec} {
		if len(r.errs) > 0 {
			t.Errorf("samples the data file refuses: %v", r.errs)
		}
	}
	sent, secs := rateOf(rec.samples["UDP upload sent"])
	t.Logf("sender: %.3f Mbit/s over %.3f s in %d samples", sent, secs, len(rec.samples["UDP upload sent"]))
	if math.Abs(sent-50)/50 > 0.05 || math.Abs(secs-1) > 0.05 {
		t.Errorf("sender %.3f Mbit/s over %.3f s, want 50 Mbit/s within 5%% over 1 s", sent, secs)
	}
	if n := len(rec.samples["UDP upload sent"]); n < 9 || n > 11 {
		t.Errorf("%d sender samples, want 10 (one per 0.1 s step)", n)
	}
	// Throughout, not only on average: the pacer never runs ahead of its schedule
	// on the monotonic clock by more than the datagram it is sending, however the
	// CPU schedules it. (Behind is the CPU's doing: it catches up a debt of up to
	// udpMaxDebt and forgives more; the mean above bounds it.)
	var bits, elapsed float64
	for _, s := range rec.samples["UDP upload sent"] {
		bits += s.V * 1e6 * s.Dur
		elapsed += s.Dur
		if ahead := bits - 50e6*elapsed; ahead > 8*1500 {
			t.Errorf("sender sample %+v: %.0f bits ahead of the schedule by then", s, ahead)
		}
	}
	var txPkts float64
	for _, s := range rec.samples["UDP upload tx pps"] {
		txPkts += s.V * s.Dur
	}
	if want := 50e6 / 8 / 1470; math.Abs(txPkts-want)/want > 0.05 {
		t.Errorf("tx pps adds up to %.0f datagrams, want %.0f", txPkts, want)
	}
	recv, rsecs := rateOf(sinkRec.samples["UDP upload"])
	t.Logf("receiver: %.3f Mbit/s over %.3f s in %d samples", recv, rsecs, len(sinkRec.samples["UDP upload"]))
	if math.Abs(recv-sent)/sent > 0.03 {
		t.Errorf("receiver %.3f Mbit/s, sender %.3f: want them within 3%%", recv, sent)
	}
	var rxPkts float64
	for _, s := range sinkRec.samples["UDP upload rx pps"] {
		rxPkts += s.V * s.Dur
	}
	// All that came is counted but a tail shorter than half a step (0.05 s here),
	// which gives no rate: at most that many datagrams fewer.
	if short := txPkts / 1.0 * 0.05; rxPkts > txPkts+1 || txPkts-rxPkts > short+1 {
		t.Errorf("rx pps adds up to %.0f datagrams, tx pps to %.0f: want the same but for a tail of at most %.0f", rxPkts, txPkts, short)
	}
	loss := sinkRec.samples["UDP upload loss"]
	if len(loss) < 8 {
		t.Errorf("%d loss samples, want one a step", len(loss))
	}
	for _, s := range loss {
		if s.V > 1 {
			t.Errorf("loss sample %+v on loopback", s)
		}
	}
	// The sink's summary says all came.
	var summary string
	for _, w := range sinkRec.warns {
		if strings.HasPrefix(w, "udp-sink UDP upload from ") {
			summary = w
		}
	}
	if want := fmt.Sprintf("%d datagrams sent, %d received, 0 lost", int(math.Round(txPkts)), int(math.Round(txPkts))); !strings.Contains(summary, want) {
		t.Errorf("sink's summary %q, want %q (all: %q)", summary, want, sinkRec.warns)
	}
}

// TestUDPFloodUnlimitedFlows runs several unlimited flows briefly: each has its own
// series at the sink and what the sink counts is what was sent, less what was lost.
func TestUDPFloodUnlimitedFlows(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	sinkRec := &rrRecorder{mayDeclare: true}
	port, stopSink := startSink(t, "127.0.0.1", token, sinkRec)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rec := runFlood(t, addr, token, map[string]any{"flows": 2, "packet_size": 200}, 0.3)
	time.Sleep(100 * time.Millisecond)
	stopSink()
	if len(rec.errs)+len(sinkRec.errs) > 0 {
		t.Errorf("samples the data file refuses: %v %v", rec.errs, sinkRec.errs)
	}
	bytesOf := func(samples []datafile.Sample) (n int64) {
		for _, s := range samples {
			n += s.Bytes
		}
		return n
	}
	for _, name := range []string{"UDP upload::1", "UDP upload::2"} {
		// Bytes, not rates: the sink's samples span the first datagram's arrival to
		// the end's, the sender's its start to its end.
		sent, recv := bytesOf(rec.samples[name+" sent"]), bytesOf(sinkRec.samples[name])
		t.Logf("%s: sent %d bytes, received %d", name, sent, recv)
		if sent <= 0 || recv <= 0 || recv > sent {
			t.Errorf("%s: sent %d bytes, received %d", name, sent, recv)
		}
		for _, s := range sinkRec.samples[name+" loss"] {
			if s.V < 0 || s.V > 100 {
				t.Errorf("%s loss sample %+v", name, s)
			}
		}
	}
}

// A flood with the wrong token is not counted.
func TestUDPFloodWrongToken(t *testing.T) {
	sinkRec := &rrRecorder{mayDeclare: true}
	port, stopSink := startSink(t, "127.0.0.1", "0123456789abcdef0123456789abcdef", sinkRec)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rec := runFlood(t, addr, "fedcba9876543210fedcba9876543210", map[string]any{"bandwidth": "10M"}, 0.3)
	time.Sleep(50 * time.Millisecond)
	stopSink()
	if sent, _ := rateOf(rec.samples["UDP upload sent"]); sent < 9 {
		t.Errorf("sender sent %.1f Mbit/s, want 10", sent)
	}
	if len(sinkRec.samples) > 0 || len(sinkRec.warns) > 0 {
		t.Errorf("the sink counted a flood with the wrong token: %v %q", sinkRec.samples, sinkRec.warns)
	}
}

// The sink's counting, datagram by datagram: data before the hello, loss from
// sequence numbers across their wrap, reordering, the end's tail loss.
func TestUDPSinkCounting(t *testing.T) {
	rec := &rrRecorder{mayDeclare: true}
	s := &udpSink{key: floodKey("tok"), env: rec.env(), flows: map[sinkKey]*sinkFlow{}}
	s.declare = declaring(s.env)
	from := netip.MustParseAddrPort("192.0.2.1:4000")
	t0 := time.Unix(1_700_000_000, 0)
	data := func(at time.Duration, flow, seq uint32) {
		d := make([]byte, 100)
		copy(d, s.key[:])
		binary.BigEndian.PutUint32(d[8:12], flow)
		binary.BigEndian.PutUint32(d[12:16], seq)
		s.take(t0.Add(at), from, d, -1, nil)
	}
	control := func(at time.Duration, flow, typ uint32, body []byte) {
		d := make([]byte, 16, 16+len(body))
		copy(d, s.key[:])
		binary.BigEndian.PutUint32(d[8:12], flow|udpControl)
		binary.BigEndian.PutUint32(d[12:16], typ)
		s.take(t0.Add(at), from, append(d, body...), -1, nil)
	}
	ms := time.Millisecond
	// Flow 8's data before its hello: counted, sampled once the name comes.
	data(0, 8, 1)
	data(10*ms, 8, 2)
	s.tick(t0.Add(100 * ms))
	if len(rec.samples) != 0 {
		t.Fatalf("an unnamed flow was sampled: %v", rec.samples)
	}
	control(110*ms, 8, udpHello, []byte("V"))
	control(120*ms, 8, udpHello, []byte("other name")) // the first name holds
	// Flow 7 has sent 2^32-3 datagrams, all of which came, when it is last sampled.
	s.flows[sinkKey{from, 7}] = &sinkFlow{name: "U", started: true, maxSeq: 1<<32 - 3, seq32: math.MaxUint32 - 2,
		prevMax: 1<<32 - 3, last: t0.Add(100 * ms), lastRx: t0.Add(100 * ms)}
	// Across the wrap: 2^32-2, 2^32-1, then 0 and 1; 2 is lost; 3 comes before 1.
	data(125*ms, 7, math.MaxUint32-1)
	data(126*ms, 7, math.MaxUint32)
	data(130*ms, 7, 0)
	data(140*ms, 7, 3)
	data(150*ms, 7, 1)
	data(160*ms, 7, math.MaxUint32-5) // 2^32-6: late from long before
	s.tick(t0.Add(200 * ms))
	// Flow 8: both of 1..2 came, over the 0.2 s since its first datagram.
	if got := rec.samples["V loss"]; len(got) != 1 || got[0].V != 0 {
		t.Errorf("V loss %+v, want 0", got)
	}
	if got := rec.samples["V"]; len(got) != 1 || got[0].Bytes != 200 || math.Abs(got[0].Dur-0.2) > 1e-9 {
		t.Errorf("V rate %+v, want 200 bytes over 0.2 s", got)
	}
	// Flow 7: 6 came (one far behind, counted but out of order) of the 6 sequence
	// numbers 2^32-2 .. 2^32+3 sent since: the late one makes up for the lost one.
	// Without it, 5 of 6.
	if got := rec.samples["U loss"]; len(got) != 1 || got[0].V != 0 {
		t.Errorf("U loss %+v, want 0 (a late datagram fills in for a lost one)", got)
	}
	if got := rec.samples["U"]; len(got) != 1 || got[0].Bytes != 600 || math.Abs(got[0].Dur-0.1) > 1e-9 {
		t.Errorf("U rate %+v, want 600 bytes over 0.1 s", got)
	}
	if got := rec.samples["U rx pps"]; len(got) != 1 || math.Abs(got[0].V-60) > 1e-6 {
		t.Errorf("U rx pps %+v, want 60", got)
	}
	data(210*ms, 7, 5) // 4 lost
	s.tick(t0.Add(300 * ms))
	if got := rec.samples["U loss"]; len(got) != 2 || got[1].V != 50 {
		t.Errorf("U loss %+v, want 50%% (1 of 2)", got)
	}
	// The end: 2^32+7 sent in all, so the last 2 were lost at the tail.
	var body [8]byte
	binary.BigEndian.PutUint64(body[:], 1<<32+7)
	control(350*ms, 7, udpEnd, body[:])
	control(360*ms, 7, udpEnd, body[:])
	data(370*ms, 7, 6) // after its end: ignored
	if got := rec.samples["U loss"]; len(got) != 3 || got[2].V != 100 {
		t.Errorf("U loss at the end %+v, want 100%% of the tail", got)
	}
	s.tick(t0.Add(400 * ms))
	s.finish(t0.Add(500 * ms))
	// The tail, 50 ms after the last step, gives its loss but no rate: a rate
	// over less than half a step says nothing.
	if n := len(rec.samples["U"]); n != 2 {
		t.Errorf("%d U rate samples, want 2 (none for the short tail, none after the end)", n)
	}
	// The summary counts what this sink saw: 7 of flow 7's datagrams.
	wantU := fmt.Sprintf("udp-sink U from %s: %d datagrams sent, 7 received, %d lost", from, uint64(1<<32+7), uint64(1<<32))
	wantV := fmt.Sprintf("udp-sink V from %s: 2 datagrams sent at least (its end never came), 2 received, 0 lost (0.0%%), 0 out of order", from)
	if len(rec.warns) != 2 || !strings.HasPrefix(rec.warns[0], wantU) || !strings.HasSuffix(rec.warns[0], "2 out of order") ||
		rec.warns[1] != wantV {
		t.Errorf("warnings %q, want %q... and %q", rec.warns, wantU, wantV)
	}
	if len(rec.errs) > 0 {
		t.Error(rec.errs)
	}
}

// The socket's own drops: a receive buffer at its minimum, 200 datagrams sent to it
// unread, and the kernel's count says how many it could not hold (sent less what
// reading then finds).
func TestSocketDrops(t *testing.T) {
	var lc net.ListenConfig
	lc.Control = func(_, _ string, rc syscall.RawConn) error {
		rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1) })
		return nil
	}
	pc, err := lc.ListenPacket(context.Background(), "udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c := pc.(*net.UDPConn)
	if d, ok := socketDrops(c); !ok || d != 0 {
		t.Fatalf("a new socket: drops %d, ok %v", d, ok)
	}
	out, err := net.Dial("udp", c.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	const sent = 200
	for range sent {
		if _, err := out.Write(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	drops, ok := socketDrops(c)
	if !ok {
		t.Fatal("SO_MEMINFO unread")
	}
	got := 0
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	for buf := make([]byte, 2000); ; got++ {
		if _, err := c.Read(buf); err != nil {
			break
		}
	}
	t.Logf("%d sent, %d read, %d dropped by the socket", sent, got, drops)
	if drops == 0 || got+int(drops) != sent {
		t.Errorf("%d sent, %d read, the socket counted %d dropped: want the two to add up to what was sent", sent, got, drops)
	}
}

// The sink's census: the datagrams of an ECT(1) flood arrive ECT(1), each step's
// rate of them is a series of its own beside the receive rate, and the flow's
// summary counts them; no codepoint it did not get has a series.
func TestUDPSinkECNCensus(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	params := map[string]any{"bandwidth": "10M", "ecn": "ect1"}
	raw, _, err := Kinds()["udp-flood"].Plan(params, NewPlanner())
	if err != nil {
		t.Fatal(err)
	}
	sinkRec := &rrRecorder{mayDeclare: true}
	port, stopSink := startSink(t, "127.0.0.1", token, sinkRec, Client{Kind: "udp-flood", Duration: 0.5, Params: raw})
	runFlood(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), token, params, 0.5)
	time.Sleep(100 * time.Millisecond)
	stopSink()
	sinkRec.mu.Lock()
	defer sinkRec.mu.Unlock()
	if len(sinkRec.errs) > 0 {
		t.Errorf("refused: %v", sinkRec.errs)
	}
	var names []string
	for _, se := range sinkRec.declared {
		names = append(names, se.Name)
		if se.Kind != datafile.KindUDP || se.Units != "packets/s" {
			t.Errorf("declared %+v", se)
		}
	}
	if len(names) != 1 || names[0] != "UDP upload rx ECT(1) pps" {
		t.Fatalf("declared %q, want the ECT(1) rate alone", names)
	}
	var ect1, rx float64
	for _, x := range sinkRec.samples["UDP upload rx ECT(1) pps"] {
		ect1 += x.V * x.Dur
	}
	for _, x := range sinkRec.samples["UDP upload"+udpRxSuffix] {
		rx += x.V * x.Dur
	}
	if ect1 == 0 || math.Abs(ect1-rx) > 0.5 {
		t.Errorf("%.1f ECT(1) datagrams over the steps, %.1f received", ect1, rx)
	}
	w := strings.Join(sinkRec.warns, "\n")
	if !regexp.MustCompile(`\d+ received, .*; they arrived ECT\(1\) \d+`).MatchString(w) || strings.Contains(w, "bleached") {
		t.Errorf("warnings %q", w)
	}
}

// A flow sent ECT(1) that arrives Not-ECT or ECT(0) was bleached or re-marked on
// the way, and the sink says so; CE is a router's mark, not a re-marking.
func TestUDPSinkSaysWhenECNWasBleached(t *testing.T) {
	for _, c := range []struct {
		arrived []int
		warn    string
	}{
		{[]int{ECNECT1, ECNCE, ECNECT1}, ""},
		{[]int{ECNNotECT, ECNECT1, ECNNotECT}, "sent ECT(1), and 2 of 3 datagrams arrived Not-ECT 2, ECT(1) 1: the path bleached or re-marked"},
		{[]int{ECNECT0}, "sent ECT(1), and 1 of 1 datagrams arrived ECT(0) 1"},
	} {
		rec := &rrRecorder{mayDeclare: true}
		s := &udpSink{key: floodKey("tok"), env: rec.env(), flows: map[sinkKey]*sinkFlow{}, sentTOS: ECNECT1, sentKnown: true}
		s.declare = declaring(s.env)
		from := netip.MustParseAddrPort("192.0.2.1:4000")
		t0 := time.Unix(1_700_000_000, 0)
		hello := make([]byte, 16, 17)
		copy(hello, s.key[:])
		binary.BigEndian.PutUint32(hello[8:12], 1|udpControl)
		binary.BigEndian.PutUint32(hello[12:16], udpHello)
		s.take(t0, from, append(hello, 'F'), -1, nil)
		for i, tos := range c.arrived {
			d := make([]byte, 100)
			copy(d, s.key[:])
			binary.BigEndian.PutUint32(d[8:12], 1)
			binary.BigEndian.PutUint32(d[12:16], uint32(i+1))
			s.take(t0.Add(time.Duration(i)*time.Millisecond), from, d, tos, nil)
		}
		s.finish(t0.Add(time.Second))
		w := strings.Join(rec.warns, "\n")
		if c.warn == "" && strings.Contains(w, "bleached") || c.warn != "" && !strings.Contains(w, c.warn) {
			t.Errorf("arrived %v: warnings %q, want %q", c.arrived, w, c.warn)
		}
	}
}
