package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamlimit"
)

func TestNewRejectsNegativeStreamLimits(t *testing.T) {
	for _, opts := range []Options{{MaxStreams: -1}, {MaxStreamsPerClient: -1}} {
		opts.Upstream = &rest.Config{Host: "http://127.0.0.1:1"}
		opts.Resolver = &proxytest.Resolver{Cluster: proxytest.Cluster}
		if _, err := New(opts); err == nil {
			t.Errorf("New(%+v) accepted a negative limit", opts)
		}
	}
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, MaxStreams: 7, MaxStreamsPerClient: 3})
	if total, perClient := p.limiter.Limits(); total != 7 || perClient != 3 {
		t.Errorf("limiter total %d per client %d, want 7 and 3", total, perClient)
	}
}

func counterValue(t *testing.T, m *metrics.Metrics, scope string) float64 {
	t.Helper()
	return value(t, m.StreamLimitRejectionsTotal.WithLabelValues(scope))
}

// TestStreamLimitsEndToEnd opens real upgraded streams through a gateway
// limited to 2 streams in total and 1 per client.
func TestStreamLimitsEndToEnd(t *testing.T) {
	up := newEchoUpgrader(t, "SPDY/3.1")
	p, gw := newUpgradeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			_, _ = io.WriteString(w, "{}")
			return
		}
		up.ServeHTTP(w, r)
	}), nil)
	m := metrics.New(prometheus.NewRegistry())
	p.metrics = m
	p.limiter = streamlimit.New(2, 1)

	exec := func(token string) [][2]string {
		return [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}, {"Authorization", "Bearer " + token}}
	}
	const target = "/api/v1/namespaces/ci/pods/p/exec?command=sh&stdin=true"
	wantTooMany := func(t *testing.T, token, scope string) {
		t.Helper()
		before := len(up.requestHeaders())
		c := dialGateway(t, gw)
		resp := c.send(t, "POST", target, exec(token))
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d %s, want 429", resp.StatusCode, body)
		}
		st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
		if st.Reason != metav1.StatusReasonTooManyRequests || st.Code != 429 || st.Details == nil || st.Details.RetryAfterSeconds != 1 {
			t.Errorf("Status %+v", st)
		}
		if !strings.Contains(st.Message, map[string]string{"total": "through the gateway (limit 2)", "client": "for this client (limit 1)"}[scope]) {
			t.Errorf("message %q does not name the %s limit", st.Message, scope)
		}
		if resp.Header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
		}
		if !resp.Close {
			t.Error("refused upgrade left the connection open")
		}
		if strings.Contains(string(body), token) {
			t.Error("the answer holds the token")
		}
		if n := len(up.requestHeaders()); n != before {
			t.Fatalf("a refused stream reached the upstream")
		}
	}

	a := dialGateway(t, gw)
	if resp := a.send(t, "POST", target, exec("token-a")); resp.StatusCode != 101 {
		t.Fatalf("first stream: %d", resp.StatusCode)
	}
	a.echo(t, "a")
	wantTooMany(t, "token-a", "client")
	if got := counterValue(t, m, "client"); got != 1 {
		t.Errorf("rejections{client} = %v", got)
	}

	b := dialGateway(t, gw)
	if resp := b.send(t, "POST", target, exec("token-b")); resp.StatusCode != 101 {
		t.Fatalf("another client's stream: %d", resp.StatusCode)
	}
	b.echo(t, "b")
	wantTooMany(t, "token-c", "total")
	if got := counterValue(t, m, "total"); got != 1 {
		t.Errorf("rejections{total} = %v", got)
	}

	// Ordinary requests are not streams and are never limited.
	resp, err := gw.Client().Get(gw.URL + "/version")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		t.Fatal("a non-stream request was limited")
	}

	// When the client ends its stream, its slot comes back.
	a.conn.Close()
	err = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		c := dialGateway(t, gw)
		defer c.conn.Close()
		resp := c.send(t, "POST", target, exec("token-a"))
		return resp.StatusCode == http.StatusSwitchingProtocols, nil
	})
	if err != nil {
		t.Fatalf("the slot of a closed stream never came back: %v", err)
	}
}

