package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// streamRetryAfterSeconds is the Retry-After of a 429: a stream slot frees
// when any job's exec or log ends, so soon is a fair guess, as
// kube-apiserver's max-in-flight filter guesses 1s.
const streamRetryAfterSeconds = 1

// streamLimiter bounds concurrent upgraded and streaming requests, in total
// and per client identity. Long-lived streams are what hold the gateway's
// memory and file descriptors; ordinary requests end by themselves and are
// left to karmada-apiserver's own flow control.
type streamLimiter struct {
	total, perClient int // 0 is unlimited

	mu       sync.Mutex
	open     int
	byClient map[string]int
}

func newStreamLimiter(total, perClient int) *streamLimiter {
	return &streamLimiter{total: total, perClient: perClient, byClient: map[string]int{}}
}

// acquire takes a slot for client. It returns the release func, or the
// scope whose limit is reached (the total is checked first: when the whole
// gateway is full, that is the reason, whoever asks).
func (l *streamLimiter) acquire(client string) (release func(), limitedBy string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total > 0 && l.open >= l.total {
		return nil, metrics.LimitScopeTotal
	}
	if l.perClient > 0 && l.byClient[client] >= l.perClient {
		return nil, metrics.LimitScopeClient
	}
	l.open++
	l.byClient[client]++
	var once sync.Once
	return func() { once.Do(func() { l.release(client) }) }, ""
}

func (l *streamLimiter) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byClient[client]--; l.byClient[client] <= 0 {
		delete(l.byClient, client) // keep the map as small as the set of clients with open streams
	}
}

func (l *streamLimiter) tooMany(scope string) error {
	if scope == metrics.LimitScopeTotal {
		return apierrors.NewTooManyRequests(fmt.Sprintf("too many open streams through the gateway (limit %d), please try again later", l.total), streamRetryAfterSeconds)
	}
	return apierrors.NewTooManyRequests(fmt.Sprintf("too many open streams for this client (limit %d), please try again later", l.perClient), streamRetryAfterSeconds)
}

// clientIdentity is the key a request's streams are counted under. It is
// derived from the credential the request presents, never the credential:
// a SHA-256 of the bearer token (Authorization first, then a WebSocket
// bearer subprotocol, the two forms karmada-apiserver accepts), the subject
// of a client certificate only once the Authorizer verified it, else the
// remote IP. An unverified certificate counts as anonymous, or a client
// could mint a fresh subject per stream.
func clientIdentity(r *http.Request, certVerified bool) string {
	if token, ok := bearerTokenOf(r.Header); ok {
		return hashedToken(token)
	}
	if token, ok := webSocketBearerToken(r.Header); ok {
		return hashedToken(token)
	}
	if certVerified && hasClientCertificate(r) {
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

// bearerTokenOf parses Authorization as kube-apiserver's bearer token
// authenticator does: the first value, scheme case-insensitive, an empty
// token is no token.
func bearerTokenOf(h http.Header) (string, bool) {
	parts := strings.SplitN(strings.TrimSpace(h.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// webSocketBearerToken returns the token of a
// base64url.bearer.authorization.k8s.io.<token> subprotocol, still encoded:
// the key only has to be stable per token.
func webSocketBearerToken(h http.Header) (string, bool) {
	for _, v := range h.Values("Sec-Websocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if token, ok := strings.CutPrefix(strings.TrimSpace(p), websocketBearerPrefix); ok && token != "" {
				return token, true
			}
		}
	}
	return "", false
}

// acquireStream takes a stream slot for r, or answers 429 and reports false.
func (p *Proxy) acquireStream(w http.ResponseWriter, r *http.Request, state *requestState) (release func(), ok bool) {
	release, limitedBy := p.limiter.acquire(clientIdentity(r, state.certVerified))
	if release != nil {
		return release, true
	}
	p.metrics.StreamLimitRejectionsTotal.WithLabelValues(limitedBy).Inc()
	klog.FromContext(r.Context()).V(2).Info("Stream limit reached", "scope", limitedBy, "route", state.route)
	refuseUpgrade(w, r)
	writeStatus(w, p.limiter.tooMany(limitedBy))
	return nil, false
}
