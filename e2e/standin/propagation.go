package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"reflect"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/interpreter"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// Labels and annotations Karmada writes besides those in pkg/karmada.
const (
	policyPermanentIDLabel     = "propagationpolicy.karmada.io/permanent-id"
	policyNameAnnotation       = "propagationpolicy.karmada.io/name"
	policyNamespaceAnnotation  = "propagationpolicy.karmada.io/namespace"
	workPermanentIDLabel       = "work.karmada.io/permanent-id"
	bindingNameAnnotation      = "resourcebinding.karmada.io/name"
	bindingNamespaceAnnotation = "resourcebinding.karmada.io/namespace"

	healthHealthy   = "Healthy"
	healthUnhealthy = "Unhealthy"
	healthUnknown   = "Unknown"

	// rescheduleDelay is how soon a binding no Ready cluster could take is
	// tried again.
	rescheduleDelay = time.Second
)

// propagatorOptions configures newPropagator.
type propagatorOptions struct {
	Karmada dynamic.Interface
	// Members are the member clients by cluster name.
	Members map[string]kubernetes.Interface
	// Ready reports whether the named cluster may be scheduled to.
	Ready func(cluster string) bool
}

// propagator is the stand-in's karmada-controller-manager for Pods: the
// detector (policy -> binding), the scheduler (binding -> clusters, once),
// the binding controller (binding -> Works), the execution controller
// (Work -> member pod) and the status controllers (member pod -> binding and
// template status, through the resource interpreter built from the
// ResourceInterpreterCustomizations), collapsed into one reconcile keyed by
// the template.
type propagator struct {
	karmada dynamic.Interface
	members map[string]kubernetes.Interface
	ready   func(string) bool

	factory        dynamicinformer.DynamicSharedInformerFactory
	pods           cache.SharedIndexInformer
	policies       cache.SharedIndexInformer
	bindings       cache.SharedIndexInformer
	customizations cache.SharedIndexInformer
	memberPods     map[string]corelisters.PodLister
	synced         []cache.InformerSynced
	starts         []func(<-chan struct{})

	// interpreters is swapped whole when the customizations change, so a
	// sync uses one consistent set for reflection and aggregation.
	interpreters atomic.Pointer[interpreterSet]
	logger       atomic.Pointer[klog.Logger]

	queue workqueue.TypedRateLimitingInterface[string]
}

func newPropagator(opts propagatorOptions) (*propagator, error) {
	p := &propagator{
		karmada:    opts.Karmada,
		members:    opts.Members,
		ready:      opts.Ready,
		factory:    dynamicinformer.NewDynamicSharedInformerFactory(opts.Karmada, 0),
		memberPods: map[string]corelisters.PodLister{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "standin-propagation"}),
	}
	p.pods = p.factory.ForResource(karmada.PodGVR).Informer()
	p.policies = p.factory.ForResource(karmada.PropagationPolicyGVR).Informer()
	p.bindings = p.factory.ForResource(karmada.ResourceBindingGVR).Informer()
	p.customizations = p.factory.ForResource(customizationGVR).Informer()
	p.interpreters.Store(newInterpreterSet(nil))
	p.synced = append(p.synced, p.pods.HasSynced, p.policies.HasSynced, p.bindings.HasSynced)
	p.starts = append(p.starts, p.factory.Start)

	if _, err := p.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.enqueueObject,
		UpdateFunc: func(_, obj any) { p.enqueueObject(obj) },
		DeleteFunc: p.enqueueObject,
	}); err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	if _, err := p.policies.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.enqueuePolicyNamespace,
		UpdateFunc: func(_, obj any) { p.enqueuePolicyNamespace(obj) },
		DeleteFunc: p.enqueuePolicyNamespace,
	}); err != nil {
		return nil, fmt.Errorf("policy handler: %w", err)
	}
	if _, err := p.bindings.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.enqueueBindingResource,
		UpdateFunc: func(_, obj any) { p.enqueueBindingResource(obj) },
		DeleteFunc: p.enqueueBindingResource,
	}); err != nil {
		return nil, fmt.Errorf("binding handler: %w", err)
	}
	reg, err := p.customizations.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.reloadInterpreters() },
		UpdateFunc: func(_, _ any) { p.reloadInterpreters() },
		DeleteFunc: func(any) { p.reloadInterpreters() },
	})
	if err != nil {
		return nil, fmt.Errorf("customization handler: %w", err)
	}
	// The handler's own sync, so the first syncs already use the
	// customizations that exist at start.
	p.synced = append(p.synced, reg.HasSynced)
	for name, client := range opts.Members {
		f := informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = karmada.ManagedLabel + "=true"
			}))
		inf := f.Core().V1().Pods()
		// Member pods have the template's namespace and name.
		if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    p.enqueueObject,
			UpdateFunc: func(_, obj any) { p.enqueueObject(obj) },
			DeleteFunc: p.enqueueObject,
		}); err != nil {
			return nil, fmt.Errorf("member %s pod handler: %w", name, err)
		}
		p.memberPods[name] = inf.Lister()
		p.synced = append(p.synced, inf.Informer().HasSynced)
		p.starts = append(p.starts, f.Start)
	}
	return p, nil
}

