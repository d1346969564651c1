package bench

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart is a small line (or, with one x value, bar) chart over categorical x
// values, drawn with gonum.org/v1/plot both as SVG (for the HTML page) and as PNG
// (for the markdown report).
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

// chartW × chartH pixels at chartDPI: the PNG's size, and the SVG's in CSS pixels.
const chartW, chartH, chartDPI = 800, 440, 96

var (
	colMeganode = color.RGBA{0x1f, 0x6f, 0xc5, 0xff}
	colEtcd     = color.RGBA{0xd9, 0x48, 0x1c, 0xff}
	colOther    = color.RGBA{0x55, 0x8b, 0x2f, 0xff}
	colGrid     = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	colText     = color.RGBA{0x22, 0x22, 0x22, 0xff}
)

func targetColor(t string) color.RGBA {
	switch kind, _ := targetKind(t); kind {
	case TargetMeganode:
		return colMeganode
	case TargetEtcd:
		return colEtcd
	}
	return colOther
}

func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / chartDPI }

// SVG renders the chart as an <svg> element (no XML prolog), to be inlined in HTML.
func (c *Chart) SVG() string {
	cv := vgsvg.New(px(chartW), px(chartH))
	c.draw(cv)
	var b bytes.Buffer
	if _, err := cv.WriteTo(&b); err != nil {
		return fmt.Sprintf("<p>chart %q: %v</p>", c.Title, err)
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:]
	}
	return s
}

// PNG renders the chart as a PNG image.
func (c *Chart) PNG() ([]byte, error) {
	cv := vgimg.NewWith(vgimg.UseWH(px(chartW), px(chartH)), vgimg.UseDPI(chartDPI))
	c.draw(cv)
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: cv}).WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func sans(size float64, bold bool) font.Font {
	f := font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(size)}
	if bold {
		f.Weight = xfont.WeightBold
	}
	return f
}

// draw lays the plot out on the left and the legend in a column on the right.
func (c *Chart) draw(cv vg.CanvasSizer) {
	dc := draw.New(cv)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	p, leg := c.plot()
	legW := vg.Length(0)
	for _, s := range c.Series {
		legW = max(legW, leg.TextStyle.Width(s.Name))
	}
	if legW > 0 {
		legW += leg.ThumbnailWidth + vg.Points(24)
	}
	pad := vg.Points(8)
	p.Draw(draw.Crop(dc, pad, -legW-pad, pad, -pad))
	if legW > 0 {
		leg.Draw(draw.Crop(dc, dc.Max.X-legW, -pad, pad, -px(60)))
	}
}

