package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// pullMembers are the members of TestPullMember's environment, both joined
// in Pull mode: the package's route tests place their pods on member1 or
// member2 by name and compare with clusters/<member>/proxy, so they run
// unchanged against Pull-mode members. pullMember is behind an HTTP CONNECT
// proxy and socksMember behind a SOCKS5 one, the two kinds of
// spec.proxyURL Karmada's cluster proxy dials, so every route goes through
// both. The faults break pullMember's agent and each member's proxy.
var pullMembers = []string{"member1", "member2"}

const (
	pullMember  = "member1"
	socksMember = "member2"
)

// TestPullMember runs the gateway against a Pull-mode member as a user's
// edge cluster is: member1 and member2 each joined by a real karmada-agent
// (built from Karmada's source at the pinned commit, started with
// `karmadactl register`'s flags), each with its kube-apiserver, kubelet,
// containerd and agent in a network namespace of its own, reachable from
// the control plane only through the proxy named by its Cluster's
// spec.proxyURL: Debian's tinyproxy (HTTP CONNECT) for member1, Debian's
// Dante server (SOCKS5) for member2.
//
// It starts an environment of its own and, while it runs, makes it the
// package's testEnv: it is not parallel, so the package's parallel tests
// are paused until it returns (Go releases top-level parallel tests after
// the sequential ones), and its subtests are the package's own route tests,
// run unchanged against the Pull member. It restores testEnv when done.
func TestPullMember(t *testing.T) {
	pe := env.StartForTest(t, env.Options{
		Gateway:     env.GatewayOptions{Enabled: true},
		Members:     pullMembers,
		PullMembers: pullMembers,
		PullProxies: map[string]string{socksMember: "socks5"},
		KeepWorkDir: os.Getenv("E2E_KEEP") != "",
	})
	shared := testEnv
	testEnv = pe
	t.Cleanup(func() { testEnv = shared })
	for m, scheme := range map[string]string{pullMember: "http", socksMember: "socks5"} {
		if u := pe.ProxyURL(m); u.Scheme != scheme {
			t.Fatalf("%s's proxyURL %s, want a %s one", m, u, scheme)
		}
	}

	t.Run("only the proxy reaches the member", testPullOnlyThroughProxy)

	// Every route through the gateway, in both auth modes, each beside the
	// same request to clusters/<member>/proxy where the test makes one: the
	// package's own tests, their pods on the Pull members.
	t.Run("routes", func(t *testing.T) {
		for _, rt := range []struct {
			name string
			run  func(*testing.T)
		}{
			{"smoke", TestSmoke},                                   // exec through the gateway and clusters/member1/proxy by hand
			{"streams", TestStreams},                               // exec SPDY/WebSocket, -i, -i -t, client-go TTY, cp, executors
			{"attach", TestAttach},                                 // attach
			{"logs", TestLogs},                                     // logs -f
			{"portforward", TestPortForward},                       // port-forward over both transports
			{"podproxy", TestPodProxy},                             // pods/proxy
			{"podproxy-authorize", TestPodProxyAuthorizeMode},      // pods/proxy as the gateway
			{"serviceproxy", TestServiceProxy},                     // services/proxy, both modes
			{"events", TestMemberPodEvents},                        // member events list
			{"events-watch", TestMemberPodEventsWatch},             // member events watch
			{"events-authorize", TestMemberPodEventsAuthorizeMode}, // member events as the gateway
			{"placement", TestPlacement},                           // the labeler
			{"status-fidelity", TestPodStatusFidelity},             // the Pod status interpreter
			{"executor-github", TestExecutorGitHubRunnerHooks},     // executor replays
			{"executor-gitlab", TestExecutorGitLabRunner},
			{"executor-jenkins", TestExecutorJenkins},
			{"executor-seed", TestExecutorSeedTTY},
			{"executor-semaphore", TestExecutorSemaphore},
			{"executor-argo", TestExecutorArgoWorkflows},
			{"node-client", TestNodeClient},         // @kubernetes/client-node, as runner-container-hooks use it
			{"debug", TestKubectlDebug},             // kubectl debug -it --target
			{"pinned", TestPinnedMember},            // /clusters/<member> server URLs, a Duplicated pod on both Pull members
			{"auth-modes", testDisruptiveAuthModes}, // both auth modes
			// Streams on both members, both proxy kinds, in both auth modes.
			{"streams-both-modes", testPullStreamsBothModes},
			// --member-access=direct through both proxy kinds: the
			// differential, 20 MB, streams and jobs across control-plane
			// restarts.
			{"direct", TestDirectMemberAccess},
		} {
			t.Run(rt.name, rt.run)
		}
	})

	t.Run("faults", testPullFaults)

	// Faults that hang rather than die, in the same environment once the
	// Pull faults are over: a process under the gateway frozen, not killed.
	// An environment of their own cost CI a control plane's start and about
	// 50 core-seconds for nothing a Push member would add: the gateway's
	// deadlines do not depend on how Karmada reaches a member.
	t.Run("hung dependencies", func(t *testing.T) { testHungDependencies(t, pe) })

	// Every gateway process the subtests restarted, the hung cases' too.
	if err := pe.StopGatewayAndCheckRaces(); err != nil {
		t.Error(err)
	}
	// Stop leaves no namespace, link, forwarder, proxy or agent behind,
	// after the faults and four freezes (when something failed, the work
	// dir and logs are kept for the dump).
	if !t.Failed() {
		testEnv = shared
		stopLeavesNothing(t, pe)
	}
}

