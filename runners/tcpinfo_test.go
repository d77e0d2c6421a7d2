package runners

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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
		for _, stat := range []string{"srtt", "rttvar", "cwnd", "retransmits", "delivery_rate", "pacing_rate", "delivered_ce"} {
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
