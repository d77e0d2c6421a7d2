package batch

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/controller"
	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

func parse(t *testing.T, body string) (*Batch, error) {
	t.Helper()
	return Parse(filepath.Join("testdata", "nightly.yaml"), []byte(body))
}

func TestParseExpands(t *testing.T) {
	b, err := parse(t, `inventory: hosts.yaml
length: 30
step: 200ms
repetitions: 2
pause: 5s
tests:
  - test: tcp_ndown
    params: {download_streams: [4, 128], cc: [cubic, bbr]}
  - test: tcp_4down
setups: [small, mq+fq_codel]
`)
	if err != nil {
		t.Fatal(err)
	}
	if b.Name != "nightly" || b.Length != 30*time.Second || b.Step != 200*time.Millisecond || b.Pause != 5*time.Second || !b.Shuffle {
		t.Errorf("batch %+v", b)
	}
	// (2 streams x 2 cc + 1) tests x 2 setups x 2 repetitions.
	if len(b.Runs) != 5*2*2 {
		t.Fatalf("%d runs", len(b.Runs))
	}
	want := []string{
		"tcp_ndown_cc=cubic_download_streams=4_small_rep1", "tcp_ndown_cc=cubic_download_streams=4_small_rep2",
		"tcp_ndown_cc=cubic_download_streams=4_mq+fq_codel_rep1",
	}
	for i, w := range want {
		if b.Runs[i].ID != w {
			t.Errorf("run %d: %s, want %s", i, b.Runs[i].ID, w)
		}
	}
	if last := b.Runs[len(b.Runs)-1]; last.ID != "tcp_4down_mq+fq_codel_rep2" || len(last.Parameters) != 0 {
		t.Errorf("last run %+v", last)
	}
}

func TestParseErrorsNameFileLineKey(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"empty", ``, "testdata/nightly.yaml: the file is empty"},
		{"unknown key", "inventory: hosts.yaml\nrepetition: 3\ntests: [{test: tcp_4down}]\n", "testdata/nightly.yaml:2: unknown key repetition (did you mean repetitions?); valid here: after, before, delay,"},
		{"no inventory", "tests: [{test: tcp_4down}]\n", "testdata/nightly.yaml: inventory: missing"},
		{"no tests", "inventory: hosts.yaml\n", "testdata/nightly.yaml: tests: missing"},
		{"unknown test", "inventory: hosts.yaml\ntests:\n  - test: tcp_5down\n", "testdata/nightly.yaml:3: tests[0].test:"},
		{"bad param", "inventory: hosts.yaml\ntests:\n  - test: tcp_ndown\n    params: {download_streams: [4, x]}\n", "testdata/nightly.yaml:4: tests[0].params:"},
		{"nested list", "inventory: hosts.yaml\ntests:\n  - test: tcp_ndown\n    params: {download_streams: [[4]]}\n", "a list of values, each a number or a word"},
		{"unknown setup", "inventory: hosts.yaml\ntests: [{test: tcp_4down}]\nsetups: [small, huge]\n", "testdata/nightly.yaml:3: setups[1]:"},
		{"bad length", "inventory: hosts.yaml\nlength: NaN\ntests: [{test: tcp_4down}]\n", "testdata/nightly.yaml:2: length:"},
		{"step over length", "inventory: hosts.yaml\nlength: 1\nstep: 2\ntests: [{test: tcp_4down}]\n", "step: 2s is longer than the length 1s"},
		{"host not in runs", "inventory: hosts.yaml\ntests: [{test: tcp_4down}]\nbefore: [{host: other, run: true}]\n", "before[0].host: \"other\" is not a client, a server (of any pair) or a bottleneck host"},
		{"empty command", "inventory: hosts.yaml\ntests: [{test: tcp_4down}]\nafter: [{host: server, run: \" \"}]\n", "after[0].run: missing"},
		{"unknown metric", "inventory: hosts.yaml\ntests: [{test: tcp_4down}]\nthresholds: [{metric: Ping, worse: +10%}]\n", "thresholds[0].metric: \"Ping\": one of Ping (ms) ICMP loaded avg"},
		{"unsigned threshold", "inventory: hosts.yaml\ntests: [{test: tcp_4down}]\nthresholds: [{metric: Ping loaded median, worse: 10%}]\n", "with its sign"},
		{"twice", "inventory: hosts.yaml\ntests: [{test: tcp_4down}, {test: tcp_4down}]\n", "comes twice"},
		{"bad name", "name: a/b\ninventory: hosts.yaml\ntests: [{test: tcp_4down}]\n", "testdata/nightly.yaml:1: name:"},
		{"a test needing a schedule", "inventory: hosts.yaml\ntests: [{test: tcp_4down}, {test: rate_steps}]\nsetups: [steps, small]\n", "testdata/nightly.yaml:2: tests[1].test: test rate_steps needs a setup with a rate_schedule: (the rates the bottleneck's shaper steps through during the run), and setup small"},
		{"a schedule past the run", "inventory: hosts.yaml\nlength: 20\ntests: [{test: rate_steps}]\nsetups: [steps]\n", "testdata/nightly.yaml:4: setups[0]:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(t, c.body)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestOrder(t *testing.T) {
	runs := []Run{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}, {ID: "e"}}
	if got := Order(runs, false, 1); !reflect.DeepEqual(got, []string{"a", "b", "c", "d", "e"}) {
		t.Errorf("unshuffled %v", got)
	}
	one, two := Order(runs, true, 42), Order(runs, true, 42)
	if !reflect.DeepEqual(one, two) {
		t.Errorf("the same seed gave %v and %v", one, two)
	}
	differs := false
	for seed := uint64(1); seed < 20 && !differs; seed++ {
		differs = !reflect.DeepEqual(Order(runs, true, seed), one)
	}
	if !differs {
		t.Error("the order does not depend on the seed")
	}
}

