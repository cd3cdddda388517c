package karmada

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// ResourceInterpreterCustomizationGVR is Karmada's configurable interpreter.
var ResourceInterpreterCustomizationGVR = schema.GroupVersionResource{
	Group: "config.karmada.io", Version: "v1alpha1", Resource: "resourceinterpretercustomizations",
}

// PodStatusAggregation finds a ResourceInterpreterCustomization for v1 Pod
// with a statusAggregation script and returns its name, or "" when there is
// none. Without one, Karmada's default aggregation strips container names and
// conditions from pod templates and executors wait forever, so the gateway
// warns about it at startup.
func PodStatusAggregation(ctx context.Context, client dynamic.Interface) (string, error) {
	list, err := client.Resource(ResourceInterpreterCustomizationGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list resourceinterpretercustomizations: %w", err)
	}
	for i := range list.Items {
		if aggregatesPodStatus(&list.Items[i]) {
			return list.Items[i].GetName(), nil
		}
	}
	return "", nil
}

func aggregatesPodStatus(u *unstructured.Unstructured) bool {
	apiVersion, _, _ := unstructured.NestedString(u.Object, "spec", "target", "apiVersion")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "target", "kind")
	script, _, _ := unstructured.NestedString(u.Object, "spec", "customizations", "statusAggregation", "luaScript")
	return apiVersion == "v1" && kind == "Pod" && script != ""
}
