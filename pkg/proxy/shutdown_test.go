package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// waitDraining polls with new requests until the gateway refuses them.
func waitDraining(t *testing.T, gw string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTestTLS()}}
	defer client.CloseIdleConnections()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := client.Get(gw + "/version")
		if err != nil {
			return false, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return false, nil
		}
		st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
		if st.Message != "gateway shutting down" || !resp.Close {
			t.Errorf("draining answer %+v close=%v", st, resp.Close)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("gateway never started refusing requests: %v", err)
	}
}

func TestShutdownWaitsForUpgradedStreams(t *testing.T) {
	up := newEchoUpgrader(t, "SPDY/3.1")
	p, gw := newUpgradeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		up.ServeHTTP(w, r)
	}), nil)
	c := dialGateway(t, gw)
	if resp := c.send(t, "POST", "/api/v1/namespaces/ci/pods/p/exec", [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}}); resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}

	done := make(chan error, 1)
	go func() { done <- p.Shutdown(context.Background()) }()
	waitDraining(t, gw.URL)

	c.echo(t, "still working while draining")
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a stream open", err)
	default:
	}
	c.conn.Close() // the client ends the stream
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown did not return after the last stream ended")
	}
}

func TestShutdownDeadlineCutsStreams(t *testing.T) {
	up := newEchoUpgrader(t, "websocket")
	p, gw := newUpgradeEnv(t, up, nil)
	c := dialGateway(t, gw)
	if resp := c.send(t, "GET", "/api/v1/namespaces/ci/pods/p/exec", websocketRequest); resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c.echo(t, "before")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	// The stream is cut: the client connection ends and the upstream's too.
	if n, err := c.br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("stream still open after a forced shutdown: %d, %v", n, err)
	}
	select {
	case <-up.ended:
	case <-time.After(20 * time.Second):
		t.Fatal("upstream connection left open")
	}
}
