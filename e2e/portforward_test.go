package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

var (
	listeningRE  = regexp.MustCompile(`listening on 127\.0\.0\.1:(\d+)`)
	forwardingRE = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)`)
)

// TestPortForward runs kubectl port-forward through the gateway, over
// SPDY-in-WebSocket and over plain SPDY, to a TCP echo server in a pod and
// checks that what goes through comes back unchanged, on two connections.
func TestPortForward(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name = "portforward"
	pod := env.ShellPod(env.Namespace, name, "")
	pod.Spec.Containers[0] = env.LocalContainer("main", images.Echo, tcpecho)
	placePod(t, pod, []string{"member1"}, "member1")
	kubeconfig := testEnv.GatewayKubeconfig(env.UserExecOnly)
	remote := tcpEchoPort(t, kubeconfig, name)

	for _, tr := range kubectlTransports {
		t.Run(tr.name, func(t *testing.T) {
			p, local := portForward(t, kubeconfig, tr.env, name, remote)
			for i, size := range []int{1 << 20, 4<<20 + 3} {
				if err := echoRoundTrip(t.Context(), local, size, uint64(i)); err != nil {
					t.Errorf("connection %d through %s: %v\nkubectl stderr: %s", i+1, local, err, p.stderr.String())
				}
			}
			p.kill()
		})
	}
}

// tcpEchoPort is the port the tcpecho server in pod listens on, which its
// first log line, read through the gateway, says.
func tcpEchoPort(t *testing.T, kubeconfig, pod string) string {
	t.Helper()
	var remote, lastLog string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _, err := testEnv.RunKubectl(ctx, kubeconfig, nil, "logs", pod)
		if err != nil {
			lastLog = err.Error()
			return false, nil
		}
		lastLog = out
		if m := listeningRE.FindStringSubmatch(out); m != nil {
			remote = m[1]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("read the echo server's port from its log (last: %q): %v", lastLog, err)
	}
	return remote
}

// portForward runs kubectl port-forward to pod's remote port through the
// gateway and returns it and the local address it forwards from.
func portForward(t *testing.T, kubeconfig string, extraEnv []string, pod, remote string) (*kubectlProc, string) {
	t.Helper()
	p := startKubectl(t, kubeconfig, extraEnv, "port-forward", "--address=127.0.0.1", "pod/"+pod, ":"+remote)
	if err := p.waitOutput(t.Context(), "Forwarding from", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	m := forwardingRE.FindStringSubmatch(p.stdout.String())
	if m == nil || m[2] != remote {
		t.Fatalf("kubectl port-forward printed %q, want a Forwarding line to port %s", p.stdout.String(), remote)
	}
	return p, net.JoinHostPort("127.0.0.1", m[1])
}

// echoRoundTrip sends size pseudo-random bytes to an echo server at addr
// and checks that the same bytes come back.
func echoRoundTrip(ctx context.Context, addr string, size int, seed uint64) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	data := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{byte(seed), 7}).Read(data)
	writeErr := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		writeErr <- err
	}()
	got := make([]byte, size)
	n, err := io.ReadFull(conn, got)
	if err != nil {
		return fmt.Errorf("read back %d of %d bytes: %w", n, size, err)
	}
	if err := <-writeErr; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("echo returned sha256 %x, sent %x", sha256.Sum256(got), sha256.Sum256(data))
	}
	return nil
}
