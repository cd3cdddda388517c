package proxy

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity/identitytest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// FuzzAuthorizeModeHeaders sends a rewritten request in authorize mode with
// arbitrary extra header lines, exactly as http.Server would parse them, and
// checks what leaves the gateway: no client identity header in any spelling
// Go canonicalises it to, no bearer subprotocol, and the stream limiter's
// key never holds the token.
func FuzzAuthorizeModeHeaders(f *testing.F) {
	for _, seed := range [][3]string{
		{"Impersonate-User: admin", "X-Remote-Group: system:masters", "Connection: Impersonate-User"},
		{"impersonate-extra-scopes%2Fx: y", "IMPERSONATE-UID: 0", "x-remote-extra-a: b"},
		{"Sec-WebSocket-Protocol: base64url.bearer.authorization.k8s.io.dG9rZW4, v5.channel.k8s.io", "Connection: Upgrade", "Upgrade: websocket"},
		{"Authorization: Bearer other", "Authorization: Basic YTpi", "Proxy-Authorization: Bearer x"},
		{"Impersonate-User : admin", "Impersonate-User:admin", "X-Remote-User:\tadmin"},
		{"Connection: X-Remote-User, Authorization", "Te: trailers", "Trailer: Impersonate-User"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}

	authz := &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}}
	p := newTestProxy(f, Options{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, AuthMode: AuthAuthorize, Authorizer: authz})
	// The gateway transport would add the gateway's token; the recorder shows
	// what the proxy itself lets through.
	out := recordUpstream(p)

	f.Fuzz(func(t *testing.T, line1, line2, line3 string) {
		var b strings.Builder
		b.WriteString("POST /api/v1/namespaces/ci/pods/p/exec?command=sh HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer secret-token\r\n")
		for _, l := range []string{line1, line2, line3} {
			if strings.ContainsAny(l, "\r\n") {
				return // one header line each; a line break would start a body
			}
			if l != "" {
				b.WriteString(l + "\r\n")
			}
		}
		b.WriteString("\r\n")
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(b.String())))
		if err != nil {
			return // http.Server would refuse it before the proxy
		}
		if key := identity.ClientKey(req, false); strings.Contains(key, "secret-token") {
			t.Fatalf("stream limiter key %q holds the token", key)
		}
		out.requests = nil
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		if len(out.requests) == 0 {
			return // refused (bad Upgrade, limits): nothing left the gateway
		}
		if len(out.requests) > 1 {
			t.Fatalf("%d upstream requests", len(out.requests))
		}
		for k, vs := range out.requests[0].Header {
			if identitytest.IsIdentityHeader(k) {
				t.Errorf("identity header %q: %q left the gateway", k, vs)
			}
			for _, v := range vs {
				if strings.Contains(v, "secret-token") || strings.Contains(v, identity.WebSocketBearerPrefix) {
					t.Errorf("header %q carries a client credential: %q", k, v)
				}
			}
		}
		if out.requests[0].Trailer != nil {
			for k := range out.requests[0].Trailer {
				if identitytest.IsIdentityHeader(k) {
					t.Errorf("identity trailer %q announced upstream", k)
				}
			}
		}
	})
}
