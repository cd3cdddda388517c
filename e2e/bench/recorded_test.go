package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordedCheck: the guard that keeps an unrecorded figure from
// reading "met" in recorded-sessions. Each case lacks one proof of the
// recording; all but the first must fail.
func TestRecordedCheck(t *testing.T) {
	ok := recordedCheck{open: 1000, written: 1000, total: 1000, audited: 2000}
	all := sessionLoad{n: 1000, opened: 1000}
	tests := []struct {
		name  string
		load  sessionLoad
		check func(*recordedCheck)
		want  string // in the error; "" for none
	}{
		{"every session recorded, written and audited", all, func(*recordedCheck) {}, ""},
		{"sessions that ended during the hold were written already", sessionLoad{n: 1000, opened: 1000, ended: 3},
			func(c *recordedCheck) { c.open = 997 }, ""},
		{"no session opened proves nothing", sessionLoad{n: 1000}, func(c *recordedCheck) { *c = recordedCheck{} }, "no session opened"},
		{"recording off: nothing open, nothing written", all, func(c *recordedCheck) { c.open, c.written, c.total = 0, 0, 0 }, "0 recordings open"},
		{"fewer open than held", all, func(c *recordedCheck) { c.open = 999 }, "999 recordings open"},
		{"not finished after the sessions closed", all, func(c *recordedCheck) { c.stillOpen, c.written, c.total = 4, 996, 996 }, "4 recordings not finished"},
		{"the counter disagrees with the files", all, func(c *recordedCheck) { c.total = 998 }, "recordings_total is 998"},
		{"failures counted (fail-open)", all, func(c *recordedCheck) { c.failures = 1 }, "recording_failures_total is 1"},
		{"audit off", all, func(c *recordedCheck) { c.audited = 0 }, "0 audit events"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.check(&c)
			err := c.verify(tc.load)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("verify(%+v) = %v, want nil", tc.load, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("verify(%+v) = %v, want an error saying %q", tc.load, err, tc.want)
			}
		})
	}
}

// TestRecordingFiles counts by the names pkg/recording gives its files: a
// hidden .<name>.tmp while the session runs, <name> (a .cast) once written.
func TestRecordingFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{
		".bench_bench-shell_20261204T063000Z_1.cast.tmp",
		".bench_bench-shell_20261204T063000Z_2.cast.tmp",
		"bench_bench-shell_20261204T063000Z_3.cast",
		"unrelated.log",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	open, written, err := recordingFiles(dir)
	if err != nil || open != 2 || written != 1 {
		t.Errorf("recordingFiles = %d open, %d written, %v; want 2, 1, nil", open, written, err)
	}
	if _, _, err := recordingFiles(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing recording directory must be an error, not zero recordings")
	}
}

func TestRecordedFlags(t *testing.T) {
	got := flags([]string{"--record-sessions=tty", "--record-sessions-dir=/x/tmp123/recordings"}, "/x/tmp123")
	if want := "--record-sessions=tty --record-sessions-dir=<tmp>/recordings"; got != want {
		t.Errorf("flags = %q, want %q", got, want)
	}
}
