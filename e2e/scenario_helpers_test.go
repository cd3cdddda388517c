package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// namedPolicyPriority puts the scenario policies, which select their pods by
// name, above the namespace-wide ones of startPod, so a pod lands where its
// scenario says whatever other tests run at the same time.
const namedPolicyPriority = 10

// namedPolicy is a PropagationPolicy that selects exactly the Pods named
// pods and places each on one of clusters (the first Ready one, maxGroups 1).
func namedPolicy(name string, pods, clusters []string) *unstructured.Unstructured {
	policy := env.PropagationPolicy(env.Namespace, name, clusters)
	selectors := make([]any, 0, len(pods))
	for _, p := range pods {
		selectors = append(selectors, map[string]any{"apiVersion": "v1", "kind": "Pod", "name": p})
	}
	spec := policy.Object["spec"].(map[string]any)
	spec["resourceSelectors"] = selectors
	spec["priority"] = int64(namedPolicyPriority)
	return policy
}

// placePod creates a policy selecting pod by name with clusters, creates
// the pod through the gateway as admin, waits until the template runs and
// checks that its binding and the member pod are on want. Both are deleted
// when t ends (after the logs are dumped if t failed).
func placePod(t *testing.T, pod *corev1.Pod, clusters []string, want string) {
	t.Helper()
	createPlacedPod(t, pod, clusters)
	waitPlaced(t, pod.Name, want)
}

// createPlacedPod is placePod without the wait, for starting several pods
// at once.
func createPlacedPod(t *testing.T, pod *corev1.Pod, clusters []string) {
	t.Helper()
	createPodWithPolicy(t, pod, namedPolicy(pod.Name, []string{pod.Name}, clusters))
}

// createPodWithPolicy creates policy (named after the pod) and the pod
// through the gateway as admin; both are deleted when t ends.
func createPodWithPolicy(t *testing.T, pod *corev1.Pod, policy *unstructured.Unstructured) {
	t.Helper()
	e := testEnv
	ctx := t.Context()
	if err := e.CreatePolicy(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dumpLogsOnce(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.DeletePod(ctx, env.Namespace, pod.Name); err != nil {
			t.Errorf("delete pod: %v", err)
		}
		if err := e.DeletePolicy(ctx, env.Namespace, pod.Name); err != nil {
			t.Errorf("delete policy: %v", err)
		}
	})
	gw := gatewayClient(t, env.UserAdmin)
	if _, err := gw.CoreV1().Pods(env.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s through the gateway: %v", pod.Name, err)
	}
}

