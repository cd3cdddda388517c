package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// tickerScript prints a numbered line five times a second.
const tickerScript = `i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done`

// TestNodeFaults breaks a member's real node under running streams: the
// kubelet killed during execs (SPDY and WebSocket) and a `logs -f`, then
// containerd killed during execs, and a container exiting while attached.
// The streams the node's death cut end with an error, not like a complete
// one (but for one upstream gap, below); the other member keeps serving
// execs, the node comes back, and the attached container's exit code is in
// its pod's status. Not parallel: it takes member1's node down.
//
// What the real components do, and what the gateway adds: kube-apiserver
// closes an exec tunnel whose kubelet died without a status on the error
// channel, which client-go's SPDY executor reads as success; the gateway
// follows the SPDY frames and sends a Failure naming the member on the
// error channel (v4.channel.k8s.io). The WebSocket executor would see the
// tunnel close without a close frame and fail anonymously; the gateway
// sends the same Failure on channel 3 and a normal close. kube-apiserver ends a
// proxied log body it could not finish with a clean last chunk; the gateway
// reads the member's pod, finds the followed container still running, and
// aborts the response, so the client reads an unexpected EOF.
func TestNodeFaults(t *testing.T) {
	dumpLogsOnFailure(t)
	const ticker, other = "fault-ticker", "fault-other"
	placePod(t, env.ShellPod(env.Namespace, ticker, tickerScript), []string{"member1"}, "member1")
	placePod(t, sleepPod(other), []string{"member2"}, "member2")
	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	gw := gatewayClient(t, env.UserExecOnly)

	restart := func(t *testing.T, what string, start func(context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := start(ctx); err != nil {
			t.Fatalf("restart %s: %v", what, err)
		}
		// The node serves execs again, through the gateway.
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, _, err := kubectlExecAs(ctx, env.UserExecOnly, ticker)
			return err == nil, nil
		}); err != nil {
			t.Fatalf("exec into %s after %s came back: %v", ticker, what, err)
		}
	}

	// crash kills a part of member1's node, checks how every stream ends,
	// that the gateway counted the cuts it reported (by route) and that
	// member2 keeps serving execs, and starts the part again.
	crash := func(t *testing.T, what string, kill func(), start func(context.Context) error, streams map[string]streamEnd, reported map[string]float64) {
		t.Helper()
		before := map[string]float64{}
		for route := range reported {
			before[route] = reportedCuts(t, route)
		}
		kill()
		restarted := false
		defer func() {
			if !restarted {
				restart(t, what, start)
			}
		}()
		for name, s := range streams {
			select {
			case err := <-s.done:
				t.Logf("%s ended with: %v", name, err)
				if msg := s.check(err); msg != "" {
					t.Errorf("%s after %s was killed: %s", name, what, msg)
				}
			case <-time.After(90 * time.Second):
				t.Errorf("%s still runs 90s after %s was killed", name, what)
			}
		}
		for route, want := range reported {
			if got := reportedCuts(t, route) - before[route]; got != want {
				t.Errorf("karmada_gateway_stream_cuts_total{route=%q,result=\"reported\"} rose by %v, want %v", route, got, want)
			}
		}
		expectExec(t, what+" down", env.UserExecOnly, other)
		restart(t, what, start)
		restarted = true
	}

	t.Run("kubelet killed: execs and logs -f end with an error", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		spdyDone := startLongExec(t, ctx, ticker, "spdy")
		wsDone := startLongExec(t, ctx, ticker, "websocket")
		logsDone := followTicks(t, ctx, ticker)

		crash(t, "member1's kubelet", func() { testEnv.KillKubelet("member1") },
			func(ctx context.Context) error { return testEnv.StartKubelet(ctx, "member1") },
			map[string]streamEnd{
				"the SPDY exec through the gateway":      {spdyDone, errorNaming(`member cluster "member1"`)},
				"the WebSocket exec through the gateway": {wsDone, errorNaming(`member cluster "member1"`)},
				"logs -f through the gateway":            {logsDone, anError},
			}, map[string]float64{"exec": 2, "log": 1})
	})

	// The kubelet translates a WebSocket exec to SPDY towards containerd's
	// streaming server; when containerd dies, that SPDY executor reads the
	// empty error stream as success and the kubelet writes Success on the
	// WebSocket's error channel. The gateway relays a real Status and
	// cannot tell it from a true one; the SPDY exec, which the kubelet
	// relays without translating, gets the gateway's Failure. Should the
	// WebSocket exec ever error here, the gap closed upstream: update this
	// test and the README.
	t.Run("containerd killed: SPDY exec errors, WebSocket exec reads as success (kubelet translator gap)", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		spdyDone := startLongExec(t, ctx, ticker, "spdy")
		wsDone := startLongExec(t, ctx, ticker, "websocket")
		crash(t, "member1's containerd", func() { testEnv.KillContainerd("member1") },
			func(ctx context.Context) error { return testEnv.StartContainerd(ctx, "member1") },
			map[string]streamEnd{
				"the SPDY exec through the gateway":      {spdyDone, errorNaming(`member cluster "member1"`)},
				"the WebSocket exec through the gateway": {wsDone, noError},
			}, map[string]float64{"exec": 1})
	})

	t.Run("container exits while attached: exit code in the pod status", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		const name = "fault-attach"
		pod := env.ShellPod(env.Namespace, name, `echo attach-ready; read line; echo "got $line"; exit 7`)
		pod.Spec.Containers[0].Stdin = true
		pod.Spec.Containers[0].StdinOnce = true
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		placePod(t, pod, []string{"member1"}, "member1")
		u := gw.CoreV1().RESTClient().Post().Resource("pods").Namespace(env.Namespace).Name(name).SubResource("attach").
			VersionedParams(&corev1.PodAttachOptions{Container: "main", Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
		exe, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
		if err != nil {
			t.Fatal(err)
		}
		var out syncBuffer
		streamErr := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("bye\n"), Stdout: &out, Stderr: &out})
		if !strings.Contains(out.String(), "got bye") {
			t.Errorf("attach output %q lacks the container's answer %q", out.String(), "got bye")
		}
		var ce interface{ ExitStatus() int }
		switch {
		case errors.As(streamErr, &ce) && ce.ExitStatus() == 7:
		case streamErr == nil:
			// The kubelet ends an attach with Success whatever the exit
			// code (an attach is not a process of its own); the code is in
			// the pod's status, where GitLab Runner reads it.
		default:
			t.Errorf("attach ended with %v, want exit code 7 or a clean end", streamErr)
		}
		var last string
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := testEnv.MemberPod(ctx, "member1", env.Namespace, name)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			for _, cs := range p.Status.ContainerStatuses {
				if term := cs.State.Terminated; cs.Name == "main" && term != nil {
					if term.ExitCode != 7 {
						return false, fmt.Errorf("container terminated with exit code %d, want 7", term.ExitCode)
					}
					return true, nil
				}
			}
			last = string(p.Status.Phase)
			return false, nil
		})
		if err != nil {
			t.Errorf("the member's pod status never showed exit code 7 (last %s): %v", last, err)
		}
		if streamErr == nil {
			t.Logf("attach ended cleanly; the exit code came from the pod status")
		}
	})
}

// reportedCuts is the gateway's count of cuts it reported on route.
func reportedCuts(t *testing.T, route string) float64 {
	t.Helper()
	return gatewayCounter(t, "karmada_gateway_stream_cuts_total", `route="`+route+`"`, `result="reported"`)
}

// streamEnd is a stream's end and what it must be: check returns what is
// wrong with the error the stream ended with, or "".
type streamEnd struct {
	done  <-chan error
	check func(error) string
}

func anError(err error) string {
	if err == nil {
		return "ended without an error, as if it had completed"
	}
	return ""
}

// noError is what a stream the upstream reports as complete ends with.
func noError(err error) string {
	if err != nil {
		return fmt.Sprintf("ended with %v, want the Success the upstream translator writes", err)
	}
	return ""
}

func errorNaming(want string) func(error) string {
	return func(err error) string {
		if err == nil || !strings.Contains(err.Error(), want) {
			return fmt.Sprintf("ended with %v, want an error naming %s", err, want)
		}
		return ""
	}
}
