package chart

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/bloatbench/bloatbench/report"
)

// dpi is the PNG's resolution: a pixel of Options.Width is a pixel of the image.
const dpi = 96

// px is a length of n pixels.
func px(n int) vg.Length { return vg.Length(n) * vg.Inch / dpi }

// palette is one colour per run, in order: matplotlib's (and so flent's) default
// cycle, which flent's users know. Past ten runs the colours come round again, with
// another dash.
var palette = []color.NRGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
}

func runColor(i int) color.NRGBA { return palette[i%len(palette)] }

// faded is a run's colour seen through: a flow beside its sum, a box's fill.
func faded(c color.NRGBA, a uint8) color.NRGBA {
	c.A = a
	return c
}

// dashes tell apart the lines of one run in a panel (its ping series, its devices),
// and runs past the palette.
var dashes = [][]vg.Length{
	nil,
	{vg.Points(6), vg.Points(3)},
	{vg.Points(1.5), vg.Points(2)},
	{vg.Points(8), vg.Points(3), vg.Points(1.5), vg.Points(3)},
	{vg.Points(12), vg.Points(4)},
	{vg.Points(3), vg.Points(3)},
	{vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2), vg.Points(2), vg.Points(2)},
	{vg.Points(1), vg.Points(4)},
}

func dashOf(style, run int) []vg.Length {
	return dashes[(style+run/len(palette))%len(dashes)]
}

// maxDrawn bounds the points of one line: past a few per pixel more draw nothing,
// and an SVG grows by each. A longer line is drawn as its envelope.
const maxDrawn = 4000

// panel is one plot of a figure.
type panel struct {
	id string // what tests find it by: "download", "latency", "backlog"...
	p  *plot.Plot
	// runs are the runs drawn in the panel.
	runs map[int]bool
	// styles name the dashes of the panel's lines, where its runs have more than one
	// series each (ping series, devices): its own legend, in grey.
	styles []string
	grid   *gridLines
	// added are the plotters added, in order (gonum keeps its own unexported).
	added []plot.Plotter
}

func (pa *panel) add(pl plot.Plotter) {
	pa.p.Add(pl)
	pa.added = append(pa.added, pl)
}

// figure is a layout drawn: a title, a subtitle, a legend of the runs, and panels
// stacked over a shared axis or side by side.
type figure struct {
	title, subtitle string
	runs            []*runData
	panels          []*panel
	sideBySide      bool
	weights         []float64 // of the panels side by side
	w, h            vg.Length
	// data are the panels' plotting areas once drawn, in points from the bottom
	// left, in the order of panels.
	data []vg.Rectangle
}

// sans is the figures' face: Liberation Sans, which gonum carries (no system fonts
// are read, so a figure is drawn alike everywhere).
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

func newPanel(id string) *panel {
	p := plot.New()
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font} {
		f.Typeface, f.Variant = sans.Typeface, sans.Variant
	}
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.TextStyle.Font.Size = vg.Points(11)
	p.X.Tick.Label.Font.Size = vg.Points(9.5)
	p.Y.Tick.Label.Font.Size = vg.Points(9.5)
	p.X.Tick.Marker = tidyTicks{plot.DefaultTicks{}}
	p.Y.Tick.Marker = tidyTicks{plot.DefaultTicks{}}
	g := &gridLines{style: draw.LineStyle{Color: color.Gray{0xdd}, Width: vg.Points(0.5)}, x: true}
	p.Add(g)
	return &panel{id: id, p: p, runs: map[int]bool{}, grid: g}
}

// gridLines are light lines at the major ticks; x says along the x axis' too.
type gridLines struct {
	style draw.LineStyle
	x     bool
}

func (g *gridLines) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	xt := p.X.Tick.Marker
	if b, ok := xt.(blankTicks); ok {
		xt = b.Ticker // the ticks a panel over a shared axis leaves unlabelled
	}
	for _, t := range xt.Ticks(p.X.Min, p.X.Max) {
		if !g.x || t.IsMinor() || t.Value < p.X.Min || t.Value > p.X.Max {
			continue
		}
		x := trX(t.Value)
		c.StrokeLine2(g.style, x, c.Min.Y, x, c.Max.Y)
	}
	for _, t := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
		if t.IsMinor() || t.Value < p.Y.Min || t.Value > p.Y.Max {
			continue
		}
		y := trY(t.Value)
		c.StrokeLine2(g.style, c.Min.X, y, c.Max.X, y)
	}
}

