package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// soakDuration is how long TestSoak drives load: short by default so it
// runs with every `go test`; e.g. -soak=1m in CI, -soak=30m for a real soak.
var soakDuration = flag.Duration("soak", 2*time.Second, "how long TestSoak drives load through the gateway")

// soakUpstream switches upgrades and echoes, streams watch events until the
// client leaves, and answers everything else at once.
func soakUpstream(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Upgrade") != "":
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"); err != nil {
				return
			}
			_, _ = io.Copy(conn, brw)
		case r.URL.Query().Get("watch") != "":
			w.Header().Set("Content-Type", "application/json")
			for i := 0; ; i++ {
				if _, err := fmt.Fprintf(w, `{"type":"ADDED","object":{"metadata":{"name":"p%d"}}}`+"\n", i); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(5 * time.Millisecond): // the upstream's event rate, not test synchronisation
				}
			}
		default:
			_, _ = io.WriteString(w, `{"major":"1"}`)
		}
	})
}

// TestSoak runs concurrent exec streams, watches and plain requests through
// one gateway for -soak, then checks that every stream, limiter slot and
// goroutine it made is gone and the heap did not grow without bound.
func TestSoak(t *testing.T) {
	upstream := httptest.NewUnstartedServer(soakUpstream(t))
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	defer upstream.Close()
	m := metrics.New(prometheus.NewRegistry())
	p := newTestProxy(t, Options{Upstream: tlsUpstreamConfig(upstream), Metrics: m, MaxStreams: 64, MaxStreamsPerClient: 16})
	gw := httptest.NewUnstartedServer(p)
	gw.EnableHTTP2 = true
	gw.StartTLS()
	defer gw.Close()
	pool := x509.NewCertPool()
	pool.AddCert(gw.Certificate())
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	baseGoroutines := runtime.NumGoroutine()

	const workers = 16
	ctx, cancel := context.WithTimeout(context.Background(), *soakDuration)
	defer cancel()
	var ops [3]atomic.Int64
	var failures atomic.Int64
	var firstErr sync.Once
	fail := func(format string, args ...any) {
		failures.Add(1)
		firstErr.Do(func() { t.Errorf(format, args...) })
	}
	var wg sync.WaitGroup
	for w := range workers {
		token := fmt.Sprintf("Bearer soak-%d", w%4) // four clients, four workers each
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				switch (w + i) % 3 {
				case 0:
					if err := soakExec(gw, pool, token, i); err != nil {
						fail("exec: %v", err)
					}
				case 1:
					if err := soakWatch(client, gw.URL, token); err != nil {
						fail("watch: %v", err)
					}
				case 2:
					req, _ := http.NewRequest("GET", gw.URL+"/version", nil)
					req.Header.Set("Authorization", token)
					resp, err := client.Do(req)
					if err != nil {
						fail("get: %v", err)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						fail("get: status %d", resp.StatusCode)
					}
				}
				ops[(w+i)%3].Add(1)
			}
		})
	}
	wg.Wait()
	total := ops[0].Load() + ops[1].Load() + ops[2].Load()
	t.Logf("soak %v: %d exec, %d watch, %d get (%.0f ops/s), %d failures",
		*soakDuration, ops[0].Load(), ops[1].Load(), ops[2].Load(), float64(total)/soakDuration.Seconds(), failures.Load())
	if ops[0].Load() == 0 || ops[1].Load() == 0 || ops[2].Load() == 0 {
		t.Fatal("some kind of load never ran; the soak proved nothing")
	}
	if n := value(t, m.StreamLimitRejectionsTotal.WithLabelValues(metrics.LimitScopeTotal)) +
		value(t, m.StreamLimitRejectionsTotal.WithLabelValues(metrics.LimitScopeClient)); n != 0 {
		t.Errorf("%v streams refused below the limits", n)
	}

	// Everything the load opened must close.
	client.CloseIdleConnections()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		p.upstream.CloseIdleConnections()
		open, clients := p.limiter.Open()
		active := value(t, m.ActiveStreams.WithLabelValues(metrics.RouteExec)) + value(t, m.ActiveStreams.WithLabelValues(metrics.RoutePassthrough))
		return open == 0 && clients == 0 && active == 0 && runtime.NumGoroutine() <= baseGoroutines+10, nil
	})
	if err != nil {
		open, clients := p.limiter.Open()
		t.Fatalf("after the soak: %d limiter slots, %d clients, %d goroutines (baseline %d)",
			open, clients, runtime.NumGoroutine(), baseGoroutines)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 64<<20 {
		t.Errorf("heap in use grew by %d MiB over the soak", grown>>20)
	}
}

func soakExec(gw *httptest.Server, pool *x509.CertPool, token string, i int) error {
	conn, err := tls.Dial("tcp", gw.Listener.Addr().String(), &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, "POST /api/v1/namespaces/ci/pods/p/exec?command=sh&stdin=true HTTP/1.1\r\nHost: gw\r\n"+
		"Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nAuthorization: "+token+"\r\n\r\n"); err != nil {
		return err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	for j := range 3 {
		msg := fmt.Sprintf("message %d/%d %s", i, j, strings.Repeat("x", 512))
		if _, err := io.WriteString(conn, msg); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			return fmt.Errorf("echo %q: %v", got, err)
		}
	}
	return nil
}

func soakWatch(client *http.Client, gw, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", gw+"/api/v1/namespaces/ci/pods?watch=1", nil)
	req.Header.Set("Authorization", token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for range 2 {
		if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"ADDED"`) {
			return fmt.Errorf("event %q: %v", line, err)
		}
	}
	return nil
}
