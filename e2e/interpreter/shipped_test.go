package interpreter

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func names(list []corev1.ContainerStatus) []string {
	out := []string{}
	for _, cs := range list {
		out = append(out, cs.Name)
	}
	return out
}

func conditionTypes(pod *corev1.Pod) []string {
	out := []string{}
	for _, c := range pod.Status.Conditions {
		out = append(out, string(c.Type))
	}
	return out
}

func TestShippedAggregation(t *testing.T) {
	c := loadShipped(t)
	if !c.HasStatusAggregation() {
		t.Fatal("shipped customization has no statusAggregation")
	}
	if c.Target.String() != "/v1, Kind=Pod" {
		t.Fatalf("target = %s, want v1 Pod", c.Target)
	}

	cases := []struct {
		name     string
		template map[string]any // template status before aggregation
		items    []StatusItem
		check    func(t *testing.T, pod *corev1.Pod, obj *unstructured.Unstructured)
	}{{
		name:  "one cluster running, build ready, Ready condition",
		items: []StatusItem{{ClusterName: "member1", Applied: true, Health: "Healthy", Status: runningStatus("10.244.1.5")}},
		check: func(t *testing.T, pod *corev1.Pod, _ *unstructured.Unstructured) {
			s := pod.Status
			if s.Phase != corev1.PodRunning {
				t.Errorf("phase = %q", s.Phase)
			}
			if got := names(s.ContainerStatuses); !reflect.DeepEqual(got, []string{"build", "helper"}) {
				t.Errorf("container names = %v", got)
			}
			build := s.ContainerStatuses[0]
			if !build.Ready || build.Image != "alpine:3" || build.ImageID == "" || build.ContainerID != "containerd://build" ||
				build.Started == nil || !*build.Started || build.State.Running == nil {
				t.Errorf("build status not reflected: %+v", build)
			}
			if got := names(s.InitContainerStatuses); !reflect.DeepEqual(got, []string{"init-permissions"}) {
				t.Errorf("init names = %v", got)
			}
			if s.InitContainerStatuses[0].State.Terminated == nil || s.InitContainerStatuses[0].State.Terminated.Reason != "Completed" {
				t.Errorf("init state = %+v", s.InitContainerStatuses[0].State)
			}
			wantConds := []string{"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"}
			if got := conditionTypes(pod); !reflect.DeepEqual(got, wantConds) {
				t.Errorf("conditions = %v", got)
			}
			if s.PodIP != "10.244.1.5" || len(s.PodIPs) != 1 || s.PodIPs[0].IP != "10.244.1.5" {
				t.Errorf("pod IPs = %q %v", s.PodIP, s.PodIPs)
			}
			if s.HostIP != "10.0.0.1" || len(s.HostIPs) != 1 || s.StartTime == nil || s.QOSClass != corev1.PodQOSBestEffort {
				t.Errorf("host/start/qos = %q %v %v %q", s.HostIP, s.HostIPs, s.StartTime, s.QOSClass)
			}
			if s.ObservedGeneration != 0 || s.Conditions[0].ObservedGeneration != 0 {
				t.Errorf("member generation leaked: %d / %d", s.ObservedGeneration, s.Conditions[0].ObservedGeneration)
			}
			if !gitlabBuildReady(pod) || !fabric8PodReady(pod) {
				t.Errorf("executors would still wait: gitlab=%v fabric8=%v", gitlabBuildReady(pod), fabric8PodReady(pod))
			}
		},
	}, {
		name: "two clusters, one pending one running: pending wins, pending cluster decides",
		items: []StatusItem{
			{ClusterName: "member1", Applied: true, Status: runningStatus("10.244.1.5")},
			{ClusterName: "member2", Applied: true, Status: pendingStatus()},
		},
		check: func(t *testing.T, pod *corev1.Pod, _ *unstructured.Unstructured) {
			s := pod.Status
			if s.Phase != corev1.PodPending {
				t.Errorf("phase = %q", s.Phase)
			}
			if s.HostIP != "10.0.0.2" || s.PodIP != "" {
				t.Errorf("fields not from member2: host %q pod %q", s.HostIP, s.PodIP)
			}
			if s.ContainerStatuses[0].State.Waiting == nil || s.ContainerStatuses[0].Ready {
				t.Errorf("build should be waiting: %+v", s.ContainerStatuses[0])
			}
			if gitlabBuildReady(pod) || fabric8PodReady(pod) {
				t.Error("executors must keep waiting while one cluster is pending")
			}
		},
	}, {
		name: "two clusters running: the first in item order decides",
		items: []StatusItem{
			{ClusterName: "member1", Applied: true, Status: runningStatus("10.244.1.5")},
			{ClusterName: "member2", Applied: true, Status: runningStatus("10.244.2.7")},
		},
		check: func(t *testing.T, pod *corev1.Pod, _ *unstructured.Unstructured) {
			if pod.Status.PodIP != "10.244.1.5" || len(pod.Status.ContainerStatuses) != 2 {
				t.Errorf("podIP %q, %d container statuses; want member1's only", pod.Status.PodIP, len(pod.Status.ContainerStatuses))
			}
		},
	}, {
		name: "a cluster without status yet: pending, no detail, message names it",
		items: []StatusItem{
			{ClusterName: "member1", Applied: true, Status: runningStatus("10.244.1.5")},
			{ClusterName: "member2", Applied: false, AppliedMessage: "namespaces \"ci\" not found", Health: "Unknown"},
		},
		check: func(t *testing.T, pod *corev1.Pod, _ *unstructured.Unstructured) {
			s := pod.Status
			if s.Phase != corev1.PodPending || len(s.Conditions) != 0 || len(s.ContainerStatuses) != 0 || s.PodIP != "" {
				t.Errorf("want bare Pending, got %+v", s)
			}
			if !strings.Contains(s.Message, "member2") || !strings.Contains(s.Message, "not found") || strings.Contains(s.Message, "member1") {
				t.Errorf("message = %q", s.Message)
			}
		},
	}, {
		name: "failed beats running, reason and message reflected",
		items: []StatusItem{
			{ClusterName: "member1", Applied: true, Status: failedStatus()},
			{ClusterName: "member2", Applied: true, Status: runningStatus("10.244.2.7")},
		},
		check: func(t *testing.T, pod *corev1.Pod, _ *unstructured.Unstructured) {
			s := pod.Status
			if s.Phase != corev1.PodFailed || s.Reason != "Evicted" || !strings.Contains(s.Message, "low on resource") {
				t.Errorf("phase/reason/message = %q %q %q", s.Phase, s.Reason, s.Message)
			}
			build := s.ContainerStatuses[0]
			if build.RestartCount != 2 || build.State.Terminated == nil || build.State.Terminated.ExitCode != 137 ||
				build.LastTerminationState.Terminated == nil || build.LastTerminationState.Terminated.ExitCode != 1 {
				t.Errorf("build = %+v", build)
			}
		},
	}, {
		name:  "init containers running while the pod is pending",
		items: []StatusItem{{ClusterName: "member1", Applied: true, Status: pendingStatus()}},
		check: func(t *testing.T, pod *corev1.Pod, _ *unstructured.Unstructured) {
			init := pod.Status.InitContainerStatuses
			if len(init) != 1 || init[0].Name != "init-permissions" || init[0].State.Running == nil || init[0].Started == nil || !*init[0].Started {
				t.Errorf("init statuses = %+v", init)
			}
			if got := conditionTypes(pod); !reflect.DeepEqual(got, []string{"Initialized", "Ready", "PodScheduled"}) {
				t.Errorf("conditions = %v", got)
			}
		},
	}, {
		name:  "missing fields: phase only, no lists, nil conditions",
		items: []StatusItem{{ClusterName: "member1", Applied: true, Status: map[string]any{"phase": "Running", "conditions": nil}}},
		check: func(t *testing.T, pod *corev1.Pod, obj *unstructured.Unstructured) {
			status, _, _ := unstructured.NestedMap(obj.Object, "status")
			if !reflect.DeepEqual(status, map[string]any{"phase": "Running"}) {
				t.Errorf("status = %v, want phase only", status)
			}
		},
	}, {
		name:  "empty status object: counts as pending, still decides",
		items: []StatusItem{{ClusterName: "member1", Applied: true, Status: map[string]any{}}},
		check: func(t *testing.T, pod *corev1.Pod, obj *unstructured.Unstructured) {
			status, _, _ := unstructured.NestedMap(obj.Object, "status")
			if !reflect.DeepEqual(status, map[string]any{"phase": "Pending"}) {
				t.Errorf("status = %v", status)
			}
		},
	}, {
		name:     "nil items leave the template alone",
		template: map[string]any{"phase": "Running", "podIP": "10.244.1.5"},
		items:    nil,
		check: func(t *testing.T, pod *corev1.Pod, _ *unstructured.Unstructured) {
			if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP != "10.244.1.5" {
				t.Errorf("template status changed: %+v", pod.Status)
			}
		},
	}, {
		name:     "empty items leave the template alone",
		template: map[string]any{"phase": "Pending"},
		items:    []StatusItem{},
		check: func(t *testing.T, pod *corev1.Pod, _ *unstructured.Unstructured) {
			if pod.Status.Phase != corev1.PodPending {
				t.Errorf("phase = %q", pod.Status.Phase)
			}
		},
	}, {
		name:     "stale template fields go, template qosClass stays",
		template: map[string]any{"phase": "Running", "podIP": "10.9.9.9", "podIPs": []any{map[string]any{"ip": "10.9.9.9"}}, "qosClass": "Burstable"},
		items:    []StatusItem{{ClusterName: "member1", Applied: true, Status: pendingStatus()}},
		check: func(t *testing.T, pod *corev1.Pod, _ *unstructured.Unstructured) {
			if pod.Status.PodIP != "" || len(pod.Status.PodIPs) != 0 {
				t.Errorf("stale pod IP kept: %q %v", pod.Status.PodIP, pod.Status.PodIPs)
			}
			if pod.Status.QOSClass != corev1.PodQOSBurstable {
				t.Errorf("qosClass = %q, want the template's immutable Burstable", pod.Status.QOSClass)
			}
		},
	}}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			template := podTemplate(tc.template)
			before := template.DeepCopy()
			out, err := c.AggregateStatus(template, tc.items)
			if err != nil {
				t.Fatalf("AggregateStatus: %v", err)
			}
			if !reflect.DeepEqual(template, before) {
				t.Error("AggregateStatus modified its input")
			}
			if out.GetName() != before.GetName() || out.GetUID() != before.GetUID() || out.GetResourceVersion() != "42" {
				t.Errorf("identity changed: %s %s %s", out.GetName(), out.GetUID(), out.GetResourceVersion())
			}
			if !reflect.DeepEqual(out.Object["spec"], before.Object["spec"]) {
				t.Errorf("spec changed:\n got %v\nwant %v", out.Object["spec"], before.Object["spec"])
			}
			tc.check(t, toPod(t, out), out)
		})
	}
}

