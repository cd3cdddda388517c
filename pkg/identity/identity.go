package identity

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"
)

// Caller is an authenticated identity, as authorize mode forwards it.
type Caller struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// ResourceRequest is a request on a Kubernetes resource that the gateway
// authorizes itself, in kube-apiserver's RequestInfo terms, before sending it
// with its own identity: what pkg/auth checks a Caller for.
type ResourceRequest struct {
	Namespace   string
	Verb        string // get, list, watch, create, update, patch, delete
	Group       string // "" for core
	Resource    string // pods, services, events, ...
	Subresource string
	Name        string
}

const (
	impersonatePrefix      = "Impersonate-"
	impersonateUser        = "Impersonate-User"
	impersonateUID         = "Impersonate-Uid"
	impersonateGroup       = "Impersonate-Group"
	impersonateExtraPrefix = "Impersonate-Extra-"

	// WebSocketBearerPrefix is how browsers pass a bearer token to
	// kube-apiserver in Sec-WebSocket-Protocol.
	WebSocketBearerPrefix = "base64url.bearer.authorization.k8s.io."
)

// requestHeaderPrefix covers kube-apiserver's default front-proxy identity
// headers (X-Remote-User, -Uid, -Group, -Extra-*). They only count when the
// sender presents a front-proxy client certificate, but a client must never
// be able to make the gateway send them; the whole prefix goes, so a
// deployment that configured other X-Remote-* names is covered too.
const requestHeaderPrefix = "X-Remote-"

// StripHeaders removes every header through which a client could
// claim an identity upstream: Authorization, every Impersonate-* header
// (User, Uid, Group, Extra-*, whatever comes next), every X-Remote-* header
// (the default front-proxy identity headers), and a bearer token passed as a
// WebSocket subprotocol.
// The proxy applies it before sending a request with the gateway's identity.
func StripHeaders(h http.Header) {
	for key := range h {
		if strings.EqualFold(key, "Authorization") ||
			hasPrefixFold(key, impersonatePrefix) ||
			hasPrefixFold(key, requestHeaderPrefix) {
			delete(h, key)
		}
	}
	stripWebSocketBearer(h)
}

// WebSocketBearerToken reads the bearer token of a
// base64url.bearer.authorization.k8s.io.<token> WebSocket subprotocol, the
// form browsers use since they cannot set Authorization, as kube-apiserver's
// websocket protocol authenticator (k8s.io/apiserver, request/websocket)
// reads it: only on a WebSocket upgrade, one such entry at most, unpadded
// base64url of valid UTF-8, and at least one other subprotocol for the
// server to answer with. ok is false when there is no token to read; err
// is set for an entry kube-apiserver would answer 401 to. Neither the token
// nor the entry is ever part of err.
func WebSocketBearerToken(h http.Header) (token string, ok bool, err error) {
	if !isWebSocketUpgrade(h) {
		return "", false, nil
	}
	sawToken, others := false, 0
	for _, v := range h.Values("Sec-Websocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			encoded, isToken := strings.CutPrefix(strings.TrimSpace(p), WebSocketBearerPrefix)
			if !isToken {
				others++
				continue
			}
			if sawToken {
				return "", false, errors.New("more than one bearer token subprotocol")
			}
			sawToken = true
			decoded, err := base64.RawURLEncoding.DecodeString(encoded)
			if err != nil {
				return "", false, errors.New("bearer token subprotocol is not unpadded base64url")
			}
			if !utf8.Valid(decoded) {
				return "", false, errors.New("bearer token subprotocol is not UTF-8")
			}
			token = string(decoded)
		}
	}
	if token == "" {
		return "", false, nil
	}
	if others == 0 {
		return "", false, errors.New("bearer token subprotocol without another subprotocol")
	}
	return token, true, nil
}

// CallerToken is the bearer token a caller presented: Authorization's,
// else a WebSocket bearer subprotocol's, decoded as kube-apiserver decodes
// it, so one credential is one token whatever its transport.
func CallerToken(h http.Header) (string, bool) {
	if t, ok := BearerToken(h); ok {
		return t, true
	}
	if t, ok, err := WebSocketBearerToken(h); ok && err == nil {
		return t, true
	}
	return "", false
}

