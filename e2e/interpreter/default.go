package interpreter

import (
	"encoding/json"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
)

var podGVK = corev1.SchemeGroupVersion.WithKind("Pod")

// DefaultReflectStatus is Karmada's built-in status reflection for kinds it
// has no dedicated reflector for, Pods among them: the member object's whole
// .status, names and conditions included. ok is false when the object has no
// status, and Karmada then records none.
func DefaultReflectStatus(observed *unstructured.Unstructured) (status map[string]any, ok bool, err error) {
	status, ok, err = unstructured.NestedMap(observed.Object, "status")
	if err != nil {
		return nil, false, fmt.Errorf("read status of %s %s/%s: %w", observed.GetKind(), observed.GetNamespace(), observed.GetName(), err)
	}
	return status, ok, nil
}

// DefaultAggregatePodStatus is Karmada's built-in Pod aggregation: the
// template's status is replaced by the phase (Failed > Pending > Running >
// Succeeded over all clusters, a cluster without status counting as Pending)
// and the container and init-container statuses of every cluster reduced to
// {ready, state}. Everything else, container names and conditions included,
// is dropped. Nil items leave the template as it is; an unchanged status
// returns the template itself, otherwise the typed round trip Karmada does.
func DefaultAggregatePodStatus(template *unstructured.Unstructured, items []StatusItem) (*unstructured.Unstructured, error) {
	if template.GroupVersionKind() != podGVK {
		return nil, fmt.Errorf("default pod aggregation called for %s", template.GroupVersionKind())
	}
	pod := &corev1.Pod{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(template.Object, pod); err != nil {
		return nil, fmt.Errorf("convert template to Pod: %w", err)
	}
	if items == nil {
		return toUnstructured(pod)
	}

	newStatus := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{}}
	phases := sets.New[corev1.PodPhase]()
	for _, item := range items {
		if item.Status == nil {
			phases.Insert(corev1.PodPending)
			continue
		}
		// Karmada unmarshals the raw JSON it stored; go through JSON too so
		// unknown fields and type quirks behave the same.
		raw, err := json.Marshal(item.Status)
		if err != nil {
			return nil, fmt.Errorf("marshal status from %s: %w", item.ClusterName, err)
		}
		observed := corev1.PodStatus{}
		if err := json.Unmarshal(raw, &observed); err != nil {
			return nil, fmt.Errorf("unmarshal pod status from %s: %w", item.ClusterName, err)
		}
		phases.Insert(observed.Phase)
		for _, cs := range observed.ContainerStatuses {
			newStatus.ContainerStatuses = append(newStatus.ContainerStatuses, corev1.ContainerStatus{Ready: cs.Ready, State: cs.State})
		}
		for _, cs := range observed.InitContainerStatuses {
			newStatus.InitContainerStatuses = append(newStatus.InitContainerStatuses, corev1.ContainerStatus{Ready: cs.Ready, State: cs.State})
		}
	}
	for _, phase := range []corev1.PodPhase{corev1.PodFailed, corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded} {
		if phases.Has(phase) {
			newStatus.Phase = phase
			break
		}
	}

	if reflect.DeepEqual(pod.Status, newStatus) {
		return template, nil
	}
	pod.Status = newStatus
	return toUnstructured(pod)
}

func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T to unstructured: %w", obj, err)
	}
	return &unstructured.Unstructured{Object: content}, nil
}
