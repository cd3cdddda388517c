// Package admission remembers, for passthrough mode, which requests
// karmada-apiserver recently admitted: the gateway's admission check GETs
// the pod or Service with the caller's own headers before a rewritten
// stream goes on (pkg/proxy, admittedByKarmada), a round trip in series
// with every exec and attach an executor opens. With a Cache, a 200 is
// reused for the same headers and object for a TTL.
//
// The key is the object and every header the check sends, hashed, but for
// the few that change with each request and that no authenticator or
// authorizer reads (a WebSocket handshake's nonce, trace context): two
// requests with one key are the same question to karmada-apiserver, so the
// cache never admits a request that karmada-apiserver would judge
// differently now, except for what changed within the TTL. That is the
// cost, and the operator's choice: a caller whose RoleBinding is deleted
// can still open streams for up to the TTL (the member and Karmada's
// cluster proxy still check every request). Refusals and failures are
// never remembered.
package admission

import (
	"crypto/sha256"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Key identifies one admission question: the headers sent and the object.
type Key [sha256.Size]byte

// perRequest are headers that differ with every request of one client and
// that karmada-apiserver's authentication and authorization never read.
var perRequest = map[string]bool{
	"Sec-Websocket-Key": true, // the handshake's nonce
	"Traceparent":       true,
	"Tracestate":        true,
}

// KeyOf is the key of a check of the object at path sent with header h
// (canonical names, as net/http keeps them).
func KeyOf(h http.Header, path string) Key {
	names := make([]string, 0, len(h))
	for name := range h {
		if !perRequest[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	// Every string and list is length-prefixed, so no two header sets
	// hash the same bytes.
	sum := sha256.New()
	count := func(n int) { _, _ = sum.Write([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}) }
	field := func(s string) { count(len(s)); _, _ = io.WriteString(sum, s) }
	field(path)
	for _, name := range names {
		field(name)
		count(len(h[name]))
		for _, v := range h[name] {
			field(v)
		}
	}
	var k Key
	sum.Sum(k[:0])
	return k
}

// maxEntries bounds the cache; past it expired entries are dropped, and if
// none had expired it starts over.
const maxEntries = 100000

// Cache holds admissions for a TTL.
type Cache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	expires map[Key]time.Time
}

// NewCache remembers admissions for ttl (> 0).
func NewCache(ttl time.Duration) *Cache {
	return &Cache{ttl: ttl, now: time.Now, expires: map[Key]time.Time{}}
}

// Admitted reports whether k was admitted less than the TTL ago; never
// on a nil Cache.
func (c *Cache) Admitted(k Key) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.expires[k]
	if ok && !c.now().Before(exp) {
		delete(c.expires, k)
		return false
	}
	return ok
}

// Remember records that karmada-apiserver admitted k just now; a nil
// Cache remembers nothing.
func (c *Cache) Remember(k Key) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if len(c.expires) >= maxEntries {
		for key, exp := range c.expires {
			if !now.Before(exp) {
				delete(c.expires, key)
			}
		}
		if len(c.expires) >= maxEntries {
			clear(c.expires)
		}
	}
	c.expires[k] = now.Add(c.ttl)
}
