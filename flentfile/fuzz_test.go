package flentfile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/fuzzbound"
	"github.com/bloatbench/bloatbench/report"
)

// readBudget bounds what decode costs: allocation a multiple of the JSON and a
// constant. reportBudget bounds what the report verbs cost for a run that reads (a
// summary, compare's summary with a cut, the flent export and its import back): a
// multiple of the JSON, and of the values of the step grid the run declares
// (datafile.GridPoints x datafile.GridValues), and a constant. Times are checked
// only while fuzzing (fuzzbound.Fuzzing): 2 s, and so much per byte and grid value.
//
// Measured with FUZZBOUND_LOG=1, which logs every input's usage, over the seeds,
// the committed corpus, the hostile classes (hostileSeeds) and shapes made for it
// (100,000 ping replies and flow samples, on 14 s and on 2,000 s; 1, 10 and 100
// flows of a value at every point of their grid), built with coverage counters in
// every package (-gcflags=all=-d=libfuzzer: slower than go test -fuzz, which
// leaves out the runtime), the worst were: reading, 113 bytes allocated a JSON byte
// (results of a value at every point, "1," each: a pointer and a float64 each, in
// slices grown as they are decoded), 0.3 MB for small files, 620 ns a byte
// (100,000 replies: a map each); reporting, 980 bytes and 14 µs a JSON byte (100
// flows of a value at every point: the export makes a map of each value for
// raw_values and the import decodes it back, 700 to 1,000 bytes a value), 157
// bytes and 1.8 µs a grid value (one flow and a ping on 250,000 points: flent's
// grid, every series on it in results, null where empty, exported and read back),
// 0.8 MB for small files. The budgets are 4 times those or more (times with their
// 2 s).
//
// The budgets leave out the version-1 class past a few results: compatibility
// makes a raw record (a map, 540 bytes) for each result and x value, whether the
// result has a value there or not, so that 100 results over 2,000 x values, 11 KB
// of JSON, allocate 107 MB (10,000 bytes a byte) reading, and the 2 million
// records maxCompatRecords allows about 1 GB from some 110 KB.
var (
	readBudget = fuzzbound.Budget{PerInputByte: 450, Constant: 4 << 20,
		Time: 2 * time.Second, NsPerInputByte: 2500}
	reportBudget = fuzzbound.Budget{PerInputByte: 4000, PerGridValue: 80 * 8, Constant: 4 << 20,
		Time: 2 * time.Second, NsPerInputByte: 45_000, NsPerGridValue: 7500}
)

// FuzzDecode feeds flent files' JSON to the importer, seeded with the files flent
// 2.1.1 made (ping, cpu and qdisc stats, VoIP), bloatbench's own export and the
// hostile classes. Whatever the bytes: no panic, and reading within readBudget; and
// a run that imports keeps the reader's limits, has only series bloatbench
// summarises, summarises to finite numbers, and exports to a flent file that
// imports again with the same series (unless the export holds more values than the
// importer reads: see below), all within reportBudget, whatever grid it declares.
func FuzzDecode(f *testing.F) {
	recorded, _ := filepath.Glob("testdata/recorded/*.flent.gz")
	for _, path := range append([]string{"testdata/ping.loopback.flent-2.1.1.flent.gz"}, recorded...) {
		fh, err := os.Open(path)
		if err != nil {
			f.Fatal(err)
		}
		zr, err := gzip.NewReader(fh)
		if err != nil {
			f.Fatal(err)
		}
		flentMade, err := io.ReadAll(zr)
		fh.Close()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(flentMade)
	}
	if golden, err := os.ReadFile("testdata/export.flent.json.golden"); err == nil {
		f.Add(golden)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var run *datafile.Run
		var err error
		u := fuzzbound.Measure(func() { run, err = decode("fuzz.flent", bytes.NewReader(data)) })
		if fuzzbound.Verbose() {
			t.Logf("read: %d bytes, %v", len(data), u)
		}
		if err := readBudget.Check(u, len(data), 0); err != nil {
			t.Fatalf("reading %d bytes of JSON: %v", len(data), err)
		}
		if err != nil {
			return
		}
		m := run.Metadata
		var names []string
		for _, se := range run.Series {
			names = append(names, se.Name)
			switch se.Kind {
			case datafile.KindPing, KindFlent:
			case datafile.KindTCP:
				if se.Direction != "upload" && se.Direction != "download" {
					t.Fatalf("%s: direction %q", se.Name, se.Direction)
				}
			default:
				t.Fatalf("%s: kind %q", se.Name, se.Kind)
			}
		}
		if err := datafile.CheckGrid("STEP_SIZE", m.Step, "TOTAL_LENGTH", m.TotalLength, len(run.Series)); err != nil {
			t.Fatalf("a grid the reader should refuse: %v", err)
		}
		for name, ss := range run.Samples {
			for _, s := range ss {
				if err := datafile.CheckSample(name, s); err != nil {
					t.Fatalf("sample let through: %v", err)
				}
			}
		}
		grid := datafile.GridPoints(m.TotalLength, m.Step) * float64(datafile.GridValues(run))
		var sum report.Summary
		var back *datafile.Run
		var exportErr, importErr error
		var out []byte
		u = fuzzbound.Measure(func() {
			sum = report.Summarize(run)
			report.CompareInput(run, report.Options{Cut: &[2]float64{0.5, m.TotalLength / 2}})
			if out, exportErr = encode(run); exportErr == nil {
				back, importErr = decode("fuzz-export.flent", bytes.NewReader(out))
			}
		})
		exported := 0
		if importErr != nil {
			exported = countValues(out)
		}
		if fuzzbound.Verbose() {
			t.Logf("report: %d bytes, %.0f grid values, %v", len(data), grid, u)
		}
		if err := reportBudget.Check(u, len(data), grid); err != nil {
			t.Fatalf("summarising and exporting a run of %d bytes of JSON, %d series and %.0f grid values: %v", len(data), len(run.Series), grid, err)
		}
		for _, r := range sum.Rows {
			for _, v := range []float64{r.Avg, r.Median, r.P99} {
				if math.IsInf(v, 0) {
					t.Fatalf("row %q: %v", r.Name, v)
				}
			}
		}
		if exportErr != nil {
			t.Fatalf("an imported run does not export: %v", exportErr)
		}
		if importErr != nil && exported > MaxValues {
			// The export writes a grid of any size the readers take (up to
			// datafile.MaxGridValues), and the importer reads at most MaxValues
			// JSON values: a ping and a flow on 1 million points (200,000 s at
			// the 0.2 s step) export to a file it refuses. A known limit, not
			// one for the fuzzer to find again and again.
			return
		}
		if importErr != nil {
			t.Fatalf("exported, the run does not import: %v", importErr)
		}
		var backNames []string
		for _, se := range back.Series {
			backNames = append(backNames, se.Name)
		}
		sort.Strings(names)
		sort.Strings(backNames)
		if !slices.Equal(names, backNames) {
			t.Fatalf("exported and imported, the series changed: %q, then %q", names, backNames)
		}
	})
}

