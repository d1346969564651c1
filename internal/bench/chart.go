package bench

import (
	"bytes"
	"fmt"
	"html"
	"image"
	"image/color"
	"image/png"
	"math"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Chart is a small line (or, with one x value, bar) chart over categorical x
// values, drawn by hand both as SVG (for the HTML page) and as PNG (for the
// markdown report), from the same drawing code.
type Chart struct {
	Title  string
	XLabel string
	YLabel string
	X      []string
	Series []Series
	LogY   bool
	Format func(float64) string // y tick and value labels
}

// Series is one line; NaN marks a missing point.
type Series struct {
	Name   string
	Values []float64
	Color  color.RGBA
	Dashed bool
}

const chartW, chartH = 800, 440

var (
	colMeganode = color.RGBA{0x1f, 0x6f, 0xc5, 0xff}
	colEtcd     = color.RGBA{0xd9, 0x48, 0x1c, 0xff}
	colOther    = color.RGBA{0x55, 0x8b, 0x2f, 0xff}
	colAxis     = color.RGBA{0x33, 0x33, 0x33, 0xff}
	colGrid     = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	colText     = color.RGBA{0x22, 0x22, 0x22, 0xff}
)

func targetColor(t string) color.RGBA {
	switch t {
	case TargetMeganode:
		return colMeganode
	case TargetEtcd:
		return colEtcd
	}
	return colOther
}

type anchor int

const (
	anchorStart anchor = iota
	anchorMiddle
	anchorEnd
)

// painter is what the chart is drawn on.
type painter interface {
	line(x1, y1, x2, y2 float64, c color.RGBA, width float64, dashed bool)
	rect(x, y, w, h float64, c color.RGBA)
	circle(x, y, r float64, c color.RGBA)
	text(x, y float64, s string, a anchor, c color.RGBA, bold bool)
}

// SVG renders the chart as an <svg> element.
func (c *Chart) SVG() string {
	s := &svgPainter{}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" `+
		`font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`, chartW, chartH, chartW, chartH)
	s.rect(0, 0, chartW, chartH, color.RGBA{0xff, 0xff, 0xff, 0xff})
	c.draw(s)
	s.b.WriteString("</svg>")
	return s.b.String()
}

