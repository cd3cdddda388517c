package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// TestWarmDialerSkipsDeadAndExpiredConnections: a connection dialed ahead
// that the upstream closed (a restarting apiserver closes new connections)
// or that waited past warmMaxAge is never handed to an upgrade; the upgrade
// gets a live connection that answers. Without the liveness check the
// first DialTLSContext returns the closed connection and its request fails.
func TestWarmDialerSkipsDeadAndExpiredConnections(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	conns := proxytest.NewConnCounter(srv)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	base, _ := url.Parse(srv.URL)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	w := newWarmDialer(base, &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}, ClientSessionCache: tls.NewLRUClientSessionCache(4)}, nil, (&net.Dialer{}).DialContext)
	if w == nil {
		t.Fatal("no warm dialer for an https upstream without a proxy")
	}
	t.Cleanup(w.close)
	idle := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.idle) + w.dialing
	}
	get := func(t *testing.T) {
		t.Helper()
		c, err := w.DialTLSContext(t.Context(), "tcp", w.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("request on the connection handed out: %v, %v", res, err)
		}
	}

	t.Run("closed by the upstream", func(t *testing.T) {
		n := conns.Count()
		w.warmUp()
		if !conns.WaitBeyond(n, 10*time.Second) {
			t.Fatal("warmUp dialed nothing")
		}
		waitForIdle(t, w, 1)
		conns.CloseLast()
		get(t)
		if got := conns.Count(); got != n+2 {
			t.Errorf("%d connections, want %d: the closed one skipped and one dialed", got-n, 2)
		}
	})
	t.Run("expired", func(t *testing.T) {
		n := conns.Count()
		w.warmUp()
		waitForIdle(t, w, 1)
		w.mu.Lock()
		w.now = func() time.Time { return time.Now().Add(warmMaxAge + time.Second) }
		w.mu.Unlock()
		get(t)
		if got := conns.Count(); got != n+2 || idle() != 0 {
			t.Errorf("%d connections and %d idle, want 2 and 0: the expired one closed and one dialed", got-n, idle())
		}
	})
	t.Run("bounded", func(t *testing.T) {
		w.mu.Lock()
		w.now = time.Now
		w.mu.Unlock()
		for range 2 * warmMaxConns {
			w.warmUp()
		}
		if got := idle(); got < 1 || got > warmMaxConns {
			t.Errorf("%d connections dialed ahead, want 1 to %d", got, warmMaxConns)
		}
	})
}

// waitForIdle waits until n connections dialed ahead wait to be taken.
func waitForIdle(t *testing.T, w *warmDialer, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.idle) == n, nil
	})
	if err != nil {
		t.Fatalf("%d connections dialed ahead not ready: %v", n, err)
	}
}
