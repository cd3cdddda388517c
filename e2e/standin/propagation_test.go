package standin

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

type propagationFixture struct {
	karmada    *dynamicfake.FakeDynamicClient
	members    map[string]*k8sfake.Clientset
	propagator *propagator
	mu         sync.Mutex
	ready      map[string]bool
}

func newPropagationFixture(t *testing.T, objs ...runtime.Object) (*propagationFixture, context.Context) {
	t.Helper()
	return newPropagationFixtureWith(t, map[string]bool{"member1": true, "member2": true}, objs...)
}

func newPropagationFixtureWith(t *testing.T, ready map[string]bool, objs ...runtime.Object) (*propagationFixture, context.Context) {
	t.Helper()
	f := &propagationFixture{
		karmada: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
			karmada.PodGVR:               "PodList",
			karmada.PropagationPolicyGVR: "PropagationPolicyList",
			karmada.ResourceBindingGVR:   "ResourceBindingList",
			karmada.WorkGVR:              "WorkList",
			customizationGVR:             "ResourceInterpreterCustomizationList",
		}, objs...),
		members: map[string]*k8sfake.Clientset{"member1": k8sfake.NewClientset(), "member2": k8sfake.NewClientset()},
		ready:   ready,
	}
	clients := map[string]kubernetes.Interface{}
	for n, c := range f.members {
		clients[n] = c
	}
	p, err := newPropagator(propagatorOptions{Karmada: f.karmada, Members: clients, Ready: f.isReady})
	if err != nil {
		t.Fatal(err)
	}
	f.propagator = p
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.run(ctx, 2, nil); err != nil && ctx.Err() == nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return f, ctx
}

func (f *propagationFixture) isReady(c string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready[c]
}

func (f *propagationFixture) setReady(c string, r bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready[c] = r
}

func policy(name string, placement map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.karmada.io/v1alpha1",
		"kind":       "PropagationPolicy",
		"metadata":   map[string]any{"name": name, "namespace": "ci"},
		"spec": map[string]any{
			"resourceSelectors": []any{map[string]any{
				"apiVersion":    "v1",
				"kind":          "Pod",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"app": "job"}},
			}},
			"placement": placement,
		},
	}}
}

func divided(clusters ...string) map[string]any {
	names := make([]any, 0, len(clusters))
	for _, c := range clusters {
		names = append(names, c)
	}
	return map[string]any{
		"clusterAffinity":   map[string]any{"clusterNames": names},
		"replicaScheduling": map[string]any{"replicaSchedulingType": "Divided"},
	}
}

func templatePod(name, uid string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name": name, "namespace": "ci", "uid": uid, "resourceVersion": "7",
			"labels": map[string]any{"app": "job"},
		},
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "build", "image": "busybox", "command": []any{"sh"}}},
		},
		"status": map[string]any{"phase": "Pending", "qosClass": "BestEffort"},
	}}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, ctx context.Context, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (f *propagationFixture) binding(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	return f.karmada.Resource(karmada.ResourceBindingGVR).Namespace("ci").Get(ctx, karmada.BindingName(name, "Pod"), metav1.GetOptions{})
}

func (f *propagationFixture) memberPod(ctx context.Context, cluster, name string) (*corev1.Pod, error) {
	return f.members[cluster].CoreV1().Pods("ci").Get(ctx, name, metav1.GetOptions{})
}

func (f *propagationFixture) work(ctx context.Context, cluster, name string) (*unstructured.Unstructured, error) {
	return f.karmada.Resource(karmada.WorkGVR).Namespace("karmada-es-"+cluster).Get(ctx, workName("ci", name), metav1.GetOptions{})
}

func exists[T any](ctx context.Context, get func(context.Context) (T, error)) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		_, err := get(ctx)
		return err == nil, nil
	}
}

func gone[T any](get func(context.Context) (T, error)) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		_, err := get(ctx)
		return apierrors.IsNotFound(err), nil
	}
}

