package experiment

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart is a grid of grouped bar charts drawn as one SVG.
type Chart struct {
	Title  string
	Panels []Panel
	Series []string // bar names, one colour each, in every panel
	Cols   int      // panels per row; default 2
}

// Panel is one grouped bar chart: Groups along the x axis (the loads), one
// bar per series in each group.
type Panel struct {
	Title  string
	XLabel string
	YLabel string
	Groups []string
	Values [][]float64 // [series][group]; NaN leaves a gap
	Log    bool        // log10 y axis (for ratios); a reference line marks 1
}

var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

const (
	panelW, panelH = 460, 300
	padL, padR     = 64, 16
	padT, padB     = 34, 48
	titleH         = 36
	legendRowH     = 20
)

// WriteSVG draws the chart.
func (c Chart) WriteSVG(w io.Writer) error {
	cols := c.Cols
	if cols <= 0 {
		cols = 2
	}
	cols = min(cols, max(len(c.Panels), 1))
	rows := (len(c.Panels) + cols - 1) / cols
	perRow := max(1, (cols*panelW-20)/150)
	legendH := legendRowH * ((len(c.Series) + perRow - 1) / perRow)
	width, height := cols*panelW, titleH+rows*panelH+legendH+10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n", width/2, esc(c.Title))
	for i, p := range c.Panels {
		x0, y0 := (i%cols)*panelW, titleH+(i/cols)*panelH
		p.draw(&b, x0, y0)
	}
	ly := titleH + rows*panelH + 4
	for i, s := range c.Series {
		x := 20 + (i%perRow)*150
		y := ly + (i/perRow)*legendRowH
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x, y, palette[i%len(palette)], x+16, y+10, esc(s))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (p Panel) draw(b *strings.Builder, x0, y0 int) {
	left, top := float64(x0+padL), float64(y0+padT)
	pw, ph := float64(panelW-padL-padR), float64(panelH-padT-padB)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range p.Values {
		for _, v := range s {
			if !math.IsNaN(v) && !math.IsInf(v, 0) && (!p.Log || v > 0) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	var ticks []float64
	var ymap func(float64) float64
	if p.Log {
		lo, hi = math.Min(lo, 1), math.Max(hi, 1)
		l, h := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if h == l {
			h++
		}
		ymap = func(v float64) float64 { return top + ph - (math.Log10(v)-l)/(h-l)*ph }
		for e := l; e <= h; e++ {
			for _, m := range []float64{1, 2, 5} {
				if v := m * math.Pow(10, e); math.Log10(v) <= h+1e-9 && (h-l <= 3 || m == 1) {
					ticks = append(ticks, v)
				}
			}
		}
	} else {
		lo = math.Min(lo, 0)
		hi = niceCeil(hi)
		ymap = func(v float64) float64 { return top + ph - (v-lo)/(hi-lo)*ph }
		for i := range 6 {
			ticks = append(ticks, lo+(hi-lo)*float64(i)/5)
		}
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle" font-size="12" font-weight="bold">%s</text>`+"\n", left+pw/2, y0+padT-12, esc(p.Title))
	for _, t := range ticks {
		y := ymap(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, y, left+pw, y, left-4, y+4, fmtTick(t))
	}
	groupW := pw / float64(max(len(p.Groups), 1))
	barW := groupW * 0.8 / float64(max(len(p.Values), 1))
	base := top + ph
	if p.Log {
		base = ymap(math.Pow(10, math.Floor(math.Log10(lo))))
	}
	for g, name := range p.Groups {
		gx := left + float64(g)*groupW + groupW*0.1
		for s, vals := range p.Values {
			v := vals[g]
			if math.IsNaN(v) || math.IsInf(v, 0) || (p.Log && v <= 0) {
				continue
			}
			y := ymap(v)
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s</title></rect>`+"\n",
				gx+float64(s)*barW, math.Min(y, base), math.Max(barW-1, 1), math.Abs(base-y), palette[s%len(palette)], esc(name), fmtTick(v))
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+float64(g)*groupW+groupW/2, top+ph+14, esc(name))
	}
	if p.Log {
		y := ymap(1)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", left, y, left+pw, y)
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n",
		left, top, left, top+ph, left, top+ph, left+pw, top+ph)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+pw/2, top+ph+32, esc(p.XLabel))
	fmt.Fprintf(b, `<text transform="translate(%d %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", x0+14, top+ph/2, esc(p.YLabel))
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func fmtTick(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }

func esc(s string) string { return html.EscapeString(s) }
