// Package chart renders small PNG line and bar charts with the standard
// library only (image, image/png): axes, labelled ticks in a built-in 5x7
// bitmap font, a title and a legend. It is just enough for BENCHMARKS.md.
package chart

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"
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

var (
	white = color.RGBA{0xff, 0xff, 0xff, 0xff}
	black = color.RGBA{0x20, 0x20, 0x20, 0xff}
	grey  = color.RGBA{0xe0, 0xe0, 0xe0, 0xff}
)

// Series is one named line (or one bar group member).
type Series struct {
	Name string
	X, Y []float64
}

// Line describes a line chart.
type Line struct {
	Title, XLabel, YLabel string
	Series                []Series
	LogX                  bool // logarithmic x axis (base 10 ticks at the data's x values)
	YMin                  *float64
	W, H                  int
}

// Bar describes a bar chart: one bar per label, optionally with a value
// printed above each bar.
type Bar struct {
	Title, YLabel string
	Labels        []string
	Values        []float64
	ValueFmt      func(float64) string
	W, H          int
}

type canvas struct {
	img  *image.RGBA
	w, h int
}

func newCanvas(w, h int) *canvas {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	return &canvas{img: img, w: w, h: h}
}

func (c *canvas) set(x, y int, col color.RGBA) {
	if x >= 0 && y >= 0 && x < c.w && y < c.h {
		c.img.SetRGBA(x, y, col)
	}
}

func (c *canvas) fill(x0, y0, x1, y1 int, col color.RGBA) {
	if x0 > x1 {
		x0, x1 = x1, x0
	}
	if y0 > y1 {
		y0, y1 = y1, y0
	}
	for y := y0; y <= y1; y++ {
		for x := x0; x <= x1; x++ {
			c.set(x, y, col)
		}
	}
}

// line draws a line of the given thickness (Bresenham with a square pen).
func (c *canvas) line(x0, y0, x1, y1, thick int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	r := thick / 2
	for {
		c.fill(x0-r, y0-r, x0-r+thick-1, y0-r+thick-1, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * err
		if e2 >= dy {
			err += dy
			x0 += sx
		}
		if e2 <= dx {
			err += dx
			y0 += sy
		}
	}
}

// text draws s with its top-left corner at (x, y), each font pixel scale×scale.
func (c *canvas) text(x, y int, s string, scale int, col color.RGBA) {
	for _, r := range s {
		g := glyph(r)
		for row := 0; row < glyphH; row++ {
			for bit := 0; bit < glyphW; bit++ {
				if g[row]&(1<<(glyphW-1-bit)) != 0 {
					c.fill(x+bit*scale, y+row*scale, x+bit*scale+scale-1, y+row*scale+scale-1, col)
				}
			}
		}
		x += (glyphW + 1) * scale
	}
}

// textV draws s rotated 90° counter-clockwise, reading bottom to top, with
// its bottom-left corner at (x, y).
func (c *canvas) textV(x, y int, s string, scale int, col color.RGBA) {
	for _, r := range s {
		g := glyph(r)
		for row := 0; row < glyphH; row++ {
			for bit := 0; bit < glyphW; bit++ {
				if g[row]&(1<<(glyphW-1-bit)) != 0 {
					px := x + row*scale
					py := y - bit*scale
					c.fill(px, py-scale+1, px+scale-1, py, col)
				}
			}
		}
		y -= (glyphW + 1) * scale
	}
}

func textWidth(s string, scale int) int { return len([]rune(s)) * (glyphW + 1) * scale }

func (c *canvas) save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, c.img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Format formats an axis value compactly: 1500 -> "1.5K", 2000000 -> "2M".
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

// niceTicks returns about n round tick values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, v)
	}
	return ticks
}

const (
	scale   = 2
	marginL = 90
	marginR = 30
	marginT = 50
	marginB = 70
)

