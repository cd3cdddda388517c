package proxy

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// FuzzServiceProxyRewrite checks that with a ServiceResolver a request is
// rewritten to the cluster proxy only after the strict services/proxy parse
// (or the pod one), keeping its rest and query byte for byte, and that no
// request some reading takes for services/<x>/proxy passes through.
func FuzzServiceProxyRewrite(f *testing.F) {
	for _, seed := range [][2]string{
		{"/api/v1/namespaces/ci/services/https:svc:443/proxy/ws", "x=1"},
		{"/api/v1/namespaces/ci/services/web/proxy", ""},
		{"/api/v1/namespaces/ci/services/web:8080/proxy/a%2Fb/%2e%2e", "q=%zz;"},
		{"/api/v1/namespaces/ci/services/w%65b/proxy/", ""},
		{"/api/v1/namespaces/ci/services/web/proxy/../../pods/x/exec", ""},
		{"/api/v1/namespaces/ci/services/x/../web/proxy/", ""},
		{"/api/v1/namespaces/ci/services/web/status", ""},
		{"/api/v1/namespaces/ci/pods/p/exec", "command=ls"},
	} {
		f.Add(seed[0], seed[1])
	}
	p := newTestProxy(f, Options{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, ServiceResolver: &proxytest.Resolver{Cluster: proxytest.Cluster}})
	out := recordUpstream(p)
	clusterPrefix := karmada.ClusterProxyPath(proxytest.Cluster, "")

	f.Fuzz(func(t *testing.T, path, query string) {
		req, target, ok := fuzzRequest(path, query)
		if !ok {
			return // http.Server would refuse it before the proxy
		}
		if strings.ContainsAny(target, " \r\n\t") {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: gw\r\n\r\n")))
		if err != nil {
			return
		}
		out.requests = nil
		p.ServeHTTP(httptest.NewRecorder(), req)
		if len(out.requests) == 0 {
			return
		}
		if len(out.requests) > 1 {
			t.Fatalf("%q: %d upstream requests", target, len(out.requests))
		}
		got := out.requests[0].URL
		if got.RawQuery != req.URL.RawQuery {
			t.Fatalf("%q: query %q", target, got.RawQuery)
		}
		if !strings.HasPrefix(got.Path, clusterPrefix) {
			if serviceProxy.targets(req.URL) {
				t.Fatalf("%q: a services/proxy reading passed through as %q", target, got.EscapedPath())
			}
			return
		}
		if _, _, _, ok := strictParseForTest(req.URL.EscapedPath()); ok {
			return // the pod rewrite, FuzzRewrite's subject
		}
		if podProxy.targets(req.URL) {
			return // pods/proxy, FuzzRewrite's subject too
		}
		sr, ok := serviceProxy.parse(req.URL)
		if !ok {
			t.Fatalf("%q: rewritten to %q without a strict parse", target, got.EscapedPath())
		}
		want := clusterPrefix + "/api/v1/namespaces/" + sr.Namespace + "/services/" + sr.Segment + "/proxy" + sr.Rest
		if got.EscapedPath() != want {
			t.Fatalf("%q: rewritten to %q, want %q", target, got.EscapedPath(), want)
		}
		for _, s := range strings.Split(got.Path, "/") {
			if s == "." || s == ".." {
				t.Fatalf("%q: dot segment in rewritten path %q", target, got.Path)
			}
		}
	})
}
