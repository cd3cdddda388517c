package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// TestHostilePaths adds to TestRouting the path tricks it does not cover:
// names far over the limits, unicode, pods named like paths, double
// encoding, path parameters, and request-target forms.
func TestHostilePaths(t *testing.T) {
	proxied := func(ns, name, sub string) string {
		return karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/"+ns+"/pods/"+name+"/"+sub)
	}
	tests := []struct {
		name     string
		target   string
		wantCode int
		// wantPath is the decoded path the upstream received, for 200s.
		wantPath string
	}{
		// Over the limits: refused, never truncated or hashed into a valid name.
		{"name of 254 bytes in labels", "/api/v1/namespaces/ci/pods/" + strings.Repeat("a.", 127) + "/exec", 400, ""},
		{"name of 4 KiB", "/api/v1/namespaces/ci/pods/" + strings.Repeat("a", 4096) + "/exec", 400, ""},
		{"name of 64 KiB", "/api/v1/namespaces/ci/pods/" + strings.Repeat("b", 64<<10) + "/log", 400, ""},
		{"namespace of 4 KiB", "/api/v1/namespaces/" + strings.Repeat("n", 4096) + "/pods/x/attach", 400, ""},

		// Unicode: never a DNS name, whatever it looks like.
		{"raw UTF-8 name", "/api/v1/namespaces/ci/pods/caf\xc3\xa9/exec", 400, ""},
		{"percent-encoded UTF-8 name", "/api/v1/namespaces/ci/pods/caf%C3%A9/exec", 400, ""},
		{"raw UTF-8 namespace", "/api/v1/namespaces/\xe2\x98\x83/pods/x/exec", 400, ""},
		{"NUL in name", "/api/v1/namespaces/ci/pods/x%00/exec", 400, ""},
		{"fullwidth dots and solidus pass through unrewritten", "/api/v1/namespaces/ci/pods/x\xef\xbc\x8f\xef\xbc\x8e\xef\xbc\x8e\xef\xbc\x8fexec", 200,
			"/api/v1/namespaces/ci/pods/x\uff0f\uff0e\uff0e\uff0fexec"},
		{"overlong UTF-8 slash passes through unrewritten", "/api/v1/namespaces/ci/pods/x%C0%AFexec", 200, "/api/v1/namespaces/ci/pods/x\xc0\xafexec"},

		// A pod named like a path.
		{"name is an encoded path to another namespace", "/api/v1/namespaces/ci/pods/..%2F..%2Fkube-system%2Fpods%2Fetcd/exec", 400, ""},
		{"name is an encoded absolute path", "/api/v1/namespaces/ci/pods/%2Fapi%2Fv1%2Fnamespaces%2Fkube-system%2Fpods%2Fetcd/exec", 400, ""},
		{"subresource hides a path back to exec", "/api/v1/namespaces/ci/pods/x/exec%2F..%2F..%2Fy%2Fexec", 400, ""},
		{"double-encoded slash", "/api/v1/namespaces/ci/pods/a%252Fb/exec", 400, ""},
		{"double-encoded dot dot", "/api/v1/namespaces/ci/pods/%252e%252e/exec", 400, ""},
		{"path parameter in name", "/api/v1/namespaces/ci/pods/x;y=../../z/exec", 400, ""},
		{"pod named exec", "/api/v1/namespaces/ci/pods/exec/exec", 200, proxied("ci", "exec", "exec")},
		{"pod named log, attach", "/api/v1/namespaces/ci/pods/log/attach", 200, proxied("ci", "log", "attach")},
		{"namespace named pods, pod named namespaces", "/api/v1/namespaces/pods/pods/namespaces/portforward", 200, proxied("pods", "namespaces", "portforward")},
		{"pod named like a domain", "/api/v1/namespaces/ci/pods/api.v1.namespaces/log", 200, proxied("ci", "api.v1.namespaces", "log")},
		{"path parameter on subresource passes through unrewritten", "/api/v1/namespaces/ci/pods/x/exec;jsessionid=1", 200, "/api/v1/namespaces/ci/pods/x/exec;jsessionid=1"},
		{"backslashes pass through unrewritten", "/api/v1/namespaces/ci/pods/x\\..\\exec", 200, "/api/v1/namespaces/ci/pods/x\\..\\exec"},

		// Request-target forms: the gateway only ever talks to its upstream.
		{"absolute-form target cannot choose the host", "http://attacker.invalid/api/v1/namespaces/ci/pods/x/exec", 200, proxied("ci", "x", "exec")},
		{"absolute-form passthrough", "http://attacker.invalid/api/v1/secrets", 200, "/api/v1/secrets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &proxytest.RecordingUpstream{}
			srv := httptest.NewServer(up)
			defer srv.Close()
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}})

			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, "POST", tt.target, nil, ""))
			reqs := up.Requests()
			if rec.Code != tt.wantCode {
				t.Fatalf("code = %d, want %d; body %.300s", rec.Code, tt.wantCode, rec.Body)
			}
			if tt.wantCode != http.StatusOK {
				if len(reqs) != 0 {
					t.Fatalf("refused request reached the upstream: %.300s", reqs[0].RequestURI)
				}
				st := proxytest.DecodeStatus(t, rec.Header().Get("Content-Type"), rec.Body.Bytes())
				if int(st.Code) != tt.wantCode {
					t.Fatalf("Status code %d", st.Code)
				}
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("upstream got %d requests", len(reqs))
			}
			if reqs[0].Path != tt.wantPath {
				t.Errorf("upstream path %q, want %q", reqs[0].Path, tt.wantPath)
			}
			if want := strings.TrimPrefix(srv.URL, "http://"); reqs[0].Host != want {
				t.Errorf("upstream Host %q, want %q", reqs[0].Host, want)
			}
		})
	}
}

