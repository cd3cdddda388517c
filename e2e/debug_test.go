package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

// TestKubectlDebug runs the real `kubectl debug -it --target` on a
// federated pod through the gateway, in both auth modes: the ephemeral
// container is added to the template and to the member's copy, the
// template shows its status (the shipped Pod status interpreter, applied
// here: not parallel), kubectl attaches to it on a terminal, typed input
// reaches it and it sees the target container's processes. Karmada's sync
// of the pod stays healthy afterwards (its copy applied, a later change of
// the template reaches the member), and exec still works. A caller without
// the right gets a Status at once, and nothing is added anywhere; so does
// a Duplicated pod, whose other copies would lack the container.
func TestKubectlDebug(t *testing.T) {
	dumpLogsOnFailure(t)
	withShippedPodStatusInterpreter(t)
	const name, member, dup = "debug-target", "member2", "debug-duplicated"
	placePod(t, sleepPod(name), []string{member}, member)
	members := testEnv.Members()
	createDuplicatedPod(t, sleepPod(dup), members)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	for _, m := range members {
		memberPodIP(ctx, t, m, dup)
	}

	for _, mode := range []string{"passthrough", "authorize"} {
		gw, err := testEnv.StartExtraGateway(ctx, "gateway-debug-"+mode, "--auth-mode="+mode)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.Stop)
		t.Run(mode, func(t *testing.T) {
			kubeconfig := serverKubeconfig(t, testEnv.GatewayKubeconfig(env.UserExecOnly), gw.URL())
			container := "dbg-" + mode
			kubectlDebugTTY(ctx, t, kubeconfig, name, container)

			mp, err := testEnv.MemberPod(ctx, member, env.Namespace, name)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(mp.Spec.EphemeralContainers, func(c corev1.EphemeralContainer) bool { return c.Name == container }) {
				t.Errorf("%s's pod has ephemeral containers %v, want %s", member, ephemeralNames(mp), container)
			}
			tmpl, err := gatewayClient(t, env.UserAdmin).CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ephemeralNames(tmpl), ephemeralNames(mp); !slices.Equal(got, want) {
				t.Errorf("the template has ephemeral containers %v, its copy %v: Karmada's sync fails when they differ", got, want)
			}
			assertKarmadaStillSyncs(ctx, t, name, member, "debugged-"+mode)
			kubectlExec(t, kubeconfig, name)

			// Refused: a caller who may read the pod but not debug it.
			noDebug := serverKubeconfig(t, testEnv.GatewayKubeconfig(env.UserNoExec), gw.URL())
			runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, stderr, err := testEnv.RunKubectl(runCtx, noDebug, nil, "debug", name, "-i", "--image="+images.Busybox, "--image-pull-policy=Never", "-c", "refused-"+mode, "--", "true")
			if err == nil || runCtx.Err() != nil || !strings.Contains(stderr, "forbidden") {
				t.Errorf("kubectl debug as %s: %v, %q; want a Forbidden Status at once", env.UserNoExec, err, stderr)
			}
			mp, err = testEnv.MemberPod(ctx, member, env.Namespace, name)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(ephemeralNames(mp), "refused-"+mode) {
				t.Errorf("a refused debug added its container to %s's pod: %v", member, ephemeralNames(mp))
			}

			// A pod in several clusters: its other copies would lack the
			// container, and Karmada could no longer sync them.
			_, stderr, err = testEnv.RunKubectl(runCtx, kubeconfig, nil, "debug", dup, "-i", "--image="+images.Busybox, "--image-pull-policy=Never", "-c", "dup-"+mode, "--", "true")
			if err == nil || runCtx.Err() != nil || !strings.Contains(stderr, "runs in several member clusters") {
				t.Errorf("kubectl debug of a Duplicated pod: %v, %q; want the Conflict saying why, at once", err, stderr)
			}
			for _, m := range members {
				if mp, err := testEnv.MemberPod(ctx, m, env.Namespace, dup); err != nil || len(mp.Spec.EphemeralContainers) > 0 {
					t.Errorf("%s's copy of the Duplicated pod after a refused debug: %v, %v", m, err, mp)
				}
			}
		})
	}
}

