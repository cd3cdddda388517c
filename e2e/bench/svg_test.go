package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi float64
		want   []float64
	}{
		{"step of 50", 0, 180, []float64{0, 50, 100, 150, 200}},
		{"step of 20 ending on hi", 0, 100, []float64{0, 20, 40, 60, 80, 100}},
		{"fractional step without float noise", 0, 1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{"step of 1", 0, 3.2, []float64{0, 1, 2, 3, 4}},
		{"empty range still has an axis", 0, 0, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := niceTicks(tc.lo, tc.hi); !slices.Equal(got, tc.want) {
				t.Errorf("niceTicks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
			}
		})
	}
}

// svgElement is an element of rendered output, with its attributes and text.
type svgElement struct {
	name  string
	attrs map[string]string
	text  string
}

// parseSVG decodes out as XML, failing the test if it is not well formed.
func parseSVG(t *testing.T, out []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(out))
	var els []svgElement
	var open []int
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("output is not XML: %v\n%s", err, out)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			els = append(els, e)
			open = append(open, len(els)-1)
		case xml.CharData:
			if len(open) > 0 {
				els[open[len(open)-1]].text += string(tok)
			}
		case xml.EndElement:
			open = open[:len(open)-1]
		}
	}
	if len(els) == 0 || els[0].name != "svg" {
		t.Fatalf("root element is not svg:\n%s", out)
	}
	return els
}

func TestChartSVG(t *testing.T) {
	// Default 640×400: plot area x 80..450, y 345 (bottom) .. 40 (top).
	tests := []struct {
		name       string
		chart      Chart
		wantPoints map[string][][2]float64 // series -> circle centres
		wantXTicks []string
		wantYTicks []string
	}{
		{
			name: "log x, linear y from zero",
			chart: Chart{LogX: true, Series: []Series{
				{Name: "rss", X: []float64{10, 100, 1000}, Y: []float64{0, 50, 100}},
				{Name: "target", X: []float64{10, 1000}, Y: []float64{80, 80}, Dashed: true},
			}},
			wantPoints: map[string][][2]float64{"rss": {{80, 345}, {265, 192.5}, {450, 40}}},
			wantXTicks: []string{"10", "100", "1000"},
			wantYTicks: []string{"0", "20", "40", "60", "80", "100"},
		},
		{
			name: "log-log, axis widened to whole decades",
			chart: Chart{LogX: true, LogY: true, XFormat: func(v float64) string { return strconv.Itoa(int(v/1000)) + "k" }, Series: []Series{
				{Name: "heap", X: []float64{1000, 10000, 100000}, Y: []float64{2000, 20000, 100000}},
			}},
			// y 2000 is log10(2) of the way up the 10^3..10^5 axis: 345 - 305×0.301/2.
			wantPoints: map[string][][2]float64{"heap": {{80, 299.1}, {265, 146.6}, {450, 40}}},
			wantXTicks: []string{"1k", "10k", "100k"},
			wantYTicks: []string{"1000", "10000", "100000"},
		},
		{
			name: "unplaceable points are left out, not drawn at an edge",
			chart: Chart{LogX: true, Series: []Series{
				{Name: "a<&b", X: []float64{0, 10, 100, 1000}, Y: []float64{5, 10, math.NaN(), 10}},
			}},
			wantPoints: map[string][][2]float64{"a<&b": {{80, 40}, {450, 40}}},
			wantXTicks: []string{"10", "100", "1000"},
			wantYTicks: []string{"0", "2", "4", "6", "8", "10"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.chart.Title, tc.chart.XLabel, tc.chart.YLabel = "T", "sessions", "MiB"
			var out bytes.Buffer
			if err := tc.chart.SVG(&out); err != nil {
				t.Fatal(err)
			}
			els := parseSVG(t, out.Bytes())
			got := map[string][][2]float64{}
			var xt, yt, legend []string
			for _, e := range els {
				switch {
				case e.name == "circle":
					cx, err1 := strconv.ParseFloat(e.attrs["cx"], 64)
					cy, err2 := strconv.ParseFloat(e.attrs["cy"], 64)
					if err1 != nil || err2 != nil {
						t.Fatalf("circle with bad centre %v", e.attrs)
					}
					got[e.attrs["data-series"]] = append(got[e.attrs["data-series"]], [2]float64{cx, cy})
				case e.attrs["class"] == "xtick":
					xt = append(xt, e.text)
				case e.attrs["class"] == "ytick":
					yt = append(yt, e.text)
				case e.attrs["class"] == "legend":
					legend = append(legend, e.text)
				}
			}
			for name, want := range tc.wantPoints {
				if !slices.EqualFunc(got[name], want, func(a, b [2]float64) bool {
					return math.Abs(a[0]-b[0]) < 0.06 && math.Abs(a[1]-b[1]) < 0.06
				}) {
					t.Errorf("series %q points at %v, want %v", name, got[name], want)
				}
			}
			if !slices.Equal(xt, tc.wantXTicks) {
				t.Errorf("x ticks %v, want %v", xt, tc.wantXTicks)
			}
			if !slices.Equal(yt, tc.wantYTicks) {
				t.Errorf("y ticks %v, want %v", yt, tc.wantYTicks)
			}
			var names []string
			for _, s := range tc.chart.Series {
				names = append(names, s.Name)
			}
			if !slices.Equal(legend, names) {
				t.Errorf("legend %v, want every series labelled %v", legend, names)
			}
			if !strings.Contains(out.String(), ">sessions<") || !strings.Contains(out.String(), ">MiB<") {
				t.Errorf("axis titles missing:\n%s", out.String())
			}
		})
	}
}
