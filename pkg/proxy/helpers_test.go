package proxy

import (
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberevents"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

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
	t.Cleanup(p.upstream.CloseIdleConnections)
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
	if !proxytest.IsAdmissionCheck(r) {
		u.requests = append(u.requests, r)
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// recordUpstream replaces all four of p's upstream transports with one recorder.
func recordUpstream(p *Proxy) *upstreamRecorder {
	u := &upstreamRecorder{}
	p.upstream.Caller, p.upstream.CallerUpgrade = u, u
	p.upstream.Gateway, p.upstream.GatewayUpgrade = u, u
	return u
}

// withMemberEvents sets opts.Events as cmd/gateway does with
// --merge-member-events: a memberevents.Merger with the proxy's resolver
// and metrics.
func withMemberEvents(opts Options) Options {
	if opts.Resolver == nil {
		opts.Resolver = &proxytest.Resolver{Cluster: proxytest.Cluster}
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(prometheus.NewRegistry())
	}
	opts.Events = func(gw *Proxy) (EventsMerger, error) {
		return memberevents.New(memberevents.Options{Gateway: gw, Resolver: opts.Resolver, Metrics: opts.Metrics})
	}
	return opts
}
