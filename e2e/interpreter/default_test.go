package interpreter

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDefaultAggregatePodStatus(t *testing.T) {
	cases := []struct {
		name      string
		template  map[string]any
		items     []StatusItem
		wantPhase corev1.PodPhase
		wantCS    int
		wantInit  int
		unchanged bool
	}{
		{name: "one cluster running", items: []StatusItem{{ClusterName: "member1", Applied: true, Status: runningStatus("10.244.1.5")}},
			wantPhase: corev1.PodRunning, wantCS: 2, wantInit: 1},
		{name: "pending beats running, statuses concatenated", items: []StatusItem{
			{ClusterName: "member1", Status: runningStatus("10.244.1.5")}, {ClusterName: "member2", Status: pendingStatus()}},
			wantPhase: corev1.PodPending, wantCS: 4, wantInit: 2},
		{name: "failed beats everything", items: []StatusItem{
			{ClusterName: "member1", Status: pendingStatus()}, {ClusterName: "member2", Status: failedStatus()}},
			wantPhase: corev1.PodFailed, wantCS: 3, wantInit: 1},
		{name: "no status counts as pending", items: []StatusItem{
			{ClusterName: "member1", Status: runningStatus("10.244.1.5")}, {ClusterName: "member2"}},
			wantPhase: corev1.PodPending, wantCS: 2, wantInit: 1},
		{name: "succeeded only when all succeeded", items: []StatusItem{
			{ClusterName: "member1", Status: map[string]any{"phase": "Succeeded"}}, {ClusterName: "member2", Status: map[string]any{"phase": "Running"}}},
			wantPhase: corev1.PodRunning},
		{name: "status without phase leaves phase empty", items: []StatusItem{{ClusterName: "member1", Status: map[string]any{}}},
			wantPhase: ""},
		{name: "nil items keep the template status", template: map[string]any{"phase": "Running", "podIP": "10.244.1.5"},
			wantPhase: corev1.PodRunning},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			template := podTemplate(tc.template)
			out, err := DefaultAggregatePodStatus(template, tc.items)
			if err != nil {
				t.Fatalf("DefaultAggregatePodStatus: %v", err)
			}
			pod := toPod(t, out)
			if pod.Status.Phase != tc.wantPhase {
				t.Errorf("phase = %q, want %q", pod.Status.Phase, tc.wantPhase)
			}
			if len(pod.Status.ContainerStatuses) != tc.wantCS || len(pod.Status.InitContainerStatuses) != tc.wantInit {
				t.Errorf("%d container / %d init statuses, want %d / %d", len(pod.Status.ContainerStatuses), len(pod.Status.InitContainerStatuses), tc.wantCS, tc.wantInit)
			}
			if tc.items == nil {
				if pod.Status.PodIP != "10.244.1.5" {
					t.Errorf("nil items must not touch the status: %+v", pod.Status)
				}
				return
			}
			// Karmada's built-in aggregation keeps nothing but phase and {ready, state}.
			for _, cs := range append(pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses...) {
				if cs.Name != "" || cs.Image != "" || cs.RestartCount != 0 || cs.Started != nil || cs.ContainerID != "" {
					t.Errorf("default kept more than ready/state: %+v", cs)
				}
			}
			if len(pod.Status.Conditions) != 0 || pod.Status.PodIP != "" || pod.Status.HostIP != "" || pod.Status.StartTime != nil || pod.Status.QOSClass != "" {
				t.Errorf("default kept pod-level fields: %+v", pod.Status)
			}
		})
	}
}

func TestDefaultAggregateKeepsReadyAndState(t *testing.T) {
	out, err := DefaultAggregatePodStatus(podTemplate(nil), []StatusItem{{ClusterName: "member1", Status: failedStatus()}})
	if err != nil {
		t.Fatal(err)
	}
	cs := toPod(t, out).Status.ContainerStatuses
	if len(cs) != 1 || cs[0].Ready || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 137 || cs[0].LastTerminationState.Terminated != nil {
		t.Fatalf("container statuses = %+v", cs)
	}
	// The object written back carries an explicit empty name, which is what
	// kubectl shows on the template.
	raw := out.Object["status"].(map[string]any)["containerStatuses"].([]any)[0].(map[string]any)
	if name, present := raw["name"]; !present || name != "" {
		t.Errorf("written container status name = %#v (present %v), want \"\"", name, present)
	}
}

func TestDefaultAggregateUnchangedReturnsTemplate(t *testing.T) {
	// An unchanged status hands back the template object itself, as Karmada
	// does, so unknown fields survive; a changed one is a typed round trip.
	template := podTemplate(map[string]any{"phase": "Running", "containerStatuses": []any{}})
	template.Object["spec"].(map[string]any)["unknownField"] = "kept"
	items := []StatusItem{{ClusterName: "member1", Status: map[string]any{"phase": "Running"}}}
	out, err := DefaultAggregatePodStatus(template, items)
	if err != nil {
		t.Fatal(err)
	}
	if out != template {
		t.Fatalf("unchanged status: got a new object %v", out.Object["status"])
	}

	items[0].Status = map[string]any{"phase": "Succeeded"}
	out, err = DefaultAggregatePodStatus(template, items)
	if err != nil {
		t.Fatal(err)
	}
	if out == template || out.Object["spec"].(map[string]any)["unknownField"] != nil {
		t.Fatalf("changed status: want a typed round trip, got spec %v", out.Object["spec"])
	}
}