// authorizeEnv is a TLS gateway in authorize mode in front of a TLS upstream
// that records plain requests and switches upgrades.
type authorizeEnv struct {
	proxy *Proxy
	gw    *httptest.Server
	up    *proxytest.RecordingUpstream
	echo  *echoUpgrader
	authz *proxytest.Authorizer
	res   *proxytest.Resolver
	svc   *proxytest.Resolver
}

func newAuthorizeEnv(t *testing.T, authz *proxytest.Authorizer) *authorizeEnv {
	t.Helper()
	env := &authorizeEnv{
		up: &proxytest.RecordingUpstream{}, echo: newEchoUpgrader(t, "SPDY/3.1"), authz: authz,
		res: &proxytest.Resolver{Cluster: proxytest.Cluster}, svc: &proxytest.Resolver{Cluster: proxytest.Cluster},
	}
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			env.echo.ServeHTTP(w, r)
			return
		}
		env.up.ServeHTTP(w, r)
	}))
	upstream.StartTLS()
	t.Cleanup(upstream.Close)
	cfg := tlsUpstreamConfig(upstream)
	cfg.BearerToken = "gateway-token"
	env.proxy = newTestProxy(t, Options{Upstream: cfg, AuthMode: AuthAuthorize, Authorizer: authz, Resolver: env.res, ServiceResolver: env.svc})
	env.gw = httptest.NewUnstartedServer(env.proxy)
	env.gw.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	env.gw.StartTLS()
	t.Cleanup(env.gw.Close)
	return env
}

