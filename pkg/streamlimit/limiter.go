// Package streamlimit bounds the streams open through the gateway, in
// total and per client identity: long-lived streams are what hold the
// gateway's memory and file descriptors, while ordinary requests end by
// themselves and are left to karmada-apiserver's own flow control. The
// proxy decides what a stream is and who the client is (identity.ClientKey).
package streamlimit

import (
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// retryAfterSeconds is the Retry-After of a 429: a stream slot frees
// when any job's exec or log ends, so soon is a fair guess, as
// kube-apiserver's max-in-flight filter guesses 1s.
const retryAfterSeconds = 1

// Limiter bounds concurrent upgraded and streaming requests, in total
// and per client identity. Long-lived streams are what hold the gateway's
// memory and file descriptors; ordinary requests end by themselves and are
// left to karmada-apiserver's own flow control.
type Limiter struct {
	total, perClient int // 0 is unlimited

	mu       sync.Mutex
	open     int
	byClient map[string]int
}

// New is a Limiter of total streams and perClient per client (0: unlimited).
func New(total, perClient int) *Limiter {
	return &Limiter{total: total, perClient: perClient, byClient: map[string]int{}}
}

// Acquire takes a slot for client. It returns the release func, or the
// scope whose limit is reached (the total is checked first: when the whole
// gateway is full, that is the reason, whoever asks).
func (l *Limiter) Acquire(client string) (release func(), limitedBy string) {
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

func (l *Limiter) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byClient[client]--; l.byClient[client] <= 0 {
		delete(l.byClient, client) // keep the map as small as the set of clients with open streams
	}
}

// TooMany is the 429 Status error for a request scope refused.
func (l *Limiter) TooMany(scope string) error {
	if scope == metrics.LimitScopeTotal {
		return apierrors.NewTooManyRequests(fmt.Sprintf("too many open streams through the gateway (limit %d), please try again later", l.total), retryAfterSeconds)
	}
	return apierrors.NewTooManyRequests(fmt.Sprintf("too many open streams for this client (limit %d), please try again later", l.perClient), retryAfterSeconds)
}

// Limits are the limits the Limiter enforces.
func (l *Limiter) Limits() (total, perClient int) { return l.total, l.perClient }

// Open is how many slots are held, and by how many clients.
func (l *Limiter) Open() (open, clients int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, len(l.byClient)
}
