package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// TestDisruptive holds the scenarios that restart the gateway or stop a
// member. It is not parallel: Go runs every parallel test only after the
// sequential ones, so nothing else is in flight while it breaks things.
// Its subtests run in order and each restores what it broke.
func TestDisruptive(t *testing.T) {
	placeDisruptPods(t)
	t.Run("auth modes", testAuthModes)
	t.Run("member down", testMemberDown)
	t.Run("gateway restart while labeling", testRestartWhileLabeling)
}

// testDisruptiveAuthModes is TestDisruptive's switch between the auth modes
// alone, for TestPullMember: a stopped member and a restarted labeler are
// not Pull mode's own (its faults are the agent and the proxy), and CI's
// budget has no room for them twice.
func testDisruptiveAuthModes(t *testing.T) {
	placeDisruptPods(t)
	testAuthModes(t)
}

// placeDisruptPods places one pod per member, shared by the subtests.
func placeDisruptPods(t *testing.T) {
	t.Helper()
	dumpLogsOnFailure(t)
	for _, m := range testEnv.Members() {
		createPlacedPod(t, sleepPod("disrupt-"+m), []string{m})
	}
	for _, m := range testEnv.Members() {
		waitPlaced(t, "disrupt-"+m, m)
	}
}

// kubectlExecAs runs `kubectl exec pod -- sh -c 'echo exec-42'` through
// the gateway as user.
func kubectlExecAs(ctx context.Context, user, pod string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(user), nil, execArgs(pod)...)
}

// expectForbidden checks that kubectl exec as user is refused with a 403.
// kubectl 1.37 prints a refused upgrade as "unable to upgrade connection:
// <Status message>" (karmada-apiserver's own 403 looks the same), so the
// code and reason are checked on a plain POST of the same request.
func expectForbidden(t *testing.T, mode, user, pod string) {
	t.Helper()
	stdout, stderr, err := kubectlExecAs(t.Context(), user, pod)
	if err == nil {
		t.Errorf("%s mode: kubectl exec as %s succeeded (stdout %q), want 403", mode, user, stdout)
		return
	}
	want := fmt.Sprintf(`is forbidden: User %q cannot create resource`, user)
	if !strings.Contains(stderr, "error: unable to upgrade connection: ") || !strings.Contains(stderr, want) {
		t.Errorf("%s mode: kubectl exec as %s: %q, want kubectl's refused upgrade with %q", mode, user, stderr, want)
	}
	st := rawExecStatus(t, user, env.Namespace, pod)
	if st.Kind != "Status" || st.Code != 403 || st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, want) {
		t.Errorf("%s mode: POST pods/%s/exec as %s: %+v, want a 403 Forbidden Status %q", mode, pod, user, st, want)
	}
}

func expectExec(t *testing.T, mode, user, pod string) {
	t.Helper()
	stdout, _, err := kubectlExecAs(t.Context(), user, pod)
	if err != nil {
		t.Errorf("%s mode: kubectl exec as %s: %v", mode, user, err)
	} else if stdout != execWant {
		t.Errorf("%s mode: kubectl exec as %s printed %q, want %q", mode, user, stdout, execWant)
	}
}

// expectImpersonationRefused checks that kubectl exec as user fails with
// the member's refusal to let Karmada's impersonator impersonate group:
// Karmada's unified-auth controller grants it only the users and groups
// bound to clusters/proxy, and the cluster proxy impersonates every group
// of the caller but system:authenticated.
func expectImpersonationRefused(t *testing.T, user, group, pod string) {
	t.Helper()
	stdout, stderr, err := kubectlExecAs(t.Context(), user, pod)
	if err == nil {
		t.Errorf("passthrough mode: kubectl exec as %s (group %s not bound to clusters/proxy) succeeded (stdout %q)", user, group, stdout)
		return
	}
	want := fmt.Sprintf(`groups %q is forbidden: User "system:serviceaccount:%s:karmada-impersonator" cannot impersonate resource "groups"`, group, env.KarmadaCluster)
	if !strings.Contains(stderr, want) {
		t.Errorf("passthrough mode: kubectl exec as %s: %q, want Karmada's impersonation refusal %q", user, stderr, want)
	}
	st := rawExecStatus(t, user, env.Namespace, pod)
	if st.Code != 403 || !strings.Contains(st.Message, want) {
		t.Errorf("passthrough mode: POST pods/%s/exec as %s: %+v, want a 403 Status %q", pod, user, st, want)
	}
}

