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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// TestMemberLocalPodNotReached replays issue #18 on real Karmada: member1
// runs a pod e2e/victim that Karmada does not manage (created in the member
// directly, container "secret"). A template e2e/victim placed on member1
// conflicts with it, so Karmada refuses to apply it and reports why in the
// binding. In authorize mode the gateway acts in member1 as itself, so
// exec-karmada-only (pod rights in karmada-apiserver only, no member RBAC,
// no clusters/proxy) must not reach that pod by asking for the template:
// a WebSocket exec and pods/log with container=secret (which kubectl would
// refuse client-side, a raw request does not) get a 409 Status naming
// Karmada's refusal, the command never runs there, and the member pod's
// events are not merged into the template's. A pod Karmada did propagate
// keeps working for the same caller.
//
// The template and policy are created as admin: who creates them does not
// enter the gateway's decision, only exec-karmada-only's rights on
// e2e/victim in karmada-apiserver, which its pod rules grant by name.
func TestMemberLocalPodNotReached(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	const victim, member, secretLog = "victim", "member1", "victim-secret-log-42"

	// The member-local pod: created in member1 as its admin, never by Karmada.
	memberClient, err := testEnv.MemberClient(member)
	if err != nil {
		t.Fatal(err)
	}
	local := env.ShellPod(env.Namespace, victim, "echo "+secretLog+"; while true; do sleep 1; done")
	local.Spec.Containers[0].Name = "secret"
	if _, err := memberClient.CoreV1().Pods(env.Namespace).Create(ctx, local, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the member-local pod in %s: %v", member, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := memberClient.CoreV1().Pods(env.Namespace).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete the member-local pod: %v", err)
		}
	})
	waitMemberPodRunning(t, member, victim)
	memberEvent := createMemberEvent(t, member, victim, "secret", corev1.EventTypeNormal, "Started", "victim-secret-event-42")

	// The conflicting template, and Karmada's refusal to apply it.
	createPlacedPod(t, sleepPod(victim), []string{member})
	refusal := waitApplyRefused(t, victim, member)

	// A pod Karmada did propagate, for the positive check.
	const own = "membercopy-own"
	placePod(t, sleepPod(own), []string{member}, member)

	restartGatewayFor(t, []string{"--auth-mode=authorize"})

	podPath := "/api/v1/namespaces/" + env.Namespace + "/pods/" + victim
	const marker = "reached-" + victim
	wsQuery := "container=secret&command=sh&command=-c&command=echo+" + marker + "+%3E+" + marker + "%3B+echo+" + marker + "&stdout=true&stderr=true"
	wantConflict := func(t *testing.T, what string, st metav1.Status) {
		t.Helper()
		if st.Code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict ||
			!strings.Contains(st.Message, `pod "e2e/victim" has no copy Karmada applied`) || !strings.Contains(st.Message, refusal) {
			t.Errorf("authorize mode: %s as %s: %+v, want a 409 Conflict Status carrying Karmada's refusal %q", what, env.UserExecKarmadaOnly, st, refusal)
		}
	}

	t.Run("exec over WebSocket", func(t *testing.T) {
		s, refused, err := tryDialGatewayWS(t, env.UserExecKarmadaOnly, podPath+"/exec", wsQuery, []string{"v5.channel.k8s.io", "v4.channel.k8s.io"})
		if err == nil {
			_ = s.waitClosed(30 * time.Second)
			t.Fatalf("authorize mode: WebSocket exec into the member-local pod was upgraded; stdout %q, error channel %q", s.text(chStdout), s.text(chError))
		}
		if refused.code != http.StatusConflict {
			t.Fatalf("authorize mode: WebSocket exec answered %s, want 409", refused)
		}
		var st metav1.Status
		if err := json.Unmarshal(refused.body, &st); err != nil || st.Kind != "Status" {
			t.Fatalf("authorize mode: WebSocket exec refused with %s, want a Status", refused)
		}
		wantConflict(t, "WebSocket exec", st)
	})
	t.Run("exec over SPDY's POST", func(t *testing.T) {
		wantConflict(t, "POST exec", rawStatus(t, http.MethodPost, testEnv.GatewayURL()+podPath+"/exec?container=secret&command=true&stdout=true", testEnv.Token(env.UserExecKarmadaOnly)))
	})
	t.Run("log", func(t *testing.T) {
		wantConflict(t, "pods/log", rawStatus(t, http.MethodGet, testEnv.GatewayURL()+podPath+"/log?container=secret", testEnv.Token(env.UserExecKarmadaOnly)))
	})
	t.Run("nothing ran in the member-local pod", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		stdout, stderr, err := testEnv.RunKubectl(ctx, testEnv.MemberKubeconfig(member), nil,
			"-n", env.Namespace, "exec", victim, "-c", "secret", "--", "sh", "-c", "cat "+marker+" 2>/dev/null || echo absent")
		if err != nil || strings.TrimSpace(stdout) != "absent" {
			t.Errorf("the member-local pod has %q (%v, %s), want no %s file", stdout, err, stderr, marker)
		}
	})
	t.Run("member events of the member-local pod are not merged", func(t *testing.T) {
		client, _ := gatewayClientWithWarnings(t, env.UserExecKarmadaOnly)
		list, err := client.CoreV1().Events(env.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + victim})
		if err != nil {
			t.Fatalf("authorize mode: list events as %s: %v", env.UserExecKarmadaOnly, err)
		}
		for _, e := range list.Items {
			if e.Message == memberEvent.Message {
				t.Errorf("authorize mode: the member-local pod's event %q was merged into the template's events", e.Message)
			}
		}
	})
	t.Run("a propagated pod still works", func(t *testing.T) {
		expectExec(t, "authorize", env.UserExecKarmadaOnly, own)
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, stderr, err := testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserExecKarmadaOnly), nil, "logs", own); err != nil {
			t.Errorf("authorize mode: kubectl logs %s as %s: %v (%s)", own, env.UserExecKarmadaOnly, err, stderr)
		}
	})
}

// waitMemberPodRunning waits until member's pod namespace/name, created
// there directly, runs.
func waitMemberPodRunning(t *testing.T, member, name string) {
	t.Helper()
	client, err := testEnv.MemberClient(member)
	if err != nil {
		t.Fatal(err)
	}
	phase := corev1.PodPhase("not read")
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("member pod %s/%s in %s: phase %s: %v", env.Namespace, name, member, phase, err)
	}
}

// waitApplyRefused waits until the binding of pod reports that Karmada did
// not apply it to member, and returns the part of its message that says
// why: Karmada will not manage the member's own pod.
func waitApplyRefused(t *testing.T, pod, member string) string {
	t.Helper()
	const why = "Karmada will not manage this resource"
	last := "no binding yet"
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		rb, err := podBinding(ctx, pod)
		if err != nil {
			return false, nil
		}
		items, _, _ := unstructured.NestedSlice(rb.Object, "status", "aggregatedStatus")
		last = fmt.Sprintf("aggregatedStatus %v", items)
		for _, it := range items {
			m, _ := it.(map[string]any)
			applied, _ := m["applied"].(bool)
			msg, _ := m["appliedMessage"].(string)
			if m["clusterName"] == member && !applied && strings.Contains(msg, why) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("binding of %s never reported Karmada's refusal on %s (%s): %v", pod, member, last, err)
	}
	return why
}
