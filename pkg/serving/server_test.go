package serving

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// testIdleTimeout is short so the test is quick; quiet periods and waits
// are multiples of it.
const testIdleTimeout = 150 * time.Millisecond

// streamHandler serves what the gateway's long-running requests look like to
// net/http: /version answers at once; /watch flushes one event, stays quiet
// until release is closed, then sends another; /upgrade answers 101, hijacks
// and echoes.
func streamHandler(release <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"major":"1","minor":"37"}`)
	})
	mux.HandleFunc("/watch", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "event-1\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
			_, _ = io.WriteString(w, "event-2\n")
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, _ *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(conn, brw)
	})
	return mux
}

// endWatchingConn is a client's TCP connection that reports its end: a
// read fails once the server closed it, or, over TLS, the client closes it
// once TLS read the server's close_notify (HTTP/1.1) or GOAWAY (HTTP/2) and
// stopped reading from TCP. The test client closes it for no other reason.
type endWatchingConn struct {
	net.Conn
	once  sync.Once
	ended chan struct{}
}

func (c *endWatchingConn) end() { c.once.Do(func() { close(c.ended) }) }

func (c *endWatchingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.end()
	}
	return n, err
}

func (c *endWatchingConn) Close() error {
	c.end()
	return c.Conn.Close()
}

// testClient is a client on exactly one connection, whose end it reports.
type testClient struct {
	*http.Client
	base  string
	conns chan *endWatchingConn
}

func newTestClient(t *testing.T, addr string, tlsOn, h2 bool, root testCert) *testClient {
	c := &testClient{base: "http://" + addr, conns: make(chan *endWatchingConn, 1)}
	tr := &http.Transport{
		MaxConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, a)
			if err != nil {
				return nil, err
			}
			w := &endWatchingConn{Conn: conn, ended: make(chan struct{})}
			select {
			case c.conns <- w:
			default:
				t.Errorf("the client dialled a second connection")
			}
			return w, nil
		},
	}
	if tlsOn {
		c.base = "https://" + addr
		pool := x509.NewCertPool()
		pool.AddCert(root.cert)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		tr.ForceAttemptHTTP2 = h2
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
	}
	c.Client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return c
}

// conn is the connection the client dialled.
func (c *testClient) conn(t *testing.T) *endWatchingConn {
	t.Helper()
	select {
	case w := <-c.conns:
		c.conns <- w
		return w
	default:
		t.Fatal("no connection dialled")
		return nil
	}
}

func (c *testClient) get(t *testing.T, path string, wantProto int) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if path == "/upgrade" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "SPDY/3.1")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.ProtoMajor != wantProto {
		t.Fatalf("GET %s served over HTTP/%d, want HTTP/%d", path, resp.ProtoMajor, wantProto)
	}
	return resp
}

// expectEnded fails unless the server ends the connection within limit, and
// not before the idle timeout.
func expectEnded(t *testing.T, conn *endWatchingConn, idleSince time.Time, limit time.Duration) {
	t.Helper()
	select {
	case <-conn.ended:
		if quiet := time.Since(idleSince); quiet < testIdleTimeout {
			t.Errorf("connection ended after %v idle, before the %v idle timeout", quiet, testIdleTimeout)
		}
	case <-time.After(limit):
		t.Fatalf("idle connection still open after %v (idle timeout %v)", limit, testIdleTimeout)
	}
}

// expectOpenWhileQuiet fails if the connection ends during a quiet period of
// three idle timeouts. The period is what the test asserts, not a wait for
// something else to happen.
func expectOpenWhileQuiet(t *testing.T, conn *endWatchingConn) {
	t.Helper()
	select {
	case <-conn.ended:
		t.Fatalf("connection ended during a quiet stream (idle timeout %v)", testIdleTimeout)
	case <-time.After(3 * testIdleTimeout):
	}
}

func readLine(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil || line != want+"\n" {
		t.Fatalf("read %q, %v; want %q", line, err, want)
	}
}

func TestIdleTimeoutClosesIdleConnectionsNotStreams(t *testing.T) {
	root := newTestCert(t, "gateway", nil)
	cert, err := NewCertificate(CertificateOptions{CertFile: writeTemp(t, root.certPEM), KeyFile: writeTemp(t, root.keyPEM)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		tls   bool
		proto int // 1 or 2
		// run drives the client; release lets /watch send its second event.
		run func(t *testing.T, c *testClient, proto int, release chan struct{})
	}{
		{"idle HTTP/1.1 keep-alive after GET /version is closed", true, 1, idleAfterVersion},
		{"idle plain HTTP keep-alive (metrics server) is closed", false, 1, idleAfterVersion},
		{"idle HTTP/2 connection after GET /version is closed", true, 2, idleAfterVersion},
		{"HTTP/1.1 watch quiet for longer than the idle timeout stays open", true, 1, quietWatch},
		{"HTTP/2 watch quiet for longer than the idle timeout stays open", true, 2, quietWatch},
		{"plain HTTP watch quiet for longer than the idle timeout stays open", false, 1, quietWatch},
		{"upgraded stream quiet for longer than the idle timeout stays open", true, 1, quietUpgrade},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			o := ServerOptions{
				Handler:           streamHandler(release),
				ReadHeaderTimeout: time.Minute,
				IdleTimeout:       testIdleTimeout,
			}
			if tc.tls {
				o.TLSConfig = TLSConfig(cert)
			}
			addr := startServer(t, o)
			tc.run(t, newTestClient(t, addr, tc.tls, tc.proto == 2, root), tc.proto, release)
		})
	}
}

func idleAfterVersion(t *testing.T, c *testClient, proto int, _ chan struct{}) {
	// The server's idle clock starts when it has written the response,
	// before the client has read it: only the time the request was sent is
	// sure to come before it.
	sent := time.Now()
	resp := c.get(t, "/version", proto)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	expectEnded(t, c.conn(t), sent, 40*testIdleTimeout)
}

func quietWatch(t *testing.T, c *testClient, proto int, release chan struct{}) {
	resp := c.get(t, "/watch", proto)
	defer resp.Body.Close()
	body := bufio.NewReader(resp.Body)
	readLine(t, body, "event-1")
	expectOpenWhileQuiet(t, c.conn(t))
	close(release)
	readLine(t, body, "event-2")
}

func quietUpgrade(t *testing.T, c *testClient, proto int, _ chan struct{}) {
	resp := c.get(t, "/upgrade", proto)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	stream := resp.Body.(io.ReadWriteCloser)
	defer stream.Close()
	expectOpenWhileQuiet(t, c.conn(t))
	if _, err := io.WriteString(stream, "ping"); err != nil {
		t.Fatalf("write after the quiet period: %v", err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(stream, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo after the quiet period: %q, %v", got, err)
	}
}
