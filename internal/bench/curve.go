package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Curve is the bench run at several sizes (`finalizer bench --curve`),
// smallest first: the scaling curve of issue 12, "no faster than
// linearly from 1k to 10k to 100k runs".
type Curve struct {
	Results []Result `json:"curve"`
}

// measure is one figure of the curve, normalised per run or per event so
// that growing linearly with N is a flat line.
type measure struct {
	name   string
	unit   string
	series []series
}

type series struct {
	label string
	value func(r *Result) float64 // <= 0: not measured
}

func perRun(total float64, r *Result) float64 { return div(total, float64(r.Runs)) }

// measures are the curve's figures, each per run or per event.
var measures = []measure{
	{"tracking N runs", "ms per run", []series{
		{"tracked", func(r *Result) float64 { return perRun(r.TrackSeconds*1e3, r) }},
		{"first verdicts", func(r *Result) float64 { return perRun(r.FirstVerdictsSeconds*1e3, r) }},
	}},
	{"resident memory (no forced GC)", "KiB per run", []series{
		{"RSS, no GC", func(r *Result) float64 { return r.RSSNoGCPerRunKiB }},
		{"heap after a GC", func(r *Result) float64 { return r.HeapPerRunKiB }},
	}},
	{"ingest", "µs per event", []series{
		{"service", func(r *Result) float64 { return div(1e6, r.IngestEventsPerSec) }},
		{"raw NATS", func(r *Result) float64 { return div(1e6, r.RawEventsPerSec) }},
	}},
	{"latency at the latency phase's rate", "ms", []series{
		{"p99", func(r *Result) float64 { return r.Latency.P99Ms }},
		{"p50", func(r *Result) float64 { return r.Latency.P50Ms }},
		{"lone commit p99", func(r *Result) float64 { return r.Latency.CommitP99Ms }},
	}},
	{"burst: N tables cross a period", "ms per 1,000 tables", []series{
		{"committed", func(r *Result) float64 { return perRun(r.BurstSeconds*1e6, r) }},
	}},
	{"restart recovery", "ms per run", []series{
		{"all re-applied", func(r *Result) float64 { return perRun(r.RecoverySeconds*1e3, r) }},
	}},
	{"idle: an event per run every 10 s", "% of a core per 1,000 events/s", []series{
		{"idle events", func(r *Result) float64 {
			if r.Idle == nil {
				return 0
			}
			return div(r.Idle.IdleEventsServiceCoreShare*100, r.Idle.EventsPerSec/1000)
		}},
		{"progress, new data", func(r *Result) float64 {
			if r.Idle == nil {
				return 0
			}
			return div(r.Idle.ServiceCoreShare*100, r.Idle.EventsPerSec/1000)
		}},
	}},
}

// JSON returns the curve as one line of JSON.
func (c *Curve) JSON() []byte {
	b, _ := json.Marshal(c)
	return b
}

// slope is the exponent of v's growth with N between two results, on a
// log-log scale: 0 is flat (the total grows linearly with N), above 0
// faster than linearly.
func slope(n0, n1 int, v0, v1 float64) float64 {
	if v0 <= 0 || v1 <= 0 || n0 <= 0 || n1 <= n0 {
		return math.NaN()
	}
	return math.Log(v1/v0) / math.Log(float64(n1)/float64(n0))
}

