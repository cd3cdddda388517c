package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/pem"
	"io"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	streamprotocol "k8s.io/apimachinery/pkg/util/remotecommand"
	// kubectl 1.37 decides fallback with this package: client-go 0.37
	// returns its UpgradeFailureError, not apimachinery's.
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

const execTarget = "/api/v1/namespaces/ci/pods/job-42/exec?command=cat&container=build&container=build&stdin=true&stdout=true"

// execEnv is gateway + TLS exec upstream, with client configs for the gateway.
type execEnv struct {
	server  *execServer
	gateway *httptest.Server
	proxy   *Proxy
	client  *rest.Config
}

func newExecEnv(t *testing.T, configure func(*execServer)) *execEnv {
	t.Helper()
	return newExecEnvWith(t, configure, Options{})
}

// newExecEnvWith is newExecEnv with a gateway built from opts (its
// Upstream set here).
func newExecEnvWith(t testing.TB, configure func(*execServer), opts Options) *execEnv {
	t.Helper()
	hellos := &helloRecorder{}
	es := newExecServer(t, karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/pods/job-42/exec"), hellos)
	if configure != nil {
		configure(es)
	}
	upstream := httptest.NewUnstartedServer(proxytest.Admitting(es))
	upstream.TLS = hellos.config()
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	t.Cleanup(upstream.Close)

	opts.Upstream = tlsUpstreamConfig(upstream)
	p := newTestProxy(t, opts)
	gw := httptest.NewUnstartedServer(p)
	gw.StartTLS()
	t.Cleanup(gw.Close)
	return &execEnv{server: es, gateway: gw, proxy: p, client: &rest.Config{
		Host:        gw.URL,
		BearerToken: "caller-token",
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: gw.Certificate().Raw}),
		},
	}}
}

func (e *execEnv) url(t testing.TB, target string) *url.URL {
	u, err := url.Parse(e.gateway.URL + target)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (e *execEnv) executor(t testing.TB, kind, target string) remotecommand.Executor {
	t.Helper()
	u := e.url(t, target)
	spdyExec, err := remotecommand.NewSPDYExecutor(e.client, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	wsExec, err := remotecommand.NewWebSocketExecutor(e.client, "GET", u.String())
	if err != nil {
		t.Fatal(err)
	}
	switch kind {
	case "spdy":
		return spdyExec
	case "websocket":
		return wsExec
	}
	fallback, err := remotecommand.NewFallbackExecutor(wsExec, spdyExec, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	return fallback
}

type hashWriter struct {
	n int
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func (w *hashWriter) Write(b []byte) (int, error) { w.n += len(b); return w.h.Write(b) }

func TestExecEchoesThroughGateway(t *testing.T) {
	payload := make([]byte, 1<<20)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(payload)
	for _, kind := range []string{"spdy", "websocket", "fallback"} {
		t.Run(kind, func(t *testing.T) {
			env := newExecEnv(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out := &hashWriter{h: sha256.New()}
			err := env.executor(t, kind, execTarget).StreamWithContext(ctx, remotecommand.StreamOptions{
				Stdin: bytes.NewReader(payload), Stdout: out,
			})
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if out.n != len(payload) || !bytes.Equal(out.h.Sum(nil), want[:]) {
				t.Fatalf("stdout: %d bytes, checksum mismatch=%v", out.n, !bytes.Equal(out.h.Sum(nil), want[:]))
			}
			// stdin EOF reached the upstream: over WebSocket v5 that is the
			// close frame [255, 0], over SPDY the stdin stream's FIN.
			select {
			case proto := <-env.server.stdinEOF:
				wantProto := "v5.channel.k8s.io"
				if kind == "spdy" {
					wantProto = streamprotocol.StreamProtocolV4Name
				}
				if proto != wantProto {
					t.Errorf("negotiated %q, want %q", proto, wantProto)
				}
			default:
				t.Error("upstream never saw stdin end")
			}
		})
	}
}

type sizeQueue chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

func TestExecTTYResizeReachesUpstream(t *testing.T) {
	for _, kind := range []string{"spdy", "websocket"} {
		t.Run(kind, func(t *testing.T) {
			env := newExecEnv(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sizes := []remotecommand.TerminalSize{{Width: 80, Height: 24}, {Width: 200, Height: 50}}
			queue := make(sizeQueue, len(sizes))
			for _, s := range sizes {
				queue <- s
			}
			stdinR, stdinW := io.Pipe()
			var stdout bytes.Buffer
			done := make(chan error, 1)
			go func() {
				done <- env.executor(t, kind, "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdin=true&stdout=true&tty=true").
					StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &stdout, Tty: true, TerminalSizeQueue: queue})
			}()
			for i, want := range sizes {
				select {
				case got := <-env.server.resizes:
					if got != want {
						t.Errorf("resize %d = %+v, want %+v", i, got, want)
					}
				case <-ctx.Done():
					t.Fatalf("resize %d never reached the upstream", i)
				}
			}
			close(queue)
			_, _ = io.WriteString(stdinW, "exit\n")
			stdinW.Close()
			if err := <-done; err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if stdout.String() != "exit\n" {
				t.Errorf("stdout %q", stdout.String())
			}
		})
	}
}

func TestExecFallsBackWhenUpstreamRefusesWebSocket(t *testing.T) {
	env := newExecEnv(t, func(s *execServer) { s.rejectWebSocket = true })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The WebSocket executor alone sees the upstream's own answer.
	err := env.executor(t, "websocket", execTarget).StreamWithContext(ctx, remotecommand.StreamOptions{
		Stdin: strings.NewReader("x"), Stdout: io.Discard,
	})
	if err == nil || !strings.Contains(err.Error(), "websocket upgrades are not supported here") {
		t.Fatalf("websocket executor error %v; want the upstream's 400 Status relayed", err)
	}

	var stdout bytes.Buffer
	err = env.executor(t, "fallback", execTarget).StreamWithContext(ctx, remotecommand.StreamOptions{
		Stdin: strings.NewReader("hello"), Stdout: &stdout,
	})
	if err != nil || stdout.String() != "hello" {
		t.Fatalf("fallback: err %v stdout %q", err, stdout.String())
	}
	if got, want := env.server.seen(), []string{"GET websocket", "GET websocket", "POST spdy"}; !slices.Equal(got, want) {
		t.Errorf("upstream saw %q, want %q", got, want)
	}
}

func TestExecUpstreamCutEndsStream(t *testing.T) {
	for _, kind := range []string{"spdy", "websocket"} {
		t.Run(kind, func(t *testing.T) {
			env := newExecEnv(t, func(s *execServer) { s.cutAfter = 4 })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stdinR, stdinW := io.Pipe()
			defer stdinW.Close()
			go func() { _, _ = io.WriteString(stdinW, "ping") }()
			var stdout bytes.Buffer
			err := env.executor(t, kind, execTarget).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &stdout})
			if ctx.Err() != nil {
				t.Fatal("Stream did not return after the upstream cut the connection")
			}
			select {
			case <-env.server.cut:
			case <-ctx.Done():
				t.Fatal("upstream did not cut")
			}
			// client-go's SPDY executor reads an error stream that ends
			// empty as success, its WebSocket executor reports an
			// anonymous abnormal closure: the gateway saw no exit status
			// come and sent a Failure naming the member on the error
			// channel.
			if want := `member cluster "` + proxytest.Cluster + `"`; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s Stream ended with %v, want an error naming %s", kind, err, want)
			}
			t.Logf("%s Stream after cut: %v (stdout %q)", kind, err, stdout.String())
		})
	}
}
