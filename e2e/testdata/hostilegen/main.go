// Command hostilegen writes the crafted data files that the report verbs must
// survive: small files that declare or hold far more than any run writes. Each
// class is one file in the output folder, named for what it does:
//
//	go run ./e2e/testdata/hostilegen -o DIR
//
// e2e's TestHostileFilesBounded runs every report verb on each under a memory
// limit; the files are generated rather than committed because most are a few
// hundred bytes of gzip that unpack to hundreds of megabytes.
package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const t0 = 1764700000.0

func main() {
	out := flag.String("o", ".", "the folder to write the files in")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for name, write := range map[string]func(*bufio.Writer){
		"cpu-series-on-huge-grid.bb.json.gz": cpuSeriesOnHugeGrid,
		"many-aggregates.bb.json.gz":         manyAggregates,
		"empty-samples.bb.json.gz":           emptySamples,
		"empty-series.bb.json.gz":            emptySeries,
		"pings-at-t0.bb.json.gz":             pingsAtT0(200_000),
		"pings-at-t0-400k.bb.json.gz":        pingsAtT0(400_000),
		"flent-v1-long-x-values.flent.gz":    flentV1LongXValues,
		"flent-empty-objects.flent.gz":       flentEmptyObjects,
		"flent-nulls.flent.gz":               flentNulls,
		"long-event-mid-file.bb.json.gz":     longEvent,
		"osc52-hostname.bb.json.gz":          osc52Hostname,
	} {
		if err := writeGz(filepath.Join(*out, name), write); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "hostilegen:", err)
	os.Exit(1)
}

func writeGz(path string, write func(*bufio.Writer)) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	bw := bufio.NewWriterSize(zw, 1<<20)
	write(bw)
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func line(w *bufio.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	w.Write(b)
	w.WriteByte('\n')
}

// header is a data file's first record; total is its total_length.
func header(w *bufio.Writer, total float64, extra map[string]any) {
	md := map[string]any{"test": "tcp_4down", "title": "crafted", "t0": t0, "length": total - 4,
		"delay": 2, "step": 0.2, "total_length": total,
		"hosts": []map[string]any{{"role": "client", "name": "client", "hostname": "client"}}}
	for k, v := range extra {
		md[k] = v
	}
	line(w, map[string]any{"type": "header", "format": "bloatbench-data", "version": 1, "metadata": md})
}

func end(w *bufio.Writer) {
	line(w, map[string]any{"type": "end", "end": map[string]any{"t": t0 + 10, "complete": true}})
}

func series(w *bufio.Writer, name, kind, units string) {
	line(w, map[string]any{"type": "series", "series": map[string]any{"name": name, "kind": kind, "units": units, "host": "client"}})
}

// 200 cpu series on a 10-million-point grid (23 days at 0.2 s), one sample each,
// and an aggregate over them.
func cpuSeriesOnHugeGrid(w *bufio.Writer) {
	header(w, 1_999_999.8, map[string]any{"aggregates": []map[string]any{{"name": "CPU avg", "op": "avg", "series": "cpu *"}}})
	for i := range 200 {
		series(w, fmt.Sprintf("cpu %d", i), "cpu", "%")
		line(w, map[string]any{"type": "samples", "name": fmt.Sprintf("cpu %d", i), "samples": []map[string]any{{"t": t0 + 1, "v": 50, "dur": 0.2}}})
	}
	end(w)
}

// 5,000 aggregates over one series, on a 10-million-point grid.
func manyAggregates(w *bufio.Writer) {
	var aggs []map[string]any
	for i := range 5000 {
		aggs = append(aggs, map[string]any{"name": fmt.Sprintf("agg %d", i), "op": "sum", "series": "*"})
	}
	header(w, 1_999_999.8, map[string]any{"aggregates": aggs})
	series(w, "TCP download::1", "tcp", "Mbits/s")
	end(w)
}

// One series whose samples are empty objects: 3 bytes of JSON each, 48 bytes
// each in memory. 30 million of them are 90 MB of JSON.
func emptySamples(w *bufio.Writer) {
	header(w, 14, nil)
	series(w, "Ping (ms) ICMP", "ping", "ms")
	for range 30 {
		w.WriteString(`{"type":"samples","name":"Ping (ms) ICMP","samples":[{}`)
		w.WriteString(strings.Repeat(",{}", 1_000_000-1))
		w.WriteString("]}\n")
	}
	end(w)
}

// Ten million empty series records, 30 bytes of JSON each.
func emptySeries(w *bufio.Writer) {
	header(w, 14, nil)
	for range 10_000_000 {
		w.WriteString(`{"type":"series","series":{}}` + "\n")
	}
	end(w)
}