// stripWebSocketBearer drops only the token entries of Sec-WebSocket-Protocol,
// keeping every real subprotocol and its order.
func stripWebSocketBearer(h http.Header) {
	const key = "Sec-Websocket-Protocol"
	values, ok := h[key]
	if !ok {
		return
	}
	var kept []string
	changed := false
	for _, v := range values {
		var protos []string
		for _, p := range strings.Split(v, ",") {
			if strings.HasPrefix(strings.TrimSpace(p), WebSocketBearerPrefix) {
				changed = true
				continue
			}
			protos = append(protos, strings.TrimSpace(p))
		}
		if len(protos) > 0 {
			kept = append(kept, strings.Join(protos, ", "))
		}
	}
	if !changed {
		return
	}
	if len(kept) == 0 {
		delete(h, key)
		return
	}
	h[key] = kept
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// SetImpersonation makes the gateway's request act as caller, in the header
// form kube-apiserver's impersonation filter reads (extra keys
// percent-encoded; the server lower-cases and unescapes them).
func SetImpersonation(h http.Header, caller Caller) {
	h.Set(impersonateUser, caller.Name)
	if caller.UID != "" {
		h.Set(impersonateUID, caller.UID)
	}
	for _, g := range caller.Groups {
		h.Add(impersonateGroup, g)
	}
	keys := make([]string, 0, len(caller.Extra))
	for k := range caller.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range caller.Extra[k] {
			h.Add(impersonateExtraPrefix+escapeExtraKey(k), v)
		}
	}
}

// escapeExtraKey percent-encodes every byte that is not an HTTP token
// character, and '%' itself, as client-go does for Impersonate-Extra-<key>.
func escapeExtraKey(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if isTokenByte(c) && c != '%' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func isTokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// HasBearerToken reports whether r carries a bearer token in Authorization,
// in any of its values.
func HasBearerToken(r *http.Request) bool {
	for _, v := range r.Header.Values("Authorization") {
		if hasPrefixFold(strings.TrimSpace(v), "bearer ") {
			return true
		}
	}
	return false
}

// HasClientCertificate reports whether r's TLS connection presented a client
// certificate, verified or not.
func HasClientCertificate(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.PeerCertificates) > 0
}

// BearerToken parses Authorization as kube-apiserver's bearer token
// authenticator does: the first value, scheme case-insensitive, an empty
// token is no token.
func BearerToken(h http.Header) (string, bool) {
	parts := strings.SplitN(strings.TrimSpace(h.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// WebSocketBearerEntry returns the token of the first
// base64url.bearer.authorization.k8s.io.<token> subprotocol, still encoded
// and unchecked, on any request: a key that only has to be stable per
// token (the stream limiter's), never a credential to send.
func WebSocketBearerEntry(h http.Header) (string, bool) {
	for _, v := range h.Values("Sec-Websocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if token, ok := strings.CutPrefix(strings.TrimSpace(p), WebSocketBearerPrefix); ok && token != "" {
				return token, true
			}
		}
	}
	return "", false
}

// isWebSocketUpgrade reports whether h asks for a WebSocket upgrade, read
// as ReverseProxy reads Upgrade: only with Connection: Upgrade.
func isWebSocketUpgrade(h http.Header) bool {
	for _, v := range h["Connection"] {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "Upgrade") {
				return strings.EqualFold(h.Get("Upgrade"), "websocket")
			}
		}
	}
	return false
}

// PlainRequestHeader edits a caller's headers for a plain request made on
// its behalf, such as the proxy's passthrough admission check (a GET).
// kube-apiserver reads a WebSocket bearer subprotocol only on an upgrade, so
// a token that comes only there goes as the Authorization it stands for,
// read as kube-apiserver reads it (a malformed one is the error
// kube-apiserver answers 401 to); no WebSocket header goes at all.
func PlainRequestHeader(orig http.Header) (func(http.Header), error) {
	var authorization string
	if _, ok := BearerToken(orig); !ok {
		token, ok, err := WebSocketBearerToken(orig)
		if err != nil {
			return nil, err
		}
		if ok {
			authorization = "Bearer " + token
		}
	}
	return func(h http.Header) {
		for k := range h {
			if hasPrefixFold(k, "Sec-Websocket-") {
				delete(h, k)
			}
		}
		if authorization != "" {
			h.Set("Authorization", authorization)
		}
	}, nil
}