// addLine draws one line of a run in the panel: in the run's colour, dashed by its
// style, broken where it has no value, long lines as their envelope.
func (pa *panel) addLine(l line, runs []*runData) {
	r := runs[l.run]
	width := vg.Points(1.6)
	c := runColor(r.color)
	if l.thin {
		width = vg.Points(0.7)
		c = faded(c, 0x90)
	}
	pa.add(&segLine{segs: segments(decimate(l.pts, maxDrawn)), style: draw.LineStyle{Color: c, Width: width, Dashes: dashOf(l.style, r.color)}})
	pa.runs[l.run] = true
}

// segLine is a line broken into segments where it has no value; a lone point is a
// dot.
type segLine struct {
	segs  [][]xy
	style draw.LineStyle
}

func (l *segLine) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, s := range l.segs {
		ps := make([]vg.Point, len(s))
		for i, q := range s {
			ps[i] = vg.Point{X: trX(q.x), Y: trY(q.y)}
		}
		if len(ps) == 1 {
			if c.Contains(ps[0]) {
				c.DrawGlyph(draw.GlyphStyle{Color: l.style.Color, Radius: l.style.Width, Shape: draw.CircleGlyph{}}, ps[0])
			}
			continue
		}
		c.StrokeLines(l.style, c.ClipLinesXY(ps)...)
	}
}

// decimate keeps a line of more than limit points as its envelope: limit/2 runs of
// consecutive points, each drawn by its lowest and highest in their order (no peak
// and no dip is lost), a run with no value as a break. Points of no drawable x are
// dropped; a y that cannot be drawn is a break.
func decimate(pts []xy, limit int) []xy {
	clean := make([]xy, 0, len(pts))
	for _, q := range pts {
		if !finite(q.x) {
			continue
		}
		if !finite(q.y) {
			q.y = math.NaN()
		}
		clean = append(clean, q)
	}
	if len(clean) <= limit {
		return clean
	}
	per := (len(clean) + limit/2 - 1) / (limit / 2)
	out := make([]xy, 0, limit)
	for i := 0; i < len(clean); i += per {
		lo, hi := -1, -1
		for j := i; j < i+per && j < len(clean); j++ {
			if math.IsNaN(clean[j].y) {
				continue
			}
			if lo < 0 || clean[j].y < clean[lo].y {
				lo = j
			}
			if hi < 0 || clean[j].y > clean[hi].y {
				hi = j
			}
		}
		switch {
		case lo < 0:
			out = append(out, xy{clean[i].x, math.NaN()})
		case lo == hi:
			out = append(out, clean[lo])
		default:
			out = append(out, clean[min(lo, hi)], clean[max(lo, hi)])
		}
	}
	return out
}