// testAuthModes: in passthrough mode karmada-apiserver and the member
// decide (exec-only may; no-exec and exec-karmada-only may not, nor
// exec-group-unbound, whose group Karmada may not impersonate); in
// authorize mode the gateway decides from pod RBAC in karmada-apiserver
// alone (exec-karmada-only and exec-group-unbound may too, no-exec still
// may not).
func testAuthModes(t *testing.T) {
	const pod = "disrupt-member1"
	expectExec(t, "passthrough", env.UserExecOnly, pod)
	expectForbidden(t, "passthrough", env.UserNoExec, pod)
	expectForbidden(t, "passthrough", env.UserExecKarmadaOnly, pod)
	expectImpersonationRefused(t, env.UserExecGroupUnbound, env.GroupUnbound, pod)
	expectSubprotocolTokenExec(t, "passthrough", env.UserExecOnly, pod)

	if err := testEnv.RestartGateway(t.Context(), "--auth-mode=authorize"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testEnv.RestartGateway(ctx, "--auth-mode=passthrough"); err != nil {
			t.Errorf("restart the gateway in passthrough mode: %v", err)
		}
	})
	expectExec(t, "authorize", env.UserExecKarmadaOnly, pod)
	expectExec(t, "authorize", env.UserExecGroupUnbound, pod)
	expectSubprotocolTokenExec(t, "authorize", env.UserExecKarmadaOnly, pod)
	// kube-apiserver checks a POST of pods/log as create, which exec-only
	// may not: the refusal is the caller's, never the gateway's identity's.
	logPost := rawStatus(t, http.MethodPost, testEnv.GatewayURL()+"/api/v1/namespaces/"+env.Namespace+"/pods/"+pod+"/log", testEnv.Token(env.UserExecOnly))
	if want := fmt.Sprintf(`User %q cannot create resource "pods/log"`, env.UserExecOnly); logPost.Code != http.StatusForbidden || !strings.Contains(logPost.Message, want) {
		t.Errorf("authorize mode: POST pods/%s/log as %s: %+v, want a 403 %q", pod, env.UserExecOnly, logPost, want)
	}
	expectExec(t, "authorize", env.UserExecOnly, pod)
	expectForbidden(t, "authorize", env.UserNoExec, pod)
}

// testMemberDown stops member1's apiserver: exec into its pod gets a 503
// Status naming member1 once Karmada marks the Cluster not Ready
// (within seconds, never a hang), exec into member2's pod keeps working,
// and member1 serves again once it is back.
func testMemberDown(t *testing.T) {
	const down, up = "disrupt-member1", "disrupt-member2"
	testEnv.StopMember("member1")
	restarted := false
	t.Cleanup(func() {
		if restarted {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := testEnv.StartMember(ctx, "member1"); err != nil {
			t.Errorf("restart member1: %v", err)
		} else if err := testEnv.WaitClusterReady(ctx, "member1"); err != nil {
			t.Errorf("member1 after restart: %v", err)
		}
	})

	start := time.Now()
	const want503 = `error: unable to upgrade connection: member cluster "member1" of pod "e2e/` + down + `" is not ready`
	var last string
	hung := false
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		attempt := time.Now()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		stdout, stderr, err := testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserExecOnly), nil, execArgs(down)...)
		switch {
		case err == nil:
			last = "exec succeeded: " + stdout
		case ctx.Err() != nil:
			if !hung {
				t.Errorf("kubectl exec into %s hung for 10s, %s after member1 went down (stderr %q)",
					down, attempt.Sub(start).Round(100*time.Millisecond), stderr)
			}
			hung = true
			last = "hung"
		default:
			last = stderr
		}
		return strings.Contains(last, want503), nil
	})
	if err != nil {
		t.Fatalf("kubectl exec into %s with member1 down never printed %q within 30s; last: %q", down, want503, last)
	}
	t.Logf("exec into a member1 pod answered 503 %s after member1 went down", time.Since(start).Round(100*time.Millisecond))

	st := rawExecStatus(t, env.UserExecOnly, env.Namespace, down)
	if st.Kind != "Status" || st.Code != 503 || st.Reason != metav1.StatusReasonServiceUnavailable || !strings.Contains(st.Message, `"member1"`) {
		t.Errorf("POST pods/%s/exec with member1 down: %+v, want a 503 ServiceUnavailable Status naming member1", down, st)
	}

	expectExec(t, "member1 down", env.UserExecOnly, up)
	assertExecReaches(t, up, "member2")

	if err := testEnv.StartMember(t.Context(), "member1"); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if err := testEnv.WaitClusterReady(t.Context(), "member1"); err != nil {
		t.Fatal(err)
	}
	// The gateway learns that member1 is Ready from its Cluster informer.
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, stderr, err := kubectlExecAs(ctx, env.UserExecOnly, down)
		last = stderr
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("kubectl exec into %s after member1 came back: %q", down, last)
	}
	assertExecReaches(t, down, "member1")
}

