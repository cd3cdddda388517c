package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// echoUpgrader answers upgrades with 101 and the configured headers, then
// echoes bytes until the client closes; it records every request's headers.
type echoUpgrader struct {
	t         testing.TB
	hellos    *helloRecorder
	upgradeTo string      // Upgrade value of the 101; "" answers refuse instead
	header    http.Header // extra 101 headers
	refuse    func(w http.ResponseWriter)

	mu      sync.Mutex
	headers []http.Header
	uris    []string
	opened  chan struct{}
	ended   chan struct{} // an upgraded connection ended on the upstream side
	release chan struct{} // closing it ends every open stream from the upstream side
}

func newEchoUpgrader(t testing.TB, upgradeTo string) *echoUpgrader {
	return &echoUpgrader{t: t, upgradeTo: upgradeTo, opened: make(chan struct{}, 16), ended: make(chan struct{}, 16), release: make(chan struct{})}
}

func (e *echoUpgrader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	proxytest.Admitting(http.HandlerFunc(e.upgrade)).ServeHTTP(w, r)
}

func (e *echoUpgrader) upgrade(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.headers = append(e.headers, r.Header.Clone())
	e.uris = append(e.uris, r.RequestURI)
	e.mu.Unlock()
	if r.ProtoMajor != 1 {
		e.t.Errorf("upgrade over HTTP/%d", r.ProtoMajor)
	}
	if e.hellos != nil {
		if offered, ok := e.hellos.offered(r.RemoteAddr); !ok || slices.Contains(offered, "h2") {
			e.t.Errorf("upgrade connection offered ALPN %q", offered)
		}
	}
	if e.upgradeTo == "" {
		e.refuse(w)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		e.t.Errorf("hijack: %v", err)
		return
	}
	defer conn.Close()
	var b strings.Builder
	b.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + e.upgradeTo + "\r\n")
	for k, vs := range e.header {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return
	}
	e.opened <- struct{}{}
	go func() {
		<-e.release
		conn.Close()
	}()
	_, _ = io.Copy(conn, brw)
	e.ended <- struct{}{}
}

func (e *echoUpgrader) requestHeaders() []http.Header {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.headers)
}

func (e *echoUpgrader) requestURIs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.uris)
}

// rawClient is one client connection to the gateway that speaks HTTP/1.1 by hand.
type rawClient struct {
	conn net.Conn
	br   *bufio.Reader
}

