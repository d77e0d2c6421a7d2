package flentfile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/internal/flentsummary"
	"github.com/bloatbench/bloatbench/report"
)

// labRun is a run shaped as our tests make them: ping from t0 over the whole run
// (idle lead-in, loaded, lead-out; a lost probe), flows from t0 + delay, one of
// them with a gap and one starting late, so the sum and average have points with
// fewer flows. t0 has digits below the microsecond that flent's T0 drops.
func labRun(test, dir string, flows int) *datafile.Run {
	start := time.Date(2026, 11, 30, 6, 41, 4, 123456789, time.UTC)
	t0 := datafile.Unix(start)
	const step, delay, length = 0.2, 2.0, 8.0
	total := length + 2*delay
	run := &datafile.Run{Path: "x.bb.json.gz", Samples: map[string][]datafile.Sample{}, Metadata: datafile.Metadata{
		Test: test, Title: "htb 100mbit", StartTime: start, T0: t0, Length: length, Delay: delay, Step: step, TotalLength: total,
		Parameters: map[string]string{dir + "_streams": fmt.Sprint(flows)},
		Hosts:      []datafile.Host{{Role: "client", Name: "client"}, {Role: "server", Name: "server", TestIP: "198.18.0.2"}},
	}}
	ping := datafile.Series{Name: report.PingRow, Kind: datafile.KindPing, Units: "ms", Host: "client"}
	run.Series = append(run.Series, ping)
	for k := 0; float64(k)*step < total; k++ {
		sent := t0 + float64(k)*step
		rtt := 0.05 + 0.001*float64(k%7)
		switch {
		case sent > t0+delay+length:
			rtt = 0.4 + 0.01*float64(k%5)
		case sent >= t0+delay:
			rtt = 15 + 0.37*float64(k%13)
		}
		s := datafile.Sample{T: sent + rtt/1e3, V: rtt, Seq: k}
		if k == 23 {
			s = datafile.Sample{T: sent + 1, Seq: k, Lost: true}
		}
		run.Samples[ping.Name] = append(run.Samples[ping.Name], s)
	}
	for f := 1; f <= flows; f++ {
		se := datafile.Series{Name: fmt.Sprintf("TCP %s::%d", dir, f), Kind: datafile.KindTCP, Units: "Mbits/s", Host: "client", Direction: dir, Flow: f}
		run.Series = append(run.Series, se)
		for k := 1; float64(k)*step <= length; k++ {
			if f == 2 && k >= 10 && k < 14 || f == 3 && k < 6 {
				continue // a stall; a late start
			}
			v := 20 + float64(f) + 3.3*float64((k*f)%5)
			run.Samples[se.Name] = append(run.Samples[se.Name], datafile.Sample{T: t0 + delay + float64(k)*step + 0.013, Dur: step, V: v})
		}
	}
	return run
}

// flent 2.1.1 summarises our export of each of our tests with our numbers, row for
// row and point for point, with no cut and with the cuts people use (on grid points,
// between them, from the start, back from the end).
func TestFlentSummarisesOurExport(t *testing.T) {
	runs := map[string]*datafile.Run{
		"tcp_4down":   labRun("tcp_4down", "download", 4),
		"tcp_nup":     labRun("tcp_nup", "upload", 3),
		"tcp_128down": labRun("tcp_128down", "download", 12), // tcp_ndown with a count flent has no test of
	}
	dir := t.TempDir()
	for name, run := range runs {
		path, err := Export(run, filepath.Join(dir, name+Ext))
		if err != nil {
			t.Fatal(err)
		}
		for _, cut := range []*[2]float64{nil, {2, 10}, {2.1, 9.9}, {0, 5}, {3, -2}, {0, 0}} {
			label := "no cut"
			if cut != nil {
				label = fmt.Sprintf("--cut %g,%g", cut[0], cut[1])
			}
			t.Run(name+" "+label, func(t *testing.T) { sameAsFlent(t, path, run, cut) })
		}
	}
}

