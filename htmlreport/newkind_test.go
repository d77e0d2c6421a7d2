package htmlreport

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

// A kind of latency no package knows, declared here and nowhere else, is a
// first-class latency because its series says what it measures: it gets whole,
// idle and loaded rows with ICMP ping's numbers for the same samples, compare
// lines, and a line on the timeseries' latency axis, not a chart of its unit.
func TestALatencyKindOfItsOwn(t *testing.T) {
	const kind = "test-only-latency"
	d := run("NEWKIND", 20)
	se := datafile.Series{Name: "Latency (ms) new kind", Kind: kind, Units: "ms", Measure: datafile.MeasureRTT}
	d.Series = append(d.Series, se)
	d.Samples[se.Name] = d.Samples["Ping (ms) ICMP"]
	if c := datafile.Classify(se); c.Role != datafile.RoleProbe || c.ICMP {
		t.Fatalf("classified %+v, want a probe of its own", c)
	}

	rows := map[string]report.Row{}
	for _, r := range report.Summarize(d).Rows {
		rows[r.Name] = r
	}
	for _, suffix := range []string{"", report.LoadedSuffix, report.IdleSuffix} {
		want, got := rows["Ping (ms) ICMP"+suffix], rows[se.Name+suffix]
		if got.Points == 0 || got.Points != want.Points || got.Median != want.Median || got.Avg != want.Avg || !got.Own {
			t.Errorf("row %q: %+v, want ping's numbers %+v, as a row of the test's own", se.Name+suffix, got, want)
		}
	}

	// Two setups compared: the new kind's medians are lines of the comparison.
	other := run("OTHER", 30)
	other.Series = append(other.Series, se)
	other.Samples[se.Name] = other.Samples["Ping (ms) ICMP"]
	cs := report.Compare([]report.Compared{report.CompareInput(d, report.Options{}), report.CompareInput(other, report.Options{})}, "")
	lines := map[string]bool{}
	for _, c := range cs {
		for _, m := range c.Metrics {
			lines[m.Name] = true
		}
	}
	for _, want := range []string{se.Name + " median", se.Name + " loaded median", se.Name + " idle median"} {
		if !lines[want] {
			t.Errorf("the comparison has no line %q (it has %v)", want, lines)
		}
	}

	var b bytes.Buffer
	if err := Write(&b, "new kind", []Run{RunOf(d)}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !regexp.MustCompile(`"name":"Latency \(ms\) new kind"[^}]*"yAxisIndex":1`).MatchString(page) {
		t.Error("the new kind is not drawn on the timeseries' latency axis")
	}
	if strings.Contains(page, "Series in ms over time") {
		t.Error("the new kind has a chart of its unit among the test's other series")
	}
}
