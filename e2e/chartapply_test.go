package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/helmtest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

const (
	// chartApplyNamespace is the release namespace of the rendered objects;
	// no other test or the env uses it, and it is only created when a
	// rendered namespaced object has no namespace of its own.
	chartApplyNamespace = "e2e-chartapply"
	// chartApplyFieldManager owns the dry-run applies.
	chartApplyFieldManager = "e2e-chartapply"
)

// TestChartObjectsAccepted renders the chart for target=karmadaApiserver in
// both auth modes and has the real karmada-apiserver (with Karmada's CRDs)
// accept every object: the authorize release, the superset with the member
// RBAC and the ClusterPropagationPolicy, is created for real; the passthrough
// release is validated by a server-side dry-run apply. Both use strict field
// validation, so a field the schema would prune also fails the test.
//
// The Pod ResourceInterpreterCustomization has a fixed name and targets every
// Pod: created for real it would change how Karmada aggregates the
// status of every test's pods, and TestPodStatusFidelity needs none to exist.
// It is validated by dry-run in both modes instead.
//
// Not parallel: it creates cluster-scoped RBAC (named after its own releases,
// bound to the chart's default identity) and a ClusterPropagationPolicy
// (selecting only the release's own member ClusterRole and binding, which
// Karmada then creates in the members), so neither changes what other tests
// see.
func TestChartObjectsAccepted(t *testing.T) {
	ctx := t.Context()
	cfg := testEnv.KarmadaConfig(env.UserAdmin)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		// An unavailable group (the aggregated cluster API, say) is
		// reported but the rest is usable; a group the chart needs and that
		// is missing fails at mapping below.
		if !discovery.IsGroupDiscoveryFailedError(err) {
			t.Fatalf("discover karmada-apiserver: %v", err)
		}
		t.Logf("discovery partially failed: %v", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)

	authorize := renderChart(t, "e2e-chartapply-authz", "authorize")
	passthrough := renderChart(t, "e2e-chartapply-pass", "passthrough")

	// The test is only worth something if the renders hold what the issue
	// asks about: RBAC in both modes, member RBAC and a policy in authorize.
	for _, want := range []struct {
		objs  []*unstructured.Unstructured
		kind  string
		count int
	}{
		{passthrough, "ClusterRole", 1},
		{passthrough, "ClusterRoleBinding", 1},
		{passthrough, "Role", 1},
		{passthrough, "RoleBinding", 1},
		{passthrough, "ResourceInterpreterCustomization", 1},
		{authorize, "ClusterRole", 3},
		{authorize, "ClusterRoleBinding", 3},
		{authorize, "Role", 1},
		{authorize, "RoleBinding", 1},
		{authorize, "ClusterPropagationPolicy", 1},
		{authorize, "ResourceInterpreterCustomization", 1},
	} {
		if got := countKind(want.objs, want.kind); got < want.count {
			t.Errorf("rendered %d %s, want at least %d", got, want.kind, want.count)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Registered first, so it runs after every delete: the test must leave
	// nothing behind in the shared environment.
	type objectRef struct {
		gvr             schema.GroupVersionResource
		namespace, name string
	}
	var made []objectRef
	track := func(t *testing.T, gvr schema.GroupVersionResource, namespace, name string) {
		made = append(made, objectRef{gvr, namespace, name})
		t.Cleanup(func() { deleteObject(t, dyn, gvr, namespace, name) })
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, o := range made {
			err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				u, err := dyn.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return true, nil
				}
				// No controller-manager runs here to finish a namespace's
				// deletion; Terminating is as far as it gets.
				return err == nil && o.gvr.Resource == "namespaces" && u.GetDeletionTimestamp() != nil, nil
			})
			if err != nil {
				t.Errorf("cleanup: %s %s/%s is still there: %v", o.gvr.Resource, o.namespace, o.name, err)
			}
		}
	})

	// The namespace outlives the subtests, so it is the parent's to delete.
	parent := t
	var namespaceReady bool
	ensureNamespace := func(t *testing.T) {
		t.Helper()
		if namespaceReady {
			return
		}
		ns := &unstructured.Unstructured{}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		ns.SetName(chartApplyNamespace)
		if _, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", chartApplyNamespace, err)
		}
		track(parent, corev1.SchemeGroupVersion.WithResource("namespaces"), "", chartApplyNamespace)
		namespaceReady = true
	}

	t.Run("authorize/create", func(t *testing.T) {
		for _, obj := range authorize {
			ri, ns := resourceFor(t, dyn, mapper, obj, ensureNamespace)
			if isPodInterpreter(obj) {
				dryRunApply(ctx, t, ri, obj)
				continue
			}
			created, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict, FieldManager: chartApplyFieldManager})
			if err != nil {
				t.Errorf("create %s: %v", describe(obj), err)
				continue
			}
			// Tracked per object, so whatever was created is deleted even
			// when a later create fails.
			track(t, mustMapping(t, mapper, obj).Resource, ns, created.GetName())
			if created.GetUID() == "" {
				t.Errorf("create %s: the apiserver returned no UID", describe(obj))
			}
			// Strict validation rejects unknown fields; this also shows the
			// stored spec is what the chart rendered (no defaulting or
			// pruning dropped a field the chart relies on).
			for _, field := range []string{"rules", "roleRef", "subjects", "spec"} {
				want, ok := obj.Object[field]
				if !ok {
					continue
				}
				if got := created.Object[field]; !jsonContains(t, got, want) {
					t.Errorf("%s: stored %s differs from the rendered one\nrendered: %v\nstored:   %v", describe(obj), field, want, got)
				}
			}
		}
	})

	t.Run("passthrough/dry-run-apply", func(t *testing.T) {
		for _, obj := range passthrough {
			ri, _ := resourceFor(t, dyn, mapper, obj, ensureNamespace)
			dryRunApply(ctx, t, ri, obj)
		}
	})
}