// kubectlDebugTTY runs `kubectl debug -it --target=main` on a terminal:
// the debug container reads a line, prints it and the processes it sees
// (the target's included), and exits.
func kubectlDebugTTY(ctx context.Context, t *testing.T, kubeconfig, pod, container string) {
	t.Helper()
	args := append(kubectlGlobalArgs(testEnv, kubeconfig), "debug", pod, "-it", "--image="+images.Busybox, "--image-pull-policy=Never",
		"-c", container, "--target=main", "--", "sh", "-c", `read line; echo "got:$line"; ps; exit 5`)
	cmd := exec.CommandContext(ctx, testEnv.Kubectl(), args...)
	cmd.Env = os.Environ()
	master, out, copied := startOnTTY(t, cmd, 40, 120)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// kubectl says this once the container runs and it attaches.
	if err := waitString(ctx, out, "If you don't see a command prompt", time.Minute); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("kubectl debug never attached: %v; output %q", err, out.String())
	}
	if _, err := master.Write([]byte("typed-into-debug\r")); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("kubectl debug did not exit; output %q", out.String())
	}
	<-copied
	if !strings.Contains(out.String(), "got:typed-into-debug") {
		t.Errorf("kubectl debug output %q (%v) lacks the typed line echoed by the debug container", out.String(), err)
	}
	if !strings.Contains(out.String(), "sleep 1") {
		t.Errorf("kubectl debug --target=main output %q lacks the target's processes", out.String())
	}
}

// assertKarmadaStillSyncs: Karmada reports the pod's copy applied on
// member, and a label put on the template reaches the copy.
func assertKarmadaStillSyncs(ctx context.Context, t *testing.T, pod, member, label string) {
	t.Helper()
	admin := gatewayClient(t, env.UserAdmin)
	patch := fmt.Sprintf(`{"metadata":{"labels":{"e2e-synced":%q}}}`, label)
	if _, err := admin.CoreV1().Pods(env.Namespace).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		mp, err := testEnv.MemberPod(ctx, member, env.Namespace, pod)
		if err != nil {
			return false, nil
		}
		last = mp.Labels["e2e-synced"]
		b, err := podBinding(ctx, pod)
		if err != nil {
			return false, nil
		}
		items, _, _ := unstructured.NestedSlice(b.Object, "status", "aggregatedStatus")
		applied := false
		for _, it := range items {
			if m, ok := it.(map[string]any); ok && m["clusterName"] == member && m["applied"] == true {
				applied = true
			}
		}
		return applied && last == label, nil
	})
	if err != nil {
		b, _ := podBinding(ctx, pod)
		var status any
		if b != nil {
			status = b.Object["status"]
		}
		t.Errorf("Karmada no longer syncs pod %s to %s (label %q, want %q; binding status %v): %v", pod, member, last, label, status, err)
	}
}

func ephemeralNames(p *corev1.Pod) []string {
	var names []string
	for _, c := range p.Spec.EphemeralContainers {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names
}

// TestEphemeralContainerOnOneSideStopsKarmadaSync is why the gateway
// writes both sides of a kubectl debug: an ephemeral container added to
// the template alone (what karmada-apiserver does without the gateway), or
// to the member's copy alone, makes Karmada's next sync of the pod fail,
// the member refusing the update ("pod updates may not change fields"),
// and the binding reports the copy not applied.
func TestEphemeralContainerOnOneSideStopsKarmadaSync(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const member = "member1"
	karmadaSide, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	memberSide, err := testEnv.MemberClient(member)
	if err != nil {
		t.Fatal(err)
	}
	for side, client := range map[string]kubernetes.Interface{"template": karmadaSide, "member": memberSide} {
		t.Run(side+" only", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			name := "debug-one-side-" + side
			placePod(t, sleepPod(name), []string{member}, member)
			patch := fmt.Sprintf(`{"spec":{"ephemeralContainers":[{"name":"dbg","image":%q,"imagePullPolicy":"Never","command":["sleep","3600"]}]}}`, images.Busybox)
			if _, err := client.CoreV1().Pods(env.Namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "ephemeralcontainers"); err != nil {
				t.Fatal(err)
			}
			var last string
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				b, err := podBinding(ctx, name)
				if err != nil {
					return false, nil
				}
				items, _, _ := unstructured.NestedSlice(b.Object, "status", "aggregatedStatus")
				for _, it := range items {
					if m, ok := it.(map[string]any); ok && m["clusterName"] == member {
						last, _ = m["appliedMessage"].(string)
						applied, _ := m["applied"].(bool) // left out when false
						return !applied && strings.Contains(last, "pod updates may not change fields"), nil
					}
				}
				return false, nil
			})
			if err != nil {
				t.Errorf("after an ephemeral container on the %s only, Karmada still applies the pod (last message %q): %v", side, last, err)
			}
		})
	}
}
