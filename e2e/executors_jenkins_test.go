package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// TestExecutorJenkins replays the Jenkins kubernetes plugin's calls
// (fabric8 kubernetes-client over okhttp, no client-go): a WebSocket exec
// offering only v4.channel.k8s.io without a TTY, commands on stdin and the
// exit status read from the v4 error channel's Status JSON, a WebSocket
// ping, and port-forward over WebSocket v4 (?ports=N, channel 0 data and
// channel 1 errors, each starting with the port as 2 little-endian bytes).
func TestExecutorJenkins(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name, member = "exec-jenkins", "member1"
	// An agent pod: the container steps run in, and a service container
	// the build talks to over port-forward.
	pod := env.ShellPod(env.Namespace, name, `while true; do sleep 1; done`)
	pod.Spec.Containers[0].Name = "maven"
	pod.Spec.Containers = append(pod.Spec.Containers, env.LocalContainer("echo", images.Echo, tcpecho))
	placePod(t, pod, []string{member}, member)
	mavenDir := workingDir(pod, "maven")

	for _, code := range []int{0, 3} {
		t.Run("exec v4 exit "+strconv.Itoa(code), func(t *testing.T) {
			execs := countRoute(t, metrics.RouteExec, "101")
			// fabric8 builds the query itself, in this order.
			q := "command=sh&container=maven&stdin=true&stdout=true&stderr=true"
			s := dialGatewayWS(t, env.UserExecOnly, "/api/v1/namespaces/"+env.Namespace+"/pods/"+name+"/exec", q, []string{"v4.channel.k8s.io"})
			if s.protocol != "v4.channel.k8s.io" {
				t.Fatalf("negotiated subprotocol %q, want v4.channel.k8s.io", s.protocol)
			}
			if err := s.ping("jenkins-keepalive"); err != nil {
				t.Fatal(err)
			}
			// What ContainerExecDecorator writes: cd, the step, its exit
			// code marker, exit.
			script := fmt.Sprintf("cd %q; pwd; echo step-out-$((6*7)); echo step-err-$((6*7)) >&2; (exit %d); printf 'EXITCODE %%3d' $?; exit %d\n", mavenDir, code, code)
			if err := s.send(chStdin, []byte(script)); err != nil {
				t.Fatal(err)
			}
			if err := s.waitClosed(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%s\nstep-out-42\nEXITCODE %3d", mavenDir, code); s.text(chStdout) != want {
				t.Errorf("stdout %q, want exactly %q (ran in the member's container dir)", s.text(chStdout), want)
			}
			if s.text(chStderr) != "step-err-42\n" {
				t.Errorf("stderr %q, want exactly %q", s.text(chStderr), "step-err-42\n")
			}
			st, err := s.status()
			if err != nil {
				t.Fatal(err)
			}
			if err := checkExitStatus(st, code); err != nil {
				t.Errorf("v4 error channel: %v", err)
			}
			if !s.pong("jenkins-keepalive") {
				t.Errorf("no pong for the WebSocket ping through the gateway")
			}
			execs.check(t, 1)
		})
	}

	t.Run("exec v4 refused", func(t *testing.T) {
		// A failed upgrade is relayed as the apiserver's Status, so the
		// plugin reports the real reason instead of a handshake error.
		_, refused, err := tryDialGatewayWS(t, env.UserNoExec, "/api/v1/namespaces/"+env.Namespace+"/pods/"+name+"/exec",
			"command=true&container=maven&stdout=true&stderr=true", []string{"v4.channel.k8s.io"})
		if err == nil {
			t.Fatal("no-exec got a WebSocket exec through the gateway")
		}
		var st metav1.Status
		if jsonErr := json.Unmarshal(refused.body, &st); jsonErr != nil || refused.code != http.StatusForbidden ||
			st.Kind != "Status" || st.Code != http.StatusForbidden || st.Reason != metav1.StatusReasonForbidden {
			t.Errorf("no-exec's WebSocket exec was refused with %s (%v), want HTTP 403 with a Forbidden Status", refused, jsonErr)
		}
	})

	t.Run("log tail", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		port := echoPort(ctx, t, name, "echo")
		tailLines := int64(1)
		b, err := gatewayClient(t, env.UserExecOnly).CoreV1().Pods(env.Namespace).
			GetLogs(name, &corev1.PodLogOptions{Container: "echo", TailLines: &tailLines}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("listening on 127.0.0.1:%d\n", port); string(b) != want {
			t.Errorf("pods/log?container=echo&tailLines=1 returned %q, want %q", b, want)
		}
	})

	t.Run("port-forward v4", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		port := echoPort(ctx, t, name, "echo")
		forwards := countRoute(t, metrics.RoutePortForward, "101")
		s := dialGatewayWS(t, env.UserExecOnly, "/api/v1/namespaces/"+env.Namespace+"/pods/"+name+"/portforward",
			"ports="+strconv.Itoa(port), []string{"v4.channel.k8s.io"})
		if s.protocol != "v4.channel.k8s.io" {
			t.Fatalf("negotiated subprotocol %q, want v4.channel.k8s.io", s.protocol)
		}
		prefix := binary.LittleEndian.AppendUint16(nil, uint16(port))
		if err := s.waitFor(ctx, "the port on both channels", 30*time.Second, func() bool {
			return len(s.bytes(0)) >= 2 && len(s.bytes(1)) >= 2
		}); err != nil {
			t.Fatal(err)
		}
		if got := s.bytes(1); !bytes.Equal(got, prefix) {
			t.Errorf("error channel %q, want just the port %v", got, prefix)
		}
		data := make([]byte, 2<<20+7)
		_, _ = rand.NewChaCha8([32]byte{'j'}).Read(data)
		sendErr := make(chan error, 1)
		go func() { sendErr <- s.sendAll(0, data, 32<<10) }()
		if err := s.waitFor(ctx, "the echoed bytes", time.Minute, func() bool { return len(s.bytes(0)) >= len(prefix)+len(data) }); err != nil {
			t.Fatalf("%v (the data channel has %d of %d bytes)", err, len(s.bytes(0)), len(prefix)+len(data))
		}
		if err := <-sendErr; err != nil {
			t.Fatal(err)
		}
		got := s.bytes(0)
		if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[2:], data) {
			t.Errorf("data channel returned %d bytes (first %v), want the port %v then the %d bytes sent", len(got), got[:min(len(got), 2)], prefix, len(data))
		}
		if got := s.bytes(1); !bytes.Equal(got, prefix) {
			t.Errorf("error channel %q after the echo, want just the port", got)
		}
		forwards.check(t, 1)
	})
}

// echoPort reads the port the tcpecho container of pod listens on from
// its log through the gateway.
func echoPort(ctx context.Context, t *testing.T, pod, container string) int {
	t.Helper()
	gw := gatewayClient(t, env.UserExecOnly)
	var last string
	var port int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := gw.CoreV1().Pods(env.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = string(b)
		m := listeningRE.FindStringSubmatch(last)
		if m == nil {
			return false, nil
		}
		port, err = strconv.Atoi(m[1])
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("read the echo server's port from its log (last: %q): %v", last, err)
	}
	return port
}
