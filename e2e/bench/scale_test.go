package bench

import (
	"testing"
	"time"
)

func TestStreamsVerdict(t *testing.T) {
	tests := []struct {
		name       string
		load       sessionLoad
		wantTarget string
		want       Verdict
	}{
		{"other sizes carry no target", sessionLoad{n: 100, opened: 100, rssPeak: 900 << 20}, "", NoTarget},
		{"all open and under the limit", sessionLoad{n: 1000, opened: 1000, rssPeak: 299 << 20}, scaleStreamsTargetRow, Met},
		{"the limit itself is over", sessionLoad{n: 1000, opened: 1000, rssPeak: 300 << 20}, scaleStreamsTargetRow, Missed},
		{"fewer opened is not measured, however low the RSS", sessionLoad{n: 1000, opened: 812, rssPeak: 100 << 20}, scaleStreamsTargetRow, NotMeasured},
		{"sessions lost during the hold are not measured", sessionLoad{n: 1000, opened: 1000, ended: 3, rssPeak: 100 << 20}, scaleStreamsTargetRow, NotMeasured},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			target, got := tc.load.streamsVerdict(scaleStreamsTargetRow)
			if target != tc.wantTarget || got != tc.want {
				t.Errorf("streamsVerdict() = %q, %q; want %q, %q", target, got, tc.wantTarget, tc.want)
			}
		})
	}
}

func TestFormatCount(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{10, "10"}, {999, "999"}, {1000, "1k"}, {12345, "12.3k"}, {100000, "100k"}, {2.5e6, "2.5M"},
	}
	for _, tc := range tests {
		if got := formatCount(tc.v); got != tc.want {
			t.Errorf("formatCount(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// The process probes feed the in-process scale table; a zero would print
// as a plausible "0 B" growth rather than fail.
func TestSelfProbes(t *testing.T) {
	if rss := selfRSS(); rss < 1<<20 {
		t.Errorf("selfRSS() = %v bytes, want at least a MiB for a running Go test", rss)
	}
	start := selfCPU()
	for deadline := time.Now().Add(20 * time.Millisecond); time.Now().Before(deadline); {
	}
	if used := selfCPU() - start; used <= 0 {
		t.Errorf("selfCPU() did not advance over 20ms of spinning (%v)", used)
	}
}
