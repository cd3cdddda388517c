package e2e

import (
	"strings"
	"testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// TestSmoke propagates a pod and runs the real kubectl exec into it three
// ways: through the gateway (the product), through the cluster proxy by hand
// (what the gateway rewrites to), and against karmada-apiserver directly
// (the failure the project exists to fix).
func TestSmoke(t *testing.T) {
	e := testEnv
	const name = "smoke"
	cluster := startPod(t, name, `echo smoke started; while true; do sleep 1; done`)

	t.Run("gateway", func(t *testing.T) {
		kubectlExec(t, e.GatewayKubeconfig(env.UserExecOnly), name)
		logs, _, err := e.RunKubectl(t.Context(), e.GatewayKubeconfig(env.UserExecOnly), nil, "logs", name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs, "smoke started") {
			t.Errorf("kubectl logs through the gateway printed %q, want it to contain %q", logs, "smoke started")
		}
	})

	t.Run("cluster proxy", func(t *testing.T) {
		kubeconfig, err := e.ClusterProxyKubeconfig(cluster, env.UserExecOnly)
		if err != nil {
			t.Fatal(err)
		}
		kubectlExec(t, kubeconfig, name)
	})

	t.Run("karmada-apiserver directly", func(t *testing.T) {
		_, stderr, err := e.RunKubectl(t.Context(), e.Kubeconfig(env.UserExecOnly), nil, execArgs(name)...)
		if err == nil {
			t.Fatal("kubectl exec against karmada-apiserver succeeded; want the host-less template error")
		}
		if !strings.Contains(stderr, "does not have a host assigned") {
			t.Errorf("kubectl exec against karmada-apiserver: %q, want %q", stderr, "does not have a host assigned")
		}
	})

	t.Run("no-exec is forbidden through the gateway", func(t *testing.T) {
		_, stderr, err := e.RunKubectl(t.Context(), e.GatewayKubeconfig(env.UserNoExec), nil, execArgs(name)...)
		if err == nil {
			t.Fatal("kubectl exec as no-exec succeeded through the gateway")
		}
		if !strings.Contains(stderr, "forbidden") {
			t.Errorf("kubectl exec as no-exec: %q, want a forbidden error", stderr)
		}
	})
}
