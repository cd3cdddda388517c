package standin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/interpreter"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// shippedCustomization is the ResourceInterpreterCustomization this
// repository ships for Karmada, as an object for karmada-apiserver.
func shippedCustomization(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "karmada", "pod-status-interpreter.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func customizationObject(name, kind, field, script string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "config.karmada.io/v1alpha1",
		"kind":       "ResourceInterpreterCustomization",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"target":         map[string]any{"apiVersion": "v1", "kind": kind},
			"customizations": map[string]any{field: map[string]any{"luaScript": script}},
		},
	}}
}

// runningMemberStatus is a member pod whose build container is up and Ready.
func runningMemberStatus() corev1.PodStatus {
	started := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return corev1.PodStatus{
		Phase:    corev1.PodRunning,
		PodIP:    "10.0.0.7",
		HostIP:   "127.0.0.1",
		QOSClass: corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "build", Ready: true, RestartCount: 2, Image: "busybox", ImageID: "busybox@sha256:aa",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}},
	}
}

func (f *propagationFixture) templateStatus(ctx context.Context, name string) (map[string]any, error) {
	tmpl, err := f.karmada.Resource(karmada.PodGVR).Namespace("ci").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	status, _, err := unstructured.NestedMap(tmpl.Object, "status")
	return status, err
}

// writes lists the fake karmada-apiserver's create, update and patch calls
// so far. Deletes are left out: removing a cluster's Work is a blind delete
// that is a no-op once it is gone.
func (f *propagationFixture) writes() []string {
	var out []string
	for _, a := range f.karmada.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch":
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	return out
}

// assertSettled fails unless a sync of key, on caches that are current,
// writes nothing: a stand-in that rewrites an unchanged status would loop on
// its own events. A sync's own write always lands in its window, so such a
// stand-in never passes; the retry only rides out a worker's last write of
// the same status from a cache that was a moment behind.
func (f *propagationFixture) assertSettled(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		if !f.cachesCurrent(ctx, ns, name) {
			return false, nil
		}
		before := len(f.writes())
		if _, err := f.propagator.sync(ctx, key); err != nil {
			return false, fmt.Errorf("sync %s: %w", key, err)
		}
		after := f.writes()
		last = after[before:]
		return len(last) == 0, nil
	})
	if err != nil {
		t.Fatalf("a sync of the settled %s keeps writing (last: %v): %v", key, last, err)
	}
}

// cachesCurrent reports whether the propagator's caches hold what the fake
// apiservers hold for the template, its binding and its member pods, so a
// sync does not act on an event it has yet to see.
func (f *propagationFixture) cachesCurrent(ctx context.Context, ns, name string) bool {
	same := func(inf cache.SharedIndexInformer, fresh *unstructured.Unstructured) bool {
		cached, ok, err := inf.GetIndexer().GetByKey(fresh.GetNamespace() + "/" + fresh.GetName())
		return err == nil && ok && reflect.DeepEqual(jsonNormal(cached.(*unstructured.Unstructured).Object), jsonNormal(fresh.Object))
	}
	tmpl, err := f.karmada.Resource(karmada.PodGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || !same(f.propagator.pods, tmpl) {
		return false
	}
	b, err := f.binding(ctx, name)
	if err != nil || !same(f.propagator.bindings, b) {
		return false
	}
	for cluster, client := range f.members {
		fresh, freshErr := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		cached, cachedErr := f.propagator.memberPods[cluster].Pods(ns).Get(name)
		if apierrors.IsNotFound(freshErr) != apierrors.IsNotFound(cachedErr) {
			return false
		}
		if freshErr == nil && (cachedErr != nil || !reflect.DeepEqual(fresh, cached)) {
			return false
		}
	}
	return true
}

func containerNames(status map[string]any) []any {
	var names []any
	cs, _ := status["containerStatuses"].([]any)
	for _, c := range cs {
		names = append(names, c.(map[string]any)["name"])
	}
	return names
}

func readyCondition(status map[string]any) any {
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		if m := c.(map[string]any); m["type"] == "Ready" {
			return m["status"]
		}
	}
	return nil
}