// waitPlaced waits until the template of pod runs and checks that its
// binding and the member pod are on want.
func waitPlaced(t *testing.T, name, want string) {
	t.Helper()
	e := testEnv
	ctx := t.Context()
	if _, err := e.WaitPodRunning(ctx, env.Namespace, name, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	clusters, err := e.PodClusters(ctx, env.Namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 1 || clusters[0] != want {
		t.Fatalf("pod %s is bound to %v, want [%s]", name, clusters, want)
	}
	if _, err := e.MemberPod(ctx, want, env.Namespace, name); err != nil {
		t.Fatalf("pod %s bound to %s: %v", name, want, err)
	}
}

// dumped remembers the tests whose logs were dumped already.
var dumped sync.Map

// dumpLogsOnce prints the environment's log tails the first time it is
// called for a failed t: from a cleanup, so before t's pods are deleted.
func dumpLogsOnce(t *testing.T) {
	if !t.Failed() {
		return
	}
	if _, done := dumped.LoadOrStore(t, true); done {
		return
	}
	testEnv.DumpLogs(t)
}

// dumpLogsOnFailure registers the log dump for t's end.
func dumpLogsOnFailure(t *testing.T) {
	t.Cleanup(func() { dumpLogsOnce(t) })
}

func gatewayClient(t *testing.T, user string) kubernetes.Interface {
	t.Helper()
	cfg, err := testEnv.GatewayConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// sleepPod is a pod that runs until deleted.
func sleepPod(name string) *corev1.Pod {
	return env.ShellPod(env.Namespace, name, `while true; do sleep 1; done`)
}

// podIPScript prints the pod's IPv4 address on eth0.
const podIPScript = `ip -4 addr show eth0 | sed -n 's/.*inet \([0-9.]*\).*/\1/p'`

// execWhere runs a command printing the pod's IP and writing marker to
// /tmp/marker, with `kubectl exec` through the gateway: every member's pods
// have addresses of their own /24, so the IP names the member that ran it,
// and the file is a second witness.
func execWhere(ctx context.Context, pod, marker string) (string, error) {
	stdout, _, err := testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserExecOnly), nil,
		"exec", pod, "--", "sh", "-c", podIPScript+"; echo "+marker+" > /tmp/marker")
	return strings.TrimSpace(stdout), err
}

// assertExecReaches checks that an exec into pod through the gateway runs
// in member: it reports the IP member's pod has, and the file it writes is
// in member's container and in no other member's.
func assertExecReaches(t *testing.T, pod, member string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	marker := fmt.Sprintf("%s-%d", pod, time.Now().UnixNano())
	ip, err := execWhere(ctx, pod, marker)
	if err != nil {
		t.Fatal(err)
	}
	mp, err := testEnv.MemberPod(ctx, member, env.Namespace, pod)
	if err != nil {
		t.Fatal(err)
	}
	if ip == "" || ip != mp.Status.PodIP {
		t.Errorf("exec into %s ran in a pod with IP %q, want %s's pod, IP %q", pod, ip, member, mp.Status.PodIP)
	}
	for _, m := range testEnv.Members() {
		out, err := testEnv.MemberExec(ctx, m, env.Namespace, pod, "main", "cat", "/tmp/marker")
		got := err == nil && strings.TrimSpace(out) == marker
		switch {
		case m == member && !got:
			t.Errorf("the exec's marker is not in %s's container (read %q, %v)", m, out, err)
		case m != member && got:
			t.Errorf("the exec's marker is in %s's container, want it only in %s", m, member)
		}
	}
}

// podBinding returns the ResourceBinding whose spec.resource is the pod.
func podBinding(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	dyn, err := dynamic.NewForConfig(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(karmada.ResourceBindingGVR).Namespace(env.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		rb := &list.Items[i]
		kind, _, _ := unstructured.NestedString(rb.Object, "spec", "resource", "kind")
		n, _, _ := unstructured.NestedString(rb.Object, "spec", "resource", "name")
		if kind == "Pod" && n == name {
			return rb, nil
		}
	}
	return nil, apierrors.NewNotFound(karmada.ResourceBindingGVR.GroupResource(), "binding of pod "+name)
}

// waitLabel waits until the template of pod carries cluster.karmada.io/name=want.
func waitLabel(ctx context.Context, pod, want string, timeout time.Duration) error {
	client, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		return err
	}
	last := "not read"
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(env.Namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("labels %v", p.Labels)
		return p.Labels[karmada.ClusterNameLabel] == want, nil
	})
	if err != nil {
		return fmt.Errorf("wait for pod %s to be labeled %s=%s (%s): %w", pod, karmada.ClusterNameLabel, want, last, err)
	}
	return nil
}

// exitCode is the exit status of a command run by exec.Cmd (-1 if it did
// not exit on its own).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a poller.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// kubectlProc is a kubectl that keeps running (attach, port-forward,
// logs -f) while the test talks to it.
type kubectlProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	err    error
}

// startKubectl starts bin/kubectl with kubeconfig, extra environment and
// args. It is killed when t ends if it is still running.
func startKubectl(t *testing.T, kubeconfig string, extraEnv []string, args ...string) *kubectlProc {
	t.Helper()
	return startEnvKubectl(t, testEnv, kubeconfig, extraEnv, args...)
}

