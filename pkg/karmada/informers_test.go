package karmada

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
)

const testNS = "team-a"

var (
	testBindingGVK = ResourceBindingGVR.GroupVersion().WithKind("ResourceBinding")
	testClusterGVK = ClusterGVR.GroupVersion().WithKind("Cluster")
)

func testPod(name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("uid-" + name)},
	}
}

// testBinding binds the Pod podName in namespace ns, as Karmada writes it.
func testBinding(ns, name, podName, podUID string, clusters ...string) *ResourceBinding {
	b := &ResourceBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ResourceBindingSpec{Resource: ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: testNS, Name: podName, UID: podUID,
		}},
	}
	for _, c := range clusters {
		b.Spec.Clusters = append(b.Spec.Clusters, TargetCluster{Name: c})
	}
	return b
}

func testCluster(name string) *Cluster {
	return &Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func toUnstructured(t *testing.T, obj runtime.Object, gvk schema.GroupVersionKind) *unstructured.Unstructured {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	return u
}

// expiringWatches makes the first watch of every resource end at once with
// the 410 Gone (Expired) error event an apiserver sends once the watch's
// resourceVersion has been compacted away; later watches reach the tracker.
// Before the expiring watch is returned, onFirstWatch changes objects: no
// watch is open on the tracker then, so the informer can only learn of the
// change by listing again. It counts lists per resource.
type expiringWatches struct {
	onFirstWatch func(gvr schema.GroupVersionResource)

	mu      sync.Mutex
	watches map[schema.GroupVersionResource]int
	lists   map[schema.GroupVersionResource]int
}

func newExpiringWatches(onFirstWatch func(schema.GroupVersionResource)) *expiringWatches {
	return &expiringWatches{
		onFirstWatch: onFirstWatch,
		watches:      map[schema.GroupVersionResource]int{},
		lists:        map[schema.GroupVersionResource]int{},
	}
}

func (e *expiringWatches) install(f *clienttesting.Fake) {
	f.PrependReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		e.mu.Lock()
		e.lists[a.GetResource()]++
		e.mu.Unlock()
		return false, nil, nil // the tracker answers
	})
	f.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		gvr := a.GetResource()
		e.mu.Lock()
		e.watches[gvr]++
		first := e.watches[gvr] == 1
		e.mu.Unlock()
		if !first {
			return false, nil, nil
		}
		e.onFirstWatch(gvr)
		w := watch.NewFakeWithChanSize(1, false)
		w.Error(&metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusGone,
			Reason:  metav1.StatusReasonExpired,
			Message: "too old resource version: 1 (2)",
		})
		w.Stop()
		return true, w, nil
	})
}

func (e *expiringWatches) counts(gvr schema.GroupVersionResource) (lists, watches int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lists[gvr], e.watches[gvr]
}

// TestInformersRelistAfterWatchExpiry: a watch that expires (410 Gone) must
// make each cache list again, so an object created while no watch was open
// still reaches the cache and the binding index; otherwise the gateway would
// miss a pod's binding until the next resync (never, with resync off).
func TestInformersRelistAfterWatchExpiry(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, testPod("before"))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{
			ResourceBindingGVR: "ResourceBindingList",
			ClusterGVR:         "ClusterList",
		},
		toUnstructured(t, testBinding(testNS, "before-pod", "before", "uid-before", "member1"), testBindingGVK),
		toUnstructured(t, testCluster("member1"), testClusterGVK),
	)

	// Written with the trackers directly: the reactor runs under the fake's
	// lock, which a client call would take again.
	created := make(chan schema.GroupVersionResource, 3)
	onFirstWatch := func(gvr schema.GroupVersionResource) {
		var err error
		switch gvr {
		case PodGVR:
			err = md.Tracker().Create(PodGVR, testPod("after"), testNS)
		case ResourceBindingGVR:
			err = dyn.Tracker().Create(ResourceBindingGVR, toUnstructured(t, testBinding(testNS, "after-pod", "after", "uid-after", "member2"), testBindingGVK), testNS)
		case ClusterGVR:
			err = dyn.Tracker().Create(ClusterGVR, toUnstructured(t, testCluster("member2"), testClusterGVK), "")
		default:
			t.Errorf("unexpected watch on %v", gvr)
			return
		}
		if err != nil {
			t.Errorf("create %v while the watch is down: %v", gvr, err)
		}
		created <- gvr
	}
	mdWatches := newExpiringWatches(onFirstWatch)
	mdWatches.install(&md.Fake)
	dynWatches := newExpiringWatches(onFirstWatch)
	dynWatches.install(&dyn.Fake)

	inf, err := NewInformers(InformersOptions{Metadata: md, Dynamic: dyn})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx)
	if !inf.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}

	for _, tc := range []struct {
		gvr      schema.GroupVersionResource
		informer cache.SharedIndexInformer
		watches  *expiringWatches
		key      string
	}{
		{PodGVR, inf.Pods, mdWatches, testNS + "/after"},
		{ResourceBindingGVR, inf.Bindings, dynWatches, testNS + "/after-pod"},
		{ClusterGVR, inf.Clusters, dynWatches, "member2"},
	} {
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			_, ok := keys(tc.informer, tc.key)
			return ok, nil
		})
		if err != nil {
			got, _ := keys(tc.informer, tc.key)
			lists, watches := tc.watches.counts(tc.gvr)
			t.Errorf("%s: %s never reached the cache after the watch expired (cache %v, %d lists, %d watches)", tc.gvr.Resource, tc.key, got, lists, watches)
			continue
		}
		if lists, watches := tc.watches.counts(tc.gvr); lists < 2 || watches < 1 {
			t.Errorf("%s: %d lists and %d watches; want the initial list, the expired watch and a relist", tc.gvr.Resource, lists, watches)
		}
	}
	if _, ok := keys(inf.Pods, testNS+"/before"); !ok {
		t.Errorf("pods: the relist dropped %s/before", testNS)
	}
	if len(created) != 3 {
		t.Errorf("objects created while watches were down: %d, want 3 (one per resource)", len(created))
	}

	// The relist rebuilt the spec.resource index, not only the store.
	b, n, err := inf.BindingOf("Pod", testNS, "after", "uid-after")
	if err != nil || n != 1 || b == nil || b.Name != "after-pod" {
		t.Fatalf("BindingOf(after) = %v, %d, %v; want after-pod, 1", b, n, err)
	}
	if got := b.Spec.Clusters; len(got) != 1 || got[0].Name != "member2" {
		t.Errorf("after-pod clusters = %v, want [member2] (the transform ran on the relisted object)", got)
	}
}

