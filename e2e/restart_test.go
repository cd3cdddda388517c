package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// TestAuthorizeMode restarts the gateway in authorize mode: it authorizes
// the caller itself and reaches the member as its own identity, so a user
// with pod RBAC in karmada-apiserver alone (no clusters/proxy, nothing in
// members) can exec, which passthrough mode refuses, and no-exec is refused
// by the gateway.
func TestAuthorizeMode(t *testing.T) {
	e := testEnv
	const name = "authorize"
	startPod(t, name, `while true; do sleep 1; done`)
	karmadaOnly := e.GatewayKubeconfig(env.UserExecKarmadaOnly)

	_, stderr, err := e.RunKubectl(t.Context(), karmadaOnly, nil, execArgs(name)...)
	if err == nil {
		t.Fatalf("kubectl exec as %s succeeded in passthrough mode without clusters/proxy", env.UserExecKarmadaOnly)
	}
	if !strings.Contains(stderr, "forbidden") {
		t.Errorf("kubectl exec as %s in passthrough mode: %q, want a forbidden error", env.UserExecKarmadaOnly, stderr)
	}

	if err := e.RestartGateway(t.Context(), "--auth-mode=authorize"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.RestartGateway(ctx, "--auth-mode=passthrough"); err != nil {
			t.Errorf("restart the gateway in passthrough mode: %v", err)
		}
	})

	kubectlExec(t, karmadaOnly, name)
	kubectlExec(t, e.GatewayKubeconfig(env.UserExecOnly), name)
	_, stderr, err = e.RunKubectl(t.Context(), e.GatewayKubeconfig(env.UserNoExec), nil, execArgs(name)...)
	if err == nil {
		t.Fatal("kubectl exec as no-exec succeeded through the gateway in authorize mode")
	}
	if !strings.Contains(stderr, "forbidden") {
		t.Errorf("kubectl exec as no-exec in authorize mode: %q, want a forbidden error", stderr)
	}
}

// TestRestarts exercises the environment's restart controls with the real
// gateway: it comes back on the same URL, and a member that goes away makes
// exec fail (not hang) and serves it again once back.
func TestRestarts(t *testing.T) {
	e := testEnv
	const name = "restarts"
	cluster := startPod(t, name, `while true; do sleep 1; done`)
	kubeconfig := e.GatewayKubeconfig(env.UserExecOnly)
	kubectlExec(t, kubeconfig, name)

	url := e.GatewayURL()
	if err := e.RestartGateway(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := e.GatewayURL(); got != url {
		t.Fatalf("gateway moved from %s to %s on restart", url, got)
	}
	kubectlExec(t, kubeconfig, name)

	e.StopMember(cluster)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, _, err := e.RunKubectl(ctx, kubeconfig, nil, execArgs(name)...); err == nil {
		t.Errorf("kubectl exec succeeded while %s was down", cluster)
	} else if ctx.Err() != nil {
		t.Errorf("kubectl exec hung while %s was down: %v", cluster, err)
	}
	if err := e.StartMember(t.Context(), cluster); err != nil {
		t.Fatal(err)
	}
	kubectlExec(t, kubeconfig, name)
}
