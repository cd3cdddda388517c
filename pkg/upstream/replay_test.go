package upstream

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
)

func TestReplayable(t *testing.T) {
	for _, tc := range []struct {
		name       string
		body       io.Reader
		length     int64
		replayable bool
	}{
		{"small body of known length", strings.NewReader("{}"), 2, true},
		{"at the cap", strings.NewReader(strings.Repeat("x", MaxReplayableBody)), MaxReplayableBody, true},
		{"over the cap: streamed", strings.NewReader(strings.Repeat("x", MaxReplayableBody+1)), MaxReplayableBody + 1, false},
		{"chunked: streamed", strings.NewReader("{}"), -1, false},
		{"no body", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, "https://karmada.invalid/api/v1/namespaces/ci/pods", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tc.length
			req.GetBody = nil // as on a request a server received
			want := ""
			if tc.body != nil {
				b, _ := io.ReadAll(tc.body)
				want = string(b)
				req.Body = io.NopCloser(strings.NewReader(want))
			}
			if err := Replayable(httptest.NewRecorder(), req, time.Second); err != nil {
				t.Fatal(err)
			}
			if (req.GetBody != nil) != tc.replayable {
				t.Fatalf("GetBody set: %v, want %v", req.GetBody != nil, tc.replayable)
			}
			if req.Body != nil {
				if got, _ := io.ReadAll(req.Body); string(got) != want {
					t.Errorf("body sent: %d bytes, want the %d given", len(got), len(want))
				}
			}
			if tc.replayable {
				again, _ := req.GetBody()
				if got, _ := io.ReadAll(again); string(got) != want {
					t.Errorf("body sent again: %d bytes, want %d", len(got), len(want))
				}
			}
		})
	}
	t.Run("a body cut short is an error", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, "https://karmada.invalid/", io.NopCloser(strings.NewReader("{")))
		req.ContentLength = 10
		req.GetBody = nil
		if err := Replayable(httptest.NewRecorder(), req, time.Second); err == nil {
			t.Error("no error for a body shorter than its Content-Length")
		}
	})
}

// TestReplayableBodyDeadline: a client that sends a small body's headers
// and then trickles it gets a 408 Status once the deadline passes, instead
// of holding the handler until it finishes, which it never does.
func TestReplayableBodyDeadline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := Replayable(w, r, 200*time.Millisecond); err != nil {
			apiresponse.WriteStatus(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "POST /api/v1/namespaces/ci/pods HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"reason":"Timeout"`) {
		t.Errorf("trickled body: %s %s, want a 408 Timeout Status", res.Status, body)
	}
	t.Logf("answered %s after %s", res.Status, time.Since(start).Round(time.Millisecond))
}
