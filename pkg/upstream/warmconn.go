package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Upgrades cannot reuse a connection: the 101 hands it to the stream for
// good, so each exec, attach or port-forward needed a new TCP connection
// and TLS handshake to karmada-apiserver after its admission check or
// authorization, in series with them (#27). A warmDialer takes that off the
// request's path: when an upgrade request arrives, before its check, it
// starts dialing one connection ahead (the TCP and TLS handshakes, nothing
// else: no request, so nothing is sent upstream before the check allows it),
// and the upgrade's transport takes a dialed connection instead of dialing.
// With the TLS session cache (tlsSessionCacheSize) the handshakes it does
// are resumptions.
const (
	// warmMaxConns bounds the connections dialed ahead and not yet taken.
	warmMaxConns = 32
	// warmMaxAge is how long a dialed connection waits to be taken before
	// it is closed: well under the time an apiserver gives a new connection
	// to send its first request (kube-apiserver's ReadHeaderTimeout is 32s,
	// and a shutting-down Go server closes new connections after 5s; those
	// are caught by the liveness check on taking).
	warmMaxAge = 10 * time.Second
	// tlsSessionCacheSize is the upstream transports' TLS session cache:
	// a handshake that resumes a session skips the certificate exchange and
	// its signature and verification.
	tlsSessionCacheSize = 64
)

type warmConn struct {
	conn   *tls.Conn
	dialed time.Time
	// watch has the error of a read that runs from the dial until the
	// connection is taken: it takes in what the server sends after the
	// handshake (TLS 1.3 session tickets, for the cache) and ends early if
	// the server closes the connection (a restarting apiserver closes new
	// connections) or sends anything else, which no request asked for.
	watch chan error
}

var errUnrequestedData = errors.New("upstream sent data before any request")

func newWarmConn(c *tls.Conn, now time.Time) warmConn {
	w := warmConn{conn: c, dialed: now, watch: make(chan error, 1)}
	go func() {
		var b [1]byte
		n, err := c.Read(b[:])
		if n > 0 {
			err = errUnrequestedData
		}
		w.watch <- err
	}()
	return w
}

// take stops the watching read and reports whether the connection is
// still open and unused, so that it can carry a request.
func (c warmConn) take() bool {
	select {
	case <-c.watch: // ended by itself: closed or spoken on
		return false
	default:
	}
	if c.conn.SetReadDeadline(time.Now()) != nil {
		return false
	}
	err := <-c.watch
	// A read that timed out leaves a tls.Conn usable. The deadline may
	// have won over a close that arrived in the same instant: the socket
	// tells.
	return c.conn.SetReadDeadline(time.Time{}) == nil && errors.Is(err, os.ErrDeadlineExceeded) && !socketHasInput(c.conn.NetConn())
}

// warmDialer is the DialTLSContext of an HTTP/1.1 upgrade transport to one
// upstream address.
type warmDialer struct {
	addr      string
	tlsConfig *tls.Config // ServerName set
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout   time.Duration // bounds each dial with its handshake
	maxConns  int
	maxAge    time.Duration
	now       func() time.Time

	mu      sync.Mutex
	idle    []warmConn
	dialing int
	// ready is closed, and replaced, each time a dial ahead ends.
	ready  chan struct{}
	closed bool
}

// newWarmDialer returns the warm dialer for an upgrade transport to base,
// or nil where it cannot apply: a plain-HTTP upstream, or one reached
// through a proxy (the transport then dials the proxy, and does TLS itself).
func newWarmDialer(base *url.URL, tlsConfig *tls.Config, proxy func(*http.Request) (*url.URL, error), dial func(ctx context.Context, network, addr string) (net.Conn, error)) *warmDialer {
	if base.Scheme != "https" || tlsConfig == nil {
		return nil
	}
	if proxy != nil {
		if u, err := proxy(&http.Request{URL: base, Header: http.Header{}}); err != nil || u != nil {
			return nil
		}
	}
	host, port := base.Hostname(), base.Port()
	if port == "" {
		port = "443"
	}
	tc := tlsConfig.Clone()
	if tc.ServerName == "" {
		tc.ServerName = host // as http.Transport sets it
	}
	return &warmDialer{
		addr: net.JoinHostPort(host, port), tlsConfig: tc, dial: dial, timeout: 10 * time.Second,
		maxConns: warmMaxConns, maxAge: warmMaxAge, now: time.Now, ready: make(chan struct{}),
	}
}

