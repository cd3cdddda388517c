package e2e

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// chanSizeQueue hands the executor the sizes the test pushes; closing it
// ends the queue.
type chanSizeQueue chan *remotecommand.TerminalSize

func (q chanSizeQueue) Next() *remotecommand.TerminalSize { return <-q }

// waitSize is typed into an interactive shell: it waits (up to 10 s) for
// the terminal to report "rows cols", then prints "size=rows cols" (not in
// the echo of what was typed; the prompt may come before or after it). The resize races the
// command, as it does for a person typing.
func waitSize(rows, cols int) string {
	return fmt.Sprintf(`i=0; while [ "$(stty size)" != "%d %d" ] && [ $i -lt 200 ]; do i=$((i+1)); sleep 0.05; done; echo "size=$(stty size)"`+"\r", rows, cols)
}

// TestExecutorSeedTTY replays the interactive pattern of a Go executor
// built on client-go (the project seed's): an exec of an interactive shell
// on a 120x40 TTY, a resize to 100x30, and Ctrl-C interrupting a running
// sleep while the shell survives, over both client-go transports.
func TestExecutorSeedTTY(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name, member = "exec-seed", "member1"
	pod := sleepPod(name)
	placePod(t, pod, []string{member}, member)
	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	dir := workingDir(pod, "main")
	u := execURL(t, name, &corev1.PodExecOptions{Container: "main", Command: []string{"sh"}, Stdin: true, Stdout: true, TTY: true})

	for i, tc := range []struct {
		name string
		new  func() (remotecommand.Executor, error)
	}{
		{"spdy", func() (remotecommand.Executor, error) { return remotecommand.NewSPDYExecutor(cfg, "POST", u) }},
		{"websocket", func() (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			exe, err := tc.new()
			if err != nil {
				t.Fatal(err)
			}
			inR, inW := io.Pipe()
			defer inW.Close()
			var out syncBuffer
			sizes := make(chanSizeQueue, 1)
			defer close(sizes)
			done := make(chan error, 1)
			go func() {
				done <- exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: &out, Tty: true, TerminalSizeQueue: sizes})
			}()
			typeLine := func(line, want string) {
				t.Helper()
				if _, err := io.WriteString(inW, line); err != nil {
					t.Fatal(err)
				}
				if err := waitString(ctx, &out, want, 30*time.Second); err != nil {
					t.Fatalf("after typing %q: %v; terminal output %q", line, err, out.String())
				}
			}

			sizes <- &remotecommand.TerminalSize{Width: 120, Height: 40}
			typeLine(waitSize(40, 120), "size=40 120\r\n")
			sizes <- &remotecommand.TerminalSize{Width: 100, Height: 30}
			typeLine(waitSize(30, 100), "size=30 100\r\n")

			// A sleep no other test runs, found by its argument. By its path:
			// busybox's shell runs the sleep applet in its own process, a
			// path makes it a process of its own that Ctrl-C can interrupt.
			sleep := fmt.Sprintf("/bin/sleep 4242.%d", time.Now().UnixNano()%100000*10+int64(i))
			if _, err := io.WriteString(inW, sleep+"\r"); err != nil {
				t.Fatal(err)
			}
			if err := waitProcess(ctx, t, name, sleep, true); err != nil {
				t.Fatalf("%v; terminal output %q", err, out.String())
			}
			if _, err := inW.Write([]byte{0x03}); err != nil {
				t.Fatal(err)
			}
			if err := waitProcess(ctx, t, name, sleep, false); err != nil {
				t.Fatalf("Ctrl-C on the terminal did not stop the sleep: %v; terminal output %q", err, out.String())
			}
			typeLine("echo after-interrupt-$?\r", "after-interrupt-130\r\n")
			typeLine("pwd; exit 0\r", dir+"\r\n")

			select {
			case err := <-done:
				if err != nil {
					t.Errorf("the shell exited 0 but the stream ended with %v", err)
				}
			case <-ctx.Done():
				t.Fatalf("the TTY exec did not end after exit; output %q", out.String())
			}
		})
	}
}

// waitProcess polls, with execs through the gateway, until a process whose
// command line is cmdline runs in the pod's node (running) or no longer
// does.
func waitProcess(ctx context.Context, t *testing.T, pod, cmdline string, running bool) error {
	t.Helper()
	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	// [/]bin/sleep does not match the sh -c command line or grep's own.
	pattern := "[" + cmdline[:1] + "]" + cmdline[1:]
	u := execURL(t, pod, &corev1.PodExecOptions{
		Container: "main", Command: []string{"sh", "-c", `ps -o args | grep -x "$1" >/dev/null && echo running || echo gone`, "sh", pattern}, Stdout: true, Stderr: true,
	})
	want := map[bool]string{true: "running\n", false: "gone\n"}[running]
	var last string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		exe, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
		if err != nil {
			return false, err
		}
		var out, errOut syncBuffer
		if err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
			last = fmt.Sprintf("%v (stderr %q)", err, errOut.String())
			return false, nil
		}
		last = out.String()
		return last == want, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %q to be %s (last check: %q): %w", cmdline, want, last, err)
	}
	return nil
}
