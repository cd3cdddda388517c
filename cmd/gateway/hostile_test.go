package main

import (
	"bufio"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// The client-facing limits of docs/security.md, proved on the proxy port's
// server as run builds it: newProxyServer, options from bindFlags (the
// flags' defaults unless a test passes flags), and the real Proxy in front
// of a recording upstream.
//
// Mutations tried (each fails the test named):
//   - ReadHeaderTimeout removed from serving.NewServer (or from
//     newProxyServer): TestSlowlorisHeadersAreCut, the client is held past
//     its patience.
//   - MaxHeaderBytes removed from serving.NewServer (or from
//     newProxyServer): TestMaxHeaderBytesFlag, a 100 KiB header passes a
//     64 KiB --max-header-bytes. The default case of
//     TestMalformedFramingIsRefusedBeforeTheProxy is net/http's own 1 MiB,
//     which the flag's default equals.
//   - The malformed-framing cases are net/http's request parser, which
//     serves the gateway because newProxyServer returns an http.Server; no
//     line of the gateway turns it off. The test pins that the answers come
//     from it (text/plain, connection closed, nothing upstream) and that the
//     gateway re-frames what it forwards (TestTransferEncodingOverridesContentLength).

// gatewayServer runs newProxyServer(bindFlags defaults + args) with the
// real Proxy in front of a recording upstream.
func gatewayServer(t *testing.T, args ...string) (*httptest.Server, *proxytest.RecordingUpstream) {
	t.Helper()
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	o := bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	up := &proxytest.RecordingUpstream{}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	px, err := proxy.New(proxy.Options{
		Upstream: &rest.Config{Host: upstream.URL},
		Resolver: &proxytest.Resolver{Cluster: proxytest.Cluster},
		Metrics:  metrics.New(prometheus.NewRegistry()),
	})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewUnstartedServer(nil)
	gw.Config = newProxyServer(o, px, nil)
	gw.Start()
	t.Cleanup(gw.Close)
	return gw, up
}

// rawExchange writes raw on a new connection and reads one response; the
// reader it returns holds whatever the server sent after it.
func rawExchange(t *testing.T, addr, raw string) (*http.Response, []byte, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, br
}

// TestMalformedFramingIsRefusedBeforeTheProxy: requests whose framing two
// HTTP parsers could read differently are answered by Go's http.Server
// before the proxy handler runs, so nothing reaches karmada-apiserver. Go
// writes these answers itself, as text/plain, not a Status.
func TestMalformedFramingIsRefusedBeforeTheProxy(t *testing.T) {
	const exec = "POST /api/v1/namespaces/ci/pods/p/exec HTTP/1.1\r\nHost: gw\r\n"
	tests := []struct {
		name     string
		raw      string
		wantCode int
	}{
		{"two different Content-Lengths", exec + "Content-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", 400},
		{"Content-Length list", exec + "Content-Length: 4, 5\r\n\r\nabcde", 400},
		{"signed Content-Length", exec + "Content-Length: +4\r\n\r\nabcd", 400},
		{"negative Content-Length", exec + "Content-Length: -1\r\n\r\n", 400},
		{"two Transfer-Encodings", exec + "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n", 501},
		{"Transfer-Encoding list", exec + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 501},
		{"Transfer-Encoding gzip", exec + "Transfer-Encoding: gzip\r\n\r\n", 501},
		{"space before colon", exec + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400},
		{"NUL in a header value", exec + "X-A: b\x00c\r\n\r\n", 400},
		{"two Host headers", "GET /version HTTP/1.1\r\nHost: gw\r\nHost: other\r\n\r\n", 400},
		{"no Host", "GET /version HTTP/1.1\r\n\r\n", 400},
		{"control byte in the target", "GET /api/v1/namespaces/ci/pods/p\x01/exec HTTP/1.1\r\nHost: gw\r\n\r\n", 400},
		// --max-header-bytes' default, 1 MiB (Go allows 4096 bytes over it).
		{"oversized header block", exec + "X-Big: " + strings.Repeat("a", 1<<20+8<<10) + "\r\n\r\n", 431},
		{"many headers", exec + strings.Repeat("X-Many: a\r\n", 100<<10) + "\r\n", 431},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw, up := gatewayServer(t)
			resp, body, _ := rawExchange(t, gw.Listener.Addr().String(), tt.raw)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, body, tt.wantCode)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type %q: Go's own refusal changed form, update docs/security.md", ct)
			}
			if !resp.Close {
				t.Error("connection kept open after a framing error")
			}
			if n := len(up.Requests()); n != 0 {
				t.Fatalf("%d requests reached the upstream", n)
			}
		})
	}
}

