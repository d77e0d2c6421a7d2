package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/golden"
)

// The batch the report tests finish: 2 tests x 2 setups x 2 repetitions, two
// thresholds. The "hostile" setup's title has what XML and the Prometheus format
// must escape (quotes, <, &, a dot Jenkins would split at, an escape character).
const (
	reportsHosts = `hosts:
  client: {ssh: "root@192.0.2.10", test_ip: 10.0.0.1}
  server: {ssh: "root@192.0.2.20", test_ip: 10.0.0.2}
client: client
server: server
bottleneck:
  - {host: server, dev: eth0}
setups:
  small: {title: "BFIFO 100k", rate: 50mbit, root: {kind: bfifo, params: {limit: "100000"}}}
  hostile: {title: "FQ \"q\" <&> 1.5 \e[1m", root: {kind: fq_codel}}
`
	reportsBatch = `name: nightly
inventory: hosts.yaml
length: 1
step: 0.2
delay: 0.5
repetitions: 2
tests:
  - test: tcp_4down
  - test: tcp_ndown
    params: {download_streams: 2}
setups: [small, hostile]
thresholds:
  - {metric: Ping (ms) ICMP loaded median, worse: +10%}
  - {metric: TCP download sum, worse: -5%, significant: true}
`
	reportsDir     = "results/nightly-20261201T020000"
	reportsBaseDir = "results/nightly-20261130T020000"
)

var reportsStart = time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)

// spec is a run's record: its status and, when ok, the values its data file has.
type spec struct {
	status     string // ok, failed, interrupted; "" none (not run)
	ping, mbps float64
	err        string
}

// hostileError is a failed run's error as a host might give it: a terminal's
// colours, a NUL, characters XML 1.0 forbids or discourages, markup.
const hostileError = "before command on server: ssh root@192.0.2.20: \x1b[31mconnection refused\x1b[0m\x00 <b>&amp;</b> \"q\" ]]> \ufffe\u0085\x7f\nsecond line"

func regressionRuns() map[string]spec {
	return map[string]spec{
		// Ping up 49% on small: the regression.
		"tcp_4down_small_rep1": {status: "ok", ping: 15, mbps: 95},
		"tcp_4down_small_rep2": {status: "ok", ping: 15.4, mbps: 95.1},
		// Throughput down 10%, too few runs to be significant: a pass, with a note.
		"tcp_4down_hostile_rep1": {status: "ok", ping: 10.1, mbps: 85},
		"tcp_4down_hostile_rep2": {status: "ok", ping: 10.3, mbps: 85.5},
		// Not in the baseline: skipped.
		"tcp_ndown_download_streams=2_small_rep1":   {status: "ok", ping: 12, mbps: 90},
		"tcp_ndown_download_streams=2_small_rep2":   {status: "ok", ping: 12.2, mbps: 90.5},
		"tcp_ndown_download_streams=2_hostile_rep1": {status: "ok", ping: 9, mbps: 91},
		"tcp_ndown_download_streams=2_hostile_rep2": {status: "ok", ping: 9.2, mbps: 91.5},
	}
}

func baselineRuns() map[string]spec {
	return map[string]spec{
		"tcp_4down_small_rep1":   {status: "ok", ping: 10, mbps: 95},
		"tcp_4down_small_rep2":   {status: "ok", ping: 10.4, mbps: 95.2},
		"tcp_4down_hostile_rep1": {status: "ok", ping: 10, mbps: 95},
		"tcp_4down_hostile_rep2": {status: "ok", ping: 10.2, mbps: 95.4},
	}
}

// counts are a JUnit file's test cases by outcome.
type counts struct{ tests, failures, errors, skipped int }

