package karmada

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// ServiceGVR is the resource of Service templates in karmada-apiserver.
var ServiceGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}

// ResourceKey is the BindingsByResourceIndex key of a namespaced object.
func ResourceKey(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// IndexBindingByResource is the BindingsByResourceIndex function. A binding
// named as Karmada names the binding of its template (BindingName, in the
// template's namespace) is not indexed: bindingOf finds it by that name. The
// index costs a map per indexed binding, about 250 bytes per pod when every
// binding was in it; now it holds only bindings named otherwise.
func IndexBindingByResource(obj any) ([]string, error) {
	namespace, name, r, ok := BindingResource(obj)
	if !ok {
		return nil, fmt.Errorf("index %T: not a ResourceBinding", obj)
	}
	if namespace == r.Namespace && name == BindingName(r.Name, r.Kind) {
		return nil, nil
	}
	return []string{ResourceKey(r.Kind, r.Namespace, r.Name)}, nil
}

// Informers are the shared caches the resolver and the labeler read. Both
// consumers add handlers to the same informers, so the gateway keeps one
// watch per resource on karmada-apiserver however many features use it.
type Informers struct {
	// Pods is a metadata-only informer on Pod templates: the gateway never
	// needs a pod's spec or status. It holds *CachedPod (read with PodOf).
	Pods cache.SharedIndexInformer
	// Bindings holds *CachedBinding, indexed by BindingsByResourceIndex
	// (read with BindingOf).
	Bindings cache.SharedIndexInformer
	// Clusters holds *Cluster.
	Clusters cache.SharedIndexInformer
	// Services, when enabled (InformersOptions.Services), holds
	// *corev1.Service trimmed to name, namespace, UID and spec.selector: the
	// service proxy's fallback needs the selector, which a metadata-only
	// informer does not carry.
	Services cache.SharedIndexInformer

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
	// Services adds the Services informer (list/watch services RBAC).
	Services bool
}

// NewInformers builds the shared informers. Call Start once every consumer
// has added its handlers.
func NewInformers(opts InformersOptions) (*Informers, error) {
	md := metadatainformer.NewSharedInformerFactory(opts.Metadata, opts.Resync)
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(opts.Dynamic, opts.Resync)
	i := &Informers{
		Pods:     md.ForResource(PodGVR).Informer(),
		Bindings: dyn.ForResource(ResourceBindingGVR).Informer(),
		Clusters: clusterInformer(dyn),
		metrics:  opts.Metrics,
		start:    []func(<-chan struct{}){md.Start, dyn.Start},
	}
	trimPod := TrimPod
	if opts.Services {
		trimPod = trimPodKeepingLabels
	}
	if err := i.Pods.SetTransform(trimPod); err != nil {
		return nil, fmt.Errorf("pods informer transform: %w", err)
	}
	if err := i.Bindings.SetTransform(TrimBinding); err != nil {
		return nil, fmt.Errorf("bindings informer transform: %w", err)
	}
	if opts.Services {
		i.Services = dyn.ForResource(ServiceGVR).Informer()
		if err := i.Services.SetTransform(trimService); err != nil {
			return nil, fmt.Errorf("services informer transform: %w", err)
		}
	}
	if err := i.Bindings.AddIndexers(cache.Indexers{BindingsByResourceIndex: IndexBindingByResource}); err != nil {
		return nil, fmt.Errorf("bindings index: %w", err)
	}
	return i, nil
}

// NewClusterInformer is a Cluster informer alone, holding *Cluster, for a
// process that reads nothing else of Karmada's; start it with its Run.
func NewClusterInformer(client dynamic.Interface, resync time.Duration) cache.SharedIndexInformer {
	return clusterInformer(dynamicinformer.NewDynamicSharedInformerFactory(client, resync))
}

func clusterInformer(f dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
	inf := f.ForResource(ClusterGVR).Informer()
	// Only fails on an informer already started, which this one is not.
	_ = inf.SetTransform(Transform[Cluster]())
	return inf
}

// TrimPod is the pods informer's transform: it keeps of a pod's metadata
// what the resolver and the labeler read, as a *CachedPod. Exported so
// benchmarks measure what the gateway caches.
func TrimPod(obj any) (any, error) { return trimPod(obj, false) }

// trimPodKeepingLabels is TrimPod keeping every label, for the Services
// cache's selector fallback.
func trimPodKeepingLabels(obj any) (any, error) { return trimPod(obj, true) }

func trimPod(obj any, keepLabels bool) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return cachePod(m, keepLabels), nil
	}
	return obj, nil // tombstones, and objects transformed already
}

