package interpreter

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
