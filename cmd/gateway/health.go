package main

import (
	"log"
	"net/http"
	"sync/atomic"

	"k8s.io/klog/v2"
)

// health serves /healthz (the process is alive) and /readyz (caches are
// synced and the gateway is not shutting down), beside /metrics.
type health struct {
	synced   func() bool
	stopping atomic.Bool
}

func newHealth(synced func() bool) *health { return &health{synced: synced} }

func (h *health) shuttingDown() { h.stopping.Store(true) }

func (h *health) mux(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case h.stopping.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case !h.synced():
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
		default:
			w.Write([]byte("ok"))
		}
	})
	return mux
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