func TestChange(t *testing.T) {
	for in, want := range map[string]float64{"+10%": 0.10, "-5%": -0.05, "+0.5%": 0.005, " +100% ": 1} {
		if got, err := change(in); err != nil || math.Abs(got-want) > 1e-12 {
			t.Errorf("change(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"10%", "+10", "+x%", "+2000%", ""} {
		if _, err := change(in); err == nil {
			t.Errorf("change(%q) accepted", in)
		}
	}
}

// summary is a run whose side-by-side metrics are ping median and download sum.
func summary(test string, ping, sum float64) report.Compared {
	return report.Compared{Setup: "S", Streams: "4 download streams", Summary: report.Summary{Test: test, Rows: []report.Row{
		// flent's whole-run row is not what the ping metrics read: the loaded row is.
		{Name: "Ping (ms) ICMP", Avg: 1, Median: 1, P99: 1, Key: report.Key{Family: report.FamilyProbe, Series: "Ping (ms) ICMP"}},
		{Name: "Ping (ms) ICMP loaded", Avg: ping, Median: ping, P99: ping, Key: report.Key{Family: report.FamilyProbe, Series: "Ping (ms) ICMP", Phase: report.LoadedPhase}},
		{Name: "TCP download sum", Avg: sum, Median: sum, Key: report.Key{Family: report.FamilyFlows, Direction: "download", Stat: "sum"}},
	}}}
}

func TestJudge(t *testing.T) {
	limits := []ParsedLimit{
		// The metric's former name, as batch files written before the rename have it.
		{Limit: Limit{Metric: "Ping loaded median", Worse: "+10%"}, Change: 0.10},
		{Limit: Limit{Metric: "TCP download sum", Worse: "-5%", Significant: true}, Change: -0.05},
	}
	runs := func(ping, sum []float64) []report.Compared {
		var out []report.Compared
		for i := range ping {
			out = append(out, summary("tcp_4down", ping[i], sum[i]))
		}
		return out
	}
	base := runs([]float64{10, 11, 10.5, 10.2}, []float64{95, 95.2, 94.9, 95.1})
	cases := []struct {
		name    string
		current []report.Compared
		want    []bool // regression per limit
		note    []string
	}{
		{"same", runs([]float64{10.4, 10.1, 10.9, 10.3}, []float64{95, 95.1, 95.2, 94.8}), []bool{false, false}, []string{"", ""}},
		{"ping up 50%", runs([]float64{15, 15.5, 16, 15.2}, []float64{95, 95.1, 95.2, 94.8}), []bool{true, false}, []string{"", ""}},
		// Down 10%, significant with 4+4 runs.
		{"throughput down", runs([]float64{10, 10, 10, 10}, []float64{85, 85.5, 86, 85.2}), []bool{false, true}, []string{"", ""}},
		// Down 10% but with 2 runs no U test can say so.
		{"throughput down, too few runs", runs([]float64{10, 10}, []float64{85, 85.5}), []bool{false, false}, []string{"", "not significant"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := Judge(base, c.current, limits)
			if len(cs) != 2 {
				t.Fatalf("%d checks", len(cs))
			}
			if cs[0].Metric != "Ping (ms) ICMP loaded median" {
				t.Errorf("the former name judged as %q, want its row's name", cs[0].Metric)
			}
			for i, ch := range cs {
				if ch.Regression != c.want[i] || !strings.Contains(ch.Note, c.note[i]) {
					t.Errorf("%s: regression %v (want %v), change %+.3f, p %.3f, note %q", ch.Metric, ch.Regression, c.want[i], ch.Change, ch.P, ch.Note)
				}
			}
		})
	}
	// A test only this batch ran is noted, not judged; JSON has no NaN.
	cs := Judge(base, []report.Compared{summary("tcp_nup", 10, 95)}, limits)
	if cs[0].Regression || !strings.Contains(cs[0].Note, "baseline has no run") {
		t.Errorf("new test: %+v", cs[0])
	}
	b, err := json.Marshal(cs)
	if err != nil || !strings.Contains(string(b), `"baseline":null`) {
		t.Errorf("JSON %s: %v", b, err)
	}
	if md := VerdictMarkdown(Judge(base, runs([]float64{15, 15, 15, 15}, []float64{95, 95, 95, 95}), limits), "BASE"); !strings.Contains(md, "**1 regression**") || !strings.Contains(md, "**REGRESSION**") {
		t.Errorf("markdown:\n%s", md)
	}
}

func TestLoopsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("inventory: hosts.yaml\ntests:\n  - test: tcp_ndown\n    params:\n")
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		b.WriteString("      " + k + ": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n")
	}
	if _, err := parse(t, b.String()); err == nil || !strings.Contains(err.Error(), "more than 10000 parameter sets") {
		t.Errorf("a million parameter sets: %v", err)
	}
}

