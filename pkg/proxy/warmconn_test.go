package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

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
		conns      *proxytest.ConnCounter
		refuse     bool
		before     int // connections accepted before the exec was sent
		noDial     bool
	)
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if proxytest.IsAdmissionCheck(r) {
			mu.Lock()
			n, wait := before, !noDial
			mu.Unlock()
			ok := !wait || conns.WaitBeyond(n, 5*time.Second)
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
	conns = proxytest.NewConnCounter(upstream)
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
		before = conns.Count()
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
	if got := conns.Count(); got != 1+upgrades {
		t.Errorf("upstream accepted %d connections, want %d: one for the checks and exactly one per upgrade", got, 1+upgrades)
	}

	// A refused check: the connection dialed during it carries nothing,
	// and the next allowed upgrade takes it rather than dialing again.
	mu.Lock()
	refuse = true
	mu.Unlock()
	beforeRefusal := conns.Count()
	if res := exec(); res.StatusCode != http.StatusForbidden {
		t.Fatalf("refused caller: %s, want 403", res.Status)
	}
	if n := len(up.requestHeaders()); n != upgrades {
		t.Fatalf("upstream saw %d upgrade requests, want %d: a refused caller's request went upstream", n, upgrades)
	}
	mu.Lock()
	refuse, noDial = false, true
	mu.Unlock()
	// The refusal may answer before the dial it started is done.
	if !conns.WaitBeyond(beforeRefusal, 10*time.Second) {
		t.Fatal("no connection was dialed during the refused check")
	}
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return p.upstream.ReadyAhead(false) == 1, nil
	})
	if err != nil {
		t.Fatalf("the connection dialed during the refused check is not ready: %v", err)
	}
	afterRefusal := conns.Count()
	if res := exec(); res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade after a refusal: %s", res.Status)
	}
	<-up.ended
	if got := conns.Count(); got != afterRefusal {
		t.Errorf("upstream accepted %d connections for the upgrade after a refusal, want 0: the one dialed during the refused check taken", got-afterRefusal)
	}
}
