// Package chart draws runs as static figures, PNG or SVG, without a browser
// (gonum.org/v1/plot), in the layouts of flent's plots that flent's users know:
// all_scaled (and its unscaled all), ping_cdf, totals and box_totals, and qdisc for
// the bottleneck's queue. Several runs (a compare of setups) go on one figure per
// layout, one colour per run, named in the figure's legend; within a figure every
// run's latency is on one axis.
//
// The figures read the series as the summary does (see data.go): the totals' bars
// are the summary's rows, the boxes' medians its medians, and a cut cuts as its cut
// does.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot/vg"

	"github.com/bloatbench/bloatbench/datafile"
)

// ErrNoData is what Write returns (wrapped) for a layout the runs have nothing for:
// a qdisc figure of runs that recorded no bottleneck statistics, totals of runs
// with neither streams nor ping.
var ErrNoData = errors.New("nothing to draw")

// Options change a figure.
type Options struct {
	// Width and Height are the figure's size in pixels (a PNG's at 96 dpi; an
	// SVG's the same in points times 0.75); 0 takes the layout's (1100 wide).
	Width, Height int
	// Title replaces the figure's title (the tests and what the layout shows).
	Title string
	// Labels name the runs in the legend, in their order; a missing or empty one
	// is the run's setup title (as compare groups runs), told apart by start time
	// or number where runs share one.
	Labels []string
	// Cut keeps only the data from Cut[0] to Cut[1] seconds into the run, as the
	// summary's --cut does (report.CutWindow); over time, it is the window drawn.
	Cut *[2]float64
	// Flows draws each TCP flow too, thin, beside the sums (all, all_scaled).
	Flows bool
	// LogLatency puts ping_cdf's latency axis on a log scale.
	LogLatency bool
	// LatencyMax ends every ping latency axis at this many ms, so that figures
	// drawn apart share one scale; 0 takes it from the runs drawn together.
	LatencyMax float64
}

type layoutDef struct {
	name, what string
	height     int // default, pixels
	build      func(rs []*runData, o Options, width vg.Length) (*figure, error)
}

var layoutDefs = []layoutDef{
	{"all_scaled", "download, upload and latency over time, each axis scaled to the 99th percentile of its values (flent's all_scaled)", 900,
		func(rs []*runData, o Options, _ vg.Length) (*figure, error) { return overTime(rs, o, scaledTop) }},
	{"all", "download, upload and latency over time, every value on the axes (flent's all)", 900,
		func(rs []*runData, o Options, _ vg.Length) (*figure, error) { return overTime(rs, o, 100) }},
	{"ping_cdf", "CDF of the latency under load, per run and ping series (flent's ping_cdf)", 650,
		func(rs []*runData, o Options, _ vg.Length) (*figure, error) { return pingCDF(rs, o) }},
	{"totals", "per run, the mean download and upload sums and the mean latency under load, as bars (flent's totals)", 600, totals},
	{"box_totals", "per run, box plots of the download and upload sums per step and of the latency under load (flent's box_totals)", 600, boxTotals},
	{"qdisc", "the bottleneck over time: backlog, drops, ECN marks, sojourn time and fq_codel's and fq_pie's new and old flow lists where recorded", 1000,
		func(rs []*runData, o Options, _ vg.Length) (*figure, error) { return qdiscFigure(rs, o) }},
}

// Layouts are the layouts' names, in the order WriteFiles draws them.
func Layouts() []string {
	out := make([]string, len(layoutDefs))
	for i, l := range layoutDefs {
		out[i] = l.name
	}
	return out
}

// Describe says what a layout shows, for a command's help; "" for no layout.
func Describe(layout string) string {
	if l, ok := lookup(layout); ok {
		return l.what
	}
	return ""
}

// Formats are the image formats Write draws.
func Formats() []string { return []string{"png", "svg"} }

func lookup(name string) (layoutDef, bool) {
	for _, l := range layoutDefs {
		if l.name == name {
			return l, true
		}
	}
	return layoutDef{}, false
}

