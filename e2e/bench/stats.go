package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of samples by the
// nearest-rank method, which never invents a value that was not measured.
// It returns 0 for no samples. samples is not modified.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(1, min(rank, len(s)))
	return s[rank-1]
}

// Ratio is gateway/direct, or NaN when direct is 0.
func Ratio(gateway, direct float64) float64 {
	if direct == 0 {
		return math.NaN()
	}
	return gateway / direct
}

// Verdict says whether a target was met; "" when the row has no target.
type Verdict string

const (
	Met      Verdict = "met"
	Missed   Verdict = "**missed**"
	NoTarget Verdict = ""
	// NotMeasured is a target whose figure could not be taken at its size;
	// the row says what stopped it.
	NotMeasured Verdict = "not measured"
)

// AtMost is Met when v <= limit. A NaN (nothing measured) is Missed.
func AtMost(v, limit float64) Verdict {
	if math.IsNaN(v) || v > limit {
		return Missed
	}
	return Met
}

// AtLeast is Met when v >= limit. A NaN (nothing measured) is Missed.
func AtLeast(v, limit float64) Verdict {
	if math.IsNaN(v) || v < limit {
		return Missed
	}
	return Met
}

// Table is one Markdown table.
type Table struct {
	Title   string
	Note    string // printed under the table
	Columns []string
	Rows    [][]string
}

// Add appends a row; cells beyond the columns are dropped, missing ones blank.
func (t *Table) Add(cells ...string) {
	row := make([]string, len(t.Columns))
	copy(row, cells)
	t.Rows = append(t.Rows, row)
}

// Markdown renders t as a GitHub-flavoured Markdown table with a heading.
// Pipes in cells are escaped so a cell can never split a row.
func (t *Table) Markdown(w io.Writer) error {
	var b strings.Builder
	if t.Title != "" {
		fmt.Fprintf(&b, "### %s\n\n", t.Title)
	}
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
		}
		b.WriteString("\n")
	}
	line(t.Columns)
	b.WriteString("|")
	for range t.Columns {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		line(r)
	}
	if t.Note != "" {
		fmt.Fprintf(&b, "\n%s\n", t.Note)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatDuration prints d with three significant figures in a unit that
// suits it (ns, µs, ms, s).
func FormatDuration(d time.Duration) string {
	switch ad := time.Duration(math.Abs(float64(d))); {
	case ad == 0:
		return "0"
	case ad < time.Microsecond:
		return fmt.Sprintf("%.3gns", float64(d))
	case ad < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(d)/1e3)
	case ad < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.3gs", d.Seconds())
	}
}

// FormatRatio prints r as "1.05×", or "n/a" when it could not be computed.
func FormatRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", r)
}

// FormatBytes prints n bytes in binary units (B, KiB, MiB, GiB).
func FormatBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB"}
	i := 0
	for math.Abs(n) >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.3g %s", n, units[i])
}

// FormatRate prints per-second figures: "1.23k/s", or bytes when unit is "B".
func FormatRate(perSecond float64, unit string) string {
	if unit == "B" {
		return FormatBytes(perSecond) + "/s"
	}
	return formatCount(perSecond) + unit + "/s"
}

// formatCount prints v with three significant figures and a k or M
// multiplier: 10, 1k, 1.23M.
func formatCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
