package htmlreport

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/report"
)

// pageOptions are a page's charts' options by chart id, decoded.
func pageOptions(t *testing.T, page string) map[string]map[string]any {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "script" {
			var id, typ string
			for _, a := range n.Attr {
				switch a.Key {
				case "id":
					id = a.Val
				case "type":
					typ = a.Val
				}
			}
			if typ == "application/json" && n.FirstChild != nil {
				var o map[string]any
				if err := json.Unmarshal([]byte(n.FirstChild.Data), &o); err != nil {
					t.Fatalf("chart %s: %v", id, err)
				}
				out[strings.TrimSuffix(id, "-option")] = o
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return out
}

func page(t *testing.T, runs ...*datafile.Run) map[string]map[string]any {
	t.Helper()
	var rs []Run
	for _, d := range runs {
		rs = append(rs, RunOf(d))
	}
	var b bytes.Buffer
	if err := Write(&b, "scales", rs); err != nil {
		t.Fatal(err)
	}
	return pageOptions(t, b.String())
}

// yAxis is a chart's value axis i: its name, min and max (nil where not set).
func yAxis(t *testing.T, o map[string]any, i int) (name string, lo, hi any) {
	t.Helper()
	axes, _ := o["yAxis"].([]any)
	if i >= len(axes) {
		t.Fatalf("no y axis %d in %v", i, o["yAxis"])
	}
	a := axes[i].(map[string]any)
	name, _ = a["name"].(string)
	return name, a["min"], a["max"]
}

// Every run's ping is on one scale, from 0 to the largest reply of any run of the
// page rounded up, whichever run it is of; so is every series of one unit.
func TestOneLatencyScalePerPage(t *testing.T) {
	withRR := func(d *datafile.Run, ms float64) *datafile.Run {
		d.Series = append(d.Series, datafile.Series{Name: "UDP RR", Kind: "udp_rr", Units: "ms"})
		d.Samples["UDP RR"] = []datafile.Sample{{T: d.Metadata.T0 + 1, V: ms}, {T: d.Metadata.T0 + 2, V: ms / 2}}
		return d
	}
	cases := []struct {
		name         string
		runs         []*datafile.Run
		ping, rr     float64
		pingAxisName string
	}{
		// run's replies are pingMs + 0, 1, 2.
		{"bloated and not", []*datafile.Run{withRR(run("PFIFO", 40), 3), withRR(run("FQ_CODEL", 5), 0.7)}, 50, 5, "ping (ms)"},
		{"one run", []*datafile.Run{withRR(run("PFIFO", 40), 3)}, 50, 5, "ping (ms)"},
		{"all on one power of ten", []*datafile.Run{withRR(run("A", 3), 12), withRR(run("B", 1), 20)}, 5, 20, "ping (ms)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := page(t, c.runs...)
			for i := range c.runs {
				ts := o["ts"+string(rune('0'+i))]
				name, lo, hi := yAxis(t, ts, 1)
				if name != c.pingAxisName || lo != 0.0 || hi != c.ping {
					t.Errorf("run %d: ping axis %q from %v to %v, want %q from 0 to %v", i, name, lo, hi, c.pingAxisName, c.ping)
				}
				if _, _, hi := yAxis(t, ts, 0); hi != nil {
					t.Errorf("run %d: the throughput axis has a max of %v: it is the chart's own", i, hi)
				}
				ot := o["ot"+string(rune('0'+i))+"-0"]
				if _, lo, hi := yAxis(t, ot, 0); lo != 0.0 || hi != c.rr {
					t.Errorf("run %d: the ms series' axis from %v to %v, want 0 to %v", i, lo, hi, c.rr)
				}
			}
		})
	}
}

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{42, 50}, {50, 50}, {7, 10}, {1.2, 2}, {2.2, 2.5}, {0.03, 0.05}, {100, 100}, {101, 200},
		{40, 50},             // 40 is not 1, 2, 2.5 or 5 times ten
		{20.00000000001, 20}, // a float's noise above 20 keeps 20's axis
		{0, 0}, {-3, 0}, {math.NaN(), 0}, {math.Inf(1), 0}, {math.MaxFloat64, 0}, {1e30, 1e30},
	} {
		if got := niceCeil(c.in); got != c.want && math.Abs(got-c.want) > 1e-9*c.want {
			t.Errorf("niceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// The fairness chart has, per flow, its mean in each run (the summary's row of it)
// and per run Jain's index as compare computes it.
func TestFairnessChart(t *testing.T) {
	a, b := run("PFIFO", 40), run("FQ_CODEL", 5)
	// b's second flow gets 30 where a's gets 20 (run's flows are 10 and 20).
	for i := range b.Samples["TCP download::2"] {
		b.Samples["TCP download::2"][i].V = 30
	}
	noFlows := run("NONE", 5)
	var keep []datafile.Series
	for _, se := range noFlows.Series {
		if se.Kind != datafile.KindTCP {
			keep = append(keep, se)
		}
	}
	noFlows.Series = keep

	o := page(t, a, b, noFlows)
	f := o["fairness"]
	if f == nil {
		t.Fatal("no fairness chart")
	}
	if name, _, _ := yAxis(t, f, 0); name != "Mbit/s" {
		t.Errorf("the flows' axis is %q", name)
	}
	if name, lo, hi := yAxis(t, f, 1); name != "Jain's index" || lo != 0.0 || hi != 1.0 {
		t.Errorf("Jain's axis %q from %v to %v", name, lo, hi)
	}
	series := map[string][]any{}
	for _, s := range f["series"].([]any) {
		m := s.(map[string]any)
		var vs []any
		for _, d := range m["data"].([]any) {
			vs = append(vs, d.(map[string]any)["value"])
		}
		series[m["name"].(string)] = vs
	}
	metric, ok := report.LookupMetric("Jain's fairness")
	if !ok {
		t.Fatal("no Jain's fairness metric")
	}
	want := map[string][]any{
		"TCP download::1 (Mbit/s)": {10.0, 10.0, nil},
		"TCP download::2 (Mbit/s)": {20.0, 30.0, nil},
		"Jain's fairness index": {math.Round(metric.Value(report.Summarize(a))*1e4) / 1e4,
			math.Round(metric.Value(report.Summarize(b))*1e4) / 1e4, "-"},
	}
	if len(series) != len(want) {
		t.Errorf("series %v, want %v", series, want)
	}
	for name, w := range want {
		got := series[name]
		if len(got) != len(w) {
			t.Errorf("%s: %v, want %v", name, got, w)
			continue
		}
		for i := range w {
			if got[i] != w[i] {
				t.Errorf("%s: run %d has %v, want %v", name, i, got[i], w[i])
			}
		}
	}
	// By hand: 10 and 20 are (30²)/(2·500) = 0.9; 10 and 30, 0.8.
	if j := series["Jain's fairness index"]; j[0] != 0.9 || j[1] != 0.8 {
		t.Errorf("Jain's index %v, want 0.9 and 0.8", j)
	}

	if o := page(t, noFlows); o["fairness"] != nil {
		t.Error("a page of no flows has a fairness chart")
	}
}