// TestTransferEncodingOverridesContentLength: with both, Go reads the body
// as chunked and drops Content-Length (RFC 9112 6.3), and the proxy frames
// the upstream request itself, so the upstream sees the body the gateway
// read and the next request on the connection as a separate request.
func TestTransferEncodingOverridesContentLength(t *testing.T) {
	gw, up := gatewayServer(t)
	raw := "POST /api/v1/namespaces/ci/configmaps HTTP/1.1\r\nHost: gw\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"4\r\nabcd\r\n0\r\n\r\n" +
		"GET /api/v1/namespaces/ci/secrets HTTP/1.1\r\nHost: gw\r\n\r\n"
	resp, _, br := rawExchange(t, gw.Listener.Addr().String(), raw)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	second, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("second response: %v", err)
	}
	second.Body.Close()
	reqs := up.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests, want 2", len(reqs))
	}
	if string(reqs[0].Body) != "abcd" || reqs[0].Header.Get("Content-Length") == "30" {
		t.Errorf("first upstream request body %q Content-Length %q", reqs[0].Body, reqs[0].Header.Get("Content-Length"))
	}
	if reqs[1].Method != "GET" || reqs[1].Path != "/api/v1/namespaces/ci/secrets" || len(reqs[1].Body) != 0 {
		t.Errorf("second upstream request %s %s %q", reqs[1].Method, reqs[1].Path, reqs[1].Body)
	}
}

// TestSlowlorisHeadersAreCut: a client that trickles header lines is
// disconnected at --read-header-timeout (its 10s default) however steadily
// it writes, and nothing reaches the upstream. Go closes the connection
// without an answer.
func TestSlowlorisHeadersAreCut(t *testing.T) {
	gw, up := gatewayServer(t)
	conn, err := net.Dial("tcp", gw.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /api/v1/namespaces/ci/pods/p/exec HTTP/1.1\r\nHost: gw\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	trickled := make(chan int, 1)
	go func() {
		n := 0
		defer func() { trickled <- n }()
		tick := time.NewTicker(500 * time.Millisecond) // the trickle itself
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(conn, "X-Slow: a\r\n"); err != nil {
					return
				}
				n++
			}
		}
	}()

	start := time.Now()
	const patience = 40 * time.Second // far beyond the 10s timeout
	_ = conn.SetReadDeadline(start.Add(patience))
	got, err := io.ReadAll(conn)
	elapsed := time.Since(start)
	close(stop)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the gateway kept a trickling client for %v", elapsed)
	}
	if len(got) != 0 && !strings.HasPrefix(string(got), "HTTP/1.1 408") {
		t.Errorf("unexpected answer to a slow client: %q", got)
	}
	if n := <-trickled; n == 0 {
		t.Error("the connection closed before the trickle started; the test proved nothing")
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}

// TestMaxHeaderBytesFlag: --max-header-bytes reaches the server: with 64
// KiB, a 100 KiB header block gets 431 and a 32 KiB one goes through.
func TestMaxHeaderBytesFlag(t *testing.T) {
	const exec = "POST /api/v1/namespaces/ci/pods/p/exec HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n"
	for _, tc := range []struct {
		size int
		want int
	}{{100 << 10, 431}, {32 << 10, 200}} {
		gw, up := gatewayServer(t, "--max-header-bytes=65536")
		resp, body, _ := rawExchange(t, gw.Listener.Addr().String(), exec+"X-Big: "+strings.Repeat("a", tc.size)+"\r\n\r\n")
		if resp.StatusCode != tc.want {
			t.Errorf("%d byte header: status %d %q, want %d", tc.size, resp.StatusCode, body, tc.want)
		}
		if n := len(up.Requests()); (n != 0) != (tc.want == 200) {
			t.Errorf("%d byte header: %d requests reached the upstream", tc.size, n)
		}
	}
}
