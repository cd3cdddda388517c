package bench

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestReadyWriterCheck: what recorded-exec accepts as a session's output.
// A figure from a session that moved less than asked would be a rate of
// nothing.
func TestReadyWriterCheck(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		stdin  bool
		ok     bool
	}{
		{"stdout: every letter", []string{"aaaa", "aaaa"}, false, true},
		{"stdout: short", []string{"aaaa", "aaa"}, false, false},
		{"stdout: not letters (a cooked terminal's CRs)", []string{"aaa\r\n", "aaa"}, false, false},
		{"stdin: ready then the count", []string{"ready\n", "8\n"}, true, true},
		{"stdin: ready, no count (hung up)", []string{"ready\n"}, true, false},
		{"stdin: a short count", []string{"ready\n7\n"}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &readyWriter{ready: make(chan struct{}), answered: make(chan struct{})}
			for _, s := range tt.writes {
				if _, err := w.Write([]byte(s)); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.check(8, tt.stdin); (err == nil) != tt.ok {
				t.Errorf("check: %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestGatedReader: stdin starts once the command says ready and ends only
// once it answered, or when the session is over.
func TestGatedReader(t *testing.T) {
	w := &readyWriter{ready: make(chan struct{}), answered: make(chan struct{})}
	done := make(chan struct{})
	g := &gatedReader{r: io.LimitReader(letters{}, 3), gate: w.ready, release: w.answered, done: done}
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(g)
		got <- string(b)
	}()
	select {
	case b := <-got:
		t.Fatalf("read %q before the command was ready", b)
	case <-time.After(50 * time.Millisecond):
	}
	_, _ = w.Write([]byte("ready\n"))
	select {
	case b := <-got:
		t.Fatalf("ended (%q) before the command answered", b)
	case <-time.After(50 * time.Millisecond):
	}
	_, _ = w.Write([]byte("3\n"))
	if b := <-got; b != "aaa" {
		t.Errorf("read %q, want aaa", b)
	}

	// A session that ends before the command is ready ends the reader.
	never := make(chan struct{})
	close(done)
	if n, err := (&gatedReader{r: strings.NewReader("x"), gate: never, release: never, done: done}).Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the session: %d, %v; want 0, EOF", n, err)
	}
}
