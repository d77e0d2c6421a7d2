package chart

import (
	"bytes"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/flentfile"
	"github.com/bloatbench/bloatbench/report"
)

func TestLayoutsAndFormats(t *testing.T) {
	want := []string{"all_scaled", "all", "ping_cdf", "totals", "box_totals", "qdisc"}
	if got := Layouts(); !slices.Equal(got, want) {
		t.Errorf("Layouts() = %v, want %v", got, want)
	}
	for _, l := range want {
		if Describe(l) == "" {
			t.Errorf("layout %s is not described", l)
		}
	}
	if Describe("nope") != "" {
		t.Error("a layout that is not has a description")
	}
	if got := Formats(); !slices.Equal(got, []string{"png", "svg"}) {
		t.Errorf("Formats() = %v", got)
	}
}

func TestWriteRefuses(t *testing.T) {
	runs := twoSetups(t)
	noQdisc := []*datafile.Run{writeRun(t, spec{setup: "X", pingMs: 5, down: 1, mbit: 10})}
	for _, c := range []struct {
		name           string
		runs           []*datafile.Run
		layout, format string
		o              Options
		noData         bool
		in             string
	}{
		{name: "no layout", runs: runs, layout: "bars", format: "png", in: `no layout "bars"`},
		{name: "no format", runs: runs, layout: "totals", format: "jpeg", in: `no format "jpeg"`},
		{name: "no runs", layout: "totals", format: "png", in: "no runs"},
		{name: "too small", runs: runs, layout: "totals", format: "png", o: Options{Width: 100}, in: "100x600 pixels"},
		{name: "too large", runs: runs, layout: "totals", format: "svg", o: Options{Width: 20000, Height: 20000}, in: "megapixels"},
		{name: "a cut from before the run", runs: runs, layout: "totals", format: "png", o: Options{Cut: &[2]float64{-1, 5}}, in: "cut"},
		{name: "no bottleneck recorded", runs: noQdisc, layout: "qdisc", format: "png", noData: true, in: "qdisc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			err := Write(c.runs, c.layout, c.format, &b, c.o)
			if err == nil || !strings.Contains(err.Error(), c.in) || errors.Is(err, ErrNoData) != c.noData {
				t.Fatalf("err = %v, want one saying %q (no data: %v)", err, c.in, c.noData)
			}
			if b.Len() > 0 {
				t.Errorf("%d bytes written with the error", b.Len())
			}
		})
	}
}

