package interpreter

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// shippedPath is the customization this repository ships for Karmada.
var shippedPath = filepath.Join("..", "..", "deploy", "karmada", "pod-status-interpreter.yaml")

func loadShipped(t *testing.T) *Customization {
	t.Helper()
	data, err := os.ReadFile(shippedPath)
	if err != nil {
		t.Fatalf("read shipped customization: %v", err)
	}
	c, err := Load(data)
	if err != nil {
		t.Fatalf("Load shipped customization: %v", err)
	}
	return c
}

// podTemplate is a CI job pod as it sits in karmada-apiserver: no node, and
// whatever status the last aggregation wrote.
func podTemplate(status map[string]any) *unstructured.Unstructured {
	obj := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name":              "runner-abc-project-1-concurrent-0",
			"namespace":         "ci",
			"uid":               "0b7c5c3e-0000-4000-8000-000000000001",
			"resourceVersion":   "42",
			"creationTimestamp": "2026-01-02T03:04:05Z",
			"labels":            map[string]any{"app": "runner"},
		},
		"spec": map[string]any{
			"restartPolicy": "Never",
			"initContainers": []any{map[string]any{
				"name": "init-permissions", "image": "registry.example/helper:1",
				"command": []any{"sh", "-c", "chmod 777 /builds"},
			}},
			"containers": []any{
				map[string]any{"name": "build", "image": "alpine:3", "command": []any{"sh"}, "stdin": true},
				map[string]any{"name": "helper", "image": "registry.example/helper:1", "command": []any{"sh"}, "stdin": true},
			},
		},
	}
	if status != nil {
		obj["status"] = status
	}
	return &unstructured.Unstructured{Object: obj}
}

func running(name, image string, ready bool) map[string]any {
	return map[string]any{
		"name": name, "image": image, "imageID": "docker-pullable://" + image + "@sha256:aa",
		"containerID": "containerd://" + name, "ready": ready, "started": true, "restartCount": int64(0),
		"state": map[string]any{"running": map[string]any{"startedAt": "2026-01-02T03:04:10Z"}},
	}
}

func condition(typ, status string) map[string]any {
	return map[string]any{"type": typ, "status": status, "lastProbeTime": nil, "lastTransitionTime": "2026-01-02T03:04:11Z", "observedGeneration": int64(1)}
}

// runningStatus is a member pod whose build and helper containers are up.
func runningStatus(podIP string) map[string]any {
	return map[string]any{
		"phase": "Running",
		"conditions": []any{
			condition("PodReadyToStartContainers", "True"), condition("Initialized", "True"),
			condition("Ready", "True"), condition("ContainersReady", "True"), condition("PodScheduled", "True"),
		},
		"hostIP":             "10.0.0.1",
		"hostIPs":            []any{map[string]any{"ip": "10.0.0.1"}},
		"podIP":              podIP,
		"podIPs":             []any{map[string]any{"ip": podIP}},
		"startTime":          "2026-01-02T03:04:06Z",
		"qosClass":           "BestEffort",
		"observedGeneration": int64(3),
		"initContainerStatuses": []any{map[string]any{
			"name": "init-permissions", "image": "registry.example/helper:1", "imageID": "x", "ready": true,
			"restartCount": int64(0), "started": false,
			"state": map[string]any{"terminated": map[string]any{"exitCode": int64(0), "reason": "Completed"}},
		}},
		"containerStatuses": []any{running("build", "alpine:3", true), running("helper", "registry.example/helper:1", true)},
	}
}

func pendingStatus() map[string]any {
	return map[string]any{
		"phase": "Pending",
		"conditions": []any{
			condition("Initialized", "False"), condition("Ready", "False"), condition("PodScheduled", "True"),
		},
		"hostIP":    "10.0.0.2",
		"hostIPs":   []any{map[string]any{"ip": "10.0.0.2"}},
		"startTime": "2026-01-02T03:04:07Z",
		"qosClass":  "BestEffort",
		"initContainerStatuses": []any{map[string]any{
			"name": "init-permissions", "image": "registry.example/helper:1", "imageID": "", "ready": false,
			"restartCount": int64(0), "started": true,
			"state": map[string]any{"running": map[string]any{"startedAt": "2026-01-02T03:04:08Z"}},
		}},
		"containerStatuses": []any{
			map[string]any{"name": "build", "image": "alpine:3", "imageID": "", "ready": false, "restartCount": int64(0), "started": false,
				"state": map[string]any{"waiting": map[string]any{"reason": "PodInitializing"}}},
			map[string]any{"name": "helper", "image": "registry.example/helper:1", "imageID": "", "ready": false, "restartCount": int64(0), "started": false,
				"state": map[string]any{"waiting": map[string]any{"reason": "PodInitializing"}}},
		},
	}
}

func failedStatus() map[string]any {
	return map[string]any{
		"phase":      "Failed",
		"reason":     "Evicted",
		"message":    "The node was low on resource: ephemeral-storage.",
		"conditions": []any{condition("Ready", "False"), condition("DisruptionTarget", "True")},
		"hostIP":     "10.0.0.3",
		"podIP":      "10.244.3.9",
		"podIPs":     []any{map[string]any{"ip": "10.244.3.9"}},
		"qosClass":   "BestEffort",
		"containerStatuses": []any{map[string]any{
			"name": "build", "image": "alpine:3", "imageID": "x", "ready": false, "restartCount": int64(2), "started": false,
			"state":     map[string]any{"terminated": map[string]any{"exitCode": int64(137), "reason": "Error"}},
			"lastState": map[string]any{"terminated": map[string]any{"exitCode": int64(1), "reason": "Error"}},
		}},
	}
}

func toPod(t *testing.T, obj *unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, pod); err != nil {
		t.Fatalf("aggregated object is not a Pod: %v", err)
	}
	return pod
}

// gitlabBuildReady is GitLab Runner's wait: phase Running and the container
// status named "build" ready.
func gitlabBuildReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "build" {
			return cs.Ready
		}
	}
	return false
}

// fabric8PodReady is fabric8's Readiness.isPodReady: the Ready condition True.
func fabric8PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