// testPullOnlyThroughProxy checks what the agent registered and that the
// member's kube-apiserver is reachable from the control plane's network
// namespace only through the proxy: a direct connection to the Cluster's
// spec.apiEndpoint from the test (in the namespace of
// karmada-aggregated-apiserver, whose cluster proxy dials members) fails,
// the same request through spec.proxyURL succeeds.
func testPullOnlyThroughProxy(t *testing.T) {
	for _, m := range pullMembers {
		t.Run(m, func(t *testing.T) { onlyThroughProxy(t, m) })
	}
}

func onlyThroughProxy(t *testing.T, pullMember string) {
	e := testEnv
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	kc, err := e.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kc.CoreV1().RESTClient().Get().AbsPath("/apis/cluster.karmada.io/v1alpha1/clusters", pullMember).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var cluster struct {
		Spec struct {
			SyncMode, APIEndpoint, ProxyURL string
			ImpersonatorSecretRef           *struct{ Namespace, Name string }
		}
	}
	if err := json.Unmarshal(raw, &cluster); err != nil {
		t.Fatal(err)
	}
	s := cluster.Spec
	if s.SyncMode != "Pull" || s.ProxyURL != e.ProxyURL(pullMember).String() || s.APIEndpoint != e.MemberURL(pullMember) || s.ImpersonatorSecretRef == nil {
		t.Fatalf("Cluster %s spec %+v: want syncMode Pull, apiEndpoint %s and proxyURL %s as karmada-agent registers them, with an impersonator Secret",
			pullMember, s, e.MemberURL(pullMember), e.ProxyURL(pullMember))
	}

	// The control plane and the member's apiserver are in different
	// network namespaces; the aggregated apiserver is in the test's.
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	agg, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", e.KarmadaAggregatedAPIServerPID()))
	member, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", e.MemberAPIServerPID(pullMember)))
	if agg != self || member == "" || member == self {
		t.Errorf("network namespaces: test %s, karmada-aggregated-apiserver %s, %s's kube-apiserver %s; want the first two equal and the member's another", self, agg, pullMember, member)
	}

	get := func(proxy *url.URL) (int, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool(t, e)}, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
		if proxy != nil {
			tr.Proxy = http.ProxyURL(proxy)
		}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.APIEndpoint+"/readyz", nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+e.Token(env.UserAdmin))
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if code, err := get(nil); err == nil {
		t.Errorf("GET %s/readyz directly from the control plane's network namespace answered %d; want no connection", s.APIEndpoint, code)
	} else {
		t.Logf("direct connection to %s fails as it must: %v", s.APIEndpoint, err)
	}
	if code, err := get(e.ProxyURL(pullMember)); err != nil || code != http.StatusOK {
		t.Errorf("GET %s/readyz through the proxy %s: %d, %v; want 200", s.APIEndpoint, e.ProxyURL(pullMember), code, err)
	}
}