// segments splits a line where it has no value.
func segments(pts []xy) [][]xy {
	var out [][]xy
	var cur []xy
	for _, q := range pts {
		if math.IsNaN(q.y) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, q)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// blankTicks are a ticker's ticks without labels: the shared time axis of stacked
// panels is labelled on the lowest only.
type blankTicks struct{ plot.Ticker }

func (b blankTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := b.Ticker.Ticks(lo, hi)
	for i := range ts {
		ts[i].Label = ""
	}
	return ts
}

// tidyTicks are a ticker's ticks with their labels' trailing zeros cut: 75, 2.5,
// not 75.00, 2.50.
type tidyTicks struct{ plot.Ticker }

func (t tidyTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := t.Ticker.Ticks(lo, hi)
	for i := range ts {
		if l := ts[i].Label; strings.Contains(l, ".") && !strings.ContainsAny(l, "eE") {
			ts[i].Label = strings.TrimSuffix(strings.TrimRight(l, "0"), ".")
		}
	}
	return ts
}

// reserveX takes the room of a time axis' tick labels in a panel whose labels are
// blank: the labels at the ends of the lowest panel's axis stick out past its data,
// and gonum pads its data area for them, so that the panels over it, padded alike,
// have their axes where the lowest has its own.
type reserveX struct {
	ticker plot.Ticker
	sty    text.Style
}

func (reserveX) Plot(draw.Canvas, *plot.Plot) {}

func (r reserveX) GlyphBoxes(p *plot.Plot) []plot.GlyphBox {
	var out []plot.GlyphBox
	for _, t := range r.ticker.Ticks(p.X.Min, p.X.Max) {
		if t.IsMinor() || t.Value < p.X.Min || t.Value > p.X.Max {
			continue
		}
		rect := r.sty.Rectangle(t.Label)
		rect.Min.Y, rect.Max.Y = 0, 0 // no height: the vertical padding is the panel's own
		out = append(out, plot.GlyphBox{X: p.X.Norm(t.Value), Rectangle: rect})
	}
	return out
}

// logTicks label 1, 2 and 5 of every decade: a latency CDF spans one or two.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for d := math.Pow10(int(math.Floor(math.Log10(lo)))); d <= hi && len(ts) < 1000; d *= 10 {
		for i := 1; i < 10; i++ {
			v := d * float64(i)
			t := plot.Tick{Value: v}
			if i == 1 || i == 2 || i == 5 {
				t.Label = strconv.FormatFloat(v, 'g', 4, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// valueRange is the range of a panel's values: from 0 (or the least, below it) to
// the top percentile of the pooled values, with 4% of room. The scaled layout takes
// the 99th, so that a few outliers (a spike as a flow starts) do not flatten the
// rest: flent's scaled plots take the 95th, which with two setups on one axis cuts
// off the top of the higher one. 100 is the largest.
func valueRange(ys []float64, top float64) (lo, hi float64) {
	ys = finiteOnly(ys)
	if len(ys) == 0 {
		return 0, 1
	}
	lo = math.Min(0, report.Percentile(ys, 0))
	hi = report.Percentile(ys, top)
	hi += (hi - lo) * 0.04
	if !(hi > lo) || !finite(hi) {
		hi = lo + math.Max(1, math.Abs(lo))
	}
	return lo, hi
}

// style is the text of a figure's own lines.
func style(size float64) text.Style {
	return text.Style{Color: color.Black, Font: font.From(sans, vg.Points(size)), Handler: plot.DefaultTextHandler,
		XAlign: draw.XLeft, YAlign: draw.YTop}
}

const margin = 10 // points around the header

// legendLayout places the runs' legend entries in rows across width: each a swatch
// and its label.
func (f *figure) legendLayout(width vg.Length) (rows [][]int, rowH vg.Length) {
	sty := style(11)
	rowH = sty.Rectangle("Mg").Size().Y * 1.5
	var cur []int
	x := vg.Length(0)
	for i := range f.runs {
		w := vg.Points(26) + sty.Width(f.legendText(i)) + vg.Points(18)
		if len(cur) > 0 && x+w > width {
			rows = append(rows, cur)
			cur, x = nil, 0
		}
		cur = append(cur, i)
		x += w
	}
	if len(cur) > 0 {
		rows = append(rows, cur)
	}
	return rows, rowH
}

// legendText is a run's entry: its label, and a run drawn in no panel says so.
func (f *figure) legendText(i int) string {
	for _, pa := range f.panels {
		if pa.runs[i] {
			return f.runs[i].label
		}
	}
	return f.runs[i].label + " (no data)"
}

// draw draws the figure on c.
func (f *figure) draw(c draw.Canvas) {
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	top := c.Max.Y - vg.Points(margin)
	left, right := c.Min.X+vg.Points(margin), c.Max.X-vg.Points(margin)
	ts, ss := style(15), style(10.5)
	ss.Color = color.Gray{0x40}
	c.FillText(ts, vg.Point{X: left, Y: top}, f.title)
	top -= ts.Rectangle(f.title).Size().Y + vg.Points(4)
	if f.subtitle != "" {
		c.FillText(ss, vg.Point{X: left, Y: top}, f.subtitle)
		top -= ss.Rectangle(f.subtitle).Size().Y + vg.Points(4)
	}
	rows, rowH := f.legendLayout(right - left)
	ls := style(11)
	for _, row := range rows {
		x := left
		for _, i := range row {
			y := top - rowH/2
			c.StrokeLine2(draw.LineStyle{Color: runColor(f.runs[i].color), Width: vg.Points(3), Dashes: dashOf(0, f.runs[i].color)},
				x, y, x+vg.Points(20), y)
			t := f.legendText(i)
			lsc := ls
			lsc.YAlign = draw.YCenter
			c.FillText(lsc, vg.Point{X: x + vg.Points(26), Y: y}, t)
			x += vg.Points(26) + ls.Width(t) + vg.Points(18)
		}
		top -= rowH
	}
	body := draw.Crop(c, vg.Points(margin), -vg.Points(margin), vg.Points(margin), top-c.Max.Y-vg.Points(4))
	f.data = f.data[:0]
	if f.sideBySide {
		total := 0.0
		for _, w := range f.weights {
			total += w
		}
		gap := vg.Points(24)
		avail := body.Max.X - body.Min.X - gap*vg.Length(len(f.panels)-1)
		x := body.Min.X
		subs := make([]draw.Canvas, len(f.panels))
		lo, hi := body.Min.Y, body.Max.Y // the plotting areas' bottom and top, alike
		for i, pa := range f.panels {
			w := avail * vg.Length(f.weights[i]/total)
			subs[i] = draw.Canvas{Canvas: body.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: x, Y: body.Min.Y}, Max: vg.Point{X: x + w, Y: body.Max.Y}}}
			d := pa.p.DataCanvas(subs[i])
			lo, hi = max(lo, d.Min.Y), min(hi, d.Max.Y)
			x += w + gap
		}
		for i, pa := range f.panels {
			d := pa.p.DataCanvas(subs[i])
			sub := draw.Crop(subs[i], 0, 0, lo-d.Min.Y, hi-d.Max.Y)
			pa.p.Draw(sub)
			f.data = append(f.data, pa.p.DataCanvas(sub).Rectangle)
		}
		return
	}
	plots := make([][]*plot.Plot, len(f.panels))
	for i, pa := range f.panels {
		plots[i] = []*plot.Plot{pa.p}
	}
	tiles := plot.Align(plots, draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Points(8)}, body)
	for i, pa := range f.panels {
		pa.p.Draw(tiles[i][0])
		f.data = append(f.data, pa.p.DataCanvas(tiles[i][0]).Rectangle)
	}
}

// styleLegend names a panel's dashes (its ping series, its devices) in the top
// right of its plotting area, on a white ground over the lines: a grey line of
// each dash and the name.
type styleLegend struct{ names []string }

func (l *styleLegend) Plot(c draw.Canvas, _ *plot.Plot) {
	sty := style(9)
	sty.YAlign = draw.YCenter
	rowH := sty.Rectangle("Mg").Size().Y * 1.3
	textW := vg.Length(0)
	for _, n := range l.names {
		textW = max(textW, sty.Width(n))
	}
	pad, swatchW := vg.Points(5), vg.Points(28)
	w, h := pad+swatchW+pad+textW+pad, pad*2+rowH*vg.Length(len(l.names))
	box := vg.Rectangle{Min: vg.Point{X: max(c.Max.X-w-pad, c.Min.X), Y: max(c.Max.Y-h-pad, c.Min.Y)}, Max: vg.Point{X: c.Max.X - pad, Y: c.Max.Y - pad}}
	c.SetColor(color.NRGBA{0xff, 0xff, 0xff, 0xe0})
	c.Fill(box.Path())
	c.StrokeLines(draw.LineStyle{Color: color.Gray{0xbb}, Width: vg.Points(0.5)},
		[]vg.Point{box.Min, {X: box.Min.X, Y: box.Max.Y}, box.Max, {X: box.Max.X, Y: box.Min.Y}, box.Min})
	y := box.Max.Y - pad - rowH/2
	for k, n := range l.names {
		x := box.Min.X + pad
		c.StrokeLine2(draw.LineStyle{Color: color.Gray{0x30}, Width: vg.Points(1.6), Dashes: dashOf(k, 0)}, x, y, x+swatchW, y)
		c.FillText(sty, vg.Point{X: x + swatchW + pad, Y: y}, n)
		y -= rowH
	}
}

// render draws the figure in a format and writes it to w.
func (f *figure) render(format string, w io.Writer) (err error) {
	var cw vg.CanvasWriterTo
	switch format {
	case "png":
		cw = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(f.w, f.h), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))}
	case "svg":
		cw = vgsvg.New(f.w, f.h)
	default:
		return fmt.Errorf("chart: no format %q: %s", format, strings.Join(Formats(), ", "))
	}
	defer func() {
		// gonum panics on what it cannot draw; a figure of a file made by hand
		// must fail as an error, not end the program.
		if p := recover(); p != nil {
			err = fmt.Errorf("chart: drawing failed: %v", p)
		}
	}()
	f.draw(draw.New(cw))
	var b bytes.Buffer
	if _, err := cw.WriteTo(&b); err != nil {
		return fmt.Errorf("chart: encode %s: %w", format, err)
	}
	_, err = w.Write(b.Bytes())
	return err
}

// maxText bounds a text from a file on the figure, in runes.
const maxText = 100

// clean makes a text of a data file (a title, a setup, a host or series name) fit
// to draw: control characters, bidi controls and bytes that are not UTF-8 become
// visible escapes (report.EscapeText), as does what XML cannot carry at all
// (U+FFFE, U+FFFF), so that an SVG of it is well-formed (gonum's SVG escapes
// markup itself); and it is cut to maxText runes.
func clean(s string) string {
	s = report.EscapeText(s)
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == maxText {
			b.WriteString("…")
			break
		}
		switch {
		case r == 0xfffe || r == 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		n++
	}
	return b.String()
}
