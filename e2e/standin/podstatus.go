package standin

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// statusItem is one cluster's entry of a binding's aggregatedStatus, as the
// status aggregation sees it. Status is the member pod's reflected status,
// nil when it has not been collected yet.
type statusItem struct {
	ClusterName string
	Status      map[string]any
}

// aggregatePodStatus computes a Pod template's status from its members'
// statuses exactly as Karmada's default interpreter (AggregateStatus for
// v1/Pod) does: the phase is the first of Failed, Pending, Running,
// Succeeded that any member reports (an uncollected member counts as
// Pending), and containerStatuses / initContainerStatuses are every
// member's, reduced to ready and state. Nothing else survives: no names, no
// conditions, no IPs, no nodeName, so the template stays host-less and
// executors waiting on a named container or the Ready condition wait forever.
//
// This is the one place a ResourceInterpreterCustomization's aggregateStatus
// Lua script would replace the default.
func aggregatePodStatus(items []statusItem) (map[string]any, error) {
	out := corev1.PodStatus{}
	phases := map[corev1.PodPhase]bool{}
	for _, item := range items {
		if item.Status == nil {
			phases[corev1.PodPending] = true
			continue
		}
		var member corev1.PodStatus
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Status, &member); err != nil {
			return nil, fmt.Errorf("status from cluster %s: %w", item.ClusterName, err)
		}
		phases[member.Phase] = true
		for _, cs := range member.ContainerStatuses {
			out.ContainerStatuses = append(out.ContainerStatuses, corev1.ContainerStatus{Ready: cs.Ready, State: cs.State})
		}
		for _, cs := range member.InitContainerStatuses {
			out.InitContainerStatuses = append(out.InitContainerStatuses, corev1.ContainerStatus{Ready: cs.Ready, State: cs.State})
		}
	}
	for _, p := range []corev1.PodPhase{corev1.PodFailed, corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded} {
		if phases[p] {
			out.Phase = p
			break
		}
	}
	return toJSONMap(out)
}

// toJSONMap renders v as the map its JSON would decode to, so it compares
// equal to what an apiserver returns (no empty fields, numbers as int64).
func toJSONMap(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return runtime.DeepCopyJSON(m), nil
}
