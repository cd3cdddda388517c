package karmada

import (
	"fmt"
	"iter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// ClusterNameLabel is the label the labeler keeps on every federated Pod
	// template. The key is this project's: Karmada itself does not write it.
	ClusterNameLabel = "cluster.karmada.io/name"

	// ClusterConditionReady is the Cluster condition Karmada's cluster status
	// controller keeps; the cluster proxy cannot reach a member without it.
	ClusterConditionReady = "Ready"

	// PermanentIDLabel ties Works back to their ResourceBinding.
	PermanentIDLabel = "resourcebinding.karmada.io/permanent-id"

	// ExecutionNamespacePrefix prefixes the namespace that holds a member's Works.
	ExecutionNamespacePrefix = "karmada-es-"

	// WorkNamespaceAnnotation and WorkNameAnnotation name the Work on the member object.
	WorkNamespaceAnnotation = "work.karmada.io/namespace"
	WorkNameAnnotation      = "work.karmada.io/name"

	// ManagedLabel marks objects Karmada propagated to a member.
	ManagedLabel = "karmada.io/managed"

	// TemplateUIDAnnotation carries the template's UID on member objects.
	TemplateUIDAnnotation = "resourcetemplate.karmada.io/uid"
)

var (
	ResourceBindingGVR   = schema.GroupVersionResource{Group: "work.karmada.io", Version: "v1alpha2", Resource: "resourcebindings"}
	WorkGVR              = schema.GroupVersionResource{Group: "work.karmada.io", Version: "v1alpha1", Resource: "works"}
	ClusterGVR           = schema.GroupVersionResource{Group: "cluster.karmada.io", Version: "v1alpha1", Resource: "clusters"}
	PropagationPolicyGVR = schema.GroupVersionResource{Group: "policy.karmada.io", Version: "v1alpha1", Resource: "propagationpolicies"}
)

// ClusterProxyPath is the karmada-aggregated-apiserver path that forwards
// rest to the member cluster named cluster. rest must start with "/".
func ClusterProxyPath(cluster, rest string) string {
	return "/apis/cluster.karmada.io/v1alpha1/clusters/" + cluster + "/proxy" + rest
}

// BindingName is the name Karmada gives the ResourceBinding of a namespaced
// template (lower(name-kind), ':' replaced by '.'). Lookups go through the
// spec.resource index; this is only for creating bindings in tests.
func BindingName(name, kind string) string {
	b := []byte(name + "-" + kind)
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c == ':':
			b[i] = '.'
		}
	}
	return string(b)
}