// cutArgs is flent's option for a cut.
func cutArgs(cut *[2]float64) []string {
	if cut == nil {
		return nil
	}
	return []string{"--data-cutoff", fmt.Sprintf("%g,%g", cut[0], cut[1])}
}

// sameAsFlent holds our summary of run to flent's of the file at path, with the same
// cut: every row flent prints, avg, median and 99th percentile to flent's 0.01 (any
// value where flent prints N/A), and the count.
func sameAsFlent(t *testing.T, path string, run *datafile.Run, cut *[2]float64) {
	t.Helper()
	theirs, out, err := flentsummary.Run(path, cutArgs(cut)...)
	if err != nil {
		t.Fatal(err)
	}
	// A file flent finds nothing in would hold nothing to flent: each has rows with data.
	withData := 0
	for _, r := range theirs {
		if !r.NoData && r.Points > 0 {
			withData++
		}
	}
	if withData == 0 {
		t.Fatalf("flent printed no row with data for %s (cut %v):\n%s", path, cut, out)
	}
	checkRows(t, theirs, report.SummarizeWith(run, report.Options{Cut: cut}).Rows)
	if len(theirs) < 4 || t.Failed() || testing.Verbose() {
		t.Logf("flent:\n%s", out)
	}
}

// checkRows holds our rows to flent's: every row flent prints we print, by the same
// name, avg, median and 99th percentile to flent's 0.01 (any value where flent
// prints N/A), the count and the units; a row flent has no data for we print with
// no points, or not at all. flent prints a series in bytes with its average and
// median divided by a factor and other units (util.format_bytes: "Kbytes" divided by
// 1, under 1 KiB by the value itself, the 99th percentile never); we print bytes,
// and compare ours as flent would have printed them.
func checkRows(t *testing.T, theirs map[string]flentsummary.Row, rows []report.Row) {
	t.Helper()
	ours := map[string]report.Row{}
	for _, r := range rows {
		ours[r.Name] = r
	}
	for row, f := range theirs {
		o, ok := ours[row]
		if f.NoData {
			if ok && o.Points != 0 {
				t.Errorf("%s: flent has no data, we have %d points", row, o.Points)
			}
			continue
		}
		if !ok {
			t.Errorf("flent prints %q, we do not", row)
			continue
		}
		if o.Units == "bytes" && o.Avg != 0 {
			factor, units := formatBytes(math.Max(o.Avg, o.Median))
			o.Avg, o.Median, o.Units = o.Avg/factor, o.Median/factor, units
		}
		for _, v := range []struct {
			what string
			o, f float64
		}{{"avg", o.Avg, f.Avg}, {"median", o.Median, f.Median}, {"99th %", o.P99, f.P99}} {
			if !math.IsNaN(v.f) && !(math.Abs(v.o-v.f) <= 0.005+1e-9) {
				t.Errorf("%s %s: ours %.4f, flent %.2f", row, v.what, v.o, v.f)
			}
		}
		if o.Points != f.Points {
			t.Errorf("%s: ours %d points, flent %d", row, o.Points, f.Points)
		}
		if o.Units != f.Units {
			t.Errorf("%s: ours in %q, flent's in %q", row, o.Units, f.Units)
		}
	}
}

// formatBytes is flent 2.1.1's util.format_bytes, as it is.
func formatBytes(n float64) (float64, string) {
	switch {
	case n > 1<<30:
		return 1 << 30, "Gbytes"
	case n > 1<<20:
		return 1 << 20, "Mbytes"
	case n > 1<<10:
		return 1, "Kbytes" // 1**10 in flent
	default:
		return n, "bytes"
	}
}

