package proxy

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// canonicalPodPath is an independent statement of the strict parse: DNS-1123
// label namespace, DNS-1123 subdomain name, one of the four subresources,
// nothing else, no escapes.
var canonicalPodPath = regexp.MustCompile(`^/api/v1/namespaces/([a-z0-9]([-a-z0-9]*[a-z0-9])?)/pods/([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/(exec|attach|log|portforward)$`)

// podProxyPathForTest is an independent, loose statement of the pods/proxy
// prefix: every request the gateway rewrites as pods/proxy matches it.
// narrowPodProxyPathForTest is a narrow one: every request matching it
// (name or name:port with a plain port, a rest of letters, digits and
// slashes) must be rewritten.
var (
	podProxyPathForTest       = regexp.MustCompile(`^/api/v1/namespaces/[a-z0-9]([-a-z0-9]*[a-z0-9])?/pods/((https?:)?[a-z0-9][-a-z0-9.]*(:[a-z0-9-]+)?|https?:[a-z0-9][-a-z0-9.]*:)/proxy(/.*)?$`)
	narrowPodProxyPathForTest = regexp.MustCompile(`^/api/v1/namespaces/[a-z0-9]{1,20}/pods/[a-z0-9]{1,20}(:[1-9][0-9]{0,3})?/proxy(/[a-z0-9/]*)?$`)
)

func strictParseForTest(escapedPath string) (ns, name, sub string, ok bool) {
	m := canonicalPodPath.FindStringSubmatch(escapedPath)
	if m == nil || len(m[1]) > 63 || len(m[3]) > 253 {
		return "", "", "", false
	}
	return m[1], m[3], m[7], true
}