// TestStreamLimitCountsWatches: a passthrough watch holds a slot for as long
// as it streams, and a plain list does not take one.
func TestStreamLimitCountsWatches(t *testing.T) {
	opened := make(chan struct{}, 4)
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "" {
			_, _ = io.WriteString(w, `{"kind":"PodList"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		opened <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer upstream.Close()
	defer close(release)
	m := metrics.New(prometheus.NewRegistry())
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: upstream.URL}, Metrics: m, MaxStreamsPerClient: 1})
	gw := httptest.NewServer(p)
	defer gw.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	get := func(target string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "GET", gw.URL+target, nil)
		req.Header.Set("Authorization", "Bearer watcher")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	watch := get("/api/v1/namespaces/ci/pods?watch=true")
	defer watch.Body.Close()
	select {
	case <-opened:
	case <-ctx.Done():
		t.Fatal("watch never opened")
	}
	if resp := get("/api/v1/namespaces/ci/pods"); resp.StatusCode != 200 {
		t.Errorf("list while watching: %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	resp := get("/api/v1/namespaces/ci/pods/p/log?follow=true")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second stream of the same client: %d %s", resp.StatusCode, body)
	}
	proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
	if got := counterValue(t, m, "client"); got != 1 {
		t.Errorf("rejections{client} = %v", got)
	}
}

func TestIsStreamRequest(t *testing.T) {
	const member2 = "/apis/cluster.karmada.io/v1alpha1/clusters/member2/proxy"
	upgrade := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}
	tests := []struct {
		name   string
		target string
		header http.Header
		want   bool
	}{
		{"pod exec upgrade", "/api/v1/namespaces/ci/pods/p/exec?command=sh", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}, true},
		{"pod exec without upgrade", "/api/v1/namespaces/ci/pods/p/exec?command=sh", nil, false},
		{"pod log follow", "/api/v1/namespaces/ci/pods/p/log?follow=true", nil, true},
		{"pod log follow=1", "/api/v1/namespaces/ci/pods/p/log?follow=1", nil, true},
		{"pod log follow empty is true", "/api/v1/namespaces/ci/pods/p/log?follow", nil, true},
		{"pod log follow=false", "/api/v1/namespaces/ci/pods/p/log?follow=false", nil, false},
		{"pod log follow=0", "/api/v1/namespaces/ci/pods/p/log?follow=0", nil, false},
		{"pod log first value counts", "/api/v1/namespaces/ci/pods/p/log?follow=false&follow=true", nil, false},
		{"pod log", "/api/v1/namespaces/ci/pods/p/log", nil, false},
		{"watch query", "/api/v1/namespaces/ci/pods?watch=true", nil, true},
		{"watch=1", "/apis/apps/v1/deployments?watch=1", nil, true},
		{"watch=False", "/api/v1/pods?watch=False", nil, false},
		{"legacy watch path", "/api/v1/watch/namespaces/ci/pods", nil, true},
		{"group watch path", "/apis/apps/v1/watch/deployments", nil, true},
		{"list", "/api/v1/namespaces/ci/pods?limit=500", nil, false},
		{"websocket watch", "/api/v1/pods?watch=true", upgrade, true},
		{"any upgrade", "/version", upgrade, true},
		{"cluster proxy log follow", member2 + "/api/v1/namespaces/e2e/pods/demo/log?follow=true", nil, true},
		{"cluster proxy watch query", member2 + "/api/v1/namespaces/e2e/pods?watch=1", nil, true},
		{"cluster proxy watch path", member2 + "/api/v1/watch/namespaces/e2e/pods", nil, true},
		{"cluster proxy group watch path", member2 + "/apis/apps/v1/watch/deployments", nil, true},
		{"cluster proxy exec upgrade", member2 + "/api/v1/namespaces/e2e/pods/demo/exec?command=sh", upgrade, true},
		{"cluster proxy list", member2 + "/api/v1/namespaces/e2e/pods", nil, false},
		{"cluster proxy get", member2 + "/api/v1/namespaces/e2e/pods/watch", nil, false},
		{"cluster proxy services proxy", member2 + "/api/v1/namespaces/e2e/services/web/proxy/events", nil, true},
		{"cluster proxy nested twice", member2 + member2 + "/api/v1/watch/pods", nil, true},
		{"encoded cluster proxy watch path", "/apis/cluster.karmada.io/v1alpha1/clusters/member2/proxy/api/v1/%77atch/pods", nil, true},
		{"dot segments", member2 + "/api/v1/namespaces/e2e/x/../../../watch/pods", nil, true},
		{"pods proxy", "/api/v1/namespaces/ci/pods/p/proxy", nil, true},
		{"pods proxy rest", "/api/v1/namespaces/ci/pods/p:8080/proxy/metrics", nil, true},
		{"services proxy", "/api/v1/namespaces/ci/services/https:web:443/proxy/", nil, true},
		{"nodes proxy", "/api/v1/nodes/n1/proxy/logs/", nil, true},
		{"follow on any path", "/apis/example.io/v1/things?follow=true", nil, true},
		{"a pod named watch", "/api/v1/namespaces/ci/pods/watch", nil, false},
		{"a service named proxy", "/api/v1/namespaces/ci/services/proxy", nil, false},
		{"other query keys", "/api/v1/pods?watcher=true&followers=1", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			if got := isStreamRequest(proxytest.RawRequest(t, http.MethodGet, tt.target, h, "")); got != tt.want {
				t.Errorf("isStreamRequest(%s) = %v, want %v", tt.target, got, tt.want)
			}
		})
	}
}

// TestStreamLimitEveryRoute opens perClient streams for one token on each
// route a stream can take, and then one more: that one gets the 429 Status,
// never reaches the upstream, and the slots come back when the streams end.
func TestStreamLimitEveryRoute(t *testing.T) {
	const perClient = 2
	const member2 = "/apis/cluster.karmada.io/v1alpha1/clusters/member2/proxy"
	spdy := [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}}
	routes := []struct {
		name, method, target string
		header               [][2]string
	}{
		{"pod exec", "POST", "/api/v1/namespaces/ci/pods/p/exec?command=sh", spdy},
		{"pod portforward", "GET", "/api/v1/namespaces/ci/pods/p/portforward", spdy},
		{"pod log follow", "GET", "/api/v1/namespaces/ci/pods/p/log?follow=true", nil},
		{"watch", "GET", "/api/v1/namespaces/ci/pods?watch=true", nil},
		{"watch path", "GET", "/api/v1/watch/namespaces/ci/pods", nil},
		{"websocket watch", "GET", "/api/v1/namespaces/ci/pods?watch=true", websocketRequest},
		{"cluster proxy log follow", "GET", member2 + "/api/v1/namespaces/e2e/pods/demo/log?follow=true", nil},
		{"cluster proxy watch", "GET", member2 + "/api/v1/namespaces/e2e/pods?watch=true", nil},
		{"cluster proxy exec", "POST", member2 + "/api/v1/namespaces/e2e/pods/demo/exec?command=sh", spdy},
		{"pods proxy", "GET", "/api/v1/namespaces/ci/pods/p:8080/proxy/stream", nil},
		{"services proxy", "GET", "/api/v1/namespaces/ci/services/web/proxy/stream", nil},
		{"services proxy upgrade", "GET", "/api/v1/namespaces/ci/services/web/proxy/ws", websocketRequest},
		{"follow on a plain path", "GET", "/apis/example.io/v1/namespaces/ci/things/t/tail?follow=true", nil},
		{"merged events watch", "GET", proxytest.EventsTarget("involvedObject.name=build", "&watch=true"), nil},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			up := newHoldingUpstream(t)
			m := metrics.New(prometheus.NewRegistry())
			p := newTestProxy(t, withMemberEvents(Options{
				Upstream: tlsUpstreamConfig(up.srv), Metrics: m, MaxStreamsPerClient: perClient,
				ServiceResolver: &proxytest.Resolver{Cluster: proxytest.Cluster},
			}))
			gw := httptest.NewTLSServer(p)
			t.Cleanup(gw.Close)
			header := append([][2]string{{"Authorization", "Bearer one-token"}}, rt.header...)

			var open []*rawClient
			for i := range perClient {
				c := dialGateway(t, gw)
				resp := c.send(t, rt.method, rt.target, append(header, [2]string{"X-Attempt", strconv.Itoa(i)}))
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusSwitchingProtocols {
					body, _ := io.ReadAll(resp.Body)
					t.Fatalf("stream %d: %d %s", i+1, resp.StatusCode, body)
				}
				up.waitOpen(t, i+1)
				open = append(open, c)
			}
			c := dialGateway(t, gw)
			resp := c.send(t, rt.method, rt.target, append(header, [2]string{"X-Attempt", "refused"}))
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("stream %d of %d allowed: %d %s", perClient+1, perClient, resp.StatusCode, body)
			}
			if st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body); st.Reason != metav1.StatusReasonTooManyRequests {
				t.Errorf("Status %+v", st)
			}
			// The gateway answered, so whatever it sent for the request was sent.
			if up.saw("refused") {
				t.Error("the refused stream sent a request upstream")
			}
			if got := counterValue(t, m, metrics.LimitScopeClient); got != 1 {
				t.Errorf("rejections{client} = %v", got)
			}

			// Ending one stream frees its slot for the next.
			open[0].conn.Close()
			err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
				c := dialGateway(t, gw)
				defer c.conn.Close()
				return c.send(t, rt.method, rt.target, header).StatusCode != http.StatusTooManyRequests, nil
			})
			if err != nil {
				t.Fatalf("the slot of a closed stream never came back: %v", err)
			}
		})
	}
}

// holdingUpstream is karmada-apiserver for TestStreamLimitEveryRoute: it
// admits admission checks, answers the events merge's template and list
// reads, and holds every other request open (101 for upgrades, a flushed
// 200 otherwise) until the client goes away.
type holdingUpstream struct {
	srv     *httptest.Server
	opened  chan struct{}
	streams int // opened streams the test has seen

	mu       sync.Mutex
	attempts map[string]bool // X-Attempt of every request
}

func newHoldingUpstream(t *testing.T) *holdingUpstream {
	u := &holdingUpstream{opened: make(chan struct{}, 64), attempts: map[string]bool{}}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *holdingUpstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.attempts[r.Header.Get("X-Attempt")] = true
	u.mu.Unlock()
	if proxytest.IsAdmissionCheck(r) {
		proxytest.Admitting(nil).ServeHTTP(w, r)
		return
	}
	memberEvents := strings.HasPrefix(r.URL.Path, "/apis/cluster.karmada.io/") && strings.HasSuffix(r.URL.Path, "/events")
	if r.URL.Path == "/api/v1/namespaces/ci/pods/build" || (strings.HasSuffix(r.URL.Path, "/events") && r.URL.Query().Get("watch") == "") {
		proxytest.WriteJSON(w, http.StatusOK, &corev1.EventList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}})
		return
	}
	if r.Header.Get("Upgrade") != "" {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+r.Header.Get("Upgrade")+"\r\n\r\n")
		u.opened <- struct{}{}
		_, _ = io.Copy(io.Discard, brw)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	if !memberEvents { // a merged watch's member side belongs to the stream counted for karmada's
		u.opened <- struct{}{}
	}
	<-r.Context().Done()
}

// waitOpen waits until n streams are open upstream.
func (u *holdingUpstream) waitOpen(t *testing.T, n int) {
	t.Helper()
	for ; u.streams < n; u.streams++ {
		select {
		case <-u.opened:
		case <-time.After(20 * time.Second):
			t.Fatalf("stream %d never opened upstream", n)
		}
	}
}

func (u *holdingUpstream) saw(attempt string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.attempts[attempt]
}
