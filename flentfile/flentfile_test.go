package flentfile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/flentsummary"
	"github.com/bloatbench/bloatbench/internal/golden"
	"github.com/bloatbench/bloatbench/report"
)

// A file flent 2.1.1 made (`flent ping -H 127.0.0.1 -l 4`, fping and irtt) read by
// bloatbench gives the numbers flent printed for it (`flent -i FILE -f summary`,
// kept beside it).
func TestReadFlentMadeFile(t *testing.T) {
	run, err := Read("testdata/ping.loopback.flent-2.1.1.flent.gz")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile("testdata/ping.loopback.flent-summary.txt")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := flentsummary.Parse(string(text))
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]report.Row{}
	for _, r := range report.Summarize(run).Rows {
		ours[r.Name] = r
	}
	for name, f := range theirs {
		o, ok := ours[name]
		if !ok {
			t.Errorf("flent has row %q, we do not", name)
			continue
		}
		for _, v := range [][3]any{{"avg", o.Avg, f.Avg}, {"median", o.Median, f.Median}, {"99th %", o.P99, f.P99}} {
			if d := math.Abs(v[1].(float64) - v[2].(float64)); d > 0.005+1e-9 {
				t.Errorf("%s %s: ours %.4f, flent %.2f", name, v[0], v[1], v[2])
			}
		}
		// Without a cut, flent takes its mean from the series' MEAN_VALUE and counts
		// the points of its grid (20), not the replies (irtt lost one of 20 probes):
		// so do we.
		if o.Points != f.Points {
			t.Errorf("%s: %d points, flent %d, replies %d", name, o.Points, f.Points, len(run.Samples[name]))
		}
	}
	if run.Metadata.Test != "ping" || run.Metadata.Title != "loopback" {
		t.Errorf("metadata: test %q title %q", run.Metadata.Test, run.Metadata.Title)
	}
}

