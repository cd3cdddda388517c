package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart is a line chart rendered as a standalone SVG, small enough to review
// in a diff and with no plotting dependency: the bench only ever draws a
// handful of series over a few sizes.
type Chart struct {
	Title          string
	XLabel, YLabel string
	// LogX and LogY use decades for the axis; sizes here grow tenfold per
	// step, which a linear axis would crush into one corner.
	LogX, LogY bool
	// XFormat and YFormat print tick values; nil prints %g.
	XFormat, YFormat func(float64) string
	Series           []Series
	Width, Height    int // pixels; 0 is 640×400
}

// Series is one labelled line; X and Y have the same length.
type Series struct {
	Name string
	X, Y []float64
	// Dashed draws a reference line (a target) rather than a measurement.
	Dashed bool
}

// Plot area margins: room for tick labels and axis titles on the left and
// bottom, for the title on top, and for the legend on the right.
const (
	marginLeft   = 80
	marginRight  = 190
	marginTop    = 40
	marginBottom = 55
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// axis maps data values onto a pixel range.
type axis struct {
	log        bool
	lo, hi     float64 // data range, in log10 when log
	from, to   float64 // pixels lo and hi map to
	ticks      []float64
	formatTick func(float64) string
}

func newAxis(values []float64, log bool, from, to float64, format func(float64) string) axis {
	a := axis{log: log, from: from, to: to, formatTick: format}
	if a.formatTick == nil {
		a.formatTick = func(v float64) string { return fmt.Sprintf("%g", v) }
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) || log && v <= 0 {
			continue // no place on the axis; a NaN would also poison the range
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1, 10
	}
	if log {
		a.lo, a.hi = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if a.hi == a.lo {
			a.hi++
		}
		for d := a.lo; d <= a.hi; d++ {
			a.ticks = append(a.ticks, math.Pow(10, d))
		}
		return a
	}
	// Linear axes start at zero so heights compare as proportions.
	a.lo = math.Min(0, lo)
	a.ticks = niceTicks(a.lo, hi)
	a.hi = a.ticks[len(a.ticks)-1]
	return a
}

// niceTicks returns about five evenly spaced ticks on a 1, 2 or 5 × 10^k
// step from lo down-rounded to hi up-rounded.
func niceTicks(lo, hi float64) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	for i := math.Floor(lo / step); ; i++ {
		// Twelve significant digits drop the float noise of i*step (0.6000000000000001),
		// which would otherwise reach the tick labels.
		v, _ := strconv.ParseFloat(strconv.FormatFloat(i*step, 'g', 12, 64), 64)
		ticks = append(ticks, v)
		if v >= hi {
			return ticks
		}
	}
}

// pixel is where v lands on the axis.
func (a axis) pixel(v float64) float64 {
	if a.log {
		v = math.Log10(v)
	}
	return a.from + (v-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

// SVG writes the chart. Points that cannot be placed (non-positive on a log
// axis, NaN) are left out of their line rather than drawn at an edge.
func (c Chart) SVG(w io.Writer) error {
	width, height := c.Width, c.Height
	if width == 0 || height == 0 {
		width, height = 640, 400
	}
	var xs, ys []float64
	for _, s := range c.Series {
		xs = append(xs, s.X...)
		ys = append(ys, s.Y...)
	}
	left, right := float64(marginLeft), float64(width-marginRight)
	top, bottom := float64(marginTop), float64(height-marginBottom)
	x := newAxis(xs, c.LogX, left, right, c.XFormat)
	y := newAxis(ys, c.LogY, bottom, top, c.YFormat)

	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%g" y="24" text-anchor="middle" font-size="15">%s</text>`+"\n", (left+right)/2, esc(c.Title))
	for _, t := range x.ticks {
		px := x.pixel(t)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", px, top, px, bottom)
		fmt.Fprintf(&b, `<text class="xtick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px, bottom+16, esc(x.formatTick(t)))
	}
	for _, t := range y.ticks {
		py := y.pixel(t)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, py, right, py)
		fmt.Fprintf(&b, `<text class="ytick" x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, py, esc(y.formatTick(t)))
	}
	fmt.Fprintf(&b, `<path d="M%.1f %.1fV%.1fH%.1f" fill="none" stroke="black"/>`+"\n", left, top, bottom, right)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", (left+right)/2, height-12, esc(c.XLabel))
	fmt.Fprintf(&b, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">%s</text>`+"\n", (top+bottom)/2, (top+bottom)/2, esc(c.YLabel))

	placeable := func(a axis, v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && (!a.log || v > 0) }
	for i, s := range c.Series {
		color := palette[i%len(palette)]
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		var pts []string
		var marks strings.Builder
		for j := range min(len(s.X), len(s.Y)) {
			if !placeable(x, s.X[j]) || !placeable(y, s.Y[j]) {
				continue
			}
			px, py := x.pixel(s.X[j]), y.pixel(s.Y[j])
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
			if !s.Dashed {
				fmt.Fprintf(&marks, `<circle data-series="%s" cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", esc(s.Name), px, py, color)
			}
		}
		fmt.Fprintf(&b, `<polyline data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", esc(s.Name), strings.Join(pts, " "), color, dash)
		b.WriteString(marks.String())
		ly := top + 10 + float64(i)*20
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", right+12, ly, right+36, ly, color, dash)
		fmt.Fprintf(&b, `<text class="legend" x="%.1f" y="%.1f" dominant-baseline="middle">%s</text>`+"\n", right+42, ly, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
