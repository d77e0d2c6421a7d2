package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	imagedraw "image/draw"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"

	"github.com/bloatbench/bloatbench/datafile"
	"github.com/bloatbench/bloatbench/flentfile"
)

var update = flag.Bool("update", false, "rewrite the golden SVGs in testdata/")

// drawn builds and renders a figure.
func drawn(t *testing.T, runs []*datafile.Run, layout, format string, o Options) (*figure, []byte) {
	t.Helper()
	f, err := build(runs, layout, format, o)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := f.render(format, &b); err != nil {
		t.Fatal(err)
	}
	if format == "svg" {
		// What Write writes is the same (a PNG takes 100 ms to draw: once is enough).
		var w bytes.Buffer
		if err := Write(runs, layout, format, &w, o); err != nil || !bytes.Equal(w.Bytes(), b.Bytes()) {
			t.Fatalf("Write: %v, %d bytes where the figure has %d", err, w.Len(), b.Len())
		}
	}
	return f, b.Bytes()
}

type panelWant struct {
	id   string
	runs []int // the runs drawn in it
	not  []int // runs it must not show
}

func rrulRun(t testing.TB) *datafile.Run {
	t.Helper()
	r, err := flentfile.Read("../flentfile/testdata/recorded/rrul.flent.gz")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The PNG is of the size asked for, has the panels of its layout, and in each
// panel's plotting area the colours of the runs drawn there.
func TestPNGPanels(t *testing.T) {
	two := twoSetups(t)
	one := two[:1]
	both := []int{0, 1}
	rrul := []*datafile.Run{rrulRun(t)}
	for _, c := range []struct {
		name   string
		runs   []*datafile.Run
		layout string
		o      Options
		w, h   int
		panels []panelWant
	}{
		{"all_scaled", two, "all_scaled", Options{}, 1100, 910, []panelWant{{"download", both, nil}, {"upload", both, nil}, {"latency", both, nil}}},
		{"all, with flows", two, "all", Options{Flows: true, Width: 600, Height: 500}, 600, 500, []panelWant{{"download", both, nil}, {"upload", both, nil}, {"latency", both, nil}}},
		{"all_scaled, cut", two, "all_scaled", Options{Cut: &[2]float64{3, -3}, Width: 600, Height: 500}, 600, 500, []panelWant{{"download", both, nil}, {"upload", both, nil}, {"latency", both, nil}}},
		{"ping_cdf", two, "ping_cdf", Options{}, 1100, 650, []panelWant{{"cdf", both, nil}}},
		{"ping_cdf of one file, log", one, "ping_cdf", Options{LogLatency: true, Width: 600, Height: 400}, 600, 400, []panelWant{{"cdf", []int{0}, []int{1}}}},
		{"totals", two, "totals", Options{}, 1100, 600, []panelWant{{"throughput", both, nil}, {"latency", both, nil}}},
		{"box_totals", two, "box_totals", Options{Width: 700, Height: 400}, 700, 400, []panelWant{{"throughput", both, nil}, {"latency", both, nil}}},
		{"qdisc: sojourn of the AQM only", two, "qdisc", Options{}, 1100, 1160,
			[]panelWant{{"backlog", both, nil}, {"drops", both, nil}, {"marks", both, nil}, {"sojourn", []int{1}, []int{0}}}},
		{"qdisc: the sojourn sampler's", []*datafile.Run{two[0], writeRun(t, spec{setup: "CAKE", pingMs: 5, bloatMs: 8, down: 1, mbit: 40, qdisc: true, sojourn: "sampled"})}, "qdisc",
			Options{Width: 600, Height: 600}, 600, 600, []panelWant{{"backlog", both, nil}, {"drops", both, nil}, {"marks", both, nil}, {"sojourn", []int{1}, []int{0}}}},
		{"a size of its own", two, "totals", Options{Width: 640, Height: 480}, 640, 480, []panelWant{{"throughput", both, nil}, {"latency", both, nil}}},
		{"flent's rrul", rrul, "all_scaled", Options{Width: 600, Height: 500}, 600, 500, []panelWant{{"download", []int{0}, nil}, {"upload", []int{0}, nil}, {"latency", []int{0}, nil}}},
		{"flent's rrul, totals", rrul, "totals", Options{Width: 600, Height: 400}, 600, 400, []panelWant{{"throughput", []int{0}, nil}, {"latency", []int{0}, nil}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, b := drawn(t, c.runs, c.layout, "png", c.o)
			decoded, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			img := image.NewRGBA(decoded.Bounds())
			imagedraw.Draw(img, img.Bounds(), decoded, decoded.Bounds().Min, imagedraw.Src)
			if got := img.Bounds().Size(); got != (image.Point{c.w, c.h}) {
				t.Errorf("a PNG of %v, want %dx%d", got, c.w, c.h)
			}
			if len(f.panels) != len(c.panels) || len(f.data) != len(c.panels) {
				t.Fatalf("%d panels (%d drawn), want %d", len(f.panels), len(f.data), len(c.panels))
			}
			for i, want := range c.panels {
				if f.panels[i].id != want.id {
					t.Errorf("panel %d is %s, want %s", i, f.panels[i].id, want.id)
				}
				r := pixels(f.data[i], c.h)
				if r.Dx() < 100 || r.Dy() < 50 {
					t.Errorf("panel %s: a plotting area of %v", want.id, r)
				}
				drawnPx, byRun := census(img, r, 2)
				if drawnPx < 200 {
					t.Errorf("panel %s: %d pixels drawn", want.id, drawnPx)
				}
				for _, run := range want.runs {
					if byRun[run] < 20 {
						t.Errorf("panel %s: %d pixels of run %d's colour", want.id, byRun[run], run)
					}
				}
				for _, run := range want.not {
					if byRun[run] > 0 {
						t.Errorf("panel %s: %d pixels of run %d's colour, which has none of its series", want.id, byRun[run], run)
					}
				}
			}
		})
	}
}

// pixels is a rectangle of the figure in points from the bottom left, in the PNG's
// pixels from the top left, less two pixels each side (the axes).
func pixels(r vg.Rectangle, h int) image.Rectangle {
	s := float64(dpi) / 72
	return image.Rect(int(math.Ceil(r.Min.X.Points()*s))+2, h-int(math.Floor(r.Max.Y.Points()*s))+2,
		int(math.Floor(r.Max.X.Points()*s))-2, h-int(math.Ceil(r.Min.Y.Points()*s))-2)
}

// census counts, in r, the pixels that are not the white ground, and those of
// each of the first runs' colours (within a little, for the edges' blending).
func census(img *image.RGBA, r image.Rectangle, runs int) (drawn int, byRun []int) {
	byRun = make([]int, runs)
	want := make([]color.NRGBA, runs)
	for i := range want {
		want[i] = runColor(i)
	}
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := img.RGBAAt(x, y)
			if c.R == 0xff && c.G == 0xff && c.B == 0xff {
				continue
			}
			drawn++
			for i, w := range want {
				if near(c, w, 40) {
					byRun[i]++
				}
			}
		}
	}
	return drawn, byRun
}