// WriteFiles draws every layout the runs have data for (qdisc left out of runs
// without a bottleneck), each format, files that decode; named layouts must draw.
func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "figures")
	noQdisc := []*datafile.Run{writeRun(t, spec{setup: "X", pingMs: 5, down: 1, mbit: 10})}
	paths, err := WriteFiles(dir, "x-", noQdisc, nil, []string{"png", "svg"}, Options{Width: 400, Height: 300})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range []string{"all_scaled", "all", "ping_cdf", "totals", "box_totals"} {
		want = append(want, filepath.Join(dir, "x-"+l+".png"), filepath.Join(dir, "x-"+l+".svg"))
	}
	if !slices.Equal(paths, want) {
		t.Errorf("paths %v, want %v", paths, want)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(p, ".png") {
			if _, err := png.Decode(bytes.NewReader(b)); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		} else {
			parseSVG(t, b)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if _, err := WriteFiles(dir, "", noQdisc, []string{"qdisc"}, nil, Options{}); !errors.Is(err, ErrNoData) {
		t.Errorf("a named layout of no data: %v", err)
	}
	if _, err := WriteFiles(dir, "../x", noQdisc, nil, nil, Options{}); err == nil {
		t.Error("a prefix with a path was taken")
	}
}

func TestLabels(t *testing.T) {
	at := func(s string, sec int) *datafile.Run {
		d := &datafile.Run{Metadata: datafile.Metadata{Test: "tcp_1down", Title: "title of " + s}}
		if s != "" {
			d.Metadata.Setup = &datafile.Setup{Title: s}
		}
		if sec >= 0 {
			d.Metadata.StartTime = time.Date(2026, 11, 29, 18, 0, sec, 0, time.UTC)
		}
		return d
	}
	for _, c := range []struct {
		name  string
		runs  []*datafile.Run
		given []string
		want  []string
	}{
		{"setups", []*datafile.Run{at("A", 0), at("B", 0)}, nil, []string{"A", "B"}},
		{"no setup: the title", []*datafile.Run{at("", 0)}, nil, []string{"title of "}},
		{"a setup twice, by start", []*datafile.Run{at("A", 1), at("B", 0), at("A", 2)}, nil,
			[]string{"A (2026-11-29 18:00:01)", "B", "A (2026-11-29 18:00:02)"}},
		{"a setup twice at one time", []*datafile.Run{at("A", 1), at("A", 1)}, nil, []string{"A #1", "A #2"}},
		{"without start times", []*datafile.Run{at("A", -1), at("A", -1)}, nil, []string{"A #1", "A #2"}},
		{"given, and one not", []*datafile.Run{at("A", 0), at("A", 0)}, []string{"old", ""}, []string{"old", "A"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := labelsOf(c.runs, c.given); !slices.Equal(got, c.want) {
				t.Errorf("labels %q, want %q", got, c.want)
			}
		})
	}
}

// A long line is drawn as its envelope: at most the limit of points, in order,
// its peak and its dip kept; a run of no values stays a break.
func TestDecimate(t *testing.T) {
	for _, n := range []int{10, maxDrawn, maxDrawn + 1, 1_000_003} {
		pts := make([]xy, n)
		for i := range pts {
			pts[i] = xy{float64(i), float64(i % 7)}
		}
		pts[n/3].y, pts[n/2].y = 1000, -1000
		// A gap of two of decimate's runs holds one whole.
		per := (n + maxDrawn/2 - 1) / (maxDrawn / 2)
		for i := 3 * n / 4; i < 3*n/4+2*per; i++ {
			pts[i].y = math.NaN()
		}
		pts[n-2].y = math.Inf(1) // cannot be drawn: a break
		got := decimate(pts, maxDrawn)
		if n <= maxDrawn && len(got) != n || len(got) > maxDrawn {
			t.Fatalf("%d points kept as %d", n, len(got))
		}
		var peak, dip, broken bool
		for i, q := range got {
			if i > 0 && q.x <= got[i-1].x {
				t.Fatalf("%d points: x %v after %v", n, q.x, got[i-1].x)
			}
			peak, dip, broken = peak || q.y == 1000, dip || q.y == -1000, broken || math.IsNaN(q.y)
		}
		if !peak || !dip || !broken {
			t.Errorf("%d points: peak %v, dip %v, break %v", n, peak, dip, broken)
		}
		if segs := segments(got); len(segs) < 2 {
			t.Errorf("%d points: %d segments", n, len(segs))
		}
	}
}

// The series the figures draw are those the summary counts: the latency under
// load of its loaded row (pooled over the pairs' rows, as its row of the test's
// name is), the throughput sums' steps of its sum rows, with and without a cut, on
// bloatbench's files and on flent's (whose sums are on the grid only, cut by grid
// point); the totals' bars are the summary's averages; the drops' rates, over the
// load, the bottleneck row's.
func TestSeriesAreTheSummarys(t *testing.T) {
	rrul, err := flentfile.Read("../flentfile/testdata/recorded/rrul.flent.gz")
	if err != nil {
		t.Fatal(err)
	}
	ours := writeRun(t, spec{setup: "PFIFO", pingMs: 5, bloatMs: 40, down: 2, up: 1, mbit: 30, qdisc: true})
	pairs := writeRun(t, spec{setup: "PFIFO", pingMs: 5, bloatMs: 40, down: 2, mbit: 30, pairs: []string{"1", "2"}})
	for _, c := range []struct {
		name string
		run  *datafile.Run
		cut  *[2]float64
		ping string // the summary's row of the latency under load
	}{
		{"ours", ours, nil, report.PingRow + report.LoadedSuffix},
		{"ours, cut", ours, &[2]float64{3, -3}, report.PingRow + report.LoadedSuffix},
		{"ours, cut from 0", ours, &[2]float64{0, 9}, report.PingRow + report.LoadedSuffix},
		{"pairs", pairs, nil, report.PingRow + report.LoadedSuffix},
		{"pairs, cut", pairs, &[2]float64{4, 10}, report.PingRow + report.LoadedSuffix},
		{"flent's rrul", rrul, nil, ""},
		{"flent's rrul, cut", rrul, &[2]float64{5, -5}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Cut: c.cut}
			r := prepare([]*datafile.Run{c.run}, o)[0]
			s := report.SummarizeWith(c.run, report.Options{Cut: c.cut})
			rows := map[string]report.Row{}
			for _, row := range s.Rows {
				rows[row.Name] = row
			}
			same := func(what string, vs []float64, row report.Row, avg bool) {
				t.Helper()
				got := report.Row{Avg: report.Mean(vs), Median: report.Median(vs), P99: report.Percentile(vs, 99), Points: len(vs)}
				if len(vs) == 0 || got.Points != row.Points || got.Median != row.Median || got.P99 != row.P99 || avg && got.Avg != row.Avg {
					t.Errorf("%s: %d values, avg %v, median %v, p99 %v; the summary's row %q: %d, %v, %v, %v",
						what, got.Points, got.Avg, got.Median, got.P99, row.Name, row.Points, row.Avg, row.Median, row.P99)
				}
			}
			if c.ping != "" {
				same("latency under load", r.pooledLatency(), rows[c.ping], true)
			} else {
				// Several ping series: each one's values are its loaded row's.
				loaded := r.loadedLatency()
				if len(loaded) != 4 {
					t.Errorf("%d ping series drawn, want flent's 4 with replies (not its average)", len(loaded))
				}
				for name, vs := range loaded {
					same(name, vs, rows[name+report.LoadedSuffix], true)
				}
			}
			for _, sum := range sums {
				row, ok := rows[sum.row]
				if !ok {
					continue
				}
				if rm, ok := c.run.Reported[sum.row]; ok && c.cut == nil {
					// Without a cut, the average and count of a row flent reported are
					// its runner's (run.Reported); the median and p99 are the steps'.
					row.Avg, row.Points = report.Mean(r.stepValues(sum.row)), len(r.stepValues(sum.row))
					if rows[sum.row].Avg != rm.Mean {
						t.Errorf("%s: the summary's average %v, flent's %v", sum.row, rows[sum.row].Avg, rm.Mean)
					}
				}
				same(sum.row, r.stepValues(sum.row), row, true)
			}
			f, err := build([]*datafile.Run{c.run}, "totals", "png", o)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range barsOf(f, "throughput") {
				if want := rows[sums[int(b.x)].row].Avg; b.v != want {
					t.Errorf("the %s bar is %v, the summary's row %v", sums[int(b.x)].row, b.v, want)
				}
			}
			if c.run == ours {
				var rates []float64
				for _, l := range r.qdiscLines(qDrops) {
					for _, q := range l.pts {
						if x := q.x + c.run.Metadata.T0; x >= math.Max(c.run.Metadata.T0+tDelay, r.from) && x <= math.Min(c.run.Metadata.T0+tDelay+tLength, r.to) {
							rates = append(rates, q.y)
						}
					}
				}
				same("drops", rates, rows["Qdisc server:test0 drops"], true)
			}
		})
	}
}