// TestShippedJSONShape pins how values cross the Lua boundary: lists stay
// JSON arrays, never objects, and empty ones are dropped as Karmada does.
func TestShippedJSONShape(t *testing.T) {
	c := loadShipped(t)
	template := podTemplate(nil)
	containers := template.Object["spec"].(map[string]any)["containers"].([]any)
	containers[0].(map[string]any)["args"] = []any{}
	containers[0].(map[string]any)["resources"] = map[string]any{}
	status := runningStatus("10.244.1.5")
	status["conditions"] = []any{}
	status["containerStatuses"].([]any)[0].(map[string]any)["state"] = map[string]any{"waiting": map[string]any{}}

	out, err := c.AggregateStatus(template, []StatusItem{{ClusterName: "member1", Applied: true, Status: status}})
	if err != nil {
		t.Fatalf("AggregateStatus: %v", err)
	}
	spec := out.Object["spec"].(map[string]any)
	outContainers, ok := spec["containers"].([]any)
	if !ok || len(outContainers) != 2 {
		t.Fatalf("spec.containers = %#v, want a 2-element array", spec["containers"])
	}
	build := outContainers[0].(map[string]any)
	if _, ok := build["command"].([]any); !ok {
		t.Errorf("command = %#v, want an array", build["command"])
	}
	for _, key := range []string{"args", "resources"} {
		if v, present := build[key]; present {
			t.Errorf("empty %s came back as %#v; Karmada drops it", key, v)
		}
	}
	outStatus := out.Object["status"].(map[string]any)
	if _, ok := outStatus["podIPs"].([]any); !ok {
		t.Errorf("podIPs = %#v, want an array", outStatus["podIPs"])
	}
	if v, present := outStatus["conditions"]; present {
		t.Errorf("empty conditions came back as %#v", v)
	}
	state := outStatus["containerStatuses"].([]any)[0].(map[string]any)["state"]
	if !reflect.DeepEqual(state, map[string]any{}) {
		t.Errorf("state = %#v, want {} once its empty member is dropped", state)
	}
	if rc, ok := outStatus["containerStatuses"].([]any)[0].(map[string]any)["restartCount"].(int64); !ok || rc != 0 {
		t.Errorf("restartCount = %#v, want int64 0", outStatus["containerStatuses"].([]any)[0].(map[string]any)["restartCount"])
	}
}

// TestShippedHasNoReflection documents that Pods rely on Karmada's default
// whole-status reflection, which is what carries names and conditions.
func TestShippedHasNoReflection(t *testing.T) {
	c := loadShipped(t)
	if c.HasStatusReflection() {
		t.Fatal("shipped customization unexpectedly defines statusReflection; update README and tests")
	}
	if _, ok, err := c.ReflectStatus(podTemplate(runningStatus("10.244.1.5"))); ok || err != nil {
		t.Fatalf("ReflectStatus ok=%v err=%v, want not customized", ok, err)
	}
}
