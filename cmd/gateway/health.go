package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// health serves /healthz (the process is alive) and /readyz (caches are
// synced, karmada-apiserver answers and the gateway is not shutting down),
// beside /metrics. Liveness never depends on karmada-apiserver: restarting
// the gateway would not bring it back.
type health struct {
	synced   func() bool
	upstream *upstreamCheck
	stopping atomic.Bool
}

func newHealth(synced func() bool, upstream *upstreamCheck) *health {
	return &health{synced: synced, upstream: upstream}
}

func (h *health) shuttingDown() { h.stopping.Store(true) }

func (h *health) mux(metrics http.Handler, profiling bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	if profiling {
		// On the internal port only: a CPU profile of the deployed gateway
		// is how its cost per request or per stream byte is found.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case h.stopping.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case !h.synced():
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
		default:
			if err := h.upstream.check(r.Context()); err != nil {
				http.Error(w, "karmada-apiserver not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok"))
		}
	})
	return mux
}

const (
	// upstreamCheckTTL is how long a karmada-apiserver answer is reused, so
	// every replica's probes cost it one request per few seconds.
	upstreamCheckTTL = 5 * time.Second
	// upstreamCheckTimeout stays under the chart's 3s probe timeout, so a
	// hung karmada-apiserver reads as not ready rather than a probe timeout.
	upstreamCheckTimeout = 2 * time.Second
)

// upstreamCheck asks karmada-apiserver's /readyz, as the gateway, at most
// once per ttl. Nothing else drives it: the first probe after ttl checks
// again, so readiness comes back by itself when karmada-apiserver does.
type upstreamCheck struct {
	probe        func(ctx context.Context) error
	ttl, timeout time.Duration
	now          func() time.Time

	// mu guards the fields below and is never held across a probe: a
	// readiness request that finds a probe running waits for its answer
	// (done) instead of asking karmada-apiserver again, and gives up with
	// its own context, so a hung karmada-apiserver holds no prober longer
	// than timeout, nor any /metrics or /healthz request at all.
	mu      sync.Mutex
	checked time.Time
	err     error
	running chan struct{} // closed when the running probe ends; nil if none
}

func newUpstreamCheck(client rest.Interface) *upstreamCheck {
	return &upstreamCheck{
		probe: func(ctx context.Context) error {
			_, err := client.Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		},
		ttl:     upstreamCheckTTL,
		timeout: upstreamCheckTimeout,
		now:     time.Now,
	}
}

func (c *upstreamCheck) check(ctx context.Context) error {
	c.mu.Lock()
	if !c.checked.IsZero() && c.now().Sub(c.checked) < c.ttl {
		err := c.err
		c.mu.Unlock()
		return err
	}
	done := c.running
	if done == nil {
		done = make(chan struct{})
		c.running = done
		// The answer is cached for every prober, so it must be about
		// karmada-apiserver, not about one prober that gave up early.
		go c.run(context.WithoutCancel(ctx), done)
	}
	c.mu.Unlock()
	select {
	case <-done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("readiness check abandoned: %w", ctx.Err())
	}
}

// run probes once, within timeout, records the answer and closes done.
func (c *upstreamCheck) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := c.probe(pctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if (err == nil) != (c.err == nil) || c.checked.IsZero() {
		// Log changes only: probes every few seconds would flood the log.
		if err != nil {
			klog.FromContext(ctx).Info("karmada-apiserver not ready; reporting not ready", "err", err)
		} else if !c.checked.IsZero() {
			klog.FromContext(ctx).Info("karmada-apiserver ready again")
		}
	}
	c.checked, c.err, c.running = c.now(), err, nil
}

// klogStdLogger routes net/http's own server errors (TLS handshake failures,
// malformed requests) into the structured log.
func klogStdLogger() *log.Logger {
	return log.New(klogWriter{}, "", 0)
}

type klogWriter struct{}

func (klogWriter) Write(p []byte) (int, error) {
	klog.InfoS("http server", "msg", string(trimNewline(p)))
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	if n := len(p); n > 0 && p[n-1] == '\n' {
		return p[:n-1]
	}
	return p
}
