package flentfile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/flentsummary"
	"github.com/bloatbench/bloatbench/report"
)

// Files flent 2.1.1 recorded with its own runners on this project's machine
// (scripts/record-flent-fixtures: netperf, fping, irtt, iperf 2's CSV reports, ss,
// cpu_stats and tc):
// each reads, and our summary prints every row flent's printed for it then (kept
// beside it), by the same name, with its avg, median and 99th percentile to flent's
// 0.01 and its count; and flent run now on the same file agrees with us with no cut
// and with cuts.
func TestFlentRecordedFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/recorded/*.flent.gz")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 15 {
		t.Fatalf("%d recorded flent files under testdata/recorded, want the 15 the script records", len(files))
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".flent.gz")
		t.Run(name, func(t *testing.T) {
			run, err := Read(path)
			if err != nil {
				t.Fatal(err)
			}
			text, err := os.ReadFile(strings.TrimSuffix(path, ".flent.gz") + ".summary.txt")
			if err != nil {
				t.Fatal(err)
			}
			theirs, err := flentsummary.Parse(string(text))
			if err != nil {
				t.Fatal(err)
			}
			if len(theirs) == 0 {
				t.Fatalf("no rows in flent's summary:\n%s", text)
			}
			sum := report.Summarize(run)
			checkRows(t, theirs, sum.Rows)
			// compare, verdicts and history select rows by key: one row a key.
			keys := map[report.Key]string{}
			for _, r := range sum.Rows {
				if other, ok := keys[r.Key]; ok {
					t.Errorf("rows %q and %q share the key %+v", other, r.Name, r.Key)
				}
				keys[r.Key] = r.Name
			}
			if t.Failed() {
				t.Logf("flent printed:\n%s", text)
			}
			total := run.Metadata.TotalLength
			for _, cut := range []*[2]float64{{1, -1}, {2, 0}, {0.3, -2.7}, {total / 3, 2 * total / 3}} {
				t.Run("flent "+strings.Join(cutArgs(cut), " "), func(t *testing.T) { sameAsFlent(t, path, run, cut) })
			}
		})
	}
}

// readFlentJSON reads a flent file's JSON as flent's loader sees it.
func readFlentJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	zr, err := gzip.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.NewDecoder(zr).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

func writeFlentJSON(t *testing.T, d map[string]any, path string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if err := json.NewEncoder(zw).Encode(d); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Files of flent tests whose tools this machine lacks, built from files of the same
// runners to the shape flent's tests give them, and held to flent 2.1.1 itself:
//   - rtt_fair_up (netperf, two hosts): series named for their host ("TCP upload BE
//     10.9.0.3", "Ping (ms) ICMP 10.9.0.3"), "TCP upload fairness" (Jain's index on
//     the grid, in flent's "Idx", not a flow), the sum and average over the flows
//     only, and "Ping (ms) avg" over both pings;
//   - a netperf flow with flent's socket stats (ss): the flow's raw values carry
//     ss's records too, and its sub-series ("TCP download::1::tcp_cwnd") read them;
//   - voip with D-ITG: the parent "VoIP" series' raw values as DitgRunner.parse_raw
//     writes them ({t, val, seq, size}, val the one-way delay), its bitrate, delay,
//     jitter and loss on the grid, no rtt.
func TestFlentBuiltFiles(t *testing.T) {
	dir := t.TempDir()
	// holdToFlent writes d as name.flent.gz, reads it and holds our summary of it
	// to flent's, with no cut and with each of cuts.
	holdToFlent := func(t *testing.T, name string, d map[string]any, cuts ...*[2]float64) *datafile.Run {
		t.Helper()
		path := filepath.Join(dir, name+".flent.gz")
		writeFlentJSON(t, d, path)
		run, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, cut := range append([]*[2]float64{nil}, cuts...) {
			t.Run("flent "+strings.Join(cutArgs(cut), " "), func(t *testing.T) { sameAsFlent(t, path, run, cut) })
		}
		return run
	}
	rename := func(m map[string]any, from, to string) {
		if v, ok := m[from]; ok {
			m[to] = v
			delete(m, from)
		}
	}
	t.Run("rtt_fair_up", func(t *testing.T) {
		d := readFlentJSON(t, "testdata/tcp_2down.netperf-raw.flent.gz")
		md := d["metadata"].(map[string]any)
		results, raw, sm := d["results"].(map[string]any), d["raw_values"].(map[string]any), md["SERIES_META"].(map[string]any)
		const h1, h2 = "10.9.0.2", "10.9.0.3"
		for from, to := range map[string]string{"TCP download::1": "TCP upload BE " + h1, "TCP download::2": "TCP upload BE " + h2,
			"Ping (ms) ICMP": "Ping (ms) ICMP " + h1, "TCP download sum": "TCP upload sum", "TCP download avg": "TCP upload avg"} {
			rename(results, from, to)
			rename(raw, from, to)
			rename(sm, from, to)
		}
		// The second host's ping: the first's, 3 ms later on the way back.
		var grid2 []any
		for _, v := range results["Ping (ms) ICMP "+h1].([]any) {
			if f, ok := v.(float64); ok {
				v = f + 3
			}
			grid2 = append(grid2, v)
		}
		results["Ping (ms) ICMP "+h2] = grid2
		var raw2 []any
		for _, r := range raw["Ping (ms) ICMP "+h1].([]any) {
			c := map[string]any{}
			for k, v := range r.(map[string]any) {
				c[k] = v
			}
			if f, ok := c["val"].(float64); ok {
				c["val"], c["t"] = f+3, c["t"].(float64)+0.003
			}
			raw2 = append(raw2, c)
		}
		raw["Ping (ms) ICMP "+h2] = raw2
		pm := map[string]any{}
		for k, v := range sm["Ping (ms) ICMP "+h1].(map[string]any) {
			pm[k] = v
		}
		pm["MEAN_VALUE"] = pm["MEAN_VALUE"].(float64) + 3
		sm["Ping (ms) ICMP "+h2] = pm
		// flent's fairness and ping average runners, on the grid.
		a, b := results["TCP upload BE "+h1].([]any), results["TCP upload BE "+h2].([]any)
		p1 := results["Ping (ms) ICMP "+h1].([]any)
		var fair, pavg []any
		for k := range a {
			var vs []float64
			for _, v := range []any{a[k], b[k]} {
				if f, ok := v.(float64); ok {
					vs = append(vs, f)
				}
			}
			sum, sq := 0.0, 0.0
			for _, v := range vs {
				sum, sq = sum+v, sq+v*v
			}
			if len(vs) == 0 || sq == 0 {
				fair = append(fair, nil)
			} else {
				fair = append(fair, sum*sum/(float64(len(vs))*sq))
			}
			x, ok1 := p1[k].(float64)
			y, ok2 := grid2[k].(float64)
			if ok1 && ok2 {
				pavg = append(pavg, (x+y)/2)
			} else {
				pavg = append(pavg, nil)
			}
		}
		results["TCP upload fairness"], raw["TCP upload fairness"] = fair, []any{}
		results["Ping (ms) avg"], raw["Ping (ms) avg"] = pavg, []any{}
		md["NAME"], md["HOSTS"] = "rtt_fair_up", []any{h1, h2}
		run := holdToFlent(t, "rtt_fair_up", d, &[2]float64{1, -1}, &[2]float64{0.5, 4}, &[2]float64{2, 0})
		for _, se := range run.Series {
			if se.Name == "TCP upload fairness" && (se.Kind != KindFlent || se.Units != "Idx") {
				t.Errorf("the fairness index read as %+v, not a series of its own in Idx", se)
			}
		}
	})
	t.Run("socket stats", func(t *testing.T) {
		// flent --socket-stats: the ss runner is a child of a netperf flow's; its
		// records join the flow's raw values ({t, tcp_cwnd, tcp_rtt, ...}, no val),
		// sorted by time, and its results are the flow's sub-series on the grid.
		d := readFlentJSON(t, "testdata/tcp_2down.netperf-raw.flent.gz")
		results, raw := d["results"].(map[string]any), d["raw_values"].(map[string]any)
		x := d["x_values"].([]any)
		md := d["metadata"].(map[string]any)
		t0, err := parseTime(md["T0"].(string))
		if err != nil {
			t.Fatal(err)
		}
		flow := raw["TCP download::1"].([]any)
		var cwnd, rtt []any
		for k, xv := range x {
			at := flentUnix(t0) + xv.(float64) + 0.07
			c, r := float64(10+k%7), 5+0.3*float64(k%11)
			flow = append(flow, map[string]any{"t": at, "tcp_cwnd": c, "tcp_rtt": r, "tcp_rtt_var": r / 4})
			if k == 0 {
				cwnd, rtt = append(cwnd, nil), append(rtt, nil)
				continue
			}
			cwnd, rtt = append(cwnd, c-0.5), append(rtt, r+0.1)
		}
		sort.Slice(flow, func(i, j int) bool {
			return flow[i].(map[string]any)["t"].(float64) < flow[j].(map[string]any)["t"].(float64)
		})
		raw["TCP download::1"] = flow
		results["TCP download::1::tcp_cwnd"], results["TCP download::1::tcp_rtt"] = cwnd, rtt
		holdToFlent(t, "socket-stats", d, &[2]float64{1, -1}, &[2]float64{0.5, 4})
	})
	// flent 1.0's socket stats (rrul_be with --socket-stats, test-rrul.flent.gz of
	// flent's own unit tests): each upload flow's "::tcp_cwnd" and "::tcp_rtt" have
	// raw values of their own ({t, val}, a NullRunner's), "::tcp_rtt_var" the grid
	// only, and their names are rrul's flows' pattern ("TCP upload BE2::tcp_cwnd").
	// Read as flows they were summed into "TCP upload sum" (cwnd and rtt added to
	// Mbit/s) and printed in Mbits/s: they are rows of their own, in no unit, as
	// flent prints them, and the sum and average are of the flows alone.
	t.Run("socket stats with raw values of their own", func(t *testing.T) {
		d := readFlentJSON(t, "testdata/recorded/rrul_be.flent.gz")
		md := d["metadata"].(map[string]any)
		results, raw, sm := d["results"].(map[string]any), d["raw_values"].(map[string]any), md["SERIES_META"].(map[string]any)
		t0, err := parseTime(md["T0"].(string))
		if err != nil {
			t.Fatal(err)
		}
		flows := []string{"TCP upload BE", "TCP upload BE2", "TCP upload BE3", "TCP upload BE4"}
		for i, flow := range flows {
			var cwnd, rtt, rttVar, cwndRaw, rttRaw []any
			for k, xv := range d["x_values"].([]any) {
				if k < 3 {
					cwnd, rtt, rttVar = append(cwnd, nil), append(rtt, nil), append(rttVar, nil)
					continue
				}
				c, r := float64(10+(k*(i+1))%120), 50+2.5*float64((k+i)%100)
				cwnd, rtt, rttVar = append(cwnd, c), append(rtt, r), append(rttVar, r/8)
				at := flentUnix(t0) + xv.(float64) + 0.03
				cwndRaw = append(cwndRaw, map[string]any{"t": at, "val": c})
				rttRaw = append(rttRaw, map[string]any{"t": at, "val": r})
			}
			for key, v := range map[string][]any{"tcp_cwnd": cwnd, "tcp_rtt": rtt, "tcp_rtt_var": rttVar} {
				results[flow+"::"+key] = v
				sm[flow+"::"+key] = map[string]any{"IDX": float64(40 + i), "RUNNER": "NullRunner"}
			}
			raw[flow+"::tcp_cwnd"], raw[flow+"::tcp_rtt"] = cwndRaw, rttRaw
		}
		run := holdToFlent(t, "socket-stats-own-raw", d, &[2]float64{1, -1}, &[2]float64{2, 0})
		for _, se := range run.Series {
			if strings.Contains(se.Name, "::tcp_") && (se.Kind != KindFlent || se.Units != "") {
				t.Errorf("%s read as %+v, not a series of its own in no unit", se.Name, se)
			}
		}
		for _, g := range report.Throughput(run) {
			if strings.Contains(g.Name, "::") {
				t.Errorf("%s is among the throughput series (the sums' members and the panels')", g.Name)
			}
		}
		aggregatesOfGrid(t, d, run, "upload", flows)
	})
	// The files flent 0.11 and netperf-wrapper wrote (2015: flent's
	// unit tests' test-rrul-icmp, test-rtt-fair, test-voip-rrul) stamp TIME and T0
	// in the local time of the machine, with no zone. flent 2.1.1 guesses the zone
	// as the whole hours that bring TIME nearest to the earliest raw timestamp, and
	// moves TIME and T0 by it: its header says the time so moved, and its t0 is
	// where the raw values start. Read as UTC, T0 was hours after every probe and
	// the loaded ping rows were empty. Built from a recorded rrul_icmp, its times
	// written as a clock 2 h east, 5 h west and 5:30 east of UTC would have. The
	// last flent moves by 5 whole hours: its t0 is then 30 minutes after every
	// raw value, and the run is held to flent without a cut only (a cut leaves
	// no raw ping, and flent falls back to the ping's grid, which a ping read
	// from its replies does not keep).
	for _, zone := range []struct {
		name  string
		shift time.Duration
		same  bool // whole hours: the run as it was recorded
	}{{"CEST", 2 * time.Hour, true}, {"EST", -5 * time.Hour, true}, {"IST", 5*time.Hour + 30*time.Minute, false}} {
		t.Run("TIME and T0 in local time, "+zone.name, func(t *testing.T) {
			const recorded = "testdata/recorded/rrul_icmp.flent.gz"
			d := readFlentJSON(t, recorded)
			md := d["metadata"].(map[string]any)
			for _, key := range []string{"TIME", "T0"} {
				at, err := parseTime(md[key].(string))
				if err != nil {
					t.Fatal(err)
				}
				md[key] = at.Add(zone.shift).Format("2006-01-02T15:04:05.000000")
			}
			d["version"] = 2
			cuts := []*[2]float64{{1, -1}, {2, 0}}
			if !zone.same {
				cuts = nil
			}
			run := holdToFlent(t, "naive-"+zone.name, d, cuts...)
			_, out, err := flentsummary.Run(filepath.Join(dir, "naive-"+zone.name+".flent.gz"))
			if err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(`test run from (\S+ \S+)`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no time in flent's header:\n%s", out)
			}
			if ours := run.Metadata.StartTime.Format("2006-01-02 15:04:05.000000"); ours != m[1] {
				t.Errorf("the run's time is %s, flent's header %s", ours, m[1])
			}
			orig, err := Read(recorded)
			if err != nil {
				t.Fatal(err)
			}
			ours, want := rowsByName(report.Summarize(run)), rowsByName(report.Summarize(orig))
			for _, name := range []string{"Ping (ms) ICMP loaded", "Ping (ms) avg loaded"} {
				if zone.same && ours[name].Points == 0 {
					t.Errorf("%s: no points", name)
				}
				if zone.same && (ours[name].Points != want[name].Points || ours[name].Median != want[name].Median) {
					t.Errorf("%s: %d points, median %v; recorded with a zone: %d, %v", name, ours[name].Points, ours[name].Median, want[name].Points, want[name].Median)
				}
			}
			if zone.same && run.Metadata.T0 != orig.Metadata.T0 {
				t.Errorf("t0 %.6f, recorded with a zone %.6f", run.Metadata.T0, orig.Metadata.T0)
			}
		})
	}
	// flent 1.0's tcp_nup (test-tcp_nup.flent.gz of flent's unit tests) has
	// x_values 2.2 s past its TOTAL_LENGTH with its flows still sending there, and
	// flent's sum and average are over all of them: so are ours (the flows' rows
	// are their raw values either way), while a cut still counts back from
	// TOTAL_LENGTH. Built from a recorded tcp_nup whose TOTAL_LENGTH is made 12 s,
	// 3 s before its flows end.
	t.Run("x_values past TOTAL_LENGTH", func(t *testing.T) {
		d := readFlentJSON(t, "testdata/recorded/tcp_nup.flent.gz")
		md := d["metadata"].(map[string]any)
		md["TOTAL_LENGTH"] = 12.0
		run := holdToFlent(t, "grid-past-total", d, &[2]float64{1, -1}, &[2]float64{2, 0}, &[2]float64{3, 19})
		aggregatesOfGrid(t, d, run, "upload", []string{"TCP upload::1", "TCP upload::2", "TCP upload::3", "TCP upload::4"})
	})
	// Older formats, as flent 2.1.1 converts them on loading: version 1 with its
	// raw values in SERIES_META and with none (flent makes them of the grid), and
	// version 3 with qdisc drops counted since the start.
	t.Run("version 1, raw values in SERIES_META", func(t *testing.T) {
		d := readFlentJSON(t, "testdata/tcp_2down.netperf-raw.flent.gz")
		sm := d["metadata"].(map[string]any)["SERIES_META"].(map[string]any)
		for name, raw := range d["raw_values"].(map[string]any) {
			if m, ok := sm[name].(map[string]any); ok {
				m["RAW_VALUES"] = raw
			}
		}
		delete(d, "raw_values")
		delete(d, "version")
		holdToFlent(t, "v1-meta", d, &[2]float64{1, -1}, &[2]float64{0.5, 4})
	})
	t.Run("version 1, no raw values", func(t *testing.T) {
		d := readFlentJSON(t, "testdata/tcp_2down.netperf-raw.flent.gz")
		delete(d, "raw_values")
		delete(d, "version")
		holdToFlent(t, "v1-grid", d, &[2]float64{1, -1}, &[2]float64{0.5, 4})
	})
	t.Run("version 3, drops counted since the start", func(t *testing.T) {
		d := readFlentJSON(t, "testdata/recorded/qdisc-stats.flent.gz")
		total := 0.0
		for k, r := range d["raw_values"].(map[string]any)["qdisc-stats"].([]any) {
			total += float64(k%4) * 2
			r.(map[string]any)["dropped"] = total
		}
		d["version"] = 3
		holdToFlent(t, "v3-drops", d, &[2]float64{1, -1})
	})
	t.Run("voip D-ITG", func(t *testing.T) {
		d := readFlentJSON(t, "testdata/recorded/voip.flent.gz")
		results, raw := d["results"].(map[string]any), d["raw_values"].(map[string]any)
		delete(results, "VoIP::rtt") // irtt's; D-ITG measures one way
		var ditg []any
		for i, r := range raw["VoIP"].([]any) {
			r := r.(map[string]any)
			if _, ok := r["val"].(float64); !ok {
				continue
			}
			ditg = append(ditg, map[string]any{"t": r["t"], "val": r["owd_up"], "seq": float64(i), "size": 172.0})
		}
		raw["VoIP"] = ditg
		holdToFlent(t, "voip-ditg", d, &[2]float64{1, -1}, &[2]float64{3, 7})
	})
	// flent's http test with two URL lists: http-getter's runner, a RegexpRunner,
	// writes {t, val} per fetch (the fetch time, seconds made ms), its MEAN_VALUE,
	// MIN_VALUE and MAX_VALUE from the getter's closing line, and one series per
	// list, "HTTP latency::1" and "::2" (http.inc). Built from the recorded ping
	// test's two pings, their times made fetch times (40 ms + 3x).
	t.Run("http, two URL lists", func(t *testing.T) {
		d := readFlentJSON(t, "testdata/recorded/ping.flent.gz")
		results, raw := d["results"].(map[string]any), d["raw_values"].(map[string]any)
		md := d["metadata"].(map[string]any)
		sm := md["SERIES_META"].(map[string]any)
		fetch := func(v any) any {
			if f, ok := v.(float64); ok {
				return 40 + 3*f
			}
			return v
		}
		newResults, newRaw, newMeta := map[string]any{}, map[string]any{}, map[string]any{}
		for from, to := range map[string]string{"Ping (ms) ICMP": "HTTP latency::1", "Ping (ms) UDP": "HTTP latency::2"} {
			var grid, recs []any
			for _, v := range results[from].([]any) {
				grid = append(grid, fetch(v))
			}
			for _, r := range raw[from].([]any) {
				r := r.(map[string]any)
				if _, ok := r["val"].(float64); ok {
					recs = append(recs, map[string]any{"t": r["t"], "val": fetch(r["val"])})
				}
			}
			m := sm[from].(map[string]any)
			newMeta[to] = map[string]any{"UNITS": "ms", "RUNNER": "HttpGetterRunner", "IDX": m["IDX"],
				"COMMAND":    "http-getter -i 200 -l 10 -t 10000 -n 4 http://198.18.250.2/filelist.txt",
				"MEAN_VALUE": fetch(m["MEAN_VALUE"]), "MIN_VALUE": fetch(m["MIN_VALUE"]), "MAX_VALUE": fetch(m["MAX_VALUE"])}
			newResults[to], newRaw[to] = grid, recs
		}
		d["results"], d["raw_values"], md["SERIES_META"] = newResults, newRaw, newMeta
		md["NAME"], md["TITLE"] = "http", "http"
		md["HTTP_GETTER_URLLIST"] = []any{"http://198.18.250.2/filelist.txt", "http://198.18.250.2/other.txt"}
		run := holdToFlent(t, "http", d, &[2]float64{1, -1}, &[2]float64{2, 0}, &[2]float64{3.3, 7.1})
		latency := 0
		for _, se := range run.Series {
			if strings.HasPrefix(se.Name, "HTTP latency") {
				latency++
				if se.Kind != KindFlent || se.Units != "ms" {
					t.Errorf("%s read as %+v, not a latency series of its own in ms", se.Name, se)
				}
			}
		}
		if latency != 2 {
			t.Errorf("%d HTTP latency series read, want 2 (one per URL list)", latency)
		}
	})
	// flent's ping test where irtt is missing: its udp_rtt runner takes netperf's
	// UDP_RR instead, whose interim results are transactions per second over each
	// interval, made ms per transaction ({dur, t, val}), and its MEAN_VALUE is
	// netperf's mean rate made ms (1000 / THROUGHPUT), not the mean of the values.
	// Built from the recorded ping test: each irtt reply becomes an interval of
	// back-to-back transactions at its RTT.
	t.Run("ping, UDP by netperf UDP_RR", func(t *testing.T) {
		d := readFlentJSON(t, "testdata/recorded/ping.flent.gz")
		raw := d["raw_values"].(map[string]any)
		m := d["metadata"].(map[string]any)["SERIES_META"].(map[string]any)["Ping (ms) UDP"].(map[string]any)
		var recs []any
		prev, secs, transactions := 0.0, 0.0, 0.0
		for _, r := range raw["Ping (ms) UDP"].([]any) {
			r := r.(map[string]any)
			v, ok := r["val"].(float64)
			if !ok {
				continue // a lost probe: the RR stalls, and its interval runs on
			}
			at, dur := r["t"].(float64), 0.2
			if prev != 0 {
				dur = at - prev
			}
			prev = at
			recs = append(recs, map[string]any{"dur": dur, "t": at, "val": v})
			secs, transactions = secs+dur, transactions+dur*1000/v
		}
		raw["Ping (ms) UDP"] = recs
		for k := range m {
			if k != "IDX" && k != "UNITS" {
				delete(m, k)
			}
		}
		m["RUNNER"], m["MEAN_VALUE"], m["ELAPSED_TIME"] = "NetperfDemoRunner", 1000/(transactions/secs), 10.0
		m["COMMAND"] = "netperf -P 0 -v 0 -D -0.20 -4 -H 198.18.250.2 -t UDP_RR -l 10"
		holdToFlent(t, "ping-udp-rr", d, &[2]float64{1, -1}, &[2]float64{2, 0}, &[2]float64{3.3, 7.1})
	})
}

func rowsByName(s report.Summary) map[string]report.Row {
	out := map[string]report.Row{}
	for _, r := range s.Rows {
		out[r.Name] = r
	}
	return out
}

// aggregatesOfGrid holds the medians of our sum and average of a direction's
// flows to those of the sum and average of the flows' values on the file's grid,
// point by point over every x value, that flent prints N/A for: a median of an
// aggregate is the aggregate's.
func aggregatesOfGrid(t *testing.T, d map[string]any, run *datafile.Run, dir string, flows []string) {
	t.Helper()
	results := d["results"].(map[string]any)
	var sums, avgs []float64
	for k := range d["x_values"].([]any) {
		sum, n := 0.0, 0
		for _, f := range flows {
			if v, ok := results[f].([]any)[k].(float64); ok {
				sum, n = sum+v, n+1
			}
		}
		if n > 0 {
			sums, avgs = append(sums, sum), append(avgs, sum/float64(n))
		}
	}
	rows := rowsByName(report.Summarize(run))
	for stat, xs := range map[string][]float64{"sum": sums, "avg": avgs} {
		name := "TCP " + dir + " " + stat
		if got, want := rows[name].Median, report.Median(xs); !(math.Abs(got-want) <= 1e-9*math.Abs(want)) {
			t.Errorf("%s: median %v, the median of the flows' %s on the grid %v", name, got, stat, want)
		}
	}
}