// reloadInterpreters rebuilds the interpreter from the customizations now in
// the cache and re-aggregates every template: Karmada's interpreter follows
// the customizations at once and applies them at the next status sync, so an
// applied customization fixes pods that are already running.
func (p *propagator) reloadInterpreters() {
	var objs []*unstructured.Unstructured
	for _, o := range p.customizations.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			objs = append(objs, u)
		}
	}
	set := newInterpreterSet(objs)
	p.interpreters.Store(set)
	logger := klog.Background()
	if l := p.logger.Load(); l != nil {
		logger = *l
	}
	for target, err := range set.broken {
		logger.Error(err, "ResourceInterpreterCustomization does not load; its target's status is not interpreted", "target", target.String())
	}
	logger.Info("Resource interpreter customizations changed, re-aggregating templates", "customizations", set.names)
	for _, key := range p.pods.GetIndexer().ListKeys() {
		p.queue.Add(key)
	}
}

func (p *propagator) enqueueObject(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	p.queue.Add(key)
}

func (p *propagator) enqueuePolicyNamespace(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	keys, err := p.pods.GetIndexer().IndexKeys(cache.NamespaceIndex, u.GetNamespace())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, k := range keys {
		p.queue.Add(k)
	}
}

func (p *propagator) enqueueBindingResource(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "resource", "kind")
	name, _, _ := unstructured.NestedString(u.Object, "spec", "resource", "name")
	if kind != "Pod" || name == "" {
		return
	}
	ns, _, _ := unstructured.NestedString(u.Object, "spec", "resource", "namespace")
	p.queue.Add(ns + "/" + name)
}

// run starts the informers and workers, closes synced (when not nil) once
// the caches are synced, and returns when ctx ends.
func (p *propagator) run(ctx context.Context, workers int, synced chan<- struct{}) error {
	defer p.queue.ShutDown()
	logger := klog.FromContext(ctx)
	p.logger.Store(&logger)
	for _, start := range p.starts {
		start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), p.synced...) {
		return fmt.Errorf("propagation caches did not sync: %w", ctx.Err())
	}
	if synced != nil {
		close(synced)
	}
	for range workers {
		go wait.UntilWithContext(ctx, p.worker, time.Second)
	}
	<-ctx.Done()
	return nil
}

func (p *propagator) worker(ctx context.Context) {
	for p.processNext(ctx) {
	}
}

func (p *propagator) processNext(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	requeue, err := p.sync(ctx, key)
	switch {
	case err != nil:
		klog.FromContext(ctx).Info("Propagation failed, retrying", "pod", key, "err", err)
		p.queue.AddRateLimited(key)
	case requeue > 0:
		p.queue.Forget(key)
		p.queue.AddAfter(key, requeue)
	default:
		p.queue.Forget(key)
	}
	return true
}

// sync makes the world match the template key: its binding, Works, member
// pods and statuses, or their absence once the template is gone.
func (p *propagator) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, err
	}
	obj, exists, err := p.pods.GetIndexer().GetByKey(key)
	if err != nil {
		return 0, err
	}
	if !exists {
		return 0, p.cleanup(ctx, ns, name)
	}
	tmpl := obj.(*unstructured.Unstructured)
	if tmpl.GetDeletionTimestamp() != nil {
		return 0, p.cleanup(ctx, ns, name)
	}

	binding, err := p.cachedBinding(ns, karmada.BindingName(name, "Pod"))
	if err != nil {
		return 0, err
	}
	if binding != nil && binding.GetOwnerReferences() != nil && !ownedBy(binding, tmpl.GetUID()) {
		// A binding of an earlier pod of the same name: without a garbage
		// collector here, clear it before binding the new one.
		if err := p.cleanup(ctx, ns, name); err != nil {
			return 0, err
		}
		return rescheduleDelay, nil
	}
	if binding == nil {
		policy := p.matchPolicy(tmpl)
		if policy == nil {
			return 0, nil
		}
		if binding, err = p.createBinding(ctx, tmpl, policy); err != nil {
			return 0, err
		}
	} else if binding, err = p.refreshResource(ctx, binding, tmpl); err != nil {
		return 0, err
	}

	clusters := bindingClusters(binding)
	if len(clusters) == 0 {
		if binding, err = p.schedule(ctx, binding); err != nil {
			return 0, err
		}
		clusters = bindingClusters(binding)
		if len(clusters) == 0 {
			return rescheduleDelay, nil
		}
	}

	desired := map[string]bool{}
	for _, c := range clusters {
		desired[c] = true
	}
	for _, member := range p.memberNames() {
		if desired[member] {
			continue
		}
		if err := p.removeFrom(ctx, member, ns, name); err != nil {
			return 0, err
		}
	}
	for _, c := range clusters {
		if _, ok := p.members[c]; !ok {
			continue
		}
		if err := p.ensureOn(ctx, c, tmpl, binding); err != nil {
			return 0, err
		}
	}
	return 0, p.syncStatus(ctx, tmpl, binding, clusters)
}

