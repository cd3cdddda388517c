package e2e

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// TestExecutorSemaphore replays Semaphore's kubernetes executor reading
// job output: pods/log follow of the init container (which has finished:
// the follow returns its whole log and ends) and of the main container
// while it runs, until it exits.
func TestExecutorSemaphore(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name, member = "exec-semaphore", "member2"
	pod := env.ShellPod(env.Namespace, name,
		`echo main-1; echo main-2; while [ ! -e go ]; do sleep 0.05; done; echo main-3; pwd`)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.InitContainers = []corev1.Container{env.LocalContainer("init", images.Busybox, "sh", "-c", `echo init-1; echo init-2 >&2; pwd`)}
	placePod(t, pod, []string{member}, member)
	gw := gatewayClient(t, env.UserExecOnly)
	logs := countRoute(t, metrics.RouteLog, "200")

	follow := func(ctx context.Context, container string) (io.ReadCloser, error) {
		return gw.CoreV1().Pods(env.Namespace).GetLogs(name, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(ctx)
	}

	t.Run("init container", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		rc, err := follow(ctx, "init")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		got, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("follow the finished init container: %v (read %q)", err, got)
		}
		// stdout and stderr are two pipes: their lines interleave in any
		// order, the lines themselves are exact.
		lines := strings.SplitAfter(string(got), "\n")
		slices.Sort(lines)
		want := []string{"", workingDir(pod, "init") + "\n", "init-1\n", "init-2\n"}
		slices.Sort(want)
		if !slices.Equal(lines, want) {
			t.Errorf("followed init container log %q, want exactly the lines %q in some order", got, want[1:])
		}
	})

	t.Run("main container until it exits", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rc, err := follow(ctx, "main")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		var got syncBuffer
		copied := make(chan error, 1)
		go func() {
			_, err := io.Copy(&got, rc)
			copied <- err
		}()
		if err := waitString(ctx, &got, "main-2\n", 30*time.Second); err != nil {
			t.Fatalf("follow main: %v (read %q)", err, got.String())
		}
		// Let the job finish only now, so the follow provably spans it.
		cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
		if err != nil {
			t.Fatal(err)
		}
		exe, err := remotecommand.NewSPDYExecutor(cfg, "POST", execURL(t, name, &corev1.PodExecOptions{
			Container: "main", Command: []string{"touch", "go"}, Stdout: true, Stderr: true,
		}))
		if err != nil {
			t.Fatal(err)
		}
		// The job ends 50ms after go exists, and the end of a container's
		// main process kills what still runs in it: on loaded cores touch
		// can be killed after it made the file, before it exited (137).
		// Whether the job ended is what the follow below checks.
		var exit utilexec.ExitError
		if err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil && !(errors.As(err, &exit) && exit.ExitStatus() == 137) {
			t.Fatalf("let the job finish: %v", err)
		}
		select {
		case err := <-copied:
			if err != nil {
				t.Fatalf("the follow ended with %v (read %q)", err, got.String())
			}
		case <-ctx.Done():
			t.Fatalf("the follow did not end when the container exited (read %q)", got.String())
		}
		if want := "main-1\nmain-2\nmain-3\n" + workingDir(pod, "main") + "\n"; got.String() != want {
			t.Errorf("followed main container log %q, want exactly %q", got.String(), want)
		}
		logs.check(t, 2)
	})
}