// warmUp starts dialing one connection ahead unless one is waiting to be
// taken already (left by a request whose check refused it) or maxConns are
// dialed or dialing. An upgrade request calls it when it arrives, so the
// dial runs while its check does; a burst of arrivals dials as many.
func (w *warmDialer) warmUp() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneLocked()
	if w.closed || len(w.idle) > 0 || w.dialing >= w.maxConns {
		return
	}
	w.dialing++
	go w.dialAhead()
}

func (w *warmDialer) dialAhead() {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	c, err := w.dialTLS(ctx)
	w.mu.Lock()
	w.dialing--
	if err == nil && !w.closed {
		w.idle = append(w.idle, newWarmConn(c, w.now()))
		c = nil
	}
	close(w.ready)
	w.ready = make(chan struct{})
	w.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	if err != nil {
		klog.Background().V(2).Info("Dialing an upgrade connection ahead failed", "addr", w.addr, "err", err)
	}
}

// dialTLS dials addr and completes the TLS handshake within ctx, telling
// ctx's trace of the handshake as http.Transport would.
func (w *warmDialer) dialTLS(ctx context.Context) (*tls.Conn, error) {
	raw, err := w.dial(ctx, "tcp", w.addr)
	if err != nil {
		return nil, err
	}
	trace := httptrace.ContextClientTrace(ctx)
	if trace != nil && trace.TLSHandshakeStart != nil {
		trace.TLSHandshakeStart()
	}
	c := tls.Client(raw, w.tlsConfig)
	err = c.HandshakeContext(ctx)
	if trace != nil && trace.TLSHandshakeDone != nil {
		trace.TLSHandshakeDone(c.ConnectionState(), err)
	}
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	return c, nil
}

// DialTLSContext is the transport's dialer: a connection dialed ahead if
// one is ready (or being dialed, which it waits for), else its own dial.
func (w *warmDialer) DialTLSContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr != w.addr || (network != "tcp" && network != "tcp4" && network != "tcp6") {
		return nil, errors.New("warm dialer: unexpected address " + network + " " + addr)
	}
	for {
		w.mu.Lock()
		w.pruneLocked()
		if n := len(w.idle); n > 0 {
			c := w.idle[n-1]
			w.idle = w.idle[:n-1]
			w.mu.Unlock()
			if c.take() {
				signalWarm(ctx)
				return c.conn, nil
			}
			_ = c.conn.Close()
			continue
		}
		if w.dialing == 0 || w.closed {
			w.mu.Unlock()
			break
		}
		ready := w.ready
		w.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	return w.dialTLS(ctx)
}

// pruneLocked closes the connections that waited longer than maxAge.
func (w *warmDialer) pruneLocked() {
	now := w.now()
	kept := w.idle[:0]
	for _, c := range w.idle {
		if now.Sub(c.dialed) > w.maxAge {
			_ = c.conn.Close()
			continue
		}
		kept = append(kept, c)
	}
	clear(w.idle[len(kept):])
	w.idle = kept
}

// readyCount is how many dialed connections wait to be taken.
func (w *warmDialer) readyCount() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}

// close closes the connections dialed ahead and stops dialing more.
func (w *warmDialer) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, c := range w.idle {
		_ = c.conn.Close()
	}
	w.idle = nil
}

type warmSignalKey struct{}

// WithWarmSignal has f called when a connection for a request made with
// ctx was dialed ahead, so a trace of the request knows it spent no dial
// or handshake of its own.
func WithWarmSignal(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, warmSignalKey{}, f)
}

func signalWarm(ctx context.Context) {
	if f, ok := ctx.Value(warmSignalKey{}).(func()); ok {
		f()
	}
}
