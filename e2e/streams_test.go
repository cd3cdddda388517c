package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

// Transports kubectl can be forced to: WebSocket is its default for exec,
// attach and port-forward; the environment variables switch it to SPDY.
var kubectlTransports = []struct {
	name string
	env  []string
}{
	{"websocket", nil},
	{"spdy", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}},
}

// runKubectlEnv is env.RunKubectl with extra environment variables.
func runKubectlEnv(ctx context.Context, kubeconfig string, extraEnv []string, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, testEnv.Kubectl(), append(kubectlGlobalArgs(testEnv, kubeconfig), args...)...)
	cmd.Env = append(os.Environ(), extraEnv...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errOut
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), errOut.String(), err
}

// TestStreams runs exec (plain, -i, -i -t), kubectl cp and the client-go
// executors through the gateway into one pod on member1.
func TestStreams(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name = "streams"
	placePod(t, sleepPod(name), []string{"member1"}, "member1")
	kubeconfig := testEnv.GatewayKubeconfig(env.UserExecOnly)

	for _, tr := range kubectlTransports {
		t.Run("exec/"+tr.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()

			stdout, stderr, err := runKubectlEnv(ctx, kubeconfig, tr.env, nil, "exec", name, "--", "sh", "-c", "echo out-$((6*7)); echo err-$((6*7)) >&2")
			if err != nil {
				t.Fatal(err)
			}
			if stdout != "out-42\n" || stderr != "err-42\n" {
				t.Errorf("kubectl exec printed stdout %q, stderr %q; want %q, %q", stdout, stderr, "out-42\n", "err-42\n")
			}

			stdout, stderr, err = runKubectlEnv(ctx, kubeconfig, tr.env, nil, "exec", name, "--", "sh", "-c", "echo before-exit; exit 3")
			if code := exitCode(errors.Unwrap(err)); code != 3 {
				t.Errorf("kubectl exec of `exit 3` exited with %d (%v), want 3; stdout %q", code, err, stdout)
			}
			if stdout != "before-exit\n" {
				t.Errorf("kubectl exec of `exit 3` printed %q, want %q", stdout, "before-exit\n")
			}
			if !strings.Contains(stderr, "command terminated with exit code 3") {
				t.Errorf("kubectl exec of `exit 3` printed on stderr %q, want it to report exit code 3", stderr)
			}

			in := strings.Repeat("stdin line through the gateway\n", 2000)
			stdout, _, err = runKubectlEnv(ctx, kubeconfig, tr.env, strings.NewReader(in), "exec", "-i", name, "--", "sh", "-c", "cat; echo stdin-closed")
			if err != nil {
				t.Fatal(err)
			}
			if want := in + "stdin-closed\n"; stdout != want {
				t.Errorf("kubectl exec -i cat printed %d bytes (ends %q), want the %d bytes sent followed by %q",
					len(stdout), tail(stdout, 60), len(in), "stdin-closed\n")
			}
		})

		t.Run("exec-tty/"+tr.name, func(t *testing.T) {
			t.Parallel()
			kubectlTTY(t, kubeconfig, tr.env, name)
		})
	}

	t.Run("tty/client-go", func(t *testing.T) {
		t.Parallel()
		clientGoTTY(t, name)
	})

	t.Run("cp", func(t *testing.T) {
		t.Parallel()
		kubectlCp(t, kubeconfig, name)
	})

	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	executors := []struct {
		name string
		new  func(u *url.URL) (remotecommand.Executor, error)
	}{
		{"spdy", func(u *url.URL) (remotecommand.Executor, error) { return remotecommand.NewSPDYExecutor(cfg, "POST", u) }},
		{"websocket", func(u *url.URL) (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		}},
		{"fallback", func(u *url.URL) (remotecommand.Executor, error) {
			ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
			if err != nil {
				return nil, err
			}
			spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
			if err != nil {
				return nil, err
			}
			// kubectl's own fallback condition.
			return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
				return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
			})
		}},
	}
	for i, ex := range executors {
		t.Run("executor/"+ex.name, func(t *testing.T) {
			t.Parallel()
			u := execURL(t, name, &corev1.PodExecOptions{
				Container: "main",
				// The pod hashes what it read from stdin on stderr while
				// echoing it to stdout: a check on both ends.
				Command: []string{"sh", "-c", "{ tee /dev/fd/3 | sha256sum >&2; } 3>&1"},
				Stdin:   true, Stdout: true, Stderr: true,
			})
			exe, err := ex.new(u)
			if err != nil {
				t.Fatal(err)
			}
			catThrough(t, exe, 64<<20, uint64(i+1))
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// execURL is the exec URL of pod through the gateway, built as client-go
// programs build it.
func execURL(t *testing.T, pod string, opts *corev1.PodExecOptions) *url.URL {
	t.Helper()
	return podExecURL(gatewayClient(t, env.UserExecOnly), pod, opts)
}

// podExecURL is the exec URL of pod on client's server.
func podExecURL(client kubernetes.Interface, pod string, opts *corev1.PodExecOptions) *url.URL {
	return client.CoreV1().RESTClient().Post().Resource("pods").Namespace(env.Namespace).Name(pod).
		SubResource("exec").VersionedParams(opts, scheme.ParameterCodec).URL()
}

// catThrough streams size pseudo-random bytes (from seed) through exe's
// stdin and checks that stdout returns exactly them and that the pod's
// sha256sum of its stdin, printed on stderr, matches what was sent.
func catThrough(t *testing.T, exe remotecommand.Executor, size int64, seed uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sent := sha256.New()
	stdin := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{byte(seed)}), size), sent)
	got := sha256.New()
	var n countWriter
	var stderr bytes.Buffer
	start := time.Now()
	err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{
		Stdin:  stdin,
		Stdout: io.MultiWriter(got, &n),
		Stderr: &stderr,
	})
	if err != nil {
		t.Fatalf("stream %d MiB through cat: %v (stdout %d bytes, stderr %q)", size>>20, err, n, stderr.String())
	}
	t.Logf("%d MiB through exec cat and back in %s", size>>20, time.Since(start).Round(time.Millisecond))
	sentSum, gotSum := hex.EncodeToString(sent.Sum(nil)), hex.EncodeToString(got.Sum(nil))
	if int64(n) != size || gotSum != sentSum {
		t.Errorf("stdout returned %d bytes with sha256 %s, want %d bytes with sha256 %s", n, gotSum, size, sentSum)
	}
	if pod := strings.Fields(stderr.String()); len(pod) == 0 || pod[0] != sentSum {
		t.Errorf("the pod hashed its stdin as %q, want sha256 %s", stderr.String(), sentSum)
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// ttyCommand waits (up to 10s) for the terminal to have size "rows cols":
// the resize message races the command's start, and the runtime may start
// it with a default size. Then it prints the size, echoes one typed line
// and exits 4.
func ttyCommand(rows, cols int) []string {
	const script = `i=0; while [ "$(stty size)" != "$1" ] && [ $i -lt 200 ]; do i=$((i+1)); sleep 0.05; done; stty size; read line; echo "got:$line"; exit 4`
	return []string{"sh", "-c", script, "sh", fmt.Sprintf("%d %d", rows, cols)}
}

// kubectlTTY runs `kubectl exec -i -t` on a pseudo-terminal of the given
// size: kubectl sends the size, the pod's terminal reports it, typed input
// reaches the pod and the exit code comes back.
func kubectlTTY(t *testing.T, kubeconfig string, extraEnv []string, pod string) {
	args := append(kubectlGlobalArgs(testEnv, kubeconfig), "exec", "-i", "-t", pod, "--")
	cmd := exec.Command(testEnv.Kubectl(), append(args, ttyCommand(33, 111)...)...)
	cmd.Env = append(os.Environ(), extraEnv...)
	master, out, copied := startOnTTY(t, cmd, 33, 111)
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	// Type the line only once the size is printed, as a person would.
	if err := waitString(t.Context(), out, "33 111", 30*time.Second); err != nil {
		t.Fatalf("kubectl exec -it on a 33x111 terminal: %v; output %q", err, out.String())
	}
	if _, err := master.Write([]byte("typed-on-a-tty\r")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl exec -it did not exit; output %q", out.String())
	}
	<-copied
	if code := exitCode(waitErr); code != 4 {
		t.Errorf("kubectl exec -it exited with %d (%v), want 4; output %q", code, waitErr, out.String())
	}
	if !strings.Contains(out.String(), "got:typed-on-a-tty") {
		t.Errorf("kubectl exec -it output %q lacks the typed line echoed by the pod", out.String())
	}
}

// startOnTTY starts cmd on a pseudo-terminal of rows x cols, its output
// copied to out until it exits (copied closes then); master is closed when
// t ends.
func startOnTTY(t *testing.T, cmd *exec.Cmd, rows, cols uint16) (master *os.File, out *syncBuffer, copied <-chan struct{}) {
	t.Helper()
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	out = &syncBuffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(out, master) // ends with EIO once the command exits
	}()
	return master, out, done
}