// startEnvKubectl is startKubectl with e's kubectl, for tests with an
// environment of their own (ownEnvironmentTests), which may run where no
// shared testEnv was started.
func startEnvKubectl(t *testing.T, e *env.Env, kubeconfig string, extraEnv []string, args ...string) *kubectlProc {
	t.Helper()
	p := &kubectlProc{done: make(chan struct{})}
	p.cmd = exec.Command(e.Kubectl(), append(kubectlGlobalArgs(e, kubeconfig), args...)...)
	p.cmd.Env = append(os.Environ(), extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

func kubectlGlobalArgs(e *env.Env, kubeconfig string) []string {
	// The same cache dir as env.RunKubectl: discovery is cached once.
	return []string{"--kubeconfig=" + kubeconfig, "--cache-dir=" + filepath.Join(e.WorkDir(), "kubectl-cache")}
}

// kill stops the kubectl this test started and waits for it.
func (p *kubectlProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// wait waits for kubectl to exit on its own.
func (p *kubectlProc) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("kubectl %s still running after %s\nstdout: %s\nstderr: %s",
			strings.Join(p.cmd.Args[3:], " "), timeout, p.stdout.String(), p.stderr.String())
	}
}

// waitOutput waits until kubectl's stdout contains want.
func (p *kubectlProc) waitOutput(ctx context.Context, want string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if strings.Contains(p.stdout.String(), want) {
			return true, nil
		}
		select {
		case <-p.done:
			return false, fmt.Errorf("kubectl exited (%v)", p.err)
		default:
			return false, nil
		}
	})
	if err != nil {
		return fmt.Errorf("wait for %q from kubectl %s: %w\nstdout: %s\nstderr: %s",
			want, strings.Join(p.cmd.Args[3:], " "), err, p.stdout.String(), p.stderr.String())
	}
	return nil
}

// startLongExec runs a long exec in pod (container main) through the
// gateway as UserExecOnly over transport (spdy or websocket) and returns
// once it printed, with the channel its end arrives on: the stream a fault
// test then cuts (TestNodeFaults, TestPullMember).
func startLongExec(t *testing.T, ctx context.Context, pod, transport string) <-chan error {
	t.Helper()
	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	u := execURL(t, pod, &corev1.PodExecOptions{
		Container: "main", Command: []string{"sh", "-c", "echo started; exec sleep 600"}, Stdout: true, Stderr: true,
	})
	var exe remotecommand.Executor
	if transport == "websocket" {
		exe, err = remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	} else {
		exe, err = remotecommand.NewSPDYExecutor(cfg, "POST", u)
	}
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out}) }()
	if err := waitString(ctx, &out, "started\n", 30*time.Second); err != nil {
		t.Fatalf("%s exec did not start: %v", transport, err)
	}
	return done
}

// followTicks follows the log of pod, which runs tickerScript, through the
// gateway as UserExecOnly and returns once three tick-N lines came, with the
// channel the follow's end arrives on (nil for a clean end of the body).
// The rest of the body is read and dropped until it ends.
func followTicks(t *testing.T, ctx context.Context, pod string) <-chan error {
	t.Helper()
	rc, err := gatewayClient(t, env.UserExecOnly).CoreV1().Pods(env.Namespace).GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	const want = 3
	lines := make(chan string, want)
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(rc)
		for n := 0; sc.Scan(); n++ {
			if n < want {
				lines <- sc.Text()
			}
		}
		// Scanner hides io.EOF: nil here is a clean end of the body.
		done <- sc.Err()
	}()
	for range want {
		select {
		case l := <-lines:
			if !strings.HasPrefix(l, "tick-") {
				t.Fatalf("followed log line %q, want tick-N", l)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no followed log line within 30s")
		}
	}
	return done
}

// execExecutor is client-go's executor for the exec at u over kind, "spdy"
// (a POST, as GitLab Runner and kubectl's fallback send it) or "websocket"
// (a GET, as kubectl 1.30+ sends it), with cfg's credentials.
func execExecutor(t *testing.T, kind string, cfg *rest.Config, u *url.URL) remotecommand.Executor {
	t.Helper()
	var exe remotecommand.Executor
	var err error
	switch kind {
	case "spdy":
		exe, err = remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	case "websocket":
		exe, err = remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	default:
		t.Fatalf("no executor for %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	return exe
}
