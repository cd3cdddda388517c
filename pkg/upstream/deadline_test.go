package upstream

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// slowBody yields its content only after the test let it, as a client
// uploading slowly does: the deadline must not run while it is being sent.
type slowBody struct {
	release <-chan struct{}
	r       io.Reader
}

func (b *slowBody) Read(p []byte) (int, error) {
	<-b.release
	return b.r.Read(p)
}

func (b *slowBody) Close() error { return nil }

// TestRoundTripWithin covers the response header deadline on its own (the
// proxy's TestHungUpstreamIs504 covers its use on every route): a hung
// upstream yields a *TimeoutError naming it, counted from when the request
// body was sent, and a response whose headers came in time is never cut.
// Starting the timer before the body is sent fails "slow upload"; dropping
// the deadline fails "hung".
func TestRoundTripWithin(t *testing.T) {
	const d = 150 * time.Millisecond
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/slow-body":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			if proxytest.StaySilent(r, 3*d) { // the body, not the headers, is late
				io.WriteString(w, "late body")
			}
		default:
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(srv.Close)

	tests := []struct {
		name, path string
		upload     time.Duration // how long the request body takes to send
		d          time.Duration
		wantErr    bool
		wantBody   string
	}{
		{name: "hung", path: "/hang", d: d, wantErr: true},
		{name: "answers at once", path: "/", d: d, wantBody: "ok"},
		{name: "slow upload", path: "/", upload: 3 * d, d: d, wantBody: "ok"},
		{name: "headers in time, body late", path: "/slow-body", d: d, wantBody: "late body"},
		{name: "no deadline", path: "/slow-body", d: 0, wantBody: "late body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.ReadCloser = http.NoBody
			if tt.upload > 0 {
				ch := make(chan struct{})
				time.AfterFunc(tt.upload, func() { close(ch) })
				body = &slowBody{release: ch, r: strings.NewReader("payload")}
			}
			req, _ := http.NewRequest(http.MethodPost, srv.URL+tt.path, body)
			start := time.Now()
			res, err := RoundTripWithin(srv.Client().Transport, req, tt.d, ClusterProxyName("member1"))
			if tt.wantErr {
				var te *TimeoutError
				if !errors.As(err, &te) || !errors.Is(err, ErrTimeout) {
					t.Fatalf("err = %v, want a *TimeoutError", err)
				}
				if took := time.Since(start); took > 10*tt.d {
					t.Errorf("answered after %s, want about %s", took, tt.d)
				}
				if !strings.Contains(err.Error(), `cluster "member1"`) || !apierrors.IsTimeout(te.Status()) {
					t.Errorf("error %q / status %v does not name the cluster proxy as a 504", err, te.Status())
				}
				return
			}
			if err != nil {
				t.Fatalf("RoundTripWithin: %v", err)
			}
			defer res.Body.Close()
			got, err := io.ReadAll(res.Body)
			if err != nil || string(got) != tt.wantBody {
				t.Errorf("body %q, %v; want %q", got, err, tt.wantBody)
			}
		})
	}
}

func TestNameOf(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/api/v1/namespaces/ci/pods/x?resourceVersion=0", Karmada},
		{"/apis/cluster.karmada.io/v1alpha1/clusters/member1/proxy/api/v1/namespaces/ci/pods/x", `the cluster proxy for cluster "member1"`},
		{"/apis/cluster.karmada.io/v1alpha1/clusters/member1/status", Karmada},
		{"/apis/cluster.karmada.io/v1alpha1/clusters/member1", Karmada},
	}
	for _, tt := range tests {
		if got := NameOf(tt.path); got != tt.want {
			t.Errorf("NameOf(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}