// renderChart runs helm template for release in the given auth mode and
// decodes every document.
func renderChart(t *testing.T, release, authMode string) []*unstructured.Unstructured {
	t.Helper()
	out, stderr, err := helmtest.Run(t, "template", release, filepath.Join(repoRoot(t), "charts", "gateway"),
		"--namespace", chartApplyNamespace,
		"--kube-version", helmtest.KubeVersion,
		"--set", "target=karmadaApiserver",
		"--set", "auth.mode="+authMode)
	if err != nil {
		t.Fatalf("helm template %s (auth.mode=%s): %v\n%s", release, authMode, err, stderr)
	}
	objs := decodeDocuments(t, out)
	if len(objs) == 0 {
		t.Fatalf("helm template %s (auth.mode=%s) rendered nothing", release, authMode)
	}
	return objs
}

// repoRoot is the root module's directory, the parent of this module.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// decodeDocuments splits a multi-document stream and strictly decodes each
// non-empty document.
func decodeDocuments(t *testing.T, s string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("split rendered YAML: %v", err)
		}
		var m map[string]any
		if err := yaml.UnmarshalStrict(doc, &m); err != nil {
			t.Fatalf("rendered document is not valid YAML: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue // only comments or "---"
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			t.Fatalf("rendered document lacks apiVersion, kind or name:\n%s", doc)
		}
		objs = append(objs, u)
	}
}

func mustMapping(t *testing.T, mapper meta.RESTMapper, obj *unstructured.Unstructured) *meta.RESTMapping {
	t.Helper()
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("karmada-apiserver does not serve %s: %v", gvk, err)
	}
	return m
}

// resourceFor is the dynamic client for obj and the namespace it goes to: a
// namespaced object without a namespace goes to the release namespace, as
// helm install would put it.
func resourceFor(t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured, ensureNamespace func(*testing.T)) (dynamic.ResourceInterface, string) {
	t.Helper()
	m := mustMapping(t, mapper, obj)
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		if obj.GetNamespace() != "" {
			t.Errorf("%s is cluster-scoped but rendered with namespace %q", describe(obj), obj.GetNamespace())
		}
		return dyn.Resource(m.Resource), ""
	}
	if obj.GetNamespace() == "" {
		ensureNamespace(t)
		obj.SetNamespace(chartApplyNamespace)
	}
	return dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), obj.GetNamespace()
}

// dryRunApply server-side applies obj with DryRun=All and strict field
// validation: admission, schema and RBAC checks run, nothing is stored.
func dryRunApply(ctx context.Context, t *testing.T, ri dynamic.ResourceInterface, obj *unstructured.Unstructured) {
	t.Helper()
	body, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatalf("encode %s: %v", describe(obj), err)
	}
	applied, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		DryRun:          []string{metav1.DryRunAll},
		FieldManager:    chartApplyFieldManager,
		FieldValidation: metav1.FieldValidationStrict,
		Force:           ptr.To(true),
	})
	if err != nil {
		t.Errorf("dry-run apply %s: %v", describe(obj), err)
		return
	}
	if applied.GetName() != obj.GetName() || applied.GetKind() != obj.GetKind() {
		t.Errorf("dry-run apply %s returned %s %q", describe(obj), applied.GetKind(), applied.GetName())
	}
	// A dry run must leave nothing behind, or the test would leak state.
	if _, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after dry-run apply, get %s: %v; want NotFound", describe(obj), err)
	}
}

// deleteObject deletes what the test created; t.Context is already canceled
// when cleanups run.
func deleteObject(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if namespace != "" {
		ri = dyn.Resource(gvr).Namespace(namespace)
	}
	if err := ri.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("cleanup: delete %s %s/%s: %v", gvr.Resource, namespace, name, err)
	}
}

// isPodInterpreter reports whether obj is a ResourceInterpreterCustomization
// for core v1 Pods.
func isPodInterpreter(obj *unstructured.Unstructured) bool {
	if obj.GroupVersionKind().GroupVersion() != karmada.ResourceInterpreterCustomizationGVR.GroupVersion() || obj.GetKind() != "ResourceInterpreterCustomization" {
		return false
	}
	apiVersion, _, _ := unstructured.NestedString(obj.Object, "spec", "target", "apiVersion")
	kind, _, _ := unstructured.NestedString(obj.Object, "spec", "target", "kind")
	return apiVersion == "v1" && kind == "Pod"
}

// jsonContains reports whether every field of want is in got with the same
// value (got may have more: defaults the apiserver fills in).
func jsonContains(t *testing.T, got, want any) bool {
	t.Helper()
	switch w := normalize(t, want).(type) {
	case map[string]any:
		g, ok := normalize(t, got).(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			if !jsonContains(t, g[k], wv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := normalize(t, got).([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !jsonContains(t, g[i], w[i]) {
				return false
			}
		}
		return true
	default:
		gb, _ := json.Marshal(normalize(t, got))
		wb, _ := json.Marshal(w)
		return bytes.Equal(gb, wb)
	}
}

// normalize round-trips v through JSON so YAML- and JSON-decoded values
// (int64 vs float64) compare equal.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %v: %v", v, err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return out
}

func countKind(objs []*unstructured.Unstructured, kind string) int {
	n := 0
	for _, o := range objs {
		if o.GetKind() == kind {
			n++
		}
	}
	return n
}

func describe(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return obj.GetKind() + " " + ns + "/" + obj.GetName()
	}
	return obj.GetKind() + " " + obj.GetName()
}
