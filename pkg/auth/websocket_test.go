package auth

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy"
)

// wsBearer is the subprotocol entry browsers (and GitLab's web terminal)
// send instead of an Authorization header.
func wsBearer(token string) string {
	return "base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(token))
}

// webSocketUpgrade is a WebSocket handshake offering protocols.
func webSocketUpgrade(protocols ...string) http.Header {
	return http.Header{
		"Connection":             {"Upgrade"},
		"Upgrade":                {"websocket"},
		"Sec-Websocket-Protocol": protocols,
	}
}

// TestWebSocketBearerSubprotocol: a token that comes only as a WebSocket
// subprotocol authenticates as kube-apiserver's websocket protocol
// authenticator would take it, and is refused as it would refuse it.
func TestWebSocketBearerSubprotocol(t *testing.T) {
	with := func(h http.Header, k, v string) http.Header {
		h = h.Clone()
		h.Set(k, v)
		return h
	}
	tests := []struct {
		name   string
		header http.Header
		// wantUser is who was authorized; "" means 401.
		wantUser string
	}{
		{"token and a channel subprotocol", webSocketUpgrade(wsBearer("alice-token") + ", v5.channel.k8s.io, v4.channel.k8s.io"), "alice"},
		{"token in its own header line", webSocketUpgrade("v4.channel.k8s.io", wsBearer("alice-token")), "alice"},
		{"Connection lists more than Upgrade", with(webSocketUpgrade(wsBearer("alice-token"), "channel.k8s.io"), "Connection", "keep-alive, Upgrade"), "alice"},
		{"Upgrade value in another case", with(webSocketUpgrade(wsBearer("alice-token"), "channel.k8s.io"), "Upgrade", "WebSocket"), "alice"},
		{"Authorization wins", with(webSocketUpgrade(wsBearer("nope"), "channel.k8s.io"), "Authorization", "Bearer alice-token"), "alice"},
		{"unknown token", webSocketUpgrade(wsBearer("nope"), "channel.k8s.io"), ""},
		{"no other subprotocol to echo", webSocketUpgrade(wsBearer("alice-token")), ""},
		{"two tokens", webSocketUpgrade(wsBearer("alice-token"), wsBearer("alice-token"), "channel.k8s.io"), ""},
		{"padded base64", webSocketUpgrade("base64url.bearer.authorization.k8s.io."+base64.URLEncoding.EncodeToString([]byte("alice-token!")), "channel.k8s.io"), ""},
		{"standard base64 alphabet", webSocketUpgrade("base64url.bearer.authorization.k8s.io.+/+/", "channel.k8s.io"), ""},
		{"token not UTF-8", webSocketUpgrade("base64url.bearer.authorization.k8s.io."+base64.RawURLEncoding.EncodeToString([]byte{0xff, 0xfe}), "channel.k8s.io"), ""},
		{"empty token", webSocketUpgrade("base64url.bearer.authorization.k8s.io.", "channel.k8s.io"), ""},
		{"not a WebSocket upgrade", http.Header{"Sec-Websocket-Protocol": {wsBearer("alice-token") + ", channel.k8s.io"}}, ""},
		{"SPDY upgrade", with(webSocketUpgrade(wsBearer("alice-token"), "channel.k8s.io"), "Upgrade", "SPDY/3.1"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, nil)
			env.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
			caller, err := env.authz.AuthorizeResource(context.Background(), newRequest(tc.header, nil), execJob42)
			if tc.wantUser == "" {
				if code, _ := statusOf(t, err); code != http.StatusUnauthorized {
					t.Fatalf("code %d (%v), want 401", code, err)
				}
				return
			}
			if err != nil || caller.Name != tc.wantUser {
				t.Fatalf("caller %q, err %v; want %q", caller.Name, err, tc.wantUser)
			}
		})
	}
}

// TestWebSocketBearerNeverLogged: the subprotocol token, decoded or not,
// appears in no error, Status or log line.
func TestWebSocketBearerNeverLogged(t *testing.T) {
	const secret = "s3cr3t-ws-t0ken"
	env := newTestEnv(t, nil)
	env.api.set(func(api *fakeAPI) { api.rejectText = "invalid bearer token " + secret })
	var logs bytes.Buffer
	ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(
		textlogger.Output(&logs), textlogger.Verbosity(10))))
	_, err := env.authz.AuthorizeResource(ctx, newRequest(webSocketUpgrade(wsBearer(secret), "channel.k8s.io"), nil), execJob42)
	if err == nil {
		t.Fatal("AuthorizeResource allowed, want 401")
	}
	_, msg := statusOf(t, err)
	encoded := strings.TrimPrefix(wsBearer(secret), "base64url.bearer.authorization.k8s.io.")
	for what, s := range map[string]string{"error": err.Error(), "status": msg, "logs": logs.String()} {
		if strings.Contains(s, secret) || strings.Contains(s, encoded) {
			t.Errorf("token appears in %s: %s", what, s)
		}
	}
	if logs.Len() == 0 {
		t.Error("nothing was logged; the log check proves nothing")
	}
}

// TestWebSocketBearerExecThroughTheGateway: a WebSocket exec carrying its
// token only as a subprotocol is authorized (as the token's user) and goes
// upstream as the gateway, the token entry removed and the real
// subprotocols kept in order.
func TestWebSocketBearerExecThroughTheGateway(t *testing.T) {
	env := newTestEnv(t, nil)
	env.api.grant(
		rule("alice", "get", "", "pods/exec", "ci", "job-42"),
		rule("alice", "create", "", "pods/exec", "ci", "job-42"),
	)
	up := &headerRecorder{}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	p, err := proxy.New(proxy.Options{
		Upstream:   &rest.Config{Host: upstream.URL, BearerToken: "gateway-token"},
		Resolver:   &countingServiceResolver{cluster: "member1"},
		AuthMode:   proxy.AuthAuthorize,
		Authorizer: env.authz,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&tty=1", nil)
	r.Header = webSocketUpgrade("v5.channel.k8s.io, "+wsBearer("alice-token"), "v4.channel.k8s.io, channel.k8s.io")
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, r)
	got := up.seen()
	if len(got) != 1 {
		t.Fatalf("code %d %s, %d upstream requests; want the exec sent upstream", rec.Code, rec.Body, len(got))
	}
	if a := got[0].Values("Authorization"); !reflect.DeepEqual(a, []string{"Bearer gateway-token"}) {
		t.Errorf("upstream Authorization %q, want only the gateway's", a)
	}
	if p := got[0].Values("Sec-Websocket-Protocol"); !reflect.DeepEqual(p, []string{"v5.channel.k8s.io", "v4.channel.k8s.io, channel.k8s.io"}) {
		t.Errorf("upstream Sec-WebSocket-Protocol %q, want the token removed and the rest in order", p)
	}
}
