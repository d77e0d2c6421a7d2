package htmlreport

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/fuzzbound"
)

// pageBudget bounds what drawing a run costs: the page of it twice, as plot draws
// two files of one setup (each run's charts, and the charts across runs). Allocation is a multiple of the data file's JSON (decompressed), and of the
// values of the step grid the run declares (datafile.GridPoints x
// datafile.GridValues), and a constant (the page inlines ECharts, 1 MB, which the
// template copies). Times are checked only while fuzzing (fuzzbound.Fuzzing): 2 s,
// and so much per byte and grid value.
//
// Measured with FUZZBOUND_LOG=1, which logs every input's usage, over the seeds, the
// hostile classes (hostileSeeds) and the shapes datafile's FuzzDecode's budgets
// were measured on (up to 1.9 million grid values), built with coverage counters
// in every package (-gcflags=all=-d=libfuzzer: slower than go test -fuzz, which
// leaves out the runtime), the worst were 414 bytes and 3.4 µs a grid value (1,000
// flows of 501 points in 50 pairs, every point of every flow drawn: some 200 bytes
// a point for each of the two charts it is on), 13 bytes and 40 ns a JSON byte
// (50,000 pings), 2.6 MB for small files. The budget is 4 times that or more
// (times with their 2 s).
var pageBudget = fuzzbound.Budget{PerInputByte: 200, PerGridValue: 210 * 8, Constant: 12 << 20,
	Time: 2 * time.Second, NsPerInputByte: 500, NsPerGridValue: 14_000}

// FuzzReport feeds data files (JSON lines, gzip'd by the target, or a gzip stream
// as it is) to the page: whatever run reads, drawing it twice (as two runs of one
// setup) is within pageBudget and makes a page whose only scripts are the page's
// own, whatever texts the file carries.
func FuzzReport(f *testing.F) {
	for _, seed := range []func(*datafile.Writer, float64) error{nil, scriptTexts} {
		f.Add(seedFile(f, seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, size := data, len(data)
		if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
			size = decompressedSize(data)
		} else {
			in = gzipped(data)
		}
		run, err := datafile.Decode(bytes.NewReader(in))
		if err != nil {
			return
		}
		m := run.Metadata
		grid := datafile.GridPoints(m.TotalLength, m.Step) * float64(datafile.GridValues(run))
		var page pageScan
		u := fuzzbound.Measure(func() {
			r := RunOf(run)
			err = Write(&page, m.Title, []Run{r, r})
		})
		if fuzzbound.Verbose() {
			t.Logf("page: %d bytes, %.0f grid values, %v", size, grid, u)
		}
		if err := pageBudget.Check(u, size, grid); err != nil {
			t.Fatalf("drawing a run of %d bytes of JSON, %d series and %.0f grid values: %v", size, len(run.Series), grid, err)
		}
		if err != nil {
			t.Fatalf("a run that reads does not draw: %v", err)
		}
		if err := page.check(); err != nil {
			t.Fatal(err)
		}
	})
}

// pageScan is a page's writer that keeps nothing of it but counts, ignoring case,
// the tags that matter: a page of n charts has 1 + 2n script elements (ECharts;
// per chart its options and the call that draws them) in as many
// <div class="container"> as charts. A text of the file that reached the page
// unescaped as a script tag would be one more. (The page of a grid of millions of
// points is hundreds of MB: not kept.)
type pageScan struct {
	n     int64
	count [len(pageTags)]int
	at    [len(pageTags)]int // how much of each tag the bytes so far end in
}

// pageTags are what pageScan counts. None begins with a proper suffix of
// itself, so a mismatch can only restart a match at its first byte.
var pageTags = [...]string{"<script", "</script", `<div class="container">`}

func (p *pageScan) Write(b []byte) (int, error) {
	p.n += int64(len(b))
	for i := 0; i < len(b); i++ {
		if p.at == [len(pageTags)]int{} {
			// Every tag begins with '<': nothing is under way until the next one.
			j := bytes.IndexByte(b[i:], '<')
			if j < 0 {
				break
			}
			i += j
		}
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		for k, tag := range pageTags {
			switch {
			case c == tag[p.at[k]]:
				p.at[k]++
			case c == tag[0]:
				p.at[k] = 1
			default:
				p.at[k] = 0
			}
			if p.at[k] == len(tag) {
				p.count[k]++
				p.at[k] = 0
			}
		}
	}
	return len(b), nil
}

func (p *pageScan) check() error {
	charts := p.count[2]
	if open, end := p.count[0], p.count[1]; charts == 0 || open != 1+2*charts || end != open {
		return fmt.Errorf("a page of %d bytes and %d charts has %d '<script' and %d '</script' (ignoring case), want %d each: a text of the file is a tag on the page",
			p.n, charts, open, end, 1+2*charts)
	}
	return nil
}