// testRestartWhileLabeling restarts the gateway, whose labeler keeps
// cluster.karmada.io/name on templates, while pods are propagated: half
// are created just before it stops (their labels may be in flight), half
// while it is down (their bindings are scheduled with nobody to label
// them). Once it is back every template carries its binding's cluster.
func testRestartWhileLabeling(t *testing.T) {
	const k = 8
	ctx := t.Context()
	members := testEnv.Members()[:2]
	byMember := make([][]string, len(members))
	var all []string
	for i := range k {
		n := fmt.Sprintf("relabel-%d", i)
		byMember[i%2] = append(byMember[i%2], n)
		all = append(all, n)
	}
	for i, m := range members {
		if err := testEnv.CreatePolicy(ctx, namedPolicy("relabel-"+m, byMember[i], []string{m})); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dumpLogsOnce(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if !testEnv.GatewayRunning() {
			if err := testEnv.StartGateway(ctx); err != nil {
				t.Errorf("start the gateway again: %v", err)
			}
		}
		var wg sync.WaitGroup
		for _, n := range all {
			wg.Go(func() {
				if err := testEnv.DeletePod(ctx, env.Namespace, n); err != nil {
					t.Errorf("delete pod: %v", err)
				}
			})
		}
		wg.Wait()
		for _, m := range members {
			if err := testEnv.DeletePolicy(ctx, env.Namespace, "relabel-"+m); err != nil {
				t.Errorf("delete policy: %v", err)
			}
		}
	})
	want := func(n string) string {
		for i, names := range byMember {
			if slices.Contains(names, n) {
				return members[i]
			}
		}
		return ""
	}

	// Straight to karmada-apiserver: the gateway is not needed to create.
	for _, n := range all[:k/2] {
		if _, err := admin.CoreV1().Pods(env.Namespace).Create(ctx, sleepPod(n), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", n, err)
		}
	}
	testEnv.StopGateway()
	// The control itself: the stopped gateway released its Lease
	// (ReleaseOnCancel empties the holder), so the next labels at once.
	if holder, err := leaseHolder(ctx, testEnv); err != nil || holder != "" {
		t.Errorf("after the gateway stopped, the labeler's Lease is held by %q (%v): not released on shutdown", holder, err)
	}
	for _, n := range all[k/2:] {
		if _, err := admin.CoreV1().Pods(env.Namespace).Create(ctx, sleepPod(n), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", n, err)
		}
	}
	for _, n := range all[k/2:] {
		if err := waitBound(ctx, n, want(n)); err != nil {
			t.Fatal(err)
		}
		p, err := admin.CoreV1().Pods(env.Namespace).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := p.Labels[karmada.ClusterNameLabel]; ok {
			t.Fatalf("pod %s got %s=%s while the gateway was stopped: something else labels pods, the test proves nothing", n, karmada.ClusterNameLabel, l)
		}
	}
	if err := testEnv.StartGateway(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	// Released, the Lease is taken at once; one left to expire would hold
	// the new gateway back for up to its 15s duration. Labeling every pod
	// took 2-4s on an idle machine and up to 9.6s on CI's loaded cores, so
	// the bound is the duration itself: the Lease check above is the test
	// of the release, this one that labeling resumes.
	const handover = 15 * time.Second
	for _, n := range all {
		if err := waitBound(ctx, n, want(n)); err != nil {
			t.Error(err)
			continue
		}
		if err := waitLabel(ctx, n, want(n), 60*time.Second); err != nil {
			t.Errorf("after the gateway restart: %v", err)
		}
	}
	if took := time.Since(started); took > handover {
		t.Errorf("the restarted gateway labeled every pod only %s after it was ready, want under %s (the Lease duration)",
			took.Round(100*time.Millisecond), handover)
	}
}

// waitBound waits until pod's binding is scheduled and checks it is on want.
func waitBound(ctx context.Context, pod, want string) error {
	var cluster string
	last := "no binding"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		rb, err := podBinding(ctx, pod)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		clusters, _, _ := unstructured.NestedSlice(rb.Object, "spec", "clusters")
		if len(clusters) == 0 {
			last = "binding not scheduled"
			return false, nil
		}
		cluster, _, _ = unstructured.NestedString(clusters[0].(map[string]any), "name")
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("pod %s: %s: %w", pod, last, err)
	}
	if cluster != want {
		return fmt.Errorf("pod %s is bound to %s, want %s", pod, cluster, want)
	}
	return nil
}
