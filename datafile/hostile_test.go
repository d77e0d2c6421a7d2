package datafile

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// header is a valid header line with metadata keys replaced by raw JSON: key, value,
// key, value...
func header(kv ...string) string {
	m := map[string]string{"test": `"tcp_4down"`, "t0": "1000", "length": "10", "delay": "2", "step": "0.2", "total_length": "14"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	var b strings.Builder
	b.WriteString(`{"type":"header","format":"bloatbench-data","version":1,"metadata":{`)
	first := true
	for _, k := range []string{"test", "t0", "length", "delay", "step", "total_length"} {
		if !first {
			b.WriteString(",")
		}
		first = false
		b.WriteString(`"` + k + `":` + m[k])
	}
	b.WriteString("}}\n")
	return b.String()
}

const (
	series = `{"type":"series","series":{"name":"TCP download::1","kind":"tcp","units":"Mbits/s"}}` + "\n"
	end    = `{"type":"end","end":{"t":1014,"complete":true}}` + "\n"
)

func samples(raw string) string {
	return `{"type":"samples","name":"TCP download::1","samples":[{"t":1003,"v":1,"dur":0.2},` + raw + "]}\n"
}

// Files made by hand or by mistake (they travel by mail) are refused with the file,
// the key and what is wrong: never a panic, never gigabytes of memory.
func TestHostileFilesRefused(t *testing.T) {
	manySeries := ""
	for i := 0; i < 30; i++ {
		manySeries += strings.Replace(series, "::1", "::"+string(rune('a'+i)), 1)
	}
	cases := []struct {
		name, data string
		want       []string // all in the error
	}{
		{"zero step", header("step", "0") + series + end, []string{"metadata.step", "more than 0"}},
		{"negative step", header("step", "-0.2") + series + end, []string{"metadata.step", "-0.2"}},
		{"zero total_length", header("total_length", "0") + series + end, []string{"metadata.total_length", "more than 0"}},
		{"negative total_length", header("total_length", "-14") + series + end, []string{"metadata.total_length", "-14"}},
		{"billion-point grid", header("step", "1e-8") + series + end, []string{"metadata.step", "grid points", "at most 10000000"}},
		{"absurd total_length", header("total_length", "1e300") + series + end, []string{"metadata.total_length"}},
		{"negative length", header("length", "-1") + series + end, []string{"metadata.length"}},
		{"negative delay", header("delay", "-5") + series + end, []string{"metadata.delay"}},
		{"absurd t0", header("t0", "1e200") + series + end, []string{"metadata.t0"}},
		{"NaN step", header("step", "NaN") + series + end, []string{`key "step"`, "NaN"}},
		{"Infinity total_length", header("total_length", "Infinity") + series + end, []string{`key "total_length"`, "Infinity"}},
		// 5 million points: 30 flows on them are more values than reports build.
		{"grid of too many values", header("total_length", "50000", "step", "0.01") + manySeries + end, []string{"30 TCP and ping series", "grid"}},
		{"NaN sample", header() + series + samples(`{"t":1003.2,"v":NaN}`) + end, []string{"record 3", `key "v"`, "NaN"}},
		{"huge sample", header() + series + samples(`{"t":1003.2,"v":1e999}`) + end, []string{"record 3", "samples.v", "1e999"}},
		{"absurd sample value", header() + series + samples(`{"t":1003.2,"v":1e300}`) + end, []string{"record 3", "samples[1].v", "1e+300"}},
		{"absurd sample time", header() + series + samples(`{"t":-1e300,"v":1}`) + end, []string{"record 3", "samples[1].t"}},
		{"negative duration", header() + series + samples(`{"t":1003.2,"v":1,"dur":-1}`) + end, []string{"record 3", "samples[1].dur"}},
		{"wrong type", header() + series + `{"type":"event","event":{"t":"soon","level":"x","message":"y"}}` + "\n" + end,
			[]string{"record 3", "event.t", "string"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "hostile"+Ext)
			if err := os.WriteFile(path, gz(c.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Read(path)
			if err == nil {
				t.Fatalf("read without error")
			}
			for _, w := range append(c.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A gzip bomb: a small file that decompresses to more than MaxDecompressed, of lines
// a reader accepts and ignores. The reader stops at the cap with an error, having
// held little in memory.
func TestGzipBombRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 600 MiB stream")
	}
	line := append(append([]byte(`{"type":"x"`), bytes.Repeat([]byte(" "), 1<<16)...), "}\n"...)
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	must(t, err)
	zw.Write([]byte(header()))
	for n := 0; n <= MaxDecompressed/len(line); n++ {
		zw.Write(line)
	}
	must(t, zw.Close())
	path := filepath.Join(t.TempDir(), "bomb"+Ext)
	must(t, os.WriteFile(path, b.Bytes(), 0o644))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = Read(path)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "512 MiB") {
		t.Fatalf("error %v, want one naming the file and the 512 MiB cap", err)
	}
	if grew := after.HeapInuse - min(after.HeapInuse, before.HeapInuse); grew > 64<<20 {
		t.Errorf("reading the bomb kept %d MiB", grew>>20)
	}
}

// A syntax error on the last line is a line cut by a dying writer: the run is read up
// to it, incomplete. The same error with lines after it is a broken file.
func TestBrokenLineInTheMiddle(t *testing.T) {
	cut := header() + series + `{"type":"samples","name":"TCP download::1","samples":[{"t":1003,"v":1,"d`
	run, err := Decode(bytes.NewReader(gz(cut)))
	if err != nil || !run.Incomplete {
		t.Fatalf("cut last line: err %v, incomplete %v", err, run != nil && run.Incomplete)
	}
	broken := header() + series + `{"type":"samples",,}` + "\n" + samples(`{"t":1003.2,"v":2}`) + end
	if _, err := Decode(bytes.NewReader(gz(broken))); err == nil || !strings.Contains(err.Error(), "record 3") {
		t.Fatalf("broken middle line: err %v, want one naming record 3", err)
	}
}