// near says two opaque colours are within tol of each other, summed over the
// channels.
func near(a color.RGBA, b color.NRGBA, tol int) bool {
	d := func(x, y uint8) int {
		if x > y {
			return int(x - y)
		}
		return int(y - x)
	}
	return d(a.R, b.R)+d(a.G, b.G)+d(a.B, b.B) <= tol
}

// svgDoc is what an SVG holds that the tests look at.
type svgDoc struct {
	paths []string // each path's style
	texts []string // each text's text
	names map[string]int
}

// parseSVG parses an SVG as strict XML, as a browser's XML parser does: a text
// that broke it out of its element, or a character XML has no place for, fails.
func parseSVG(t *testing.T, b []byte) svgDoc {
	t.Helper()
	doc := svgDoc{names: map[string]int{}}
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	var text *strings.Builder
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			doc.names[x.Name.Local]++
			for _, a := range x.Attr {
				if strings.HasPrefix(strings.ToLower(a.Name.Local), "on") || strings.Contains(strings.ToLower(a.Value), "javascript:") {
					t.Errorf("element %s has %s=%q", x.Name.Local, a.Name.Local, a.Value)
				}
			}
			switch x.Name.Local {
			case "path":
				for _, a := range x.Attr {
					if a.Name.Local == "style" {
						doc.paths = append(doc.paths, a.Value)
					}
				}
			case "text":
				text = &strings.Builder{}
			case "svg", "g", "defs", "style", "image":
			default:
				t.Errorf("an element %s", x.Name.Local)
			}
		case xml.CharData:
			if text != nil {
				text.Write(x)
			}
		case xml.EndElement:
			if x.Name.Local == "text" && text != nil {
				doc.texts = append(doc.texts, text.String())
				text = nil
			}
		}
	}
	if doc.names["svg"] != 1 {
		t.Errorf("%d svg elements", doc.names["svg"])
	}
	return doc
}

