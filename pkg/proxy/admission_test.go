package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/admission"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// TestPassthroughAdmissionCache: with Options.Admissions, as
// --admission-cache-ttl has cmd/gateway build it, karmada-apiserver's 200
// to the admission check is reused for the same headers and object, and
// only then: another credential, impersonation or object is checked again,
// a refusal is never reused, and without the cache every request is
// checked.
func TestPassthroughAdmissionCache(t *testing.T) {
	const log = "/api/v1/namespaces/ci/pods/p/log"
	good := http.Header{"Authorization": {"Bearer good"}}
	steps := []struct {
		name      string
		target    string
		header    http.Header
		wantCode  int
		wantCheck bool // whether karmada-apiserver is asked
	}{
		{"first request", log, good, http.StatusOK, true},
		{"the same again", log, good, http.StatusOK, false},
		{"another trace context", log, http.Header{"Authorization": {"Bearer good"}, "Traceparent": {"00-1"}}, http.StatusOK, false},
		{"impersonating", log, http.Header{"Authorization": {"Bearer good"}, "Impersonate-User": {"carol"}}, http.StatusOK, true},
		{"another pod", "/api/v1/namespaces/ci/pods/q/log", good, http.StatusOK, true},
		{"refused", log, http.Header{"Authorization": {"Bearer denied"}}, http.StatusForbidden, true},
		{"refused again: never remembered", log, http.Header{"Authorization": {"Bearer denied"}}, http.StatusForbidden, true},
	}
	for _, cached := range []bool{true, false} {
		k := &judgingKarmada{}
		srv := httptest.NewServer(k)
		opts := Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: &proxytest.Resolver{Cluster: proxytest.Cluster}}
		if cached {
			opts.Admissions = admission.NewCache(time.Minute)
		}
		p := newTestProxy(t, opts)
		for _, s := range steps {
			before := len(k.requests())
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, http.MethodGet, s.target, s.header, ""))
			checks := 0
			for _, r := range k.requests()[before:] {
				if proxytest.IsAdmissionCheck(r) {
					checks++
				}
			}
			want := s.wantCheck || !cached
			if rec.Code != s.wantCode || (checks == 1) != want || checks > 1 {
				t.Errorf("cache %v, %s: code %d (want %d), %d admission checks (want one: %v)", cached, s.name, rec.Code, s.wantCode, checks, want)
			}
		}
		srv.Close()
	}
}