func waitString(ctx context.Context, b *syncBuffer, want string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(b.String(), want) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %q: %w", want, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// sizeQueue hands the executor one terminal size, then ends.
type sizeQueue struct {
	once sync.Once
	size remotecommand.TerminalSize
	ch   chan *remotecommand.TerminalSize
}

func newSizeQueue(width, height uint16) *sizeQueue {
	q := &sizeQueue{ch: make(chan *remotecommand.TerminalSize, 1)}
	q.ch <- &remotecommand.TerminalSize{Width: width, Height: height}
	return q
}

// Next returns the size once, then blocks until the stream is over (nil
// tells the executor there are no more sizes).
func (q *sizeQueue) Next() *remotecommand.TerminalSize { return <-q.ch }

func (q *sizeQueue) stop() { q.once.Do(func() { close(q.ch) }) }

// clientGoTTY runs a TTY exec with a TerminalSizeQueue through the gateway
// with each client-go executor: the pod's terminal reports the size sent.
func clientGoTTY(t *testing.T, pod string) {
	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	u := execURL(t, pod, &corev1.PodExecOptions{
		Container: "main", Command: ttyCommand(31, 97),
		Stdin: true, Stdout: true, TTY: true,
	})
	for _, tc := range []struct {
		name string
		new  func() (remotecommand.Executor, error)
	}{
		{"spdy", func() (remotecommand.Executor, error) { return remotecommand.NewSPDYExecutor(cfg, "POST", u) }},
		{"websocket", func() (remotecommand.Executor, error) {
			return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe, err := tc.new()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			inR, inW := io.Pipe()
			defer inW.Close()
			var out syncBuffer
			q := newSizeQueue(97, 31)
			defer q.stop()
			done := make(chan error, 1)
			go func() {
				done <- exe.StreamWithContext(ctx, remotecommand.StreamOptions{
					Stdin: inR, Stdout: &out, Tty: true, TerminalSizeQueue: q,
				})
			}()
			if err := waitString(ctx, &out, "31 97", 30*time.Second); err != nil {
				t.Fatalf("TTY exec with size 97x31: %v; output %q", err, out.String())
			}
			if _, err := inW.Write([]byte("typed-by-client-go\r")); err != nil {
				t.Fatal(err)
			}
			var streamErr error
			select {
			case streamErr = <-done:
			case <-ctx.Done():
				t.Fatalf("TTY exec did not end; output %q", out.String())
			}
			var ce interface{ ExitStatus() int }
			if !errors.As(streamErr, &ce) || ce.ExitStatus() != 4 {
				t.Errorf("TTY exec ended with %v, want exit code 4", streamErr)
			}
			if !strings.Contains(out.String(), "got:typed-by-client-go") {
				t.Errorf("TTY exec output %q lacks the typed line echoed by the pod", out.String())
			}
		})
	}
}

// kubectlCp copies a file into the pod's working directory and back.
func kubectlCp(t *testing.T, kubeconfig, pod string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	content := make([]byte, 3<<20+17)
	_, _ = rand.NewChaCha8([32]byte{42}).Read(content)
	local := filepath.Join(dir, "upload.bin")
	if err := os.WriteFile(local, content, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, err := testEnv.RunKubectl(ctx, kubeconfig, nil, "cp", local, pod+":copied.bin", "-c", "main"); err != nil {
		t.Fatalf("kubectl cp into the pod: %v (stdout %q)", err, out)
	}
	inPod, err := testEnv.MemberExec(ctx, "member1", env.Namespace, pod, "main", "sha256sum", "copied.bin")
	if err != nil {
		t.Fatalf("the file kubectl cp sent is not in the pod's working dir: %v", err)
	}
	if got, want := strings.Fields(inPod), fmt.Sprintf("%x", sha256.Sum256(content)); len(got) == 0 || got[0] != want {
		t.Errorf("the pod's copy has sha256sum %q, want %s", inPod, want)
	}

	back := filepath.Join(dir, "download.bin")
	if out, _, err := testEnv.RunKubectl(ctx, kubeconfig, nil, "cp", pod+":copied.bin", back, "-c", "main"); err != nil {
		t.Fatalf("kubectl cp from the pod: %v (stdout %q)", err, out)
	}
	got, err := os.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Errorf("the file copied back has %d bytes (sha256 %x), want %d (sha256 %x)", len(got), sha256.Sum256(got), len(content), sha256.Sum256(content))
	}
}

// TestAttach attaches kubectl, over WebSocket and SPDY, to a container
// started with stdin: a line sent is echoed back by the container.
func TestAttach(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name = "attach"
	pod := env.ShellPod(env.Namespace, name, `echo attach-ready; while read -r l; do echo "echo:$l"; done`)
	pod.Spec.Containers[0].Stdin = true
	placePod(t, pod, []string{"member1"}, "member1")
	kubeconfig := testEnv.GatewayKubeconfig(env.UserExecOnly)

	for _, tr := range kubectlTransports {
		t.Run(tr.name, func(t *testing.T) {
			p := startKubectl(t, kubeconfig, tr.env, "attach", "-i", name, "-c", "main")
			line := "ping-" + tr.name
			if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
				t.Fatal(err)
			}
			if err := p.waitOutput(t.Context(), "echo:"+line+"\n", 30*time.Second); err != nil {
				t.Fatal(err)
			}
			// Attach lasts as long as the container; a user detaches by
			// stopping kubectl.
			p.kill()
		})
	}
}