// n ping samples all at t0: every one wants the grid's first slot.
func pingsAtT0(n int) func(*bufio.Writer) {
	return func(w *bufio.Writer) {
		header(w, 14, nil)
		series(w, "Ping (ms) ICMP", "ping", "ms")
		w.WriteString(`{"type":"samples","name":"Ping (ms) ICMP","samples":[`)
		for i := range n {
			if i > 0 {
				w.WriteByte(',')
			}
			fmt.Fprintf(w, `{"t":%v,"v":1}`, t0)
		}
		w.WriteString("]}\n")
		end(w)
	}
}

// flentMeta is the metadata of a flent file.
func flentMeta(extra map[string]any) map[string]any {
	md := map[string]any{"NAME": "ping", "TITLE": "crafted", "TIME": "2026-12-02T10:00:00.000000",
		"T0": "2026-12-02T10:00:00.000000", "STEP_SIZE": 0.2, "TOTAL_LENGTH": 14, "LENGTH": 10}
	for k, v := range extra {
		md[k] = v
	}
	return md
}

// A flent version-1 file: a long x_values and many results with nothing in them,
// which version-1 compatibility would turn into results x x_values records.
func flentV1LongXValues(w *bufio.Writer) {
	w.WriteString(`{"version":1,"metadata":`)
	b, _ := json.Marshal(flentMeta(map[string]any{"TOTAL_LENGTH": 1_999_999.8}))
	w.Write(b)
	w.WriteString(`,"x_values":[`)
	for i := range 2_000_000 {
		if i > 0 {
			w.WriteByte(',')
		}
		fmt.Fprintf(w, "%d", i)
	}
	w.WriteString(`],"results":{`)
	for i := range 5000 {
		if i > 0 {
			w.WriteByte(',')
		}
		fmt.Fprintf(w, `"Ping (ms) %d":[]`, i)
	}
	w.WriteString("}}")
}

// A flent file whose raw values are empty objects: 3 bytes of JSON each, a map
// each in memory.
func flentEmptyObjects(w *bufio.Writer) {
	w.WriteString(`{"version":4,"metadata":`)
	b, _ := json.Marshal(flentMeta(nil))
	w.Write(b)
	w.WriteString(`,"x_values":[0,0.2],"results":{"Ping (ms) ICMP":[1,1]},"raw_values":{"Ping (ms) ICMP":[{}`)
	w.WriteString(strings.Repeat(",{}", 40_000_000))
	w.WriteString("]}}")
}

// A flent file whose results are nulls: 5 bytes of JSON each.
func flentNulls(w *bufio.Writer) {
	w.WriteString(`{"version":4,"metadata":`)
	b, _ := json.Marshal(flentMeta(nil))
	w.Write(b)
	w.WriteString(`,"x_values":[0,0.2],"results":{"Ping (ms) ICMP":[null`)
	w.WriteString(strings.Repeat(",null", 25_000_000))
	w.WriteString("]}}")
}

// A run of a few seconds with one 65 MiB event between its samples: the records
// before it must stay readable.
func longEvent(w *bufio.Writer) {
	header(w, 14, nil)
	series(w, "TCP download::1", "tcp", "Mbits/s")
	var first, second []map[string]any
	for k := 1; k <= 70; k++ {
		s := map[string]any{"t": t0 + float64(k)*0.2, "v": 90.0, "dur": 0.2, "bytes": 2250000}
		if k <= 35 {
			first = append(first, s)
		} else {
			second = append(second, s)
		}
	}
	line(w, map[string]any{"type": "samples", "name": "TCP download::1", "samples": first})
	line(w, map[string]any{"type": "event", "event": map[string]any{"t": t0 + 7, "level": "warning", "message": strings.Repeat("<", 65<<20)}})
	line(w, map[string]any{"type": "samples", "name": "TCP download::1", "samples": second})
	end(w)
}

// A run whose host name holds an OSC 52 sequence (a terminal writes it to the
// clipboard) and a bidi override.
func osc52Hostname(w *bufio.Writer) {
	header(w, 14, map[string]any{"title": "osc\x1b]52;c;ZXZpbA==\x07", "hosts": []map[string]any{
		{"role": "client", "name": "client", "hostname": "evil\x1b]52;c;ZXZpbA==\x07\u202e", "kernel": "6.18\x1b[2J"}}})
	series(w, "TCP download::1", "tcp", "Mbits/s")
	var ss []map[string]any
	for k := 1; k <= 70; k++ {
		ss = append(ss, map[string]any{"t": t0 + float64(k)*0.2, "v": 90.0, "dur": 0.2, "bytes": 2250000})
	}
	line(w, map[string]any{"type": "samples", "name": "TCP download::1", "samples": ss})
	end(w)
}
