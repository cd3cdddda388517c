package proxy

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

func TestServiceProxyRouting(t *testing.T) {
	svc := func(seg, rest string) string {
		return karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/services/"+seg+"/proxy") + rest
	}
	tests := []struct {
		name, method, target string
		wantCode             int
		wantURI              string
		wantService          string // what the resolver was asked for
	}{
		{"name only", "GET", "/api/v1/namespaces/ci/services/web/proxy", 200, svc("web", ""), "ci/web"},
		{"trailing slash kept", "GET", "/api/v1/namespaces/ci/services/web/proxy/", 200, svc("web", "/"), "ci/web"},
		{"name and port number", "GET", "/api/v1/namespaces/ci/services/web:8080/proxy/a/b?x=1", 200, svc("web:8080", "/a/b?x=1"), "ci/web"},
		{"name and port name", "POST", "/api/v1/namespaces/ci/services/web:http-alt/proxy/x", 200, svc("web:http-alt", "/x"), "ci/web"},
		{"scheme name port", "GET", "/api/v1/namespaces/ci/services/https:svc:443/proxy/ws?x=1", 200, svc("https:svc:443", "/ws?x=1"), "ci/svc"},
		{"scheme name empty port", "GET", "/api/v1/namespaces/ci/services/https:dash:/proxy/", 200, svc("https:dash:", "/"), "ci/dash"},
		{"escaped rest and odd query kept", "PUT", "/api/v1/namespaces/ci/services/web/proxy/a%2Fb/%E2%9C%93?q=%zz;x&&=v",
			200, svc("web", "/a%2Fb/%E2%9C%93?q=%zz;x&&=v"), "ci/web"},
		{"rest looking like a pod exec", "POST", "/api/v1/namespaces/ci/services/web/proxy/api/v1/namespaces/ci/pods/x/exec",
			200, svc("web", "/api/v1/namespaces/ci/pods/x/exec"), "ci/web"},
		{"DELETE", "DELETE", "/api/v1/namespaces/ci/services/web/proxy/item/1", 200, svc("web", "/item/1"), "ci/web"},
		{"PATCH", "PATCH", "/api/v1/namespaces/ci/services/web/proxy/item/1", 200, svc("web", "/item/1"), "ci/web"},

		{"encoded service name", "GET", "/api/v1/namespaces/ci/services/w%65b/proxy/", 400, "", ""},
		{"encoded colon", "GET", "/api/v1/namespaces/ci/services/http%3Aweb%3A80/proxy/", 400, "", ""},
		{"encoded namespace", "GET", "/api/v1/namespaces/c%69/services/web/proxy/", 400, "", ""},
		{"encoded proxy", "GET", "/api/v1/namespaces/ci/services/web/pr%6fxy/", 400, "", ""},
		{"bad scheme", "GET", "/api/v1/namespaces/ci/services/ftp:web:21/proxy/", 400, "", ""},
		{"too many parts", "GET", "/api/v1/namespaces/ci/services/http:web:80:1/proxy/", 400, "", ""},
		{"empty port in name:port", "GET", "/api/v1/namespaces/ci/services/web:/proxy/", 400, "", ""},
		{"port out of range", "GET", "/api/v1/namespaces/ci/services/web:65536/proxy/", 400, "", ""},
		{"port zero", "GET", "/api/v1/namespaces/ci/services/web:0/proxy/", 400, "", ""},
		{"port leading zero", "GET", "/api/v1/namespaces/ci/services/web:080/proxy/", 400, "", ""},
		{"bad port name", "GET", "/api/v1/namespaces/ci/services/web:-http/proxy/", 400, "", ""},
		{"name with dot is not DNS-1035", "GET", "/api/v1/namespaces/ci/services/a.b/proxy/", 400, "", ""},
		{"name starting with digit", "GET", "/api/v1/namespaces/ci/services/1web/proxy/", 400, "", ""},
		{"upper case name", "GET", "/api/v1/namespaces/ci/services/Web/proxy/", 400, "", ""},
		{"empty name", "GET", "/api/v1/namespaces/ci/services//proxy/", 400, "", ""},
		{"dot dot name", "GET", "/api/v1/namespaces/ci/services/../proxy/", 400, "", ""},
		{"dot segment before", "GET", "/api/v1/./namespaces/ci/services/web/proxy/", 400, "", ""},
		{"double slash before", "GET", "//api/v1/namespaces/ci/services/web/proxy/", 400, "", ""},
		{"dot dot in rest", "GET", "/api/v1/namespaces/ci/services/web/proxy/../../other/proxy/", 400, "", ""},
		{"encoded dot dot in rest", "GET", "/api/v1/namespaces/ci/services/web/proxy/%2e%2e/x", 400, "", ""},
		{"dot dot behind encoded slash", "GET", "/api/v1/namespaces/ci/services/web/proxy/a%2F..%2Fb", 400, "", ""},
		{"dot in rest", "GET", "/api/v1/namespaces/ci/services/web/proxy/./x", 400, "", ""},

		{"services list passes through", "GET", "/api/v1/namespaces/ci/services", 200, "/api/v1/namespaces/ci/services", ""},
		{"service get passes through", "GET", "/api/v1/namespaces/ci/services/web", 200, "/api/v1/namespaces/ci/services/web", ""},
		{"service status passes through", "GET", "/api/v1/namespaces/ci/services/web/status", 200, "/api/v1/namespaces/ci/services/web/status", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &proxytest.RecordingUpstream{}
			srv := httptest.NewServer(up)
			defer srv.Close()
			sres := &proxytest.Resolver{Cluster: proxytest.Cluster}
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}, ServiceResolver: sres})

			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, tt.method, tt.target, nil, ""))
			reqs := up.Requests()
			if rec.Code != tt.wantCode {
				t.Fatalf("code = %d, want %d; body %s", rec.Code, tt.wantCode, rec.Body)
			}
			calls := sres.Called()
			if tt.wantService == "" && len(calls) != 0 || tt.wantService != "" && (len(calls) != 1 || calls[0] != tt.wantService) {
				t.Errorf("resolver calls %q, want %q", calls, tt.wantService)
			}
			if tt.wantCode != http.StatusOK {
				if len(reqs) != 0 {
					t.Fatalf("rejected request reached the upstream: %+v", reqs)
				}
				if st := proxytest.DecodeStatus(t, rec.Header().Get("Content-Type"), rec.Body.Bytes()); int(st.Code) != tt.wantCode {
					t.Fatalf("Status code = %d, want %d", st.Code, tt.wantCode)
				}
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("upstream got %d requests, want 1", len(reqs))
			}
			if reqs[0].RequestURI != tt.wantURI {
				t.Errorf("upstream request URI\n got %q\nwant %q", reqs[0].RequestURI, tt.wantURI)
			}
			if reqs[0].Method != tt.method {
				t.Errorf("method = %q, want %q", reqs[0].Method, tt.method)
			}
		})
	}
}

