package bench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
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
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/resolver"
)

// Issue #15's target: at most 256 B per pod at 100k pods (what the
// gateway's caches would hold on a large CI fleet), and a lookup that adds
// nothing measurable to stream setup.
const (
	resolverLookupLimit = time.Microsecond
	resolverBytesLimit  = 256
	resolverTarget      = "< 1 µs/lookup, ≤ 256 B/pod"
)

// ResolverCost is the resolver measured in-process.
type ResolverCost struct {
	Pods          int
	BytesPerPod   float64       // live heap after GC for pods + bindings + indexes, per pod
	PodBytes      float64       // of which the pods metadata store
	BindingBytes  float64       // of which the bindings store and its index
	Heap          float64       // live heap of pods + bindings + indexes, in all
	RSSGrowth     float64       // this process's RSS after filling the stores minus before
	LoadCPU       time.Duration // process CPU time to build, transform and store them
	LabelLookup   time.Duration // Resolve of a labelled pod
	BindingLookup time.Duration // Resolve of a pod found through its binding
	AllocsPerOp   int64         // of the binding path
}

// Verdict is the resolver's target: both lookups and the heap per pod.
func (c ResolverCost) Verdict() Verdict {
	if AtMost(float64(max(c.LabelLookup, c.BindingLookup)), float64(resolverLookupLimit)) == Missed || AtMost(c.BytesPerPod, resolverBytesLimit) == Missed {
		return Missed
	}
	return Met
}

// fakeBinding is a pod's ResourceBinding as karmada-apiserver returns it,
// turned into the cached object by the gateway's own informer transform.
func fakeBinding(transform func(any) (any, error), ns, pod string, uid types.UID, cluster string) (any, error) {
	return transform(karmadatest.APIBinding(ns, pod, uid, cluster))
}

// fakePod is a pod template's metadata as the metadata informer receives
// it, before the gateway's transform (karmada.TrimPod). Half the pods carry
// the cluster label (labelled already).
func fakePod(ns, name string, uid types.UID, cluster string, labelled bool) *metav1.PartialObjectMetadata {
	labels := map[string]string{"app": "ci-job", "ci.example.com/pipeline": "1234567"}
	if labelled {
		labels[karmada.ClusterNameLabel] = cluster
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: uid, ResourceVersion: "123456780", GenerateName: "ci-job-",
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), Labels: labels,
		},
	}
}