// dial opens a raw HTTP/1.1 client connection, presenting cert if given.
func (env *authorizeEnv) dial(t *testing.T, cert *tls.Certificate) *rawClient {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(env.gw.Certificate())
	cfg := &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := tls.Dial("tcp", env.gw.Listener.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{conn: conn, br: bufio.NewReader(conn)}
}

// sent is what the upstream received of the one request c made: for an
// upgrade only the headers, once bytes went both ways through the tunnel;
// otherwise the whole recorded request.
func (env *authorizeEnv) sent(t *testing.T, c *rawClient, resp *http.Response, upgrade bool) proxytest.Recorded {
	t.Helper()
	if upgrade {
		c.echo(t, "x")
		return proxytest.Recorded{Header: env.echo.requestHeaders()[0]}
	}
	_, _ = io.ReadAll(resp.Body)
	reqs := env.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	return reqs[0]
}

// forgedIdentity is every way a client might try to claim an identity
// upstream, in the spellings a raw client can send.
var forgedIdentity = [][2]string{
	{"Authorization", "Bearer caller-token"},
	{"impersonate-user", "admin"},
	{"IMPERSONATE-GROUP", "system:masters"},
	{"Impersonate-Group", "system:nodes"},
	{"Impersonate-Uid", "0"},
	{"impersonate-extra-scopes", "all"},
	{"Impersonate-Extra-Authentication.kubernetes.io%2Fcredential-id", "X509SHA256=forged"},
	{"x-remote-user", "admin"},
	{"X-REMOTE-GROUP", "system:masters"},
	{"X-Remote-Uid", "0"},
	{"x-remote-extra-scopes", "all"},
}

func assertGatewayIdentityOnly(t *testing.T, h http.Header) {
	t.Helper()
	for k, v := range h {
		if strings.HasPrefix(k, "Impersonate-") || strings.HasPrefix(k, "X-Remote-") {
			t.Errorf("forged identity header %s: %q reached the upstream", k, v)
		}
	}
	if got := h.Values("Authorization"); !reflect.DeepEqual(got, []string{"Bearer gateway-token"}) {
		t.Errorf("Authorization %q, want only the gateway's", got)
	}
}

func TestForgedIdentityHeadersOnRewrittenRoutes(t *testing.T) {
	caller := identity.Caller{Name: "alice", Groups: []string{"dev", "system:authenticated"}}
	for _, sub := range podSubresources {
		for _, upgrade := range []bool{false, true} {
			name := sub
			if upgrade {
				name += " upgraded"
			}
			t.Run(name, func(t *testing.T) {
				env := newAuthorizeEnv(t, &proxytest.Authorizer{Caller: caller})
				header := append([][2]string(nil), forgedIdentity...)
				// Listing identity headers as hop-by-hop must not make the
				// gateway drop its own credentials either.
				connection := "Authorization, Impersonate-User, X-Remote-User"
				if upgrade {
					connection = "Upgrade, " + connection
					header = append(header, [2]string{"Upgrade", "SPDY/3.1"})
				}
				header = append(header, [2]string{"Connection", connection})
				method := "POST"
				if sub == "log" {
					method = "GET" // kube-apiserver serves no POST pods/log
				}
				c := env.dial(t, nil)
				resp := c.send(t, method, "/api/v1/namespaces/ci/pods/p/"+sub+"?x=1", header)
				want := http.StatusOK
				if upgrade {
					want = http.StatusSwitchingProtocols
				}
				if resp.StatusCode != want {
					body, _ := io.ReadAll(resp.Body)
					t.Fatalf("status %d %s, want %d", resp.StatusCode, body, want)
				}
				got := env.sent(t, c, resp, upgrade)
				if !upgrade && got.Path != karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/pods/p/"+sub) {
					t.Errorf("path %q", got.Path)
				}
				assertGatewayIdentityOnly(t, got.Header)
			})
		}
	}
}

// TestForgedConnectionCannotDropImpersonation: an x509 caller on a
// passthrough route is sent with the gateway's identity impersonating them.
// If a client could list Impersonate-User as hop-by-hop and have it removed
// after the gateway set it, it would act as the gateway itself.
func TestForgedConnectionCannotDropImpersonation(t *testing.T) {
	env := newAuthorizeEnv(t, &proxytest.Authorizer{Caller: identity.Caller{Name: "alice", Groups: []string{"dev"}}})
	cert := clientCertificate(t)
	c := env.dial(t, &cert)
	header := append([][2]string(nil), forgedIdentity[1:]...) // no bearer: the certificate is the credential
	header = append(header, [2]string{"Connection", "Impersonate-User, Impersonate-Group, Authorization, keep-alive"})
	resp := c.send(t, "GET", "/api/v1/namespaces/ci/secrets", header)
	_, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := env.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	got := reqs[0].Header
	if got.Get("Authorization") != "Bearer gateway-token" ||
		!reflect.DeepEqual(got.Values("Impersonate-User"), []string{"alice"}) ||
		!reflect.DeepEqual(got.Values("Impersonate-Group"), []string{"dev"}) {
		t.Errorf("upstream identity: Authorization %q Impersonate-User %q Impersonate-Group %q; want the gateway impersonating alice",
			got.Get("Authorization"), got.Values("Impersonate-User"), got.Values("Impersonate-Group"))
	}
	for k := range got {
		if k != "Impersonate-User" && k != "Impersonate-Group" && (strings.HasPrefix(k, "Impersonate-") || strings.HasPrefix(k, "X-Remote-")) {
			t.Errorf("forged %s reached the upstream", k)
		}
	}
}