// The scan counts tags across writes, whatever their case, and finds a page with
// a script too many.
func TestPageScan(t *testing.T) {
	var p pageScan
	for _, s := range []string{`<div class="container"><scr`, `ipt>x</SCRIPT>`, `<script>y</script><SCRIPT>`, `</script>`} {
		p.Write([]byte(s))
	}
	if err := p.check(); err != nil || p.count != [3]int{3, 3, 1} {
		t.Fatalf("counts %v: %v", p.count, err)
	}
	p.Write([]byte(`<sc<script>`))
	if err := p.check(); err == nil {
		t.Fatalf("a script too many passed (counts %v)", p.count)
	}
}

// seedFile writes a run as the controller does (a ping, two flows, the
// bottleneck's queue and a series of another kind) and returns the file's JSON,
// decompressed: the fuzzer mutates JSON lines, not deflate blocks. more, if not
// nil, adds to the run at t0.
func seedFile(f *testing.F, more func(*datafile.Writer, float64) error) []byte {
	f.Helper()
	path := f.TempDir() + "/seed" + datafile.Ext
	w, err := datafile.Create(path)
	if err != nil {
		f.Fatal(err)
	}
	start := time.Date(2026, 11, 29, 18, 41, 47, 0, time.UTC)
	t0 := datafile.Unix(start)
	m := datafile.Metadata{Test: "tcp_2down", Title: "seed", StartTime: start, T0: t0, Length: 1, Delay: 0.5, Step: 0.2, TotalLength: 2,
		Hosts: []datafile.Host{{Role: "server", Name: "server", TestIP: "198.18.0.2"}},
		Setup: &datafile.Setup{Name: "fq_codel", Title: "FQ_CODEL", Source: "built-in"}}
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(w.Header(m))
	series := []datafile.Series{
		{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms"},
		{Name: "TCP download::1", Kind: datafile.KindTCP, Units: "Mbits/s", Direction: "download", Flow: 1},
		{Name: "TCP download::2", Kind: datafile.KindTCP, Units: "Mbits/s", Direction: "download", Flow: 2},
		{Name: "qdisc server:test0 root drops", Kind: datafile.KindQdisc, Units: "pkts", Counter: true},
		{Name: "qdisc server:test0 root backlog", Kind: datafile.KindQdisc, Units: "bytes"},
		{Name: "UDP RR", Kind: "udp_rr", Units: "ms"},
	}
	for _, s := range series {
		must(w.AddSeries(s))
	}
	for k := 0; k <= 10; k++ {
		tk := t0 + float64(k)*0.2
		must(w.Append(series[0].Name, []datafile.Sample{{T: tk + 0.01, V: 1 + float64(k%5), Seq: k, Lost: k == 7}}))
		if k >= 3 && k <= 8 {
			must(w.Append(series[1].Name, []datafile.Sample{{T: tk, V: 40, Dur: 0.2}}))
			must(w.Append(series[2].Name, []datafile.Sample{{T: tk + 0.003, V: 50, Dur: 0.2}}))
		}
		must(w.Append(series[3].Name, []datafile.Sample{{T: tk, V: float64(k * k)}}))
		must(w.Append(series[4].Name, []datafile.Sample{{T: tk, V: float64(k * 1514)}}))
		must(w.Append(series[5].Name, []datafile.Sample{{T: tk, V: 0.3}}))
	}
	if more != nil {
		must(more(w, t0))
	}
	must(w.Close(nil))
	b, err := readGzip(path)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// scriptTexts adds series, units and an event whose texts are tags.
func scriptTexts(w *datafile.Writer, t0 float64) error {
	for _, s := range []datafile.Series{
		{Name: "Ping </script><script>alert(1)</script>", Kind: datafile.KindPing, Units: "ms"},
		{Name: "RR <SCRIPT>alert(2)", Kind: "<script>", Units: "</Script><script>alert(3)</script>"},
	} {
		if err := w.AddSeries(s); err != nil {
			return err
		}
		if err := w.Append(s.Name, []datafile.Sample{{T: t0 + 1, V: 1}}); err != nil {
			return err
		}
	}
	return w.Event(datafile.Event{T: t0 + 1, Level: "warning", Message: "<script>alert(4)</script>"})
}

func readGzip(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
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

// hostileSeeds are crafted data files for the page, scaled down so that each
// draws in well under a second: the title and a host name of tags and control
// bytes (setup titles, series names and units are the scriptTexts seed's), a
// flow whose one sample covers a long grid (every point of it drawn), cpu series
// on a long grid with an aggregate, and a ping of many replies at t0. Each is a
// file of the target's corpus, testdata/fuzz/FuzzReport/hostile-NAME; those over
// 64 KB gzip'd.
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
	header := func(b *w, total float64, extra map[string]any) {
		md := map[string]any{"test": "tcp_1down", "title": "crafted", "t0": t0, "length": total - 4, "delay": 2, "step": 0.2, "total_length": total,
			"hosts": []map[string]any{{"role": "client", "name": "client", "hostname": "client"}}}
		maps.Copy(md, extra)
		line(b, map[string]any{"type": "header", "format": "bloatbench-data", "version": 1, "metadata": md})
	}
	series := func(b *w, name, kind, units string) {
		line(b, map[string]any{"type": "series", "series": map[string]any{"name": name, "kind": kind, "units": units, "direction": "download"}})
	}
	samples := func(b *w, name string, ss ...map[string]any) {
		line(b, map[string]any{"type": "samples", "name": name, "samples": ss})
	}
	end := func(b *w) {
		line(b, map[string]any{"type": "end", "end": map[string]any{"t": t0 + 10, "complete": true}})
	}

	var title w
	header(&title, 14, map[string]any{"title": "</title><script>alert(1)</script>\x1b]52;c;ZXZpbA==\x07",
		"setup":      map[string]any{"name": "x", "title": "<script>alert(2)</script>"},
		"hosts":      []map[string]any{{"role": "client", "name": "<script>alert(3)</script>", "hostname": "evil\u202e<script>"}},
		"parameters": map[string]any{"<script>": "</script>"}, "note": "<script>alert(4)</script>"})
	series(&title, "TCP download::1", "tcp", "Mbits/s")
	samples(&title, "TCP download::1", map[string]any{"t": t0 + 3, "v": 90, "dur": 0.2}, map[string]any{"t": t0 + 3.2, "v": 91, "dur": 0.2})
	end(&title)

	// One sample of a flow covering the whole run: a value at every point.
	var wide w
	header(&wide, 10_000, nil)
	series(&wide, "TCP download::1", "tcp", "Mbits/s")
	samples(&wide, "TCP download::1", map[string]any{"t": t0 + 10_000, "v": 90, "dur": 10_000})
	end(&wide)

	var cpu w
	header(&cpu, 100_000, map[string]any{"aggregates": []map[string]any{{"name": "CPU avg", "op": "avg", "series": "cpu *"}}})
	for i := range 4 {
		series(&cpu, fmt.Sprintf("cpu %d", i), "cpu", "%")
		samples(&cpu, fmt.Sprintf("cpu %d", i), map[string]any{"t": t0 + 1, "v": 50, "dur": 0.2})
	}
	end(&cpu)

	var pings w
	header(&pings, 14, nil)
	series(&pings, "Ping (ms) ICMP", "ping", "ms")
	pings.WriteString(`{"type":"samples","name":"Ping (ms) ICMP","samples":[`)
	for i := range 50_000 {
		if i > 0 {
			pings.WriteByte(',')
		}
		fmt.Fprintf(&pings, `{"t":%v,"v":1}`, t0)
	}
	pings.WriteString("]}\n")
	end(&pings)

	seeds := map[string][]byte{}
	for name, b := range map[string]*w{"script-title-and-host": &title, "flow-over-long-grid": &wide, "cpu-series-on-long-grid": &cpu, "pings-at-t0": &pings} {
		seeds[name] = []byte(b.String())
		if b.Len() > 64<<10 {
			seeds[name] = gzipped(seeds[name])
		}
	}
	return seeds
}

// TestHostileSeeds keeps the corpus files of hostileSeeds what it makes:
// BLOATBENCH_WRITE_SEEDS=1 go test -run TestHostileSeeds writes them.
func TestHostileSeeds(t *testing.T) {
	fuzzbound.KeepSeeds(t, "testdata/fuzz/FuzzReport", hostileSeeds())
}

// A line of more points than maxDrawn is drawn as its envelope: at most maxDrawn
// points, in time order, with its highest and lowest values; shorter lines are
// drawn whole.
func TestLongLinesDrawnAsEnvelope(t *testing.T) {
	for _, n := range []int{maxDrawn, maxDrawn + 1, 1_000_003} {
		ts, vs := make([]float64, n), make([]float64, n)
		for i := range ts {
			ts[i], vs[i] = float64(i), float64(i%7)
		}
		vs[n/3], vs[n/2] = 1000, -1000
		ps := points(0, ts, vs)
		if n <= maxDrawn && len(ps) != n || len(ps) > maxDrawn {
			t.Fatalf("%d points drawn as %d, want at most %d", n, len(ps), min(n, maxDrawn))
		}
		var peak, dip bool
		last := -1.0
		for _, p := range ps {
			x, y := p.Value.([2]float64)[0], p.Value.([2]float64)[1]
			if x <= last {
				t.Fatalf("%d points: x %v after %v", n, x, last)
			}
			last = x
			peak, dip = peak || y == 1000, dip || y == -1000
		}
		if !peak || !dip || last != float64(n-1) && n <= maxDrawn {
			t.Errorf("%d points drawn as %d: peak %v, dip %v, last x %v", n, len(ps), peak, dip, last)
		}
	}
}