func TestLiveText(t *testing.T) {
	cases := []struct {
		p    controller.Progress
		want string
	}{
		{controller.Progress{Elapsed: 0.4, Total: 12, PingMs: math.NaN()}, "0s of 12s, 0.0 Mbit/s (idle)"},
		{controller.Progress{Elapsed: 5, Total: 12, Loaded: true, SumMbps: 94.26, PingMs: 15.234}, "5s of 12s, 94.3 Mbit/s, ping 15.23 ms (loaded)"},
		{controller.Progress{Elapsed: 13, Total: 12, PingMs: 0.05}, "12s of 12s, 0.0 Mbit/s, ping 0.05 ms (idle)"},
		{controller.Progress{Elapsed: -0.2, Total: 12, PingMs: math.NaN()}, "0s of 12s, 0.0 Mbit/s (idle)"},
	}
	for _, c := range cases {
		if got := liveText(c.p); got != c.want {
			t.Errorf("liveText(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
	// Off a terminal no bars, and a progress without them does nothing.
	pr := newProgress(&strings.Builder{}, false, "b", 3, 0, NewETA(time.Second, 3, nil))
	if pr.Bars != nil {
		t.Error("bars on a strings.Builder")
	}
	pr.StartRun("x", 1)
	pr.Update(controller.Progress{})
	pr.endRun()
	pr.stop()
	var bars *Bars
	if NewBars(&strings.Builder{}, BarsOptions{}) != nil {
		t.Error("run bars on a strings.Builder")
	}
	bars.StartRun("x", 1)
	bars.Update(controller.Progress{})
	bars.EndRun()
	bars.Stop()
}

// One record too long to read (an older batch's, whose before and after outputs
// were not bounded) costs that record, not the batch: history, the batch's end
// and --resume read the others.
func TestRecordsReadPastALongLine(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := appendRecord(f, Record{ID: id, Status: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	long, _ := json.Marshal(Record{ID: "long", Status: "ok", Before: []CommandResult{{Host: "server", Run: "dmesg", Output: strings.Repeat("x", maxRecordLine)}}})
	f.Write(append(long, '\n'))
	// A record written now keeps its error within maxOutput.
	if err := appendRecord(f, Record{ID: "c", Status: "failed", Error: strings.Repeat("e", 2*maxOutput)}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	recs, err := readRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, ","); got != "a,b,c" {
		t.Fatalf("records %s, want a,b,c (the long one left out)", got)
	}
	if e := recs[2].Error; len(e) > maxOutput+64 || !strings.Contains(e, "bytes left out") {
		t.Errorf("error of %d bytes: want it cut to %d with a marker", len(e), maxOutput)
	}
}

// require: {bottleneck: true} passes a run whose qdiscs under test held its delay,
// and fails one whose ping waited elsewhere, or that cannot say where it waited.
func TestRequireBottleneck(t *testing.T) {
	write := func(t *testing.T, qdiscBacklog float64, ping bool) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "run.bb.json.gz")
		w, err := datafile.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(w.Header(datafile.Metadata{Test: "tcp_4down", T0: 100, Delay: 1, Length: 4, Step: 0.2, TotalLength: 6}))
		bytes := datafile.Series{Name: "qdisc server:eth1 root bytes", Kind: datafile.KindQdisc, Units: "bytes", Host: "server", Dev: "eth1", Stat: "root bytes", Counter: true}
		backlog := datafile.Series{Name: "qdisc server:eth1 root backlog", Kind: datafile.KindQdisc, Units: "bytes", Host: "server", Dev: "eth1", Stat: "root backlog"}
		must(w.AddSeries(bytes))
		must(w.AddSeries(backlog))
		if ping {
			must(w.AddSeries(datafile.Series{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms", Host: "client"}))
		}
		for k := 0; k <= 30; k++ {
			tk := 100 + float64(k)*0.2
			loaded := tk > 101 && tk <= 105
			b, v := 0.0, 0.1
			if loaded {
				b, v = qdiscBacklog, 10.1 // 10 ms over idle
			}
			must(w.Append(bytes.Name, []datafile.Sample{{T: tk, V: 12.5e6 * 0.2 * float64(k)}}))
			must(w.Append(backlog.Name, []datafile.Sample{{T: tk, V: b}}))
			if ping && k > 0 && k < 30 {
				must(w.Append("Ping (ms) ICMP", []datafile.Sample{{T: tk + v/1e3, V: v, Seq: k}}))
			}
		}
		must(w.Close(nil))
		return path
	}
	// 125,000 bytes at 12.5 MB/s are the 10 ms the ping waited.
	if err := requireBottleneck(write(t, 125000, true)); err != nil {
		t.Errorf("the queue under test held the delay, and: %v", err)
	}
	err := requireBottleneck(write(t, 0, true))
	if err == nil || !strings.Contains(err.Error(), "require bottleneck: the qdiscs under test (server:eth1) held 0%") {
		t.Errorf("the queue was elsewhere, and: %v", err)
	}
	if err := requireBottleneck(write(t, 125000, false)); err == nil || !strings.Contains(err.Error(), "no loaded and idle ping") {
		t.Errorf("no ping, and: %v", err)
	}
}

func TestParseRequire(t *testing.T) {
	b, err := parse(t, "inventory: hosts.yaml\ntests: [{test: tcp_4down}]\nrequire: {bottleneck: true}\n")
	if err != nil || !b.Require.Bottleneck {
		t.Fatalf("%v %+v", err, b)
	}
	if _, err := parse(t, "inventory: hosts.yaml\ntests: [{test: tcp_4down}]\nrequire: {botleneck: true}\n"); err == nil || !strings.Contains(err.Error(), "bottleneck") {
		t.Errorf("a misspelt require key: %v", err)
	}
}