// keys returns the informer's store keys and whether want is among them.
func keys(inf cache.SharedIndexInformer, want string) ([]string, bool) {
	ks := inf.GetStore().ListKeys()
	for _, k := range ks {
		if k == want {
			return ks, true
		}
	}
	return ks, false
}

func TestTrimBindingKeepsOnlyWhatIsRead(t *testing.T) {
	const conflict = "resource(kind=Pod, ci/job-42) already exists in the cluster member2 and the work.karmada.io/conflict-resolution strategy value is empty, Karmada will not manage this resource"
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "work.karmada.io/v1alpha2",
		"kind":       "ResourceBinding",
		"metadata": map[string]any{
			"name": "job-42-pod", "namespace": "ci", "uid": "b-uid",
			"labels":          map[string]any{PermanentIDLabel: "x"},
			"annotations":     map[string]any{"a": "b"},
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "job-42", "uid": "p-uid"}},
			"managedFields":   []any{map[string]any{"manager": "karmada-controller-manager"}},
		},
		"spec": map[string]any{
			"resource":            map[string]any{"apiVersion": "v1", "kind": "Pod", "namespace": "ci", "name": "job-42", "uid": "p-uid"},
			"clusters":            []any{map[string]any{"name": "member1"}},
			"replicaRequirements": map[string]any{"resourceRequest": map[string]any{"cpu": "1"}},
		},
		"status": map[string]any{
			"lastScheduledTime": "2026-01-02T03:04:06Z",
			"aggregatedStatus": []any{
				map[string]any{"clusterName": "member1", "applied": true, "appliedMessage": "Manifest has been successfully applied", "health": "Healthy"},
				map[string]any{"clusterName": "member2", "applied": false, "appliedMessage": conflict, "health": "Unknown"},
			},
			"conditions": []any{map[string]any{"type": "Scheduled", "status": "True", "reason": "Success", "message": "Binding has been scheduled successfully.", "lastTransitionTime": "2026-01-02T03:04:06Z"}},
		},
	}}
	out, err := TrimBinding(u)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := out.(*CachedBinding)
	if !ok {
		t.Fatalf("TrimBinding returned %T, want *CachedBinding", out)
	}
	if b.Status.AggregatedStatus[0].AppliedMessage != "" || b.Spec.Resource.ResourceVersion != "" {
		t.Errorf("not trimmed: %+v", b)
	}
	if b.Name != "job-42-pod" || b.Namespace != "ci" || b.Spec.Resource.UID != "p-uid" || len(b.Spec.Clusters) != 1 ||
		b.Status.LastScheduledTime == nil || len(b.Status.AggregatedStatus) != 2 || !b.Status.AggregatedStatus[0].Applied ||
		b.Status.AggregatedStatus[0].Health != "Healthy" {
		t.Errorf("read fields lost: %+v", b)
	}
	// A failure's message is what the resolver reports when it refuses.
	if applied, msg := b.AppliedOn("member2"); applied || msg != conflict {
		t.Errorf("AppliedOn(member2) = %v, %q; want false and Karmada's message", applied, msg)
	}
	if applied, msg := b.AppliedOn("member3"); applied || msg != "" {
		t.Errorf("AppliedOn(member3), not reported = %v, %q; want false, empty", applied, msg)
	}
	if tomb := (cache.DeletedFinalStateUnknown{Key: "ci/x"}); !reflect.DeepEqual(mustTrim(t, tomb), tomb) {
		t.Error("tombstone changed by TrimBinding")
	}
}

func mustTrim(t *testing.T, obj any) any {
	t.Helper()
	out, err := TrimBinding(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTruncateKeepsRunes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"short", "short"},
		{strings.Repeat("a", maxAppliedMessage+1), strings.Repeat("a", maxAppliedMessage) + "..."},
		// a 3-byte rune across the limit is dropped whole
		{strings.Repeat("a", maxAppliedMessage-1) + "€", strings.Repeat("a", maxAppliedMessage-1) + "..."},
	} {
		if got := truncate(tc.in, maxAppliedMessage); got != tc.want || !utf8.ValidString(got) {
			t.Errorf("truncate(%d bytes) = %d bytes %q..., want %d bytes", len(tc.in), len(got), got[max(0, len(got)-8):], len(tc.want))
		}
	}
}
