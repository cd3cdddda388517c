package proxy

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

func TestRouting(t *testing.T) {
	longName := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) // 243
	ns63 := strings.Repeat("n", 63)
	proxied := func(ns, name, sub string) string {
		return karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/"+ns+"/pods/"+name+"/"+sub)
	}
	podProxied := func(seg, rest string) string {
		return karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/pods/"+seg+"/proxy") + rest
	}
	tests := []struct {
		name   string
		method string
		target string
		// wantCode is the gateway's answer; 200 means the upstream answered.
		wantCode int
		// wantURI is the exact request target the upstream received.
		wantURI string
	}{
		// Rewritten, query byte for byte.
		{"exec POST repeated command and container", "POST",
			"/api/v1/namespaces/ci/pods/job-42/exec?command=sh&command=-c&command=echo%20hi%3B%20exit&container=build&container=build&stdin=true&stdout=true&stderr=true",
			200, proxied("ci", "job-42", "exec") + "?command=sh&command=-c&command=echo%20hi%3B%20exit&container=build&container=build&stdin=true&stdout=true&stderr=true"},
		{"exec GET websocket form", "GET", "/api/v1/namespaces/ci/pods/job-42/exec?command=ls&tty=1&stdout=1",
			200, proxied("ci", "job-42", "exec") + "?command=ls&tty=1&stdout=1"},
		{"attach", "POST", "/api/v1/namespaces/ci/pods/runner-x/attach?container=build&stdin=true",
			200, proxied("ci", "runner-x", "attach") + "?container=build&stdin=true"},
		{"log follow", "GET", "/api/v1/namespaces/ci/pods/p/log?follow=true&timestamps=true&container=build",
			200, proxied("ci", "p", "log") + "?follow=true&timestamps=true&container=build"},
		{"portforward", "GET", "/api/v1/namespaces/ci/pods/p/portforward?ports=8080&ports=9090",
			200, proxied("ci", "p", "portforward") + "?ports=8080&ports=9090"},
		{"pod name with dots", "GET", "/api/v1/namespaces/ci/pods/job.42.x/log",
			200, proxied("ci", "job.42.x", "log")},
		{"longest names", "GET", "/api/v1/namespaces/" + ns63 + "/pods/" + longName + "/log",
			200, proxied(ns63, longName, "log")},
		{"no query", "POST", "/api/v1/namespaces/ci/pods/p/exec", 200, proxied("ci", "p", "exec")},
		{"empty query kept", "POST", "/api/v1/namespaces/ci/pods/p/exec?", 200, proxied("ci", "p", "exec") + "?"},
		{"odd query encodings kept", "POST",
			"/api/v1/namespaces/ci/pods/p/exec?command=a%2Fb&command=%E2%9C%93&x=;y&z=%zz&empty=&=v&&+plus=a+b&command=%2e%2e",
			200, proxied("ci", "p", "exec") + "?command=a%2Fb&command=%E2%9C%93&x=;y&z=%zz&empty=&=v&&+plus=a+b&command=%2e%2e"},

		// pods/proxy in every form kube-apiserver accepts: rewritten, rest
		// and query byte for byte, any method (the pod's server decides).
		{"pod proxy", "GET", "/api/v1/namespaces/ci/pods/x/proxy", 200, podProxied("x", "")},
		{"pod proxy trailing slash kept", "GET", "/api/v1/namespaces/ci/pods/x/proxy/", 200, podProxied("x", "/")},
		{"pod proxy name:port to a path named exec", "GET", "/api/v1/namespaces/ci/pods/x:8080/proxy/exec", 200, podProxied("x:8080", "/exec")},
		{"pod proxy scheme:name:port", "POST", "/api/v1/namespaces/ci/pods/https:job.42:8443/proxy/hook?x=1", 200, podProxied("https:job.42:8443", "/hook?x=1")},
		{"pod proxy scheme:name:empty port", "GET", "/api/v1/namespaces/ci/pods/http:x:/proxy/", 200, podProxied("http:x:", "/")},
		{"pod proxy named port", "PUT", "/api/v1/namespaces/ci/pods/x:metrics/proxy/a", 200, podProxied("x:metrics", "/a")},
		{"pod proxy with encoding", "GET", "/api/v1/namespaces/ci/pods/x/proxy/a%2Fb/%E2%9C%93?q=%zz;x&&=v", 200, podProxied("x", "/a%2Fb/%E2%9C%93?q=%zz;x&&=v")},
		{"pod proxy PATCH", "PATCH", "/api/v1/namespaces/ci/pods/x/proxy/item", 200, podProxied("x", "/item")},
		{"pod proxy DELETE", "DELETE", "/api/v1/namespaces/ci/pods/x/proxy/item", 200, podProxied("x", "/item")},
		{"pod proxy HEAD", "HEAD", "/api/v1/namespaces/ci/pods/x/proxy/", 200, podProxied("x", "/")},
		{"pod proxy OPTIONS", "OPTIONS", "/api/v1/namespaces/ci/pods/x/proxy/", 200, podProxied("x", "/")},
		{"pod proxy rest looking like exec", "POST", "/api/v1/namespaces/ci/pods/x/proxy/api/v1/namespaces/ci/pods/y/exec", 200, podProxied("x", "/api/v1/namespaces/ci/pods/y/exec")},

		// Targets a rewritten subresource but is not canonical: 400.
		{"pod proxy encoded name", "GET", "/api/v1/namespaces/ci/pods/%78/proxy/", 400, ""},
		{"pod proxy encoded colon", "GET", "/api/v1/namespaces/ci/pods/x%3A80/proxy/", 400, ""},
		{"pod proxy encoded proxy", "GET", "/api/v1/namespaces/ci/pods/x/pr%6fxy/", 400, ""},
		{"pod proxy bad scheme", "GET", "/api/v1/namespaces/ci/pods/ftp:x:21/proxy/", 400, ""},
		{"pod proxy too many parts", "GET", "/api/v1/namespaces/ci/pods/http:x:80:1/proxy/", 400, ""},
		{"pod proxy empty port in name:port", "GET", "/api/v1/namespaces/ci/pods/x:/proxy/", 400, ""},
		{"pod proxy port out of range", "GET", "/api/v1/namespaces/ci/pods/x:65536/proxy/", 400, ""},
		{"pod proxy upper case name", "GET", "/api/v1/namespaces/ci/pods/X/proxy/", 400, ""},
		{"pod proxy empty name", "GET", "/api/v1/namespaces/ci/pods//proxy/", 400, ""},
		{"pod proxy dot dot name", "GET", "/api/v1/namespaces/ci/pods/../proxy/", 400, ""},
		{"pod proxy dot dot in rest", "GET", "/api/v1/namespaces/ci/pods/x/proxy/../../y/proxy/", 400, ""},
		{"pod proxy encoded dot dot in rest", "GET", "/api/v1/namespaces/ci/pods/x/proxy/%2e%2e/y", 400, ""},
		{"pod proxy dot dot behind encoded slash", "GET", "/api/v1/namespaces/ci/pods/x/proxy/a%2F..%2Fb", 400, ""},
		{"pod proxy double slash before", "GET", "//api/v1/namespaces/ci/pods/x/proxy/", 400, ""},
		{"pod proxy namespace with dot", "GET", "/api/v1/namespaces/ci.x/pods/x/proxy/", 400, ""},
		{"encoded slash in name", "POST", "/api/v1/namespaces/ci/pods/a%2Fb/exec", 400, ""},
		{"encoded slash lower case", "POST", "/api/v1/namespaces/ci/pods/a%2fb/exec", 400, ""},
		{"empty namespace", "POST", "/api/v1/namespaces//pods/x/exec", 400, ""},
		{"empty name", "POST", "/api/v1/namespaces/ci/pods//exec", 400, ""},
		{"dot dot name", "POST", "/api/v1/namespaces/ci/pods/../exec", 400, ""},
		{"dot name", "POST", "/api/v1/namespaces/ci/pods/./exec", 400, ""},
		{"encoded dot dot", "POST", "/api/v1/namespaces/ci/pods/%2e%2e/exec", 400, ""},
		{"trailing slash", "POST", "/api/v1/namespaces/ci/pods/x/exec/", 400, ""},
		{"trailing slashes", "GET", "/api/v1/namespaces/ci/pods/x/log//", 400, ""},
		{"leading double slash", "POST", "//api/v1/namespaces/ci/pods/x/exec", 400, ""},
		{"inner double slash", "POST", "/api/v1/namespaces/ci/pods/x//exec", 400, ""},
		{"encoded subresource", "POST", "/api/v1/namespaces/ci/pods/x/ex%65c", 400, ""},
		{"encoded namespace", "POST", "/api/v1/namespaces/c%69/pods/x/exec", 400, ""},
		{"encoded literal segment", "GET", "/api/v1/namespaces/ci/p%6fds/x/log", 400, ""},
		{"encoded slash before subresource", "POST", "/api/v1/namespaces/ci/pods/x%2Fexec", 400, ""},
		{"dot segments to exec", "POST", "/api/v1/namespaces/ci/pods/x/status/../exec", 400, ""},
		{"dot segment before", "POST", "/api/v1/./namespaces/ci/pods/x/exec", 400, ""},
		{"upper case name", "POST", "/api/v1/namespaces/ci/pods/X/exec", 400, ""},
		{"upper case namespace", "POST", "/api/v1/namespaces/CI/pods/x/exec", 400, ""},
		{"namespace with dot", "POST", "/api/v1/namespaces/ci.x/pods/x/exec", 400, ""},
		{"name starting with dash", "POST", "/api/v1/namespaces/ci/pods/-x/exec", 400, ""},
		{"name too long", "GET", "/api/v1/namespaces/ci/pods/" + strings.Repeat("a", 254) + "/log", 400, ""},
		{"namespace too long", "GET", "/api/v1/namespaces/" + strings.Repeat("n", 64) + "/pods/x/log", 400, ""},
		{"percent in name", "GET", "/api/v1/namespaces/ci/pods/x%41/log", 400, ""},
		{"non canonical wrong method still 400", "DELETE", "/api/v1/namespaces/ci/pods/a%2Fb/exec", 400, ""},

		// A segment after the subresource: kube-apiserver's exec, attach,
		// log and portforward take none, and the docs promise 400 with
		// nothing sent upstream for every such shape.
		{"extra segment", "POST", "/api/v1/namespaces/ci/pods/x/exec/extra", 400, ""},
		{"extra segments", "GET", "/api/v1/namespaces/ci/pods/x/log/a/b/c", 400, ""},
		{"extra segment and trailing slash", "GET", "/api/v1/namespaces/ci/pods/x/attach/extra/", 400, ""},
		{"dot dot after subresource", "POST", "/api/v1/namespaces/ci/pods/x/exec/..", 400, ""},
		{"dot after subresource", "GET", "/api/v1/namespaces/ci/pods/x/log/.", 400, ""},
		{"encoded dot dot after subresource", "GET", "/api/v1/namespaces/ci/pods/x/portforward/%2e%2e", 400, ""},
		{"encoded dot after subresource", "GET", "/api/v1/namespaces/ci/pods/x/portforward/%2E", 400, ""},
		{"encoded slash after subresource", "POST", "/api/v1/namespaces/ci/pods/x/exec%2Fextra", 400, ""},
		{"empty segment then extra", "POST", "/api/v1/namespaces/ci/pods/x/exec//extra", 400, ""},
		{"extra then dot dot back", "POST", "/api/v1/namespaces/ci/pods/x/exec/extra/..", 400, ""},
		{"extra on a non-canonical name", "POST", "/api/v1/namespaces/ci/pods/a%2Fb/exec/extra", 400, ""},
		{"extra segment wrong method", "DELETE", "/api/v1/namespaces/ci/pods/x/exec/extra", 400, ""},

		// Canonical, wrong method: 405.
		{"PUT exec", "PUT", "/api/v1/namespaces/ci/pods/x/exec", 405, ""},
		{"DELETE log", "DELETE", "/api/v1/namespaces/ci/pods/x/log", 405, ""},
		{"PATCH attach", "PATCH", "/api/v1/namespaces/ci/pods/x/attach", 405, ""},
		{"HEAD portforward", "HEAD", "/api/v1/namespaces/ci/pods/x/portforward", 405, ""},
		{"OPTIONS exec", "OPTIONS", "/api/v1/namespaces/ci/pods/x/exec", 405, ""},

		// Passed through unchanged.
		{"pod", "GET", "/api/v1/namespaces/ci/pods/x", 200, "/api/v1/namespaces/ci/pods/x"},
		{"pod status", "PATCH", "/api/v1/namespaces/ci/pods/x/status", 200, "/api/v1/namespaces/ci/pods/x/status"},
		{"eviction", "POST", "/api/v1/namespaces/ci/pods/x/eviction", 200, "/api/v1/namespaces/ci/pods/x/eviction"},
		{"binding", "POST", "/api/v1/namespaces/ci/pods/x/binding", 200, "/api/v1/namespaces/ci/pods/x/binding"},
		{"ephemeralcontainers read", "GET", "/api/v1/namespaces/ci/pods/x/ephemeralcontainers", 200, "/api/v1/namespaces/ci/pods/x/ephemeralcontainers"},
		{"resize", "PATCH", "/api/v1/namespaces/ci/pods/x/resize", 200, "/api/v1/namespaces/ci/pods/x/resize"},
		{"service proxy", "GET", "/api/v1/namespaces/ci/services/https:svc:443/proxy/ws?x=1", 200, "/api/v1/namespaces/ci/services/https:svc:443/proxy/ws?x=1"},
		{"pods watch list", "GET", "/api/v1/namespaces/ci/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&fieldSelector=status.phase%3DRunning%2Cmetadata.name%3Djob-42",
			200, "/api/v1/namespaces/ci/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&fieldSelector=status.phase%3DRunning%2Cmetadata.name%3Djob-42"},
		{"encoded configmap name kept", "GET", "/api/v1/namespaces/ci/configmaps/a%2Fb", 200, "/api/v1/namespaces/ci/configmaps/a%2Fb"},
		{"discovery", "GET", "/apis?timeout=32s", 200, "/apis?timeout=32s"},
		{"version", "GET", "/version", 200, "/version"},
		{"openapi", "GET", "/openapi/v3/api/v1?hash=ABC", 200, "/openapi/v3/api/v1?hash=ABC"},
		{"ssar", "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", 200, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"},
		{"exec of a non-pod resource", "POST", "/api/v1/namespaces/ci/services/x/exec", 200, "/api/v1/namespaces/ci/services/x/exec"},
		{"upper case subresource is not exec", "POST", "/api/v1/namespaces/ci/pods/x/EXEC", 200, "/api/v1/namespaces/ci/pods/x/EXEC"},
		{"root", "GET", "/", 200, "/"},
		{"karmada's own cluster proxy", "GET", "/apis/cluster.karmada.io/v1alpha1/clusters/member1/proxy/api/v1/namespaces/ci/pods/x/log",
			200, "/apis/cluster.karmada.io/v1alpha1/clusters/member1/proxy/api/v1/namespaces/ci/pods/x/log"},
		{"a path starting clustersx", "GET", "/clustersx/member2/api", 200, "/clustersx/member2/api"},

		// Under a server URL pinning a member cluster: the rewritten
		// routes go to that member, everything else to karmada-apiserver
		// without the prefix.
		{"pinned exec", "POST", "/clusters/member2/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdin=true",
			200, karmada.ClusterProxyPath("member2", "/api/v1/namespaces/ci/pods/job-42/exec") + "?command=sh&stdin=true"},
		{"pinned log", "GET", "/clusters/member2/api/v1/namespaces/ci/pods/p/log?follow=true",
			200, karmada.ClusterProxyPath("member2", "/api/v1/namespaces/ci/pods/p/log") + "?follow=true"},
		{"pinned pod proxy", "GET", "/clusters/member2/api/v1/namespaces/ci/pods/x:8080/proxy/a%2Fb",
			200, karmada.ClusterProxyPath("member2", "/api/v1/namespaces/ci/pods/x:8080/proxy") + "/a%2Fb"},
		{"pinned pod", "GET", "/clusters/member2/api/v1/namespaces/ci/pods/x", 200, "/api/v1/namespaces/ci/pods/x"},
		{"pinned discovery", "GET", "/clusters/member2/apis?timeout=32s", 200, "/apis?timeout=32s"},
		{"pinned encoded configmap name kept", "GET", "/clusters/member2/api/v1/namespaces/ci/configmaps/a%2Fb", 200, "/api/v1/namespaces/ci/configmaps/a%2Fb"},
		{"pinned root", "GET", "/clusters/member2", 200, "/"},
		{"pinned root slash", "GET", "/clusters/member2/", 200, "/"},
		{"pinned non-canonical exec", "POST", "/clusters/member2/api/v1/namespaces/ci/pods/a%2Fb/exec", 400, ""},
		{"pinned exec wrong method", "PUT", "/clusters/member2/api/v1/namespaces/ci/pods/x/exec", 405, ""},
		{"pinned double slash to exec", "POST", "/clusters/member2//api/v1/namespaces/ci/pods/x/exec", 400, ""},
		{"pinned upper case cluster", "GET", "/clusters/Member2/api", 400, ""},
		{"pinned cluster with dot", "GET", "/clusters/member.2/api", 400, ""},
		{"pinned encoded cluster", "GET", "/clusters/%6dember2/api", 400, ""},
		{"pinned empty cluster", "GET", "/clusters//api", 400, ""},
		{"pinned prefix alone", "GET", "/clusters", 400, ""},
		{"pinned dot dot cluster", "POST", "/clusters/../api/v1/namespaces/ci/pods/x/exec", 400, ""},
		{"pinned twice", "POST", "/clusters/member2/clusters/member1/api/v1/namespaces/ci/pods/x/exec", 400, ""},
		{"pinned after dot segment", "GET", "/./clusters/member2/api", 400, ""},
		{"pinned after double slash", "GET", "//clusters/member2/api", 400, ""},
		{"pinned behind dot dot", "POST", "/api/../clusters/member2/api/v1/namespaces/ci/pods/x/exec", 400, ""},
		{"pinned encoded prefix", "GET", "/%63lusters/member2/api", 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &proxytest.RecordingUpstream{}
			srv := httptest.NewServer(up)
			defer srv.Close()
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}})

			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, tt.method, tt.target, nil, ""))

			reqs := up.Requests()
			if rec.Code != tt.wantCode {
				t.Fatalf("code = %d, want %d; body %s", rec.Code, tt.wantCode, rec.Body)
			}
			if tt.wantCode != http.StatusOK {
				if len(reqs) != 0 {
					t.Fatalf("rejected request reached the upstream: %+v", reqs)
				}
				st := proxytest.DecodeStatus(t, rec.Header().Get("Content-Type"), rec.Body.Bytes())
				if int(st.Code) != tt.wantCode {
					t.Fatalf("Status code = %d, want %d", st.Code, tt.wantCode)
				}
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("upstream got %d requests, want 1", len(reqs))
			}
			got := reqs[0]
			if got.RequestURI != tt.wantURI {
				t.Errorf("upstream request URI\n got %q\nwant %q", got.RequestURI, tt.wantURI)
			}
			if got.Method != tt.method {
				t.Errorf("method = %q, want %q", got.Method, tt.method)
			}
			if want := strings.TrimPrefix(srv.URL, "http://"); got.Host != want {
				t.Errorf("Host = %q, want upstream host %q", got.Host, want)
			}
		})
	}
}

