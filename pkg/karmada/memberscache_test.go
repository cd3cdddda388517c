package karmada

import (
	"context"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeMember answers Metadata with whatever the test set last, counting reads.
type fakeMember struct {
	mu    sync.Mutex
	meta  *metav1.PartialObjectMetadata
	err   error
	reads int
}

func (f *fakeMember) set(m *metav1.PartialObjectMetadata, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.meta, f.err = m, err
}

func (f *fakeMember) Metadata(context.Context, string, schema.GroupVersionResource, string, string) (*metav1.PartialObjectMetadata, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.meta, f.err
}

// TestCachedMemberMetadataDelaysAtMostTTLAndNeverCachesRefusals covers
// --member-copy-cache-ttl: a copy read within the TTL is not read again; a
// member answer that flips to a refusal (403 for the gateway) or to an
// object Karmada does not manage is what the next request after the TTL
// gets, so the check refuses it then; a refusal or a missing copy is never
// remembered (the next request reads again). Dropping the expiry check
// makes the flipped answer never seen; caching errors makes the missing
// copy stay missing.
func TestCachedMemberMetadataDelaysAtMostTTLAndNeverCachesRefusals(t *testing.T) {
	const ttl = 5 * time.Second
	now := time.Unix(1000, 0)
	fake := &fakeMember{}
	c := NewCachedMemberMetadata(fake, ttl)
	c.now = func() time.Time { return now }
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	read := func() (*metav1.PartialObjectMetadata, error) {
		return c.Metadata(t.Context(), "member1", pods, "ns", "pod")
	}
	copyOf := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "pod",
		Labels: map[string]string{ManagedLabel: "true"}, Annotations: map[string]string{TemplateUIDAnnotation: "uid-1"}}}

	fake.set(copyOf, nil)
	if m, err := read(); err != nil || m != copyOf {
		t.Fatalf("first read: %v, %v", m, err)
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "pod", nil)
	fake.set(nil, forbidden)
	now = now.Add(ttl - time.Millisecond)
	if m, err := read(); err != nil || m != copyOf || fake.reads != 1 {
		t.Fatalf("within the TTL: %v, %v after %d reads; want the remembered copy, 1 read", m, err, fake.reads)
	}
	now = now.Add(time.Millisecond)
	if _, err := read(); !apierrors.IsForbidden(err) {
		t.Fatalf("after the TTL the member refuses: got %v, want its 403", err)
	}
	if _, err := read(); !apierrors.IsForbidden(err) || fake.reads != 3 {
		t.Fatalf("a refusal must not be remembered: %v after %d reads, want 403 read again (3 reads)", err, fake.reads)
	}

	notKarmadas := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "pod"}}
	fake.set(copyOf, nil)
	if _, err := read(); err != nil {
		t.Fatal(err)
	}
	fake.set(notKarmadas, nil)
	now = now.Add(ttl)
	if m, err := read(); err != nil || m != notKarmadas {
		t.Fatalf("after the TTL: %v, %v; want the object now in the member (which the copy check refuses)", m, err)
	}

	fake.set(nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "pod"))
	now = now.Add(ttl)
	if _, err := read(); !apierrors.IsNotFound(err) {
		t.Fatalf("missing copy: %v", err)
	}
	fake.set(copyOf, nil)
	if m, err := read(); err != nil || m != copyOf {
		t.Fatalf("a missing copy must not be remembered: %v, %v", m, err)
	}
}
