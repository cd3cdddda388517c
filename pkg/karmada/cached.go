package karmada

import (
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// CachedPod is what the pods informer keeps of a pod template: one per pod
// in karmada-apiserver, so only what the resolver and the labeler read. A
// PartialObjectMetadata (a 288-byte struct and a labels map) cost about
// 800 bytes per pod even trimmed.
type CachedPod struct {
	Namespace string // interned: pods share few namespaces
	Name      string
	UID       types.UID
	// Cluster is the ClusterNameLabel value; HasCluster tells an empty
	// value from no label.
	Cluster    string
	HasCluster bool
	// Labels are all the pod's labels, kept only for the Services cache
	// (InformersOptions.Services), whose fallback matches selectors.
	Labels            map[string]string
	DeletionTimestamp *metav1.Time
}

// GetObjectMeta makes CachedPod readable by meta.Accessor, so the
// informer's key functions and event handlers take it like any object. It
// allocates; lookups read the fields instead.
func (p *CachedPod) GetObjectMeta() metav1.Object {
	labels := p.Labels
	if labels == nil && p.HasCluster {
		labels = map[string]string{ClusterNameLabel: p.Cluster}
	}
	return &metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Labels: labels, DeletionTimestamp: p.DeletionTimestamp}
}

// PodOf reads an object of the pods store: a *CachedPod as the informer
// keeps it, or any metav1.Object (stores filled by hand).
func PodOf(obj any) (*CachedPod, bool) {
	switch p := obj.(type) {
	case *CachedPod:
		return p, true
	case metav1.Object:
		return cachePod(p, true), true
	}
	return nil, false
}

func cachePod(m metav1.Object, keepLabels bool) *CachedPod {
	p := &CachedPod{Namespace: intern(m.GetNamespace()), Name: m.GetName(), UID: m.GetUID(), DeletionTimestamp: m.GetDeletionTimestamp()}
	labels := m.GetLabels()
	if p.Cluster, p.HasCluster = labels[ClusterNameLabel]; p.HasCluster {
		p.Cluster = intern(p.Cluster)
	}
	if keepLabels {
		p.Labels = labels
	}
	return p
}

// CachedBinding is what the bindings informer keeps of a ResourceBinding:
// the fields of ResourceBinding the gateway reads, without the rest of
// ObjectMeta (a 480-byte struct became 208), strings shared where they
// repeat.
type CachedBinding struct {
	Namespace         string
	Name              string
	CreationTimestamp metav1.Time
	Spec              ResourceBindingSpec
	Status            CachedBindingStatus
}

// CachedBindingStatus is ResourceBindingStatus without conditions.
type CachedBindingStatus struct {
	LastScheduledTime *metav1.Time
	AggregatedStatus  []AggregatedStatusItem
}

// GetObjectMeta makes CachedBinding readable by meta.Accessor (see
// CachedPod.GetObjectMeta).
func (b *CachedBinding) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: b.Namespace, Name: b.Name, CreationTimestamp: b.CreationTimestamp}
}

// AppliedOn reports what b's aggregatedStatus says of cluster: whether
// Karmada applied the workload there and, when it tried and failed, the
// message it recorded. Both are zero while Karmada has reported nothing.
func (b *CachedBinding) AppliedOn(cluster string) (applied bool, failure string) {
	for _, s := range b.Status.AggregatedStatus {
		if s.ClusterName == cluster {
			return s.Applied, s.AppliedMessage
		}
	}
	return false, ""
}

// ClusterNames returns the scheduled clusters in spec order.
func (b *CachedBinding) ClusterNames() []string {
	names := make([]string, 0, len(b.Spec.Clusters))
	for _, c := range b.Spec.Clusters {
		names = append(names, c.Name)
	}
	return names
}

// CandidateClusters is ResourceBinding.CandidateClusters.
func (b *CachedBinding) CandidateClusters() iter.Seq[string] {
	return candidateClusters(b.Spec.Clusters, b.Status.AggregatedStatus)
}

func cacheBinding(b *ResourceBinding) *CachedBinding {
	r := b.Spec.Resource
	r.APIVersion, r.Kind, r.Namespace = intern(r.APIVersion), intern(r.Kind), intern(r.Namespace)
	r.ResourceVersion = ""
	if strings.HasPrefix(b.Name, r.Name) { // Karmada names it <name>-<kind>
		r.Name = b.Name[:len(r.Name)]
	}
	clusters := make([]TargetCluster, len(b.Spec.Clusters))
	for i, c := range b.Spec.Clusters {
		clusters[i] = TargetCluster{Name: intern(c.Name), Replicas: c.Replicas}
	}
	var status []AggregatedStatusItem
	if len(b.Status.AggregatedStatus) > 0 {
		status = make([]AggregatedStatusItem, len(b.Status.AggregatedStatus))
		for i, s := range b.Status.AggregatedStatus {
			status[i] = AggregatedStatusItem{ClusterName: intern(s.ClusterName), Applied: s.Applied, Health: intern(s.Health)}
			if !s.Applied {
				// Only failures keep their message (why Karmada could not
				// apply, e.g. a member object it does not manage holds the
				// name): they are rare, and the resolver reports them.
				status[i].AppliedMessage = truncate(s.AppliedMessage, maxAppliedMessage)
			}
		}
	}
	return &CachedBinding{
		Namespace: intern(b.Namespace), Name: b.Name, CreationTimestamp: b.CreationTimestamp,
		Spec:   ResourceBindingSpec{Resource: r, Clusters: clusters},
		Status: CachedBindingStatus{LastScheduledTime: b.Status.LastScheduledTime, AggregatedStatus: status},
	}
}

// bindingOfObject reads an object of the bindings store: a *CachedBinding
// as the informer keeps it, or a *ResourceBinding (stores filled by hand).
func bindingOfObject(obj any) (*CachedBinding, bool) {
	switch b := obj.(type) {
	case *CachedBinding:
		return b, true
	case *ResourceBinding:
		return cacheBinding(b), true
	}
	return nil, false
}

// BindingResource returns the namespace, name and spec.resource of a
// bindings store object.
func BindingResource(obj any) (namespace, name string, resource ObjectReference, ok bool) {
	switch b := obj.(type) {
	case *CachedBinding:
		return b.Namespace, b.Name, b.Spec.Resource, true
	case *ResourceBinding:
		return b.Namespace, b.Name, b.Spec.Resource, true
	}
	return "", "", ObjectReference{}, false
}

// maxAppliedMessage bounds the applied message kept per failed cluster: it
// is Karmada's error text, reported to callers, not a document.
const maxAppliedMessage = 1024

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n]) + "..."
}

// maxInterned bounds the intern table: label values are the pods' writers'
// to choose, and a table that only grows must not grow with them.
const maxInterned = 4096

var (
	interned      sync.Map // string -> string
	internedCount atomic.Int32
)

// intern returns one shared copy of s, for the few strings (namespaces,
// cluster names, kinds) that every cached object repeats.
func intern(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := interned.Load(s); ok {
		return v.(string)
	}
	if internedCount.Load() >= maxInterned {
		return s
	}
	s = strings.Clone(s) // never keep a substring's whole backing array
	v, loaded := interned.LoadOrStore(s, s)
	if !loaded {
		internedCount.Add(1)
	}
	return v.(string)
}
