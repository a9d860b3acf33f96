package console

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"
)

// chart is a small server-rendered SVG line/bar chart. It holds only
// numbers and fixed labels, so the SVG it renders carries no user data.
type chart struct {
	Title  string
	SVG    template.HTML
	Series []series
	Empty  bool
}

type series struct {
	Name   string
	Class  string // CSS class (colour)
	Points []point
	Bars   bool
}

type point struct {
	T time.Time
	V float64
}

const (
	chartW, chartH      = 720.0, 200.0
	padL, padR          = 56.0, 12.0
	padT, padB          = 12.0, 28.0
	plotW, plotH        = chartW - padL - padR, chartH - padT - padB
	barWidthOfOneMinute = 0.8
)

func newChart(title, unit string, from, to time.Time, ss ...series) chart {
	c := chart{Title: title, Series: ss, Empty: true}
	top := 0.0
	for _, s := range ss {
		for _, p := range s.Points {
			top = math.Max(top, p.V)
			if p.V > 0 {
				c.Empty = false
			}
		}
	}
	top = niceCeil(top)
	span := to.Sub(from).Seconds()
	x := func(t time.Time) float64 { return padL + plotW*t.Sub(from).Seconds()/span }
	y := func(v float64) float64 { return padT + plotH*(1-v/top) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" xmlns="http://www.w3.org/2000/svg">`, chartW, chartH)
	// Grid and y labels: 0, half, top.
	for _, f := range []float64{0, 0.5, 1} {
		v := top * f
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, padL, y(v), chartW-padR, y(v))
		fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, padL-6, y(v)+4, formatValue(v))
	}
	fmt.Fprintf(&b, `<text class="label" x="4" y="%.1f">%s</text>`, padT+10, unit)
	// x labels: -60m, -30m, now.
	for _, m := range []int{60, 30, 0} {
		t := to.Add(-time.Duration(m) * time.Minute)
		label := "now"
		if m > 0 {
			label = fmt.Sprintf("-%dm", m)
		}
		fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%.1f" text-anchor="middle">%s (%s)</text>`,
			math.Min(math.Max(x(t), padL+40), chartW-padR-40), chartH-8, label, t.UTC().Format("15:04"))
	}
	minuteW := plotW * 60 / span
	for _, s := range ss {
		if s.Bars {
			for _, p := range s.Points {
				if p.V <= 0 {
					continue
				}
				// data-t and data-v carry the bar's minute and exact value
				// (the title shows them on hover).
				fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" data-t="%s" data-v="%g"><title>%s: %s %s</title></rect>`,
					s.Class, x(p.T)+minuteW*(1-barWidthOfOneMinute)/2, y(p.V), minuteW*barWidthOfOneMinute, padT+plotH-y(p.V),
					p.T.UTC().Format(time.RFC3339), p.V, p.T.UTC().Format("15:04"), strconvFloat(p.V), unit)
			}
			continue
		}
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T)+minuteW/2, y(p.V)))
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline class="%s" fill="none" points="%s"/>`, s.Class, strings.Join(pts, " "))
		}
		for _, p := range s.Points { // a dot per minute: a lone minute shows too
			fmt.Fprintf(&b, `<circle class="%s dot" cx="%.1f" cy="%.1f" r="2.5"/>`, s.Class, x(p.T)+minuteW/2, y(p.V))
		}
	}
	b.WriteString(`</svg>`)
	c.SVG = template.HTML(b.String()) // numbers and fixed labels only
	return c
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten (1 for 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func formatValue(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// strconvFloat is a bar's value for its title: two decimals below 100.
func strconvFloat(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