// strokes counts the paths stroked in a run's colour.
func (d svgDoc) strokes(run int) int {
	c := runColor(run)
	want := fmt.Sprintf("stroke:#%02X%02X%02X", c.R, c.G, c.B)
	n := 0
	for _, p := range d.paths {
		if strings.Contains(p, want+";") || strings.HasSuffix(p, want) {
			n++
		}
	}
	return n
}

// fills counts the paths filled with a run's colour, opaque.
func (d svgDoc) fills(run int) int {
	c := runColor(run)
	want := fmt.Sprintf("fill:#%02X%02X%02X", c.R, c.G, c.B)
	n := 0
	for _, p := range d.paths {
		if (strings.Contains(p, want+";") || strings.HasSuffix(p, want)) && !strings.Contains(p, "fill-opacity") {
			n++
		}
	}
	return n
}

func (d svgDoc) textCount(s string) int {
	n := 0
	for _, x := range d.texts {
		if x == s {
			n++
		}
	}
	return n
}

// The SVG is XML, with the layout's axis labels, each run's name once in the
// legend, and a path per line of each run in its colour: on twoSetups, with the
// legend's swatch, all_scaled has 4 strokes a run (download, upload, latency),
// ping_cdf 2, totals a bar filled per category (3) and qdisc a line per panel it
// has (the FIFO has no sojourn).
func TestSVGStructure(t *testing.T) {
	two := twoSetups(t)
	for _, c := range []struct {
		layout  string
		texts   []string
		strokes [2]int
		fills   [2]int
	}{
		{"all_scaled", []string{"Download (Mbit/s)", "Upload (Mbit/s)", "Latency (ms)", "Time (s)", "rrul_like: download, upload and latency (scaled)"}, [2]int{4, 4}, [2]int{}},
		{"all", []string{"Download (Mbit/s)", "Upload (Mbit/s)", "Latency (ms)", "Time (s)", "rrul_like: download, upload and latency"}, [2]int{4, 4}, [2]int{}},
		{"ping_cdf", []string{"Latency (ms)", "Cumulative probability", "rrul_like: latency under load, CDF"}, [2]int{2, 2}, [2]int{}},
		{"totals", []string{"Mean throughput (Mbit/s)", "Mean latency under load (ms)", "Download", "Upload", "Latency", "80.00", "90.00"}, [2]int{1, 1}, [2]int{3, 3}},
		{"qdisc", []string{"Backlog (bytes)", "Drops (pkts/s)", "ECN marks (pkts/s)", "Sojourn (ms)", "Time (s)"}, [2]int{4, 5}, [2]int{}},
	} {
		t.Run(c.layout, func(t *testing.T) {
			_, b := drawn(t, two, c.layout, "svg", Options{})
			d := parseSVG(t, b)
			for _, want := range c.texts {
				if d.textCount(want) == 0 {
					t.Errorf("no text %q in %q", want, d.texts)
				}
			}
			for run, name := range []string{"PFIFO", "FQ_PIE"} {
				if n := d.textCount(name); n != 1 {
					t.Errorf("%d texts %q, want the legend's", n, name)
				}
				if n := d.strokes(run); n != c.strokes[run] {
					t.Errorf("run %d: %d paths stroked in its colour, want %d", run, n, c.strokes[run])
				}
				if n := d.fills(run); n != c.fills[run] {
					t.Errorf("run %d: %d paths filled in its colour, want %d", run, n, c.fills[run])
				}
			}
		})
	}
}