func TestServiceProxyResolverErrorIsTheStatus(t *testing.T) {
	up := &proxytest.RecordingUpstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	for _, tc := range []struct {
		err  error
		code int
	}{
		{apierrors.NewNotFound(servicesResource, "web"), 404},
		{apierrors.NewConflict(servicesResource, "web", nil), 409},
		{apierrors.NewServiceUnavailable("cluster member1 is not ready"), 503},
	} {
		p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}, ServiceResolver: &proxytest.Resolver{Err: tc.err}})
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, proxytest.RawRequest(t, "GET", "/api/v1/namespaces/ci/services/web/proxy/", nil, ""))
		st := proxytest.DecodeStatus(t, rec.Header().Get("Content-Type"), rec.Body.Bytes())
		if rec.Code != tc.code || int(st.Code) != tc.code {
			t.Errorf("%v: code %d, Status %d, want %d", tc.err, rec.Code, st.Code, tc.code)
		}
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}

func TestServiceProxyInvalidClusterNameIsRefused(t *testing.T) {
	up := &proxytest.RecordingUpstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}, ServiceResolver: &proxytest.Resolver{Cluster: "a/b"}})
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, proxytest.RawRequest(t, "GET", "/api/v1/namespaces/ci/services/web/proxy/", nil, ""))
	if rec.Code != http.StatusInternalServerError || len(up.Requests()) != 0 {
		t.Fatalf("code %d, %d upstream requests", rec.Code, len(up.Requests()))
	}
}

