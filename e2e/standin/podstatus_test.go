package standin

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func memberStatus(t *testing.T, s corev1.PodStatus) map[string]any {
	t.Helper()
	m, err := toJSONMap(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAggregatePodStatus(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	done := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
	full := func(phase corev1.PodPhase, state corev1.ContainerState, ready bool) corev1.PodStatus {
		return corev1.PodStatus{
			Phase:                 phase,
			HostIP:                "127.0.0.1",
			PodIP:                 "10.0.0.1",
			Conditions:            []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", Ready: false, State: done, RestartCount: 1}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "build", Image: "busybox", Ready: ready, State: state, RestartCount: 3}},
		}
	}
	reduced := func(phase corev1.PodPhase, containers ...corev1.ContainerStatus) corev1.PodStatus {
		s := corev1.PodStatus{Phase: phase}
		for range containers {
			s.InitContainerStatuses = append(s.InitContainerStatuses, corev1.ContainerStatus{State: done})
		}
		s.ContainerStatuses = containers
		return s
	}
	for _, tc := range []struct {
		name  string
		items []statusItem
		want  corev1.PodStatus
	}{
		{
			name:  "running member reduced to phase and nameless ready/state",
			items: []statusItem{{ClusterName: "member1", Status: memberStatus(t, full(corev1.PodRunning, running, true))}},
			want:  reduced(corev1.PodRunning, corev1.ContainerStatus{Ready: true, State: running}),
		},
		{
			name:  "uncollected member counts as pending",
			items: []statusItem{{ClusterName: "member1", Status: memberStatus(t, full(corev1.PodRunning, running, true))}, {ClusterName: "member2"}},
			want:  reduced(corev1.PodPending, corev1.ContainerStatus{Ready: true, State: running}),
		},
		{
			name: "failed beats everything",
			items: []statusItem{
				{ClusterName: "member1", Status: memberStatus(t, full(corev1.PodSucceeded, done, false))},
				{ClusterName: "member2", Status: memberStatus(t, full(corev1.PodFailed, done, false))},
			},
			want: reduced(corev1.PodFailed, corev1.ContainerStatus{State: done}, corev1.ContainerStatus{State: done}),
		},
		{
			name: "running beats succeeded",
			items: []statusItem{
				{ClusterName: "member1", Status: memberStatus(t, full(corev1.PodSucceeded, done, false))},
				{ClusterName: "member2", Status: memberStatus(t, full(corev1.PodRunning, running, true))},
			},
			want: reduced(corev1.PodRunning, corev1.ContainerStatus{State: done}, corev1.ContainerStatus{Ready: true, State: running}),
		},
		{
			name:  "all succeeded",
			items: []statusItem{{ClusterName: "member1", Status: memberStatus(t, full(corev1.PodSucceeded, done, false))}},
			want:  reduced(corev1.PodSucceeded, corev1.ContainerStatus{State: done}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := aggregatePodStatus(tc.items)
			if err != nil {
				t.Fatal(err)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(memberStatus(t, tc.want))
			if string(gotJSON) != string(wantJSON) {
				t.Fatalf("status\n got %s\nwant %s", gotJSON, wantJSON)
			}
			for _, k := range []string{"conditions", "hostIP", "podIP", "nominatedNodeName", "qosClass"} {
				if _, ok := got[k]; ok {
					t.Errorf("aggregated status has %s", k)
				}
			}
			for _, c := range got["containerStatuses"].([]any) {
				if c.(map[string]any)["name"] != "" {
					t.Errorf("container status keeps its name: %v", c)
				}
			}
		})
	}
}
