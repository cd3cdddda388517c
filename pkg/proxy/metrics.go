package proxy

import (
	"bufio"
	"net"
	"net/http"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// clientClosedRequest is the code recorded for a request whose client went
// away before any response (nginx's 499); it is never sent.
const clientClosedRequest = 499

// upgradeLinger bounds how long an upgraded client connection is kept after
// upstream ended the stream, for the client to read the rest and close.
const upgradeLinger = 10 * time.Second

// responseWriter records request metrics when headers are written (101 at
// hijack) and stream metrics until the request ends. It implements Flusher
// and Hijacker itself and unwraps for http.ResponseController.
type responseWriter struct {
	http.ResponseWriter
	metrics *metrics.RequestSeries
	state   *requestState
	start   time.Time

	wroteHeader bool
	hijacked    bool
	streamStart time.Time
	streamOpen  bool
	code        int
	written     int64
}

func newResponseWriter(w http.ResponseWriter, m *metrics.RequestSeries, state *requestState) *responseWriter {
	return &responseWriter{ResponseWriter: w, metrics: m, state: state, start: time.Now()}
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wroteHeader && !w.hijacked && code >= 200 {
		w.recordHeader(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader && !w.hijacked {
		w.recordHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	w.state.audit.wrote(w.code, b[:n])
	return n, err
}

func (w *responseWriter) Flush() { _ = w.FlushError() }

func (w *responseWriter) FlushError() error {
	if !w.wroteHeader && !w.hijacked {
		w.recordHeader(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack is called by ReverseProxy only after upstream answered 101 with the
// requested Upgrade type, right before it writes the 101 to the client.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.hijacked = true
	w.recordHeader(http.StatusSwitchingProtocols)
	return &upgradedConn{Conn: conn}, brw, nil
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *responseWriter) recordHeader(code int) {
	w.wroteHeader, w.code = true, code
	route := w.state.route
	w.metrics.Requests(route, code).Inc()
	w.metrics.Duration(route).Observe(time.Since(w.start).Seconds())
	if code == http.StatusSwitchingProtocols || (w.state.stream && code >= 200 && code < 300) {
		w.streamOpen = true
		w.streamStart = time.Now()
		w.metrics.ActiveStreams.WithLabelValues(route).Inc()
	}
	w.state.audit.header(code, w.streamOpen)
}

// finish runs when the request ends, also while a panic (ErrAbortHandler)
// unwinds; it never recovers.
func (w *responseWriter) finish() {
	if !w.wroteHeader && !w.hijacked {
		code := http.StatusOK // what net/http sends for a handler that wrote nothing
		if w.state.clientGone {
			code = clientClosedRequest
		}
		w.recordHeader(code)
	}
	if w.streamOpen {
		route := w.state.route
		w.metrics.ActiveStreams.WithLabelValues(route).Dec()
		w.metrics.StreamDuration.WithLabelValues(route).Observe(time.Since(w.streamStart).Seconds())
	}
	w.state.audit.finish(w.code, w.written)
}

// upgradedConn is the client side of an upgraded connection. ReverseProxy
// calls CloseWrite on it when upstream ends the stream and then waits for
// the client to close its side; the read deadline bounds that wait, so a
// client that never closes cannot pin the connection.
type upgradedConn struct {
	net.Conn
}

func (c *upgradedConn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return c.Conn.Close()
	}
	err := cw.CloseWrite()
	_ = c.Conn.SetReadDeadline(time.Now().Add(upgradeLinger))
	return err
}