func dialGateway(t testing.TB, gw *httptest.Server) *rawClient {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(gw.Certificate())
	conn, err := tls.Dial("tcp", gw.Listener.Addr().String(), &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // a failing test must not hang
	return &rawClient{conn: conn, br: bufio.NewReader(conn)}
}

func (c *rawClient) send(t testing.TB, method, target string, header [][2]string) *http.Response {
	t.Helper()
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: gateway.test\r\n")
	for _, h := range header {
		b.WriteString(h[0] + ": " + h[1] + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c.conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return resp
}

func (c *rawClient) echo(t testing.TB, msg string) {
	t.Helper()
	if _, err := io.WriteString(c.conn, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c.br, got); err != nil || string(got) != msg {
		t.Fatalf("echo: got %q, %v", got, err)
	}
}

func newUpgradeEnv(t *testing.T, up http.Handler, hellos *helloRecorder) (*Proxy, *httptest.Server) {
	t.Helper()
	upstream := httptest.NewUnstartedServer(proxytest.Admitting(up))
	if hellos != nil {
		upstream.TLS = hellos.config()
	}
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	t.Cleanup(upstream.Close)
	p := newTestProxy(t, Options{Upstream: tlsUpstreamConfig(upstream)})
	gw := httptest.NewUnstartedServer(p)
	gw.EnableHTTP2 = true
	gw.StartTLS()
	t.Cleanup(gw.Close)
	return p, gw
}

var websocketRequest = [][2]string{
	{"Connection", "Upgrade"},
	{"Upgrade", "websocket"},
	{"Sec-WebSocket-Version", "13"},
	{"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
	{"Sec-WebSocket-Protocol", "v5.channel.k8s.io, v4.channel.k8s.io, v3.channel.k8s.io"},
	{"Sec-WebSocket-Protocol", "v2.channel.k8s.io, channel.k8s.io"},
	{"Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits"},
	{"X-Stream-Protocol-Version", "v4.channel.k8s.io"},
	{"X-Stream-Protocol-Version", "v3.channel.k8s.io"},
	{"Authorization", "Bearer caller-token"},
}

func TestUpgradeHeadersPassBothWays(t *testing.T) {
	for _, tc := range []struct {
		name, upgrade, target string
	}{
		{"websocket exec", "websocket", "/api/v1/namespaces/ci/pods/p/exec?command=sh&tty=1&stdin=1&stdout=1"},
		{"websocket portforward", "websocket", "/api/v1/namespaces/ci/pods/p/portforward?ports=80"},
		{"websocket service proxy passthrough", "websocket", "/api/v1/namespaces/ci/services/http:svc:80/proxy/ws"},
		{"spdy exec", "SPDY/3.1", "/api/v1/namespaces/ci/pods/p/exec?command=sh&stdin=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hellos := &helloRecorder{}
			up := newEchoUpgrader(t, tc.upgrade)
			up.hellos = hellos
			up.header = http.Header{
				"Sec-WebSocket-Accept":      {"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="},
				"Sec-WebSocket-Protocol":    {"v5.channel.k8s.io"},
				"Sec-WebSocket-Extensions":  {"permessage-deflate"},
				"X-Stream-Protocol-Version": {"v4.channel.k8s.io"},
			}
			_, gw := newUpgradeEnv(t, up, hellos)
			c := dialGateway(t, gw)
			header := slices.Clone(websocketRequest)
			header[1][1] = tc.upgrade
			resp := c.send(t, "GET", tc.target, header)
			if resp.StatusCode != http.StatusSwitchingProtocols {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			for k, v := range up.header {
				if got := resp.Header.Values(k); !reflect.DeepEqual(got, v) {
					t.Errorf("101 header %s = %q, want %q", k, got, v)
				}
			}
			if resp.Header.Get("Upgrade") != tc.upgrade || !strings.EqualFold(resp.Header.Get("Connection"), "Upgrade") {
				t.Errorf("101 Connection %q Upgrade %q", resp.Header.Get("Connection"), resp.Header.Get("Upgrade"))
			}
			c.echo(t, "bytes both ways\x00\xff")

			got := up.requestHeaders()[0]
			if got.Get("Upgrade") != tc.upgrade || !strings.EqualFold(got.Get("Connection"), "Upgrade") {
				t.Errorf("upstream Connection %q Upgrade %q", got.Get("Connection"), got.Get("Upgrade"))
			}
			want := http.Header{}
			for _, h := range header {
				want.Add(h[0], h[1])
			}
			for _, k := range []string{"Sec-Websocket-Version", "Sec-Websocket-Key", "Sec-Websocket-Protocol", "Sec-Websocket-Extensions", "X-Stream-Protocol-Version", "Authorization"} {
				if !reflect.DeepEqual(got[k], want[k]) {
					t.Errorf("upstream %s = %q, want %q", k, got[k], want[k])
				}
			}
		})
	}
}

// TestFailedUpgradeIsRelayedAndNeverTunnels ports the idea of apimachinery's
// TestProxyUpgradeErrorResponseTerminates: after a non-101 answer the client
// gets exactly that answer and the connection ends, so bytes it sends next
// are neither tunnelled nor proxied.
func TestFailedUpgradeIsRelayedAndNeverTunnels(t *testing.T) {
	const body = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"p\" is forbidden","reason":"Forbidden","code":403}`
	up := newEchoUpgrader(t, "")
	up.refuse = func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, body)
	}
	_, gw := newUpgradeEnv(t, up, nil)
	c := dialGateway(t, gw)
	resp := c.send(t, "POST", "/api/v1/namespaces/ci/pods/p/exec?command=sh", [][2]string{
		{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}, {"X-Stream-Protocol-Version", "v4.channel.k8s.io"},
	})
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden || string(got) != body || resp.Header.Get("X-Upstream") != "yes" ||
		resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("client got %d %q %v; want the upstream's answer unchanged", resp.StatusCode, got, resp.Header)
	}
	if !resp.Close {
		t.Error("failed upgrade did not close the client connection")
	}
	// What the client sends next, a raw frame and then a request, goes nowhere.
	_, _ = io.WriteString(c.conn, "\x80\x03\x00\x01raw spdy frame\r\nGET /api/v1/secrets HTTP/1.1\r\nHost: x\r\n\r\n")
	if n, err := c.br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("connection still open after a failed upgrade: read %d, %v", n, err)
	}
	if n := len(up.requestHeaders()); n != 1 {
		t.Fatalf("upstream got %d requests, want only the failed upgrade", n)
	}
}

func TestUpgradeOfAnotherTypeIsRefused(t *testing.T) {
	up := newEchoUpgrader(t, "websocket")
	_, gw := newUpgradeEnv(t, up, nil)
	c := dialGateway(t, gw)
	resp := c.send(t, "POST", "/api/v1/namespaces/ci/pods/p/exec", [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d %s, want 502", resp.StatusCode, body)
	}
	st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
	if !strings.Contains(st.Message, `requested "SPDY/3.1", got "websocket"`) {
		t.Errorf("message %q", st.Message)
	}
	// The upstream's switched connection was closed, not leaked.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	select {
	case <-up.opened:
	case <-ctx.Done():
		t.Fatal("upstream never switched")
	}
	select {
	case <-up.ended:
	case <-ctx.Done():
		t.Fatal("the refused upstream connection was left open")
	}
}

func TestUpstreamEndingUpgradeClosesClient(t *testing.T) {
	up := newEchoUpgrader(t, "websocket")
	_, gw := newUpgradeEnv(t, up, nil)
	c := dialGateway(t, gw)
	if resp := c.send(t, "GET", "/api/v1/namespaces/ci/pods/p/attach", websocketRequest); resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c.echo(t, "hi")
	close(up.release) // upstream goes away mid-stream
	n, err := c.br.Read(make([]byte, 1))
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("client read %d, %v; want EOF", n, err)
	}
}

func TestHTTP2ClientsAndHTTP1Upgrades(t *testing.T) {
	hellos := &helloRecorder{}
	var mu sync.Mutex
	var normalProto []int
	echo := newEchoUpgrader(t, "SPDY/3.1")
	echo.hellos = hellos
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			echo.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		normalProto = append(normalProto, r.ProtoMajor)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"major":"1"}`)
	})
	_, gw := newUpgradeEnv(t, mux, hellos)

	client := gw.Client() // HTTP/2 capable, trusts the gateway
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", gw.URL+"/version", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(body) != `{"major":"1"}` {
		t.Fatalf("HTTP/%d %d %q", resp.ProtoMajor, resp.StatusCode, body)
	}

	c := dialGateway(t, gw)
	if resp := c.send(t, "POST", "/api/v1/namespaces/ci/pods/p/exec?command=sh", [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}}); resp.StatusCode != 101 {
		t.Fatalf("upgrade status %d", resp.StatusCode)
	}
	c.echo(t, "over http/1.1")
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(normalProto, []int{2}) {
		t.Errorf("normal requests reached the upstream over %v, want HTTP/2 allowed", normalProto)
	}
}