func TestReports(t *testing.T) {
	xsd, err := filepath.Abs(filepath.Join("testdata", "junit-10.xsd"))
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	interrupted := regressionRuns()
	interrupted["tcp_4down_hostile_rep2"] = spec{status: "failed", err: hostileError}
	interrupted["tcp_ndown_download_streams=2_hostile_rep2"] = spec{status: "interrupted", err: "context canceled"}
	delete(interrupted, "tcp_ndown_download_streams=2_small_rep2")
	cases := []struct {
		name     string
		runs     map[string]spec
		baseline map[string]spec // nil: no baseline; empty: a baseline folder with no complete run
		cancel   bool            // the resume is interrupted at once: what is left stays not run
		want     counts
		wantErr  string
		exit     int
		// The ping check of tcp_4down on small, in the metrics: baseline, now,
		// regression; none when not judged.
		ping []float64
	}{
		// 8 runs, 2 tests x 2 setups x 2 thresholds, the batch's 2.
		{name: "one-regression", runs: regressionRuns(), baseline: baselineRuns(), want: counts{18, 1, 0, 4}, exit: ExitRegression,
			ping: []float64{10.2, 15.2, 1}},
		{name: "no-baseline", runs: regressionRuns(), want: counts{18, 0, 0, 8}},
		// A run failed before the resume, one was interrupted, one never ran.
		{name: "interrupted", runs: interrupted, baseline: baselineRuns(), cancel: true, want: counts{18, 1, 3, 5}, exit: ExitRunsFailed,
			ping: []float64{10.2, 15.2, 1}},
		{name: "baseline-unreadable", runs: regressionRuns(), baseline: map[string]spec{}, want: counts{18, 0, 1, 8},
			wantErr: "no complete run"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			o := reportsBatchDir(t, c.runs, c.baseline)
			o.JUnit, o.Metrics = "nightly.xml", "nightly.prom"
			ctx, cancel := context.WithCancel(context.Background())
			if c.cancel {
				cancel()
			}
			defer cancel()
			res, err := Execute(ctx, o)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("Execute: %v, want an error with %q", err, c.wantErr)
			}
			if c.wantErr == "" && res.ExitCode() != c.exit {
				t.Errorf("exit code %d, want %d", res.ExitCode(), c.exit)
			}
			// Written by way of a temporary file beside each ("." + its name +
			// digits), none left.
			for _, f := range []string{o.JUnit, o.Metrics} {
				if left, _ := filepath.Glob("." + f + "*"); len(left) != 0 {
					t.Errorf("temporary files of %s left: %v", f, left)
				}
			}
			raw, err := os.ReadFile(o.JUnit)
			if err != nil {
				t.Fatal(err)
			}
			validate(t, xsd, o.JUnit)
			if got := junitCounts(t, raw); got != c.want {
				t.Errorf("JUnit test cases %+v, want %+v", got, c.want)
			}
			prom, err := os.ReadFile(o.Metrics)
			if err != nil {
				t.Fatal(err)
			}
			fams := parseMetrics(t, prom)
			regressions := 0.0
			if len(c.ping) > 0 {
				regressions = 1
			}
			if v := gauge(t, fams, "bloatbench_batch_regressions", map[string]string{"batch": "nightly"}); v != regressions {
				t.Errorf("regressions %v, want %v", v, regressions)
			}
			if v := gauge(t, fams, "bloatbench_batch_runs", map[string]string{"batch": "nightly"}); v != 8 {
				t.Errorf("runs %v, want 8", v)
			}
			if v := gauge(t, fams, "bloatbench_batch_last_end_timestamp_seconds", map[string]string{"batch": "nightly"}); v != float64(reportsStart.Add(10*time.Hour).Unix()) {
				t.Errorf("last end %v", v)
			}
			ping := map[string]string{"batch": "nightly", "test": "tcp_4down", "streams": "4 download streams", "setup": "BFIFO 100k",
				"metric": "Ping (ms) ICMP loaded median", "units": "ms", "threshold": "+10%"}
			if len(c.ping) == 0 {
				if _, ok := fams["bloatbench_batch_check_current"]; ok {
					t.Error("check metrics without a verdict")
				}
			} else {
				for i, name := range []string{"bloatbench_batch_check_baseline", "bloatbench_batch_check_current", "bloatbench_batch_check_regression"} {
					if v := gauge(t, fams, name, ping); fmt.Sprintf("%.4f", v) != fmt.Sprintf("%.4f", c.ping[i]) {
						t.Errorf("%s %v, want %v", name, v, c.ping[i])
					}
				}
				// The hostile title reads back as it was, its escape character
				// written out.
				hostile := map[string]string{"batch": "nightly", "test": "tcp_4down", "streams": "4 download streams", "setup": `FQ "q" <&> 1.5 \x1b[1m`,
					"metric": "TCP download sum", "units": "Mbit/s", "threshold": "-5%"}
				if v := gauge(t, fams, "bloatbench_batch_check_regression", hostile); v != 0 {
					t.Errorf("hostile setup's throughput: regression %v", v)
				}
			}
			// Golden files (go test ./batch -run TestReports -update rewrites them).
			t.Chdir(pkg)
			golden.Check(t, filepath.Join("reports", c.name+".junit.xml"), raw)
			golden.Check(t, filepath.Join("reports", c.name+".prom"), prom)
		})
	}
}