// plot builds the gonum plot of the chart and its legend (drawn apart, outside the data).
func (c *Chart) plot() (*plot.Plot, plot.Legend) {
	format := c.Format
	if format == nil {
		format = func(v float64) string { return HumanRate(v) }
	}
	p := plot.New()
	p.BackgroundColor = nil
	p.Title.Text = c.Title
	p.Title.TextStyle.Font = sans(11, true)
	p.Title.TextStyle.Color = colText
	p.Title.Padding = vg.Points(10)
	p.X.Label.Text, p.Y.Label.Text = c.XLabel, c.YLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = sans(9, false)
		a.Label.TextStyle.Color = colText
		a.Tick.Label.Font = sans(8.5, false)
		a.Tick.Label.Color = colText
	}
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.TextStyle.Font = sans(9, false)
	leg.TextStyle.Color = colText
	leg.ThumbnailWidth = vg.Points(22)
	leg.Padding = vg.Points(5)

	n := len(c.X)
	bars := n == 1
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for i, v := range s.Values {
			if i < n && usable(v, c.LogY && !bars) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	logY := c.LogY && !bars && !math.IsInf(lo, 0)
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	grid.Horizontal.Color = colGrid
	grid.Horizontal.Dashes = nil
	grid.Horizontal.Width = px(1)
	p.Add(grid)

	if n > 0 {
		p.NominalX(c.X...)
	}
	p.X.Min, p.X.Max = -0.5, float64(max(n, 1))-0.5
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks(format)
		p.Y.Min, p.Y.Max = lo/1.3, hi*2 // room above for the value labels
	} else {
		p.Y.Tick.Marker = relabel(plot.DefaultTicks{}, format)
		p.Y.Min, p.Y.Max = 0, max(hi*1.12, 1e-9)
	}

	valueLabel := func(x, y float64, s Series, dx vg.Length) {
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: x, Y: y}}, Labels: []string{format(y)}})
		if err != nil {
			return
		}
		for i := range l.TextStyle {
			l.TextStyle[i].Font = sans(8, false)
			l.TextStyle[i].Color = s.Color
			l.TextStyle[i].XAlign = draw.XCenter
		}
		if bars {
			for i := range l.TextStyle {
				l.TextStyle[i].Color = colText
			}
		}
		l.Offset = vg.Point{X: dx, Y: vg.Points(5)}
		p.Add(l)
	}

	if bars {
		k := len(c.Series)
		bw := min(vg.Points(48), vg.Points(300)/vg.Length(max(k, 1)))
		for j, s := range c.Series {
			var col color.Color = s.Color
			if s.Dashed { // the second style of a pair: a lighter bar
				col = color.NRGBA{s.Color.R, s.Color.G, s.Color.B, 0x90}
			}
			off := bw * (vg.Length(j) - vg.Length(k-1)/2)
			leg.Add(s.Name, &plotter.Line{LineStyle: lineStyle(s)})
			if len(s.Values) == 0 || !usable(s.Values[0], false) {
				continue
			}
			b, err := plotter.NewBarChart(plotter.Values{s.Values[0]}, bw-vg.Points(3))
			if err != nil {
				continue
			}
			b.Color, b.LineStyle.Width, b.Offset = col, 0, off
			p.Add(b)
			valueLabel(0, s.Values[0], s, off)
		}
		return p, leg
	}
	for _, s := range c.Series {
		ls := lineStyle(s)
		leg.Add(s.Name, &plotter.Line{LineStyle: ls})
		var run plotter.XYs
		flush := func() {
			if len(run) > 1 {
				if l, err := plotter.NewLine(run); err == nil {
					l.LineStyle = ls
					p.Add(l)
				}
			}
			run = nil
		}
		var pts plotter.XYs
		for i, v := range s.Values {
			if i >= n || !usable(v, logY) {
				flush()
				continue
			}
			run = append(run, plotter.XY{X: float64(i), Y: v})
			pts = append(pts, plotter.XY{X: float64(i), Y: v})
		}
		flush()
		if len(pts) == 0 {
			continue
		}
		if sc, err := plotter.NewScatter(pts); err == nil {
			sc.GlyphStyle = draw.GlyphStyle{Color: s.Color, Radius: vg.Points(3), Shape: draw.CircleGlyph{}}
			p.Add(sc)
		}
		if !s.Dashed {
			for _, pt := range pts {
				valueLabel(pt.X, pt.Y, s, 0)
			}
		}
	}
	return p, leg
}

func usable(v float64, log bool) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!log || v > 0)
}

func lineStyle(s Series) draw.LineStyle {
	ls := draw.LineStyle{Color: s.Color, Width: vg.Points(2)}
	if s.Dashed {
		ls.Dashes = []vg.Length{vg.Points(5), vg.Points(4)}
	}
	return ls
}

// logTicks marks 1, 2 and 5 times each power of ten between lo and hi (only the powers
// of ten past three decades) with labels in format, the other multiples unlabelled;
// gonum's LogTicks labels powers of ten only, which leaves a chart within one decade
// with a single label.
func logTicks(format func(float64) string) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		e0, e1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		var ts []plot.Tick
		for e := e0; e <= e1; e++ {
			for m := 1.0; m < 10; m++ {
				v := m * math.Pow(10, e)
				if v < lo || v > hi {
					continue
				}
				t := plot.Tick{Value: v}
				if m == 1 || (e1-e0 <= 3 && (m == 2 || m == 5)) {
					t.Label = format(v)
				}
				ts = append(ts, t)
			}
		}
		return ts
	})
}

// relabel keeps the ticks t chooses and labels the major ones with format.
func relabel(t plot.Ticker, format func(float64) string) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		ts := t.Ticks(lo, hi)
		for i := range ts {
			switch {
			case ts[i].IsMinor():
			case ts[i].Value == 0:
				ts[i].Label = "0"
			default:
				ts[i].Label = format(ts[i].Value)
			}
		}
		return ts
	})
}