func (p *propagator) memberNames() []string {
	names := make([]string, 0, len(p.members))
	for n := range p.members {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

func (p *propagator) cachedBinding(ns, name string) (*unstructured.Unstructured, error) {
	obj, exists, err := p.bindings.GetIndexer().GetByKey(ns + "/" + name)
	if err != nil || !exists {
		return nil, err
	}
	return obj.(*unstructured.Unstructured).DeepCopy(), nil
}

// matchPolicy returns the PropagationPolicy of tmpl's namespace that selects
// it, the highest spec.priority first, then by name.
func (p *propagator) matchPolicy(tmpl *unstructured.Unstructured) *unstructured.Unstructured {
	objs, err := p.policies.GetIndexer().ByIndex(cache.NamespaceIndex, tmpl.GetNamespace())
	if err != nil {
		return nil
	}
	policies := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		policies = append(policies, o.(*unstructured.Unstructured))
	}
	return pickPolicy(policies, tmpl)
}

// pickPolicy is matchPolicy's decision among policies.
func pickPolicy(policies []*unstructured.Unstructured, tmpl *unstructured.Unstructured) *unstructured.Unstructured {
	var matched []*unstructured.Unstructured
	for _, pol := range policies {
		if selectsPod(pol, tmpl) {
			matched = append(matched, pol)
		}
	}
	if len(matched) == 0 {
		return nil
	}
	sort.Slice(matched, func(i, j int) bool {
		pi, _, _ := unstructured.NestedInt64(matched[i].Object, "spec", "priority")
		pj, _, _ := unstructured.NestedInt64(matched[j].Object, "spec", "priority")
		if pi != pj {
			return pi > pj
		}
		return matched[i].GetName() < matched[j].GetName()
	})
	return matched[0].DeepCopy()
}

// resourceSelector is one entry of a policy's spec.resourceSelectors.
type resourceSelector struct {
	APIVersion    string                `json:"apiVersion"`
	Kind          string                `json:"kind"`
	Namespace     string                `json:"namespace,omitempty"`
	Name          string                `json:"name,omitempty"`
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

func selectsPod(policy, pod *unstructured.Unstructured) bool {
	raw, found, _ := unstructured.NestedSlice(policy.Object, "spec", "resourceSelectors")
	if !found {
		return false
	}
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var sel resourceSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &sel); err != nil {
			continue
		}
		if sel.APIVersion != "v1" || sel.Kind != "Pod" {
			continue
		}
		if sel.Namespace != "" && sel.Namespace != pod.GetNamespace() {
			continue
		}
		if sel.Name != "" {
			if sel.Name == pod.GetName() {
				return true
			}
			continue
		}
		if sel.LabelSelector == nil {
			return true
		}
		s, err := metav1.LabelSelectorAsSelector(sel.LabelSelector)
		if err == nil && s.Matches(labels.Set(pod.GetLabels())) {
			return true
		}
	}
	return false
}

// createBinding claims tmpl for policy and creates its ResourceBinding, as
// Karmada's resource detector does.
func (p *propagator) createBinding(ctx context.Context, tmpl, policy *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	policyID, err := p.policyPermanentID(ctx, policy)
	if err != nil {
		return nil, err
	}
	if err := p.claimTemplate(ctx, tmpl, policy, policyID); err != nil {
		return nil, err
	}
	placement, _, _ := unstructured.NestedMap(policy.Object, "spec", "placement")
	b := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": karmada.ResourceBindingGVR.GroupVersion().String(),
		"kind":       "ResourceBinding",
		"metadata": map[string]any{
			"name":      karmada.BindingName(tmpl.GetName(), "Pod"),
			"namespace": tmpl.GetNamespace(),
			"labels": map[string]any{
				policyPermanentIDLabel:   policyID,
				karmada.PermanentIDLabel: uuid.NewString(),
			},
			"annotations": map[string]any{
				policyNameAnnotation:      policy.GetName(),
				policyNamespaceAnnotation: policy.GetNamespace(),
			},
			"ownerReferences": []any{map[string]any{
				"apiVersion":         "v1",
				"kind":               "Pod",
				"name":               tmpl.GetName(),
				"uid":                string(tmpl.GetUID()),
				"controller":         true,
				"blockOwnerDeletion": true,
			}},
		},
		"spec": map[string]any{
			"resource":  resourceRef(tmpl),
			"placement": placement,
			// A Pod is one replica to Karmada's interpreter.
			"replicas": int64(1),
		},
	}}
	created, err := p.karmada.Resource(karmada.ResourceBindingGVR).Namespace(tmpl.GetNamespace()).Create(ctx, b, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return p.karmada.Resource(karmada.ResourceBindingGVR).Namespace(tmpl.GetNamespace()).Get(ctx, b.GetName(), metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("create binding %s/%s: %w", tmpl.GetNamespace(), b.GetName(), err)
	}
	klog.FromContext(ctx).Info("Created ResourceBinding", "binding", klog.KObj(created), "policy", klog.KObj(policy))
	return created, nil
}

