package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample", ms(7), 99, 7 * time.Millisecond},
		{"median of odd count, unsorted", ms(5, 1, 3), 50, 3 * time.Millisecond},
		{"median of even count is the lower middle", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(seq(100)...), 99, 99 * time.Millisecond},
		{"p99 of 10 is the max", ms(seq(10)...), 99, 10 * time.Millisecond},
		{"p100 is the max", ms(3, 9, 1), 100, 9 * time.Millisecond},
		{"tiny p is the min", ms(3, 9, 1), 0.1, 1 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tc.samples...)
			if got := Percentile(tc.samples, tc.p); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.samples, tc.p, got, tc.want)
			}
			for i := range in {
				if in[i] != tc.samples[i] {
					t.Fatalf("Percentile reordered its input: %v, was %v", tc.samples, in)
				}
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[n-1-i] = i + 1 // descending, so sorting matters
	}
	return out
}

func TestVerdicts(t *testing.T) {
	tests := []struct {
		name string
		got  Verdict
		want Verdict
	}{
		{"at most, under", AtMost(1.05, 1.10), Met},
		{"at most, equal", AtMost(1.10, 1.10), Met},
		{"at most, over", AtMost(1.11, 1.10), Missed},
		{"at most, nothing measured", AtMost(Ratio(1, 0), 1.10), Missed},
		{"at least, over", AtLeast(0.96, 0.95), Met},
		{"at least, under", AtLeast(0.94, 0.95), Missed},
		{"at least, nothing measured", AtLeast(math.NaN(), 0.95), Missed},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	if r := Ratio(3, 2); r != 1.5 {
		t.Errorf("Ratio(3, 2) = %v, want 1.5", r)
	}
}

func TestTableMarkdown(t *testing.T) {
	tb := &Table{Title: "T", Note: "n", Columns: []string{"a", "b", "c"}}
	tb.Add("1", "x|y")         // short row: padded
	tb.Add("1", "2", "3", "4") // long row: cut
	var b strings.Builder
	if err := tb.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	want := "### T\n\n| a | b | c |\n|---|---|---|\n| 1 | x\\|y |  |\n| 1 | 2 | 3 |\n\nn\n\n"
	if b.String() != want {
		t.Errorf("Markdown() =\n%q\nwant\n%q", b.String(), want)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct{ got, want string }{
		{FormatDuration(0), "0"},
		{FormatDuration(850 * time.Nanosecond), "850ns"},
		{FormatDuration(1500 * time.Nanosecond), "1.5µs"},
		{FormatDuration(12345 * time.Microsecond), "12.3ms"},
		{FormatDuration(-80 * time.Microsecond), "-80µs"},
		{FormatDuration(2500 * time.Millisecond), "2.5s"},
		{FormatRatio(1.234), "1.23×"},
		{FormatRatio(math.NaN()), "n/a"},
		{FormatBytes(512), "512 B"},
		{FormatBytes(3 << 20), "3 MiB"},
		{FormatRate(1536, "B"), "1.5 KiB/s"},
		{FormatRate(2500, ""), "2.5k/s"},
		{FormatRate(42, ""), "42/s"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestInterleave(t *testing.T) {
	var order []string
	one := func(name string) func() Load {
		return func() Load {
			order = append(order, name)
			return Load{Latencies: ms(1), Elapsed: time.Second}
		}
	}
	g, d := Interleave(4, one("g"), one("d"))
	if got := strings.Join(order, ""); got != "gddggddg" {
		t.Errorf("order %q, want gddggddg (each path first in every other round)", got)
	}
	if len(g.Latencies) != 4 || len(d.Latencies) != 4 || g.PerSecond() != 1 {
		t.Errorf("gateway %+v, direct %+v: want 4 samples each over 4s", g, d)
	}
	order = nil
	all := InterleaveAll(2, one("a"), one("b"), one("c"))
	if got := strings.Join(order, ""); got != "abccba" || len(all) != 3 || len(all[2].Latencies) != 2 {
		t.Errorf("InterleaveAll order %q and %d loads, want abccba and 3 loads of 2 samples", got, len(all))
	}
	if err := (Load{Errors: 3}).Err(); err == nil {
		t.Error("a load with no success must be an error, not a figure")
	}
}

func TestAddedLatency(t *testing.T) {
	t0 := time.Unix(100, 0)
	gw := map[string]time.Time{"a": t0.Add(3 * time.Millisecond), "b": t0, "only-gw": t0}
	direct := map[string]time.Time{"a": t0.Add(time.Millisecond), "b": t0.Add(2 * time.Millisecond), "only-direct": t0}
	got := addedLatency(gw, direct)
	if len(got) != 2 || Percentile(got, 100) != 2*time.Millisecond || Percentile(got, 1) != -2*time.Millisecond {
		t.Errorf("addedLatency = %v, want [2ms -2ms] for the names on both streams", got)
	}
	if s := span(gw); s != 3*time.Millisecond {
		t.Errorf("span = %v, want 3ms", s)
	}
}

func TestParseGauges(t *testing.T) {
	text := `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 4.5056e+07
process_cpu_seconds_total 1.25 1700000000000
go_goroutines{x="process_cpu_seconds_total"} 3
karmada_gateway_recording_failures_total{reason="cap"} 0
karmada_gateway_recording_failures_total{reason="start"} 2
`
	got, err := parseGauges(strings.NewReader(text), "process_resident_memory_bytes", "process_cpu_seconds_total",
		`karmada_gateway_recording_failures_total{reason="start"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 45056000 || got[1] != 1.25 || got[2] != 2 {
		t.Errorf("parseGauges = %v, want [45056000 1.25 2]", got)
	}
	if _, err := parseGauges(strings.NewReader(text), "absent_metric"); err == nil {
		t.Error("a metric the gateway does not export must be an error")
	}
}
