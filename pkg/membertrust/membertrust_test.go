package membertrust

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada/karmadatest"
)

var (
	published  = types.NamespacedName{Namespace: "karmada-cluster", Name: "gateway-member-trust"}
	clusterGVK = karmada.ClusterGVR.GroupVersion().WithKind("Cluster")
)

func cluster(name string, secretRef bool, secretNS string) *karmada.Cluster {
	c := &karmada.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: karmada.ClusterSpec{
		APIEndpoint:           "https://" + name + ".test",
		ImpersonatorSecretRef: &karmada.LocalSecretRef{Namespace: secretNS, Name: name + "-impersonator"},
	}}
	if secretRef {
		c.Spec.SecretRef = &karmada.LocalSecretRef{Namespace: secretNS, Name: name}
	}
	return c
}

func secret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

type env struct {
	dyn  *dynamicfake.FakeDynamicClient
	kube *kubefake.Clientset
}

// start runs the Controller as gateway member-trust does, on a Cluster
// informer alone and a clientset for Secrets; react, when set, runs first
// on every Secret request.
func start(t *testing.T, react k8stesting.ReactionFunc, clusters []*karmada.Cluster, secrets ...runtime.Object) *env {
	t.Helper()
	objs := []runtime.Object{}
	for _, c := range clusters {
		objs = append(objs, karmadatest.Unstructured(t, c, clusterGVK))
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{karmada.ClusterGVR: "ClusterList"}, objs...)
	kube := kubefake.NewClientset(secrets...)
	if react != nil {
		kube.PrependReactor("*", "secrets", react)
	}
	inf := karmada.NewClusterInformer(dyn, 0)
	c, err := New(Options{Clusters: inf, Client: kube, Published: published, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go inf.Run(ctx.Done())
	go func() { defer close(done); _ = c.Run(ctx) }()
	return &env{dyn: dyn, kube: kube}
}

// waitPublished waits until the published Secret holds exactly want.
func (e *env) waitPublished(t *testing.T, what string, want map[string]string) {
	t.Helper()
	var got map[string][]byte
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		obj, err := e.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("secrets"), published.Namespace, published.Name)
		if err != nil {
			return false, nil
		}
		got = obj.(*corev1.Secret).Data
		if len(got) != len(want) {
			return false, nil
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || string(g) != v {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: published %q, want %q", what, got, want)
	}
}

// TestPublishesOnlyTokensAndCAs: the published Secret holds each Cluster's
// impersonator token and, when it has a secretRef, that Secret's caBundle
// (empty when it has none: Karmada then trusts no CA), and nothing else of
// those Secrets: not the secretRef's token (a Push member's cluster-admin
// ServiceAccount), not any other key. It follows rotations, new and
// deleted Clusters.
func TestPublishesOnlyTokensAndCAs(t *testing.T) {
	e := start(t, nil,
		[]*karmada.Cluster{cluster("push", true, "karmada-cluster"), cluster("noca", true, "karmada-cluster"), cluster("pull", false, "pull-secrets")},
		secret("karmada-cluster", "push", map[string]string{"caBundle": "push-ca", "token": "cluster-admin", "other": "x"}),
		secret("karmada-cluster", "push-impersonator", map[string]string{"token": "push-imp", "ca.crt": "y"}),
		secret("karmada-cluster", "noca", map[string]string{"token": "cluster-admin"}),
		secret("karmada-cluster", "noca-impersonator", map[string]string{"token": "noca-imp"}),
		secret("pull-secrets", "pull-impersonator", map[string]string{"token": "pull-imp"}),
	)
	e.waitPublished(t, "at the start", map[string]string{
		"push.token": "push-imp", "push.caBundle": "push-ca",
		"noca.token": "noca-imp", "noca.caBundle": "",
		"pull.token": "pull-imp",
	})

	ctx := context.Background()
	if _, err := e.kube.CoreV1().Secrets("karmada-cluster").Update(ctx, secret("karmada-cluster", "push-impersonator", map[string]string{"token": "rotated"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.dyn.Resource(karmada.ClusterGVR).Delete(ctx, "noca", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.CoreV1().Secrets("karmada-cluster").Create(ctx, secret("karmada-cluster", "late-impersonator", map[string]string{"token": "late-imp"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dyn.Resource(karmada.ClusterGVR).Create(ctx, karmadatest.Unstructured(t, cluster("late", false, "karmada-cluster"), clusterGVK), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPublished(t, "after a rotation, a deletion and a join", map[string]string{
		"push.token": "rotated", "push.caBundle": "push-ca",
		"pull.token": "pull-imp",
		"late.token": "late-imp",
	})
}

// TestUnreadableNamespaceKeepsWhatWasPublished: a namespace the controller
// may not list (its RBAC narrowed, an outage) never empties what gateways
// have for the Clusters whose Secrets are there.
func TestUnreadableNamespaceKeepsWhatWasPublished(t *testing.T) {
	forbidden := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "locked" && (a.GetVerb() == "list" || a.GetVerb() == "watch") {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("no"))
		}
		return false, nil, nil
	}
	prev := secret(published.Namespace, published.Name, map[string]string{"old.token": "kept"})
	e := start(t, forbidden,
		[]*karmada.Cluster{cluster("old", false, "locked"), cluster("push", true, "karmada-cluster")},
		prev,
		secret("karmada-cluster", "push", map[string]string{"caBundle": "push-ca"}),
		secret("karmada-cluster", "push-impersonator", map[string]string{"token": "push-imp"}),
	)
	e.waitPublished(t, "with a namespace unreadable", map[string]string{
		"old.token": "kept", "push.token": "push-imp", "push.caBundle": "push-ca",
	})
}