func resourceRef(tmpl *unstructured.Unstructured) map[string]any {
	return map[string]any{
		"apiVersion":      "v1",
		"kind":            "Pod",
		"namespace":       tmpl.GetNamespace(),
		"name":            tmpl.GetName(),
		"uid":             string(tmpl.GetUID()),
		"resourceVersion": tmpl.GetResourceVersion(),
	}
}

// policyPermanentID returns the policy's permanent-id label, writing one if
// it lacks it (Karmada's webhook adds it when the policy is created).
func (p *propagator) policyPermanentID(ctx context.Context, policy *unstructured.Unstructured) (string, error) {
	if id := policy.GetLabels()[policyPermanentIDLabel]; id != "" {
		return id, nil
	}
	id := uuid.NewString()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{policyPermanentIDLabel: id}}})
	if _, err := p.karmada.Resource(karmada.PropagationPolicyGVR).Namespace(policy.GetNamespace()).Patch(ctx, policy.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return "", fmt.Errorf("label policy %s/%s: %w", policy.GetNamespace(), policy.GetName(), err)
	}
	return id, nil
}

// claimTemplate marks tmpl as claimed by policy, as the detector does.
func (p *propagator) claimTemplate(ctx context.Context, tmpl, policy *unstructured.Unstructured, policyID string) error {
	if tmpl.GetLabels()[policyPermanentIDLabel] == policyID && tmpl.GetAnnotations()[policyNameAnnotation] == policy.GetName() {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{policyPermanentIDLabel: policyID},
		"annotations": map[string]string{policyNameAnnotation: policy.GetName(), policyNamespaceAnnotation: policy.GetNamespace()},
	}})
	_, err := p.karmada.Resource(karmada.PodGVR).Namespace(tmpl.GetNamespace()).Patch(ctx, tmpl.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("claim pod %s/%s: %w", tmpl.GetNamespace(), tmpl.GetName(), err)
	}
	return nil
}

// refreshResource keeps spec.resource.resourceVersion at the template's,
// as the detector does on every template change.
func (p *propagator) refreshResource(ctx context.Context, binding, tmpl *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	rv, _, _ := unstructured.NestedString(binding.Object, "spec", "resource", "resourceVersion")
	if rv == tmpl.GetResourceVersion() {
		return binding, nil
	}
	// A patch of spec.resource alone: an Update of the cached object could
	// carry stale spec.clusters over an edit made since.
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"resource": resourceRef(tmpl)}})
	updated, err := p.karmada.Resource(karmada.ResourceBindingGVR).Namespace(binding.GetNamespace()).Patch(ctx, binding.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("update binding %s/%s resource: %w", binding.GetNamespace(), binding.GetName(), err)
	}
	return updated, nil
}

// patchStatus replaces obj's status with want through the status
// subresource, as a merge patch that nulls what want drops, so nothing but
// status is written whatever else changed since obj was read.
func (p *propagator) patchStatus(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, want map[string]any) (*unstructured.Unstructured, error) {
	have, _, _ := unstructured.NestedMap(obj.Object, "status")
	status := map[string]any{}
	for k := range have {
		status[k] = nil
	}
	for k, v := range want {
		status[k] = v
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, err
	}
	out, err := p.karmada.Resource(gvr).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("update %s %s/%s status: %w", gvr.Resource, obj.GetNamespace(), obj.GetName(), err)
	}
	return out, nil
}

func bindingClusters(b *unstructured.Unstructured) []string {
	raw, _, _ := unstructured.NestedSlice(b.Object, "spec", "clusters")
	var out []string
	for _, r := range raw {
		if m, ok := r.(map[string]any); ok {
			if n, _ := m["name"].(string); n != "" {
				out = append(out, n)
			}
		}
	}
	return out
}