// The SVGs of a fixed set of runs are as they were: testdata/LAYOUT.svg.golden
// (go test ./chart -run Golden -update rewrites them).
func TestGoldenSVG(t *testing.T) {
	two := twoSetups(t)
	for _, layout := range Layouts() {
		t.Run(layout, func(t *testing.T) {
			_, b := drawn(t, two, layout, "svg", Options{})
			_, again := drawn(t, two, layout, "svg", Options{})
			if !bytes.Equal(b, again) {
				t.Fatal("two drawings of the same runs differ")
			}
			path := filepath.Join("testdata", layout+".svg.golden")
			if *update {
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./chart -run Golden -update writes it)", err)
			}
			if !bytes.Equal(b, want) {
				t.Errorf("the SVG differs from %s (%d bytes, want %d): look at it, then -update", path, len(b), len(want))
			}
		})
	}
}

// hostileText is what a data file from someone else may carry in any text that
// reaches a figure: markup that would close the SVG's text element and open a
// script, control bytes (OSC 52 writes the clipboard), bidi overrides, NUL, a
// noncharacter XML refuses, bytes that are not UTF-8.
const hostileText = "</text><script>alert(1)</script>\x1b]52;c;ZXZpbA==\x07\u202e\x00\ufffe\xff&amp;"

// A run whose host, title, setup and series are hostile makes, in every layout, an
// SVG that is XML with no script and no control byte, the texts drawn escaped.
func TestHostileTexts(t *testing.T) {
	bad := writeRun(t, spec{title: hostileText + " title", host: "<script>alert(2)</script>\x1b[2J", pingMs: 5, bloatMs: 30, down: 1, up: 1, mbit: 20, qdisc: true, sojourn: "cake"})
	// What the file cannot carry (bytes that are not UTF-8), put in as a reader
	// of another format might.
	bad.Metadata.Test = hostileText
	bad.Metadata.Setup = &datafile.Setup{Title: hostileText + " setup"}
	ping := bad.Series[0].Name
	bad.Series[0].Name = "Ping " + hostileText
	bad.Samples[bad.Series[0].Name] = bad.Samples[ping]
	for i, se := range bad.Series {
		if se.Kind == datafile.KindQdisc {
			bad.Series[i].Dev = "<script>" + se.Dev
		}
	}
	good := writeRun(t, spec{setup: "FQ_CODEL", pingMs: 5, bloatMs: 3, down: 1, up: 1, mbit: 22})
	runs := []*datafile.Run{bad, good}
	for _, layout := range Layouts() {
		for _, format := range Formats() {
			t.Run(layout+"."+format, func(t *testing.T) {
				o := Options{LogLatency: true}
				if format == "png" {
					o.Width, o.Height = 500, 400
				}
				_, b := drawn(t, runs, layout, format, o)
				if format == "png" {
					if _, err := png.Decode(bytes.NewReader(b)); err != nil {
						t.Fatal(err)
					}
					return
				}
				for i, c := range b {
					if c < 0x20 && c != '\n' && c != '\t' && c != '\r' || c == 0x7f {
						t.Fatalf("byte %#x at %d: %.80q", c, i, b[max(0, i-40):i])
					}
				}
				if bytes.Contains(bytes.ToLower(b), []byte("<script")) {
					t.Error("a script element")
				}
				d := parseSVG(t, b)
				all := strings.Join(d.texts, "\n")
				for _, want := range []string{
					`</text><script>alert(1)</script>\x1b]52;c;ZXZpbA==\x07\u202e\x00\ufffe\xff&amp; setup`, // the legend
				} {
					if !strings.Contains(all, want) {
						t.Errorf("no text %q in %q", want, d.texts)
					}
				}
				if !strings.Contains(all, `server: <script>alert(2)</script>\x1b[2J`) {
					t.Errorf("the host is not in the subtitle as text: %q", d.texts)
				}
			})
		}
	}
}

