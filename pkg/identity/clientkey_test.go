package identity

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// wsToken is token as a WebSocket bearer subprotocol spells it; loose sets
// the unused low bits of its last character, which decoders ignore.
func wsToken(token string, loose bool) string {
	enc := base64.RawURLEncoding.EncodeToString([]byte(token))
	if !loose {
		return enc
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, enc[len(enc)-1])
	return enc[:len(enc)-1] + string(alphabet[i|0x0f])
}

func TestClientKey(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "alice", Organization: []string{"dev"}}}
	withCert := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	tokenKey := hashedToken("secret-token")
	tests := []struct {
		name         string
		header       http.Header
		tls          *tls.ConnectionState
		certVerified bool
		want         string
	}{
		{"bearer token", http.Header{"Authorization": {"Bearer secret-token"}}, nil, false, tokenKey},
		{"bearer scheme case", http.Header{"Authorization": {"bEaReR secret-token"}}, nil, false, tokenKey},
		{"bearer wins over certificate", http.Header{"Authorization": {"Bearer secret-token"}}, withCert, true, tokenKey},
		// The subprotocol's token, decoded, is the header's: one token,
		// one key, whichever base64url spelling that decodes alike it
		// comes in (the last character's unused bits set), so one client
		// cannot count under 17 keys.
		{"websocket bearer subprotocol", http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io." + wsToken("secret-token", false)}}, nil, false, tokenKey},
		{"websocket bearer subprotocol, trailing bits set", http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io." + wsToken("secret-token1", true)}}, nil, false, hashedToken("secret-token1")},
		{"websocket bearer subprotocol, canonical", http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io." + wsToken("secret-token1", false)}}, nil, false, hashedToken("secret-token1")},
		{"verified certificate", nil, withCert, true, "x509:CN=alice,O=dev"},
		{"unverified certificate is anonymous", nil, withCert, false, "ip:192.0.2.7"},
		{"empty bearer is anonymous", http.Header{"Authorization": {"Bearer "}}, nil, false, "ip:192.0.2.7"},
		{"basic auth is anonymous", http.Header{"Authorization": {"Basic YTpi"}}, nil, false, "ip:192.0.2.7"},
		{"empty websocket token is anonymous", http.Header{"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io."}}, nil, false, "ip:192.0.2.7"},
		{"anonymous", nil, nil, false, "ip:192.0.2.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.7:41234"
			r.Header = tt.header
			if r.Header == nil {
				r.Header = http.Header{}
			}
			r.TLS = tt.tls
			got := ClientKey(r, tt.certVerified)
			if got != tt.want {
				t.Fatalf("identity %q, want %q", got, tt.want)
			}
			if strings.Contains(got, "secret-token") {
				t.Fatalf("identity %q holds the raw token", got)
			}
		})
	}
	// IPv6 callers are keyed by address without port either.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[::1]:5555"
	if got := ClientKey(r, false); got != "ip:::1" {
		t.Errorf("IPv6 identity %q", got)
	}
}
