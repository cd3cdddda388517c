package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberevents"
)

// TestPinnedMember: a server URL pinning a member cluster
// (https://gateway/clusters/<member>, README "Every copy of a Duplicated
// pod") reaches the copy of a Duplicated pod in that member, in both auth
// modes: kubectl exec and logs run there (the pod's IP in that member is
// the witness), attach and port-forward upgrade, pods/proxy reaches that
// copy, the pod's events merge that member's, and a CI job (Jenkins'
// WebSocket exec) runs there to its exit code. The rest of the API is karmada-apiserver's. A pod Karmada placed
// on one member only gets, under another member's URL, a 404 naming where
// it is, and nothing runs.
func TestPinnedMember(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const dup, one = "pinned-dup", "pinned-one"
	members := testEnv.Members()
	createDuplicatedPod(t, env.ShellPod(env.Namespace, dup, podIPScript+"; while true; do sleep 1; done"), members)
	placePod(t, sleepPod(one), []string{members[0]}, members[0])

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if _, err := testEnv.WaitPodRunning(ctx, env.Namespace, dup, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{}
	for _, m := range members {
		ips[m] = memberPodIP(ctx, t, m, dup)
	}

	for _, mode := range []string{"passthrough", "authorize"} {
		gw, err := testEnv.StartExtraGateway(ctx, "gateway-pinned-"+mode, "--auth-mode="+mode)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.Stop)
		t.Run(mode, func(t *testing.T) {
			// A cluster Karmada does not have, a typo in a kubeconfig: a
			// 404 Status naming it on every route, never karmada-apiserver's
			// answer; kubectl fails at once (its discovery gets the 404
			// and prints its own "could not find the requested resource").
			typoBase := gw.URL() + "/clusters/no-such-member"
			caller := probeCaller{name: env.UserExecOnly, token: testEnv.Token(env.UserExecOnly)}
			for _, rt := range []probeRoute{
				{"get pod", http.MethodGet, "/api/v1/namespaces/" + env.Namespace + "/pods/" + dup, nil},
				{"discovery", http.MethodGet, "/apis", nil},
				{"log", http.MethodGet, "/api/v1/namespaces/" + env.Namespace + "/pods/" + dup + "/log", nil},
			} {
				if v, msg := probe(ctx, t, http1Transport(t), typoBase, caller, rt); v.Code != http.StatusNotFound || v.Reason != "NotFound" || !strings.Contains(msg, `member cluster "no-such-member" not found`) {
					t.Errorf("%s under /clusters/no-such-member: %+v %q, want 404 NotFound naming the cluster", rt.name, v, msg)
				}
			}
			typo := serverKubeconfig(t, testEnv.GatewayKubeconfig(env.UserExecOnly), typoBase)
			tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			out, stderr, err := testEnv.RunKubectl(tctx, typo, nil, "exec", dup, "--", "sh", "-c", "echo ran")
			cancel()
			if err == nil || strings.Contains(out, "ran") || !strings.Contains(stderr, "could not find the requested resource") {
				t.Errorf("kubectl exec under /clusters/no-such-member: %v, %q %q; want it to fail at discovery's 404", err, out, stderr)
			}
			for _, m := range members {
				base := gw.URL() + "/clusters/" + m
				kubeconfig := serverKubeconfig(t, testEnv.GatewayKubeconfig(env.UserExecOnly), base)
				run := func(args ...string) (string, string, error) {
					ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					return testEnv.RunKubectl(ctx, kubeconfig, nil, args...)
				}
				if out, _, err := run("exec", dup, "--", "sh", "-c", podIPScript); err != nil || strings.TrimSpace(out) != ips[m] {
					t.Errorf("exec under /clusters/%s ran where the IP is %q (%v), want %s's copy, IP %s", m, out, err, m, ips[m])
				}
				if out, _, err := run("logs", dup); err != nil || !strings.HasPrefix(out, ips[m]+"\n") {
					t.Errorf("logs under /clusters/%s: %q, %v; want %s's copy's, starting with its IP %s", m, out, err, m, ips[m])
				}
				if out, _, err := run("get", "pod", dup, "-o", "name"); err != nil || out != "pod/"+dup+"\n" {
					t.Errorf("get pod under /clusters/%s: %q, %v; want karmada-apiserver's template", m, out, err)
				}
				checkPinnedUpgrades(ctx, t, base, m, dup, ips[m])
				checkPinnedEvents(ctx, t, gw.Config(env.UserAdmin), base, m, dup)

				cfg := gw.Config(env.UserExecOnly)
				cfg.Host = base
				job := startCIJob(ctx, t, cfg, "websocket", dup, fmt.Sprintf("pinned-%s-%s", mode, m))
				job.end(ctx, t, kubeconfig, dup)

				if m == members[0] {
					continue
				}
				notPlaced := fmt.Sprintf("is not placed on member cluster %q", m)
				out, stderr, err := run("exec", one, "--", "sh", "-c", "echo ran")
				if err == nil || strings.Contains(out, "ran") || !strings.Contains(stderr, notPlaced) || !strings.Contains(stderr, "Karmada placed it on "+members[0]) {
					t.Errorf("exec under /clusters/%s into a pod placed on %s only: %v, %q %q; want the refusal naming %s", m, members[0], err, out, stderr, members[0])
				}
				caller := probeCaller{name: env.UserExecOnly, token: testEnv.Token(env.UserExecOnly)}
				logs := probeRoute{"log", http.MethodGet, "/api/v1/namespaces/" + env.Namespace + "/pods/" + one + "/log", nil}
				if v, msg := probe(ctx, t, http1Transport(t), base, caller, logs); v.Code != http.StatusNotFound || v.Reason != "NotFound" || !strings.Contains(msg, notPlaced) {
					t.Errorf("log under /clusters/%s of a pod placed on %s only: %+v %q, want 404 NotFound naming it", m, members[0], v, msg)
				}
			}
		})
	}
}