// reportsBatchDir lays out, in the current folder, the batch's folder with its
// plan and the given runs' records and data files, and a baseline folder, and
// returns the options that resume it.
func reportsBatchDir(t *testing.T, runs, baseline map[string]spec) Options {
	t.Helper()
	for name, body := range map[string]string{"hosts.yaml": reportsHosts, "nightly.yaml": reportsBatch} {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := Load("nightly.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(b.Runs))
	for i, r := range b.Runs {
		ids[i] = r.ID
	}
	plan, _ := json.Marshal(Plan{Name: b.Name, BatchFile: "nightly.yaml", Started: reportsStart, Seed: 1, Shuffled: false,
		Order: ids, Runs: b.Runs, Version: "v1.2.3"})
	write := func(dir string, runs map[string]spec) {
		if err := os.MkdirAll(filepath.Join(dir, dataDir), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, RecordsFile))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for i, r := range b.Runs {
			s, ok := runs[r.ID]
			if !ok {
				continue
			}
			start := reportsStart.Add(time.Duration(i) * 70 * time.Second)
			rec := Record{ID: r.ID, Status: s.status, Error: s.err, Started: start, Ended: start.Add(62*time.Second + 500*time.Millisecond)}
			if s.status == "ok" {
				rec.Data = filepath.Join(dataDir, r.ID+datafile.Ext)
				writeRun(t, filepath.Join(dir, rec.Data), b, r, start, s)
			}
			if err := appendRecord(f, rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(reportsDir, runs)
	if err := os.WriteFile(filepath.Join(reportsDir, PlanFile), plan, 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Batch: b, Dir: reportsDir, Resume: true, Now: func() time.Time { return reportsStart.Add(10 * time.Hour) }}
	if baseline != nil {
		write(reportsBaseDir, baseline)
		o.Baseline = reportsBaseDir
	}
	return o
}

// writeRun writes a run's data file as the controller would: its setup, a ping
// of s.ping ms under load (1 ms idle), and the test's download streams sharing
// s.mbps.
func writeRun(t *testing.T, path string, b *Batch, r Run, start time.Time, s spec) {
	t.Helper()
	w, err := datafile.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := datafile.Unix(start)
	m := datafile.Metadata{Test: r.Test, Title: b.Name, Parameters: r.Parameters, StartTime: start, T0: t0, Length: 1, Delay: 0.5,
		Step: 0.2, TotalLength: 2, ToolVersion: "v1.2.3"}
	for _, su := range b.Setups {
		if su != nil && su.Name == r.Setup {
			m.Title = su.Title
			m.Setup = &datafile.Setup{Name: su.Name, Title: su.Title, Source: "inventory"}
		}
	}
	streams := 4
	if n := r.Parameters["download_streams"]; n != "" {
		fmt.Sscan(n, &streams)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Header(m))
	must(w.AddSeries(datafile.Series{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms", Host: "client", Target: "10.0.0.2"}))
	for i := 1; i <= streams; i++ {
		must(w.AddSeries(datafile.Series{Name: fmt.Sprintf("TCP download::%d", i), Kind: datafile.KindTCP, Units: "Mbits/s", Host: "client",
			Direction: "download", Flow: i}))
	}
	for k := 0; k <= 10; k++ {
		tk := t0 + float64(k)*0.2
		loaded := tk >= t0+0.5 && tk < t0+1.5
		ping := 1.0
		if loaded {
			ping = s.ping
		}
		must(w.Append("Ping (ms) ICMP", []datafile.Sample{{T: tk + 0.01, V: ping, Seq: k}}))
		if loaded {
			for i := 1; i <= streams; i++ {
				v := s.mbps / float64(streams)
				must(w.Append(fmt.Sprintf("TCP download::%d", i), []datafile.Sample{{T: tk, V: v, Dur: 0.2, Bytes: int64(v * 1e6 / 8 * 0.2)}}))
			}
		}
	}
	must(w.Close(nil))
}

// validate checks a JUnit file against the Jenkins/Surefire schema with xmllint.
func validate(t *testing.T, xsd, file string) {
	t.Helper()
	xmllint, err := exec.LookPath("xmllint")
	if err != nil {
		t.Fatalf("xmllint is not installed (Debian's libxml2-utils): run scripts/install-deps as root. It checks the JUnit XML against %s", xsd)
	}
	out, err := exec.Command(xmllint, "--noout", "--schema", xsd, file).CombinedOutput()
	if err != nil {
		t.Fatalf("%s does not validate against %s: %v\n%s", file, filepath.Base(xsd), err, out)
	}
}

// junitCounts counts a JUnit file's test cases by their outcome, reading its
// elements (not the attributes that count them, which it checks against them).
func junitCounts(t *testing.T, raw []byte) counts {
	t.Helper()
	var n counts
	var top struct {
		Tests, Failures, Errors string
	}
	dec := xml.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("JUnit XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch se.Name.Local {
		case "testsuites":
			for _, a := range se.Attr {
				switch a.Name.Local {
				case "tests":
					top.Tests = a.Value
				case "failures":
					top.Failures = a.Value
				case "errors":
					top.Errors = a.Value
				}
			}
		case "testcase":
			n.tests++
		case "failure":
			n.failures++
		case "error":
			n.errors++
		case "skipped":
			n.skipped++
		}
	}
	if want := (struct{ Tests, Failures, Errors string }{fmt.Sprint(n.tests), fmt.Sprint(n.failures), fmt.Sprint(n.errors)}); top != want {
		t.Errorf("testsuites says %+v, its elements %+v", top, want)
	}
	return n
}

// parseMetrics reads a metrics file with Prometheus's own parser, names checked
// as the textfile collector checks them, and checks what the collector would
// refuse: a family without HELP, a family whose series differ in their label
// names, a series twice.
func parseMetrics(t *testing.T, raw []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, raw)
	}
	for name, f := range fams {
		if f.GetHelp() == "" || f.GetType() != dto.MetricType_GAUGE {
			t.Errorf("%s: help %q, type %v", name, f.GetHelp(), f.GetType())
		}
		var labelNames string
		seen := map[string]bool{}
		for i, m := range f.GetMetric() {
			var names, set []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
				set = append(set, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(names)
			sort.Strings(set)
			if i == 0 {
				labelNames = strings.Join(names, ",")
			} else if strings.Join(names, ",") != labelNames {
				t.Errorf("%s: labels %v, the first series' %s", name, names, labelNames)
			}
			if key := strings.Join(set, "\x00"); seen[key] {
				t.Errorf("%s: series %v twice", name, set)
			} else {
				seen[key] = true
			}
		}
	}
	return fams
}

// gauge is the value of the series of name with exactly labels.
func gauge(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			if l.GetValue() != "" {
				got[l.GetName()] = l.GetValue()
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(labels) {
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s%v in the metrics", name, labels)
	return 0
}

func TestVisible(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain text, tab\tnewline\n and é ✓", "plain text, tab\tnewline\n and é ✓"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"nul\x00 bell\x07 del\x7f", `nul\x00 bell\x07 del\x7f`},
		{"c1 \u0085 \u009b", `c1 \x85 \x9b`},
		{"not chars \ufffe \uffff", `not chars \uFFFE \uFFFF`},
		{"bad utf-8 \xff\xfe, real \ufffd", `bad utf-8 \xff\xfe, real ` + "\ufffd"},
		{"", ""},
	}
	for _, c := range cases {
		if got := visible(c.in); got != c.want {
			t.Errorf("visible(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestClassName(t *testing.T) {
	cases := []struct{ test, streams, setup, want string }{
		{"tcp_4down", "4 download streams", "FQ_CODEL", "tcp_4down (4 download streams).FQ_CODEL"},
		{"tcp_ndown", "cc=bbr, download_streams=4", "fq_codel 1.5 Mbit/s", "tcp_ndown (cc=bbr, download_streams=4).fq_codel 1_5 Mbit/s"},
		{"rrul", "", "", "rrul.no setup"},
	}
	for _, c := range cases {
		if got := className(c.test, c.streams, c.setup); got != c.want {
			t.Errorf("className(%q, %q, %q) = %q, want %q", c.test, c.streams, c.setup, got, c.want)
		}
	}
}