// MeasureResolver fills informer stores (the ones the gateway's resolver
// reads, with the production binding index) with n pods and their bindings,
// takes the live heap they cost, and times Resolve with testing.Benchmark.
func MeasureResolver(n int) (ResolverCost, error) {
	const ns = "ci"
	clusters := []string{"member1", "member2"}
	// Returning what earlier sizes freed makes the RSS growth this size's own.
	debug.FreeOSMemory()
	before, rssBefore := karmadatest.LiveHeap(), selfRSS()
	cpuStart := selfCPU()
	inf := &karmada.Informers{
		Pods:     cache.NewSharedIndexInformer(&cache.ListWatch{}, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{}),
		Bindings: cache.NewSharedIndexInformer(&cache.ListWatch{}, &karmada.ResourceBinding{}, 0, cache.Indexers{karmada.BindingsByResourceIndex: karmada.IndexBindingByResource}),
		Clusters: cache.NewSharedIndexInformer(&cache.ListWatch{}, &karmada.Cluster{}, 0, cache.Indexers{}),
	}
	transform := karmada.TrimBinding
	uid := func(i int) types.UID { return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)) }
	for i := range n {
		pod, err := karmada.TrimPod(fakePod(ns, "ci-job-"+strconv.Itoa(i), uid(i), clusters[i%len(clusters)], i%2 == 0))
		if err != nil {
			return ResolverCost{}, err
		}
		if err := inf.Pods.GetIndexer().Add(pod); err != nil {
			return ResolverCost{}, err
		}
	}
	loadCPU := selfCPU() - cpuStart
	afterPods := karmadatest.LiveHeap()
	cpuStart = selfCPU()
	for i := range n {
		b, err := fakeBinding(transform, ns, "ci-job-"+strconv.Itoa(i), uid(i), clusters[i%len(clusters)])
		if err != nil {
			return ResolverCost{}, err
		}
		if err := inf.Bindings.GetIndexer().Add(b); err != nil {
			return ResolverCost{}, err
		}
	}
	for _, c := range clusters {
		cl := &karmada.Cluster{ObjectMeta: metav1.ObjectMeta{Name: c}, Status: karmada.ClusterStatus{Conditions: []metav1.Condition{{
			Type: karmada.ClusterConditionReady, Status: metav1.ConditionTrue, Message: "cluster is healthy and ready to accept workloads",
		}}}}
		if err := inf.Clusters.GetIndexer().Add(cl); err != nil {
			return ResolverCost{}, err
		}
	}
	loadCPU += selfCPU() - cpuStart
	after, rssAfter := karmadatest.LiveHeap(), selfRSS()
	heap := float64(after) - float64(before)
	out := ResolverCost{Pods: n, BytesPerPod: heap / float64(n), Heap: heap, RSSGrowth: rssAfter - rssBefore, LoadCPU: loadCPU,
		PodBytes: (float64(afterPods) - float64(before)) / float64(n), BindingBytes: (float64(after) - float64(afterPods)) / float64(n)}
	names := make([]string, n)
	for i := range names {
		names[i] = "ci-job-" + strconv.Itoa(i)
	}

	res, err := resolver.New(resolver.Options{Informers: inf, Metrics: metrics.New(prometheus.NewRegistry())})
	if err != nil {
		return ResolverCost{}, err
	}
	ctx := context.Background()
	var benchErr error
	lookup := func(offset int) testing.BenchmarkResult {
		return testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			i := offset
			for b.Loop() {
				if _, err := res.Resolve(ctx, ns, names[i%n]); err != nil {
					benchErr = err
					b.FailNow()
				}
				i += 2 // even pods are labelled, odd ones are found through their binding
			}
		})
	}
	label, binding := lookup(0), lookup(1)
	if benchErr != nil {
		return ResolverCost{}, fmt.Errorf("resolve: %w", benchErr)
	}
	out.LabelLookup = time.Duration(label.NsPerOp())
	out.BindingLookup = time.Duration(binding.NsPerOp())
	out.AllocsPerOp = binding.AllocsPerOp()
	runtime.KeepAlive(inf)
	return out, nil
}

// Resolver measures the resolver at each of Sizes.ResolverPods.
func (r *Runner) Resolver(context.Context) (*Table, error) {
	t := &Table{
		Title:   "Resolver (in-process)",
		Columns: []string{"pods in caches", "lookup, labelled pod", "lookup, via binding", "allocs/lookup (binding)", "heap per pod", "of which pod metadata", "of which binding", "target", "verdict"},
		Note: "Lookup: testing.Benchmark of Resolver.Resolve over pod names prepared beforehand. Heap per pod: live heap after GC of the " +
			"pods metadata store plus the ResourceBinding store and its spec.resource index, divided by pods; each pod has one binding " +
			"(as karmada-apiserver returns it, managed fields and annotations included, through the gateway's informer transform). Half the pods carry the cluster label.",
	}
	for _, n := range r.Sizes.ResolverPods {
		r.logf("resolver with %d pods", n)
		c, err := MeasureResolver(n)
		if err != nil {
			return nil, err
		}
		t.Add(strconv.Itoa(n), FormatDuration(c.LabelLookup), FormatDuration(c.BindingLookup), strconv.FormatInt(c.AllocsPerOp, 10),
			FormatBytes(c.BytesPerPod), FormatBytes(c.PodBytes), FormatBytes(c.BindingBytes), resolverTarget, string(c.Verdict()))
	}
	return t, nil
}
