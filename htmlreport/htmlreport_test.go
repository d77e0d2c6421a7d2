package htmlreport

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

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
		d.Samples[ping.Name] = append(d.Samples[ping.Name], datafile.Sample{T: t0 + float64(k)*0.5 + 0.01, V: pingMs + float64(k%3)})
	}
	for f := 1; f <= 2; f++ {
		se := datafile.Series{Name: fmt.Sprintf("TCP download::%d", f), Kind: datafile.KindTCP, Units: "Mbits/s", Direction: "download", Flow: f}
		d.Series = append(d.Series, se)
		for k := 1; k <= 8; k++ {
			d.Samples[se.Name] = append(d.Samples[se.Name], datafile.Sample{T: t0 + 1 + float64(k)*0.5, Dur: 0.5, V: float64(10 * f)})
		}
	}
	for _, n := range []string{"qdisc server:eth0 root backlog", "qdisc server:eth0 root drops", "bql server:eth0 tx-0 inflight"} {
		d.Series = append(d.Series, datafile.Series{Name: n})
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
	// Per run a timeseries and a bottleneck chart; across runs four more.
	for _, id := range []string{"ts0", "bn0", "ts1", "bn1", "ts2", "bn2", "pingcdf", "pingbox", "tputbox", "tputbar"} {
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