// A flent file whose throughput is on its grid only (no raw values; flent's own sums
// and averages are always so, and it computes those a file lacks as it loads it):
// without a cut each row is the series' MEAN_VALUE over flent's grid points, with a
// cut flent keeps the grid points from START to END, both ends in, and so do we.
func TestFlentGridOnlySeries(t *testing.T) {
	var b strings.Builder
	x, flow1, flow2, ping := []string{}, []string{"null"}, []string{"null", "null"}, []string{}
	var raw []string
	const t0 = 1795985804.5
	for k := 0; k <= 20; k++ {
		x = append(x, fmt.Sprint(float64(k)*0.2)) // as flent's aggregator makes them
		if k >= 1 {
			flow1 = append(flow1, fmt.Sprint(10+k%3))
		}
		if k >= 2 {
			flow2 = append(flow2, fmt.Sprint(20+k%4))
		}
		if k < 20 {
			v := 1 + 0.1*float64(k%5)
			ping = append(ping, fmt.Sprint(v))
			raw = append(raw, fmt.Sprintf(`{"t": %v, "val": %v}`, t0+float64(k)*0.2+0.01, v))
		} else {
			ping = append(ping, "null")
		}
	}
	fmt.Fprintf(&b, `{"version": 4, "x_values": [%s], "results": {"TCP download::1": [%s], "TCP download::2": [%s], "Ping (ms) ICMP": [%s]},
		"raw_values": {"Ping (ms) ICMP": [%s]},
		"metadata": {"NAME": "tcp_2down", "TITLE": "grid", "T0": "2026-11-29T20:56:44.500000Z", "TIME": "2026-11-29T20:56:44.500000Z",
		"STEP_SIZE": 0.2, "LENGTH": 2, "TOTAL_LENGTH": 4, "HOST": "h", "HOSTS": ["h"], "LOCAL_HOST": "l", "IP_VERSION": 4, "TEST_PARAMETERS": {},
		"SERIES_META": {"TCP download::1": {"MEAN_VALUE": 11.25, "UNITS": "Mbits/s"}, "TCP download::2": {"MEAN_VALUE": 21.5, "UNITS": "Mbits/s"},
		"Ping (ms) ICMP": {"MEAN_VALUE": 1.2, "UNITS": "ms"}}}}`,
		strings.Join(x, ", "), strings.Join(flow1, ", "), strings.Join(flow2, ", "), strings.Join(ping, ", "), strings.Join(raw, ", "))
	path := filepath.Join(t.TempDir(), "grid"+Ext)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(b.String()))
	zw.Close()
	if err := os.WriteFile(path, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []*[2]float64{nil, {1, 3}, {0.6, -1}, {0, 0}, {0.1, 2.9}} {
		t.Run(fmt.Sprint(cutArgs(cut)), func(t *testing.T) { sameAsFlent(t, path, run, cut) })
	}
}

// flent 2.1.1 draws its plots of our exports: the test's default (totals, for
// tcp_ndown and tcp_nup), the ping CDF, and the throughput over time.
func TestFlentPlotsOurExport(t *testing.T) {
	if _, err := exec.LookPath("flent"); err != nil {
		t.Fatalf("flent is missing (bash scripts/install-deps installs it): %v", err)
	}
	dir := t.TempDir()
	for _, run := range []*datafile.Run{labRun("tcp_4down", "download", 4), labRun("tcp_nup", "upload", 3)} {
		path, err := Export(run, filepath.Join(dir, run.Metadata.Test+Ext))
		if err != nil {
			t.Fatal(err)
		}
		dirPlot := "download"
		if run.Metadata.Test == "tcp_nup" {
			dirPlot = "upload"
		}
		for _, plot := range []string{"", "ping_cdf", "totals", dirPlot} {
			png := filepath.Join(dir, fmt.Sprintf("%s-%s.png", run.Metadata.Test, plot))
			args := []string{"-i", path, "-f", "plot", "-o", png}
			if plot != "" {
				args = append(args, "-p", plot)
			}
			out, err := exec.Command("flent", args...).CombinedOutput()
			if err != nil {
				t.Errorf("flent %v: %v\n%s", args, err, out)
				continue
			}
			b, err := os.ReadFile(png)
			if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) || bytes.Contains(out, []byte("Traceback")) {
				t.Errorf("flent %v drew no PNG (%v):\n%s", args, err, out)
			}
		}
	}
}

