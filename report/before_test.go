package report

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
		// What came since on purpose, beside the rows that build printed: each
		// device's drain rate, and where the delay went. They are checked below.
		sum := SummarizeWith(run, c.opts)
		sum.Delay = nil
		sum.Rows = slices.DeleteFunc(sum.Rows, func(r Row) bool { return strings.HasSuffix(r.Name, DrainSuffix) })
		var got bytes.Buffer
		if err := Write(&got, c.format, []Summary{sum}, c.cols); err != nil {
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

// The same file's additions: the drain rate of each device (the server's drains at
// htb's 100 Mbit/s, the client's carries the ACKs), and its delay put in the
// server's bfifo by the backlog estimate (the file has no sojourn): 16.5 of the
// loaded ping's 17.2 ms over idle.
func TestDelayOfAFileFromBeforeTheJobModel(t *testing.T) {
	run, err := datafile.Read(filepath.Join("testdata", "before-jobs", "tcp_4down.bb.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	s := SummarizeWith(run, Options{})
	rows := map[string]Row{}
	for _, r := range s.Rows {
		rows[r.Name] = r
	}
	if r := rows["Qdisc server:test0 drain rate"]; r.Median < 99 || r.Median > 101 || r.Points != 20 {
		t.Errorf("server drain rate %+v, want htb's 100 Mbit/s over 20 steps", r)
	}
	if r := rows["Qdisc client:test0 drain rate"]; r.Median > 2 {
		t.Errorf("client drain rate %+v: it carries only ACKs", r)
	}
	d := s.Delay
	if d == nil {
		t.Fatal("no delay attribution")
	}
	t.Logf("%s", d.Text())
	if d.Source != "backlog" || len(d.Devices) != 2 || d.QdiscShare < 0.9 || d.RingMs != 0 || math.Abs(d.ExcessMs-17.24) > 0.01 {
		t.Errorf("attribution %+v", d)
	}
	if w := d.Warning(); w != "" {
		t.Errorf("warned: %s", w)
	}
}
