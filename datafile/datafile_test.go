package datafile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func testMeta() Metadata {
	return Metadata{Test: "tcp_4down", Title: "t", T0: 1000, Length: 10, Delay: 2, Step: 0.2, TotalLength: 14,
		StartTime: time.Unix(1000, 0).UTC(), Parameters: map[string]string{"download_streams": "4"}}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w, path, err := CreateIn(dir, "tcp_4down", "MQ + FQ_CODEL", time.Unix(1000, 0).UTC())
	if err != nil {
		t.Fatal(err)
	}
	if got := filepath.Base(path); got != "tcp_4down-1970-01-01T001640.MQ_FQ_CODEL"+Ext {
		t.Errorf("file name %q", got)
	}
	must(t, w.Header(testMeta()))
	must(t, w.AddSeries(Series{Name: "TCP download::1", Kind: KindTCP, Units: "Mbits/s"}))
	must(t, w.Append("TCP download::1", []Sample{{T: 1002.2, V: 8, Dur: 0.2, Bytes: 200000}}))
	must(t, w.Append("TCP download::1", []Sample{{T: 1002.4, V: 9, Dur: 0.2, Bytes: 225000}}))
	must(t, w.Event(Event{T: 1003, Host: "server", Level: "warning", Message: "hi"}))
	must(t, w.Close(nil))

	run, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if run.Incomplete || run.Error != "" {
		t.Errorf("complete run read as incomplete: %q", run.Error)
	}
	if run.Metadata.Parameters["download_streams"] != "4" || run.Metadata.Test != "tcp_4down" {
		t.Errorf("metadata %+v", run.Metadata)
	}
	if got := run.Samples["TCP download::1"]; len(got) != 2 || got[1].Bytes != 225000 {
		t.Errorf("samples %+v", got)
	}
	if len(run.Series) != 1 || len(run.Events) != 1 {
		t.Errorf("series %v events %v", run.Series, run.Events)
	}

	// The same name again gets a counter, never overwriting.
	w2, path2, err := CreateIn(dir, "tcp_4down", "MQ + FQ_CODEL", time.Unix(1000, 0).UTC())
	if err != nil {
		t.Fatal(err)
	}
	w2.Close(nil)
	if path2 == path || !strings.HasSuffix(path2, "-1"+Ext) {
		t.Errorf("second file %q", path2)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A run whose controller died: every flushed member is readable, the cut-off tail
// is not, and the run is incomplete.
func TestTruncatedFileKeepsFlushedData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x"+Ext)
	w, err := Create(path)
	must(t, err)
	must(t, w.Header(testMeta()))
	must(t, w.AddSeries(Series{Name: "Ping (ms) ICMP", Kind: KindPing, Units: "ms"}))
	must(t, w.Append("Ping (ms) ICMP", []Sample{{T: 1001, V: 1.5}}))
	must(t, w.Flush())
	must(t, w.Append("Ping (ms) ICMP", []Sample{{T: 1002, V: 2.5}}))
	must(t, w.Flush())
	full, err := os.ReadFile(path)
	must(t, err)
	// Cut into the second member.
	for _, cut := range []int{len(full) - 5, len(full) - 20} {
		run, err := Decode(bytes.NewReader(full[:cut]))
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		if !run.Incomplete {
			t.Errorf("cut at %d: not marked incomplete", cut)
		}
		if n := len(run.Samples["Ping (ms) ICMP"]); n < 1 {
			t.Errorf("cut at %d: lost the flushed sample", cut)
		}
	}
	// Whole but without an end record: incomplete too.
	run, err := Decode(bytes.NewReader(full))
	must(t, err)
	if !run.Incomplete || len(run.Samples["Ping (ms) ICMP"]) != 2 {
		t.Errorf("unterminated run: incomplete=%v samples=%d", run.Incomplete, len(run.Samples["Ping (ms) ICMP"]))
	}
}

func TestCloseWithErrorMarksIncomplete(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x"+Ext)
	w, err := Create(path)
	must(t, err)
	must(t, w.Header(testMeta()))
	must(t, w.Close(errors.New("agent on host server exited")))
	run, err := Read(path)
	must(t, err)
	if !run.Incomplete || !strings.Contains(run.Error, "agent on host server") {
		t.Errorf("incomplete=%v error=%q", run.Incomplete, run.Error)
	}
}

func TestReadRejectsForeignFiles(t *testing.T) {
	cases := map[string][]byte{
		"not gzip":   []byte("hello"),
		"not ours":   gz(`{"version":4,"metadata":{}}` + "\n"),
		"too new":    gz(`{"type":"header","format":"bloatbench-data","version":99,"metadata":{}}` + "\n"),
		"empty gzip": gz(""),
	}
	for name, data := range cases {
		if _, err := Decode(bytes.NewReader(data)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func gz(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

// TestSamplesGatheredPerFlush: an agent's batches of one sample per series become
// one record per series and flush, in order, before the end record; a sample that
// JSON cannot hold is refused at Append and the file goes on.
func TestSamplesGatheredPerFlush(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r"+Ext)
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.Header(testMeta()))
	w.lastFlush = time.Now().Add(time.Hour) // no flush on the clock: only the test's own
	for _, name := range []string{"a", "b"} {
		must(t, w.AddSeries(Series{Name: name, Kind: KindTCP, Units: "Mbits/s"}))
	}
	for i := range 3 {
		for _, name := range []string{"a", "b"} {
			must(t, w.Append(name, []Sample{{T: 1002 + float64(i), V: float64(i), Dur: 0.2, Bytes: int64(i)}}))
		}
	}
	if err := w.Append("a", []Sample{{T: 1005, V: math.NaN()}}); err == nil {
		t.Error("a NaN sample was taken")
	}
	must(t, w.Flush())
	w.lastFlush = time.Now().Add(time.Hour)
	must(t, w.Append("a", []Sample{{T: 1005, V: 3, Dur: 0.2, Bytes: 3}}))
	must(t, w.Close(nil))

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	dec := json.NewDecoder(gz)
	for {
		var r Record
		if err := dec.Decode(&r); err != nil {
			break
		}
		types = append(types, r.Type+":"+r.Name)
	}
	want := []string{"header:", "series:", "series:", "samples:a", "samples:b", "samples:a", "end:"}
	if !slices.Equal(types, want) {
		t.Errorf("records %v, want %v", types, want)
	}
	run, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if run.Incomplete {
		t.Errorf("incomplete: %s", run.Error)
	}
	for name, n := range map[string]int{"a": 4, "b": 3} {
		ss := run.Samples[name]
		if len(ss) != n {
			t.Fatalf("%s: %d samples, want %d", name, len(ss), n)
		}
		for i, s := range ss {
			if s.Bytes != int64(i) {
				t.Errorf("%s[%d] = %+v: out of order", name, i, s)
			}
		}
	}
}

// The writer never writes what the reader leaves out: long texts from hosts are
// truncated with a marker, samples are chunked, a log of "<" does not grow six-fold,
// and the file reads back whole.
func TestWriterStaysWithinTheReadersBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big"+Ext)
	w, err := Create(path)
	must(t, err)
	m := testMeta()
	m.Hosts = []Host{{Role: "server", Name: "server", Facts: map[string]string{"kernel.dmesg": strings.Repeat("d", 3*MaxText)}}}
	must(t, w.Header(m))
	must(t, w.AddSeries(Series{Name: "Ping (ms) ICMP", Kind: KindPing, Units: "ms"}))
	n := 2*maxSamplesRecord + 7
	ss := make([]Sample, n)
	for i := range ss {
		ss[i] = Sample{T: 1002 + float64(i)*1e-5, V: 1, Seq: i}
	}
	must(t, w.Append("Ping (ms) ICMP", ss))
	long := strings.Repeat("<", MaxRecord+10) // one log line longer than a record may be
	must(t, w.Event(Event{T: 1003, Host: "server", Level: "log", Message: long}))
	must(t, w.State(State{Phase: "post", Host: "server", Dev: "eth0", TC: json.RawMessage(`"` + strings.Repeat("x", MaxRaw+1) + `"`)}))
	must(t, w.Close(nil))

	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	must(t, err)
	longest := 0
	for l := range strings.SplitSeq(string(mustRead(t, zr)), "\n") {
		longest = max(longest, len(l))
	}
	if longest > 10<<20 {
		t.Errorf("longest record %d bytes: want every record well below MaxRecord", longest)
	}
	run, err := Read(path)
	must(t, err)
	if run.Incomplete {
		t.Fatalf("read back incomplete: %s", run.Error)
	}
	if got := len(run.Samples["Ping (ms) ICMP"]); got != n {
		t.Errorf("%d samples read back, want %d", got, n)
	}
	if msg := run.Events[0].Message; len(msg) > MaxText+64 || !strings.HasPrefix(msg, "<<<") || !strings.Contains(msg, "bytes left out") {
		t.Errorf("event of %d bytes (%.20q...): want it truncated to %d with a marker", len(msg), msg, MaxText)
	}
	if fact := run.Metadata.Hosts[0].Facts["kernel.dmesg"]; len(fact) > MaxText+64 || !strings.Contains(fact, "bytes left out") {
		t.Errorf("fact of %d bytes: want it truncated with a marker", len(fact))
	}
	if tc := string(run.States[0].TC); !strings.Contains(tc, "left out") {
		t.Errorf("state of %d bytes: want the kernel output replaced by a note", len(tc))
	}
}

func TestTruncateKeepsUTF8(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc [... 3 bytes left out]"},
		{"aé", 2, "a [... 2 bytes left out]"}, // é is two bytes: not cut in half
	} {
		if got := Truncate(c.in, c.n); got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func mustRead(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	must(t, err)
	return b
}