func syntheticRun() *datafile.Run {
	start := time.Date(2026, 11, 29, 18, 41, 47, 0, time.UTC)
	t0 := datafile.Unix(start)
	run := &datafile.Run{Path: "x.bb.json.gz", Samples: map[string][]datafile.Sample{}, Metadata: datafile.Metadata{
		Test: "tcp_2down", Title: "MQ + FQ_CODEL", StartTime: start, T0: t0, Length: 2, Delay: 1, Step: 0.5, TotalLength: 4,
		Parameters: map[string]string{"download_streams": "2"},
		Hosts:      []datafile.Host{{Role: "client", Name: "client"}, {Role: "server", Name: "server", TestIP: "198.18.0.2"}},
	}}
	ping := datafile.Series{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms"}
	run.Series = append(run.Series, ping)
	for k := 0; k <= 8; k++ {
		s := datafile.Sample{T: t0 + float64(k)*0.5 + 0.01, V: 1 + float64(k%3), Seq: k}
		if k == 4 {
			s = datafile.Sample{T: t0 + 2, Seq: k, Lost: true}
		}
		run.Samples[ping.Name] = append(run.Samples[ping.Name], s)
	}
	for f := 1; f <= 2; f++ {
		se := datafile.Series{Name: fmt.Sprintf("TCP download::%d", f), Kind: datafile.KindTCP, Units: "Mbits/s", Direction: "download", Flow: f}
		run.Series = append(run.Series, se)
		for k := 1; k <= 4; k++ {
			run.Samples[se.Name] = append(run.Samples[se.Name], datafile.Sample{T: t0 + 1 + float64(k)*0.5, Dur: 0.5, V: float64(10 * f * k)})
		}
	}
	return run
}

// The export's JSON, as flent reads it: metadata, the grid and the raw values.
func TestExportGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x"+Ext)
	if _, err := Export(syntheticRun(), path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var pretty bytes.Buffer
	// The file ends in the newline json.Encoder writes; the golden file has none.
	if err := json.Indent(&pretty, bytes.TrimSpace(raw), "", "  "); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "export.flent.json.golden", pretty.Bytes())

	// Read back, the grid gives the summary's throughput again.
	back, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want, got := map[string]report.Row{}, map[string]report.Row{}
	for _, r := range report.Summarize(syntheticRun()).Rows {
		want[r.Name] = r
	}
	for _, r := range report.Summarize(back).Rows {
		got[r.Name] = r
	}
	for _, name := range []string{"TCP download::1", "TCP download::2", "TCP download sum", "TCP download avg"} {
		if math.Abs(got[name].Avg-want[name].Avg) > 1e-9 || got[name].Points != want[name].Points {
			t.Errorf("%s after a round trip: %+v, want %+v", name, got[name], want[name])
		}
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"notgz.flent.gz": "{}",
		"version.flent":  `{"version": 9, "metadata": {}, "x_values": [], "results": {}, "raw_values": {}}`,
		"nostep.flent":   `{"version": 4, "metadata": {"T0": "2026-11-29T18:41:47.000000Z"}, "x_values": [], "results": {}, "raw_values": {}}`,
		"noseries.flent": `{"version": 4, "metadata": {"T0": "2026-11-29T18:41:47.000000Z", "STEP_SIZE": 0.2}, "x_values": [0], "results": {"x": [1]}, "raw_values": {}}`,
		"notjson.flent":  `not json`,
		"badtime.flent":  `{"version": 4, "metadata": {"T0": "yesterday"}, "x_values": [], "results": {}, "raw_values": {}}`,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o644)
		if _, err := Read(p); err == nil {
			t.Errorf("%s: read without error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// Without a cut, a flent file's row prints the series' MEAN_VALUE with the points of
// its grid, as flent does; the TCP sum and average a file lacks get the sum and mean
// of the flows' (flent computes them so on load); a MEAN_VALUE of 0 is none (flent
// falls back to the values); a cut counts the values.
func TestReportedMeans(t *testing.T) {
	results := `{"TCP download::1": [null, 10, 12, 14], "TCP download::2": [null, 20, 22, 24], "Ping (ms) ICMP": [1, 2, 3, 4]}`
	raw := `{"Ping (ms) ICMP": [{"t": 1795985804.5, "val": 1}, {"t": 1795985804.7, "val": 2}, {"t": 1795985804.9, "val": 3}]}`
	for _, tc := range []struct {
		name string
		meta string
		cut  *[2]float64
		rows map[string]report.Row // avg and points
	}{
		{"means", `{"TCP download::1": {"MEAN_VALUE": 11.5}, "TCP download::2": {"MEAN_VALUE": 21.5}, "Ping (ms) ICMP": {"MEAN_VALUE": 2.001}}`, nil,
			map[string]report.Row{"TCP download::1": {Avg: 11.5, Points: 4}, "TCP download sum": {Avg: 33, Points: 4}, "TCP download avg": {Avg: 16.5, Points: 4},
				"Ping (ms) ICMP": {Avg: 2.001, Points: 4}, "Ping (ms) ICMP loaded": {Avg: 2, Points: 3}}},
		{"zero is none", `{"Ping (ms) ICMP": {"MEAN_VALUE": 0}}`, nil,
			map[string]report.Row{"Ping (ms) ICMP": {Avg: 2, Points: 3}, "TCP download::1": {Avg: 12, Points: 3}}},
		// (A series with no raw values, the flows here, flent cuts on its grid with
		// both ends in: TestFlentGridOnlySeries holds that to flent.)
		{"a cut counts the values", `{"TCP download::1": {"MEAN_VALUE": 11.5}, "Ping (ms) ICMP": {"MEAN_VALUE": 2.001}}`, &[2]float64{0, 0},
			map[string]report.Row{"Ping (ms) ICMP": {Avg: 2, Points: 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := fmt.Sprintf(`{"version": 4, "x_values": [0, 0.2, 0.4, 0.6], "results": %s, "raw_values": %s,
				"metadata": {"NAME": "tcp_2down", "T0": "2026-11-29T20:56:44.500000Z", "STEP_SIZE": 0.2, "LENGTH": 0.6, "TOTAL_LENGTH": 0.6, "SERIES_META": %s}}`, results, raw, tc.meta)
			run, err := decode("x.flent", strings.NewReader(doc))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]report.Row{}
			for _, r := range report.SummarizeWith(run, report.Options{Cut: tc.cut}).Rows {
				got[r.Name] = r
			}
			for name, want := range tc.rows {
				if g := got[name]; math.Abs(g.Avg-want.Avg) > 1e-9 || g.Points != want.Points {
					t.Errorf("%s: avg %v points %d, want %v %d", name, g.Avg, g.Points, want.Avg, want.Points)
				}
			}
		})
	}
}

// The units flent's test definitions give series its runners fill in, for any host
// name (IPv6 addresses bring their own "::").
func TestTestUnits(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"VoIP::delay", "ms"},
		{"TCP upload fairness", "Idx"},
		{"qdisc_stats_localhost::dropped", "packets"},
		{"qdisc_stats_fe80::1::ecn_mark", "packets"},
		{"qdisc_stats_localhost::backlog_bytes", ""},
		{"wifi_stats_localhost::airtime_rx::02:00:00:00:01:00", "us"},
		{"wifi_stats_fe80::1::airtime_tx::02:00:00:00:01:00", "us"},
		{"wifi_stats_ap::airtime_total::02:00:00:00:01:00", "us"},
		{"wifi_stats_ap::airtime_sum", "us"},
		{"wifi_stats_ap::airtime_fairness", "us"},
		{"wifi_stats_2001:db8::2::avg_aggr_size::02:00:00:00:01:00", "packets"},
		{"wifi_stats_ap", ""},
		{"netstat_localhost::DelayedACKs", ""},
		{"Ping (ms) ICMP", ""},
	} {
		if got := testUnits(tc.name); got != tc.want {
			t.Errorf("testUnits(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
