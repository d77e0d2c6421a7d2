package htmlreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/bloatbench/bloatbench/datafile"
)

func run(setup string, pingMs float64) *datafile.Run {
	start := time.Date(2026, 11, 29, 18, 41, 47, 0, time.UTC)
	t0 := datafile.Unix(start)
	d := &datafile.Run{Samples: map[string][]datafile.Sample{}, Metadata: datafile.Metadata{
		Test: "tcp_2down", Title: setup, StartTime: start, T0: t0, Length: 4, Delay: 1, Step: 0.5, TotalLength: 6,
		Setup: &datafile.Setup{Name: setup, Title: setup}}}
	ping := datafile.Series{Name: "Ping (ms) ICMP", Kind: datafile.KindPing, Units: "ms"}
	d.Series = append(d.Series, ping)
	for k := 0; k <= 12; k++ {
		v := pingMs + float64(k%3)
		d.Samples[ping.Name] = append(d.Samples[ping.Name], datafile.Sample{T: t0 + float64(k)*0.5 + 0.01 + v/1e3, V: v})
	}
	for f := 1; f <= 2; f++ {
		se := datafile.Series{Name: fmt.Sprintf("TCP download::%d", f), Kind: datafile.KindTCP, Units: "Mbits/s", Direction: "download", Flow: f}
		d.Series = append(d.Series, se)
		for k := 1; k <= 8; k++ {
			d.Samples[se.Name] = append(d.Samples[se.Name], datafile.Sample{T: t0 + 1 + float64(k)*0.5, Dur: 0.5, V: float64(10 * f)})
		}
	}
	for _, n := range []string{"qdisc server:eth0 root backlog", "qdisc server:eth0 root drops", "bql server:eth0 tx-0 inflight"} {
		kind, _, _ := strings.Cut(n, " ")
		d.Series = append(d.Series, datafile.Series{Name: n, Kind: kind})
		for k := 0; k <= 12; k++ {
			d.Samples[n] = append(d.Samples[n], datafile.Sample{T: t0 + float64(k)*0.5, V: float64(k * 1000)})
		}
	}
	return d
}

func TestPage(t *testing.T) {
	var b bytes.Buffer
	runs := []Run{RunOf(run("PFIFO", 40)), RunOf(run("FQ_CODEL", 5)), RunOf(run("PFIFO", 42))}
	if err := Write(&b, "test page", runs); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if m := regexp.MustCompile(`<(script|link)[^>]+(src|href)="[^"]+"`).FindString(page); m != "" {
		t.Errorf("the page loads something from outside: %s", m)
	}
	if !bytes.Contains(b.Bytes(), echartsJS[:200]) {
		t.Error("ECharts is not inlined")
	}
	// Per run a timeseries and a bottleneck chart; across runs four more, and the
	// flows' fairness.
	for _, id := range []string{"ts0", "bn0", "ts1", "bn1", "ts2", "bn2", "pingcdf", "pingbox", "tputbox", "tputbar", "fairness"} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("no chart %s", id)
		}
	}
	for _, want := range []string{`"name":"Mbit/s"`, `"name":"ping (ms)"`, `"name":"bytes"`, `"name":"pkts/s"`,
		`"name":"TCP download sum (Mbit/s)"`, `"name":"server:eth0 backlog (bytes)"`, `"name":"server:eth0 drops/s"`,
		`"PFIFO (n=2)"`, `"FQ_CODEL (n=1)"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
}

func TestBox(t *testing.T) {
	got := box([]float64{5, 1, 3, 2, 4})
	want := []float64{1, 2, 3, 4, 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("box = %v, want %v", got, want)
	}
	if box(nil) != nil {
		t.Error("box of nothing should be nil")
	}
}

func TestNoRuns(t *testing.T) {
	if err := Write(&bytes.Buffer{}, "x", nil); err == nil {
		t.Error("a page of no runs should be an error")
	}
}

// hostile are strings a data file mailed by someone else may carry in any text that
// reaches the page: script end tags, HTML, and go-echarts' own marker for
// JavaScript functions ("__f__"), which its renderer strips from the page.
var hostile = []string{
	`</script><script>alert(1)</script>`,
	`<img src=x onerror=alert(2)>`,
	`__f__alert(3)__f__`,
	`"};alert(4);//`,
	"\u2028</SCRIPT ><!--",
}

