package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// Argo Workflows' names for a step pod (workflow/common).
const (
	argoWorkflowLabel = "workflows.argoproj.io/workflow"
	argoKillCmdPrefix = "workflows.argoproj.io/kill-cmd-"
)

// TestExecutorArgoWorkflows replays Argo Workflows (v4.1.2) on a workflow
// step pod: a wait container and the step's main container.
//
//   - The server's log stream (util/logs WorkflowLogs): a watch, then a
//     list, of the workflow's pods by the workflow label; for each pod not
//     Pending a pods/log follow with timestamps=true, each line read as
//     "<RFC 3339 timestamp> <content>".
//   - The controller's stop (workflow/controller/pod signalContainers and
//     workflow/signal): for each container the pod's status says is
//     running, by its name, a SPDY exec (POST, container, stdout=true,
//     stderr=true, tty=false, no stdin) of the kill command: `/bin/sh -c
//     "kill -15 1"`, `argoexec kill 15 1` in Argo's own containers, or the
//     pod's kill-cmd-<container> annotation (used here for the wait
//     container: the test image has no argoexec), read to its end within
//     two minutes.
//
// The containers' names come from the template's status: Karmada's own
// Pod status aggregation drops them (and a multi-container exec without a
// container is refused by the member), so Argo's stop needs the shipped
// Pod status interpreter, which this test applies; not parallel for that.
// Each container traps SIGTERM, prints that it got it, and exits; the log
// follow ends with the main container, every line there, in order.
func TestExecutorArgoWorkflows(t *testing.T) {
	dumpLogsOnFailure(t)
	withShippedPodStatusInterpreter(t)
	const name, workflow, member = "exec-argo", "wf-argo", "member1"
	term := func(who string) string {
		return fmt.Sprintf(`trap 'echo %s-got-TERM; exit 143' TERM; echo %s-1; echo %s-2; while true; do sleep 0.1; done`, who, who, who)
	}
	pod := env.ShellPod(env.Namespace, name, term("main"))
	pod.Labels = map[string]string{argoWorkflowLabel: workflow}
	pod.Annotations = map[string]string{argoKillCmdPrefix + "wait": `["sh", "-c", "kill -%d 1"]`}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Containers = append([]corev1.Container{env.LocalContainer("wait", images.Busybox, "sh", "-c", term("wait"))}, pod.Spec.Containers...)
	placePod(t, pod, []string{member}, member)

	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	gw := gatewayClientFor(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	logs := countRoute(t, metrics.RouteLog, "200")
	execs := countRoute(t, metrics.RouteExec, "101")

	lines := argoWorkflowLogs(ctx, t, gw, workflow, "main")
	if err := waitString(ctx, &lines.syncBuffer, "main-2\n", 30*time.Second); err != nil {
		t.Fatalf("the workflow's log stream: %v (read %q)", err, lines.String())
	}

	// The controller stops the workflow: the template must name its running
	// containers, as Argo reads them.
	var running []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := gw.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		running = running[:0]
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running != nil {
				running = append(running, cs.Name)
			}
		}
		slices.Sort(running)
		return slices.Equal(running, []string{"main", "wait"}), nil
	})
	if err != nil {
		t.Fatalf("the template never named its running containers main and wait (last %q): %v", running, err)
	}
	p, err := gw.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, container := range running {
		err := argoSignalContainer(ctx, cfg, gw, p, container, syscall.SIGTERM)
		var killed utilexec.ExitError
		switch {
		case errors.As(err, &killed) && killed.ExitStatus() == 137:
			// The container's PID 1 exited on the signal before the
			// exec's own shell did, which went with its container
			// (SIGKILL): the kubelet's status, relayed. Argo's controller
			// logs a failed signal and goes on; what counts is below.
			t.Logf("signal %s: the exec went with its container: %v", container, err)
		case err != nil:
			t.Errorf("signal %s as Argo's controller does: %v", container, err)
		}
	}
	select {
	case err := <-lines.done:
		if err != nil {
			t.Errorf("the log follow ended with %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("the log follow did not end when main exited (read %q)", lines.String())
	}
	if want := "main-1\nmain-2\nmain-got-TERM\n"; lines.String() != want {
		t.Errorf("the workflow's log for main: %q, want exactly %q", lines.String(), want)
	}
	for _, c := range []string{"main", "wait"} {
		out, err := gw.CoreV1().Pods(env.Namespace).GetLogs(name, &corev1.PodLogOptions{Container: c}).DoRaw(ctx)
		if err != nil || !strings.HasSuffix(string(out), c+"-got-TERM\n") {
			t.Errorf("%s's log %q, %v: want it to end with the TERM Argo sent", c, out, err)
		}
	}
	logs.check(t, 3)
	execs.check(t, 2)
}

// argoLines is the content of the log lines Argo's server parsed, in order.
type argoLines struct {
	syncBuffer
	done chan error
}

// argoWorkflowLogs starts Argo's server-side log stream of container in
// the pods of workflow: watch and list by label, then a follow with
// timestamps of each pod that is not Pending.
func argoWorkflowLogs(ctx context.Context, t *testing.T, gw kubernetes.Interface, workflow, container string) *argoLines {
	t.Helper()
	pods := gw.CoreV1().Pods(env.Namespace)
	opts := metav1.ListOptions{LabelSelector: argoWorkflowLabel + "=" + workflow}
	w, err := pods.Watch(ctx, opts)
	if err != nil {
		t.Fatalf("watch the workflow's pods: %v", err)
	}
	t.Cleanup(w.Stop)
	list, err := pods.List(ctx, opts)
	if err != nil {
		t.Fatalf("list the workflow's pods: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Status.Phase == corev1.PodPending {
		t.Fatalf("the workflow's pods: %d, want 1 not Pending", len(list.Items))
	}
	out := &argoLines{done: make(chan error, 1)}
	stream, err := pods.GetLogs(list.Items[0].Name, &corev1.PodLogOptions{Container: container, Follow: true, Timestamps: true}).Stream(ctx)
	if err != nil {
		t.Fatalf("follow %s: %v", container, err)
	}
	go func() {
		defer stream.Close()
		sc := bufio.NewScanner(stream)
		for sc.Scan() {
			stamp, content, _ := strings.Cut(sc.Text(), " ")
			if _, err := time.Parse(time.RFC3339, stamp); err != nil {
				out.done <- fmt.Errorf("line %q has no RFC 3339 timestamp: %w", sc.Text(), err)
				return
			}
			_, _ = out.Write([]byte(content + "\n"))
		}
		out.done <- sc.Err()
	}()
	return out
}

// argoSignalContainer is workflow/signal.Container: the kill command for
// container, exec'd over SPDY with stdout and stderr, read to its end.
func argoSignalContainer(ctx context.Context, cfg *rest.Config, gw kubernetes.Interface, pod *corev1.Pod, container string, sig syscall.Signal) error {
	command := []string{"/bin/sh", "-c", "kill -%d 1"}
	if v, ok := pod.Annotations[argoKillCmdPrefix+container]; ok {
		if err := json.Unmarshal([]byte(v), &command); err != nil {
			return err
		}
	}
	for i, v := range command {
		if strings.Contains(v, "%d") {
			command[i] = fmt.Sprintf(v, sig)
		}
	}
	req := gw.CoreV1().RESTClient().Post().Resource("pods").Name(pod.Name).Namespace(pod.Namespace).SubResource("exec").
		Param("container", container).Param("stdout", "true").Param("stderr", "true").Param("tty", "false")
	for _, c := range command {
		req = req.Param("command", c)
	}
	exe, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var stdout, stderr strings.Builder
	return exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
}