// TestLogs follows a container's log until the container exits on its
// own, and reads its tail afterwards.
func TestLogs(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name = "logs"
	// Half the lines, then (once the test lets it go) the rest and exit,
	// so the follow provably starts while the container runs. The exec
	// that lets it go writes its own PID, and the container outlives that
	// process: a container that exits kills what still runs in it, and an
	// exec killed on its way out reports 137 (2026-12-05, make compat).
	pod := env.ShellPod(env.Namespace, name,
		`for i in 1 2 3 4 5; do echo "line-$i"; done; `+
			`while [ ! -s go ]; do sleep 0.05; done; while kill -0 "$(cat go)" 2>/dev/null; do sleep 0.05; done; `+
			`for i in 6 7 8 9 10; do echo "line-$i"; done`)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	placePod(t, pod, []string{"member1"}, "member1")
	kubeconfig := testEnv.GatewayKubeconfig(env.UserExecOnly)
	var want []string
	for i := 1; i <= 10; i++ {
		want = append(want, fmt.Sprintf("line-%d", i))
	}

	p := startKubectl(t, kubeconfig, nil, "logs", "-f", name)
	if err := p.waitOutput(t.Context(), "line-5\n", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, _, err := testEnv.RunKubectl(ctx, kubeconfig, nil, "exec", name, "--", "sh", "-c", "echo $$ >go"); err != nil {
		t.Fatalf("let the container finish: %v", err)
	}
	if err := p.wait(30 * time.Second); err != nil {
		t.Fatalf("kubectl logs -f after the container exited: %v (stderr %q)", err, p.stderr.String())
	}
	if got := p.stdout.String(); got != strings.Join(want, "\n")+"\n" {
		t.Errorf("kubectl logs -f printed %q, want exactly %q", got, strings.Join(want, "\n")+"\n")
	}

	got, _, err := testEnv.RunKubectl(ctx, kubeconfig, nil, "logs", "--tail=3", name)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(want[7:], "\n") + "\n"; got != w {
		t.Errorf("kubectl logs --tail=3 printed %q, want %q", got, w)
	}
}

// tcpecho and httpecho are the e2e module's test servers in the Echo image.
var (
	tcpecho  = images.EchoBinDir + "/tcpecho"
	httpecho = images.EchoBinDir + "/httpecho"
)