// testPullFaults breaks what is Pull mode's own: the agent (Karmada stops
// hearing from the member: the Cluster goes not Ready, the gateway answers
// 503 naming the member once Karmada says so, the other member keeps
// serving) and the proxies, HTTP CONNECT then SOCKS5 (every tunnel through
// one is cut under open streams, which end with an error naming the member
// as for a killed kubelet). All come back and new streams work through the
// same gateway process.
func testPullFaults(t *testing.T) {
	dumpLogsOnFailure(t)
	const pod, other = "pull-ticker", "pull-other"
	placePod(t, env.ShellPod(env.Namespace, pod, tickerScript), []string{pullMember}, pullMember)
	placePod(t, sleepPod(other), []string{socksMember}, socksMember)
	gatewayPID := testEnv.GatewayPID()

	t.Run("agent stopped: 503 naming the member once Karmada says it is not Ready", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		expectExec(t, "agent running", env.UserExecOnly, pod)
		start := time.Now()
		testEnv.StopAgent(pullMember)
		restarted := false
		t.Cleanup(func() {
			if !restarted {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				if err := testEnv.StartAgent(ctx, pullMember); err != nil {
					t.Errorf("restart the agent: %v", err)
				}
			}
		})
		// Karmada first: the Cluster's Ready condition leaves True when the
		// controller-manager sees no lease renewal within its grace period.
		var cond string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			ready, msg, err := clusterReady(ctx, pullMember)
			if err != nil {
				return false, err
			}
			cond = msg
			return !ready, nil
		})
		if err != nil {
			t.Fatalf("Cluster %s still Ready a minute after its agent stopped: %v", pullMember, err)
		}
		t.Logf("Karmada reports %s not Ready %s after its agent stopped: %s", pullMember, time.Since(start).Round(100*time.Millisecond), cond)

		// Then the gateway, once its Cluster informer has the change.
		var st metav1.Status
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			st = rawExecStatus(t, env.UserExecOnly, env.Namespace, pod)
			return st.Code == http.StatusServiceUnavailable, nil
		})
		if err != nil || st.Reason != metav1.StatusReasonServiceUnavailable || !strings.Contains(st.Message, `member cluster "`+pullMember+`"`) {
			t.Errorf("POST pods/%s/exec with %s's agent stopped: %+v, want a 503 ServiceUnavailable Status naming %s", pod, pullMember, st, pullMember)
		}
		_, stderr, err := kubectlExecAs(ctx, env.UserExecOnly, pod)
		if want := `member cluster "` + pullMember + `" of pod "e2e/` + pod + `" is not ready`; err == nil || !strings.Contains(stderr, want) {
			t.Errorf("kubectl exec with %s's agent stopped: %v, %q; want an error with %q", pullMember, err, stderr, want)
		}
		// What Karmada itself does: its cluster proxy does not look at the
		// Cluster's readiness, and the member and the proxy still run (the
		// README says so; the gateway's 503 is its own choice).
		if stdout, _, err := testEnv.RunKubectl(ctx, mustProxyKubeconfig(t, pullMember), nil, execArgs(pod)...); err != nil || stdout != execWant {
			t.Errorf("exec through clusters/%s/proxy with the agent stopped: %q, %v; want Karmada's cluster proxy to ignore readiness and reach the member", pullMember, stdout, err)
		}
		expectExec(t, "agent stopped", env.UserExecOnly, other)

		if err := testEnv.StartAgent(ctx, pullMember); err != nil {
			t.Fatal(err)
		}
		restarted = true
		waitExecWorks(t, ctx, pod)
	})

	t.Run("proxy killed: open execs end with an error naming the member, logs -f with an error", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
		defer cancel()
		spdyDone := startLongExec(t, ctx, pod, "spdy")
		wsDone := startLongExec(t, ctx, pod, "websocket")
		logsDone := followTicks(t, ctx, pod)
		before := map[string]float64{"exec": reportedCuts(t, "exec"), "log": reportedCuts(t, "log")}

		testEnv.KillProxy(pullMember)
		restarted := false
		t.Cleanup(func() {
			if !restarted {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				if err := testEnv.StartProxy(ctx, pullMember); err != nil {
					t.Errorf("restart the proxy: %v", err)
				}
			}
		})
		expectEnded(t, "the proxy was killed", map[string]streamEnd{
			"the SPDY exec through the gateway":      {spdyDone, errorNaming(`member cluster "` + pullMember + `"`)},
			"the WebSocket exec through the gateway": {wsDone, errorNaming(`member cluster "` + pullMember + `"`)},
			"logs -f through the gateway":            {logsDone, anError},
		})
		// The execs' cuts are the gateway's to report (the tunnel closed
		// without an exit status). The log follow is not: unlike a killed
		// kubelet, whose apiserver ends the body cleanly, the cluster proxy
		// loses its upstream mid-body and karmada-apiserver aborts the
		// response, which the gateway relays as an abort (the client's
		// stream error above) without judging it.
		for route, want := range map[string]float64{"exec": 2, "log": 0} {
			if got := reportedCuts(t, route) - before[route]; got != want {
				t.Errorf("karmada_gateway_stream_cuts_total{route=%q,result=\"reported\"} rose by %v, want %v", route, got, want)
			}
		}
		// Karmada still calls the Cluster Ready (the agent probes the member
		// from inside), so the gateway routes a new exec, and Karmada's
		// cluster proxy answers its failure to dial through the dead proxy
		// with the bare dial error, naming no cluster (checked here through
		// clusters/<member>/proxy: the gateway recognises the dial error, so
		// a Karmada that words it otherwise must show). The gateway reports
		// it as a 503 naming the cluster proxy and the member, Karmada's
		// message kept: over an upgrade (kubectl exec: Karmada's upgrade
		// dialer) and without one (a plain POST: Karmada's ReverseProxy
		// transport).
		if stdout, stderr, err := testEnv.RunKubectl(ctx, mustProxyKubeconfig(t, pullMember), nil, execArgs(pod)...); err == nil || !strings.Contains(stderr, "dial tcp") {
			t.Errorf("exec through clusters/%s/proxy with the proxy down: %v, %q %q; want Karmada's dial error", pullMember, err, stdout, stderr)
		} else {
			t.Logf("exec through clusters/%s/proxy with the proxy down: %s", pullMember, strings.TrimSpace(stderr))
		}
		proxyName := `the cluster proxy for cluster "` + pullMember + `" could not reach member cluster "` + pullMember + `"`
		if stdout, stderr, err := kubectlExecAs(ctx, env.UserExecOnly, pod); err == nil || !strings.Contains(stderr, proxyName) {
			t.Errorf("kubectl exec into %s with the proxy down: %v, %q %q; want an error with %q", pod, err, stdout, stderr, proxyName)
		} else {
			t.Logf("kubectl exec with the proxy down: %s", strings.TrimSpace(stderr))
		}
		if st := rawExecStatus(t, env.UserExecOnly, env.Namespace, pod); st.Code != http.StatusServiceUnavailable ||
			st.Reason != metav1.StatusReasonServiceUnavailable || !strings.Contains(st.Message, proxyName) || !strings.Contains(st.Message, "proxyconnect") {
			t.Errorf("POST pods/%s/exec with the proxy down: %+v; want a 503 ServiceUnavailable Status with %q and Karmada's proxyconnect error", pod, st, proxyName)
		}
		expectExec(t, "proxy down", env.UserExecOnly, other)

		if err := testEnv.StartProxy(ctx, pullMember); err != nil {
			t.Fatal(err)
		}
		restarted = true
		waitExecWorks(t, ctx, pod)
		// A new logs -f streams again.
		rc2, err := gatewayClient(t, env.UserExecOnly).CoreV1().Pods(env.Namespace).GetLogs(pod, &corev1.PodLogOptions{Follow: true, TailLines: new(int64(1))}).Stream(ctx)
		if err != nil {
			t.Fatalf("logs -f after the proxy came back: %v", err)
		}
		defer rc2.Close()
		if l, err := bufio.NewReader(rc2).ReadString('\n'); err != nil || !strings.HasPrefix(l, "tick-") {
			t.Errorf("logs -f after the proxy came back read %q, %v; want a tick-N line", l, err)
		}
	})

	t.Run("SOCKS5 proxy killed: logs -f ends with an error, a new exec gets a 503 naming the member", func(t *testing.T) {
		testSOCKSProxyKilled(t, pod)
	})

	if got := testEnv.GatewayPID(); got != gatewayPID {
		t.Errorf("the gateway process changed (pid %d, now %d): the faults must heal without a restart", gatewayPID, got)
	}
}

