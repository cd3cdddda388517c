package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// countingWriter counts what a client received.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

// TestLargeTTYOutputIsWholeOrReported: a TTY exec printing 20 MB, through
// the gateway and Karmada's cluster proxy, over SPDY and WebSocket, either
// arrives whole with its exit status, or ends with an error the client
// sees. Karmada's cluster proxy was seen ending such a stream after 11 to
// 17 MB inside a frame, which client-go read as success (kubectl exit 0):
// the gateway relays whole frames, so a cut always lands where its Failure
// can follow.
func TestLargeTTYOutputIsWholeOrReported(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const pod, size = "large-tty", 20_000_000
	placePod(t, sleepPod(pod), []string{"member1"}, "member1")
	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	// 20 MB of 'x', no newline: a terminal passes it as it is.
	script := "head -c 20000000 /dev/zero | tr '\\\\0' x"
	for _, kind := range []string{"spdy", "websocket"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			u := gatewayClient(t, env.UserExecOnly).CoreV1().RESTClient().Post().Resource("pods").Namespace(env.Namespace).Name(pod).
				SubResource("exec").Param("command", "sh").Param("command", "-c").Param("command", script).
				Param("stdout", "true").Param("tty", "true").URL()
			exe := execExecutor(t, kind, cfg, u)
			var out countingWriter
			err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Tty: true})
			got := out.n.Load()
			t.Logf("%s: %d of %d bytes, ended with %v", kind, got, size, err)
			switch {
			case err == nil && got != size:
				t.Errorf("the exec ended as a success after %d of %d bytes", got, size)
			case err != nil && !strings.Contains(err.Error(), "ended before the command's exit status arrived"):
				t.Errorf("the exec failed otherwise than with the gateway's Failure: %v", err)
			}
		})
	}
}