// TestStatusFollowsCustomizations: Karmada's built-in aggregation without a
// customization, the shipped Lua once it is applied (for a pod already
// running, with no member change), and the built-in again once it is gone.
func TestStatusFollowsCustomizations(t *testing.T) {
	f, ctx := newPropagationFixture(t, policy("ci-jobs", divided("member1")), templatePod("job-42", "tmpl-uid"))
	eventually(t, ctx, "member1 pod", exists(ctx, func(ctx context.Context) (*corev1.Pod, error) { return f.memberPod(ctx, "member1", "job-42") }))
	pod, err := f.memberPod(ctx, "member1", "job-42")
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = runningMemberStatus()
	if _, err := f.members["member1"].CoreV1().Pods("ci").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	builtIn := func(what string) {
		t.Helper()
		var status map[string]any
		eventually(t, ctx, what, func(ctx context.Context) (bool, error) {
			status, err = f.templateStatus(ctx, "job-42")
			if err != nil {
				return false, err
			}
			_, hasConds := status["conditions"]
			names := containerNames(status)
			return status["phase"] == "Running" && !hasConds && len(names) == 1 && names[0] == "", nil
		})
		for _, k := range []string{"podIP", "hostIP", "startTime"} {
			if _, ok := status[k]; ok {
				t.Errorf("%s: built-in aggregation kept %s: %v", what, k, status)
			}
		}
		if status["qosClass"] != "BestEffort" {
			t.Errorf("%s: qosClass = %v, want the template's BestEffort", what, status["qosClass"])
		}
		f.assertSettled(t, ctx, "ci/job-42")
	}
	builtIn("built-in aggregation")

	// The binding holds the whole member status either way: only the
	// aggregation into the template drops names and conditions.
	b, err := f.binding(ctx, "job-42")
	if err != nil {
		t.Fatal(err)
	}
	agg, _, _ := unstructured.NestedSlice(b.Object, "status", "aggregatedStatus")
	if len(agg) != 1 {
		t.Fatalf("aggregatedStatus = %v", agg)
	}
	reflected, _ := agg[0].(map[string]any)["status"].(map[string]any)
	if got := containerNames(reflected); len(got) != 1 || got[0] != "build" || readyCondition(reflected) != "True" || reflected["podIP"] != "10.0.0.7" {
		t.Errorf("binding status item = %v, want the member's whole status", reflected)
	}
	if cond := findCondition(b, "FullyApplied"); cond["status"] != "True" {
		t.Errorf("FullyApplied = %v, want True for an applied Healthy pod", cond)
	}

	ric := shippedCustomization(t)
	if _, err := f.karmada.Resource(customizationGVR).Create(ctx, ric, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var status map[string]any
	eventually(t, ctx, "shipped customization applied to the running pod", func(ctx context.Context) (bool, error) {
		status, err = f.templateStatus(ctx, "job-42")
		if err != nil {
			return false, err
		}
		names := containerNames(status)
		return len(names) == 1 && names[0] == "build" && readyCondition(status) == "True", nil
	})
	if status["phase"] != "Running" || status["podIP"] != "10.0.0.7" || status["qosClass"] != "BestEffort" {
		t.Errorf("customized status = %v", status)
	}
	build := status["containerStatuses"].([]any)[0].(map[string]any)
	if build["ready"] != true || build["image"] != "busybox" || build["restartCount"] != int64(2) {
		t.Errorf("build container status = %v", build)
	}
	f.assertSettled(t, ctx, "ci/job-42")

	if err := f.karmada.Resource(customizationGVR).Delete(ctx, ric.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	builtIn("built-in aggregation after the customization is deleted")
}

func findCondition(obj *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

// TestUncollectedClusterTurnsTemplatePending: Karmada aggregates even when no
// cluster has reported, so a template whose only cluster has no pod yet goes
// back to a bare Pending instead of keeping the last Running status.
func TestUncollectedClusterTurnsTemplatePending(t *testing.T) {
	f, ctx := newPropagationFixture(t, policy("ci-jobs", divided("member1")), templatePod("job-9", "uid-9"))
	eventually(t, ctx, "member1 pod", exists(ctx, func(ctx context.Context) (*corev1.Pod, error) { return f.memberPod(ctx, "member1", "job-9") }))
	pod, _ := f.memberPod(ctx, "member1", "job-9")
	pod.Status = runningMemberStatus()
	if _, err := f.members["member1"].CoreV1().Pods("ci").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "template Running", func(ctx context.Context) (bool, error) {
		status, err := f.templateStatus(ctx, "job-9")
		return err == nil && status["phase"] == "Running", err
	})

	// A cluster the stand-in has no member for never reports, like a member
	// whose pod has not been created yet.
	b, _ := f.binding(ctx, "job-9")
	if err := unstructured.SetNestedSlice(b.Object, []any{map[string]any{"name": "member9", "replicas": int64(1)}}, "spec", "clusters"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.karmada.Resource(karmada.ResourceBindingGVR).Namespace("ci").Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "template bare Pending", func(ctx context.Context) (bool, error) {
		status, err := f.templateStatus(ctx, "job-9")
		if err != nil {
			return false, err
		}
		want := map[string]any{"phase": "Pending", "qosClass": "BestEffort"}
		return reflect.DeepEqual(status, want), nil
	})
	b, _ = f.binding(ctx, "job-9")
	agg, _, _ := unstructured.NestedSlice(b.Object, "status", "aggregatedStatus")
	if want := []any{map[string]any{"clusterName": "member9", "health": "Unknown"}}; !reflect.DeepEqual(agg, want) {
		t.Errorf("aggregatedStatus = %v, want %v", agg, want)
	}
	if cond := findCondition(b, "FullyApplied"); cond["status"] != "False" {
		t.Errorf("FullyApplied = %v, want False", cond)
	}
	f.assertSettled(t, ctx, "ci/job-9")
}

func TestPodStatusWrite(t *testing.T) {
	running := map[string]any{"phase": "Running", "containerStatuses": []any{map[string]any{
		"name": "", "ready": true, "restartCount": int64(0), "image": "", "imageID": "",
		"state": map[string]any{"running": map[string]any{"startedAt": "2026-01-02T03:04:05Z"}}, "lastState": map[string]any{},
	}}}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := runtime.DeepCopyJSON(m)
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(out, kv[i].(string))
				continue
			}
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		have, want  map[string]any
		wantWritten map[string]any
		wantChanged bool
	}{
		{
			name: "built-in result keeps the template's qosClass, and is then unchanged",
			have: with(running, "qosClass", "BestEffort"), want: running,
			wantWritten: with(running, "qosClass", "BestEffort"), wantChanged: false,
		},
		{
			name: "a phase change is written with the kept qosClass",
			have: map[string]any{"phase": "Pending", "qosClass": "BestEffort"}, want: running,
			wantWritten: with(running, "qosClass", "BestEffort"), wantChanged: true,
		},
		{
			name: "a script's own qosClass is not overridden",
			have: with(running, "qosClass", "BestEffort"), want: with(running, "qosClass", "Burstable"),
			wantWritten: with(running, "qosClass", "Burstable"), wantChanged: true,
		},
		{
			name: "an empty qosClass is backfilled like the apiserver does",
			have: with(running, "qosClass", "Guaranteed"), want: with(running, "qosClass", ""),
			wantWritten: with(running, "qosClass", "Guaranteed"), wantChanged: false,
		},
		{
			name: "no qosClass anywhere adds none",
			have: map[string]any{"phase": "Pending"}, want: running,
			wantWritten: running, wantChanged: true,
		},
		{
			name:        "what the apiserver drops is no change: empty lists, nulls, unknown fields",
			have:        with(running, "qosClass", "BestEffort"),
			want:        with(running, "initContainerStatuses", []any{}, "nominatedNodeName", nil, "podIPs", []any{}, "madeUp", "x", "startTime", nil),
			wantWritten: with(running, "qosClass", "BestEffort", "initContainerStatuses", []any{}, "podIPs", []any{}, "madeUp", "x"),
			wantChanged: false,
		},
		{
			name: "a status the apiserver would reject is written so it says why",
			have: running, want: with(running, "phase", int64(3)),
			wantWritten: with(running, "phase", int64(3)), wantChanged: true,
		},
		{
			name: "a dropped status clears the template's",
			have: running, want: nil,
			wantWritten: map[string]any{}, wantChanged: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want map[string]any
			if tc.want != nil {
				want = runtime.DeepCopyJSON(tc.want)
			}
			got, changed := podStatusWrite(tc.have, want)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if !reflect.DeepEqual(got, tc.wantWritten) {
				t.Errorf("written status\n got %v\nwant %v", got, tc.wantWritten)
			}
			if !tc.wantChanged {
				return
			}
			// Once stored, the same aggregation must not be written again.
			stored, err := storedPodStatus(got)
			if err != nil {
				return // rejected by the apiserver: nothing stored
			}
			storedMap, _ := stored.(map[string]any)
			if tc.want != nil {
				want = runtime.DeepCopyJSON(tc.want)
			}
			if _, again := podStatusWrite(storedMap, want); again {
				t.Errorf("status %v stored as %v is written again", got, storedMap)
			}
		})
	}
}

