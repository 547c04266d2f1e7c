package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// The charts are plain SVG written by hand: a bar chart (with optional
// range whiskers) and a log-x CDF. They carry a title, axis labels and a
// legend, and nothing else that needs a library.

// Bar is one bar of a bar chart.
type Bar struct {
	Label  string
	Value  float64
	Lo, Hi float64 // a range drawn as a whisker; NaN for none
	Group  string  // legend entry; bars of one group share a colour
}

// Series is one line of a CDF chart: raw samples.
type Series struct {
	Name   string
	Values []float64
}

// palette is colour-blind-safe (Okabe-Ito) and legible on white.
// Lines past the sixth are dashed to stay distinguishable.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#777777"}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// niceTicks returns round tick values from 0 to at least hi.
func niceTicks(hi float64, n int) []float64 {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		hi = 1
	}
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	for v := 0.0; v < hi+step*0.999; v += step {
		ticks = append(ticks, v)
	}
	return ticks
}

// valueLabel prints a bar's value: whole numbers from 100 up, three
// significant digits below.
func valueLabel(v float64) string {
	if math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func tickLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// BarChart writes a bar chart. groupColour maps each group to its colour;
// groups appear in the legend in the order given by groups.
func BarChart(w io.Writer, title, yLabel string, bars []Bar, groups []string, groupColour map[string]string) error {
	const (
		width, height          = 900, 560
		left, right, top, bott = 90, 30, 110, 150
	)
	pw, ph := float64(width-left-right), float64(height-top-bott)
	hi := 0.0
	for _, b := range bars {
		for _, v := range []float64{b.Value, b.Hi} {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				hi = math.Max(hi, v)
			}
		}
	}
	ticks := niceTicks(hi, 5)
	ymax := ticks[len(ticks)-1]
	y := func(v float64) float64 { return float64(top) + ph - v/ymax*ph }

	var b bytes.Buffer
	svgHead(&b, width, height, title)
	// Grid and y axis.
	for _, t := range ticks {
		fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#e0e0e0"/>`+"\n", left, num(y(t)), width-right, num(y(t)))
		fmt.Fprintf(&b, `<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle" font-size="12">%s</text>`+"\n", left-8, num(y(t)), esc(tickLabel(t)))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%s" stroke="#333"/>`+"\n", left, top, left, num(float64(top)+ph))
	fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#333"/>`+"\n", left, num(float64(top)+ph), width-right, num(float64(top)+ph))
	fmt.Fprintf(&b, `<text transform="translate(%d,%s) rotate(-90)" text-anchor="middle" font-size="13">%s</text>`+"\n", 24, num(float64(top)+ph/2), esc(yLabel))

	slot := pw / float64(max(len(bars), 1))
	bw := slot * 0.6
	for i, br := range bars {
		x := float64(left) + slot*float64(i) + (slot-bw)/2
		col := groupColour[br.Group]
		if col == "" {
			col = palette[0]
		}
		v := br.Value
		if math.IsNaN(v) || math.IsInf(v, 0) {
			fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" font-size="11" fill="#666">n/a</text>`+"\n", num(x+bw/2), num(y(0)-6))
		} else {
			fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s: %s</title></rect>`+"\n",
				num(x), num(y(v)), num(bw), num(math.Max(y(0)-y(v), 0)), col, esc(br.Label), esc(tickLabel(v)))
			top := y(v)
			if !math.IsNaN(br.Lo) && !math.IsNaN(br.Hi) {
				cx := x + bw/2
				fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#222" stroke-width="1.5"/>`+"\n", num(cx), num(y(br.Lo)), num(cx), num(y(br.Hi)))
				for _, e := range []float64{br.Lo, br.Hi} {
					fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#222" stroke-width="1.5"/>`+"\n", num(cx-6), num(y(e)), num(cx+6), num(y(e)))
				}
				top = math.Min(top, y(br.Hi))
			}
			fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" font-size="11">%s</text>`+"\n", num(x+bw/2), num(top-5), esc(valueLabel(v)))
		}
		lx, ly := x+bw/2, float64(top)+ph+12
		fmt.Fprintf(&b, `<text transform="translate(%s,%s) rotate(35)" text-anchor="start" font-size="12">%s</text>`+"\n", num(lx), num(ly), esc(br.Label))
	}
	// Legend, under the title.
	lx := left + 10
	for i, g := range groups {
		ly := 58 + 18*i
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, ly-10, groupColour[g])
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12">%s</text>`+"\n", lx+18, ly, esc(g))
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// CDFChart writes the empirical CDF of each series on a log-x axis;
// non-positive samples are drawn at the axis minimum.
func CDFChart(w io.Writer, title, xLabel string, series []Series) error {
	const (
		width, height          = 960, 540
		left, right, top, bott = 80, 230, 60, 70
	)
	pw, ph := float64(width-left-right), float64(height-top-bott)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, v := range s.Values {
			if v > 0 && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0.001, 1
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	x := func(v float64) float64 {
		l := dlo
		if v > 0 {
			l = math.Max(math.Log10(v), dlo)
		}
		return float64(left) + (l-dlo)/(dhi-dlo)*pw
	}
	y := func(p float64) float64 { return float64(top) + ph - p*ph }

	var b bytes.Buffer
	svgHead(&b, width, height, title)
	for d := dlo; d <= dhi; d++ {
		v := math.Pow(10, d)
		fmt.Fprintf(&b, `<line x1="%s" y1="%d" x2="%s" y2="%s" stroke="#e0e0e0"/>`+"\n", num(x(v)), top, num(x(v)), num(float64(top)+ph))
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" font-size="12">%s</text>`+"\n", num(x(v)), num(float64(top)+ph+18), esc(strconv.FormatFloat(v, 'g', -1, 64)))
		for m := 2.0; m < 10 && d < dhi; m++ {
			fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#999"/>`+"\n", num(x(m*v)), num(float64(top)+ph), num(x(m*v)), num(float64(top)+ph+4))
		}
	}
	for _, p := range []float64{0, 0.25, 0.5, 0.75, 0.9, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%s" y2="%s" stroke="#e0e0e0"/>`+"\n", left, num(y(p)), num(float64(left)+pw), num(y(p)))
		fmt.Fprintf(&b, `<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle" font-size="12">%s</text>`+"\n", left-8, num(y(p)), esc(strconv.FormatFloat(p, 'g', -1, 64)))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%s" stroke="#333"/>`+"\n", left, top, left, num(float64(top)+ph))
	fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%s" y2="%s" stroke="#333"/>`+"\n", left, num(float64(top)+ph), num(float64(left)+pw), num(float64(top)+ph))
	fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle" font-size="13">%s</text>`+"\n", num(float64(left)+pw/2), height-20, esc(xLabel))
	fmt.Fprintf(&b, `<text transform="translate(%d,%s) rotate(-90)" text-anchor="middle" font-size="13">fraction of messages at or below</text>`+"\n", 24, num(float64(top)+ph/2))

	for i, s := range series {
		col := palette[i%len(palette)]
		vals := slices.Clone(s.Values)
		slices.Sort(vals)
		var pts bytes.Buffer
		const steps = 400
		n := len(vals)
		for k := 0; k <= steps && n > 0; k++ {
			idx := min(k*(n-1)/steps, n-1)
			p := float64(idx+1) / float64(n)
			fmt.Fprintf(&pts, "%s,%s ", num(x(vals[idx])), num(y(p)))
		}
		dash := ""
		if i >= 6 {
			dash = ` stroke-dasharray="6 3"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"><title>%s</title></polyline>`+"\n", col, dash, pts.String(), esc(s.Name))
		ly := top + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"%s/>`+"\n", width-right+15, ly, width-right+40, ly, col, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle" font-size="12">%s</text>`+"\n", width-right+46, ly, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func svgHead(b *bytes.Buffer, width, height int, title string) {
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<title>%s</title>`+"\n", esc(title))
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="30" text-anchor="middle" font-size="17" font-weight="bold">%s</text>`+"\n", width/2, esc(title))
}
