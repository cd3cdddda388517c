package env

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A child that dies at start is reported with its last words: CI may cut a
// failing test's output before the log tails, and the exit status alone
// ("kubelet-member2 exited: exit status 1") says nothing of why.
func TestExitErrQuotesTheLogsLastLine(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         []string
		unwanted     []string
	}{
		{
			name:   "fatal line last",
			script: `echo starting; echo "E1205 Failed to start ContainerManager" >&2; exit 1`,
			want:   []string{"child exited: exit status 1", `its log ends "E1205 Failed to start ContainerManager"`},
		},
		{
			name:     "silent exit",
			script:   `exit 2`,
			want:     []string{"child exited: exit status 2"},
			unwanted: []string{"its log ends", "==="},
		},
		{
			name:   "long line cut",
			script: `printf 'x%.0s' $(seq 800); echo`,
			want:   []string{"child exited; its log ends", `..."`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &process{name: "child", path: "/bin/sh", args: []string{"-c", tc.script}, logPath: filepath.Join(t.TempDir(), "child.log")}
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
			<-p.exited()
			got := p.exitErr().Error()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("exitErr() = %q, want it to contain %q", got, w)
				}
			}
			for _, u := range tc.unwanted {
				if strings.Contains(got, u) {
					t.Errorf("exitErr() = %q, want no %q", got, u)
				}
			}
			if len(got) > 600 {
				t.Errorf("exitErr() is %d bytes long, want the log line cut", len(got))
			}
		})
	}
}

// logTail reads only a log's end, and never returns the piece of a line its
// window starts in as if it were a whole line.
func TestLogTail(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		window    int64
		want      []string
	}{
		{name: "smaller than the window", log: "a\nb\nc\n", window: 64, want: []string{"a", "b", "c"}},
		{name: "no final newline", log: "a\nb", window: 64, want: []string{"a", "b"}},
		{name: "window starts inside a line", log: "first line\nsecond\nthird\n", window: 10, want: []string{"third"}},
		{name: "window starts at a line", log: "first line\nsecond\nthird\n", window: 13, want: []string{"second", "third"}},
		{name: "one line longer than the window", log: "a very long line\n", window: 4, want: nil},
		{name: "empty", log: "", window: 64, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.log")
			if err := os.WriteFile(path, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := logTail(path, tc.window)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("logTail(%q, %d) = %q, want %q", tc.log, tc.window, got, tc.want)
			}
		})
	}
	if _, err := logTail(filepath.Join(t.TempDir(), "missing.log"), 64); err == nil {
		t.Error("logTail of a missing file: no error")
	}
}

// A daemon that exits at start is started again, as systemd does for the
// kubelet, but only so often, and never one that was stopped on purpose.
func TestRestarterStartsADiedProcessAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		// script runs in a fresh directory with a FIFO named ready: a run
		// that stays up writes to it first.
		script string
		halt   bool
		// wantStarts is how many runs there were when ensureRunning settled.
		wantStarts int
		wantErr    string
	}{
		{
			name:       "exits once then runs",
			script:     `echo . >> starts; [ "$(wc -l < starts)" -ge 2 ] || { echo "E Failed to start ContainerManager"; exit 1; }; echo up > ready; exec sleep 60`,
			wantStarts: 2,
		},
		{
			name:       "exits every time",
			script:     `echo "E cannot start"; exit 1`,
			wantStarts: 3,
			wantErr:    `exit status 1; its log ends "E cannot start"`,
		},
		{
			name:       "stopped on purpose",
			script:     `echo up > ready; exec sleep 60`,
			halt:       true,
			wantStarts: 1,
			wantErr:    "child exited",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := unix.Mkfifo(filepath.Join(dir, "ready"), 0o600); err != nil {
				t.Fatal(err)
			}
			ready := make(chan struct{})
			go func() {
				// Opening a FIFO to read blocks until a writer opens it.
				if f, err := os.Open(filepath.Join(dir, "ready")); err == nil {
					f.Close()
					close(ready)
				}
			}()
			t.Cleanup(func() {
				// Unblock the reader if no run ever got up.
				if f, err := os.OpenFile(filepath.Join(dir, "ready"), os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
			})
			p := &process{name: "child", path: "/bin/sh", args: []string{"-c", "cd " + dir + " && " + tc.script}, logPath: filepath.Join(dir, "child.log")}
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.kill)
			var logged []string
			r := restarter{p: p, attempts: 1, max: 3, logf: func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }}
			var err error
			if tc.halt {
				<-ready
				p.stop(time.Second)
				err = r.ensureRunning()
			}
		wait:
			for err == nil {
				select {
				case <-ready:
					break wait
				case <-p.exited():
					if r.attempts > 10 {
						t.Fatalf("started %d times, want ensureRunning to give up", r.attempts)
					}
					err = r.ensureRunning()
				}
			}
			if wantUp := tc.wantErr == ""; p.running() != wantUp {
				t.Errorf("running = %v, want %v", p.running(), wantUp)
			}
			if r.attempts != tc.wantStarts {
				t.Errorf("%d starts, want %d (logged %q)", r.attempts, tc.wantStarts, logged)
			}
			if len(logged) != tc.wantStarts-1 {
				t.Errorf("logged %q, want a line per start again", logged)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("ensureRunning: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("ensureRunning: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

// Components start with one P unless the environment is a measurement of
// their capacity; the test's own GOMAXPROCS never reaches them.
func TestComponentGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "7")
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{name: "default", want: "GOMAXPROCS=1"},
		{name: "on every CPU", opts: Options{ComponentsOnEveryCPU: true}, want: "GOMAXPROCS=7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Env{opts: tc.opts, logDir: t.TempDir()}
			p := e.newProcess("component", "/bin/sh", "-c", `echo "GOMAXPROCS=$GOMAXPROCS"`)
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
			<-p.exited()
			log, err := os.ReadFile(p.logPath)
			if err != nil {
				t.Fatal(err)
			}
			if lines := strings.Split(strings.TrimSpace(string(log)), "\n"); !slices.Contains(lines, tc.want) {
				t.Errorf("the component's environment printed %q, want the line %q", log, tc.want)
			}
		})
	}
}