func barsOf(f *figure, panel string) []*bar {
	var out []*bar
	for _, pa := range f.panels {
		if pa.id != panel {
			continue
		}
		for _, pl := range plotters(pa) {
			if b, ok := pl.(*bar); ok {
				out = append(out, b)
			}
		}
	}
	return out
}

func plotters(pa *panel) []plot.Plotter { return pa.added }

// The sojourn panel draws the sojourn sampler's medians and the delays qdiscs
// report of themselves, in ms, a line per device and statistic.
func TestSojournLines(t *testing.T) {
	for _, c := range []struct {
		sojourn string
		names   []string
		at5     []float64 // each line's value 5 s in: the load's height
	}{
		{"", nil, nil},
		{"pie", []string{"server:test0 delay"}, []float64{20}},
		{"cake", []string{"server:test0 tin0.avg_delay_us", "server:test0 tin1.avg_delay_us"}, []float64{20, 2}},
		{"sampled", []string{"server:test0 median"}, []float64{18}},
	} {
		t.Run(c.sojourn, func(t *testing.T) {
			d := writeRun(t, spec{setup: "X", pingMs: 5, bloatMs: 20, down: 1, mbit: 10, sojourn: c.sojourn})
			ls := prepare([]*datafile.Run{d}, Options{})[0].qdiscLines(qSojourn)
			if len(ls) != len(c.names) {
				t.Fatalf("%d lines, want %d", len(ls), len(c.names))
			}
			for i, l := range ls {
				if l.name != c.names[i] {
					t.Errorf("line %d is %q, want %q", i, l.name, c.names[i])
				}
				found := false
				for _, q := range l.pts {
					if math.Abs(q.x-5.002) < 1e-5 {
						found = true
						if math.Abs(q.y-c.at5[i]) > 1e-9 {
							t.Errorf("%s at 5 s: %v ms, want %v", l.name, q.y, c.at5[i])
						}
					}
				}
				if !found {
					t.Errorf("%s: no point 5 s in", l.name)
				}
			}
		})
	}
}

