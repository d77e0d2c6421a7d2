package flentfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/internal/flentsummary"
	"github.com/bloatbench/bloatbench/report"
)

// Files flent 2.1.1 recorded with its own runners on this project's machine
// (scripts/record-flent-fixtures: fping, irtt, iperf 2, D-ITG, cpu_stats and tc):
// each reads, and our summary prints every row flent's printed for it then (kept
// beside it), by the same name, with its avg, median and 99th percentile to flent's
// 0.01 and its count; and flent run now on the same file agrees with us with no cut
// and with cuts.
func TestFlentRecordedFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/recorded/*.flent.gz")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("%d recorded flent files under testdata/recorded, want the 3 the script records", len(files))
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".flent.gz")
		t.Run(name, func(t *testing.T) {
			run, err := Read(path)
			if err != nil {
				t.Fatal(err)
			}
			text, err := os.ReadFile(strings.TrimSuffix(path, ".flent.gz") + ".summary.txt")
			if err != nil {
				t.Fatal(err)
			}
			theirs, err := flentsummary.Parse(string(text))
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, theirs, report.Summarize(run).Rows)
			if t.Failed() {
				t.Logf("flent printed:\n%s", text)
			}
			total := run.Metadata.TotalLength
			for _, cut := range []*[2]float64{{1, -1}, {2, 0}, {0.3, -2.7}, {total / 3, 2 * total / 3}} {
				t.Run("flent "+strings.Join(cutArgs(cut), " "), func(t *testing.T) { sameAsFlent(t, path, run, cut) })
			}
		})
	}
}