// Our sum and average over the flows are flent's: with them taken out of an export,
// flent computes them itself as it loads the file (SumRunner and AverageRunner over
// the flows present at each grid point), and its numbers are still ours (it prints
// N/A for their median and 99th percentile, which we print).
func TestFlentComputesOurSumAndAverage(t *testing.T) {
	dir := t.TempDir()
	for _, run := range []*datafile.Run{labRun("tcp_4down", "download", 4), labRun("tcp_nup", "upload", 3)} {
		path, err := Export(run, filepath.Join(dir, run.Metadata.Test+Ext))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var f map[string]any
		if err := json.NewDecoder(zr).Decode(&f); err != nil {
			t.Fatal(err)
		}
		dir := run.Series[1].Direction
		for _, key := range []string{"results", "raw_values"} {
			delete(f[key].(map[string]any), "TCP "+dir+" sum")
			delete(f[key].(map[string]any), "TCP "+dir+" avg")
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		if err := json.NewEncoder(zw).Encode(f); err != nil {
			t.Fatal(err)
		}
		zw.Close()
		if err := os.WriteFile(path, gz.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cut := range []*[2]float64{nil, {2.1, 9.9}} {
			t.Run(fmt.Sprint(run.Metadata.Test, " ", cutArgs(cut)), func(t *testing.T) {
				theirs, out, err := flentsummary.Run(path, cutArgs(cut)...)
				if err != nil {
					t.Fatal(err)
				}
				ours := map[string]report.Row{}
				for _, r := range report.SummarizeWith(run, report.Options{Cut: cut}).Rows {
					ours[r.Name] = r
				}
				for _, name := range []string{"TCP " + dir + " sum", "TCP " + dir + " avg"} {
					f, o := theirs[name], ours[name]
					if !math.IsNaN(f.Median) || math.Abs(o.Avg-f.Avg) > 0.005+1e-9 || o.Points != f.Points {
						t.Errorf("%s: flent computes avg %.2f over %d points (median %v), we %.4f over %d\n%s", name, f.Avg, f.Points, f.Median, o.Avg, o.Points, out)
					}
				}
			})
		}
	}
}

// A file as flent records tcp_2down with netperf and fping (made by hand to flent
// 2.1.1's format version 4: netperf's interim results as raw values, {t, val, dur},
// irregular and with a gap; the grid interpolated from them; the sum and average on
// the grid with the flows' MEAN_VALUEs added up; fping's replies with a lost probe).
// flent summarises a flow from its raw values, not its grid, and so do we: its avg
// (netperf's end-of-test figure without a cut), median, 99th percentile and count,
// cut or not. flent's summary without a cut is kept beside the file.
func TestReadFlentRecordedRawValues(t *testing.T) {
	const path = "testdata/tcp_2down.netperf-raw.flent.gz"
	run, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"TCP download::1", "TCP download::2"} {
		if len(run.Raw[name]) == 0 {
			t.Errorf("%s: no raw values read", name)
		}
	}
	t.Run("kept summary", func(t *testing.T) {
		text, err := os.ReadFile("testdata/tcp_2down.netperf-raw.flent-summary.txt")
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
		if len(theirs) != 5 {
			t.Errorf("flent's kept summary has %d rows, want 5", len(theirs))
		}
		for name, f := range theirs {
			o, ok := ours[name]
			if !ok {
				t.Errorf("flent has row %q, we do not", name)
				continue
			}
			for _, v := range [][3]any{{"avg", o.Avg, f.Avg}, {"median", o.Median, f.Median}, {"99th %", o.P99, f.P99}} {
				if d := math.Abs(v[1].(float64) - v[2].(float64)); !math.IsNaN(v[2].(float64)) && !(d <= 0.005+1e-9) {
					t.Errorf("%s %s: ours %.4f, flent %.2f", name, v[0], v[1], v[2])
				}
			}
			if o.Points != f.Points {
				t.Errorf("%s: %d points, flent %d", name, o.Points, f.Points)
			}
		}
	})
	for _, cut := range []*[2]float64{nil, {1, 5}, {0, 0}, {1.5, -1.3}, {2, 4}, {0.1, 3.3}} {
		t.Run("flent "+fmt.Sprint(cutArgs(cut)), func(t *testing.T) { sameAsFlent(t, path, run, cut) })
	}
}
