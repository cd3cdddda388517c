package upstream

import (
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Phases times where opening an upgraded stream (exec, attach,
// port-forward) spends its time, for one debug line (V(4)) per upgrade once
// the upstream answered: the check before anything goes upstream (the
// passthrough admission GET, or authorize mode's authorization), resolving
// the pod's member (in authorize mode, a read of the member's copy through
// the cluster proxy), getting a
// connection to karmada-apiserver (a warm one, or a dial with its TLS
// handshake, resumed or full), and the upstream's time to its answer.
// These are the phases issue #27 measured from outside; the log line says
// which one grew. A nil *Phases records nothing, so callers need not
// check whether debug logging is on.
type Phases struct {
	mu    sync.Mutex
	start time.Time
	check time.Duration
	// checkName is "admission" or "authorization".
	checkName string
	resolve   time.Duration

	getConn, gotConn, tlsStart, tlsDone, wrote, firstByte time.Time
	reused, resumed, warm                                 bool
}

// NewPhases starts timing an upgrade request when logger logs at
// V(4); otherwise it returns nil and nothing is timed.
func NewPhases(logger klog.Logger, upgrade bool) *Phases {
	if !upgrade || !logger.V(4).Enabled() {
		return nil
	}
	return &Phases{start: time.Now()}
}

// TimeCheck starts timing the check named name; call the returned func
// when it is over.
func (s *Phases) TimeCheck(name string) func() {
	if s == nil {
		return func() {}
	}
	t0 := time.Now()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.check += time.Since(t0)
		s.checkName = name
	}
}

// TimeResolve starts timing the Resolver; call the returned func when it
// answered.
func (s *Phases) TimeResolve() func() {
	if s == nil {
		return func() {}
	}
	t0 := time.Now()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.resolve += time.Since(t0)
	}
}

func (s *Phases) mark(t *time.Time) {
	s.mu.Lock()
	*t = time.Now()
	s.mu.Unlock()
}

// WithTrace returns req traced into s.
func (s *Phases) WithTrace(req *http.Request) *http.Request {
	if s == nil {
		return req
	}
	trace := &httptrace.ClientTrace{
		GetConn: func(string) { s.mark(&s.getConn) },
		GotConn: func(info httptrace.GotConnInfo) {
			s.mark(&s.gotConn)
			s.mu.Lock()
			s.reused = info.Reused
			s.mu.Unlock()
		},
		TLSHandshakeStart: func() { s.mark(&s.tlsStart) },
		TLSHandshakeDone: func(cs tls.ConnectionState, _ error) {
			s.mark(&s.tlsDone)
			s.mu.Lock()
			s.resumed = cs.DidResume
			s.mu.Unlock()
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { s.mark(&s.wrote) },
		GotFirstResponseByte: func() { s.mark(&s.firstByte) },
	}
	return req.WithContext(WithWarmSignal(httptrace.WithClientTrace(req.Context(), trace), func() {
		s.mu.Lock()
		s.warm = true
		s.mu.Unlock()
	}))
}

// Log writes the phases as one line, once the upstream answered with code
// (0: it did not).
func (s *Phases) Log(logger klog.Logger, code int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	since := func(from, to time.Time) time.Duration {
		if from.IsZero() || to.IsZero() {
			return 0
		}
		return to.Sub(from)
	}
	logger.V(4).Info("Upgrade phases",
		"code", code,
		"check", s.checkName, "checkDuration", s.check, "resolve", s.resolve,
		"connect", since(s.getConn, s.gotConn), "warmConnection", s.warm, "reusedConnection", s.reused,
		"tlsHandshake", since(s.tlsStart, s.tlsDone), "tlsResumed", s.resumed,
		"upstreamAnswer", since(s.wrote, s.firstByte),
		"total", time.Since(s.start))
}
