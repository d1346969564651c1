package bench

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleCharts() map[string]*Chart {
	x := []string{"1", "16", "100", "1000"}
	return map[string]*Chart{
		"line": {Title: "put: throughput vs clients", XLabel: "clients", YLabel: "puts/s", X: x, Series: []Series{
			{Name: TargetMeganode, Values: []float64{9e3, 61e3, 98e3, 120e3}, Color: colMeganode},
			{Name: TargetEtcd, Values: []float64{5e3, math.NaN(), 40e3, 52e3}, Color: colEtcd},
		}},
		"log": {Title: "put: latency vs clients (p99 solid, p50 dashed)", XLabel: "clients", YLabel: "latency", X: x, LogY: true,
			Format: FmtUs, Series: []Series{
				{Name: TargetMeganode + " p99", Values: []float64{180, 420, 2100, 19000}, Color: colMeganode},
				{Name: TargetMeganode + " p50", Values: []float64{95, 210, 900, 7000}, Color: colMeganode, Dashed: true},
				{Name: TargetEtcd + " p99", Values: []float64{900, 0, 5200, 61000}, Color: colEtcd}, // 0 has no place on a log axis
			}},
		"bars": {Title: "watch: events delivered per second", XLabel: "writers (clients)", YLabel: "events/s", X: x[:1], Series: []Series{
			{Name: TargetMeganode, Values: []float64{210e3}, Color: colMeganode},
			{Name: TargetEtcd, Values: []float64{90e3}, Color: colEtcd, Dashed: true},
		}},
		"empty": {Title: "nothing measured", XLabel: "minute", YLabel: "RSS", X: x, Series: []Series{
			{Name: TargetMeganode, Values: []float64{math.NaN(), math.NaN(), math.NaN(), math.NaN()}, Color: colMeganode},
		}},
	}
}

// near counts pixels within a small distance of c (anti-aliasing blends edges).
func near(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			d := math.Abs(float64(r>>8)-float64(c.R)) + math.Abs(float64(g>>8)-float64(c.G)) + math.Abs(float64(bl>>8)-float64(c.B))
			if d < 30 {
				n++
			}
		}
	}
	return n
}

func TestChartPNG(t *testing.T) {
	for name, c := range sampleCharts() {
		b, err := c.PNG()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		if sz := img.Bounds().Size(); sz.X != chartW || sz.Y != chartH {
			t.Errorf("%s: %v, want %dx%d", name, sz, chartW, chartH)
		}
		if dir := os.Getenv("CHART_OUT"); dir != "" {
			os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644)
		}
		for _, s := range c.Series {
			// a line, its markers and its legend entry, or a bar: far more than a legend's thumbnail alone
			min := 400
			if name == "empty" {
				min = 20 // the legend thumbnail only
			}
			col := s.Color
			if len(c.X) == 1 && s.Dashed { // a lighter bar: the colour at alpha 0x90 over white
				mix := func(v uint8) uint8 { return uint8((float64(v)*0x90 + 255*float64(0xff-0x90)) / 0xff) }
				col = color.RGBA{mix(col.R), mix(col.G), mix(col.B), 0xff}
			}
			if got := near(img, col); got < min {
				t.Errorf("%s: series %q: %d pixels of its colour, want ≥ %d", name, s.Name, got, min)
			}
		}
	}
}

func TestChartSVG(t *testing.T) {
	for name, c := range sampleCharts() {
		s := c.SVG()
		if !strings.HasPrefix(s, "<svg") {
			t.Fatalf("%s: does not start with <svg: %.60q", name, s)
		}
		d := xml.NewDecoder(strings.NewReader(s))
		var texts []string
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: invalid SVG: %v", name, err)
			}
			if cd, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(cd)) != "" {
				texts = append(texts, string(cd))
			}
		}
		all := strings.Join(texts, "\n")
		want := []string{c.Title, c.XLabel, c.YLabel}
		for _, s := range c.Series {
			want = append(want, s.Name)
		}
		for _, w := range want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: text %q missing from the SVG", name, w)
			}
		}
	}
	// a value label of the throughput chart, in the default format
	if s := sampleCharts()["line"].SVG(); !strings.Contains(s, HumanRate(120e3)) {
		t.Errorf("value label %q missing", HumanRate(120e3))
	}
}

func TestLogTicks(t *testing.T) {
	label := func(lo, hi float64) []string {
		var out []string
		for _, tk := range logTicks(FmtUs).Ticks(lo, hi) {
			if !tk.IsMinor() {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	if got := strings.Join(label(120, 2500), ","); got != "200 µs,500 µs,1 ms,2 ms" {
		t.Errorf("within a decade and a bit: %s", got)
	}
	if got := strings.Join(label(50, 5e6), ","); got != "100 µs,1 ms,10 ms,100 ms,1 s" {
		t.Errorf("five decades: %s", got)
	}
}