// TestRewriteSetsPathAndRawPath checks the outbound URL fields, not only the
// bytes on the wire.
func TestRewriteSetsPathAndRawPath(t *testing.T) {
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: "http://127.0.0.1:1/prefix/"}})
	got := recordUpstream(p)

	for _, tc := range []struct{ target, path, rawPath, query string }{
		{"/api/v1/namespaces/ci/pods/p/exec?command=a%2Fb&x=;", "/prefix" + karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/pods/p/exec"), "", "command=a%2Fb&x=;"},
		{"/api/v1/namespaces/ci/configmaps/a%2Fb?q=1", "/prefix/api/v1/namespaces/ci/configmaps/a/b", "/prefix/api/v1/namespaces/ci/configmaps/a%2Fb", "q=1"},
	} {
		got.requests = nil
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, proxytest.RawRequest(t, "POST", tc.target, nil, ""))
		if len(got.requests) != 1 {
			t.Fatalf("%s: %d upstream requests; code %d %s", tc.target, len(got.requests), rec.Code, rec.Body)
		}
		u := got.requests[0].URL
		if u.Path != tc.path || u.RawPath != tc.rawPath || u.RawQuery != tc.query {
			t.Errorf("%s: got Path %q RawPath %q RawQuery %q, want %q %q %q", tc.target, u.Path, u.RawPath, u.RawQuery, tc.path, tc.rawPath, tc.query)
		}
		if u.Host != "127.0.0.1:1" || got.requests[0].Host != "" {
			t.Errorf("%s: URL host %q, Host %q", tc.target, u.Host, got.requests[0].Host)
		}
	}
}