// pickClusters is the scheduler's decision for one Pod: among the Ready
// clusters of clusterAffinity.clusterNames (every member when unset), the
// first for Divided scheduling or spreadConstraints maxGroups 1, all of them
// for Duplicated (the default).
func pickClusters(placement map[string]any, members []string, ready func(string) bool) []string {
	candidates, _, _ := unstructured.NestedStringSlice(placement, "clusterAffinity", "clusterNames")
	if len(candidates) == 0 {
		candidates = members
	}
	var readyOnes []string
	for _, c := range candidates {
		if ready(c) {
			readyOnes = append(readyOnes, c)
		}
	}
	if len(readyOnes) == 0 {
		return nil
	}
	single := false
	if t, _, _ := unstructured.NestedString(placement, "replicaScheduling", "replicaSchedulingType"); t == "Divided" {
		single = true
	}
	spread, _, _ := unstructured.NestedSlice(placement, "spreadConstraints")
	for _, s := range spread {
		if m, ok := s.(map[string]any); ok {
			if mg, ok := m["maxGroups"].(int64); ok && mg == 1 {
				single = true
			}
		}
	}
	if single {
		return readyOnes[:1]
	}
	return readyOnes
}

// schedule fills spec.clusters once, then records the decision in status.
// It never touches spec.clusters that are already set: moving a pod is
// done by editing them, and the loop follows.
func (p *propagator) schedule(ctx context.Context, binding *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	placement, _, _ := unstructured.NestedMap(binding.Object, "spec", "placement")
	picked := pickClusters(placement, p.memberNames(), p.ready)
	client := p.karmada.Resource(karmada.ResourceBindingGVR).Namespace(binding.GetNamespace())
	if len(picked) == 0 {
		cond := condition("Scheduled", metav1.ConditionFalse, "NoClusterFit", "0/"+strconv.Itoa(len(p.members))+" clusters are available: no Ready cluster fits the placement.", binding.GetGeneration())
		before := binding.DeepCopy()
		if changed := setCondition(binding, cond); changed {
			status, _, _ := unstructured.NestedMap(binding.Object, "status")
			if _, err := p.patchStatus(ctx, karmada.ResourceBindingGVR, before, status); err != nil {
				return nil, err
			}
		}
		return binding, nil
	}
	targets := make([]any, 0, len(picked))
	for _, c := range picked {
		targets = append(targets, map[string]any{"name": c, "replicas": int64(1)})
	}
	if err := unstructured.SetNestedSlice(binding.Object, targets, "spec", "clusters"); err != nil {
		return nil, err
	}
	updated, err := client.Update(ctx, binding, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("schedule binding %s/%s: %w", binding.GetNamespace(), binding.GetName(), err)
	}
	if err := unstructured.SetNestedField(updated.Object, metav1.Now().UTC().Format(time.RFC3339), "status", "lastScheduledTime"); err != nil {
		return nil, err
	}
	setCondition(updated, condition("Scheduled", metav1.ConditionTrue, "Success", "Binding has been scheduled successfully.", updated.GetGeneration()))
	if err := unstructured.SetNestedField(updated.Object, updated.GetGeneration(), "status", "schedulerObservedGeneration"); err != nil {
		return nil, err
	}
	status, _, _ := unstructured.NestedMap(updated.Object, "status")
	if updated, err = p.patchStatus(ctx, karmada.ResourceBindingGVR, updated, status); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Scheduled ResourceBinding", "binding", klog.KObj(updated), "clusters", picked)
	return updated, nil
}

func condition(typ string, status metav1.ConditionStatus, reason, message string, generation int64) map[string]any {
	return map[string]any{
		"type":               typ,
		"status":             string(status),
		"reason":             reason,
		"message":            message,
		"observedGeneration": generation,
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
	}
}

// setCondition puts cond into obj's status.conditions, keeping the
// transition time when the status did not change. It reports a change.
func setCondition(obj *unstructured.Unstructured, cond map[string]any) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for i, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != cond["type"] {
			continue
		}
		if m["status"] == cond["status"] {
			cond["lastTransitionTime"] = m["lastTransitionTime"]
		}
		if reflect.DeepEqual(jsonNormal(m), jsonNormal(cond)) {
			return false
		}
		conds[i] = cond
		_ = unstructured.SetNestedSlice(obj.Object, conds, "status", "conditions")
		return true
	}
	conds = append(conds, cond)
	_ = unstructured.SetNestedSlice(obj.Object, conds, "status", "conditions")
	return true
}

// workName is Karmada's Work name for a namespaced template: its name and a
// short hash of its identity.
func workName(namespace, name string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte("Pod/" + namespace + "/" + name))
	return name + "-" + rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

func executionNamespace(cluster string) string { return karmada.ExecutionNamespacePrefix + cluster }