func TestPropagatePodLifecycle(t *testing.T) {
	f, ctx := newPropagationFixture(t, policy("ci-jobs", divided("member1", "member2")), templatePod("job-42", "tmpl-uid"))

	// Binding: Karmada's name, spec.resource, scheduled once to the first
	// listed Ready cluster.
	var b *unstructured.Unstructured
	eventually(t, ctx, "binding scheduled", func(ctx context.Context) (bool, error) {
		got, err := f.binding(ctx, "job-42")
		if err != nil {
			return false, nil
		}
		b = got
		return len(bindingClusters(got)) > 0, nil
	})
	if got := bindingClusters(b); len(got) != 1 || got[0] != "member1" {
		t.Fatalf("spec.clusters = %v, want [member1]", got)
	}
	res, _, _ := unstructured.NestedStringMap(b.Object, "spec", "resource")
	wantRes := map[string]string{"apiVersion": "v1", "kind": "Pod", "namespace": "ci", "name": "job-42", "uid": "tmpl-uid"}
	for k, v := range wantRes {
		if res[k] != v {
			t.Errorf("spec.resource.%s = %q, want %q", k, res[k], v)
		}
	}
	if res["resourceVersion"] == "" {
		t.Error("spec.resource.resourceVersion is empty")
	}
	if b.GetLabels()[karmada.PermanentIDLabel] == "" || b.GetLabels()[policyPermanentIDLabel] == "" {
		t.Errorf("binding labels = %v", b.GetLabels())
	}
	if refs := b.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != "tmpl-uid" || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("ownerReferences = %+v", refs)
	}
	if sched, _, _ := unstructured.NestedString(b.Object, "spec", "placement", "replicaScheduling", "replicaSchedulingType"); sched != "Divided" {
		t.Errorf("placement not copied: %v", b.Object["spec"])
	}
	if ts, _, _ := unstructured.NestedString(b.Object, "status", "lastScheduledTime"); ts == "" {
		t.Error("status.lastScheduledTime not set")
	}

	// Work and member pod in member1.
	eventually(t, ctx, "member1 pod", exists(ctx, func(ctx context.Context) (*corev1.Pod, error) { return f.memberPod(ctx, "member1", "job-42") }))
	work, err := f.work(ctx, "member1", "job-42")
	if err != nil {
		t.Fatalf("work: %v", err)
	}
	if work.GetLabels()[karmada.PermanentIDLabel] != b.GetLabels()[karmada.PermanentIDLabel] {
		t.Errorf("work labels = %v", work.GetLabels())
	}
	manifests, _, _ := unstructured.NestedSlice(work.Object, "spec", "workload", "manifests")
	if len(manifests) != 1 || manifests[0].(map[string]any)["kind"] != "Pod" {
		t.Errorf("work manifests = %v", manifests)
	}
	pod, _ := f.memberPod(ctx, "member1", "job-42")
	if pod.Spec.NodeName != "" || len(pod.OwnerReferences) != 0 || pod.UID == "tmpl-uid" || pod.ResourceVersion == "7" {
		t.Errorf("member pod not stripped: nodeName %q owners %v uid %q rv %q", pod.Spec.NodeName, pod.OwnerReferences, pod.UID, pod.ResourceVersion)
	}
	if pod.Status.Phase != "" || pod.Status.QOSClass != "" {
		t.Errorf("member pod carries the template status: %+v", pod.Status)
	}
	for k, v := range map[string]string{karmada.ManagedLabel: "true", "app": "job", karmada.PermanentIDLabel: b.GetLabels()[karmada.PermanentIDLabel], workPermanentIDLabel: work.GetLabels()[workPermanentIDLabel]} {
		if pod.Labels[k] != v {
			t.Errorf("member label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	for k, v := range map[string]string{karmada.WorkNamespaceAnnotation: "karmada-es-member1", karmada.WorkNameAnnotation: work.GetName(), karmada.TemplateUIDAnnotation: "tmpl-uid"} {
		if pod.Annotations[k] != v {
			t.Errorf("member annotation %s = %q, want %q", k, pod.Annotations[k], v)
		}
	}
	if _, err := f.members["member1"].CoreV1().Namespaces().Get(ctx, "ci", metav1.GetOptions{}); err != nil {
		t.Errorf("member namespace not created: %v", err)
	}

	// Member status flows back, reduced as Karmada's default interpreter does.
	started := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      "10.0.0.7",
		HostIP:     "127.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "build", Ready: true, RestartCount: 2, Image: "busybox",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}},
	}
	pod.Spec.NodeName = "member1-node"
	if _, err := f.members["member1"].CoreV1().Pods("ci").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var tmplStatus map[string]any
	eventually(t, ctx, "template status Running", func(ctx context.Context) (bool, error) {
		tmpl, err := f.karmada.Resource(karmada.PodGVR).Namespace("ci").Get(ctx, "job-42", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		tmplStatus, _, _ = unstructured.NestedMap(tmpl.Object, "status")
		return tmplStatus["phase"] == "Running", nil
	})
	for _, k := range []string{"conditions", "podIP", "hostIP", "nodeName"} {
		if _, ok := tmplStatus[k]; ok {
			t.Errorf("template status has %s: %v", k, tmplStatus)
		}
	}
	if tmplStatus["qosClass"] != "BestEffort" {
		t.Errorf("template qosClass = %v, want the apiserver's BestEffort kept", tmplStatus["qosClass"])
	}
	cs, _ := tmplStatus["containerStatuses"].([]any)
	if len(cs) != 1 {
		t.Fatalf("containerStatuses = %v", tmplStatus["containerStatuses"])
	}
	c := cs[0].(map[string]any)
	if c["name"] != "" || c["ready"] != true || c["state"].(map[string]any)["running"] == nil {
		t.Errorf("containerStatus = %v, want nameless {ready, state}", c)
	}
	eventually(t, ctx, "binding aggregatedStatus", func(ctx context.Context) (bool, error) {
		b, err := f.binding(ctx, "job-42")
		if err != nil {
			return false, err
		}
		agg, _, _ := unstructured.NestedSlice(b.Object, "status", "aggregatedStatus")
		if len(agg) != 1 {
			return false, nil
		}
		m := agg[0].(map[string]any)
		st, _ := m["status"].(map[string]any)
		return m["clusterName"] == "member1" && m["applied"] == true && m["health"] == "Healthy" && st["phase"] == "Running", nil
	})

	// Move: edit spec.clusters; the loop follows and never reschedules.
	b, _ = f.binding(ctx, "job-42")
	if err := unstructured.SetNestedSlice(b.Object, []any{map[string]any{"name": "member2", "replicas": int64(1)}}, "spec", "clusters"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.karmada.Resource(karmada.ResourceBindingGVR).Namespace("ci").Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "member2 pod", exists(ctx, func(ctx context.Context) (*corev1.Pod, error) { return f.memberPod(ctx, "member2", "job-42") }))
	eventually(t, ctx, "member2 work", exists(ctx, func(ctx context.Context) (*unstructured.Unstructured, error) { return f.work(ctx, "member2", "job-42") }))
	eventually(t, ctx, "member1 pod gone", gone(func(ctx context.Context) (*corev1.Pod, error) { return f.memberPod(ctx, "member1", "job-42") }))
	eventually(t, ctx, "member1 work gone", gone(func(ctx context.Context) (*unstructured.Unstructured, error) { return f.work(ctx, "member1", "job-42") }))
	b, _ = f.binding(ctx, "job-42")
	if got := bindingClusters(b); len(got) != 1 || got[0] != "member2" {
		t.Fatalf("spec.clusters rewritten to %v", got)
	}

	// A member pod deleted out of band comes back from its Work.
	if err := f.members["member2"].CoreV1().Pods("ci").Delete(ctx, "job-42", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "member2 pod recreated", exists(ctx, func(ctx context.Context) (*corev1.Pod, error) { return f.memberPod(ctx, "member2", "job-42") }))

	// Deleting the template deletes everything derived from it.
	if err := f.karmada.Resource(karmada.PodGVR).Namespace("ci").Delete(ctx, "job-42", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "binding gone", gone(func(ctx context.Context) (*unstructured.Unstructured, error) { return f.binding(ctx, "job-42") }))
	eventually(t, ctx, "member2 work gone", gone(func(ctx context.Context) (*unstructured.Unstructured, error) { return f.work(ctx, "member2", "job-42") }))
	eventually(t, ctx, "member2 pod gone", gone(func(ctx context.Context) (*corev1.Pod, error) { return f.memberPod(ctx, "member2", "job-42") }))
}

func TestScheduling(t *testing.T) {
	for _, tc := range []struct {
		name      string
		placement map[string]any
		notReady  []string
		want      []string
	}{
		{"divided picks the first listed", divided("member2", "member1"), nil, []string{"member2"}},
		{"divided skips a cluster not Ready", divided("member1", "member2"), []string{"member1"}, []string{"member2"}},
		{"duplicated goes everywhere", map[string]any{"clusterAffinity": map[string]any{"clusterNames": []any{"member1", "member2"}}}, nil, []string{"member1", "member2"}},
		{"maxGroups 1 is one cluster", map[string]any{"spreadConstraints": []any{map[string]any{"spreadByField": "cluster", "maxGroups": int64(1)}}}, nil, []string{"member1"}},
		{"nothing Ready, nothing scheduled", divided("member1"), []string{"member1", "member2"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notReady := map[string]bool{}
			for _, c := range tc.notReady {
				notReady[c] = true
			}
			got := pickClusters(tc.placement, []string{"member1", "member2"}, func(c string) bool { return !notReady[c] })
			if len(got) != len(tc.want) {
				t.Fatalf("clusters = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("clusters = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestScheduleWaitsForReadyCluster: a binding made while no cluster is
// Ready is scheduled once one becomes Ready.
func TestScheduleWaitsForReadyCluster(t *testing.T) {
	fx, ctx := newPropagationFixtureWith(t, map[string]bool{}, policy("ci-jobs", divided("member1")), templatePod("job-7", "uid-7"))
	eventually(t, ctx, "unscheduled binding", exists(ctx, func(ctx context.Context) (*unstructured.Unstructured, error) { return fx.binding(ctx, "job-7") }))
	b, _ := fx.binding(ctx, "job-7")
	if c := bindingClusters(b); len(c) != 0 {
		t.Fatalf("scheduled to %v with no Ready cluster", c)
	}
	fx.setReady("member1", true)
	eventually(t, ctx, "scheduled after Ready", func(ctx context.Context) (bool, error) {
		b, err := fx.binding(ctx, "job-7")
		return err == nil && len(bindingClusters(b)) == 1, nil
	})
}

func TestPolicySelection(t *testing.T) {
	pod := templatePod("job-1", "u1")
	withSelectors := func(name string, priority int64, selectors ...any) *unstructured.Unstructured {
		p := policy(name, nil)
		_ = unstructured.SetNestedSlice(p.Object, selectors, "spec", "resourceSelectors")
		if priority != 0 {
			_ = unstructured.SetNestedField(p.Object, priority, "spec", "priority")
		}
		return p
	}
	byName := withSelectors("by-name", 0, map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "job-1"})
	otherName := withSelectors("other-name", 0, map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "job-2"})
	otherKind := withSelectors("deployments", 0, map[string]any{"apiVersion": "apps/v1", "kind": "Deployment"})
	otherLabel := withSelectors("web", 0, map[string]any{"apiVersion": "v1", "kind": "Pod",
		"labelSelector": map[string]any{"matchLabels": map[string]any{"app": "web"}}})
	allPods := withSelectors("all-pods", 0, map[string]any{"apiVersion": "v1", "kind": "Pod"})
	urgent := withSelectors("z-urgent", 5, map[string]any{"apiVersion": "v1", "kind": "Pod"})
	for _, tc := range []struct {
		name     string
		policies []*unstructured.Unstructured
		want     string
	}{
		{"label selector", []*unstructured.Unstructured{policy("jobs", nil)}, "jobs"},
		{"name", []*unstructured.Unstructured{byName}, "by-name"},
		{"other name", []*unstructured.Unstructured{otherName}, ""},
		{"other kind", []*unstructured.Unstructured{otherKind}, ""},
		{"other label", []*unstructured.Unstructured{otherLabel}, ""},
		{"ties go by name", []*unstructured.Unstructured{allPods, byName}, "all-pods"},
		{"higher priority wins", []*unstructured.Unstructured{allPods, byName, urgent}, "z-urgent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pickPolicy(tc.policies, pod)
			name := ""
			if got != nil {
				name = got.GetName()
			}
			if name != tc.want {
				t.Fatalf("policy = %q, want %q", name, tc.want)
			}
		})
	}
}