func TestHostileStringsStayText(t *testing.T) {
	var runs []Run
	for i, h := range hostile {
		d := run(h, 10+float64(i))
		d.Metadata.Test = h
		d.Metadata.Setup.Title = h + " setup"
		ping := d.Series[0].Name
		d.Series[0].Name = "Ping " + h
		d.Samples[d.Series[0].Name] = d.Samples[ping]
		d.Series = append(d.Series, datafile.Series{Name: "qdisc " + h + " root backlog", Kind: datafile.KindQdisc})
		d.Samples["qdisc "+h+" root backlog"] = []datafile.Sample{{T: d.Metadata.T0 + 1, V: 1}}
		// A series of a kind the page has no chart of its own for, named and
		// measured in units a data file from elsewhere chose.
		d.Series = append(d.Series, datafile.Series{Name: "RR " + h, Kind: h, Units: h + " units"})
		d.Samples["RR "+h] = []datafile.Sample{{T: d.Metadata.T0 + 1, V: 2}}
		runs = append(runs, RunOf(d))
	}
	var b bytes.Buffer
	if err := Write(&b, hostile[0]+" page", runs); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	scripts, texts := parsePage(t, page)
	// One script is ECharts itself; every other one must be ours, and each chart's
	// options must be JSON that carries the hostile strings back verbatim.
	var options []map[string]any
	for _, s := range scripts {
		switch {
		case s.typ == "application/json":
			var o map[string]any
			if err := json.Unmarshal([]byte(s.text), &o); err != nil {
				t.Fatalf("a chart's options are not JSON: %v\n%.300s", err, s.text)
			}
			options = append(options, o)
		case strings.Contains(s.text, "Apache Software Foundation"):
		case strings.HasPrefix(strings.TrimSpace(s.text), `"use strict";`) && !strings.Contains(s.text, "alert"):
		default:
			t.Errorf("a script that is not ours: %.200q", s.text)
		}
	}
	// Per run its time series, bottleneck and other series; across runs four, and
	// the flows' fairness.
	if want := 3*len(runs) + 5; len(options) != want {
		t.Errorf("%d charts' options, want %d", len(options), want)
	}
	all, _ := json.Marshal(options)
	var back []any
	_ = json.Unmarshal(all, &back)
	for _, h := range hostile {
		if !containsString(back, h+" setup") && !containsString(back, h+" setup (n=1)") {
			t.Errorf("the setup title %q does not reach a chart verbatim", h)
		}
		if !containsString(back, "Ping "+h) {
			t.Errorf("the series name %q does not reach a chart verbatim", "Ping "+h)
		}
	}
	for _, txt := range texts {
		if strings.Contains(txt, "alert(") && !strings.Contains(txt, hostile[0]+" page") {
			t.Errorf("hostile text outside the charts: %q", txt)
		}
	}
	if !strings.Contains(page, "<title>&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt; page</title>") {
		t.Error("the page title is not escaped")
	}
}

type script struct{ typ, text string }

