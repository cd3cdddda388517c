package admission

import (
	"net/http"
	"testing"
	"time"
)

// TestKeyOf: requests that are the same question to karmada-apiserver share
// a key; any difference it could judge by gives another.
func TestKeyOf(t *testing.T) {
	const pod = "/api/v1/namespaces/ci/pods/job-1?resourceVersion=0"
	base := func() http.Header {
		return http.Header{
			"Authorization":     {"Bearer token-a"},
			"User-Agent":        {"gitlab-runner"},
			"Sec-Websocket-Key": {"nonce-1"},
			"Traceparent":       {"00-trace-1"},
		}
	}
	same := []struct {
		name string
		edit func(http.Header)
	}{
		{"another WebSocket nonce", func(h http.Header) { h.Set("Sec-Websocket-Key", "nonce-2") }},
		{"another trace", func(h http.Header) { h.Set("Traceparent", "00-trace-2"); h.Set("Tracestate", "x=1") }},
		{"no nonce at all (SPDY)", func(h http.Header) { h.Del("Sec-Websocket-Key") }},
	}
	for _, tt := range same {
		h := base()
		tt.edit(h)
		if KeyOf(h, pod) != KeyOf(base(), pod) {
			t.Errorf("%s: another key; the same question must hit", tt.name)
		}
	}
	different := []struct {
		name string
		path string
		edit func(http.Header)
	}{
		{"another token", pod, func(h http.Header) { h.Set("Authorization", "Bearer token-b") }},
		{"no token", pod, func(h http.Header) { h.Del("Authorization") }},
		{"impersonating", pod, func(h http.Header) { h.Set("Impersonate-User", "admin") }},
		{"impersonating a group", pod, func(h http.Header) { h.Add("Impersonate-Group", "system:masters") }},
		{"another pod", "/api/v1/namespaces/ci/pods/job-2?resourceVersion=0", func(http.Header) {}},
		{"another namespace", "/api/v1/namespaces/prod/pods/job-1?resourceVersion=0", func(http.Header) {}},
		{"a Service of the name", "/api/v1/namespaces/ci/services/job-1?resourceVersion=0", func(http.Header) {}},
		{"a value split into two", pod, func(h http.Header) { h["User-Agent"] = []string{"gitlab", "-runner"} }},
		{"a value moved into the name", pod, func(h http.Header) { h.Del("User-Agent"); h["User-Agentgitlab-runner"] = nil }},
	}
	for _, tt := range different {
		h := base()
		tt.edit(h)
		if KeyOf(h, tt.path) == KeyOf(base(), pod) {
			t.Errorf("%s: the same key; karmada-apiserver could answer it differently", tt.name)
		}
	}
}

// TestCacheExpires: an admission holds for the TTL and not after it.
func TestCacheExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCache(5 * time.Second)
	c.now = func() time.Time { return now }
	k, other := KeyOf(http.Header{"Authorization": {"Bearer a"}}, "/p"), KeyOf(http.Header{"Authorization": {"Bearer b"}}, "/p")
	if c.Admitted(k) {
		t.Fatal("admitted before anything was remembered")
	}
	c.Remember(k)
	now = now.Add(4 * time.Second)
	if !c.Admitted(k) || c.Admitted(other) {
		t.Errorf("within the TTL: admitted %v, other key %v; want true, false", c.Admitted(k), c.Admitted(other))
	}
	now = now.Add(time.Second)
	if c.Admitted(k) {
		t.Error("admitted at the TTL")
	}
	if len(c.expires) != 0 {
		t.Errorf("%d entries left after expiry", len(c.expires))
	}
}

// TestCacheBounded: past maxEntries the cache drops what expired, or starts
// over, and never grows beyond it.
func TestCacheBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCache(time.Second)
	c.now = func() time.Time { return now }
	var k Key
	for i := range maxEntries + 10 {
		k[0], k[1], k[2] = byte(i), byte(i>>8), byte(i>>16)
		c.Remember(k)
	}
	if n := len(c.expires); n > maxEntries {
		t.Errorf("%d entries, bound %d", n, maxEntries)
	}
	if !c.Admitted(k) {
		t.Error("the last admission was dropped")
	}
}
