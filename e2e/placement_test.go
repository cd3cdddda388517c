package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// TestPlacement places one pod on each member and checks that exec through
// the gateway reaches each where it runs.
func TestPlacement(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	for _, member := range testEnv.Members() {
		t.Run(member, func(t *testing.T) {
			t.Parallel()
			name := "place-" + member
			placePod(t, sleepPod(name), []string{member}, member)
			assertExecReaches(t, name, member)
		})
	}
}

// TestMove moves a pod from the member Karmada scheduled it to to the other
// by editing its ResourceBinding's spec.clusters, as Karmada's rescheduling
// and failover do: the labeler relabels the template and exec follows the pod.
func TestMove(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name = "move"
	ctx := t.Context()
	// Karmada's scheduler picks either member; the move goes to the other.
	createPlacedPod(t, sleepPod(name), []string{"member1", "member2"})
	if _, err := testEnv.WaitPodRunning(ctx, env.Namespace, name, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	clusters, err := testEnv.PodClusters(ctx, env.Namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 1 {
		t.Fatalf("pod %s bound to %v, want one member", name, clusters)
	}
	from, to := clusters[0], "member2"
	if from == to {
		to = "member1"
	}
	if err := waitLabel(ctx, name, from, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	assertExecReaches(t, name, from)

	rb, err := podBinding(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"clusters": []any{map[string]any{"name": to, "replicas": 1}}}})
	if _, err := dyn.Resource(karmada.ResourceBindingGVR).Namespace(env.Namespace).Patch(ctx, rb.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("move binding %s to %s: %v", rb.GetName(), to, err)
	}

	if err := waitLabel(ctx, name, to, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitMemberPod(ctx, to, name, func(p *corev1.Pod) bool { return p != nil && p.Status.Phase == corev1.PodRunning }); err != nil {
		t.Fatal(err)
	}
	if err := waitMemberPod(ctx, from, name, func(p *corev1.Pod) bool { return p == nil }); err != nil {
		t.Fatal(err)
	}
	assertExecReaches(t, name, to)
}

// waitMemberPod waits until cond holds for the member's pod (nil when absent).
func waitMemberPod(ctx context.Context, member, name string, cond func(*corev1.Pod) bool) error {
	client, err := testEnv.MemberClient(member)
	if err != nil {
		return err
	}
	last := "not read"
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			last = "absent"
			return cond(nil), nil
		case err != nil:
			last = err.Error()
			return false, nil
		}
		last = "phase " + string(p.Status.Phase)
		return cond(p), nil
	})
	if err != nil {
		return fmt.Errorf("wait for pod %s in %s (%s): %w", name, member, last, err)
	}
	return nil
}

// unplacedNamespace holds no PropagationPolicy, so its pods never get a
// ResourceBinding.
const unplacedNamespace = "e2e-unplaced"

// TestStatus checks the Status errors clients get from the gateway itself:
// a pod that does not exist, and one no policy placed.
func TestStatus(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)

	t.Run("not found", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, stderr, err := testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserExecOnly), nil, "exec", "nope", "--", "true")
		const want = `Error from server (NotFound): pods "nope" not found`
		if err == nil || !strings.Contains(stderr, want) {
			t.Errorf("kubectl exec nope: err %v, stderr %q; want %q", err, stderr, want)
		}
		// kubectl asks karmada-apiserver for the pod first; a client that
		// goes straight to exec gets the gateway's own 404.
		st := rawExecStatus(t, env.UserExecOnly, env.Namespace, "nope")
		if st.Code != 404 || st.Reason != metav1.StatusReasonNotFound || st.Message != `pods "nope" not found` {
			t.Errorf("POST pods/nope/exec: %+v, want 404 NotFound %q", st, `pods "nope" not found`)
		}
	})

	t.Run("not placed", func(t *testing.T) {
		ctx := t.Context()
		admin, err := testEnv.KarmadaClient(env.UserAdmin)
		if err != nil {
			t.Fatal(err)
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: unplacedNamespace}}
		if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		const name = "unplaced"
		if _, err := admin.CoreV1().Pods(unplacedNamespace).Create(ctx, env.ShellPod(unplacedNamespace, name, "true"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := testEnv.DeletePod(ctx, unplacedNamespace, name); err != nil {
				t.Errorf("delete pod: %v", err)
			}
		})
		wantMsg := fmt.Sprintf("pod %q is not placed on any member cluster", unplacedNamespace+"/"+name)

		// The gateway's pod cache sees the new pod within moments; until
		// then it answers 404, which is why this polls.
		var st metav1.Status
		start := time.Now()
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			st = rawExecStatus(t, env.UserAdmin, unplacedNamespace, name)
			return st.Code != 404, nil
		})
		if err != nil || st.Code != 503 || st.Reason != metav1.StatusReasonServiceUnavailable || !strings.Contains(st.Message, wantMsg) {
			t.Errorf("POST pods/%s/exec for a pod without a policy: %+v (%v), want 503 ServiceUnavailable %q", name, st, err, wantMsg)
		}
		t.Logf("the gateway answered 503 for the unplaced pod %s after it was created", time.Since(start).Round(10*time.Millisecond))

		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, stderr, err := testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserAdmin), nil, "exec", "-n", unplacedNamespace, name, "--", "true")
		// kubectl 1.37 prints a refused upgrade as "unable to upgrade
		// connection: <Status message>", as for karmada-apiserver's own errors.
		want := "error: unable to upgrade connection: " + wantMsg
		if err == nil || !strings.Contains(stderr, want) {
			t.Errorf("kubectl exec into a pod without a policy: err %v, stderr %q; want %q", err, stderr, want)
		}
	})
}

// rawExecStatus POSTs a plain (not upgraded) exec request through the
// gateway as user and returns the Status it answers with (see rawStatus).
func rawExecStatus(t *testing.T, user, namespace, pod string) metav1.Status {
	t.Helper()
	return rawStatus(t, http.MethodPost,
		testEnv.GatewayURL()+"/api/v1/namespaces/"+namespace+"/pods/"+pod+"/exec?command=true&stdout=true", testEnv.Token(user))
}
