package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// startPod creates a PropagationPolicy and a Pod template, both named name,
// the pod through the gateway as admin (plain requests pass through), waits
// until the template reports Running and returns the one cluster it runs in.
// Both are deleted when t ends.
func startPod(t *testing.T, name, script string) string {
	t.Helper()
	e := testEnv
	ctx := t.Context()
	if err := e.CreatePolicy(ctx, env.PropagationPolicy(env.Namespace, name, e.Members())); err != nil {
		t.Fatal(err)
	}
	gwConfig, err := e.GatewayConfig(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := kubernetes.NewForConfig(gwConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.CoreV1().Pods(env.Namespace).Create(ctx, env.ShellPod(env.Namespace, name, script), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod through the gateway: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.DeletePod(ctx, env.Namespace, name); err != nil {
			t.Errorf("delete pod: %v", err)
		}
		if err := e.DeletePolicy(ctx, env.Namespace, name); err != nil {
			t.Errorf("delete policy: %v", err)
		}
	})

	tmpl, err := e.WaitPodRunning(ctx, env.Namespace, name, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Spec.NodeName != "" {
		t.Errorf("template got nodeName %q; Karmada leaves templates host-less", tmpl.Spec.NodeName)
	}
	clusters, err := e.PodClusters(ctx, env.Namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 1 {
		t.Fatalf("pod scheduled to %v, want exactly one cluster (maxGroups 1)", clusters)
	}
	return clusters[0]
}

// execArgs runs a command whose output cannot come from anywhere but a
// shell in the container.
var execArgs = func(pod string) []string { return []string{"exec", pod, "--", "sh", "-c", "echo exec-$((6*7))"} }

const execWant = "exec-42\n"

// kubectlExec runs the real kubectl exec with kubeconfig and fails t unless
// it printed execWant.
func kubectlExec(t *testing.T, kubeconfig, pod string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stdout, _, err := testEnv.RunKubectl(ctx, kubeconfig, nil, execArgs(pod)...)
	if err != nil {
		t.Fatal(err)
	}
	if stdout != execWant {
		t.Errorf("kubectl exec with %s printed %q, want %q", kubeconfig, stdout, execWant)
	}
}