// ensureOn makes the Work for tmpl exist in cluster's execution namespace
// and the member pod it describes exist in the member.
func (p *propagator) ensureOn(ctx context.Context, cluster string, tmpl, binding *unstructured.Unstructured) error {
	ns := executionNamespace(cluster)
	name := workName(tmpl.GetNamespace(), tmpl.GetName())
	works := p.karmada.Resource(karmada.WorkGVR).Namespace(ns)
	existing, err := works.Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get work %s/%s: %w", ns, name, err)
	}
	workID := uuid.NewString()
	if existing != nil && err == nil {
		if id := existing.GetLabels()[workPermanentIDLabel]; id != "" {
			workID = id
		}
	} else {
		existing = nil
	}
	manifest, err := memberManifest(tmpl, binding, ns, name, workID)
	if err != nil {
		return err
	}
	bindingID := binding.GetLabels()[karmada.PermanentIDLabel]
	if existing == nil {
		work := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": karmada.WorkGVR.GroupVersion().String(),
			"kind":       "Work",
			"metadata": map[string]any{
				"name":      name,
				"namespace": ns,
				"labels": map[string]any{
					karmada.PermanentIDLabel: bindingID,
					workPermanentIDLabel:     workID,
				},
				"annotations": map[string]any{
					bindingNameAnnotation:      binding.GetName(),
					bindingNamespaceAnnotation: binding.GetNamespace(),
				},
			},
			"spec": map[string]any{"workload": map[string]any{"manifests": []any{manifest}}},
		}}
		if _, err := works.Create(ctx, work, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create work %s/%s: %w", ns, name, err)
		}
	} else {
		current, _, _ := unstructured.NestedSlice(existing.Object, "spec", "workload", "manifests")
		if len(current) != 1 || !reflect.DeepEqual(jsonNormal(current[0]), jsonNormal(manifest)) {
			if err := unstructured.SetNestedSlice(existing.Object, []any{manifest}, "spec", "workload", "manifests"); err != nil {
				return err
			}
			if _, err := works.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("update work %s/%s: %w", ns, name, err)
			}
		}
	}
	return p.applyMemberPod(ctx, cluster, manifest, tmpl.GetUID())
}

// memberManifest is the pod as Karmada propagates it: the template without
// what belongs to karmada-apiserver (uid, resourceVersion, owners, status,
// nodeName), with the labels and annotations tying it to its Work.
func memberManifest(tmpl, binding *unstructured.Unstructured, workNS, workName, workID string) (map[string]any, error) {
	spec, _, _ := unstructured.NestedMap(tmpl.Object, "spec")
	delete(spec, "nodeName")
	lbls := map[string]any{}
	for k, v := range tmpl.GetLabels() {
		lbls[k] = v
	}
	lbls[karmada.ManagedLabel] = "true"
	lbls[workPermanentIDLabel] = workID
	if id := binding.GetLabels()[karmada.PermanentIDLabel]; id != "" {
		lbls[karmada.PermanentIDLabel] = id
	}
	ann := map[string]any{}
	for k, v := range tmpl.GetAnnotations() {
		ann[k] = v
	}
	ann[karmada.WorkNamespaceAnnotation] = workNS
	ann[karmada.WorkNameAnnotation] = workName
	ann[karmada.TemplateUIDAnnotation] = string(tmpl.GetUID())
	ann[bindingNameAnnotation] = binding.GetName()
	ann[bindingNamespaceAnnotation] = binding.GetNamespace()
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name":        tmpl.GetName(),
			"namespace":   tmpl.GetNamespace(),
			"labels":      lbls,
			"annotations": ann,
		},
		"spec": spec,
	}, nil
}

// applyMemberPod creates the member pod from manifest, or brings its
// labels and annotations up to date (the rest of a pod is immutable). A pod
// left by an earlier template of the same name is deleted first.
func (p *propagator) applyMemberPod(ctx context.Context, cluster string, manifest map[string]any, templateUID types.UID) error {
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(manifest, &pod); err != nil {
		return fmt.Errorf("member pod manifest: %w", err)
	}
	client := p.members[cluster]
	existing, err := p.memberPods[cluster].Pods(pod.Namespace).Get(pod.Name)
	if apierrors.IsNotFound(err) {
		if err := ensureNamespace(ctx, client, pod.Namespace); err != nil {
			return fmt.Errorf("member %s: %w", cluster, err)
		}
		_, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, &pod, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create pod %s/%s in %s: %w", pod.Namespace, pod.Name, cluster, err)
		}
		if err == nil {
			klog.FromContext(ctx).Info("Created member pod", "cluster", cluster, "pod", klog.KObj(&pod))
		}
		return nil
	}
	if err != nil {
		return err
	}
	if existing.DeletionTimestamp != nil {
		// Its delete event requeues the template; it is recreated then.
		return nil
	}
	if existing.Annotations[karmada.TemplateUIDAnnotation] != string(templateUID) {
		return deletePod(ctx, client, existing)
	}
	if reflect.DeepEqual(existing.Labels, pod.Labels) && reflect.DeepEqual(existing.Annotations, pod.Annotations) {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      mergeNull(existing.Labels, pod.Labels),
		"annotations": mergeNull(existing.Annotations, pod.Annotations),
	}})
	if _, err := client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("update pod %s/%s metadata in %s: %w", pod.Namespace, pod.Name, cluster, err)
	}
	return nil
}

