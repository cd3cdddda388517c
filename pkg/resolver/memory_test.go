package resolver

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// apiPod is a pod template's metadata as the metadata informer receives it
// from karmada-apiserver: a GitLab Runner job pod, managed fields and
// annotations included. Half the pods carry the cluster label already.
func apiPod(name string, uid types.UID, cluster string, labelled bool) *metav1.PartialObjectMetadata {
	labels := map[string]string{"pod": name, "project.runner.gitlab.com/id": "42", "manager": "gitlab-runner"}
	if labelled {
		labels[karmada.ClusterNameLabel] = cluster
	}
	ts := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: uid, ResourceVersion: "123456780", GenerateName: "runner-abc123-project-42-concurrent-0-",
			CreationTimestamp: ts, Labels: labels,
			Annotations: map[string]string{"job.runner.gitlab.com/url": "https://gitlab.example.com/group/project/-/jobs/123456789"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "gitlab-runner", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:pod":{}}}}`)},
			}},
		},
	}
}

// apiBinding is a pod's ResourceBinding as karmada-apiserver returns it.
func apiBinding(pod string, uid types.UID, cluster string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
		"metadata": map[string]any{
			"name": karmada.BindingName(pod, "Pod"), "namespace": ns, "uid": "b-" + string(uid), "resourceVersion": "123456789",
			"generation": int64(2), "creationTimestamp": "2026-01-02T03:04:05Z",
			"labels": map[string]any{
				"propagationpolicy.karmada.io/permanent-id": "7d0c0a7e-9d0b-4b4c-8f49-3f7a1b2c3d4e",
				"resourcebinding.karmada.io/permanent-id":   "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
			},
			"annotations": map[string]any{
				"policy.karmada.io/applied-placement":    `{"clusterAffinity":{"clusterNames":["member1","member2"]}}`,
				"propagationpolicy.karmada.io/name":      "ci",
				"propagationpolicy.karmada.io/namespace": ns,
			},
			"ownerReferences": []any{map[string]any{
				"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": string(uid), "controller": true, "blockOwnerDeletion": true,
			}},
			"managedFields": []any{map[string]any{
				"manager": "karmada-controller-manager", "operation": "Update", "apiVersion": "work.karmada.io/v1alpha2",
				"time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1",
				"fieldsV1": map[string]any{"f:spec": map[string]any{"f:clusters": map[string]any{}, "f:resource": map[string]any{}}},
			}},
		},
		"spec": map[string]any{
			"resource": map[string]any{"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": pod, "uid": string(uid), "resourceVersion": "123456780"},
			"clusters": []any{map[string]any{"name": cluster}},
		},
		"status": map[string]any{
			"lastScheduledTime": "2026-01-02T03:04:06Z",
			"aggregatedStatus":  []any{map[string]any{"clusterName": cluster, "applied": true, "health": "Healthy", "appliedMessage": "Manifest has been successfully applied"}},
			"conditions": []any{
				map[string]any{"type": "Scheduled", "status": "True", "reason": "Success", "message": "Binding has been scheduled successfully.", "lastTransitionTime": "2026-01-02T03:04:06Z"},
				map[string]any{"type": "FullyApplied", "status": "True", "reason": "FullyAppliedSuccess", "message": "All works have been successfully applied", "lastTransitionTime": "2026-01-02T03:04:07Z"},
			},
		},
	}}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkResolverMemory fills the stores the resolver reads with n pods
// and their bindings, each passed through the informers' own transforms
// and indexes, and reports the live heap they cost per pod (after GC), then
// times Resolve among them.
func BenchmarkResolverMemory(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run("pods="+strconv.Itoa(n), func(b *testing.B) {
			clusters := []string{"member1", "member2"}
			name := func(i int) string { return "runner-abc123-project-42-concurrent-" + strconv.Itoa(i) }
			uid := func(i int) types.UID { return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)) }
			before := liveHeap()
			inf := &karmada.Informers{
				Pods:     cache.NewSharedIndexInformer(&cache.ListWatch{}, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{}),
				Bindings: cache.NewSharedIndexInformer(&cache.ListWatch{}, &karmada.ResourceBinding{}, 0, cache.Indexers{karmada.BindingsByResourceIndex: karmada.IndexBindingByResource}),
				Clusters: cache.NewSharedIndexInformer(&cache.ListWatch{}, &karmada.Cluster{}, 0, cache.Indexers{}),
			}
			for i := range n {
				obj, err := karmada.TrimPod(apiPod(name(i), uid(i), clusters[i%2], i%2 == 0))
				if err != nil {
					b.Fatal(err)
				}
				if err := inf.Pods.GetIndexer().Add(obj); err != nil {
					b.Fatal(err)
				}
			}
			afterPods := liveHeap()
			for i := range n {
				obj, err := karmada.TrimBinding(apiBinding(name(i), uid(i), clusters[i%2]))
				if err != nil {
					b.Fatal(err)
				}
				if err := inf.Bindings.GetIndexer().Add(obj); err != nil {
					b.Fatal(err)
				}
			}
			after := liveHeap()
			for _, c := range clusters {
				if err := inf.Clusters.GetIndexer().Add(cluster(c, true, "cluster is healthy and ready to accept workloads")); err != nil {
					b.Fatal(err)
				}
			}
			r, err := New(Options{Informers: inf, Metrics: metrics.New(prometheus.NewRegistry())})
			if err != nil {
				b.Fatal(err)
			}
			names := make([]string, n)
			for i := range names {
				names[i] = name(i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// Even pods are labelled, odd ones resolve through their binding.
				got, err := r.Resolve(ctx, ns, names[i%n])
				if want := clusters[i%n%2]; err != nil || got != want {
					b.Fatalf("Resolve(%s) = %q, %v; want %q", names[i%n], got, err, want)
				}
				i++
			}
			b.ReportMetric((float64(after)-float64(before))/float64(n), "B/pod")
			b.ReportMetric((float64(afterPods)-float64(before))/float64(n), "pod-B/pod")
			b.ReportMetric((float64(after)-float64(afterPods))/float64(n), "binding-B/pod")
			runtime.KeepAlive(inf)
		})
	}
}