// WriteTable prints every figure at every N and the slope between
// consecutive sizes (0: linear, below: better than linear).
func (c *Curve) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"MEASURE", "UNIT"}
	for _, r := range c.Results {
		head = append(head, fmt.Sprintf("N=%d", r.Runs))
	}
	for i := 1; i < len(c.Results); i++ {
		head = append(head, fmt.Sprintf("slope %s→%s", short(c.Results[i-1].Runs), short(c.Results[i].Runs)))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, m := range measures {
		for _, s := range m.series {
			row := []string{m.name + ": " + s.label, m.unit}
			for i := range c.Results {
				row = append(row, fmtValue(s.value(&c.Results[i])))
			}
			for i := 1; i < len(c.Results); i++ {
				a, b := &c.Results[i-1], &c.Results[i]
				if k := slope(a.Runs, b.Runs, s.value(a), s.value(b)); !math.IsNaN(k) {
					row = append(row, fmt.Sprintf("%+.2f", k))
				} else {
					row = append(row, "-")
				}
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	loads := []string{"load average before / after", ""}
	for _, r := range c.Results {
		loads = append(loads, fmt.Sprintf("%.1f / %.1f", r.LoadBefore, r.LoadAfter))
	}
	fmt.Fprintln(tw, strings.Join(loads, "\t"))
	return tw.Flush()
}

func fmtValue(v float64) string {
	switch {
	case v <= 0:
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// short writes n as 1k, 10k, 100k, 1M.
func short(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// SVG geometry.
const (
	svgCols   = 2
	svgPanelW = 440
	svgPanelH = 230
	svgLeft   = 58 // room for the y labels
	svgRight  = 16
	svgTop    = 40 // room for the title
	svgBottom = 42 // room for the x labels and the legend
)

var svgColors = []string{"#1f77b4", "#d62728", "#2ca02c"}

// SVG writes the curve as a plain SVG: one log-log panel per measure,
// each figure per run or per event, so that a total growing linearly
// with N is a flat line; a dashed line continues the smallest N's value
// flat, for reference.
func (c *Curve) SVG(w io.Writer, title string) error {
	var panels []measure
	for _, m := range measures {
		for _, s := range m.series {
			if c.measured(s) {
				panels = append(panels, m)
				break
			}
		}
	}
	rows := (len(panels) + svgCols - 1) / svgCols
	width, height := svgCols*svgPanelW, rows*svgPanelH+30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", 10, html.EscapeString(title))
	for i, m := range panels {
		c.panel(&b, m, (i%svgCols)*svgPanelW, 30+(i/svgCols)*svgPanelH)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (c *Curve) measured(s series) bool {
	for i := range c.Results {
		if s.value(&c.Results[i]) > 0 {
			return true
		}
	}
	return false
}

// panel draws one measure at (x0, y0).
func (c *Curve) panel(b *strings.Builder, m measure, x0, y0 int) {
	pw, ph := svgPanelW-svgLeft-svgRight, svgPanelH-svgTop-svgBottom
	px, py := x0+svgLeft, y0+svgTop
	nMin, nMax := float64(c.Results[0].Runs), float64(c.Results[len(c.Results)-1].Runs)
	if nMax <= nMin {
		nMax = nMin * 10
	}
	vMin, vMax := math.Inf(1), math.Inf(-1)
	for _, s := range m.series {
		for i := range c.Results {
			if v := s.value(&c.Results[i]); v > 0 {
				vMin, vMax = math.Min(vMin, v), math.Max(vMax, v)
			}
		}
	}
	// Whole decades around the values, at least one.
	lo, hi := math.Floor(math.Log10(vMin)), math.Ceil(math.Log10(vMax))
	if hi <= lo {
		hi = lo + 1
	}
	xAt := func(n float64) float64 {
		return float64(px) + float64(pw)*math.Log(n/nMin)/math.Log(nMax/nMin)
	}
	yAt := func(v float64) float64 { return float64(py+ph) - float64(ph)*(math.Log10(v)-lo)/(hi-lo) }
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", px, y0+svgTop-22, html.EscapeString(m.name))
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="#555">%s (log scale)</text>`+"\n", px, y0+svgTop-8, html.EscapeString(m.unit))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", px, py, pw, ph)
	for d := lo; d <= hi; d++ {
		for _, k := range []float64{1, 2, 5} {
			v := k * math.Pow(10, d)
			if math.Log10(v) > hi+1e-9 {
				break
			}
			y := yAt(v)
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", px, y, px+pw, y)
			fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", px-4, y+4, fmtTick(v))
		}
	}
	for i := range c.Results {
		n := float64(c.Results[i].Runs)
		x := xAt(n)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`+"\n", x, py, x, py+ph)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", x, py+ph+14, short(c.Results[i].Runs))
	}
	legendX := px
	for si, s := range m.series {
		color := svgColors[si%len(svgColors)]
		var pts []string
		first := 0.0
		for i := range c.Results {
			if v := s.value(&c.Results[i]); v > 0 {
				if first == 0 {
					first = v
				}
				x, y := xAt(float64(c.Results[i].Runs)), yAt(v)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s at N=%d: %s %s</title></circle>`+"\n",
					x, y, color, html.EscapeString(s.label), c.Results[i].Runs, fmtValue(v), html.EscapeString(m.unit))
			}
		}
		if len(pts) == 0 {
			continue
		}
		if si == 0 && first > 0 {
			// Linear growth from the smallest N: flat.
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="4 3" opacity="0.5"/>`+"\n",
				px, yAt(first), px+pw, yAt(first), color)
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="3" fill="%s"/>`+"\n", legendX, py+ph+24, color)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", legendX+14, py+ph+29, html.EscapeString(s.label))
		legendX += 20 + 7*len(s.label)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="#888">dashed: linear (flat)</text>`+"\n", legendX+10, py+ph+29)
}

func fmtTick(v float64) string {
	switch {
	case v >= 1000:
		return short(int(v))
	case v >= 1:
		return fmt.Sprintf("%g", v)
	default:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	}
}
