package report

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloatbench/bloatbench/datafile"
)

// A data file written by bloatbench before the job model (commit c95bfd7: series
// without dev and stat fields, the qdisc's named only in their names), summarised
// by that build: today's summary of it is the same, byte for byte (but for the start
// time's zone in CSV and JSON, below). The .want files
// are that build's output and are never rewritten by -update.
func TestSummaryOfAFileFromBeforeTheJobModel(t *testing.T) {
	dir := filepath.Join("testdata", "before-jobs")
	run, err := datafile.Read(filepath.Join(dir, "tcp_4down.bb.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	run.Path = "tcp_4down.bb.json.gz" // as that build was given it
	cases := []struct {
		want, format string
		opts         Options
		cols         Columns
	}{
		{"summary.text.want", "text", Options{}, Columns{P99: true}},
		{"summary.markdown.want", "markdown", Options{}, Columns{P99: true}},
		{"summary.csv.want", "csv", Options{}, Columns{P99: true}},
		{"summary.json.want", "json", Options{}, Columns{P99: true}},
		{"summary-cut.text.want", "text", Options{Cut: &[2]float64{1, 3}}, Columns{}},
	}
	for _, c := range cases {
		want, err := os.ReadFile(filepath.Join(dir, c.want))
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := Write(&got, c.format, []Summary{SummarizeWith(run, c.opts)}, c.cols); err != nil {
			t.Fatal(err)
		}
		if c.format == "csv" || c.format == "json" {
			// The one change since, on purpose: the machine-read formats give the
			// start with its zone (RFC 3339), where that build gave a bare local time.
			want = bytes.ReplaceAll(want, []byte(run.Metadata.StartTime.Format("2006-01-02 15:04:05")),
				[]byte(run.Metadata.StartTime.Format(time.RFC3339Nano)))
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s: today's summary differs from the one the build before the job model printed:\n%s\n--- want ---\n%s", c.want, got.Bytes(), want)
		}
	}
}