// proxyRoutes are the two {name}/proxy routes the authorize-mode and
// upgrade tests run on: the same target shape, and how the test learns what
// its resolver was asked.
var proxyRoutes = []struct {
	resource string
	// calls returns the resolver calls of the route's resource.
	calls func(env *authorizeEnv) []string
}{
	{"services", func(env *authorizeEnv) []string { return env.svc.Called() }},
	{"pods", func(env *authorizeEnv) []string { return env.res.Called() }},
}

// TestProxySubresourceAuthorizeMode: pods/proxy and services/proxy are
// authorized as kube-apiserver would (verb from the method, the whole {name}
// segment as the name), then sent with the gateway's identity and no client
// identity header.
func TestProxySubresourceAuthorizeMode(t *testing.T) {
	tests := []struct {
		method, verb string
		upgrade      bool
	}{
		{method: "GET", verb: "get"},
		{method: "HEAD", verb: "get"},
		{method: "POST", verb: "create"},
		{method: "PUT", verb: "update"},
		{method: "PATCH", verb: "patch"},
		{method: "DELETE", verb: "delete"},
		// Unlike pods/exec, a WebSocket GET stays get: kube-apiserver's
		// create check on upgrades is for pod streams only.
		{method: "GET", verb: "get", upgrade: true},
	}
	for _, route := range proxyRoutes {
		target := "/api/v1/namespaces/ci/" + route.resource + "/https:web:443/proxy/a%2Fb?x=1"
		wantURI := karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/"+route.resource+"/https:web:443/proxy") + "/a%2Fb?x=1"
		for _, tt := range tests {
			name := route.resource + " " + tt.method
			if tt.upgrade {
				name += " upgraded"
			}
			t.Run(name, func(t *testing.T) {
				env := newAuthorizeEnv(t, &proxytest.Authorizer{Caller: identity.Caller{Name: "alice", Groups: []string{"dev"}}})
				header := append([][2]string(nil), forgedIdentity...)
				want := http.StatusOK
				if tt.upgrade {
					header = append(header, [2]string{"Connection", "Upgrade"}, [2]string{"Upgrade", "SPDY/3.1"})
					want = http.StatusSwitchingProtocols
				}
				c := env.dial(t, nil)
				resp := c.send(t, tt.method, target, header)
				if resp.StatusCode != want {
					body, _ := io.ReadAll(resp.Body)
					t.Fatalf("status %d %s, want %d", resp.StatusCode, body, want)
				}
				wantRR := []identity.ResourceRequest{{Namespace: "ci", Verb: tt.verb, Resource: route.resource, Subresource: "proxy", Name: "https:web:443"}}
				if !reflect.DeepEqual(env.authz.Authorized(), wantRR) {
					t.Errorf("authorized %+v, want %+v", env.authz.Authorized(), wantRR)
				}
				if calls := route.calls(env); !reflect.DeepEqual(calls, []string{"ci/web"}) {
					t.Errorf("resolver calls %q, want ci/web", calls)
				}
				got := env.sent(t, c, resp, tt.upgrade)
				if !tt.upgrade && (got.Method != tt.method || got.RequestURI != wantURI) {
					t.Errorf("upstream %s %s, want %s %s", got.Method, got.RequestURI, tt.method, wantURI)
				}
				assertGatewayIdentityOnly(t, got.Header)
			})
		}
	}
}

