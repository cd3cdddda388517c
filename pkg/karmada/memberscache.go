package karmada

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// MemberReader reads an object's metadata in a member cluster
// (*MemberMetadata does, through the cluster proxy).
type MemberReader interface {
	Metadata(ctx context.Context, cluster string, resource schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error)
}

// CachedMemberMetadata remembers, for ttl, the member objects' metadata
// that next read successfully, so that in authorize mode the check that a
// member's pod is the template's copy (a round trip through the cluster
// proxy to the member, in series before every exec and attach: #27) is
// made once per pod and ttl rather than once per stream.
//
// What it delays: the check is still made on every request against the
// remembered labels and annotations, with the template's current UID, so a
// template deleted and created again is refused at once. Only a change on
// the member side is seen up to ttl late: Karmada's copy deleted and an
// object of the same name that Karmada does not manage created in its
// place (by someone with write access to the member) can still be reached
// as the gateway for at most ttl. Failed reads (not found, unreachable) are
// never remembered, so nothing refused is allowed later from the cache.
type CachedMemberMetadata struct {
	next MemberReader
	ttl  time.Duration
	now  func() time.Time

	mu      sync.Mutex
	entries map[memberKey]memberEntry
}

type memberKey struct {
	cluster         string
	resource        schema.GroupVersionResource
	namespace, name string
}

type memberEntry struct {
	meta    *metav1.PartialObjectMetadata
	expires time.Time
}

// maxCachedMembers bounds the entries; past it expired ones are dropped,
// and if none expired the cache starts over.
const maxCachedMembers = 100000

// NewCachedMemberMetadata caches next's answers for ttl (> 0).
func NewCachedMemberMetadata(next MemberReader, ttl time.Duration) *CachedMemberMetadata {
	return &CachedMemberMetadata{next: next, ttl: ttl, now: time.Now, entries: map[memberKey]memberEntry{}}
}

// Metadata returns the remembered metadata of the object if it was read
// less than ttl ago, else reads it through next and remembers a success.
// Callers must not modify the result.
func (c *CachedMemberMetadata) Metadata(ctx context.Context, cluster string, resource schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	key := memberKey{cluster: cluster, resource: resource, namespace: namespace, name: name}
	c.mu.Lock()
	e, ok := c.entries[key]
	now := c.now()
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.meta, nil
	}
	m, err := c.next.Metadata(ctx, cluster, resource, namespace, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(c.entries, key)
		return nil, err
	}
	if len(c.entries) >= maxCachedMembers {
		for k, v := range c.entries {
			if !now.Before(v.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxCachedMembers {
			clear(c.entries)
		}
	}
	c.entries[key] = memberEntry{meta: m, expires: c.now().Add(c.ttl)}
	return m, nil
}
