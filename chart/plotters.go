package chart

import (
	"image/color"
	"math"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/bloatbench/bloatbench/report"
)

// slotWidth is the width of each run's bar or box in a category, and where the
// run's sits: the runs side by side in 80% of the category's width.
func slotWidth(dataWidth vg.Length, cats, runs int) vg.Length {
	w := dataWidth / vg.Length(cats) * 0.8 / vg.Length(runs)
	return max(min(w, vg.Points(60)), vg.Points(2))
}

func slotOffset(w vg.Length, i, runs int) vg.Length {
	return w * vg.Length(float64(i)-float64(runs-1)/2)
}

// categoryPanel is a panel of named categories along x.
func categoryPanel(id, ylabel string, cats []string) *panel {
	pa := newPanel(id)
	pa.grid.x = false
	pa.p.NominalX(cats...)
	pa.p.X.Min, pa.p.X.Max = -0.5, float64(len(cats))-0.5
	pa.p.Y.Label.Text = ylabel
	return pa
}

// barPanel draws a bar per run and category (vals[run][category]), labelled with
// its value; a run without a value has no bar. fixedMax, if more than 0, is the
// axis' top.
func barPanel(id, ylabel string, cats []string, vals [][]float64, rs []*runData, dataWidth vg.Length, fixedMax float64) *panel {
	pa := categoryPanel(id, ylabel, cats)
	w := slotWidth(dataWidth, len(cats), len(rs))
	top := 0.0
	for i, row := range vals {
		for k, v := range row {
			if !finite(v) {
				continue
			}
			pa.add(&bar{x: float64(k), off: slotOffset(w, i, len(rs)), width: w, v: v, color: runColor(rs[i].color), label: w >= vg.Points(26)})
			pa.runs[i] = true
			top = math.Max(top, v)
		}
	}
	pa.p.Y.Min, pa.p.Y.Max = 0, top*1.12
	if !(pa.p.Y.Max > 0) {
		pa.p.Y.Max = 1
	}
	if fixedMax > 0 {
		pa.p.Y.Max = fixedMax
	}
	return pa
}

// bar is one bar from 0 to v, with its value above it.
type bar struct {
	x          float64
	off, width vg.Length
	v          float64
	color      color.NRGBA
	label      bool
}

func (b *bar) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	x := trX(b.x) + b.off
	y0, y1 := clampY(c, trY(0)), clampY(c, trY(b.v))
	pts := []vg.Point{{X: x - b.width/2, Y: y0}, {X: x - b.width/2, Y: y1}, {X: x + b.width/2, Y: y1}, {X: x + b.width/2, Y: y0}}
	c.FillPolygon(b.color, pts)
	if !b.label {
		return
	}
	sty := style(8.5)
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YBottom
	c.FillText(sty, vg.Point{X: x, Y: min(y1+vg.Points(2), c.Max.Y-vg.Points(10))}, formatValue(b.v))
}

func clampY(c draw.Canvas, y vg.Length) vg.Length { return max(min(y, c.Max.Y), c.Min.Y) }