// checkPinnedUpgrades: attach and port-forward under base upgrade, and
// pods/proxy reaches the copy whose IP is ip (nothing listens on its port
// 80, so the member's kube-apiserver answers naming the address it dialed).
func checkPinnedUpgrades(ctx context.Context, t *testing.T, base, member, pod, ip string) {
	t.Helper()
	rt := http1Transport(t)
	caller := probeCaller{name: env.UserExecOnly, token: testEnv.Token(env.UserExecOnly)}
	for _, r := range []probeRoute{
		{"attach", http.MethodPost, "/api/v1/namespaces/" + env.Namespace + "/pods/" + pod + "/attach?container=main&stdout=true", spdyHeader("v4.channel.k8s.io")},
		{"portforward", http.MethodPost, "/api/v1/namespaces/" + env.Namespace + "/pods/" + pod + "/portforward", spdyHeader("portforward.k8s.io")},
	} {
		if v, msg := probe(ctx, t, rt, base, caller, r); v.Code != http.StatusSwitchingProtocols {
			t.Errorf("%s under /clusters/%s: %+v %s, want 101", r.name, member, v, msg)
		}
	}
	admin := probeCaller{name: env.UserAdmin, token: testEnv.Token(env.UserAdmin)}
	r := probeRoute{"pods/proxy", http.MethodGet, "/api/v1/namespaces/" + env.Namespace + "/pods/" + pod + ":80/proxy/", nil}
	if v, msg := probe(ctx, t, rt, base, admin, r); !strings.Contains(msg, ip+":80") {
		t.Errorf("pods/proxy under /clusters/%s: %+v %s, want the member dialing its copy at %s:80", member, v, msg, ip)
	}
}

// checkPinnedEvents: the pod's events listed under base (the pinned URL)
// merge the member's events from member and from no other.
func checkPinnedEvents(ctx context.Context, t *testing.T, cfg *rest.Config, base, member, pod string) {
	t.Helper()
	cfg.Host = base
	client := gatewayClientFor(t, cfg)
	var from map[string]int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(env.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, nil
		}
		from = map[string]int{}
		for _, e := range evs.Items {
			if c := e.Annotations[memberevents.MemberClusterAnnotation]; c != "" {
				from[c]++
			}
		}
		return from[member] > 0, nil
	})
	if err != nil || len(from) != 1 {
		t.Errorf("events of %s under /clusters/%s merge the member events of %v, want %s's only: %v", pod, member, from, member, err)
	}
}

// memberPodIP waits until member runs its copy of pod and returns its IP.
func memberPodIP(ctx context.Context, t *testing.T, member, pod string) string {
	t.Helper()
	var ip string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := testEnv.MemberPod(ctx, member, env.Namespace, pod)
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		ip = p.Status.PodIP
		return ip != "", nil
	})
	if err != nil {
		t.Fatalf("%s's copy of %s never ran: %v", member, pod, err)
	}
	return ip
}

// serverKubeconfig is a copy of kubeconfig whose clusters' server is
// server, as a user makes one context per member.
func serverKubeconfig(t *testing.T, kubeconfig, server string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// createDuplicatedPod creates pod through the gateway with a policy that
// runs a copy of it in each of members (Duplicated); both are deleted when
// t ends.
func createDuplicatedPod(t *testing.T, pod *corev1.Pod, members []string) {
	t.Helper()
	policy := namedPolicy(pod.Name, []string{pod.Name}, members)
	policy.Object["spec"].(map[string]any)["placement"] = map[string]any{
		"clusterAffinity":   map[string]any{"clusterNames": toAny(members)},
		"replicaScheduling": map[string]any{"replicaSchedulingType": "Duplicated"},
	}
	createPodWithPolicy(t, pod, policy)
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
