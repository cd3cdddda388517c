package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// certRequestingGateway serves p over TLS asking for (not requiring) a
// client certificate, as the gateway does with --client-ca-file, and
// returns a pool that trusts it.
func certRequestingGateway(t *testing.T, p *Proxy) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	gw := httptest.NewUnstartedServer(p)
	gw.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	gw.StartTLS()
	t.Cleanup(gw.Close)
	pool := x509.NewCertPool()
	pool.AddCert(gw.Certificate())
	return gw, pool
}

func clientCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice", Organization: []string{"dev"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestAuthorizeMode(t *testing.T) {
	forged := http.Header{
		"Authorization":             {"Bearer caller-token"},
		"Impersonate-User":          {"admin"},
		"Impersonate-Uid":           {"0"},
		"Impersonate-Group":         {"system:masters"},
		"Impersonate-Extra-Scopes":  {"all"},
		"X-Remote-User":             {"admin"},
		"X-Remote-Group":            {"system:masters"},
		"X-Remote-Extra-Foo":        {"bar"},
		"Sec-Websocket-Protocol":    {"base64url.bearer.authorization.k8s.io.c2VjcmV0, v5.channel.k8s.io, v4.channel.k8s.io"},
		"X-Stream-Protocol-Version": {"v4.channel.k8s.io"},
	}
	caller := identity.Caller{
		Name: "alice", UID: "uid-1", Groups: []string{"dev", "system:authenticated"},
		Extra: map[string][]string{"scopes": {"a", "b"}, "example.com/key with space": {"v"}},
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"}, "p", nil)
	unauthorized := apierrors.NewUnauthorized("certificate signed by unknown authority")
	noBearer := func(h http.Header) http.Header {
		h = h.Clone()
		h.Del("Authorization")
		return h
	}
	identity := []string{"Authorization", "Impersonate-User", "Impersonate-Uid", "Impersonate-Group", "X-Remote-User", "X-Remote-Group", "X-Remote-Extra-Foo"}

	tests := []struct {
		name     string
		target   string
		header   http.Header
		withCert bool
		authz    *proxytest.Authorizer
		wantCode int
		// check inspects what the upstream received.
		check func(t *testing.T, got proxytest.Recorded)
	}{
		{
			name: "rewritten route uses the gateway identity", target: "/api/v1/namespaces/ci/pods/p/exec?command=sh",
			header: forged, authz: &proxytest.Authorizer{Caller: caller}, wantCode: 200,
			check: func(t *testing.T, got proxytest.Recorded) {
				if got.Path != karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/pods/p/exec") {
					t.Errorf("path %q", got.Path)
				}
				if got.Header.Get("Authorization") != "Bearer gateway-token" {
					t.Errorf("Authorization %q, want the gateway's", got.Header.Get("Authorization"))
				}
				for k := range got.Header {
					if strings.HasPrefix(k, "Impersonate-") || strings.HasPrefix(k, "X-Remote-") {
						t.Errorf("client identity header %s reached the upstream: %q", k, got.Header[k])
					}
				}
				if p := got.Header.Values("Sec-Websocket-Protocol"); !reflect.DeepEqual(p, []string{"v5.channel.k8s.io, v4.channel.k8s.io"}) {
					t.Errorf("Sec-WebSocket-Protocol %q: want the token dropped and the subprotocols kept", p)
				}
				if got.Header.Get("X-Stream-Protocol-Version") != "v4.channel.k8s.io" {
					t.Errorf("X-Stream-Protocol-Version dropped")
				}
			},
		},
		{
			name: "denied rewritten route never reaches upstream", target: "/api/v1/namespaces/ci/pods/p/attach",
			header: forged, authz: &proxytest.Authorizer{Deny: forbidden}, wantCode: 403,
		},
		{
			name: "passthrough with bearer is unchanged", target: "/api/v1/namespaces/ci/pods/p",
			header: forged, withCert: true, authz: &proxytest.Authorizer{Caller: caller}, wantCode: 200,
			check: func(t *testing.T, got proxytest.Recorded) {
				for _, k := range identity {
					if !reflect.DeepEqual(got.Header[k], forged[k]) {
						t.Errorf("%s = %q, want the caller's %q", k, got.Header[k], forged[k])
					}
				}
			},
		},
		{
			name: "passthrough x509 caller is impersonated", target: "/api/v1/namespaces/ci/pods/p",
			header: noBearer(forged), withCert: true, authz: &proxytest.Authorizer{Caller: caller}, wantCode: 200,
			check: func(t *testing.T, got proxytest.Recorded) {
				want := map[string][]string{
					"Authorization":     {"Bearer gateway-token"},
					"Impersonate-User":  {"alice"},
					"Impersonate-Uid":   {"uid-1"},
					"Impersonate-Group": {"dev", "system:authenticated"},
				}
				for k, v := range want {
					if !reflect.DeepEqual(got.Header[k], v) {
						t.Errorf("%s = %q, want %q", k, got.Header[k], v)
					}
				}
				// Decode extras as kube-apiserver does: lower-case, then unescape.
				extras := map[string][]string{}
				for k, v := range got.Header {
					if rest, ok := strings.CutPrefix(k, "Impersonate-Extra-"); ok {
						key, err := url.PathUnescape(strings.ToLower(rest))
						if err != nil {
							t.Fatalf("extra key %q: %v", rest, err)
						}
						extras[key] = v
					}
				}
				if !reflect.DeepEqual(extras, caller.Extra) {
					t.Errorf("extras %q, want %q (forged ones removed)", extras, caller.Extra)
				}
				for _, k := range []string{"X-Remote-User", "X-Remote-Group", "X-Remote-Extra-Foo"} {
					if _, ok := got.Header[k]; ok {
						t.Errorf("forged %s reached the upstream", k)
					}
				}
			},
		},
		{
			name: "passthrough x509 caller not authenticated", target: "/api/v1/namespaces/ci/pods/p",
			header: noBearer(forged), withCert: true, authz: &proxytest.Authorizer{AuthErr: unauthorized}, wantCode: 401,
		},
		{
			name: "passthrough anonymous goes as is", target: "/version",
			header: http.Header{"Accept": {"application/json"}}, authz: &proxytest.Authorizer{Caller: caller}, wantCode: 200,
			check: func(t *testing.T, got proxytest.Recorded) {
				if got.Header.Get("Authorization") != "" || got.Header.Get("Impersonate-User") != "" {
					t.Errorf("anonymous request got credentials: %v", got.Header)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &proxytest.RecordingUpstream{}
			upstream := httptest.NewTLSServer(up)
			defer upstream.Close()
			cfg := tlsUpstreamConfig(upstream)
			cfg.BearerToken = "gateway-token"
			p := newTestProxy(t, Options{Upstream: cfg, AuthMode: AuthAuthorize, Authorizer: tt.authz})
			gw, pool := certRequestingGateway(t, p)
			clientTLS := &tls.Config{RootCAs: pool}
			if tt.withCert {
				clientTLS.Certificates = []tls.Certificate{clientCertificate(t)}
			}
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS}}
			defer client.CloseIdleConnections()
			req, _ := http.NewRequest("POST", gw.URL+tt.target, nil)
			req.Header = tt.header.Clone()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantCode, body)
			}
			reqs := up.Requests()
			if tt.check == nil {
				proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
				if len(reqs) != 0 {
					t.Fatalf("refused request reached the upstream")
				}
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("%d upstream requests", len(reqs))
			}
			tt.check(t, reqs[0])
		})
	}
}