// Write draws runs in a layout as a PNG or an SVG ("png", "svg") to w. A layout
// the runs have nothing for is an error wrapping ErrNoData, and nothing is written.
// Texts from the files (titles, setups, host and series names) are drawn escaped
// as the terminal's are (report.EscapeText); an SVG escapes markup besides.
func Write(runs []*datafile.Run, layout, format string, w io.Writer, o Options) error {
	f, err := build(runs, layout, format, o)
	if err != nil {
		return err
	}
	return f.render(format, w)
}

// build makes the figure of a layout.
func build(runs []*datafile.Run, layout, format string, o Options) (*figure, error) {
	l, ok := lookup(layout)
	if !ok {
		return nil, fmt.Errorf("chart: no layout %q: %s", layout, strings.Join(Layouts(), ", "))
	}
	if !slices.Contains(Formats(), format) {
		return nil, fmt.Errorf("chart: no format %q: %s", format, strings.Join(Formats(), ", "))
	}
	if len(runs) == 0 {
		return nil, errors.New("chart: no runs to draw")
	}
	if o.Cut != nil && (!(o.Cut[0] >= 0) || math.IsNaN(o.Cut[1]) || math.IsInf(o.Cut[1], 0)) {
		return nil, fmt.Errorf("chart: a cut of %v: START from 0 s, END a number of seconds", *o.Cut)
	}
	w, h := o.Width, o.Height
	if w <= 0 {
		w = 1100
	}
	if h <= 0 {
		h = l.height
	}
	// Within what a PNG can be made of in memory (100 megapixels).
	if w < 200 || h < 150 || w > 20000 || h > 20000 || w*h > 100_000_000 {
		return nil, fmt.Errorf("chart: a figure of %dx%d pixels: from 200x150 to 20000x20000, and at most 100 megapixels", w, h)
	}
	rs := prepare(runs, o)
	f, err := l.build(rs, o, px(w))
	if err != nil {
		return nil, err
	}
	if len(f.panels) == 0 {
		return nil, fmt.Errorf("chart: %s: %w (the runs have none of its series)", layout, ErrNoData)
	}
	if o.Height <= 0 && !f.sideBySide {
		// Stacked panels of a layout that has fewer (no upload, no sojourn) are
		// as tall as they would be among all of them.
		h = 160 + 250*len(f.panels)
		if len(f.panels) == 1 {
			h = min(l.height, 650)
		}
	}
	for _, pa := range f.panels {
		if len(pa.styles) > 0 {
			pa.add(&styleLegend{names: pa.styles}) // last: over the lines
		}
	}
	f.runs, f.w, f.h = rs, px(w), px(h)
	if o.Title != "" {
		f.title = clean(o.Title)
	}
	return f, nil
}

// WriteFiles draws runs in each layout and format into dir (made if missing), a
// file each, named PREFIX + LAYOUT + "." + FORMAT, and returns their paths. No
// layouts draws every layout the runs have data for (Layouts' order); no formats,
// PNG. A file is written whole or not at all.
func WriteFiles(dir, prefix string, runs []*datafile.Run, layouts, formats []string, o Options) ([]string, error) {
	all := len(layouts) == 0
	if all {
		layouts = Layouts()
	}
	if len(formats) == 0 {
		formats = []string{"png"}
	}
	if strings.ContainsAny(prefix, `/\`) {
		return nil, fmt.Errorf("chart: a file name prefix without a path: %q", prefix)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	var paths []string
	for _, layout := range layouts {
		for _, format := range formats {
			f, err := build(runs, layout, format, o)
			if all && errors.Is(err, ErrNoData) {
				break
			}
			if err != nil {
				return paths, err
			}
			var b bytes.Buffer
			if err := f.render(format, &b); err != nil {
				return paths, err
			}
			path := filepath.Join(dir, prefix+layout+"."+format)
			if err := writeWhole(path, b.Bytes()); err != nil {
				return paths, fmt.Errorf("chart: %w", err)
			}
			paths = append(paths, path)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("chart: %w: the runs have the series of no layout", ErrNoData)
	}
	return paths, nil
}

// writeWhole writes a file through a temporary one beside it, renamed into place.
func writeWhole(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