// Save renders the line chart to path.
func (l Line) Save(path string) error {
	w, h := or(l.W, 800), or(l.H, 480)
	c := newCanvas(w, h)
	xs := func(v float64) float64 {
		if l.LogX {
			return math.Log10(math.Max(v, 1e-9))
		}
		return v
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	var xvals []float64
	for _, s := range l.Series {
		for i := range s.X {
			xmin, xmax = math.Min(xmin, xs(s.X[i])), math.Max(xmax, xs(s.X[i]))
			ymin, ymax = math.Min(ymin, s.Y[i]), math.Max(ymax, s.Y[i])
			xvals = append(xvals, s.X[i])
		}
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax, ymin, ymax = 0, 1, 0, 1
	}
	if l.YMin != nil {
		ymin = *l.YMin
	} else if ymin > 0 {
		ymin = 0
	}
	ymax *= 1.1
	if xmax == xmin {
		xmax = xmin + 1
	}
	if ymax == ymin {
		ymax = ymin + 1
	}
	pl, pr, pt, pb := marginL, w-marginR, marginT, h-marginB
	px := func(v float64) int { return pl + int(float64(pr-pl)*(xs(v)-xmin)/(xmax-xmin)) }
	py := func(v float64) int { return pb - int(float64(pb-pt)*(v-ymin)/(ymax-ymin)) }

	yt := niceTicks(ymin, ymax, 5)
	for _, v := range yt {
		y := py(v)
		c.line(pl, y, pr, y, 1, grey)
		s := Format(v)
		c.text(pl-8-textWidth(s, scale), y-glyphH*scale/2, s, scale, black)
	}
	var xt []float64
	if l.LogX {
		seen := map[float64]bool{}
		for _, v := range xvals {
			if !seen[v] {
				seen[v] = true
				xt = append(xt, v)
			}
		}
	} else {
		xt = niceTicks(xmin, xmax, 6)
	}
	for _, v := range xt {
		x := px(v)
		c.line(x, pb, x, pb+5, 1, black)
		s := Format(v)
		c.text(x-textWidth(s, scale)/2, pb+10, s, scale, black)
	}
	c.line(pl, pt, pl, pb, 2, black)
	c.line(pl, pb, pr, pb, 2, black)
	c.text((w-textWidth(l.Title, scale))/2, 15, l.Title, scale, black)
	c.text((pl+pr-textWidth(l.XLabel, scale))/2, h-28, l.XLabel, scale, black)
	c.textV(12, (pt+pb+textWidth(l.YLabel, scale))/2, l.YLabel, scale, black)

	for i, s := range l.Series {
		col := Palette[i%len(Palette)]
		for j := range s.X {
			x, y := px(s.X[j]), py(s.Y[j])
			if j > 0 {
				c.line(px(s.X[j-1]), py(s.Y[j-1]), x, y, 3, col)
			}
			c.fill(x-4, y-4, x+4, y+4, col)
		}
	}
	// Legend, top right inside the plot.
	lx, ly := pr-10, pt+10
	for i, s := range l.Series {
		col := Palette[i%len(Palette)]
		tw := textWidth(s.Name, scale)
		c.fill(lx-tw-30, ly+i*22, lx-tw-14, ly+i*22+12, col)
		c.text(lx-tw, ly+i*22, s.Name, scale, black)
	}
	return c.save(path)
}

// Save renders the bar chart to path.
func (b Bar) Save(path string) error {
	w, h := or(b.W, 800), or(b.H, 480)
	c := newCanvas(w, h)
	ymax := 0.0
	for _, v := range b.Values {
		ymax = math.Max(ymax, v)
	}
	if ymax == 0 {
		ymax = 1
	}
	ymax *= 1.15
	pl, pr, pt, pb := marginL, w-marginR, marginT, h-marginB
	py := func(v float64) int { return pb - int(float64(pb-pt)*v/ymax) }
	for _, v := range niceTicks(0, ymax, 5) {
		y := py(v)
		c.line(pl, y, pr, y, 1, grey)
		s := Format(v)
		c.text(pl-8-textWidth(s, scale), y-glyphH*scale/2, s, scale, black)
	}
	n := len(b.Values)
	slot := float64(pr-pl) / float64(max(n, 1))
	for i, v := range b.Values {
		x0 := pl + int(slot*float64(i)+slot*0.2)
		x1 := pl + int(slot*float64(i+1)-slot*0.2)
		col := Palette[i%len(Palette)]
		c.fill(x0, py(v), x1, pb, col)
		label := b.Labels[i]
		c.text((x0+x1-textWidth(label, scale))/2, pb+10, label, scale, black)
		vs := Format(v)
		if b.ValueFmt != nil {
			vs = b.ValueFmt(v)
		}
		c.text((x0+x1-textWidth(vs, scale))/2, py(v)-22, vs, scale, black)
	}
	c.line(pl, pt, pl, pb, 2, black)
	c.line(pl, pb, pr, pb, 2, black)
	c.text((w-textWidth(b.Title, scale))/2, 15, b.Title, scale, black)
	c.textV(12, (pt+pb+textWidth(b.YLabel, scale))/2, b.YLabel, scale, black)
	return c.save(path)
}

func or(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
