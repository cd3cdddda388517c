package karmada

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestTrimServiceKeepsIdentityAndSelector(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{
			"name": "web", "namespace": testNS, "uid": "uid-web", "resourceVersion": "7",
			"labels": map[string]any{"a": "b"}, "annotations": map[string]any{"big": "x"},
		},
		"spec": map[string]any{
			"selector": map[string]any{"app": "web"},
			"ports":    []any{map[string]any{"port": int64(80)}},
		},
	}}
	out, err := trimService(u)
	if err != nil {
		t.Fatal(err)
	}
	svc, ok := out.(*corev1.Service)
	if !ok {
		t.Fatalf("got %T", out)
	}
	if svc.Name != "web" || svc.Namespace != testNS || svc.UID != "uid-web" || svc.ResourceVersion != "7" {
		t.Errorf("identity %+v", svc.ObjectMeta)
	}
	if svc.Labels != nil || svc.Annotations != nil || svc.Spec.Ports != nil {
		t.Errorf("not trimmed: %+v", svc)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, map[string]string{"app": "web"}) {
		t.Errorf("selector %v", svc.Spec.Selector)
	}

	bad := u.DeepCopy()
	bad.Object["spec"] = map[string]any{"selector": "app=web"}
	if _, err := trimService(bad); err == nil {
		t.Error("malformed selector accepted")
	}
	if got, err := trimService("tombstone"); err != nil || got != "tombstone" {
		t.Errorf("non-unstructured: %v, %v", got, err)
	}
}

func TestNewInformersServicesOptIn(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		inf, err := NewInformers(InformersOptions{Metadata: nil, Dynamic: nil, Services: enabled})
		if err != nil {
			t.Fatal(err)
		}
		if (inf.Services != nil) != enabled {
			t.Errorf("Services=%v: informer %v", enabled, inf.Services)
		}
	}
}