// ObjectReference is ResourceBinding.spec.resource.
type ObjectReference struct {
	APIVersion      string `json:"apiVersion"`
	Kind            string `json:"kind"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// TargetCluster is one scheduled cluster in ResourceBinding.spec.clusters.
type TargetCluster struct {
	Name     string `json:"name"`
	Replicas int32  `json:"replicas,omitempty"`
}

// AggregatedStatusItem is one member's report in ResourceBinding.status.
type AggregatedStatusItem struct {
	ClusterName    string `json:"clusterName"`
	Applied        bool   `json:"applied,omitempty"`
	AppliedMessage string `json:"appliedMessage,omitempty"`
	Health         string `json:"health,omitempty"`
}

// ResourceBindingSpec is the part of spec the gateway reads.
type ResourceBindingSpec struct {
	Resource ObjectReference `json:"resource"`
	Clusters []TargetCluster `json:"clusters,omitempty"`
}

// ResourceBindingStatus is the part of status the gateway reads.
type ResourceBindingStatus struct {
	LastScheduledTime *metav1.Time           `json:"lastScheduledTime,omitempty"`
	AggregatedStatus  []AggregatedStatusItem `json:"aggregatedStatus,omitempty"`
	Conditions        []metav1.Condition     `json:"conditions,omitempty"`
}

// ResourceBinding is work.karmada.io/v1alpha2 ResourceBinding, trimmed.
type ResourceBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ResourceBindingSpec   `json:"spec"`
	Status            ResourceBindingStatus `json:"status,omitempty"`
}

// ClusterNames returns the scheduled clusters in spec order.
func (b *ResourceBinding) ClusterNames() []string {
	names := make([]string, 0, len(b.Spec.Clusters))
	for _, c := range b.Spec.Clusters {
		names = append(names, c.Name)
	}
	return names
}

// Applied reports whether the binding's status says cluster applied the workload.
func (b *ResourceBinding) Applied(cluster string) bool {
	return applied(b.Status.AggregatedStatus, cluster)
}

func applied(status []AggregatedStatusItem, cluster string) bool {
	for _, s := range status {
		if s.ClusterName == cluster {
			return s.Applied
		}
	}
	return false
}

// CandidateClusters yields, in scheduler (spec.clusters) order, the clusters
// the workload should be reached on: those the binding reports applied, or
// every scheduled cluster while none is applied yet. The resolver and the
// labeler both choose from it, so a label never disagrees with a lookup.
func (b *ResourceBinding) CandidateClusters() iter.Seq[string] {
	return candidateClusters(b.Spec.Clusters, b.Status.AggregatedStatus)
}

func candidateClusters(clusters []TargetCluster, status []AggregatedStatusItem) iter.Seq[string] {
	anyApplied := false
	for _, c := range clusters {
		if applied(status, c.Name) {
			anyApplied = true
			break
		}
	}
	return func(yield func(string) bool) {
		for _, c := range clusters {
			if anyApplied && !applied(status, c.Name) {
				continue
			}
			if !yield(c.Name) {
				return
			}
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (b *ResourceBinding) DeepCopyObject() runtime.Object {
	if b == nil {
		return nil
	}
	out := *b
	b.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Clusters = append([]TargetCluster(nil), b.Spec.Clusters...)
	out.Status.AggregatedStatus = append([]AggregatedStatusItem(nil), b.Status.AggregatedStatus...)
	if b.Status.LastScheduledTime != nil {
		t := *b.Status.LastScheduledTime
		out.Status.LastScheduledTime = &t
	}
	out.Status.Conditions = copyConditions(b.Status.Conditions)
	return &out
}

func copyConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	out := make([]metav1.Condition, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

// ClusterSpec is the part of cluster.karmada.io/v1alpha1 Cluster spec used here.
type ClusterSpec struct {
	APIEndpoint                 string          `json:"apiEndpoint,omitempty"`
	SecretRef                   *LocalSecretRef `json:"secretRef,omitempty"`
	ImpersonatorSecretRef       *LocalSecretRef `json:"impersonatorSecretRef,omitempty"`
	InsecureSkipTLSVerification bool            `json:"insecureSkipTLSVerification,omitempty"`
	ProxyURL                    string          `json:"proxyURL,omitempty"`
	// ProxyHeader is sent on the CONNECT to ProxyURL, each value split
	// at commas into several, as Karmada's ParseProxyHeaders does.
	ProxyHeader map[string]string `json:"proxyHeader,omitempty"`
	SyncMode    string            `json:"syncMode,omitempty"`
}

// LocalSecretRef names a Secret in karmada-apiserver.
type LocalSecretRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ClusterStatus is the part of Cluster status used here.
type ClusterStatus struct {
	KubernetesVersion string             `json:"kubernetesVersion,omitempty"`
	Conditions        []metav1.Condition `json:"conditions,omitempty"`
}

// Cluster is cluster.karmada.io/v1alpha1 Cluster, trimmed.
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterSpec   `json:"spec"`
	Status            ClusterStatus `json:"status,omitempty"`
}

// Ready reports the Cluster's Ready condition and its message.
func (c *Cluster) Ready() (bool, string) {
	for _, cond := range c.Status.Conditions {
		if cond.Type == ClusterConditionReady {
			return cond.Status == metav1.ConditionTrue, cond.Message
		}
	}
	return false, "cluster has no Ready condition"
}

// DeepCopyObject implements runtime.Object.
func (c *Cluster) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if c.Spec.SecretRef != nil {
		r := *c.Spec.SecretRef
		out.Spec.SecretRef = &r
	}
	if c.Spec.ImpersonatorSecretRef != nil {
		r := *c.Spec.ImpersonatorSecretRef
		out.Spec.ImpersonatorSecretRef = &r
	}
	if c.Spec.ProxyHeader != nil {
		out.Spec.ProxyHeader = make(map[string]string, len(c.Spec.ProxyHeader))
		for k, v := range c.Spec.ProxyHeader {
			out.Spec.ProxyHeader[k] = v
		}
	}
	out.Status.Conditions = copyConditions(c.Status.Conditions)
	return &out
}

// FromUnstructured converts u into a typed object of type T, dropping every
// field T does not declare. It is the transform the gateway's dynamic
// informers run, so caches hold only what is read.
func FromUnstructured[T any, PT interface {
	*T
	runtime.Object
}](u *unstructured.Unstructured) (PT, error) {
	out := PT(new(T))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
		return nil, fmt.Errorf("convert %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return out, nil
}

// Transform returns a cache.TransformFunc that converts unstructured objects
// into T and keeps tombstones and objects already converted as they are.
func Transform[T any, PT interface {
	*T
	runtime.Object
}]() func(any) (any, error) {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		return FromUnstructured[T, PT](u)
	}
}
