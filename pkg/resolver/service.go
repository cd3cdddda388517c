package resolver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

var servicesResource = schema.GroupResource{Resource: "services"}

// ResolveService returns the member cluster that serves the Service
// namespace/name, by the rules in the package doc. Its errors are
// *apierrors.StatusError: 404 when the Service is not in the cache, 409 when
// its pods run on several clusters, 503 when nothing places it on a usable
// cluster.
func (r *Resolver) ResolveService(ctx context.Context, namespace, name string) (string, error) {
	if r.informers.Services == nil {
		return "", apierrors.NewInternalError(fmt.Errorf("service resolution is not enabled: the gateway has no Services cache"))
	}
	obj, exists, err := r.informers.Services.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return "", apierrors.NewNotFound(servicesResource, name)
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return "", apierrors.NewNotFound(servicesResource, name)
	}

	// A Service placed by its own ResourceBinding goes where Karmada put it,
	// by the same candidate and readiness rule as pods.
	b, qualified, err := r.informers.BindingOf("Service", namespace, name, svc.UID)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Looking up ResourceBinding", "service", klog.KRef(namespace, name))
	}
	if qualified > 1 {
		klog.FromContext(ctx).Info("Several ResourceBindings point at service; using the lowest name",
			"service", klog.KRef(namespace, name), "count", qualified, "chosen", b.Name)
	}
	if b != nil && len(b.Spec.Clusters) > 0 {
		var cluster string
		if pin, ok := PinnedCluster(ctx); ok {
			if _, err := r.onPinned("service", namespace, name, b, pin); err != nil {
				return "", err
			}
			cluster = pin
		} else if cluster, _, err = r.bindingCluster(ctx, "service", namespace, name, b); err != nil {
			return "", err
		}
		if _, err := r.verifyCopy(ctx, karmada.ServiceGVR, "service", namespace, name, svc.UID, cluster); err != nil {
			return "", err
		}
		return cluster, nil
	}
	if r.members != nil {
		// Without a binding, no member Service is Karmada's copy of this
		// one: a Service of that name in the pods' member is whoever
		// created it there, and the gateway must not act on it as itself.
		return "", unavailable("service", name, fmt.Sprintf("service %q is not placed on any member cluster: it has no ResourceBinding (is a PropagationPolicy selecting it?); "+
			"acting as itself, the gateway reaches only Karmada's copy of a Service", namespace+"/"+name))
	}
	return r.selectedPodsCluster(ctx, svc)
}

// selectedPodsCluster is the fallback for a Service without placement: the
// one cluster every selected pod that resolves runs on.
func (r *Resolver) selectedPodsCluster(ctx context.Context, svc *corev1.Service) (string, error) {
	namespace, name := svc.Namespace, svc.Name
	if len(svc.Spec.Selector) == 0 {
		return "", unavailable("service", name, fmt.Sprintf("service %q is not placed on any member cluster: it has no ResourceBinding and no selector", namespace+"/"+name))
	}
	selector := labels.SelectorFromSet(svc.Spec.Selector)
	podObjs, err := r.pods.ByIndex(cache.NamespaceIndex, namespace)
	if err != nil { // an indexer without the namespace index
		podObjs = r.pods.List()
	}
	clusters := map[string][]string{} // cluster -> pods
	var selected int
	var firstErr error
	for _, obj := range podObjs {
		meta, ok := karmada.PodOf(obj)
		if !ok || meta.Namespace != namespace || meta.DeletionTimestamp != nil ||
			!selector.Matches(labels.Set(meta.Labels)) {
			continue
		}
		selected++
		placed, _, _, err := r.resolve(ctx, namespace, meta.Name)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		clusters[placed.Cluster] = append(clusters[placed.Cluster], meta.Name)
	}
	switch len(clusters) {
	case 1:
		for c := range clusters {
			return c, nil
		}
	case 0:
		msg := fmt.Sprintf("service %q is not placed on any member cluster: it has no ResourceBinding and ", namespace+"/"+name)
		if selected == 0 {
			msg += "selects no pods"
		} else {
			msg += fmt.Sprintf("none of the %d pods it selects runs on a ready member cluster: %v", selected, firstErr)
		}
		return "", unavailable("service", name, msg)
	}
	names := slices.Sorted(maps.Keys(clusters))
	return "", conflict("service", name, fmt.Sprintf("service %q has no ResourceBinding and the pods it selects run on several member clusters (%s); place the Service with a PropagationPolicy to choose one",
		namespace+"/"+name, strings.Join(names, ", ")))
}