// PNG renders the chart as a PNG image.
func (c *Chart) PNG() ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	p := &pngPainter{img: img}
	p.rect(0, 0, chartW, chartH, color.RGBA{0xff, 0xff, 0xff, 0xff})
	c.draw(p)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (c *Chart) draw(p painter) {
	const left, right, top, bottom = 80.0, 170.0, 44.0, 56.0
	pw, ph := chartW-left-right, chartH-top-bottom
	format := c.Format
	if format == nil {
		format = func(v float64) string { return HumanRate(v) }
	}
	p.text(chartW/2, 24, c.Title, anchorMiddle, colText, true)

	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, v := range s.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) || (c.LogY && v <= 0) {
				continue
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	bars := len(c.X) == 1
	var ticks []float64
	var ymap func(v float64) float64
	if c.LogY && !bars {
		l0 := math.Floor(math.Log10(lo))
		l1 := math.Ceil(math.Log10(hi))
		if l1 <= l0 {
			l1 = l0 + 1
		}
		for e := l0; e <= l1; e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if v >= math.Pow(10, l0) && v <= math.Pow(10, l1) && (l1-l0 <= 3 || m == 1) {
					ticks = append(ticks, v)
				}
			}
		}
		ymap = func(v float64) float64 {
			return top + ph - (math.Log10(v)-l0)/(l1-l0)*ph
		}
	} else {
		step := niceStep(hi / 5)
		ymax := math.Ceil(hi*1.05/step) * step
		if ymax <= 0 {
			ymax = 1
		}
		for v := 0.0; v <= ymax+step/2; v += step {
			ticks = append(ticks, v)
		}
		maxY := ticks[len(ticks)-1]
		ymap = func(v float64) float64 { return top + ph - v/maxY*ph }
	}
	for _, t := range ticks {
		y := ymap(t)
		p.line(left, y, left+pw, y, colGrid, 1, false)
		lbl := format(t)
		if t == 0 {
			lbl = "0"
		}
		p.text(left-8, y+4, lbl, anchorEnd, colText, false)
	}
	p.line(left, top, left, top+ph, colAxis, 1, false)
	p.line(left, top+ph, left+pw, top+ph, colAxis, 1, false)
	p.text(left, top-10, c.YLabel, anchorStart, colText, false)
	p.text(left+pw/2, chartH-14, c.XLabel, anchorMiddle, colText, false)

	n := len(c.X)
	slot := pw / float64(max(n, 1))
	xpos := func(i int) float64 { return left + slot*(float64(i)+0.5) }
	for i, x := range c.X {
		p.line(xpos(i), top+ph, xpos(i), top+ph+5, colAxis, 1, false)
		p.text(xpos(i), top+ph+19, x, anchorMiddle, colText, false)
	}

	if bars {
		k := float64(len(c.Series))
		bw := slot * 0.6 / math.Max(k, 1)
		for j, s := range c.Series {
			if len(s.Values) == 0 || math.IsNaN(s.Values[0]) {
				continue
			}
			v := s.Values[0]
			x := xpos(0) - slot*0.3 + bw*float64(j)
			y := ymap(v)
			col := s.Color
			if s.Dashed {
				col.A = 0x90
			}
			p.rect(x+2, y, bw-4, top+ph-y, col)
			p.text(x+bw/2, y-5, format(v), anchorMiddle, colText, false)
		}
	} else {
		for _, s := range c.Series {
			var px, py float64
			have := false
			for i, v := range s.Values {
				if i >= n || math.IsNaN(v) || (c.LogY && v <= 0) {
					have = false
					continue
				}
				x, y := xpos(i), ymap(v)
				if have {
					p.line(px, py, x, y, s.Color, 2.5, s.Dashed)
				}
				px, py, have = x, y, true
			}
			for i, v := range s.Values {
				if i >= n || math.IsNaN(v) || (c.LogY && v <= 0) {
					continue
				}
				p.circle(xpos(i), ymap(v), 4, s.Color)
				if !s.Dashed {
					p.text(xpos(i), ymap(v)-9, format(v), anchorMiddle, s.Color, false)
				}
			}
		}
	}
	// Legend.
	lx, ly := left+pw+20, top+10
	for _, s := range c.Series {
		p.line(lx, ly-4, lx+26, ly-4, s.Color, 2.5, s.Dashed)
		p.text(lx+34, ly, s.Name, anchorStart, colText, false)
		ly += 20
	}
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*e {
			return m * e
		}
	}
	return 10 * e
}

// ---- SVG ----

type svgPainter struct{ b strings.Builder }

func svgColor(c color.RGBA) string {
	if c.A == 0xff {
		return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)
	}
	return fmt.Sprintf("rgba(%d,%d,%d,%.2f)", c.R, c.G, c.B, float64(c.A)/255)
}

func (s *svgPainter) line(x1, y1, x2, y2 float64, c color.RGBA, w float64, dashed bool) {
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="7 5"`
	}
	fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f" stroke-linecap="round"%s/>`,
		x1, y1, x2, y2, svgColor(c), w, dash)
}

func (s *svgPainter) rect(x, y, w, h float64, c color.RGBA) {
	fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x, y, w, h, svgColor(c))
}