// TestClusterComesOnlyFromResolver: in authorize mode the SubjectAccessReview
// is about the pod in karmada-apiserver and the member cluster is the
// Resolver's answer; nothing in the request can choose it.
func TestClusterComesOnlyFromResolver(t *testing.T) {
	env := newAuthorizeEnv(t, &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}})
	c := env.dial(t, nil)
	resp := c.send(t, "POST",
		"/api/v1/namespaces/ci/pods/p/exec?command=sh&cluster=member2&clusterName=member2&labelSelector=cluster.karmada.io%2Fname%3Dmember2",
		[][2]string{
			{"Authorization", "Bearer caller-token"},
			{"X-Cluster", "member2"},
			{"Cluster", "member2"},
			{"X-Karmada-Cluster", "member2"},
			{"Cluster.karmada.io-Name", "member2"},
			{"Forwarded", "host=member2"},
			{"X-Forwarded-Host", "member2"},
		})
	_, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := env.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	if want := karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/pods/p/exec"); reqs[0].Path != want {
		t.Errorf("upstream path %q, want the resolver's cluster %q", reqs[0].Path, want)
	}
	if !reflect.DeepEqual(env.res.Called(), []string{"ci/p"}) {
		t.Errorf("resolver calls %q, want only ci/p", env.res.Called())
	}
	if want := []identity.ResourceRequest{{Namespace: "ci", Verb: "create", Resource: "pods", Subresource: "exec", Name: "p"}}; !reflect.DeepEqual(env.authz.Authorized(), want) {
		t.Errorf("authorized %+v, want the pod request %+v", env.authz.Authorized(), want)
	}

	// Denied: the resolver is never asked, so placement is not disclosed.
	denied := newAuthorizeEnv(t, &proxytest.Authorizer{Deny: apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"}, "p", errors.New("no"))})
	c = denied.dial(t, nil)
	resp = c.send(t, "POST", "/api/v1/namespaces/ci/pods/p/exec", [][2]string{{"Authorization", "Bearer caller-token"}})
	_, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || len(denied.res.Called()) != 0 || len(denied.up.Requests()) != 0 {
		t.Errorf("denied: status %d, resolver calls %q, upstream requests %d", resp.StatusCode, denied.res.Called(), len(denied.up.Requests()))
	}

	// Calling the cluster proxy directly is a passthrough: it carries the
	// caller's own credentials, so karmada-apiserver checks the caller's
	// clusters/proxy permission; the gateway's identity is never lent to it.
	c = env.dial(t, nil)
	direct := karmada.ClusterProxyPath("member2", "/api/v1/namespaces/ci/pods/p/exec")
	resp = c.send(t, "POST", direct, [][2]string{{"Authorization", "Bearer caller-token"}, {"Impersonate-User", "admin"}})
	_, _ = io.ReadAll(resp.Body)
	reqs = env.up.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	if got := reqs[1]; got.Path != direct || got.Header.Get("Authorization") != "Bearer caller-token" || got.Header.Get("Impersonate-User") != "admin" {
		t.Errorf("direct cluster proxy call went as %q with Authorization %q Impersonate-User %q; want the caller's own request unchanged",
			got.Path, got.Header.Get("Authorization"), got.Header.Get("Impersonate-User"))
	}
	if len(env.authz.Authorized()) != 1 || len(env.res.Called()) != 1 {
		t.Errorf("direct cluster proxy call was authorized (%d) or resolved (%d) by the gateway", len(env.authz.Authorized()), len(env.res.Called()))
	}
}

// TestUpgradeOnNonStreamRoutes: an Upgrade on a route the gateway does not
// rewrite goes to karmada-apiserver unchanged (kube-apiserver serves watches
// over WebSocket), and Upgrade without Connection: Upgrade is no upgrade.
func TestUpgradeOnNonStreamRoutes(t *testing.T) {
	up := newEchoUpgrader(t, "websocket")
	var plain []http.Header
	recorded := make(chan struct{}, 4)
	_, gw := newUpgradeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Connection"), "Upgrade") {
			up.ServeHTTP(w, r)
			return
		}
		plain = append(plain, r.Header.Clone())
		recorded <- struct{}{}
		_, _ = io.WriteString(w, "{}")
	}), nil)

	c := dialGateway(t, gw)
	resp := c.send(t, "GET", "/api/v1/namespaces/ci/pods?watch=1", websocketRequest)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("websocket watch: status %d", resp.StatusCode)
	}
	c.echo(t, "event")
	if got := up.requestHeaders(); len(got) != 1 || got[0].Get("Upgrade") != "websocket" {
		t.Fatalf("upstream upgrade requests %v", got)
	}

	c = dialGateway(t, gw)
	resp = c.send(t, "GET", "/version", [][2]string{{"Upgrade", "websocket"}, {"Connection", "keep-alive"}})
	_, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	<-recorded
	if len(plain) != 1 || plain[0].Get("Upgrade") != "" {
		t.Errorf("an Upgrade header without Connection: Upgrade reached the upstream: %v", plain)
	}
}
