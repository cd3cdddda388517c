package resolver

import (
	"context"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

func service(name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.ServiceSpec{Selector: selector},
	}
}

// servicesInformer is a Services informer whose store holds services.
func servicesInformer(t *testing.T, services ...*corev1.Service) cache.SharedIndexInformer {
	t.Helper()
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Service{}, 0, cache.Indexers{})
	for _, s := range services {
		if err := inf.GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	return inf
}

func serviceBinding(name, svc string, clusters ...string) *karmada.ResourceBinding {
	b := binding(name, svc, clusters)
	b.Spec.Resource.Kind = "Service"
	return b
}

func TestResolveService(t *testing.T) {
	app := map[string]string{"app": "job"}
	ready := []*karmada.Cluster{cluster("member1", true, ""), cluster("member2", true, ""), cluster("down", false, "probe failed")}
	tests := []struct {
		name     string
		services []*corev1.Service
		pods     []*metav1.PartialObjectMetadata
		bindings []*karmada.ResourceBinding
		want     string
		wantCode int32
		wantMsg  []string
	}{
		{name: "no service", wantCode: 404, wantMsg: []string{`services "web" not found`}},
		{name: "own binding", services: []*corev1.Service{service("web", nil)},
			bindings: []*karmada.ResourceBinding{serviceBinding("web-service", "web", "member2")}, want: "member2"},
		{name: "duplicated binding picks first ready in scheduler order", services: []*corev1.Service{service("web", nil)},
			bindings: []*karmada.ResourceBinding{serviceBinding("web-service", "web", "down", "member2", "member1")}, want: "member2"},
		{name: "binding on a not ready cluster", services: []*corev1.Service{service("web", nil)},
			bindings: []*karmada.ResourceBinding{serviceBinding("web-service", "web", "down")}, wantCode: 503,
			wantMsg: []string{`member cluster "down" of service "ci/web" is not ready: probe failed`}},
		{name: "binding wins over selected pods", services: []*corev1.Service{service("web", app)},
			pods:     []*metav1.PartialObjectMetadata{pod("p1", app)},
			bindings: []*karmada.ResourceBinding{serviceBinding("web-service", "web", "member1"), binding("p1-pod", "p1", []string{"member2"})}, want: "member1"},
		{name: "pod binding of the same name does not place the service", services: []*corev1.Service{service("web", nil)},
			bindings: []*karmada.ResourceBinding{binding("web-pod", "web", []string{"member1"})}, wantCode: 503,
			wantMsg: []string{"no ResourceBinding and no selector"}},
		{name: "fallback to the selected pods' cluster", services: []*corev1.Service{service("web", app)},
			pods: []*metav1.PartialObjectMetadata{pod("p1", app), pod("p2", app), pod("other", map[string]string{"app": "x"})},
			bindings: []*karmada.ResourceBinding{binding("p1-pod", "p1", []string{"member1"}), binding("p2-pod", "p2", []string{"member1"}),
				binding("other-pod", "other", []string{"member2"})},
			want: "member1"},
		{name: "unplaced selected pods are ignored", services: []*corev1.Service{service("web", app)},
			pods:     []*metav1.PartialObjectMetadata{pod("p1", app), pod("p2", app)},
			bindings: []*karmada.ResourceBinding{binding("p2-pod", "p2", []string{"member2"})}, want: "member2"},
		{name: "selected pods on two clusters", services: []*corev1.Service{service("web", app)},
			pods:     []*metav1.PartialObjectMetadata{pod("p1", app), pod("p2", app)},
			bindings: []*karmada.ResourceBinding{binding("p1-pod", "p1", []string{"member2"}), binding("p2-pod", "p2", []string{"member1"})},
			wantCode: 409, wantMsg: []string{"(member1, member2)", `service "ci/web"`}},
		{name: "selects no pods", services: []*corev1.Service{service("web", app)}, wantCode: 503, wantMsg: []string{"selects no pods"}},
		{name: "selected pods not placed", services: []*corev1.Service{service("web", app)},
			pods: []*metav1.PartialObjectMetadata{pod("p1", app)}, wantCode: 503,
			wantMsg: []string{"none of the 1 pods it selects", `pod "ci/p1" is not placed`}},
		{name: "no selector", services: []*corev1.Service{service("web", nil)}, wantCode: 503, wantMsg: []string{"no selector"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inf := storeInformers(t, tt.pods, tt.bindings, ready)
			inf.Services = servicesInformer(t, tt.services...)
			r, err := New(Options{Informers: inf})
			if err != nil {
				t.Fatal(err)
			}
			_, ctx := ktesting.NewTestContext(t)
			got, err := r.ResolveService(ctx, ns, "web")
			if tt.wantCode == 0 {
				if err != nil || got != tt.want {
					t.Fatalf("ResolveService = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if got != "" {
				t.Errorf("cluster %q with an error", got)
			}
			st, ok := err.(apierrors.APIStatus)
			if !ok {
				t.Fatalf("error %v is not an APIStatus", err)
			}
			if st.Status().Code != tt.wantCode {
				t.Errorf("code %d, want %d: %v", st.Status().Code, tt.wantCode, err)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(st.Status().Message, m) {
					t.Errorf("message %q lacks %q", st.Status().Message, m)
				}
			}
		})
	}
}

func TestResolveServiceWithoutServicesCache(t *testing.T) {
	r, err := New(Options{Informers: storeInformers(t, nil, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.ResolveService(context.Background(), ns, "web")
	if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Code != http.StatusInternalServerError {
		t.Fatalf("err = %v", err)
	}
}