// Values near float64's limit (sums that overflow), NaN and a reply of 0 ms on a
// log axis draw, or leave what cannot be drawn out; they do not fail or hang.
func TestUndrawableValues(t *testing.T) {
	d := writeRun(t, spec{setup: "HUGE", pingMs: 5, down: 2, up: 1, mbit: 10, qdisc: true})
	for _, se := range d.Series {
		for i := range d.Samples[se.Name] {
			switch {
			case se.Kind == datafile.KindTCP:
				d.Samples[se.Name][i].V = math.MaxFloat64
			case se.Kind == datafile.KindPing && i%2 == 0:
				d.Samples[se.Name][i].V = 0
			case se.Kind == datafile.KindPing:
				d.Samples[se.Name][i].V = 1e300
			default:
				d.Samples[se.Name][i].V = math.NaN()
			}
		}
	}
	for _, layout := range Layouts() {
		for format, log := range map[string]bool{"png": false, "svg": true} {
			var b bytes.Buffer
			err := Write([]*datafile.Run{d}, layout, format, &b, Options{LogLatency: log, Width: 400, Height: 300})
			if err != nil && !errors.Is(err, ErrNoData) {
				t.Errorf("%s: %v", layout, err)
			}
		}
	}
}

// LatencyMax puts every latency axis on the scale asked for: figures drawn apart
// compare.
func TestLatencyMax(t *testing.T) {
	two := twoSetups(t)
	for _, c := range []struct{ layout, panel, axis string }{
		{"all_scaled", "latency", "y"}, {"all", "latency", "y"}, {"ping_cdf", "cdf", "x"},
		{"totals", "latency", "y"}, {"box_totals", "latency", "y"},
	} {
		for _, top := range []float64{0, 250} {
			f, err := build(two, c.layout, "png", Options{LatencyMax: top})
			if err != nil {
				t.Fatal(err)
			}
			for _, pa := range f.panels {
				if pa.id != c.panel {
					continue
				}
				got := pa.p.Y.Max
				if c.axis == "x" {
					got = pa.p.X.Max
				}
				switch {
				case top > 0 && got != top:
					t.Errorf("%s: the latency axis ends at %v, want %v", c.layout, got, top)
				case top == 0 && !(got > 80 && got < 200):
					// FIFO's reach 85 ms.
					t.Errorf("%s: the latency axis ends at %v, want the runs' own", c.layout, got)
				}
			}
		}
	}
}

// A file of flent's with several ping series draws a line for each, told apart by
// their dashes, which the panel names.
func TestFlentPingSeries(t *testing.T) {
	f, _ := drawn(t, []*datafile.Run{rrulRun(t)}, "ping_cdf", "svg", Options{})
	want := []string{"Ping (ms) ICMP", "Ping (ms) UDP BE", "Ping (ms) UDP BK", "Ping (ms) UDP EF"}
	if got := f.panels[0].styles; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the CDF names %q, want %q (flent's average over them left out)", got, want)
	}
}