// mergeNull is the merge-patch value turning have into want.
func mergeNull(have, want map[string]string) map[string]any {
	out := map[string]any{}
	for k := range have {
		if _, ok := want[k]; !ok {
			out[k] = nil
		}
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}

func ensureNamespace(ctx context.Context, client kubernetes.Interface, name string) error {
	if _, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err == nil {
		return nil
	}
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

func deletePod(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) error {
	err := client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// removeFrom deletes the template's Work and member pod from cluster.
func (p *propagator) removeFrom(ctx context.Context, cluster, ns, name string) error {
	wns := executionNamespace(cluster)
	wname := workName(ns, name)
	err := p.karmada.Resource(karmada.WorkGVR).Namespace(wns).Delete(ctx, wname, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete work %s/%s: %w", wns, wname, err)
	}
	if err == nil {
		klog.FromContext(ctx).Info("Deleted Work", "work", klog.KRef(wns, wname))
	}
	pod, err := p.memberPods[cluster].Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.DeletionTimestamp != nil || pod.Annotations[karmada.WorkNameAnnotation] != wname {
		return nil
	}
	klog.FromContext(ctx).Info("Deleting member pod", "cluster", cluster, "pod", klog.KObj(pod))
	return deletePod(ctx, p.members[cluster], pod)
}

// cleanup removes everything derived from a template that is gone. Karmada
// gets there through garbage collection and finalizers; this environment
// runs no kube-controller-manager, so the stand-in deletes explicitly.
func (p *propagator) cleanup(ctx context.Context, ns, name string) error {
	for _, m := range p.memberNames() {
		if err := p.removeFrom(ctx, m, ns, name); err != nil {
			return err
		}
	}
	bname := karmada.BindingName(name, "Pod")
	if b, err := p.cachedBinding(ns, bname); err != nil || b == nil {
		return err
	}
	err := p.karmada.Resource(karmada.ResourceBindingGVR).Namespace(ns).Delete(ctx, bname, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete binding %s/%s: %w", ns, bname, err)
	}
	klog.FromContext(ctx).Info("Deleted ResourceBinding", "binding", klog.KRef(ns, bname))
	return nil
}

// podHealth is Karmada's default health interpretation of a Pod: healthy
// once Succeeded or Ready.
func podHealth(pod *corev1.Pod) string {
	if pod.Status.Phase == corev1.PodSucceeded {
		return healthHealthy
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return healthHealthy
		}
	}
	return healthUnhealthy
}

// syncStatus is Karmada's status pipeline for the template: each member
// pod's status reflected by the interpreter into the binding's
// aggregatedStatus (one item per cluster, sorted by name, as
// assembleWorkStatus does), then the interpreter's aggregation of those items
// written to the template's status when it differs. Karmada aggregates even
// when no member has reported: the template then goes Pending.
func (p *propagator) syncStatus(ctx context.Context, tmpl, binding *unstructured.Unstructured, clusters []string) error {
	set := p.interpreters.Load()
	items, err := p.collectStatus(set, tmpl, clusters)
	if err != nil {
		return err
	}

	agg := aggregatedStatus(items)
	before := binding.DeepCopy()
	current, _, _ := unstructured.NestedSlice(binding.Object, "status", "aggregatedStatus")
	condChanged := setCondition(binding, fullyAppliedCondition(items, binding.GetGeneration()))
	if condChanged || !reflect.DeepEqual(storedJSON(current), storedJSON(agg)) {
		if err := unstructured.SetNestedSlice(binding.Object, agg, "status", "aggregatedStatus"); err != nil {
			return err
		}
		status, _, _ := unstructured.NestedMap(binding.Object, "status")
		if _, err := p.patchStatus(ctx, karmada.ResourceBindingGVR, before, status); err != nil {
			return err
		}
	}

	aggregated, err := set.aggregateStatus(tmpl.DeepCopy(), items)
	if err != nil {
		return fmt.Errorf("aggregate status of pod %s/%s: %w", tmpl.GetNamespace(), tmpl.GetName(), err)
	}
	want, _, err := unstructured.NestedMap(aggregated.Object, "status")
	if err != nil {
		return fmt.Errorf("aggregated status of pod %s/%s: %w", tmpl.GetNamespace(), tmpl.GetName(), err)
	}
	have, _, _ := unstructured.NestedMap(tmpl.Object, "status")
	want, changed := podStatusWrite(have, want)
	if !changed {
		return nil
	}
	_, err = p.patchStatus(ctx, karmada.PodGVR, tmpl, want)
	return err
}

// collectStatus is one status item per scheduled cluster, by cluster name.
func (p *propagator) collectStatus(set *interpreterSet, tmpl *unstructured.Unstructured, clusters []string) ([]interpreter.StatusItem, error) {
	sorted := append([]string(nil), clusters...)
	sort.Strings(sorted)
	items := make([]interpreter.StatusItem, 0, len(sorted))
	for _, c := range sorted {
		var pod *corev1.Pod
		if lister, ok := p.memberPods[c]; ok {
			if got, err := lister.Pods(tmpl.GetNamespace()).Get(tmpl.GetName()); err == nil && got.Annotations[karmada.TemplateUIDAnnotation] == string(tmpl.GetUID()) {
				pod = got
			}
		}
		item, err := memberStatusItem(set, c, pod)
		if err != nil {
			return nil, err
		}
		items = append(items, item)
	}
	return items, nil
}

// memberStatusItem is what Karmada records for cluster: not applied while
// its pod does not exist, else applied with the pod's health and its status
// as the interpreter reflects it (none when it reflects nothing).
func memberStatusItem(set *interpreterSet, cluster string, pod *corev1.Pod) (interpreter.StatusItem, error) {
	item := interpreter.StatusItem{ClusterName: cluster, Health: healthUnknown}
	if pod == nil {
		return item, nil
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return item, fmt.Errorf("member pod %s/%s in %s: %w", pod.Namespace, pod.Name, cluster, err)
	}
	// Listers drop the type; the interpreter dispatches on it.
	observed := &unstructured.Unstructured{Object: content}
	observed.SetAPIVersion("v1")
	observed.SetKind("Pod")
	status, ok, err := set.reflectStatus(observed)
	if err != nil {
		return item, fmt.Errorf("reflect status of pod %s/%s in %s: %w", pod.Namespace, pod.Name, cluster, err)
	}
	item.Applied = true
	item.Health = podHealth(pod)
	if ok {
		item.Status = status
	}
	return item, nil
}

// aggregatedStatus renders items as the binding's status.aggregatedStatus,
// with workv1alpha2.AggregatedStatusItem's omitempty fields.
func aggregatedStatus(items []interpreter.StatusItem) []any {
	out := make([]any, 0, len(items))
	for _, it := range items {
		entry := map[string]any{"clusterName": it.ClusterName}
		if it.Applied {
			entry["applied"] = true
		}
		if it.AppliedMessage != "" {
			entry["appliedMessage"] = it.AppliedMessage
		}
		if it.Health != "" {
			entry["health"] = it.Health
		}
		if it.Status != nil {
			entry["status"] = it.Status
		}
		out = append(out, entry)
	}
	return out
}

// fullyAppliedCondition is Karmada's FullyApplied: true only when every
// scheduled cluster reports its resource applied and Healthy.
func fullyAppliedCondition(items []interpreter.StatusItem, generation int64) map[string]any {
	ok := len(items) > 0
	for _, it := range items {
		ok = ok && it.Applied && it.Health == healthHealthy
	}
	if ok {
		return condition("FullyApplied", metav1.ConditionTrue, "FullyAppliedSuccess", "All works have been successfully applied", generation)
	}
	return condition("FullyApplied", metav1.ConditionFalse, "FullyAppliedFailed", "Failed to apply all works, see status.aggregatedStatus for details", generation)
}

// podStatusWrite decides the template's pods/status write as Karmada's
// updateResourceStatus does (write when the aggregated status differs), with
// two things the apiserver does on its own applied first, so that a status
// it would store unchanged is not written again on every template event:
// qosClass is kept when want has none (podStatusStrategy.PrepareForUpdate
// backfills it; the built-in aggregation always drops it), and both sides are
// compared as a typed PodStatus, which is how the apiserver stores them
// (empty lists and nulls gone, unknown fields dropped).
func podStatusWrite(have, want map[string]any) (map[string]any, bool) {
	if want == nil {
		want = map[string]any{}
	}
	if q, _ := want["qosClass"].(string); q == "" {
		if hq, ok := have["qosClass"]; ok {
			want["qosClass"] = hq
		} else {
			delete(want, "qosClass")
		}
	}
	storedHave, errHave := storedPodStatus(have)
	storedWant, errWant := storedPodStatus(want)
	if errHave != nil || errWant != nil {
		// The apiserver will say what is wrong with it.
		return want, true
	}
	return want, !reflect.DeepEqual(storedHave, storedWant)
}

// storedPodStatus is status as the apiserver would keep it.
func storedPodStatus(status map[string]any) (any, error) {
	raw, err := json.Marshal(status)
	if err != nil {
		return nil, err
	}
	var typed corev1.PodStatus
	if err := json.Unmarshal(raw, &typed); err != nil {
		return nil, err
	}
	return jsonNormal(typed), nil
}

// storedJSON is v as it decodes from JSON without null object members,
// which the apiserver prunes from custom resources: comparing with nulls left
// in would make every sync look like a change.
func storedJSON(v any) any {
	return dropNulls(jsonNormal(v))
}

func dropNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			if child == nil {
				delete(t, k)
				continue
			}
			t[k] = dropNulls(child)
		}
	case []any:
		for i, child := range t {
			t[i] = dropNulls(child)
		}
	}
	return v
}

// jsonNormal returns v as it would decode from JSON, so values built here
// and values read from an apiserver compare equal.
func jsonNormal(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		return v
	}
	return out
}
