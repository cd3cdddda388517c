package resolver

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada/karmadatest"
)

// toUnstructured renders a typed object as the API serves it, with a field
// the trimmed types do not declare, so the transform has something to drop.
func toUnstructured(t *testing.T, obj runtime.Object, gvk schema.GroupVersionKind) *unstructured.Unstructured {
	t.Helper()
	u := karmadatest.Unstructured(t, obj, gvk)
	if err := unstructured.SetNestedField(u.Object, "ignored", "spec", "undeclaredField"); err != nil {
		t.Fatal(err)
	}
	return u
}

var (
	bindingGVK = karmada.ResourceBindingGVR.GroupVersion().WithKind("ResourceBinding")
	clusterGVK = karmada.ClusterGVR.GroupVersion().WithKind("Cluster")
)

// TestResolveThroughInformers runs the real informers of pkg/karmada on fake
// clients: list, watch, transform and the spec.resource index all take part.
func TestResolveThroughInformers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	md := metadatafake.NewSimpleMetadataClient(scheme,
		pod("job-42", nil),
		pod("job-43", clusterLabel("member2")),
	)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{
			karmada.ResourceBindingGVR: "ResourceBindingList",
			karmada.ClusterGVR:         "ClusterList",
		},
		toUnstructured(t, binding("not-the-guessable-name", "job-42", []string{"member2", "member1"}, "member1"), bindingGVK),
		toUnstructured(t, binding("job-43-pod", "job-43", []string{"member1", "member2"}), bindingGVK),
		toUnstructured(t, member1, clusterGVK),
		toUnstructured(t, member2, clusterGVK),
	)
	r := startResolver(ctx, t, karmada.InformersOptions{Metadata: md, Dynamic: dyn})

	for podName, want := range map[string]string{"job-42": "member1", "job-43": "member2"} {
		if got, err := r.Resolve(ctx, ns, podName); err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", podName, got, err, want)
		}
	}
	if _, err := r.Resolve(ctx, ns, "job-44"); !apierrors.IsNotFound(err) {
		t.Fatalf("Resolve(job-44) before it exists: %v, want NotFound", err)
	}

	// Objects arriving by watch: a new pod, first unplaced, then placed.
	if _, err := md.Resource(karmada.PodGVR).Namespace(ns).(metadatafake.MetadataClient).CreateFake(pod("job-44", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "job-44 not placed", func() bool {
		_, err := r.Resolve(ctx, ns, "job-44")
		return apierrors.IsServiceUnavailable(err)
	})
	rbs := dyn.Resource(karmada.ResourceBindingGVR).Namespace(ns)
	if _, err := rbs.Create(ctx, toUnstructured(t, binding("job-44-pod", "job-44", []string{"member2"}), bindingGVK), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "job-44 on member2", func() bool {
		got, err := r.Resolve(ctx, ns, "job-44")
		return err == nil && got == "member2"
	})

	// A cluster turning NotReady is seen through the transform too.
	if _, err := dyn.Resource(karmada.ClusterGVR).Update(ctx, toUnstructured(t, cluster("member2", false, "cluster is not reachable"), clusterGVK), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "member2 not ready", func() bool {
		_, err := r.Resolve(ctx, ns, "job-43")
		return apierrors.IsServiceUnavailable(err)
	})
}

func eventually(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestResolveServiceThroughInformers runs ResolveService on the real
// informers: the Services informer's transform, the pods' namespace index
// and a binding of kind Service arriving by watch.
func TestResolveServiceThroughInformers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, pod("web-1", map[string]string{"app": "web"}))
	svcGVK := schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{
			karmada.ResourceBindingGVR: "ResourceBindingList",
			karmada.ClusterGVR:         "ClusterList",
			karmada.ServiceGVR:         "ServiceList",
		},
		toUnstructured(t, binding("web-1-pod", "web-1", []string{"member1"}), bindingGVK),
		toUnstructured(t, member1, clusterGVK),
		toUnstructured(t, member2, clusterGVK),
		toUnstructured(t, service("web", map[string]string{"app": "web"}), svcGVK),
	)
	r := startResolver(ctx, t, karmada.InformersOptions{Metadata: md, Dynamic: dyn, Services: true})
	if got, err := r.ResolveService(ctx, ns, "web"); err != nil || got != "member1" {
		t.Fatalf("ResolveService(web) by its pods = %q, %v; want member1", got, err)
	}
	rbs := dyn.Resource(karmada.ResourceBindingGVR).Namespace(ns)
	if _, err := rbs.Create(ctx, toUnstructured(t, serviceBinding("web-service", "web", "member2"), bindingGVK), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "web placed on member2 by its binding", func() bool {
		got, err := r.ResolveService(ctx, ns, "web")
		return err == nil && got == "member2"
	})
}

// startResolver runs the real informers of pkg/karmada on opts' clients and
// returns a Resolver over them once their caches are synced.
func startResolver(ctx context.Context, t *testing.T, opts karmada.InformersOptions) *Resolver {
	t.Helper()
	inf, err := karmada.NewInformers(opts)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Informers: inf})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx)
	if !inf.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	return r
}