// parsePage parses the page as a browser does: the contents of every script element,
// and every other text node.
func parsePage(t *testing.T, page string) (scripts []script, texts []string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		switch {
		case n.Type == html.ElementNode && n.Data == "script":
			s := script{}
			for _, a := range n.Attr {
				if a.Key == "type" {
					s.typ = a.Val
				}
				if a.Key == "src" {
					t.Errorf("a script loads %s", a.Val)
				}
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				s.text += c.Data
			}
			scripts = append(scripts, s)
			return
		case n.Type == html.ElementNode:
			for _, a := range n.Attr {
				if strings.HasPrefix(strings.ToLower(a.Key), "on") {
					t.Errorf("an element %s has an event handler %s=%q", n.Data, a.Key, a.Val)
				}
			}
		case n.Type == html.TextNode:
			texts = append(texts, n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return scripts, texts
}

// containsString says whether v, decoded JSON, holds s as a string anywhere.
func containsString(v any, s string) bool {
	switch x := v.(type) {
	case string:
		return x == s
	case []any:
		for _, y := range x {
			if containsString(y, s) {
				return true
			}
		}
	case map[string]any:
		for _, y := range x {
			if containsString(y, s) {
				return true
			}
		}
	}
	return false
}

// Values near float64's limit, which sum to infinity, are left out of the charts
// rather than making the page fail (JSON has no infinity).
func TestHugeValuesLeftOut(t *testing.T) {
	a, b := run("A", 40), run("B", 5)
	for _, d := range []*datafile.Run{a, b} {
		for _, n := range []string{"TCP download::1", "TCP download::2"} {
			for i := range d.Samples[n] {
				d.Samples[n][i].V = math.MaxFloat64
			}
		}
	}
	var buf bytes.Buffer
	if err := Write(&buf, "huge", []Run{RunOf(a), RunOf(b)}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"name":"TCP download::1 (Mbit/s)"`) {
		t.Error("the flows are not drawn")
	}
}

// A run with the sojourn tracer's histograms and fq_codel's flow lists has a chart
// of them: each step's median sojourn per qdisc, and the lists per device, mq's
// children added up; a run with neither has none.
func TestInsideTheQdiscs(t *testing.T) {
	d := run("MQ + FQ_CODEL", 5)
	t0 := d.Metadata.T0
	soj := datafile.Series{Name: "sojourn server:eth0 1:", Kind: datafile.KindSojourn, Units: "ms", Host: "server", Dev: "eth0", Stat: "1:"}
	d.Series = append(d.Series, soj)
	for k := 1; k <= 4; k++ {
		t := t0 + float64(k)*0.5
		// Per step, 10 packets at 2 ms and 30 at 8 ms: the median 8.
		d.Samples[soj.Name] = append(d.Samples[soj.Name], datafile.Sample{T: t, V: 2, Dur: 0.5, N: 10}, datafile.Sample{T: t, V: 8, Dur: 0.5, N: 30})
	}
	for _, where := range []string{"1:1", "1:2"} {
		se := datafile.Series{Name: "qdisc server:eth0 " + where + " new_flows_len", Kind: datafile.KindQdisc, Host: "server", Dev: "eth0", Stat: where + " new_flows_len"}
		d.Series = append(d.Series, se)
		for k := 1; k <= 4; k++ {
			d.Samples[se.Name] = append(d.Samples[se.Name], datafile.Sample{T: t0 + float64(k)*0.5, V: 2})
		}
	}
	var b bytes.Buffer
	if err := Write(&b, "inside", []Run{RunOf(d), RunOf(run("PFIFO", 40))}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, `id="qi0"`) || strings.Contains(page, `id="qi1"`) {
		t.Errorf("want a chart inside the qdiscs for the first run alone")
	}
	for _, want := range []string{`"name":"sojourn server:eth0 1: median (ms)"`, `"name":"server:eth0 new flows"`, `"name":"flows"`,
		`[0.5,8]`, `[2,8]`, `[0.5,4]`, `[2,4]`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
}

// A rate schedule's rate is drawn with the flows, dashed, as steps, and in no
// chart of other series.
func TestShaperRateBesideTheFlows(t *testing.T) {
	d := run("STEPS", 10)
	se := datafile.Series{Name: "shaper server:eth0 rate", Kind: datafile.KindShaper, Units: "Mbit/s", Host: "server", Dev: "eth0", Stat: "rate"}
	d.Series = append(d.Series, se)
	for k := 0; k <= 12; k++ {
		d.Samples[se.Name] = append(d.Samples[se.Name], datafile.Sample{T: d.Metadata.T0 + float64(k)*0.5, V: map[bool]float64{true: 50, false: 25}[k < 6]})
	}
	var b bytes.Buffer
	if err := Write(&b, "steps", []Run{RunOf(d)}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if n := strings.Count(page, `"name":"shaper server:eth0 rate (Mbit/s)"`); n != 1 {
		t.Errorf("the shaper's rate is drawn %d times, want once", n)
	}
	if !regexp.MustCompile(`"name":"shaper server:eth0 rate \(Mbit/s\)"[^}]*"step":"end"`).MatchString(page) || !strings.Contains(page, `"type":"dashed"`) {
		t.Error("the shaper's rate is not a dashed step line")
	}
	if strings.Contains(page, "Series in Mbit/s over time") {
		t.Error("the shaper's rate has a chart of its own among other series")
	}
}