// waitExecWorks waits until kubectl exec into pod through the gateway works
// again (the gateway learns the member is Ready from its Cluster informer).
func waitExecWorks(t *testing.T, ctx context.Context, pod string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		stdout, stderr, err := kubectlExecAs(ctx, env.UserExecOnly, pod)
		last = stderr
		return err == nil && stdout == execWant, nil
	})
	if err != nil {
		t.Fatalf("kubectl exec into %s never worked again (last %q): %v", pod, last, err)
	}
}

// clusterReady reads the Cluster's Ready condition from karmada-apiserver.
func clusterReady(ctx context.Context, name string) (bool, string, error) {
	kc, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		return false, "", err
	}
	raw, err := kc.CoreV1().RESTClient().Get().AbsPath("/apis/cluster.karmada.io/v1alpha1/clusters", name).DoRaw(ctx)
	if err != nil {
		return false, "", err
	}
	var c karmada.Cluster
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, "", err
	}
	ready, msg := c.Ready()
	return ready, msg, nil
}

func mustProxyKubeconfig(t *testing.T, member string) string {
	t.Helper()
	kc, err := testEnv.ClusterProxyKubeconfig(member, env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

func caPool(t *testing.T, e *env.Env) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(e.CAPEM()) {
		t.Fatal(errors.New("the environment's CA is not PEM"))
	}
	return p
}

// testSOCKSProxyKilled kills socksMember's SOCKS5 proxy (Debian's Dante
// server) under two execs (SPDY, WebSocket) and a `logs -f` through the
// gateway: the execs end with the gateway's Failure naming the member, the
// follow with an error, and a new exec gets the gateway's 503 naming the cluster proxy and
// the member with Karmada's SOCKS error (upstream.ReportMemberUnreachable
// must know Karmada's "socks connect" wording: without it the exec's error
// names no cluster), while other's member keeps serving; with the proxy
// back execs work again through the same gateway.
func testSOCKSProxyKilled(t *testing.T, other string) {
	const pod = "socks-ticker"
	placePod(t, env.ShellPod(env.Namespace, pod, tickerScript), []string{socksMember}, socksMember)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	expectExec(t, "socks5", env.UserExecOnly, pod)
	spdyDone := startLongExec(t, ctx, pod, "spdy")
	wsDone := startLongExec(t, ctx, pod, "websocket")
	logsDone := followTicks(t, ctx, pod)
	before := reportedCuts(t, "exec")

	testEnv.KillProxy(socksMember)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := testEnv.StartProxy(ctx, socksMember); err != nil {
				t.Errorf("restart the proxy: %v", err)
			}
		}
	})
	expectEnded(t, "the SOCKS5 proxy was killed", map[string]streamEnd{
		"the SPDY exec through the gateway":      {spdyDone, errorNaming(`member cluster "` + socksMember + `"`)},
		"the WebSocket exec through the gateway": {wsDone, errorNaming(`member cluster "` + socksMember + `"`)},
		"logs -f through the gateway":            {logsDone, anError},
	})
	if got := reportedCuts(t, "exec") - before; got != 2 {
		t.Errorf("karmada_gateway_stream_cuts_total{route=\"exec\",result=\"reported\"} rose by %v, want 2", got)
	}
	want := `the cluster proxy for cluster "` + socksMember + `" could not reach member cluster "` + socksMember + `": socks connect`
	if stdout, stderr, err := kubectlExecAs(ctx, env.UserExecOnly, pod); err == nil || !strings.Contains(stderr, want) {
		t.Errorf("kubectl exec into %s with the SOCKS5 proxy down: %v, %q %q; want an error with %q", pod, err, stdout, stderr, want)
	} else {
		t.Logf("kubectl exec with the SOCKS5 proxy down: %s", strings.TrimSpace(stderr))
	}
	expectExec(t, "SOCKS5 proxy down", env.UserExecOnly, other)
	if err := testEnv.StartProxy(ctx, socksMember); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitExecWorks(t, ctx, pod)
}

