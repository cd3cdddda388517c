// Package karmadatest holds objects as karmada-apiserver serves them, for
// the tests and benchmarks (pkg/resolver, e2e/bench) that feed them to the
// gateway's informers or measure what their transforms cache.
package karmadatest

import (
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// APIBinding is the ResourceBinding of pod namespace/pod placed on cluster as
// karmada-apiserver returns it: labels, annotations, owner reference, managed
// fields, conditions and applied messages included, as the bindings
// informer's transform receives it.
func APIBinding(ns, pod string, uid types.UID, cluster string) *unstructured.Unstructured {
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

// LiveHeap is the heap still in use after two collections (the second
// sweeps what the first's finalizers freed): what caches filled since the
// last call retain.
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Unstructured renders a typed Karmada object as the dynamic client
// serves it, kind gvk, for the fake clients the informers list and watch.
func Unstructured(t testing.TB, obj k8sruntime.Object, gvk schema.GroupVersionKind) *unstructured.Unstructured {
	t.Helper()
	content, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	return u
}
