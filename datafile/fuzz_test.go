package datafile_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

// summariseBelow bounds the grids the fuzz target summarises: bigger ones (up to
// datafile.MaxGridPoints) are legal but would make each run of the target slow.
const summariseBelow = 100_000

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

// FuzzDecode feeds data files to Decode: JSON lines, gzip'd by the target, or a
// gzip stream as it is. Whatever the bytes: no panic; and a run that reads keeps
// the reader's limits, writes back (with the Writer) to a file that reads the same,
// and summarises to finite numbers.
func FuzzDecode(f *testing.F) {
	f.Add(seedFile(f, nil, 0))
	f.Add(seedFile(f, errors.New("agent on host server exited"), 0))
	f.Add(seedFile(f, nil, 10))
	f.Add(gzipped(seedFile(f, nil, 0)))
	f.Add([]byte(`{"type":"header","format":"bloatbench-data","version":1,"metadata":{"t0":0,"step":0.2,"total_length":1}}` + "\n" +
		`{"type":"series","series":{"name":"x","kind":"ping"}}` + "\n" + `{"type":"samples","name":"x","samples":[{"t":0.5,"v":1e30},{"t":0.5,"v":-1e30}]}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := data
		if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
			in = gzipped(data)
		}
		run, err := datafile.Decode(bytes.NewReader(in))
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
		if datafile.GridPoints(m.TotalLength, m.Step) > summariseBelow {
			return
		}
		for _, r := range report.Summarize(run).Rows {
			for _, v := range []float64{r.Avg, r.Median, r.P99} {
				if math.IsInf(v, 0) {
					t.Fatalf("row %q: %v", r.Name, v)
				}
			}
		}
		report.CompareInput(run, report.Options{Cut: &[2]float64{0.5, m.TotalLength / 2}})
	})
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
