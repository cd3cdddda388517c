package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// RequestSeries are the per-request metrics' children, looked up once per
// label values: WithLabelValues validates and hashes its label values (and
// the code needed formatting) on every request. Children are created on
// first use, as before, so no series is exported before its first sample.
type RequestSeries struct {
	*Metrics
	counters  sync.Map // requestKey -> prometheus.Counter
	durations sync.Map // route -> prometheus.Observer
}

type requestKey struct {
	route string
	code  int
}

// NewRequestSeries looks up m's per-request children once each.
func NewRequestSeries(m *Metrics) *RequestSeries { return &RequestSeries{Metrics: m} }

// Requests is RequestsTotal's child for route and code.
func (s *RequestSeries) Requests(route string, code int) prometheus.Counter {
	key := requestKey{route, code}
	if c, ok := s.counters.Load(key); ok {
		return c.(prometheus.Counter)
	}
	c, _ := s.counters.LoadOrStore(key, s.RequestsTotal.WithLabelValues(route, strconv.Itoa(code)))
	return c.(prometheus.Counter)
}

// Duration is RequestDuration's child for route.
func (s *RequestSeries) Duration(route string) prometheus.Observer {
	if o, ok := s.durations.Load(route); ok {
		return o.(prometheus.Observer)
	}
	o, _ := s.durations.LoadOrStore(route, s.RequestDuration.WithLabelValues(route))
	return o.(prometheus.Observer)
}