func TestDefaultAggregateRejectsOtherKinds(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d"}}}
	if _, err := DefaultAggregatePodStatus(obj, nil); err == nil {
		t.Fatal("want an error for a Deployment")
	}
}

func TestDefaultReflectStatus(t *testing.T) {
	member := podTemplate(runningStatus("10.244.1.5"))
	status, ok, err := DefaultReflectStatus(member)
	if err != nil || !ok {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	if !reflect.DeepEqual(status, member.Object["status"]) {
		t.Errorf("reflected status differs from the member's whole status")
	}
	status["phase"] = "Mutated"
	if member.Object["status"].(map[string]any)["phase"] != "Running" {
		t.Error("reflected status aliases the member object")
	}
	if _, ok, err := DefaultReflectStatus(podTemplate(nil)); ok || err != nil {
		t.Errorf("pod without status: ok=%v err=%v, want no status", ok, err)
	}
}

// TestDefaultAggregatePodStatusExact pins the whole status the built-in
// aggregation writes, not just counts: the phase, every member's container
// and init-container statuses reduced to {ready, state} in item order, and
// nothing else (no names, conditions, IPs, nominatedNodeName or qosClass; an
// empty list is omitted, as the typed round trip does).
func TestDefaultAggregatePodStatusExact(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	runningState := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	done := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
	full := func(phase corev1.PodPhase, state corev1.ContainerState, ready bool) map[string]any {
		return typedMap(t, corev1.PodStatus{
			Phase:                 phase,
			HostIP:                "127.0.0.1",
			PodIP:                 "10.0.0.1",
			NominatedNodeName:     "member-node",
			QOSClass:              corev1.PodQOSBestEffort,
			Conditions:            []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", Ready: false, State: done, RestartCount: 1}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "build", Image: "busybox", Ready: ready, State: state, RestartCount: 3}},
		})
	}
	reduced := func(phase corev1.PodPhase, containers ...corev1.ContainerStatus) map[string]any {
		s := corev1.PodStatus{Phase: phase}
		for range containers {
			s.InitContainerStatuses = append(s.InitContainerStatuses, corev1.ContainerStatus{State: done})
		}
		s.ContainerStatuses = containers
		return typedMap(t, s)
	}
	for _, tc := range []struct {
		name  string
		items []StatusItem
		want  map[string]any
	}{
		{
			name:  "running member reduced to phase and nameless ready/state",
			items: []StatusItem{{ClusterName: "member1", Status: full(corev1.PodRunning, runningState, true)}},
			want:  reduced(corev1.PodRunning, corev1.ContainerStatus{Ready: true, State: runningState}),
		},
		{
			name:  "uncollected member counts as pending",
			items: []StatusItem{{ClusterName: "member1", Status: full(corev1.PodRunning, runningState, true)}, {ClusterName: "member2"}},
			want:  reduced(corev1.PodPending, corev1.ContainerStatus{Ready: true, State: runningState}),
		},
		{
			name:  "only uncollected members: bare pending, no empty lists",
			items: []StatusItem{{ClusterName: "member1"}, {ClusterName: "member2", Applied: false, Health: "Unknown"}},
			want:  map[string]any{"phase": "Pending"},
		},
		{
			name: "failed beats everything",
			items: []StatusItem{
				{ClusterName: "member1", Status: full(corev1.PodSucceeded, done, false)},
				{ClusterName: "member2", Status: full(corev1.PodFailed, done, false)},
			},
			want: reduced(corev1.PodFailed, corev1.ContainerStatus{State: done}, corev1.ContainerStatus{State: done}),
		},
		{
			name: "running beats succeeded, statuses in item order",
			items: []StatusItem{
				{ClusterName: "member1", Status: full(corev1.PodSucceeded, done, false)},
				{ClusterName: "member2", Status: full(corev1.PodRunning, runningState, true)},
			},
			want: reduced(corev1.PodRunning, corev1.ContainerStatus{State: done}, corev1.ContainerStatus{Ready: true, State: runningState}),
		},
		{
			name:  "all succeeded",
			items: []StatusItem{{ClusterName: "member1", Status: full(corev1.PodSucceeded, done, false)}},
			want:  reduced(corev1.PodSucceeded, corev1.ContainerStatus{State: done}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The template carries what the apiserver gave it at creation.
			out, err := DefaultAggregatePodStatus(podTemplate(map[string]any{"phase": "Pending", "qosClass": "BestEffort"}), tc.items)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := unstructured.NestedMap(out.Object, "status")
			if err != nil {
				t.Fatal(err)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tc.want)
			if string(gotJSON) != string(wantJSON) {
				t.Fatalf("status\n got %s\nwant %s", gotJSON, wantJSON)
			}
			for _, k := range []string{"conditions", "hostIP", "podIP", "nominatedNodeName", "qosClass"} {
				if _, ok := got[k]; ok {
					t.Errorf("aggregated status has %s", k)
				}
			}
			cs, _ := got["containerStatuses"].([]any)
			for _, c := range cs {
				if c.(map[string]any)["name"] != "" {
					t.Errorf("container status keeps its name: %v", c)
				}
			}
		})
	}
}

// typedMap renders a typed status as JSON would decode it.
func typedMap(t *testing.T, v any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return runtime.DeepCopyJSON(m)
}
