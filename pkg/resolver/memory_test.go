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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada/karmadatest"
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
			before := karmadatest.LiveHeap()
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
			afterPods := karmadatest.LiveHeap()
			for i := range n {
				obj, err := karmada.TrimBinding(karmadatest.APIBinding(ns, name(i), uid(i), clusters[i%2]))
				if err != nil {
					b.Fatal(err)
				}
				if err := inf.Bindings.GetIndexer().Add(obj); err != nil {
					b.Fatal(err)
				}
			}
			after := karmadatest.LiveHeap()
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