func FuzzRewrite(f *testing.F) {
	for _, seed := range [][2]string{
		{"/api/v1/namespaces/ci/pods/job-42/exec", "command=sh&command=-c&container=build&container=build"},
		{"/api/v1/namespaces/ci/pods/job.42/log", "follow=true"},
		{"/api/v1/namespaces/ci/pods/p/portforward", "ports=80"},
		{"/api/v1/namespaces/ci/pods/p/attach", ""},
		{"/api/v1/namespaces/ci/pods/a%2Fb/exec", ""},
		{"/api/v1/namespaces//pods/x/exec", ""},
		{"/api/v1/namespaces/ci/pods/../exec", ""},
		{"/api/v1/namespaces/ci/pods/%2e%2e/exec", ""},
		{"/api/v1/namespaces/ci/pods/x/exec/", ""},
		{"//api/v1/namespaces/ci/pods/x/exec", ""},
		{"/api/v1/namespaces/ci/pods/x/ex%65c", "a=%zz;b"},
		{"/api/v1/namespaces/ci/pods/x/status/../exec", ""},
		{"/api/v1/namespaces/ci/pods/x/status", "x=1"},
		{"/api/v1/namespaces/ci/pods/x/exec/extra", ""},
		{"/api/v1/namespaces/ci/pods/x/log/..", ""},
		{"/api/v1/namespaces/ci/pods/x/attach/%2e%2e/", ""},
		{"/api/v1/namespaces/ci/pods/x/portforward%2Fa", ""},
		{"/api/v1/namespaces/ci/pods/x/proxy/exec", ""},
		{"/api/v1/namespaces/ci/pods/x:8080/proxy", "a=%zz;"},
		{"/api/v1/namespaces/ci/pods/https:job.42:443/proxy/a%2Fb/", ""},
		{"/api/v1/namespaces/ci/pods/x/proxy/../../y/exec", ""},
		{"/api/v1/namespaces/ci/pods/x/proxy/%2e%2e/", ""},
		{"/api/v1/namespaces/ci/pods/x%3A80/proxy/", ""},
		{"/api/v1/namespaces/ci/configmaps/a%2Fb", ""},
		{"/apis", "timeout=32s"},
	} {
		f.Add(seed[0], seed[1])
	}

	p := newTestProxy(f, Options{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}})
	out := recordUpstream(p)

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
			return // http.Server would refuse it before the proxy
		}
		out.requests = nil
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)

		// The escaped path as the client sent it, before the query.
		sentPath, _, _ := strings.Cut(target, "?")
		if req.URL.Opaque != "" || req.URL.Host != "" {
			sentPath = req.URL.EscapedPath()
		}
		ns, name, sub, canonical := strictParseForTest(sentPath)

		if len(out.requests) > 1 {
			t.Fatalf("%q: %d upstream requests", target, len(out.requests))
		}
		if canonical && req.URL.Opaque == "" {
			if len(out.requests) != 1 {
				t.Fatalf("%q: canonical pod request not sent upstream: %d %s", target, rec.Code, rec.Body)
			}
			want := karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/"+ns+"/pods/"+name+"/"+sub)
			if got := out.requests[0].URL.EscapedPath(); got != want || out.requests[0].URL.Path != want {
				t.Fatalf("%q: rewritten to %q (Path %q), want %q", target, got, out.requests[0].URL.Path, want)
			}
			if out.requests[0].URL.RawQuery != req.URL.RawQuery {
				t.Fatalf("%q: query %q, want %q", target, out.requests[0].URL.RawQuery, req.URL.RawQuery)
			}
			return
		}
		clusterPrefix := karmada.ClusterProxyPath(proxytest.Cluster, "")
		if narrowPodProxyPathForTest.MatchString(sentPath) && req.URL.Opaque == "" {
			if len(out.requests) != 1 || out.requests[0].URL.EscapedPath() != clusterPrefix+sentPath {
				t.Fatalf("%q: canonical pods/proxy request not rewritten: %d %s", target, rec.Code, rec.Body)
			}
		}
		if len(out.requests) == 0 {
			return
		}
		got := out.requests[0].URL
		if strings.HasPrefix(got.Path, clusterPrefix) && !strings.HasPrefix(req.URL.Path, "/apis/cluster.karmada.io/") {
			// Only pods/proxy is left to rewrite: its whole path byte for
			// byte below the cluster proxy, and no dot segment anywhere.
			if !podProxyPathForTest.MatchString(sentPath) || got.EscapedPath() != clusterPrefix+sentPath || got.RawQuery != req.URL.RawQuery {
				t.Fatalf("%q: rewritten to %q ? %q without a strict parse", target, got.EscapedPath(), got.RawQuery)
			}
			for _, s := range strings.Split(got.Path, "/") {
				if s == "." || s == ".." {
					t.Fatalf("%q: dot segment in rewritten path %q", target, got.Path)
				}
			}
			return
		}
		// Anything else that went upstream went unchanged, and is not a
		// rewrite nor a request for one of the four subresources or
		// pods/proxy.
		if strings.HasPrefix(got.Path, "/apis/cluster.karmada.io/") && !strings.HasPrefix(req.URL.Path, "/apis/cluster.karmada.io/") {
			t.Fatalf("%q: rewritten to %q without a strict parse", target, got.Path)
		}
		if got.EscapedPath() != req.URL.EscapedPath() || got.Path != req.URL.Path || got.RawQuery != req.URL.RawQuery {
			t.Fatalf("%q: passthrough changed the target to %q ? %q", target, got.EscapedPath(), got.RawQuery)
		}
		if targetsPodSubresource(req.URL) || podProxy.targets(req.URL) {
			t.Fatalf("%q: non-canonical pod stream or pods/proxy request passed through", target)
		}
	})
}

// fuzzRequest is the GET request http.Server would hand the proxy for
// path?query, with the target as sent, or false when the server would
// refuse it first.
func fuzzRequest(path, query string) (*http.Request, string, bool) {
	target := path
	if query != "" {
		target += "?" + query
	}
	if strings.ContainsAny(target, " \r\n\t") {
		return nil, "", false
	}
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: gw\r\n\r\n")))
	if err != nil {
		return nil, "", false
	}
	return req, target, true
}