// formatValue writes a bar's value as the summary's tables do, to two decimals.
func formatValue(v float64) string {
	if math.Abs(v) >= 1e6 {
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// boxPanel draws a box per run and category (vals[run][category] its values); a
// run without values has no box.
func boxPanel(id, ylabel string, cats []string, vals [][][]float64, rs []*runData, dataWidth vg.Length, fixedMax float64) *panel {
	pa := categoryPanel(id, ylabel, cats)
	w := slotWidth(dataWidth, len(cats), len(rs))
	top := 0.0
	for i, row := range vals {
		for k, vs := range row {
			b, ok := newBox(vs)
			if !ok {
				continue
			}
			b.x, b.off, b.width, b.color = float64(k), slotOffset(w, i, len(rs)), w*0.85, runColor(rs[i].color)
			pa.add(b)
			pa.runs[i] = true
			top = math.Max(top, b.max)
		}
	}
	pa.p.Y.Min, pa.p.Y.Max = 0, top*1.05
	if !(pa.p.Y.Max > 0) {
		pa.p.Y.Max = 1
	}
	if fixedMax > 0 {
		pa.p.Y.Max = fixedMax
	}
	return pa
}

// box is a box plot as matplotlib (and so flent) draws one: the quartiles, the
// median, whiskers to the furthest values within 1.5 interquartile ranges of the
// box, the values beyond as points; and the mean, a diamond. The quartiles and the
// median are report.Percentile's, the summary's.
type box struct {
	x                 float64
	off, width        vg.Length
	q1, med, q3       float64
	lo, hi, mean, max float64
	fliers            []float64
	color             color.NRGBA
}

// maxFliers bounds the points drawn beyond a box's whiskers.
const maxFliers = 300

func newBox(vs []float64) (*box, bool) {
	vs = finiteOnly(vs)
	if len(vs) == 0 {
		return nil, false
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	b := &box{q1: report.Percentile(s, 25), med: report.Percentile(s, 50), q3: report.Percentile(s, 75), mean: report.Mean(s), max: s[len(s)-1]}
	iqr := b.q3 - b.q1
	lof, hif := b.q1-1.5*iqr, b.q3+1.5*iqr
	b.lo, b.hi = b.q1, b.q3
	var fliers []float64
	for _, v := range s {
		switch {
		case v < lof || v > hif:
			fliers = append(fliers, v)
		default:
			b.lo, b.hi = math.Min(b.lo, v), math.Max(b.hi, v)
		}
	}
	if len(fliers) > maxFliers {
		// Evenly through them, the extremes kept.
		picked := make([]float64, 0, maxFliers)
		for k := range maxFliers {
			picked = append(picked, fliers[int(math.Round(float64(k)*float64(len(fliers)-1)/float64(maxFliers-1)))])
		}
		fliers = picked
	}
	b.fliers = fliers
	for _, x := range []float64{b.q1, b.med, b.q3, b.mean} {
		if !finite(x) {
			return nil, false // interpolating between huge values overflowed
		}
	}
	return b, true
}

func (b *box) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	y := func(v float64) vg.Length { return clampY(c, trY(v)) }
	x := trX(b.x) + b.off
	l, r := x-b.width/2, x+b.width/2
	fill := faded(b.color, 0x50)
	edge := draw.LineStyle{Color: b.color, Width: vg.Points(1.2)}
	rect := []vg.Point{{X: l, Y: y(b.q1)}, {X: l, Y: y(b.q3)}, {X: r, Y: y(b.q3)}, {X: r, Y: y(b.q1)}}
	c.FillPolygon(fill, rect)
	c.StrokeLines(edge, append(rect, rect[0]))
	c.StrokeLine2(draw.LineStyle{Color: b.color, Width: vg.Points(2.4)}, l, y(b.med), r, y(b.med))
	whisker := draw.LineStyle{Color: b.color, Width: vg.Points(1)}
	c.StrokeLine2(whisker, x, y(b.q3), x, y(b.hi))
	c.StrokeLine2(whisker, x, y(b.q1), x, y(b.lo))
	c.StrokeLine2(whisker, x-b.width/4, y(b.hi), x+b.width/4, y(b.hi))
	c.StrokeLine2(whisker, x-b.width/4, y(b.lo), x+b.width/4, y(b.lo))
	for _, v := range b.fliers {
		pt := vg.Point{X: x, Y: trY(v)}
		if c.Contains(pt) {
			c.DrawGlyph(draw.GlyphStyle{Color: b.color, Radius: vg.Points(1.6), Shape: draw.RingGlyph{}}, pt)
		}
	}
	if pt := (vg.Point{X: x, Y: trY(b.mean)}); c.Contains(pt) {
		c.DrawGlyph(draw.GlyphStyle{Color: color.Black, Radius: vg.Points(3), Shape: diamond{}}, pt)
	}
}

// diamond is the mean's glyph.
type diamond struct{}

func (diamond) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := sty.Radius
	var p vg.Path
	p.Move(vg.Point{X: pt.X, Y: pt.Y + r})
	p.Line(vg.Point{X: pt.X + r, Y: pt.Y})
	p.Line(vg.Point{X: pt.X, Y: pt.Y - r})
	p.Line(vg.Point{X: pt.X - r, Y: pt.Y})
	p.Close()
	c.SetColor(color.White)
	c.Fill(p)
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(1)})
	c.Stroke(p)
}