// The flow lists panel: fq_codel's new and old flow lists, every mq child's
// together, a line per device and list; other statistics are not in it.
func TestFlowListLines(t *testing.T) {
	d := &datafile.Run{Metadata: datafile.Metadata{Test: "tcp_4down", T0: 100, Length: 2, Step: 0.5, TotalLength: 2},
		Samples: map[string][]datafile.Sample{}}
	add := func(where, field string, vs ...float64) {
		se := datafile.Series{Name: "qdisc router:test0 " + where + " " + field, Kind: datafile.KindQdisc, Host: "router", Dev: "test0", Stat: where + " " + field}
		d.Series = append(d.Series, se)
		for i, v := range vs {
			d.Samples[se.Name] = append(d.Samples[se.Name], datafile.Sample{T: 100 + 0.5*float64(i+1), V: v})
		}
	}
	add("1:1", "new_flows_len", 1, 0, 2)
	add("1:2", "new_flows_len", 0, 1, 1)
	add("1:1", "old_flows_len", 2, 2, 2)
	add("1:1", "backlog", 3000, 3000, 3000)
	ls := prepare([]*datafile.Run{d}, Options{})[0].qdiscLines(qFlows)
	want := map[string][]float64{"router:test0 new flows": {1, 1, 3}, "router:test0 old flows": {2, 2, 2}}
	if len(ls) != len(want) {
		t.Fatalf("%d lines, want %d", len(ls), len(want))
	}
	for _, l := range ls {
		w, ok := want[l.name]
		if !ok || len(l.pts) != len(w) {
			t.Fatalf("line %q with %d points", l.name, len(l.pts))
		}
		for i, p := range l.pts {
			if p.y != w[i] || math.Abs(p.x-0.5*float64(i+1)) > 1e-9 {
				t.Errorf("%s point %d: (%v, %v), want (%v, %v)", l.name, i, p.x, p.y, 0.5*float64(i+1), w[i])
			}
		}
	}
}
