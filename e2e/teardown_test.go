package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

// stopLeavesNothing ends the test's own environment e the way every
// environment ends, and checks that nothing of it is left. First it runs in
// each member a pod with what leaves traces on a node (a Secret volume,
// which the kubelet mounts as tmpfs, an emptyDir shared by two containers, a
// network namespace and veth) and checks that the pod has no route off the
// machine; then, after Stop, that no process of the environment, container,
// shim, mount, bridge, veth, cgroup, proxy or agent is left and the work
// directory is gone. TestPullMember ends with it (Pull members in network
// namespaces of their own, after their faults and four freezes); the
// README's Helm test and the demo check their own ends. An environment of
// its own only for this check cost CI a whole start.
func stopLeavesNothing(t *testing.T, e *env.Env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	workDir := e.WorkDir()
	for _, m := range e.Members() {
		cs, err := e.MemberClient(m)
		if err != nil {
			t.Fatal(err)
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "traces", Namespace: env.Namespace}, StringData: map[string]string{"token": "not-a-secret"}}
		if _, err := cs.CoreV1().Secrets(env.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := env.ShellPod(env.Namespace, "traces", "while true; do date > /shared/now; sleep 1; done")
		pod.Spec.Containers = append(pod.Spec.Containers, env.LocalContainer("reader", images.Busybox, "sh", "-c", "while true; do cat /shared/now /secret/token >/dev/null 2>&1; sleep 1; done"))
		pod.Spec.Volumes = []corev1.Volume{
			{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "traces"}}},
		}
		for i := range pod.Spec.Containers {
			pod.Spec.Containers[i].VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}, {Name: "secret", MountPath: "/secret"}}
		}
		if _, err := cs.CoreV1().Pods(env.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := cs.CoreV1().Pods(env.Namespace).Get(ctx, "traces", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, nil
		}); err != nil {
			t.Fatalf("pod in %s not running: %v", m, err)
		}
		// Pod traffic cannot leave the machine: the pod's only route is its
		// member's /24 of 198.18.0.0/16, no default route.
		routes, err := e.MemberExec(ctx, m, env.Namespace, "traces", "main", "ip", "-4", "route")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(routes), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "198.18.") || !strings.Contains(lines[0], "/24 dev eth0") {
			t.Errorf("routes in %s's pod: %q, want only its /24 of 198.18.0.0/16 on eth0", m, routes)
		}
	}
	// The pods did leave traces: otherwise the check below proves nothing.
	if !mountedUnder(t, workDir) {
		t.Fatalf("no mount under %s while pods run; the test would not see one left behind", workDir)
	}

	e.Stop()
	if left := e.Leftovers(); len(left) > 0 {
		t.Errorf("left behind after Stop: %q", left)
	}
	if mountedUnder(t, workDir) {
		t.Errorf("mounts under %s after Stop", workDir)
	}
	if procs := processesNaming(t, workDir); len(procs) > 0 {
		t.Errorf("processes naming %s after Stop: %q", workDir, procs)
	}
	if _, err := os.Stat(workDir); err == nil && !e.KeepsWorkDir() {
		t.Errorf("work dir %s still exists after Stop", workDir)
	}
}

func mountedUnder(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(" "+dir+"/"))
}

// processesNaming lists the command lines that mention dir: the
// environment's kubelets, containerds and shims all do.
func processesNaming(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(dir+"/")) {
			out = append(out, string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return out
}
