package nodeagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

type executorKind string

const (
	spdyExecutor      executorKind = "spdy"
	websocketExecutor executorKind = "websocket"
	// What the apiserver passes through untranslated (Jenkins' fabric8).
	websocketV4Executor executorKind = "websocket-v4"
)

func (ta *testAgent) executor(kind executorKind, method string, u *url.URL) remotecommand.Executor {
	ta.t.Helper()
	var exec remotecommand.Executor
	var err error
	switch kind {
	case spdyExecutor:
		exec, err = remotecommand.NewSPDYExecutor(ta.config, method, u)
	case websocketExecutor:
		exec, err = remotecommand.NewWebSocketExecutor(ta.config, method, u.String())
	case websocketV4Executor:
		exec, err = remotecommand.NewWebSocketExecutorForProtocols(ta.config, method, u.String(), "v4.channel.k8s.io")
	}
	if err != nil {
		ta.t.Fatal(err)
	}
	return exec
}

func execQuery(stdin, stdout, stderr, tty bool, argv ...string) url.Values {
	q := url.Values{"command": argv}
	for name, on := range map[string]bool{"input": stdin, "output": stdout, "error": stderr, "tty": tty} {
		if on {
			q.Set(name, "1")
		}
	}
	return q
}

// The apiserver sends SPDY as POST and WebSocket as GET.
func methodFor(kind executorKind) string {
	if kind != spdyExecutor {
		return http.MethodGet
	}
	return http.MethodPost
}

func TestExec(t *testing.T) {
	ta := startAgent(t)
	ta.createPod(pod("exec", v1.RestartPolicyNever, "sleep", "600"))
	ta.waitRunning("exec")

	payload := make([]byte, 4<<20)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(payload)

	for _, kind := range []executorKind{spdyExecutor, websocketExecutor, websocketV4Executor} {
		// v4.channel.k8s.io cannot signal the end of stdin, so cat would
		// never end; the other cases cover that protocol.
		canCloseStdin := kind != websocketV4Executor
		if canCloseStdin {
			t.Run(string(kind)+"/stdin echoed to stdout", func(t *testing.T) {
				u := ta.url("/exec/ci/exec/main", execQuery(true, true, true, false, "cat"))
				var stdout, stderr bytes.Buffer
				err := ta.executor(kind, methodFor(kind), u).StreamWithContext(ta.ctx, remotecommand.StreamOptions{
					Stdin: bytes.NewReader(payload), Stdout: &stdout, Stderr: &stderr,
				})
				if err != nil {
					t.Fatalf("exec cat: %v (stderr %q)", err, stderr.String())
				}
				if got := sha256.Sum256(stdout.Bytes()); got != want {
					t.Fatalf("stdout: %d bytes, checksum mismatch (sent %d bytes)", stdout.Len(), len(payload))
				}
			})
		}

		t.Run(string(kind)+"/exit code, stderr and working dir", func(t *testing.T) {
			u := ta.url("/exec/ci/exec/exec-uid/main", execQuery(false, true, true, false,
				"sh", "-c", `pwd; echo "$HOME" >&2; exit 7`))
			var stdout, stderr bytes.Buffer
			err := ta.executor(kind, methodFor(kind), u).StreamWithContext(ta.ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
			var exitErr utilexec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 7 {
				t.Fatalf("want exit status 7 as an ExitError, got %T %v", err, err)
			}
			dir := ta.root + "/ci/exec/main"
			if strings.TrimSpace(stdout.String()) != dir || strings.TrimSpace(stderr.String()) != dir {
				t.Fatalf("pwd %q, HOME %q: want both %q", stdout.String(), stderr.String(), dir)
			}
		})

		t.Run(string(kind)+"/tty with resize", func(t *testing.T) {
			// The shell polls its terminal size: the resize arrives on its own
			// stream, in no fixed order with the command start.
			u := ta.url("/exec/ci/exec/main", execQuery(true, true, false, true, "sh", "-c",
				`while :; do s=$(stty size); [ "$s" = "40 132" ] && break; sleep 0.02; done; [ -t 0 ] && echo "tty size=$s"`))
			var stdout bytes.Buffer
			stdinR, stdinW := io.Pipe()
			defer stdinW.Close()
			sizes := &sizeQueue{sizes: []remotecommand.TerminalSize{{Width: 132, Height: 40}}}
			defer sizes.close()
			err := ta.executor(kind, methodFor(kind), u).StreamWithContext(ta.ctx, remotecommand.StreamOptions{
				Stdin: stdinR, Stdout: &stdout, Tty: true, TerminalSizeQueue: sizes,
			})
			if err != nil {
				t.Fatalf("exec tty: %v (output %q)", err, stdout.String())
			}
			if !strings.Contains(stdout.String(), "tty size=40 132\r\n") {
				t.Fatalf("output %q: want the resized terminal and CRLF line endings", stdout.String())
			}
		})
	}

	t.Run("unknown container is a 404 before upgrade", func(t *testing.T) {
		u := ta.url("/exec/ci/exec/nope", execQuery(false, true, false, false, "true"))
		err := ta.executor(spdyExecutor, http.MethodPost, u).StreamWithContext(ta.ctx, remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), `container "nope" not found`) {
			t.Fatalf("want container not found, got %v", err)
		}
	})
	t.Run("wrong uid is a 404", func(t *testing.T) {
		u := ta.url("/exec/ci/exec/other-uid/main", execQuery(false, true, false, false, "true"))
		err := ta.executor(spdyExecutor, http.MethodPost, u).StreamWithContext(ta.ctx, remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "pod does not exist") {
			t.Fatalf("want pod does not exist, got %v", err)
		}
	})
	t.Run("client without certificate is refused", func(t *testing.T) {
		cfg := *ta.config
		cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = nil, nil
		exec, err := remotecommand.NewSPDYExecutor(&cfg, http.MethodPost, ta.url("/exec/ci/exec/main", execQuery(false, true, false, false, "true")))
		if err != nil {
			t.Fatal(err)
		}
		if err := exec.StreamWithContext(ta.ctx, remotecommand.StreamOptions{Stdout: io.Discard}); err == nil {
			t.Fatal("exec without a client certificate succeeded")
		}
	})
}

