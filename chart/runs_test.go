package chart

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// spec is a synthetic run: a ping through the load, flows each way, and the
// bottleneck's statistics, written as the controller writes a data file and read
// back as every report reads one.
type spec struct {
	title, setup, host string
	start              time.Time
	pingMs, bloatMs    float64   // idle latency, and what the load adds at its height
	down, up           int       // flows each way
	mbit               float64   // per download flow; an upload flow gets a quarter
	qdisc              bool      // backlog, drops, ECN marks
	sojourn            string    // "", "pie" (delay) or "cake" (two tins' avg_delay_us)
	pairs              []string  // the client/server pairs, each with its ping and flows; none = one, unnamed
	flowScale          []float64 // per flow (of each pair), its share of mbit
}

// The runs' timeline: 2 s idle, 10 s of load, 2 s after; a step of 0.2 s.
const (
	tDelay, tLength, tTotal, tStep = 2.0, 10.0, 14.0, 0.2
)

func writeRun(t testing.TB, s spec) *datafile.Run {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run"+datafile.Ext)
	w, err := datafile.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.start.IsZero() {
		s.start = time.Date(2026, 11, 29, 18, 41, 47, 0, time.UTC)
	}
	t0 := datafile.Unix(s.start)
	host := s.host
	if host == "" {
		host = "server"
	}
	m := datafile.Metadata{Test: "rrul_like", Title: s.title, StartTime: s.start, T0: t0, Length: tLength, Delay: tDelay, Step: tStep,
		TotalLength: tTotal, Parameters: map[string]string{"download_streams": fmt.Sprint(s.down)},
		Hosts: []datafile.Host{{Role: "client", Name: "client", Hostname: "client"}, {Role: "server", Name: host, SSH: "root@198.19.0.6", TestIP: "198.18.0.2"}}}
	if s.setup != "" {
		m.Setup = &datafile.Setup{Name: s.setup, Title: s.setup, Source: "built-in",
			Devices: []datafile.SetupDevice{{Host: "server", Dev: "test0", Commands: []string{"tc qdisc replace dev test0 root " + s.setup},
				ReadBack: json.RawMessage(`{}`)}}}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Header(m))
	pairs := s.pairs
	if len(pairs) == 0 {
		pairs = []string{""}
	}
	var pings, flows []datafile.Series
	for _, pair := range pairs {
		ping := datafile.Series{Name: datafile.PairName("Ping (ms) ICMP", pair), Kind: datafile.KindPing, Units: "ms", Host: "client", Target: "198.18.0.2", Pair: pair}
		must(w.AddSeries(ping))
		pings = append(pings, ping)
		for i := 1; i <= s.down+s.up; i++ {
			dir, n := "download", i
			if i > s.down {
				dir, n = "upload", i-s.down
			}
			se := datafile.Series{Name: datafile.PairName(fmt.Sprintf("TCP %s::%d", dir, n), pair), Kind: datafile.KindTCP, Units: "Mbits/s", Host: "client",
				Direction: dir, Flow: n, CC: "cubic", Pair: pair}
			must(w.AddSeries(se))
			flows = append(flows, se)
		}
	}
	var qs []datafile.Series
	if s.qdisc {
		qs = append(qs,
			datafile.Series{Name: "qdisc server:test0 root backlog", Kind: datafile.KindQdisc, Units: "bytes", Host: "server", Dev: "test0", Stat: "root backlog"},
			datafile.Series{Name: "qdisc server:test0 root drops", Kind: datafile.KindQdisc, Units: "pkts", Host: "server", Dev: "test0", Stat: "root drops", Counter: true},
			datafile.Series{Name: "qdisc server:test0 root ecn_mark", Kind: datafile.KindQdisc, Units: "pkts", Host: "server", Dev: "test0", Stat: "root ecn_mark", Counter: true})
	}
	switch s.sojourn {
	case "pie":
		qs = append(qs, datafile.Series{Name: "qdisc server:test0 root delay", Kind: datafile.KindQdisc, Units: "us", Host: "server", Dev: "test0", Stat: "root delay"})
	case "sampled":
		qs = append(qs, datafile.Series{Name: "sojourn server:test0 root", Kind: datafile.KindSojourn, Units: "ms", Host: "server", Dev: "test0", Stat: "root"})
	case "cake":
		for _, tin := range []string{"tin0", "tin1"} {
			st := "root " + tin + ".avg_delay_us"
			qs = append(qs, datafile.Series{Name: "qdisc server:test0 " + st, Kind: datafile.KindQdisc, Units: "us", Host: "server", Dev: "test0", Stat: st})
		}
	}
	for _, q := range qs {
		must(w.AddSeries(q))
	}
	// load is how far into the load t is, 0 outside it: the queue builds and stays.
	load := func(x float64) float64 {
		if x < tDelay || x >= tDelay+tLength {
			return 0
		}
		return math.Min(1, (x-tDelay)/2)
	}
	for k := 0; k <= int(tTotal/tStep); k++ {
		x := float64(k) * tStep
		tk := t0 + x
		for p, ping := range pings {
			v := s.pingMs + s.bloatMs*load(x) + 0.5*math.Sin(float64(k+p)) + float64(p)
			must(w.Append(ping.Name, []datafile.Sample{{T: tk + v/1e3, V: v, Seq: k, Lost: k == 33}}))
		}
		if x > tDelay && x <= tDelay+tLength+1e-9 {
			for i, se := range flows {
				rate := s.mbit
				if se.Direction == "upload" {
					rate /= 4
				}
				if f := i % (s.down + s.up); f < len(s.flowScale) {
					rate *= s.flowScale[f]
				}
				rate *= 1 + 0.1*math.Sin(float64(k+3*i))
				must(w.Append(se.Name, []datafile.Sample{{T: tk + 0.001*float64(i), V: rate, Dur: tStep, Bytes: int64(rate * 1e6 / 8 * tStep)}}))
			}
		}
		for _, q := range qs {
			var qv float64
			switch q.Stat {
			case "root backlog":
				qv = 2000 * s.bloatMs * load(x)
			case "root drops":
				qv = math.Floor(s.bloatMs / 2 * math.Max(0, x-tDelay-1))
			case "root ecn_mark":
				qv = math.Floor(s.bloatMs / 8 * math.Max(0, x-tDelay))
			case "root tin1.avg_delay_us":
				qv = 2000 * load(x)
			case "root":
				qv = 0.9 * s.bloatMs * load(x) // the sampler's median, ms
			default: // the sojourn
				qv = 1000 * s.bloatMs * load(x)
			}
			if q.Kind == datafile.KindSojourn {
				// A step's histogram: a bucket of a quarter of its packets at half
				// the time, the rest at the time, whose median is the time.
				must(w.Append(q.Name, []datafile.Sample{{T: tk + 0.002, V: qv / 2, N: 2}, {T: tk + 0.002, V: qv, N: 6}}))
				continue
			}
			must(w.Append(q.Name, []datafile.Sample{{T: tk + 0.002, V: qv}}))
		}
	}
	must(w.Close(nil))
	run, err := datafile.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// twoSetups are a compare of a bloated FIFO and an AQM.
func twoSetups(t testing.TB) []*datafile.Run {
	return []*datafile.Run{
		writeRun(t, spec{title: "pfifo run", setup: "PFIFO", pingMs: 5, bloatMs: 80, down: 2, up: 2, mbit: 40, qdisc: true}),
		writeRun(t, spec{title: "fq_pie run", setup: "FQ_PIE", pingMs: 5, bloatMs: 6, down: 2, up: 2, mbit: 45, qdisc: true, sojourn: "pie"}),
	}
}
