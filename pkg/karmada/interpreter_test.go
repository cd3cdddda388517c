package karmada

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

func customization(name, apiVersion, kind, script string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "config.karmada.io/v1alpha1",
		"kind":       "ResourceInterpreterCustomization",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"target":         map[string]any{"apiVersion": apiVersion, "kind": kind},
			"customizations": map[string]any{},
		},
	}}
	if script != "" {
		u.Object["spec"].(map[string]any)["customizations"] = map[string]any{
			"statusAggregation": map[string]any{"luaScript": script},
		}
	}
	return u
}

func TestPodStatusAggregation(t *testing.T) {
	tests := []struct {
		name    string
		objects []runtime.Object
		want    string
	}{
		{name: "none installed"},
		{
			name: "only other kinds or rules",
			objects: []runtime.Object{
				customization("deployments", "apps/v1", "Deployment", "function AggregateStatus(o, s) return o end"),
				customization("pod-retention-only", "v1", "Pod", ""),
				customization("pod-other-version", "v2", "Pod", "function AggregateStatus(o, s) return o end"),
			},
		},
		{
			name: "pod status aggregation present",
			objects: []runtime.Object{
				customization("deployments", "apps/v1", "Deployment", "x"),
				customization("karmada-exec-gateway-pod-status", "v1", "Pod", "function AggregateStatus(o, s) return o end"),
			},
			want: "karmada-exec-gateway-pod-status",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
				map[schema.GroupVersionResource]string{ResourceInterpreterCustomizationGVR: "ResourceInterpreterCustomizationList"},
				tc.objects...)
			got, err := PodStatusAggregation(context.Background(), client)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("PodStatusAggregation() = %q, want %q", got, tc.want)
			}
		})
	}
}
