package metrics

import (
	"bufio"
	"net"
	"net/http"
	"time"
)

// ClientClosedRequest is the code recorded for a request whose client went
// away before any response (nginx's 499); it is never sent.
const ClientClosedRequest = 499

// RequestInfo is what the handlers decided about a request so far.
type RequestInfo struct {
	// Route labels its metrics; Stream: it takes a stream slot;
	// ClientGone: its client left before any response.
	Route      string
	Stream     bool
	ClientGone bool
}

// ResponseHooks are told of a response as it goes (*audit.Trail).
type ResponseHooks interface {
	Header(code int, stream bool)
	Wrote(code int, b []byte)
	Finish(code int, written int64)
}

// ResponseWriter records request metrics when headers are written (101 at
// hijack) and stream metrics until the request ends, and tells Hooks (the
// audit trail) of the response as it goes. It implements Flusher and
// Hijacker itself and unwraps for http.ResponseController.
type ResponseWriter struct {
	http.ResponseWriter
	metrics *RequestSeries
	info    func() RequestInfo
	hooks   ResponseHooks
	// WrapHijacked, when set, wraps the hijacked client connection.
	WrapHijacked func(net.Conn) net.Conn
	start        time.Time

	wroteHeader bool
	hijacked    bool
	streamStart time.Time
	streamOpen  bool
	code        int
	written     int64
}

// NewResponseWriter records w's response in m; info is read when a metric
// is recorded (the handlers decide the route as they go); hooks may be nil.
func NewResponseWriter(w http.ResponseWriter, m *RequestSeries, info func() RequestInfo, hooks ResponseHooks) *ResponseWriter {
	return &ResponseWriter{ResponseWriter: w, metrics: m, info: info, hooks: hooks, start: time.Now()}
}

func (w *ResponseWriter) WriteHeader(code int) {
	if !w.wroteHeader && !w.hijacked && code >= 200 {
		w.recordHeader(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *ResponseWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader && !w.hijacked {
		w.recordHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	if w.hooks != nil {
		w.hooks.Wrote(w.code, b[:n])
	}
	return n, err
}

func (w *ResponseWriter) Flush() { _ = w.FlushError() }

func (w *ResponseWriter) FlushError() error {
	if !w.wroteHeader && !w.hijacked {
		w.recordHeader(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack is called by ReverseProxy only after upstream answered 101 with the
// requested Upgrade type, right before it writes the 101 to the client.
func (w *ResponseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.hijacked = true
	w.recordHeader(http.StatusSwitchingProtocols)
	if w.WrapHijacked != nil {
		conn = w.WrapHijacked(conn)
	}
	return conn, brw, nil
}

func (w *ResponseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *ResponseWriter) recordHeader(code int) {
	w.wroteHeader, w.code = true, code
	info := w.info()
	route := info.Route
	w.metrics.Requests(route, code).Inc()
	w.metrics.Duration(route).Observe(time.Since(w.start).Seconds())
	if code == http.StatusSwitchingProtocols || (info.Stream && code >= 200 && code < 300) {
		w.streamOpen = true
		w.streamStart = time.Now()
		w.metrics.ActiveStreams.WithLabelValues(route).Inc()
	}
	if w.hooks != nil {
		w.hooks.Header(code, w.streamOpen)
	}
}

// Finish runs when the request ends, also while a panic (ErrAbortHandler)
// unwinds; it never recovers.
func (w *ResponseWriter) Finish() {
	if !w.wroteHeader && !w.hijacked {
		code := http.StatusOK // what net/http sends for a handler that wrote nothing
		if w.info().ClientGone {
			code = ClientClosedRequest
		}
		w.recordHeader(code)
	}
	if w.streamOpen {
		route := w.info().Route
		w.metrics.ActiveStreams.WithLabelValues(route).Dec()
		w.metrics.StreamDuration.WithLabelValues(route).Observe(time.Since(w.streamStart).Seconds())
	}
	if w.hooks != nil {
		w.hooks.Finish(w.code, w.written)
	}
}

// Hijacked reports whether the connection was hijacked (upgraded).
func (w *ResponseWriter) Hijacked() bool { return w.hijacked }
