// Package chart renders the PNG line and bar charts of BENCHMARKS.md with
// gonum.org/v1/plot (its Liberation fonts, axes, ticks and legends): a thin
// layer that fixes the size and the look shared by every chart.
package chart

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Palette for series, in order.
var Palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
}

// Default size of every chart, in pixels.
const (
	Width  = 800
	Height = 480
)

// Series is one named line.
type Series struct {
	Name string
	X, Y []float64
}

// Line describes a line chart.
type Line struct {
	Title, XLabel, YLabel string
	Series                []Series
	LogX                  bool // logarithmic x axis, ticks at the data's x values
	YMin                  *float64
	W, H                  int
}

// Bar describes a bar chart: one bar per label, with its value printed above
// the bar (ValueFmt, default Format).
type Bar struct {
	Title, YLabel string
	Labels        []string
	Values        []float64
	ValueFmt      func(float64) string
	W, H          int
}

// Save renders the line chart as a PNG file.
func (l Line) Save(path string) error {
	p := newPlot(l.Title, l.XLabel, l.YLabel)
	var xs []float64
	for i, s := range l.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("chart %q: series %q has %d x and %d y values", l.Title, s.Name, len(s.X), len(s.Y))
		}
		pts := make(plotter.XYs, len(s.X))
		for k := range s.X {
			pts[k].X, pts[k].Y = s.X[k], s.Y[k]
		}
		xs = append(xs, s.X...)
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("chart %q: %w", l.Title, err)
		}
		c := Palette[i%len(Palette)]
		line.Color, line.Width = c, vg.Points(2)
		points.Color, points.Radius = c, vg.Points(3)
		p.Add(line, points)
		if s.Name != "" {
			p.Legend.Add(s.Name, line, points)
		}
	}
	if l.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = dataTicks(xs)
	}
	if l.YMin != nil {
		p.Y.Min = *l.YMin
	} else {
		p.Y.Min = min(p.Y.Min, 0)
	}
	p.Y.Max += (p.Y.Max - p.Y.Min) * 0.15 // room for the legend above the data
	return save(p, l.W, l.H, path)
}

// Save renders the bar chart as a PNG file.
func (b Bar) Save(path string) error {
	if len(b.Labels) != len(b.Values) {
		return fmt.Errorf("chart %q: %d labels and %d values", b.Title, len(b.Labels), len(b.Values))
	}
	p := newPlot(b.Title, "", b.YLabel)
	format := b.ValueFmt
	if format == nil {
		format = Format
	}
	top := 0.0
	for i, v := range b.Values {
		bars, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(60))
		if err != nil {
			return fmt.Errorf("chart %q: %w", b.Title, err)
		}
		bars.XMin = float64(i)
		bars.Color = Palette[i%len(Palette)]
		bars.LineStyle.Width = 0
		p.Add(bars)
		top = max(top, v)
	}
	pts := make(plotter.XYs, len(b.Values))
	texts := make([]string, len(b.Values))
	for i, v := range b.Values {
		pts[i].X, pts[i].Y = float64(i), v
		texts[i] = format(v)
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: texts})
	if err != nil {
		return fmt.Errorf("chart %q: %w", b.Title, err)
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].XAlign = draw.XCenter
		labels.TextStyle[i].YAlign = draw.YBottom
	}
	labels.Offset = vg.Point{Y: vg.Points(4)}
	p.Add(labels)
	p.NominalX(b.Labels...)
	p.Y.Min, p.Y.Max = 0, top*1.12
	return save(p, b.W, b.H, path)
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.X.Label.Text, p.Y.Label.Text = x, y
	p.Y.Tick.Marker = formatTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(50)
	return p
}

// save draws p onto an image of exactly w × h pixels (defaults Width ×
// Height) and writes it as PNG.
func save(p *plot.Plot, w, h int, path string) error {
	if w == 0 {
		w = Width
	}
	if h == 0 {
		h = Height
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	c := vgimg.NewWith(vgimg.UseImage(img), vgimg.UseDPI(96))
	m := vg.Points(10) // a margin on every side
	p.Draw(draw.Crop(draw.New(c), m, -m, m, -m))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, c.Image()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// formatTicks are gonum's default ticks labelled with Format (25K, 1.5M).
type formatTicks struct{}

func (formatTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = Format(ticks[i].Value)
		}
	}
	return ticks
}

// dataTicks marks the x values of the data (a log axis over a handful of
// settings: 50, 100, 200, 500, ...).
func dataTicks(xs []float64) plot.ConstantTicks {
	seen := map[float64]bool{}
	var t plot.ConstantTicks
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			t = append(t, plot.Tick{Value: x, Label: Format(x)})
		}
	}
	return t
}

// Format renders v compactly for labels: 1500 -> 1.5K, 25000 -> 25K,
// 2e6 -> 2M, 0.25 -> 0.25.
func Format(v float64) string {
	av := math.Abs(v)
	switch {
	case av >= 1e6:
		return trimZeros(fmt.Sprintf("%.1f", v/1e6)) + "M"
	case av >= 1e4:
		return trimZeros(fmt.Sprintf("%.0f", v/1e3)) + "K"
	case av >= 1e3:
		return trimZeros(fmt.Sprintf("%.1f", v/1e3)) + "K"
	case av >= 10 || av == 0:
		return fmt.Sprintf("%.0f", v)
	case av >= 1:
		return trimZeros(fmt.Sprintf("%.1f", v))
	default:
		return trimZeros(fmt.Sprintf("%.2f", v))
	}
}

func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
