package datafile_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/fuzzbound"
	"github.com/bloatbench/bloatbench/report"
)

// seedFile writes a run as the controller does and returns the file's bytes,
// decompressed: the fuzzer mutates JSON lines, not deflate blocks.
func seedFile(f *testing.F, end error, cut int) []byte {
	f.Helper()
	path := filepath.Join(f.TempDir(), "seed"+datafile.Ext)
	w, err := datafile.Create(path)
	if err != nil {
		f.Fatal(err)
	}
	start := time.Date(2026, 11, 29, 18, 41, 47, 0, time.UTC)
	t0 := datafile.Unix(start)
	m := datafile.Metadata{Test: "tcp_2down", Title: "seed", StartTime: start, T0: t0, Length: 1, Delay: 0.5, Step: 0.2,
		TotalLength: 2, Parameters: map[string]string{"download_streams": "2"},
		Hosts: []datafile.Host{{Role: "server", Name: "server", SSH: "root@198.19.0.6", TestIP: "198.18.0.2"}},
		Setup: &datafile.Setup{Name: "fq_codel", Title: "FQ_CODEL", Source: "built-in",
			Devices: []datafile.SetupDevice{{Host: "server", Dev: "test0", Commands: []string{"tc qdisc replace dev test0 root handle 1: fq_codel"},
				ReadBack: json.RawMessage(`{"qdiscs":[{"kind":"fq_codel"}]}`)}}}}
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(w.Header(m))
	series := []datafile.Series{
		{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms", Host: "client", Target: "198.18.0.2"},
		{Name: "TCP download::1", Kind: datafile.KindTCP, Units: "Mbits/s", Host: "client", Direction: "download", Flow: 1, CC: "cubic"},
		{Name: "TCP download::2", Kind: datafile.KindTCP, Units: "Mbits/s", Host: "client", Direction: "download", Flow: 2},
		{Name: "qdisc server:test0 root drops", Kind: datafile.KindQdisc, Units: "pkts", Host: "server", Counter: true},
		{Name: "qdisc server:test0 root backlog", Kind: datafile.KindQdisc, Units: "bytes", Host: "server"},
		{Name: "bql server:test0 tx-0 inflight", Kind: datafile.KindBQL, Units: "bytes", Host: "server"},
	}
	for _, s := range series {
		must(w.AddSeries(s))
	}
	// Small, so that the fuzzer's minimising of what it finds stays quick.
	for k := 0; k <= 10; k++ {
		tk := t0 + float64(k)*0.2
		lost := k == 7
		must(w.Append(series[0].Name, []datafile.Sample{{T: tk + 0.01, V: 1 + float64(k%5), Seq: k, Lost: lost}}))
		if k >= 3 && k <= 8 {
			must(w.Append(series[1].Name, []datafile.Sample{{T: tk, V: 40, Dur: 0.2, Bytes: 1000000}}))
			must(w.Append(series[2].Name, []datafile.Sample{{T: tk + 0.003, V: 50, Dur: 0.2, Bytes: 1250000}}))
		}
		must(w.Append(series[3].Name, []datafile.Sample{{T: tk, V: float64(k * k)}}))
		must(w.Append(series[4].Name, []datafile.Sample{{T: tk, V: float64(k * 1514)}}))
		must(w.Append(series[5].Name, []datafile.Sample{{T: tk, V: 3028}}))
		if k == 5 {
			must(w.Flush())
		}
	}
	must(w.Event(datafile.Event{T: t0 + 1, Host: "server", Level: "warning", Message: "seed"}))
	must(w.State(datafile.State{Phase: "post", T: t0 + 2, Host: "server", Dev: "test0", TC: json.RawMessage(`[{"kind":"fq_codel","drops":3}]`)}))
	must(w.Close(end))
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	if cut > 0 {
		b = b[:len(b)-cut]
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		f.Fatal(err)
	}
	var plain bytes.Buffer
	plain.ReadFrom(zr) // a cut file ends in an error, after what could be read
	return plain.Bytes()
}

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// readBudget bounds what Decode costs: allocation a multiple of the JSON it reads
// (decompressed) and a constant for its buffers. reportBudget bounds what the
// report verbs' arithmetic costs for a run that read (a summary, and compare's
// summary with a cut): a multiple of the JSON, and of the values of the step grid
// the run declares (datafile.GridPoints x datafile.GridValues, float64 each), and a
// constant. Times are checked only while fuzzing (fuzzbound.Fuzzing): 2 s, and so
// much per byte and grid value.
//
// Measured with FUZZBOUND_LOG=1, which logs every input's usage, over the seeds,
// the committed corpus, the hostile classes (hostileSeeds) and a dozen shapes made
// for it (grids of up to datafile.MaxGridValues values: flows with a sample
// covering the whole grid, 1,000 flows in 50 pairs, pings and flows of 200,000
// samples, pings in pairs, aggregates), built with coverage counters in every
// package (-gcflags=all=-d=libfuzzer: slower than go test -fuzz, which leaves out
// the runtime), the worst were: reading, 37 bytes allocated a JSON byte (samples
// "{}" kept, 48 bytes each from 3 of JSON), 0.7 MB for small files, 138 ns a byte
// (200,000 flow samples); reporting, 39 bytes a JSON byte (the same "{}"), 174
// bytes a grid value (1,000 flows of a sample each covering the grid, in 50 pairs,
// and an aggregate: every flow, pair sum and average on the grid, then a copy of
// each for its median and another for its 99th percentile, twice over for
// compare), 0.19 MB for small files, 155 ns a JSON byte (200,000 pings) and 500 ns
// a grid value (10 flows covering a grid of 100,000 points, in 2 pairs, and an
// aggregate). The budgets are 4 times those or more (times with their 2 s), and
// each has a constant of 4 MiB for the span caches (see fuzzbound's allocsMetric). Left
// out: the time of those 1,000 flows in 50 pairs, 5.2 s for 577,653 grid values,
// which is report.Aggregates' (see hostileSeeds).
var (
	readBudget = fuzzbound.Budget{PerInputByte: 160, Constant: 4 << 20,
		Time: 2 * time.Second, NsPerInputByte: 600}
	reportBudget = fuzzbound.Budget{PerInputByte: 160, PerGridValue: 88 * 8, Constant: 4 << 20,
		Time: 2 * time.Second, NsPerInputByte: 700, NsPerGridValue: 2000}
)

// FuzzDecode feeds data files to Decode: JSON lines, gzip'd by the target, or a
// gzip stream as it is. Whatever the bytes: no panic, and reading within
// readBudget; and a run that reads keeps the reader's limits, writes back (with
// the Writer) to a file that reads the same, and summarises, with and without a
// cut, to finite numbers within reportBudget, whatever grid it declares.
func FuzzDecode(f *testing.F) {
	f.Add(seedFile(f, nil, 0))
	f.Add(seedFile(f, errors.New("agent on host server exited"), 0))
	f.Add(seedFile(f, nil, 10))
	f.Add(gzipped(seedFile(f, nil, 0)))
	f.Add([]byte(`{"type":"header","format":"bloatbench-data","version":1,"metadata":{"t0":0,"step":0.2,"total_length":1}}` + "\n" +
		`{"type":"series","series":{"name":"x","kind":"ping"}}` + "\n" + `{"type":"samples","name":"x","samples":[{"t":0.5,"v":1e30},{"t":0.5,"v":-1e30}]}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, size := data, len(data)
		if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
			size = decompressedSize(data)
		} else {
			in = gzipped(data)
		}
		var run *datafile.Run
		var err error
		u := fuzzbound.Measure(func() { run, err = datafile.Decode(bytes.NewReader(in)) })
		if fuzzbound.Verbose() {
			t.Logf("read: %d bytes, %v", size, u)
		}
		if err := readBudget.Check(u, size, 0); err != nil {
			t.Fatalf("reading %d bytes of JSON: %v", size, err)
		}
		if err != nil {
			return
		}
		m := run.Metadata
		if err := datafile.CheckGrid("step", m.Step, "total_length", m.TotalLength, 0); err != nil {
			t.Fatalf("a grid the reader should refuse: %v", err)
		}
		for name, ss := range run.Samples {
			for i, s := range ss {
				if err := datafile.CheckSample(name, s); err != nil {
					t.Fatalf("sample %d let through: %v", i, err)
				}
			}
		}
		checkRoundTrip(t, run)
		grid := datafile.GridPoints(m.TotalLength, m.Step) * float64(datafile.GridValues(run))
		var sum report.Summary
		u = fuzzbound.Measure(func() {
			sum = report.Summarize(run)
			report.CompareInput(run, report.Options{Cut: &[2]float64{0.5, m.TotalLength / 2}})
		})
		if fuzzbound.Verbose() {
			t.Logf("report: %d bytes, %.0f grid values, %v", size, grid, u)
		}
		if err := reportBudget.Check(u, size, grid); err != nil {
			t.Fatalf("summarising a run of %d bytes of JSON, %d series and %.0f grid values: %v", size, len(run.Series), grid, err)
		}
		for _, r := range sum.Rows {
			for _, v := range []float64{r.Avg, r.Median, r.P99} {
				if math.IsInf(v, 0) {
					t.Fatalf("row %q: %v", r.Name, v)
				}
			}
		}
	})
}

// decompressedSize is the bytes a gzip stream holds, as Decode reads them: every
// member up to the first damage, at most datafile.MaxDecompressed and one.
func decompressedSize(b []byte) int {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return 0
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(zr, datafile.MaxDecompressed+1))
	return int(n)
}

// checkRoundTrip writes run with the Writer, as a run does, and reads it back.
func checkRoundTrip(t *testing.T, run *datafile.Run) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "back"+datafile.Ext)
	w, err := datafile.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Header(run.Metadata); err != nil {
		t.Fatalf("a header that read does not write: %v", err)
	}
	for _, s := range run.Series {
		if err := w.AddSeries(s); err != nil {
			t.Fatal(err)
		}
	}
	for name, ss := range run.Samples {
		if err := w.Append(name, ss); err != nil {
			t.Fatalf("samples that read do not write: %v", err)
		}
	}
	for _, e := range run.Events {
		if err := w.Event(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range run.States {
		if err := w.State(s); err != nil {
			t.Fatal(err)
		}
	}
	var end error
	if run.Incomplete {
		end = errors.New(run.Error)
	}
	if err := w.Close(end); err != nil {
		t.Fatal(err)
	}
	back, err := datafile.Read(path)
	if err != nil {
		t.Fatalf("written back, the run does not read: %v", err)
	}
	a, b := canonical(t, run), canonical(t, back)
	if a != b {
		t.Fatalf("written back and read, the run changed:\n%s\n%s", a, b)
	}
}

// canonical is a run as JSON, for comparing: series of no samples and the end's
// message of a complete run (which the Writer does not keep) left out.
func canonical(t *testing.T, run *datafile.Run) string {
	t.Helper()
	c := *run
	c.Path = ""
	c.Samples = map[string][]datafile.Sample{}
	for k, v := range run.Samples {
		if len(v) > 0 {
			c.Samples[k] = v
		}
	}
	if !c.Incomplete {
		c.Error = ""
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostileSeeds are the crafted files of e2e/testdata/hostilegen, one per class,
// scaled down so that each reads and summarises in well under a second, with the
// class kept: a grid far larger than the samples on it, aggregates, samples and
// series of nothing, replies all wanting one step, a record past the record cap,
// control bytes and tags in texts; and one of its own, series in many pairs with an
// aggregate. Each is a file of the target's corpus,
// testdata/fuzz/FuzzDecode/hostile-NAME, so that plain go test runs them and the
// fuzzer starts from them; those over 64 KB are gzip'd (the target reads a gzip
// stream as it is).
//
// Two classes are kept below the size where they pass the budgets, because
// report.Aggregates costs more than linear in them: aggregates over "*", each
// taking in those before it (50 of them over a flow at every point of a 14 s run
// allocate 2.8 MB, 750 bytes a grid value; 1,000 on 100 s, 6 GB and 10 s), and
// series in pairs of their own (an aggregate sorts every series name again for
// each pair: 500 pairs take 0.9 s, 2,000 take 21 s and 220 MB, from 140 KB).
func hostileSeeds() map[string][]byte {
	const t0 = 1764700000.0
	type w = strings.Builder
	line := func(b *w, v any) {
		j, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	header := func(b *w, t0, total float64, extra map[string]any) {
		md := map[string]any{"test": "tcp_4down", "title": "crafted", "t0": t0, "length": math.Max(total-4, 0),
			"delay": 2, "step": 0.2, "total_length": total,
			"hosts": []map[string]any{{"role": "client", "name": "client", "hostname": "client"}}}
		maps.Copy(md, extra)
		line(b, map[string]any{"type": "header", "format": "bloatbench-data", "version": 1, "metadata": md})
	}
	end := func(b *w) {
		line(b, map[string]any{"type": "end", "end": map[string]any{"t": t0 + 10, "complete": true}})
	}
	series := func(b *w, name, kind, units string) {
		line(b, map[string]any{"type": "series", "series": map[string]any{"name": name, "kind": kind, "units": units, "host": "client"}})
	}
	// n cpu series on a grid of total seconds, one sample each, and an aggregate
	// over them: the grid is the reports' cost, the file a few KB.
	cpuSeries := func(n int, total float64) []byte {
		var b w
		header(&b, t0, total, map[string]any{"aggregates": []map[string]any{{"name": "CPU avg", "op": "avg", "series": "cpu *"}}})
		for i := range n {
			series(&b, fmt.Sprintf("cpu %d", i), "cpu", "%")
			line(&b, map[string]any{"type": "samples", "name": fmt.Sprintf("cpu %d", i), "samples": []map[string]any{{"t": t0 + 1, "v": 50, "dur": 0.2}}})
		}
		end(&b)
		return []byte(b.String())
	}
	// n aggregates over every series (and the aggregates before each) of a run of
	// one flow on a grid of total seconds.
	aggregates := func(n int, total float64) []byte {
		var aggs []map[string]any
		for i := range n {
			aggs = append(aggs, map[string]any{"name": fmt.Sprintf("agg %d", i), "op": "sum", "series": "*"})
		}
		var b w
		header(&b, t0, total, map[string]any{"aggregates": aggs})
		series(&b, "TCP download::1", "tcp", "Mbits/s")
		line(&b, map[string]any{"type": "samples", "name": "TCP download::1", "samples": []map[string]any{{"t": t0 + 3, "v": 90, "dur": 0.2}}})
		end(&b)
		return []byte(b.String())
	}
	// n series of another kind, each in a pair of its own, and an aggregate over
	// them: the aggregate is computed for every pair, over 0.4 s.
	pairs := func(n int) []byte {
		var b w
		header(&b, t0, 0.4, map[string]any{"aggregates": []map[string]any{{"name": "all", "op": "sum", "series": "*"}}})
		for i := range n {
			line(&b, map[string]any{"type": "series", "series": map[string]any{"name": fmt.Sprintf("S %d", i), "kind": "cpu", "pair": fmt.Sprint(i + 1)}})
		}
		end(&b)
		return []byte(b.String())
	}
	// n samples "{}" in one record: at t 0, outside a run at t0 (left out) or in
	// one at 0 (kept, 48 bytes each from 3 bytes of JSON).
	emptySamples := func(t0 float64, n int) []byte {
		var b w
		header(&b, t0, 14, nil)
		series(&b, "Ping (ms) ICMP", "ping", "ms")
		b.WriteString(`{"type":"samples","name":"Ping (ms) ICMP","samples":[{}` + strings.Repeat(",{}", n-1) + "]}\n")
		end(&b)
		return []byte(b.String())
	}
	emptySeries := func(n int) []byte {
		var b w
		header(&b, t0, 14, nil)
		b.WriteString(strings.Repeat(`{"type":"series","series":{}}`+"\n", n))
		end(&b)
		return []byte(b.String())
	}
	pingsAtT0 := func(n int) []byte {
		var b w
		header(&b, t0, 14, nil)
		series(&b, "Ping (ms) ICMP", "ping", "ms")
		b.WriteString(`{"type":"samples","name":"Ping (ms) ICMP","samples":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"t":%v,"v":1}`, t0)
		}
		b.WriteString("]}\n")
		end(&b)
		return []byte(b.String())
	}
	flow := func(b *w, from, to int) {
		var ss []map[string]any
		for k := from; k <= to; k++ {
			ss = append(ss, map[string]any{"t": t0 + float64(k)*0.2, "v": 90.0, "dur": 0.2, "bytes": 2250000})
		}
		line(b, map[string]any{"type": "samples", "name": "TCP download::1", "samples": ss})
	}
	// An event longer than a record may be (MaxRecord), between a flow's samples.
	longEvent := func() []byte {
		var b w
		header(&b, t0, 14, nil)
		series(&b, "TCP download::1", "tcp", "Mbits/s")
		flow(&b, 1, 35)
		line(&b, map[string]any{"type": "event", "event": map[string]any{"t": t0 + 7, "level": "warning", "message": strings.Repeat("x", datafile.MaxRecord+1)}})
		flow(&b, 36, 70)
		end(&b)
		return []byte(b.String())
	}
	// A title and host name of an OSC 52 sequence (a terminal's clipboard), a bidi
	// override and HTML.
	osc52 := func() []byte {
		var b w
		header(&b, t0, 14, map[string]any{"title": "osc\x1b]52;c;ZXZpbA==\x07</title><script>alert(1)</script>", "hosts": []map[string]any{
			{"role": "client", "name": "client", "hostname": "evil\x1b]52;c;ZXZpbA==\x07\u202e<script>", "kernel": "6.18\x1b[2J"}}})
		series(&b, "TCP download::1", "tcp", "Mbits/s")
		flow(&b, 1, 70)
		end(&b)
		return []byte(b.String())
	}
	seeds := map[string][]byte{
		// hostilegen's: 200 series on 10 million points, refused (MaxGridValues)...
		"cpu-series-on-huge-grid": cpuSeries(200, 1_999_999.8),
		// ...and grids that read: 20 series on 50,001 points, and one series
		// with its aggregate on 2 million.
		"cpu-series-on-big-grid":     cpuSeries(20, 10_000),
		"cpu-series-on-long-grid":    cpuSeries(1, 399_999.8),
		"many-aggregates":            aggregates(5000, 1_999_999.8), // refused (MaxAggregates)
		"many-aggregates-read":       aggregates(3, 14),
		"many-pairs-aggregate":       pairs(100),
		"empty-samples-outside":      emptySamples(t0, 200_000),
		"empty-samples-kept":         emptySamples(0, 50_000),
		"empty-series":               emptySeries(5000),
		"pings-at-t0":                pingsAtT0(50_000),
		"long-event-mid-file":        longEvent(),
		"osc52-hostname-script-tags": osc52(),
	}
	for name, b := range seeds {
		if len(b) > 64<<10 {
			var z bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
			zw.Write(b)
			zw.Close()
			seeds[name] = z.Bytes()
		}
	}
	return seeds
}

// TestHostileSeeds keeps the corpus files of hostileSeeds what it makes:
// BLOATBENCH_WRITE_SEEDS=1 go test -run TestHostileSeeds writes them.
func TestHostileSeeds(t *testing.T) {
	fuzzbound.KeepSeeds(t, "testdata/fuzz/FuzzDecode", hostileSeeds())
}
