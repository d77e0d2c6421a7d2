package datafile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
		{"grid of too many values", header("total_length", "50000", "step", "0.01") + manySeries + end, []string{"32 series, sums and aggregates", "grid"}},
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

// Partial data is data: a record over a cap costs that record or what follows it,
// never what precedes it, and the run says where it was cut.
func TestPartialFilesKeepWhatPrecedes(t *testing.T) {
	small := limits{bytes: 1 << 20, record: 4096, samples: 5, series: 3, events: 2, eventBytes: 1 << 20, stateBytes: 200}
	event := func(msg string) string {
		return `{"type":"event","event":{"t":1004,"level":"warning","message":"` + msg + `"}}` + "\n"
	}
	state := `{"type":"state","state":{"phase":"pre","t":1000,"host":"server","dev":"eth0","tc":[{"kind":"pfifo","bytes":1234567}]}}` + "\n"
	two := samples(`{"t":1003.2,"v":2}`)
	cases := []struct {
		name     string
		data     string
		samples  int      // of TCP download::1 read
		events   int      // events read
		want     []string // all in run.Error
		complete bool
	}{
		{"a long record mid-file is left out, the rest read",
			header() + series + two + event(strings.Repeat("<", 5000)) + two + end, 4, 0,
			[]string{"record 4", "left out", "4096 bytes"}, false},
		{"a long last record",
			header() + series + two + event(strings.Repeat("x", 5000)), 2, 0,
			[]string{"record 4", "left out"}, false},
		{"more samples than the cap: read up to the record that passes it",
			header() + series + two + two + two + end, 4, 0,
			[]string{"record 5", "more than 5 samples"}, false},
		{"more series than the cap",
			header() + series + series + series + series + two + end, 0, 0,
			[]string{"record 5", "more than 3 series"}, false},
		{"events past the cap are counted and left out",
			header() + series + event("a") + event("b") + event("c") + two + end, 2, 2,
			[]string{"1 events left out"}, false},
		{"states past the cap are counted and left out",
			header() + series + state + state + two + end, 2, 0,
			[]string{"1 bottleneck states left out"}, false},
		{"a torn last line",
			header() + series + two + `{"type":"samples","name":"TCP download::1","samples":[{"t":10`, 2, 0,
			[]string{"record 4 is damaged"}, false},
		{"samples outside the run are left out and counted",
			header() + series + samples(`{"t":-100000,"v":1},{"t":900000,"v":1}`) + end, 1, 0,
			[]string{"2 samples outside the run"}, false},
		{"series without a name are left out and counted",
			header() + `{"type":"series","series":{}}` + "\n" + series + two + end, 2, 0,
			[]string{"1 series without a name"}, false},
		{"many series without a name end the reading",
			header() + series + two + strings.Repeat(`{"type":"series","series":{}}`+"\n", maxNameless+1) + two + end, 2, 0,
			[]string{"record 1004", "more than 1000 series without a name"}, false},
		{"within every cap", header() + series + two + end, 2, 0, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run, err := decode(t.Context(), bytes.NewReader(gz(c.data)), small)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got := len(run.Samples["TCP download::1"]); got != c.samples {
				t.Errorf("%d samples read, want %d", got, c.samples)
			}
			if len(run.Events) != c.events {
				t.Errorf("%d events read, want %d", len(run.Events), c.events)
			}
			if run.Incomplete == c.complete {
				t.Errorf("incomplete %v, want %v (error %q)", run.Incomplete, !c.complete, run.Error)
			}
			for _, w := range c.want {
				if !strings.Contains(run.Error, w) {
					t.Errorf("error %q lacks %q", run.Error, w)
				}
			}
		})
	}
}

// A truncated gzip stream: the members before the damage are read.
func TestTruncatedGzipKeepsCompleteMembers(t *testing.T) {
	var b bytes.Buffer
	for _, part := range []string{header() + series, samples(`{"t":1003.2,"v":2}`), samples(`{"t":1003.4,"v":3}`) + end} {
		b.Write(gz(part))
	}
	data := b.Bytes()[:b.Len()-10] // into the last member
	run, err := Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if got := len(run.Samples["TCP download::1"]); got < 2 || !run.Incomplete || run.Error == "" {
		t.Fatalf("%d samples, incomplete %v, error %q: want the first members' 2 samples or more, marked incomplete", got, run.Incomplete, run.Error)
	}
}

// A reader stops when its context is done.
func TestDecodeStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := DecodeContext(ctx, bytes.NewReader(gz(header()+series+end))); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// A record of more samples than the writer puts in one is left out before it is
// decoded; the records around it are read.
func TestRecordOfTooManySamplesLeftOut(t *testing.T) {
	two := samples(`{"t":1003.2,"v":2}`)
	data := header() + series + two + samples(strings.Repeat(`{"t":1003.4},`, maxRecordSamples)+`{"t":1003.4}`) + two + end
	run, err := Decode(bytes.NewReader(gz(data)))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if got := len(run.Samples["TCP download::1"]); got != 4 || !run.Incomplete ||
		!strings.Contains(run.Error, fmt.Sprintf("record 4 left out: more than %d samples in one record", maxRecordSamples)) {
		t.Fatalf("%d samples, incomplete %v, error %q: want the 4 around record 4, which is left out", got, run.Incomplete, run.Error)
	}
}
