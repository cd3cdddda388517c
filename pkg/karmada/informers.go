package karmada

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// BindingsByResourceIndex indexes ResourceBindings by the template they bind
// (see ResourceKey), so a pod's binding is found without guessing its name.
const BindingsByResourceIndex = "spec.resource"

// PodGVR is the resource of pod templates in karmada-apiserver.
var PodGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// ResourceKey is the BindingsByResourceIndex key of a namespaced object.
func ResourceKey(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// IndexBindingByResource is the BindingsByResourceIndex function.
func IndexBindingByResource(obj any) ([]string, error) {
	b, ok := obj.(*ResourceBinding)
	if !ok {
		return nil, fmt.Errorf("index %T: not a *karmada.ResourceBinding", obj)
	}
	r := b.Spec.Resource
	return []string{ResourceKey(r.Kind, r.Namespace, r.Name)}, nil
}

// Informers are the shared caches the resolver and the labeler read. Both
// consumers add handlers to the same informers, so the gateway keeps one
// watch per resource on karmada-apiserver however many features use it.
type Informers struct {
	// Pods is a metadata-only informer on Pod templates: the gateway never
	// needs a pod's spec or status, and metadata keeps the cache small.
	Pods cache.SharedIndexInformer
	// Bindings holds *ResourceBinding, indexed by BindingsByResourceIndex.
	Bindings cache.SharedIndexInformer
	// Clusters holds *Cluster.
	Clusters cache.SharedIndexInformer

	metrics *metrics.Metrics
	start   []func(<-chan struct{})
}

// InformersOptions configures NewInformers.
type InformersOptions struct {
	Metadata metadata.Interface
	Dynamic  dynamic.Interface
	// Resync is the informers' resync period; 0 disables resync.
	Resync time.Duration
	// Metrics, when set, receives the cache sizes.
	Metrics *metrics.Metrics
}

// NewInformers builds the shared informers. Call Start once every consumer
// has added its handlers.
func NewInformers(opts InformersOptions) (*Informers, error) {
	md := metadatainformer.NewSharedInformerFactory(opts.Metadata, opts.Resync)
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(opts.Dynamic, opts.Resync)
	i := &Informers{
		Pods:     md.ForResource(PodGVR).Informer(),
		Bindings: dyn.ForResource(ResourceBindingGVR).Informer(),
		Clusters: dyn.ForResource(ClusterGVR).Informer(),
		metrics:  opts.Metrics,
		start:    []func(<-chan struct{}){md.Start, dyn.Start},
	}
	if err := i.Pods.SetTransform(trimPodMetadata); err != nil {
		return nil, fmt.Errorf("pods informer transform: %w", err)
	}
	if err := i.Bindings.SetTransform(trimBinding); err != nil {
		return nil, fmt.Errorf("bindings informer transform: %w", err)
	}
	if err := i.Clusters.SetTransform(Transform[Cluster]()); err != nil {
		return nil, fmt.Errorf("clusters informer transform: %w", err)
	}
	if err := i.Bindings.AddIndexers(cache.Indexers{BindingsByResourceIndex: IndexBindingByResource}); err != nil {
		return nil, fmt.Errorf("bindings index: %w", err)
	}
	return i, nil
}

// trimPodMetadata drops what neither the resolver nor the labeler reads
// (managed fields, annotations), which is most of a pod's metadata.
func trimPodMetadata(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields = nil
		m.Annotations = nil
	}
	return obj, nil
}

// trimBinding converts a binding and drops the metadata nothing reads:
// managed fields, annotations, labels and owner references are most of a
// binding's metadata, and there is one binding per pod.
func trimBinding(obj any) (any, error) {
	out, err := Transform[ResourceBinding]()(obj)
	if b, ok := out.(*ResourceBinding); ok && err == nil {
		b.ManagedFields = nil
		b.Annotations = nil
		b.Labels = nil
		b.OwnerReferences = nil
	}
	return out, err
}

// Start starts the informers and, when metrics are set, reports cache sizes
// every interval until ctx ends.
func (i *Informers) Start(ctx context.Context) {
	for _, start := range i.start {
		start(ctx.Done())
	}
	if i.metrics == nil {
		return
	}
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			i.reportSizes()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (i *Informers) reportSizes() {
	i.metrics.CacheObjects.WithLabelValues("pods").Set(float64(len(i.Pods.GetStore().ListKeys())))
	i.metrics.CacheObjects.WithLabelValues("resourcebindings").Set(float64(len(i.Bindings.GetStore().ListKeys())))
	i.metrics.CacheObjects.WithLabelValues("clusters").Set(float64(len(i.Clusters.GetStore().ListKeys())))
}

// HasSynced reports whether every cache has completed its initial list.
func (i *Informers) HasSynced() bool {
	return i.Pods.HasSynced() && i.Bindings.HasSynced() && i.Clusters.HasSynced()
}

// WaitForCacheSync blocks until the caches are synced or ctx ends.
func (i *Informers) WaitForCacheSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), i.Pods.HasSynced, i.Bindings.HasSynced, i.Clusters.HasSynced)
}

// BindingOf returns the ResourceBinding of the Pod template namespace/name
// with the given UID, or nil, and how many bindings qualified. Only bindings
// in the pod's own namespace that bind a core v1 Pod count, so whoever can
// create a binding elsewhere cannot steer this pod; a binding naming another
// UID belongs to an earlier pod of the same name. Karmada makes one binding
// per template; should there be more, the lowest name wins so callers never
// flap between them.
func (i *Informers) BindingOf(namespace, name string, uid types.UID) (*ResourceBinding, int, error) {
	objs, err := i.Bindings.GetIndexer().ByIndex(BindingsByResourceIndex, ResourceKey("Pod", namespace, name))
	if err != nil {
		return nil, 0, fmt.Errorf("bindings of pod %s/%s: %w", namespace, name, err)
	}
	var best *ResourceBinding
	qualified := 0
	for _, obj := range objs {
		b, ok := obj.(*ResourceBinding)
		if !ok || b.Namespace != namespace || b.Spec.Resource.APIVersion != "v1" {
			continue
		}
		if ref := types.UID(b.Spec.Resource.UID); ref != "" && uid != "" && ref != uid {
			continue
		}
		qualified++
		if best == nil || b.Name < best.Name {
			best = b
		}
	}
	return best, qualified, nil
}