// knowingResolver is the test resolver, knowing Karmada's member clusters
// as *resolver.Resolver does.
type knowingResolver struct {
	proxytest.Resolver
	clusters []string
}

func (r *knowingResolver) ClusterKnown(name string) bool { return slices.Contains(r.clusters, name) }

// TestPinnedUnknownClusterIs404: a server URL pinning a cluster Karmada
// does not have gets a 404 Status naming it on every route, passthrough
// included, and nothing goes upstream; a known one is served.
func TestPinnedUnknownClusterIs404(t *testing.T) {
	for _, tt := range []struct {
		name, method, target string
		wantCode             int
	}{
		{"passthrough", "GET", "/clusters/member3/api/v1/namespaces/ci/pods/x", http.StatusNotFound},
		{"discovery", "GET", "/clusters/member3/apis", http.StatusNotFound},
		{"exec", "POST", "/clusters/member3/api/v1/namespaces/ci/pods/x/exec?command=sh", http.StatusNotFound},
		{"known", "GET", "/clusters/member2/api/v1/namespaces/ci/pods/x", http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := &proxytest.RecordingUpstream{}
			srv := httptest.NewServer(up)
			defer srv.Close()
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL},
				Resolver: &knowingResolver{Resolver: proxytest.Resolver{Cluster: "member2"}, clusters: []string{"member1", "member2"}}})
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, tt.method, tt.target, nil, ""))
			if rec.Code != tt.wantCode {
				t.Fatalf("code = %d, want %d; body %s", rec.Code, tt.wantCode, rec.Body)
			}
			if tt.wantCode == http.StatusOK {
				return
			}
			if reqs := up.Requests(); len(reqs) != 0 {
				t.Fatalf("a request for an unknown cluster reached the upstream: %+v", reqs)
			}
			st := proxytest.DecodeStatus(t, rec.Header().Get("Content-Type"), rec.Body.Bytes())
			if st.Reason != metav1.StatusReasonNotFound || !strings.Contains(st.Message, `"member3"`) {
				t.Fatalf("Status %+v, want NotFound naming member3", st)
			}
		})
	}
}
