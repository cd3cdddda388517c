package identity

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
)

// ClientKey is the key the proxy's stream limiter counts a request's
// streams under. It is derived from the credential the request presents,
// never the credential: a SHA-256 of the bearer token (Authorization first,
// then a WebSocket bearer subprotocol, decoded, the two forms
// karmada-apiserver accepts: one token is one key in either form, whichever
// of the base64url spellings that decode alike it is sent in), the subject
// of a client certificate only once the caller says the Authorizer verified
// it, else the remote IP. An unverified certificate counts as anonymous, or
// a client could mint a fresh subject per stream.
func ClientKey(r *http.Request, certVerified bool) string {
	if token, ok := BearerToken(r.Header); ok {
		return hashedToken(token)
	}
	if encoded, ok := WebSocketBearerEntry(r.Header); ok {
		// kube-apiserver decodes it so, trailing bits ignored.
		if token, err := base64.RawURLEncoding.DecodeString(encoded); err == nil && len(token) > 0 {
			return hashedToken(string(token))
		}
		return hashedToken(encoded) // refused upstream, as it does not decode
	}
	if certVerified && HasClientCertificate(r) {
		return "x509:" + r.TLS.PeerCertificates[0].Subject.String()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

func hashedToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "token:" + hex.EncodeToString(sum[:])
}