func TestPassthroughModeNeverAddsCredentials(t *testing.T) {
	up := &proxytest.RecordingUpstream{}
	upstream := httptest.NewTLSServer(up)
	defer upstream.Close()
	cfg := tlsUpstreamConfig(upstream)
	cfg.BearerToken = "gateway-token"
	p := newTestProxy(t, Options{Upstream: cfg})
	gw, pool := certRequestingGateway(t, p)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCertificate(t)}}}}
	defer client.CloseIdleConnections()
	for _, target := range []string{"/api/v1/namespaces/ci/pods/p/exec", "/api/v1/namespaces/ci/pods/p"} {
		req, _ := http.NewRequest("POST", gw.URL+target, nil)
		req.Header.Set("Impersonate-User", "someone")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	reqs := up.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for _, got := range reqs {
		if got.Header.Get("Authorization") != "" || got.Header.Get("Impersonate-User") != "someone" {
			t.Errorf("%s: Authorization %q Impersonate-User %q", got.Path, got.Header.Get("Authorization"), got.Header.Get("Impersonate-User"))
		}
	}
}

// TestAuthorizeModePodVerbs: each pod subresource request is authorized with
// the verbs kube-apiserver checks for it: the one RequestInfo derives from
// the method (POST create, GET get), and for a GET of exec, attach or
// portforward (the WebSocket form) create as well, as kube-apiserver 1.35+
// adds. POST pods/log, which kube-apiserver authorizes as create and then
// answers 405, never reaches the member as the gateway.
func TestAuthorizeModePodVerbs(t *testing.T) {
	rr := func(sub string, verbs ...string) []identity.ResourceRequest {
		var out []identity.ResourceRequest
		for _, v := range verbs {
			out = append(out, identity.ResourceRequest{Namespace: "ci", Verb: v, Resource: "pods", Subresource: sub, Name: "p"})
		}
		return out
	}
	denied := func(verb, sub string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p",
			errors.New(`User "alice" cannot `+verb+` resource "pods/`+sub+`" in API group "" in the namespace "ci"`))
	}
	upgrade := [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}, {"Authorization", "Bearer t"}}
	plain := [][2]string{{"Authorization", "Bearer t"}}
	tests := []struct {
		name, method, sub string
		header            [][2]string
		denyVerb          map[string]error
		wantCode          int
		wantAsked         []identity.ResourceRequest
	}{
		{"POST exec", "POST", "exec", upgrade, nil, 101, rr("exec", "create")},
		{"GET exec upgrade", "GET", "exec", upgrade, nil, 101, rr("exec", "get", "create")},
		{"GET exec not upgraded", "GET", "exec", plain, nil, 200, rr("exec", "get", "create")},
		{"POST attach", "POST", "attach", upgrade, nil, 101, rr("attach", "create")},
		{"GET attach upgrade", "GET", "attach", upgrade, nil, 101, rr("attach", "get", "create")},
		{"POST portforward", "POST", "portforward", upgrade, nil, 101, rr("portforward", "create")},
		{"GET portforward upgrade", "GET", "portforward", upgrade, nil, 101, rr("portforward", "get", "create")},
		{"GET log", "GET", "log", plain, nil, 200, rr("log", "get")},
		{"POST log allowed is 405", "POST", "log", plain, nil, 405, rr("log", "create")},
		{"POST log denied is 403", "POST", "log", plain, map[string]error{"create": denied("create", "log")}, 403, rr("log", "create")},
		{"GET exec with only create", "GET", "exec", upgrade, map[string]error{"get": denied("get", "exec")}, 403, rr("exec", "get")},
		{"GET exec with only get", "GET", "exec", upgrade, map[string]error{"create": denied("create", "exec")}, 403, rr("exec", "get", "create")},
		{"POST exec with only get", "POST", "exec", upgrade, map[string]error{"create": denied("create", "exec")}, 403, rr("exec", "create")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newAuthorizeEnv(t, &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}, DenyVerb: tt.denyVerb})
			c := env.dial(t, nil)
			resp := c.send(t, tt.method, "/api/v1/namespaces/ci/pods/p/"+tt.sub, tt.header)
			if resp.StatusCode != tt.wantCode {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d %s, want %d", resp.StatusCode, body, tt.wantCode)
			}
			if !reflect.DeepEqual(env.authz.Authorized(), tt.wantAsked) {
				t.Errorf("authorized %+v\nwant       %+v", env.authz.Authorized(), tt.wantAsked)
			}
			if tt.wantCode < 300 {
				return
			}
			body, _ := io.ReadAll(resp.Body)
			st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
			if int(st.Code) != tt.wantCode {
				t.Errorf("Status code %d, want %d", st.Code, tt.wantCode)
			}
			if tt.wantCode == http.StatusForbidden && !strings.Contains(st.Message, `User "alice"`) {
				t.Errorf("403 %q does not name the caller", st.Message)
			}
			if n := len(env.up.Requests()) + len(env.echo.requestHeaders()); n != 0 {
				t.Errorf("refused request reached the upstream %d times", n)
			}
			if calls := env.res.Called(); tt.wantCode == http.StatusForbidden && len(calls) != 0 {
				t.Errorf("denied request was resolved: %q", calls)
			}
		})
	}
}