func (s *svgPainter) circle(x, y, r float64, c color.RGBA) {
	fmt.Fprintf(&s.b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"/>`, x, y, r, svgColor(c))
}

func (s *svgPainter) text(x, y float64, str string, a anchor, c color.RGBA, bold bool) {
	anch := [...]string{"start", "middle", "end"}[a]
	weight := ""
	if bold {
		weight = ` font-weight="bold" font-size="15"`
	}
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="%s"%s>%s</text>`, x, y, anch, svgColor(c), weight,
		html.EscapeString(str))
}

// ---- PNG ----

type pngPainter struct{ img *image.RGBA }

func (p *pngPainter) blend(x, y int, c color.RGBA, alpha float64) {
	if !(image.Point{x, y}.In(p.img.Rect)) || alpha <= 0 {
		return
	}
	a := alpha * float64(c.A) / 255
	if a > 1 {
		a = 1
	}
	o := p.img.RGBAAt(x, y)
	mix := func(dst, src uint8) uint8 { return uint8(float64(dst)*(1-a) + float64(src)*a + 0.5) }
	p.img.SetRGBA(x, y, color.RGBA{mix(o.R, c.R), mix(o.G, c.G), mix(o.B, c.B), 0xff})
}

// segment draws an anti-aliased segment of width w with round ends.
func (p *pngPainter) segment(x1, y1, x2, y2 float64, c color.RGBA, w float64) {
	r := w / 2
	minX, maxX := int(math.Floor(math.Min(x1, x2)-r-1)), int(math.Ceil(math.Max(x1, x2)+r+1))
	minY, maxY := int(math.Floor(math.Min(y1, y2)-r-1)), int(math.Ceil(math.Max(y1, y2)+r+1))
	dx, dy := x2-x1, y2-y1
	l2 := dx*dx + dy*dy
	for y := minY; y <= maxY; y++ {
		for x := minX; x <= maxX; x++ {
			px, py := float64(x)+0.5, float64(y)+0.5
			t := 0.0
			if l2 > 0 {
				t = ((px-x1)*dx + (py-y1)*dy) / l2
				t = math.Max(0, math.Min(1, t))
			}
			ex, ey := x1+t*dx-px, y1+t*dy-py
			d := math.Sqrt(ex*ex + ey*ey)
			p.blend(x, y, c, math.Min(1, r+0.5-d))
		}
	}
}

func (p *pngPainter) line(x1, y1, x2, y2 float64, c color.RGBA, w float64, dashed bool) {
	if w <= 1 && !dashed && (x1 == x2 || y1 == y2) { // crisp axis and grid lines
		for x := int(math.Min(x1, x2)); x <= int(math.Max(x1, x2)); x++ {
			for y := int(math.Min(y1, y2)); y <= int(math.Max(y1, y2)); y++ {
				p.blend(x, y, c, 1)
			}
		}
		return
	}
	if !dashed {
		p.segment(x1, y1, x2, y2, c, w)
		return
	}
	l := math.Hypot(x2-x1, y2-y1)
	if l == 0 {
		return
	}
	for s := 0.0; s < l; s += 12 {
		e := math.Min(s+7, l)
		p.segment(x1+(x2-x1)*s/l, y1+(y2-y1)*s/l, x1+(x2-x1)*e/l, y1+(y2-y1)*e/l, c, w)
	}
}

func (p *pngPainter) rect(x, y, w, h float64, c color.RGBA) {
	for yy := int(math.Round(y)); yy < int(math.Round(y+h)); yy++ {
		for xx := int(math.Round(x)); xx < int(math.Round(x+w)); xx++ {
			p.blend(xx, yy, c, 1)
		}
	}
}

func (p *pngPainter) circle(x, y, r float64, c color.RGBA) { p.segment(x, y, x, y, c, 2*r) }

func (p *pngPainter) text(x, y float64, s string, a anchor, c color.RGBA, bold bool) {
	face := basicfont.Face7x13 // ASCII only
	s = asciiText.Replace(s)
	w := font.MeasureString(face, s).Round()
	switch a {
	case anchorMiddle:
		x -= float64(w) / 2
	case anchorEnd:
		x -= float64(w)
	}
	d := &font.Drawer{Dst: p.img, Src: image.NewUniform(c), Face: face}
	d.Dot = fixed.P(int(math.Round(x)), int(math.Round(y)))
	d.DrawString(s)
	if bold {
		d.Dot = fixed.P(int(math.Round(x))+1, int(math.Round(y)))
		d.DrawString(s)
	}
}

var asciiText = strings.NewReplacer("→", "->", "µ", "u", "×", "x", "…", "...", "≤", "<=", "≥", ">=", "—", "-", "–", "-", "·", ".")
