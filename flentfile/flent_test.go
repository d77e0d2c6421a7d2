package flentfile

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
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
			var args []string
			label := "no cut"
			if cut != nil {
				label = fmt.Sprintf("--cut %g,%g", cut[0], cut[1])
				args = []string{"--data-cutoff", fmt.Sprintf("%g,%g", cut[0], cut[1])}
			}
			t.Run(name+" "+label, func(t *testing.T) {
				theirs, out, err := flentsummary.Run(path, args...)
				if err != nil {
					t.Fatal(err)
				}
				ours := map[string]report.Row{}
				for _, r := range report.SummarizeWith(run, report.Options{Cut: cut}).Rows {
					ours[r.Name] = r
				}
				for row, f := range theirs {
					o, ok := ours[row]
					if !ok {
						t.Errorf("flent prints %q, we do not", row)
						continue
					}
					for _, v := range []struct {
						what string
						o, f float64
					}{{"avg", o.Avg, f.Avg}, {"median", o.Median, f.Median}, {"99th %", o.P99, f.P99}} {
						if !(math.Abs(v.o-v.f) <= 0.005+1e-9) {
							t.Errorf("%s %s: ours %.4f, flent %.2f", row, v.what, v.o, v.f)
						}
					}
					if o.Points != f.Points {
						t.Errorf("%s: ours %d points, flent %d", row, o.Points, f.Points)
					}
				}
				if len(theirs) < 4 || t.Failed() || testing.Verbose() {
					t.Logf("flent:\n%s", out)
				}
			})
		}
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