// sizeQueue hands out its sizes once, then blocks until the stream ends.
type sizeQueue struct {
	mu    sync.Mutex
	sizes []remotecommand.TerminalSize
	done  chan struct{}
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	q.mu.Lock()
	if len(q.sizes) > 0 {
		s := q.sizes[0]
		q.sizes = q.sizes[1:]
		q.mu.Unlock()
		return &s
	}
	if q.done == nil {
		q.done = make(chan struct{})
	}
	done := q.done
	q.mu.Unlock()
	<-done
	return nil
}

func (q *sizeQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done == nil {
		q.done = make(chan struct{})
	}
	close(q.done)
}

// lineWaiter is a Writer that reports when what was written contains want.
type lineWaiter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	found chan struct{}
	once  sync.Once
}

func newLineWaiter(want string) *lineWaiter {
	return &lineWaiter{want: want, found: make(chan struct{})}
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.found) })
	}
	return len(p), nil
}

func (w *lineWaiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestAttach(t *testing.T) {
	ta := startAgent(t)
	p := pod("attach", v1.RestartPolicyNever, "cat")
	p.Spec.Containers[0].Stdin = true
	p.Spec.Containers[0].StdinOnce = true
	ta.createPod(p)
	ta.waitRunning("attach")

	// A first client watches output only; a second writes stdin. Both see
	// the echo: output fans out to every attached client.
	watcher := newLineWaiter("hello attach\n")
	watchCtx, stopWatching := context.WithCancel(ta.ctx)
	watchDone := make(chan error, 1)
	go func() {
		u := ta.url("/attach/ci/attach/main", url.Values{"output": {"1"}, "error": {"1"}})
		watchDone <- ta.executor(websocketExecutor, http.MethodGet, u).StreamWithContext(watchCtx, remotecommand.StreamOptions{Stdout: watcher, Stderr: io.Discard})
	}()
	// The watcher must be subscribed before the input is written, or it
	// would (correctly) miss the output.
	ta.waitFor("watcher attached", func() (bool, error) {
		_, _, cp, err := ta.agent.container("ci/attach", "", "main")
		if err != nil {
			return false, err
		}
		cp.stdout.mu.Lock()
		defer cp.stdout.mu.Unlock()
		return len(cp.stdout.subs) == 1, nil
	})

	writer := newLineWaiter("hello attach\n")
	u := ta.url("/attach/ci/attach/main", url.Values{"input": {"1"}, "output": {"1"}, "error": {"1"}})
	err := ta.executor(spdyExecutor, http.MethodPost, u).StreamWithContext(ta.ctx, remotecommand.StreamOptions{
		Stdin: strings.NewReader("hello attach\n"), Stdout: writer, Stderr: io.Discard,
	})
	if err != nil {
		t.Fatalf("attach with stdin: %v", err)
	}
	for name, w := range map[string]*lineWaiter{"stdin client": writer, "watching client": watcher} {
		select {
		case <-w.found:
		case <-ta.ctx.Done():
			t.Fatalf("%s never saw the echo; got %q", name, w.String())
		}
	}
	// stdinOnce: the first attach closing stdin ends cat, so the pod completes.
	done := ta.waitPod("attach", "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	if term := done.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
		t.Fatalf("terminated state %+v, want exit 0 Completed", term)
	}
	stopWatching()
	<-watchDone
}

func TestExecInStoppedContainer(t *testing.T) {
	ta := startAgent(t)
	ta.createPod(pod("done", v1.RestartPolicyNever, "true"))
	ta.waitPod("done", "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	u := ta.url("/exec/ci/done/main", execQuery(false, true, false, false, "true"))
	err := ta.executor(spdyExecutor, http.MethodPost, u).StreamWithContext(ta.ctx, remotecommand.StreamOptions{Stdout: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "is not running") {
		t.Fatalf("want not running, got %v", err)
	}
}

func TestAttachTTY(t *testing.T) {
	ta := startAgent(t)
	p := pod("shell", v1.RestartPolicyNever, "sh")
	p.Spec.Containers[0].Stdin = true
	p.Spec.Containers[0].TTY = true
	ta.createPod(p)
	ta.waitRunning("shell")

	// kubectl attach -it: the terminal is resized, then the user types.
	out := newLineWaiter("size=30 100")
	sizes := &sizeQueue{sizes: []remotecommand.TerminalSize{{Width: 100, Height: 30}}}
	defer sizes.close()
	u := ta.url("/attach/ci/shell/main", url.Values{"input": {"1"}, "output": {"1"}, "tty": {"1"}})
	err := ta.executor(spdyExecutor, http.MethodPost, u).StreamWithContext(ta.ctx, remotecommand.StreamOptions{
		Stdin:  strings.NewReader(`while [ "$(stty size)" != "30 100" ]; do sleep 0.02; done; echo "size=$(stty size)"; exit 4` + "\n"),
		Stdout: out, Tty: true, TerminalSizeQueue: sizes,
	})
	if err != nil {
		t.Fatalf("attach: %v (output %q)", err, out.String())
	}
	select {
	case <-out.found:
	default:
		t.Fatalf("output %q: want the resized size echoed", out.String())
	}
	done := ta.waitPod("shell", "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if term := done.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 4 {
		t.Fatalf("terminated %+v, want exit 4", done.Status.ContainerStatuses[0].State)
	}
}

func TestExecDiesWithContainer(t *testing.T) {
	ta := startAgent(t)
	ta.createPod(pod("short", v1.RestartPolicyNever, "sh", "-c", "while [ ! -e stop ]; do sleep 0.02; done"))
	ta.waitRunning("short")
	_, _, cp, err := ta.agent.container("ci/short", "", "main")
	if err != nil {
		t.Fatal(err)
	}
	execDone := make(chan error, 1)
	go func() {
		u := ta.url("/exec/ci/short/main", execQuery(false, true, false, false, "sleep", "600"))
		execDone <- ta.executor(spdyExecutor, http.MethodPost, u).StreamWithContext(ta.ctx, remotecommand.StreamOptions{Stdout: io.Discard})
	}()
	ta.waitFor("exec running", func() (bool, error) {
		cp.execMu.Lock()
		defer cp.execMu.Unlock()
		return len(cp.execs) == 1, nil
	})
	if err := os.WriteFile(filepath.Join(ta.root, "ci", "short", "main", "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err = <-execDone
	var exitErr utilexec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 137 {
		t.Fatalf("exec outliving its container: want exit 137 (SIGKILL), got %v", err)
	}
}
