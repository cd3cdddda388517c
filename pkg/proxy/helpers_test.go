package proxy

import (
	"crypto/tls"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// recorded is what an upstream saw of one request.
type recorded struct {
	Method     string
	RequestURI string
	Path       string
	RawPath    string
	RawQuery   string
	Host       string
	Header     http.Header
	Body       []byte
	ProtoMajor int
}

// isAdmissionCheck reports whether r is passthrough mode's admission check
// (Proxy.admittedByKarmada): a GET from the watch cache of the pod or
// Service a rewritten route names.
func isAdmissionCheck(r *http.Request) bool {
	segs := strings.Split(r.URL.Path, "/")
	segs = segs[max(0, len(segs)-6):] // below the upstream's base path
	return r.Method == http.MethodGet && r.URL.RawQuery == "resourceVersion=0" && len(segs) == 6 &&
		segs[0] == "api" && segs[1] == "v1" && segs[2] == "namespaces" && (segs[4] == "pods" || segs[4] == "services")
}

// admitting answers admission checks as karmada-apiserver answers them for
// a caller it admits and hands every other request to next, so an upstream
// fake sees only the requests its test is about. The checks themselves are
// TestPassthroughAdmissionCheck's subject.
func admitting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isAdmissionCheck(r) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{}}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recordingUpstream answers 200 "ok" and records every request but
// admission checks, which it admits.
type recordingUpstream struct {
	mu   sync.Mutex
	reqs []recorded
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	admitting(http.HandlerFunc(u.record)).ServeHTTP(w, r)
}

func (u *recordingUpstream) record(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, recorded{
		Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, RawPath: r.URL.RawPath,
		RawQuery: r.URL.RawQuery, Host: r.Host, Header: r.Header.Clone(), Body: body, ProtoMajor: r.ProtoMajor,
	})
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}

func (u *recordingUpstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

// tlsUpstreamConfig is a rest.Config trusting srv's certificate.
func tlsUpstreamConfig(srv *httptest.Server) *rest.Config {
	return &rest.Config{
		Host: srv.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
		},
	}
}

func newTestProxy(t testing.TB, opts Options) *Proxy {
	t.Helper()
	if opts.Resolver == nil {
		opts.Resolver = &proxytest.Resolver{Cluster: proxytest.Cluster}
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(prometheus.NewRegistry())
	}
	p, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.upstream.closeIdleConnections)
	return p
}

// serverTLS is a TLS config for an upstream httptest server whose client
// hellos are recorded by remote address.
type helloRecorder struct {
	mu     sync.Mutex
	protos map[string][]string
}

func (h *helloRecorder) config() *tls.Config {
	h.protos = map[string][]string{}
	return &tls.Config{
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			h.mu.Lock()
			h.protos[hello.Conn.RemoteAddr().String()] = append([]string(nil), hello.SupportedProtos...)
			h.mu.Unlock()
			return nil, nil
		},
	}
}

func (h *helloRecorder) offered(remoteAddr string) ([]string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.protos[remoteAddr]
	return p, ok
}

// insecureTestTLS is only for polling a loopback test gateway.
func insecureTestTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec

// upstreamRecorder stands in for every upstream transport of a Proxy: it
// answers 200 and keeps each request as the proxy would send it, before any
// credentials a real transport adds, but for admission checks, which it
// admits.
type upstreamRecorder struct{ requests []*http.Request }

func (u *upstreamRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if !isAdmissionCheck(r) {
		u.requests = append(u.requests, r)
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// recordUpstream replaces all four of p's upstream transports with one recorder.
func recordUpstream(p *Proxy) *upstreamRecorder {
	u := &upstreamRecorder{}
	p.upstream.caller, p.upstream.callerUpgrade = u, u
	p.upstream.gateway, p.upstream.gatewayUpgrade = u, u
	return u
}