// trimService converts a Service to what the resolver reads: its identity
// and selector. Ports, status and all other metadata are dropped.
func trimService(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	selector, _, err := unstructured.NestedStringMap(u.Object, "spec", "selector")
	if err != nil {
		return nil, fmt.Errorf("service %s/%s: spec.selector: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(),
			ResourceVersion: u.GetResourceVersion(), DeletionTimestamp: u.GetDeletionTimestamp(),
		},
		Spec: corev1.ServiceSpec{Selector: selector},
	}, nil
}

// TrimBinding is the bindings informer's transform: it converts a binding
// to a *CachedBinding, which keeps only what is read (managed fields,
// annotations, labels, owner references and status conditions are most of a
// binding, and there is one binding per pod). Applied messages are kept only
// for clusters Karmada failed to apply to.
// Exported so benchmarks measure what the gateway caches.
func TrimBinding(obj any) (any, error) {
	out, err := Transform[ResourceBinding]()(obj)
	if b, ok := out.(*ResourceBinding); ok && err == nil {
		return cacheBinding(b), nil
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
	if i.Services != nil {
		i.metrics.CacheObjects.WithLabelValues("services").Set(float64(len(i.Services.GetStore().ListKeys())))
	}
}

// HasSynced reports whether every cache has completed its initial list.
func (i *Informers) HasSynced() bool {
	return i.Pods.HasSynced() && i.Bindings.HasSynced() && i.Clusters.HasSynced() &&
		(i.Services == nil || i.Services.HasSynced())
}

// WaitForCacheSync blocks until the caches are synced or ctx ends.
func (i *Informers) WaitForCacheSync(ctx context.Context) bool {
	synced := []cache.InformerSynced{i.Pods.HasSynced, i.Bindings.HasSynced, i.Clusters.HasSynced}
	if i.Services != nil {
		synced = append(synced, i.Services.HasSynced)
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// BindingOf returns the ResourceBinding of the template of kind ("Pod",
// "Service") namespace/name with the given UID, or nil, and how many
// bindings qualified. Only bindings in the template's own namespace that
// bind a core v1 object count, so whoever can create a binding elsewhere
// cannot steer it; a binding naming another UID belongs to an earlier
// template of the same name. Karmada makes one binding per template; should
// there be more, the lowest name wins so callers never flap between them.
// It returns the cached binding itself: lookups on the request path need not
// allocate.
func (i *Informers) BindingOf(kind, namespace, name string, uid types.UID) (*CachedBinding, int, error) {
	indexer := i.Bindings.GetIndexer()
	objs, err := indexer.ByIndex(BindingsByResourceIndex, ResourceKey(kind, namespace, name))
	if err != nil {
		return nil, 0, fmt.Errorf("bindings of %s %s/%s: %w", kind, namespace, name, err)
	}
	// The binding named as Karmada names it is not in the index (see
	// IndexBindingByResource); it counts when it binds this template.
	if obj, ok, _ := indexer.GetByKey(namespace + "/" + BindingName(name, kind)); ok {
		if _, _, r, ok := BindingResource(obj); ok && r.Kind == kind && r.Namespace == namespace && r.Name == name {
			objs = append(objs, obj)
		}
	}
	var best *CachedBinding
	qualified := 0
	for _, obj := range objs {
		b, ok := bindingOfObject(obj)
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
