package proxy

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
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// connCounter counts an httptest server's new connections and lets a test
// wait for the next one.
type connCounter struct {
	mu    sync.Mutex
	conns []net.Conn
	more  chan struct{}
}

func newConnCounter(srv *httptest.Server) *connCounter {
	c := &connCounter{more: make(chan struct{})}
	srv.Config.ConnState = func(conn net.Conn, s http.ConnState) {
		if s != http.StateNew {
			return
		}
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		close(c.more)
		c.more = make(chan struct{})
		c.mu.Unlock()
	}
	return c
}

func (c *connCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

// waitBeyond waits until more than n connections were accepted, or d passed.
func (c *connCounter) waitBeyond(n int, d time.Duration) bool {
	deadline := time.After(d)
	for {
		c.mu.Lock()
		got, more := len(c.conns), c.more
		c.mu.Unlock()
		if got > n {
			return true
		}
		select {
		case <-more:
		case <-deadline:
			return false
		}
	}
}

// TestUpgradeConnectionIsDialedDuringAdmissionAndResumed covers #27's two
// cuts to stream setup in passthrough mode, on a Proxy built by New as
// cmd/gateway builds it: the upgrade's connection to karmada-apiserver is
// dialed while the admission GET is in flight (the fake upstream holds the
// check until a new connection arrives: without warmUp in
// admittedByKarmada it never does and the test fails), every upgrade uses
// exactly that connection (one per upgrade, none wasted, none dialed after
// the check), nothing but the TLS handshake happens on it before the check
// allowed the request, and from the second upgrade on its handshake resumes
// a TLS session (without the ClientSessionCache, DidResume stays false).
func TestUpgradeConnectionIsDialedDuringAdmissionAndResumed(t *testing.T) {
	up := newEchoUpgrader(t, "websocket")
	var (
		mu         sync.Mutex
		overlapped []bool
		resumed    []bool
		conns      *connCounter
		refuse     bool
		before     int // connections accepted before the exec was sent
		noDial     bool
	)
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if proxytest.IsAdmissionCheck(r) {
			mu.Lock()
			n, wait := before, !noDial
			mu.Unlock()
			ok := !wait || conns.waitBeyond(n, 5*time.Second)
			mu.Lock()
			overlapped = append(overlapped, ok)
			deny := refuse
			mu.Unlock()
			if deny {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
				return
			}
			proxytest.Admitting(nil).ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Upgrade") == "" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		mu.Lock()
		resumed = append(resumed, r.TLS != nil && r.TLS.DidResume)
		mu.Unlock()
		up.upgrade(w, r)
	}))
	conns = newConnCounter(upstream)
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	t.Cleanup(upstream.Close)
	p := newTestProxy(t, Options{Upstream: tlsUpstreamConfig(upstream)})
	// The debug log at V(4) says, per upgrade, what each phase cost.
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4), ktesting.BufferLogs(true)))
	gw := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.ServeHTTP(w, r.WithContext(klog.NewContext(r.Context(), logger)))
	}))
	gw.StartTLS()
	t.Cleanup(gw.Close)

	// The checks' HTTP/2 connection, opened by a plain GET first.
	c := dialGateway(t, gw)
	if res := c.send(t, http.MethodGet, "/api/v1/namespaces/ns/pods", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("GET through the gateway: %s", res.Status)
	}
	exec := func() *http.Response {
		mu.Lock()
		before = conns.count()
		mu.Unlock()
		c := dialGateway(t, gw)
		res := c.send(t, http.MethodGet, "/api/v1/namespaces/ns/pods/pod/exec?command=true", websocketRequest)
		if res.StatusCode == http.StatusSwitchingProtocols {
			c.echo(t, "ping")
		}
		_ = c.conn.Close()
		return res
	}
	const upgrades = 4
	for i := range upgrades {
		if res := exec(); res.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade %d: %s", i, res.Status)
		}
		select {
		case <-up.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("upgrade %d did not end upstream", i)
		}
	}
	mu.Lock()
	for i, ok := range overlapped {
		if !ok {
			t.Errorf("upgrade %d: no connection to the upstream was dialed while its admission check was in flight", i)
		}
	}
	for i, r := range resumed[1:] {
		if !r {
			t.Errorf("upgrade %d: full TLS handshake, want a resumed session", i+1)
		}
	}
	mu.Unlock()
	var phases []string
	for _, line := range strings.Split(logger.GetSink().(ktesting.Underlier).GetBuffer().String(), "\n") {
		if strings.Contains(line, "Upgrade phases ") {
			phases = append(phases, line)
		}
	}
	if len(phases) != upgrades {
		t.Errorf("%d Upgrade phases lines at V(4), want %d:\n%s", len(phases), upgrades, strings.Join(phases, "\n"))
	}
	for i, line := range phases {
		for _, want := range []string{"code=101", `check="admission"`, "warmConnection=true", "checkDuration=", "upstreamAnswer="} {
			if !strings.Contains(line, want) {
				t.Errorf("Upgrade phases line %d lacks %s: %s", i, want, line)
			}
		}
	}
	// One HTTP/2 connection for the checks, one per upgrade.
	if got := conns.count(); got != 1+upgrades {
		t.Errorf("upstream accepted %d connections, want %d: one for the checks and exactly one per upgrade", got, 1+upgrades)
	}

	// A refused check: the connection dialed during it carries nothing,
	// and the next allowed upgrade takes it rather than dialing again.
	mu.Lock()
	refuse = true
	mu.Unlock()
	if res := exec(); res.StatusCode != http.StatusForbidden {
		t.Fatalf("refused caller: %s, want 403", res.Status)
	}
	if n := len(up.requestHeaders()); n != upgrades {
		t.Fatalf("upstream saw %d upgrade requests, want %d: a refused caller's request went upstream", n, upgrades)
	}
	mu.Lock()
	refuse, noDial = false, true
	mu.Unlock()
	afterRefusal := conns.count()
	if res := exec(); res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade after a refusal: %s", res.Status)
	}
	<-up.ended
	if got := conns.count(); got != afterRefusal {
		t.Errorf("upstream accepted %d connections for the upgrade after a refusal, want 0: the one dialed during the refused check taken", got-afterRefusal)
	}
}

// TestWarmDialerSkipsDeadAndExpiredConnections: a connection dialed ahead
// that the upstream closed (a restarting apiserver closes new connections)
// or that waited past warmMaxAge is never handed to an upgrade; the upgrade
// gets a live connection that answers. Without the liveness check the
// first DialTLSContext returns the closed connection and its request fails.
func TestWarmDialerSkipsDeadAndExpiredConnections(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	conns := newConnCounter(srv)
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
		n := conns.count()
		w.warmUp()
		if !conns.waitBeyond(n, 10*time.Second) {
			t.Fatal("warmUp dialed nothing")
		}
		waitFor(t, func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.idle) == 1 })
		conns.mu.Lock()
		_ = conns.conns[len(conns.conns)-1].Close()
		conns.mu.Unlock()
		get(t)
		if got := conns.count(); got != n+2 {
			t.Errorf("%d connections, want %d: the closed one skipped and one dialed", got-n, 2)
		}
	})
	t.Run("expired", func(t *testing.T) {
		n := conns.count()
		w.warmUp()
		waitFor(t, func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.idle) == 1 })
		w.mu.Lock()
		w.now = func() time.Time { return time.Now().Add(warmMaxAge + time.Second) }
		w.mu.Unlock()
		get(t)
		if got := conns.count(); got != n+2 || idle() != 0 {
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

// waitFor polls cond until it holds or 10s passed.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not met within 10s")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
