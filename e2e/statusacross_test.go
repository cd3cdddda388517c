package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

var overridePolicyGVR = schema.GroupVersionResource{Group: "policy.karmada.io", Version: "v1alpha1", Resource: "overridepolicies"}

// withShippedPodStatusInterpreter applies the shipped Pod status
// interpreter (deploy/karmada/pod-status-interpreter.yaml) in Karmada until
// t ends. It applies to every Pod: a test using it must not be parallel.
func withShippedPodStatusInterpreter(t *testing.T) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	customizations := dyn.Resource(karmada.ResourceInterpreterCustomizationGVR)
	shipped := shippedPodStatusInterpreter(t)
	if _, err := customizations.Create(t.Context(), shipped, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			t.Fatalf("apply the shipped customization: %v", err)
		}
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deleteCustomization(ctx, customizations, shipped.GetName()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// TestPodStatusAcrossMembers runs the shipped Pod status interpreter
// (deploy/karmada/pod-status-interpreter.yaml) in real Karmada on pods that
// real kubelets run on both members at once (a Duplicated policy): one
// running on both, one that member2 cannot start (an OverridePolicy gives it
// an image that is not on the node, with imagePullPolicy Never) and one that
// fails on member2 (an OverridePolicy makes it exit 3). The template through
// the gateway says what an executor must see: Running with the running
// member's pod IP and containers, Pending with the waiting reason, Failed
// with the exit code. Not parallel: the customization applies to every Pod.
func TestPodStatusAcrossMembers(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	withShippedPodStatusInterpreter(t)
	dyn, err := dynamic.NewForConfig(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}

	const running, pending, failed = "across-running", "across-pending", "across-failed"
	policy := env.PropagationPolicy(env.Namespace, "across", testEnv.Members())
	spec := policy.Object["spec"].(map[string]any)
	spec["priority"] = int64(namedPolicyPriority)
	spec["resourceSelectors"] = []any{
		map[string]any{"apiVersion": "v1", "kind": "Pod", "name": running},
		map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pending},
		map[string]any{"apiVersion": "v1", "kind": "Pod", "name": failed},
	}
	// Every cluster gets the pod, as the interpreter's merge must handle.
	spec["placement"] = map[string]any{
		"clusterAffinity":   map[string]any{"clusterNames": []any{"member1", "member2"}},
		"replicaScheduling": map[string]any{"replicaSchedulingType": "Duplicated"},
	}
	if err := testEnv.CreatePolicy(ctx, policy); err != nil {
		t.Fatal(err)
	}
	overrides := dyn.Resource(overridePolicyGVR).Namespace(env.Namespace)
	for pod, rule := range map[string]map[string]any{
		pending: {"path": "/spec/containers/0/image", "operator": "replace", "value": "e2e.invalid/not-on-any-node:1"},
		failed:  {"path": "/spec/containers/0/command", "operator": "replace", "value": []any{"sh", "-c", "echo failing; exit 3"}},
	} {
		op := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "policy.karmada.io/v1alpha1", "kind": "OverridePolicy",
			"metadata": map[string]any{"name": pod, "namespace": env.Namespace},
			"spec": map[string]any{
				"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": pod}},
				"overrideRules": []any{map[string]any{
					"targetCluster": map[string]any{"clusterNames": []any{"member2"}},
					"overriders":    map[string]any{"plaintext": []any{rule}},
				}},
			},
		}}
		if _, err := overrides.Create(ctx, op, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create OverridePolicy %s: %v", pod, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = overrides.Delete(ctx, pod, metav1.DeleteOptions{})
		})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, p := range []string{running, pending, failed} {
			if err := testEnv.DeletePod(ctx, env.Namespace, p); err != nil {
				t.Errorf("delete pod: %v", err)
			}
		}
		if err := testEnv.DeletePolicy(ctx, env.Namespace, "across"); err != nil {
			t.Errorf("delete policy: %v", err)
		}
	})

	gw := gatewayClient(t, env.UserAdmin)
	for _, name := range []string{running, pending, failed} {
		pod := env.ShellPod(env.Namespace, name, "sleep 3600")
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		if _, err := gw.CoreV1().Pods(env.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s through the gateway: %v", name, err)
		}
	}

	// memberPhase waits until member's pod reached phase, so the template is
	// judged on what both kubelets reported.
	memberPhase := func(t *testing.T, member, name string, phase corev1.PodPhase, done func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		var last *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := testEnv.MemberPod(ctx, member, env.Namespace, name)
			if err != nil {
				return false, nil
			}
			last = p
			return p.Status.Phase == phase && (done == nil || done(p)), nil
		})
		if err != nil {
			t.Fatalf("%s's pod %s never reached %s (last %s): %v", member, name, phase, summary(last), err)
		}
		return last
	}
	// template waits until the template through the gateway satisfies ok.
	template := func(t *testing.T, name string, ok func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		var last *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := gw.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = p
			return ok(p), nil
		})
		if err != nil {
			t.Fatalf("template %s never showed the merged status; last %s: %v", name, summary(last), err)
		}
		return last
	}
	waiting := func(p *corev1.Pod) string {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "main" && cs.State.Waiting != nil {
				return cs.State.Waiting.Reason
			}
		}
		return ""
	}
	exitCode := func(p *corev1.Pod) int32 {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "main" && cs.State.Terminated != nil {
				return cs.State.Terminated.ExitCode
			}
		}
		return -1
	}

	t.Run("running on both", func(t *testing.T) {
		m1 := memberPhase(t, "member1", running, corev1.PodRunning, nil)
		m2 := memberPhase(t, "member2", running, corev1.PodRunning, nil)
		tmpl := template(t, running, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != ""
		})
		if ip := tmpl.Status.PodIP; ip != m1.Status.PodIP && ip != m2.Status.PodIP {
			t.Errorf("template podIP %q is neither member's (%q, %q)", ip, m1.Status.PodIP, m2.Status.PodIP)
		}
	})

	t.Run("pending on member2", func(t *testing.T) {
		memberPhase(t, "member1", pending, corev1.PodRunning, nil)
		m2 := memberPhase(t, "member2", pending, corev1.PodPending, func(p *corev1.Pod) bool { return waiting(p) != "" })
		want := waiting(m2)
		tmpl := template(t, pending, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodPending && waiting(p) == want
		})
		t.Logf("template: %s", summary(tmpl))
	})

	t.Run("failed on member2", func(t *testing.T) {
		memberPhase(t, "member1", failed, corev1.PodRunning, nil)
		memberPhase(t, "member2", failed, corev1.PodFailed, nil)
		tmpl := template(t, failed, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed && exitCode(p) == 3
		})
		t.Logf("template: %s", summary(tmpl))
	})
}

// summary is a pod's phase and container states, for failure messages.
func summary(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	s := fmt.Sprintf("phase=%s podIP=%q", p.Status.Phase, p.Status.PodIP)
	for _, cs := range p.Status.ContainerStatuses {
		s += fmt.Sprintf(" container[%s %+v]", cs.Name, cs.State)
	}
	return s
}