// testPullStreamsBothModes runs the stream routes through the gateway on
// both Pull members, the one behind HTTP CONNECT and the one behind
// SOCKS5, in passthrough mode and in authorize mode: a TTY exec (client-go,
// SPDY and WebSocket), attach, logs -f and port-forward (the package's
// route tests run on the HTTP CONNECT member in passthrough mode).
func testPullStreamsBothModes(t *testing.T) {
	dumpLogsOnFailure(t)
	members := map[string]string{pullMember: "HTTP CONNECT", socksMember: "SOCKS5"}
	for m := range members {
		attach := env.ShellPod(env.Namespace, "pull-attach-"+m, `echo attach-ready; while read -r l; do echo "echo:$l"; done`)
		attach.Spec.Containers[0].Stdin = true
		createPlacedPod(t, attach, []string{m})
		echo := env.ShellPod(env.Namespace, "pull-echo-"+m, "")
		echo.Spec.Containers[0] = env.LocalContainer("main", images.Echo, tcpecho)
		createPlacedPod(t, echo, []string{m})
		createPlacedPod(t, env.ShellPod(env.Namespace, "pull-ticks-"+m, tickerScript), []string{m})
	}
	for m := range members {
		for _, p := range []string{"pull-attach-", "pull-echo-", "pull-ticks-"} {
			waitPlaced(t, p+m, m)
		}
	}
	for _, mode := range []string{"passthrough", "authorize"} {
		t.Run(mode, func(t *testing.T) {
			restartGatewayFor(t, []string{"--auth-mode=" + mode}, "--auth-mode=passthrough")
			kubeconfig := testEnv.GatewayKubeconfig(env.UserExecOnly)
			cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
			if err != nil {
				t.Fatal(err)
			}
			for m, proxy := range members {
				t.Run(proxy, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
					defer cancel()
					u := execURL(t, "pull-ticks-"+m, &corev1.PodExecOptions{Command: []string{"sh", "-c", "tty >/dev/null && echo tty-ok"}, Stdout: true, TTY: true})
					for _, kind := range []string{"spdy", "websocket"} {
						exe := execExecutor(t, kind, cfg, u)
						var out bytes.Buffer
						if err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Tty: true}); err != nil || !strings.Contains(out.String(), "tty-ok") {
							t.Errorf("%s TTY exec: %q, %v", kind, out.String(), err)
						}
					}
					a := startKubectl(t, kubeconfig, nil, "attach", "-i", "pull-attach-"+m, "-c", "main")
					if _, err := io.WriteString(a.stdin, "ping\n"); err != nil {
						t.Fatal(err)
					}
					if err := a.waitOutput(ctx, "echo:ping\n", 30*time.Second); err != nil {
						t.Errorf("attach: %v (stderr %q)", err, a.stderr.String())
					}
					a.kill()
					rc, err := gatewayClient(t, env.UserExecOnly).CoreV1().Pods(env.Namespace).GetLogs("pull-ticks-"+m, &corev1.PodLogOptions{Follow: true, TailLines: new(int64(1))}).Stream(ctx)
					if err != nil {
						t.Errorf("logs -f: %v", err)
					} else {
						r := bufio.NewReader(rc)
						for range 2 { // the tail, then a line written since
							if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "tick-") {
								t.Errorf("logs -f read %q, %v; want tick-N lines", l, err)
								break
							}
						}
						rc.Close()
					}
					pf, local := portForward(t, kubeconfig, nil, "pull-echo-"+m, tcpEchoPort(t, kubeconfig, "pull-echo-"+m))
					if err := echoRoundTrip(ctx, local, 1<<20, 7); err != nil {
						t.Errorf("port-forward: %v (stderr %q)", err, pf.stderr.String())
					}
					pf.kill()
				})
			}
		})
	}
}

// expectEnded waits for each stream to end, up to 90 s after what
// happened, and checks how it ended.
func expectEnded(t *testing.T, after string, streams map[string]streamEnd) {
	t.Helper()
	for name, s := range streams {
		select {
		case err := <-s.done:
			t.Logf("%s ended with: %v", name, err)
			if msg := s.check(err); msg != "" {
				t.Errorf("%s after %s: %s", name, after, msg)
			}
		case <-time.After(90 * time.Second):
			t.Errorf("%s still runs 90s after %s", name, after)
		}
	}
}
