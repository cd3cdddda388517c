package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// DefaultHeaderTimeout is the response header deadline's default:
// kube-apiserver answers a plain request in well under its own 60 s request
// timeout, and a member's kubelet answers an exec's upgrade in seconds.
const DefaultHeaderTimeout = 30 * time.Second

// Karmada names karmada-apiserver in errors and logs.
const Karmada = "karmada-apiserver"

// ErrTimeout marks an upstream that sent no response headers (a 101 for an
// upgrade) in time.
var ErrTimeout = errors.New("no response headers in time")

// TimeoutError is ErrTimeout naming what hung.
type TimeoutError struct {
	Upstream string
	After    time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s sent no response within %s", e.Upstream, e.After)
}

func (e *TimeoutError) Unwrap() error { return ErrTimeout }

// Status is the 504 the client gets.
func (e *TimeoutError) Status() error {
	return apierrors.NewTimeoutError(e.Error()+" (--upstream-header-timeout)", 0)
}

// RoundTripWithin sends req on rt and gives the upstream d, counted from
// the moment the request body was sent (at once for a request without one),
// to answer with its headers; after them nothing bounds the response, so
// watches, log follows and upgraded streams last as long as they do. This
// is Transport.ResponseHeaderTimeout, per request: one transport serves
// requests with and without a deadline.
//
// A hung upstream yields *TimeoutError naming upstream.
func RoundTripWithin(rt http.RoundTripper, req *http.Request, d time.Duration, upstream string) (*http.Response, error) {
	if d <= 0 {
		return rt.RoundTrip(req)
	}
	// The response body lives under ctx; the request's own context (a
	// child of the server's) ends it with the request.
	ctx, cancel := context.WithCancelCause(req.Context())
	t := &headerTimer{d: d, fire: func() { cancel(ErrTimeout) }}
	out := req.WithContext(ctx)
	if req.Body == nil || req.Body == http.NoBody {
		t.start()
	} else {
		out.Body = &bodySentSignal{ReadCloser: req.Body, sent: t.start}
	}
	res, err := rt.RoundTrip(out)
	if t.stop() {
		// Fired: whatever came back came too late, or is the cancellation.
		if res != nil {
			res.Body.Close()
		}
		cancel(nil)
		return nil, &TimeoutError{Upstream: upstream, After: d}
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	return res, nil
}

// headerTimer is armed once the request is sent and disarmed when the
// response headers arrive; stop reports whether it fired first.
type headerTimer struct {
	d    time.Duration
	fire func()

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	fired   bool
}

func (h *headerTimer) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.t != nil || h.stopped {
		return
	}
	h.t = time.AfterFunc(h.d, func() {
		h.mu.Lock()
		if h.stopped {
			h.mu.Unlock()
			return
		}
		h.fired = true
		h.mu.Unlock()
		h.fire()
	})
}

func (h *headerTimer) stop() (fired bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	if h.t != nil {
		h.t.Stop()
	}
	return h.fired
}

// bodySentSignal calls sent once the transport has read the request body to
// its end (or closed it): from then on the upstream has all it needs.
type bodySentSignal struct {
	io.ReadCloser
	once sync.Once
	sent func()
}

func (b *bodySentSignal) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.sent)
	}
	return n, err
}

func (b *bodySentSignal) Close() error {
	b.once.Do(b.sent)
	return b.ReadCloser.Close()
}

// NameOf names who answers pathAndQuery below karmada-apiserver: the
// cluster proxy of a member, or karmada-apiserver itself.
func NameOf(pathAndQuery string) string {
	const prefix = "/apis/cluster.karmada.io/v1alpha1/clusters/"
	if rest, ok := strings.CutPrefix(pathAndQuery, prefix); ok {
		if cluster, after, ok := strings.Cut(rest, "/"); ok && strings.HasPrefix(after, "proxy") {
			return ClusterProxyName(cluster)
		}
	}
	return Karmada
}

// ClusterProxyName names the cluster proxy of cluster.
func ClusterProxyName(cluster string) string {
	return fmt.Sprintf("the cluster proxy for cluster %q", cluster)
}