// hostileSeeds are the crafted flent files of e2e/testdata/hostilegen, one per
// class, scaled down so that each reads, summarises and exports in well under a
// second, with the class kept: version-1 results spread over a long x_values, raw
// values and results of nothing ("{}", null), a grid far longer than the values on
// it, and HTML and control bytes in texts. Each is a file of the target's corpus,
// testdata/fuzz/FuzzDecode/hostile-NAME (the refusals of the full-size files are
// TestFlentFilesOfManyObjectsRefused's).
func hostileSeeds() map[string][]byte {
	meta := func(extra map[string]any) string {
		md := map[string]any{"NAME": "ping", "TITLE": "crafted", "TIME": "2026-12-02T10:00:00.000000",
			"T0": "2026-12-02T10:00:00.000000", "STEP_SIZE": 0.2, "TOTAL_LENGTH": 14, "LENGTH": 10}
		maps.Copy(md, extra)
		b, err := json.Marshal(md)
		if err != nil {
			panic(err)
		}
		return string(b)
	}
	// A version-1 file of results named for ping, with nothing in them, over a
	// long x_values: compatibility makes results x x_values raw records.
	v1 := func(xValues, results int) []byte {
		var b strings.Builder
		b.WriteString(`{"version":1,"metadata":` + meta(nil) + `,"x_values":[`)
		for i := range xValues {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d", i)
		}
		b.WriteString(`],"results":{`)
		for i := range results {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"Ping (ms) %d":[]`, i)
		}
		b.WriteString("}}")
		return []byte(b.String())
	}
	emptyObjects := func(n int) []byte {
		return []byte(`{"version":4,"metadata":` + meta(nil) + `,"x_values":[0,0.2],"results":{"Ping (ms) ICMP":[1,1]},"raw_values":{"Ping (ms) ICMP":[{}` +
			strings.Repeat(",{}", n-1) + "]}}")
	}
	nulls := func(n int) []byte {
		return []byte(`{"version":4,"metadata":` + meta(nil) + `,"x_values":[0,0.2],"results":{"Ping (ms) ICMP":[null` +
			strings.Repeat(",null", n-1) + "]}}")
	}
	// Two values of a flow and a ping on a grid of total seconds.
	longGrid := func(total float64) []byte {
		return []byte(`{"version":4,"metadata":` + meta(map[string]any{"TOTAL_LENGTH": total, "LENGTH": total - 4}) +
			`,"x_values":[0,0.2],"results":{"Ping (ms) ICMP":[1,2],"TCP download::1":[90,91]},"raw_values":{"Ping (ms) ICMP":[{"t":1764669600.1,"val":1,"seq":0}]}}`)
	}
	script := []byte(`{"version":4,"metadata":` + meta(map[string]any{"TITLE": "</title><script>alert(1)</script>\x1b]52;c;ZXZpbA==\x07",
		"LOCAL_HOST": "evil\u202e<script>"}) + `,"x_values":[0,0.2,0.4],"results":{"Ping (ms) <script>alert(2)</script>":[1,2,3],"TCP download::1":[90,91,92]}}`)
	return map[string][]byte{
		"flent-v1-long-x-values":         v1(2001, 1000), // refused: more than maxCompatRecords
		"flent-v1-long-x-values-read":    v1(2000, 2),    // see readBudget: 100 results exceed it
		"flent-empty-objects":            emptyObjects(20_000),
		"flent-nulls":                    nulls(10_000),
		"flent-long-grid":                longGrid(50_000),
		"flent-script-and-control-bytes": script,
	}
}

// TestHostileSeeds keeps the corpus files of hostileSeeds what it makes:
// BLOATBENCH_WRITE_SEEDS=1 go test -run TestHostileSeeds writes them.
func TestHostileSeeds(t *testing.T) {
	fuzzbound.KeepSeeds(t, "testdata/fuzz/FuzzDecode", hostileSeeds())
}