func TestMemberStatusItem(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job-1", Namespace: "ci"},
		Status:     runningMemberStatus(),
	}
	reflectNames := customizationObject("reflect-names", "Pod", "statusReflection", `function ReflectStatus(observedObj)
  local names = {}
  for i, cs in ipairs(observedObj.status.containerStatuses) do
    names[i] = cs.name
  end
  return { phase = observedObj.status.phase, names = names, kind = observedObj.kind }
end`)
	brokenPod := customizationObject("broken", "Pod", "statusAggregation", "function AggregateStatus(")
	otherKind := customizationObject("deployments", "Deployment", "statusReflection", "function ReflectStatus(o) return {} end")
	wholeStatus, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pod.Status)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name       string
		objs       []*unstructured.Unstructured
		pod        *corev1.Pod
		want       interpreter.StatusItem
		wantErr    string
		wantBroken bool
	}{
		{name: "no pod yet: not applied, health unknown, no status", pod: nil,
			want: interpreter.StatusItem{ClusterName: "member1", Health: "Unknown"}},
		{name: "built-in reflection: the whole status", pod: pod,
			want: interpreter.StatusItem{ClusterName: "member1", Applied: true, Health: "Healthy", Status: wholeStatus}},
		{name: "a customization for another kind changes nothing", objs: []*unstructured.Unstructured{otherKind}, pod: pod,
			want: interpreter.StatusItem{ClusterName: "member1", Applied: true, Health: "Healthy", Status: wholeStatus}},
		{name: "statusReflection Lua sees a typed v1 Pod", objs: []*unstructured.Unstructured{otherKind, reflectNames}, pod: pod,
			want: interpreter.StatusItem{ClusterName: "member1", Applied: true, Health: "Healthy",
				Status: map[string]any{"phase": "Running", "names": []any{"build"}, "kind": "Pod"}}},
		{name: "a customization that does not load fails its target", objs: []*unstructured.Unstructured{brokenPod, reflectNames}, pod: pod,
			wantErr: "broken", wantBroken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := newInterpreterSet(tc.objs)
			got, err := memberStatusItem(set, "member1", tc.pod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to name %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			} else {
				gotJSON, _ := json.Marshal(got)
				wantJSON, _ := json.Marshal(tc.want)
				if string(gotJSON) != string(wantJSON) {
					t.Errorf("item\n got %s\nwant %s", gotJSON, wantJSON)
				}
			}
			tmpl := templatePod("job-1", "u1")
			_, aggErr := set.aggregateStatus(tmpl, []interpreter.StatusItem{got})
			if (aggErr != nil) != tc.wantBroken {
				t.Errorf("aggregateStatus err = %v, want an error: %v", aggErr, tc.wantBroken)
			}
		})
	}
}

func TestFullyAppliedCondition(t *testing.T) {
	healthy := interpreter.StatusItem{ClusterName: "member1", Applied: true, Health: "Healthy"}
	for _, tc := range []struct {
		name  string
		items []interpreter.StatusItem
		want  string
	}{
		{"all applied and healthy", []interpreter.StatusItem{healthy, {ClusterName: "member2", Applied: true, Health: "Healthy"}}, "True"},
		{"applied but not ready yet", []interpreter.StatusItem{healthy, {ClusterName: "member2", Applied: true, Health: "Unhealthy"}}, "False"},
		{"not applied", []interpreter.StatusItem{{ClusterName: "member1", Health: "Unknown"}}, "False"},
		{"nothing scheduled", nil, "False"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cond := fullyAppliedCondition(tc.items, 1)
			if cond["status"] != tc.want || cond["type"] != "FullyApplied" {
				t.Errorf("condition = %v, want status %s", cond, tc.want)
			}
		})
	}
}