// TestProxySubresourceAuthorizeModeRefusals: a refused pods/proxy or
// services/proxy request gets the Authorizer's Status (or 405 for a method
// with no RBAC verb), is never resolved, so placement is not disclosed, and
// never sent upstream.
func TestProxySubresourceAuthorizeModeRefusals(t *testing.T) {
	for _, route := range proxyRoutes {
		forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: route.resource}, "https:web:443",
			errors.New(`User "bob" cannot get resource "`+route.resource+`/proxy" in API group "" in the namespace "ci"`))
		notAllowed := func(method string) string {
			return `method "` + method + `" is not supported on ` + route.resource + `/proxy in authorize mode (allowed: GET, HEAD, POST, PUT, PATCH, DELETE)`
		}
		tests := []struct {
			name, method   string
			authz          *proxytest.Authorizer
			wantCode       int
			wantMsg        string
			wantAuthorized int
		}{
			{name: "denied", method: "GET", authz: &proxytest.Authorizer{Deny: forbidden},
				wantCode: http.StatusForbidden, wantMsg: forbidden.Error(), wantAuthorized: 1},
			{name: "unauthenticated", method: "POST", authz: &proxytest.Authorizer{Deny: apierrors.NewUnauthorized("Unauthorized")},
				wantCode: http.StatusUnauthorized, wantMsg: "Unauthorized", wantAuthorized: 1},
			{name: "OPTIONS has no RBAC verb", method: "OPTIONS", authz: &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}},
				wantCode: http.StatusMethodNotAllowed, wantMsg: notAllowed("OPTIONS")},
			{name: "unknown method", method: "PROPFIND", authz: &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}},
				wantCode: http.StatusMethodNotAllowed, wantMsg: notAllowed("PROPFIND")},
		}
		for _, tt := range tests {
			t.Run(route.resource+" "+tt.name, func(t *testing.T) {
				env := newAuthorizeEnv(t, tt.authz)
				c := env.dial(t, nil)
				resp := c.send(t, tt.method, "/api/v1/namespaces/ci/"+route.resource+"/https:web:443/proxy/", [][2]string{{"Authorization", "Bearer caller-token"}})
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != tt.wantCode {
					t.Fatalf("status %d %s, want %d", resp.StatusCode, body, tt.wantCode)
				}
				if st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body); int(st.Code) != tt.wantCode || st.Message != tt.wantMsg {
					t.Errorf("Status %d %q, want %d %q", st.Code, st.Message, tt.wantCode, tt.wantMsg)
				}
				if tt.wantCode == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != identity.ProxyMethods {
					t.Errorf("Allow %q, want %q", resp.Header.Get("Allow"), identity.ProxyMethods)
				}
				if n := len(env.authz.Authorized()); n != tt.wantAuthorized {
					t.Errorf("Authorizer asked %d times, want %d", n, tt.wantAuthorized)
				}
				if calls := route.calls(env); len(calls) != 0 {
					t.Errorf("refused request was resolved: %q", calls)
				}
				if n := len(env.up.Requests()); n != 0 {
					t.Errorf("refused request reached the upstream %d times", n)
				}
			})
		}
	}
}

// TestProxySubresourceWebSocketUpgrade: the WebSocket form of pods/proxy
// and services/proxy reaches the member's proxy as an upgrade, rest and
// query unchanged, and bytes flow both ways.
func TestProxySubresourceWebSocketUpgrade(t *testing.T) {
	for _, resource := range []string{"services", "pods"} {
		t.Run(resource, func(t *testing.T) {
			hellos := &helloRecorder{}
			echo := newEchoUpgrader(t, "websocket")
			echo.hellos = hellos
			upstream := httptest.NewUnstartedServer(echo)
			upstream.TLS = hellos.config()
			upstream.EnableHTTP2 = true
			upstream.StartTLS()
			t.Cleanup(upstream.Close)
			p := newTestProxy(t, Options{Upstream: tlsUpstreamConfig(upstream), ServiceResolver: &proxytest.Resolver{Cluster: proxytest.Cluster}})
			gw := httptest.NewUnstartedServer(p)
			gw.StartTLS()
			t.Cleanup(gw.Close)

			c := dialGateway(t, gw)
			resp := c.send(t, "GET", "/api/v1/namespaces/ci/"+resource+"/http:web:8080/proxy/session/ws?x=1", websocketRequest)
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status %d", resp.StatusCode)
			}
			<-echo.opened
			c.echo(t, "hello through the "+resource+" proxy")
			hs := echo.requestHeaders()
			if len(hs) != 1 || hs[0].Get("Upgrade") != "websocket" || hs[0].Get("Sec-WebSocket-Key") == "" {
				t.Fatalf("upstream headers %v", hs)
			}
			wantURI := karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/"+resource+"/http:web:8080/proxy") + "/session/ws?x=1"
			if uris := echo.requestURIs(); len(uris) != 1 || uris[0] != wantURI {
				t.Errorf("upstream request URIs %q, want %q", uris, wantURI)
			}
		})
	}
}
