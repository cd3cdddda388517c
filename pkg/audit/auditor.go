package audit

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Sink takes encoded events. Enqueue must not block: it reports false when
// the sink's buffer is full and the event is dropped.
type Sink interface {
	Name() string
	Enqueue(event []byte) bool
	// Run writes what is enqueued until ctx ends, then what is left,
	// within drain.
	Run(ctx context.Context, drain time.Duration)
}

// Metrics are the audit collectors.
type Metrics struct {
	// Events counts events a sink took, Dropped those its full buffer
	// could not, Errors its failed writes (a webhook batch that failed
	// every retry counts its events in Dropped too).
	Events, Dropped, Errors *prometheus.CounterVec
}

// NewMetrics registers the audit collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "karmada_gateway", Name: "audit_events_total",
			Help: "Audit events a sink took into its buffer, by sink (log, webhook).",
		}, []string{"sink"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "karmada_gateway", Name: "audit_events_dropped_total",
			Help: "Audit events lost, by sink: its buffer was full, or a webhook batch failed every retry. Streams are never held for auditing.",
		}, []string{"sink"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "karmada_gateway", Name: "audit_sink_errors_total",
			Help: "Failed audit writes, by sink: a log file write or rotation, a webhook request (each attempt).",
		}, []string{"sink"}),
	}
	reg.MustRegister(m.Events, m.Dropped, m.Errors)
	return m
}

// Auditor encodes each event once and hands it to every sink.
type Auditor struct {
	sinks   []Sink
	metrics *Metrics
	wg      sync.WaitGroup
	now     func() time.Time
}

// New is an Auditor writing to sinks; its metrics are m (the sinks are
// given the same to count their errors and drops).
func New(m *Metrics, sinks ...Sink) *Auditor {
	for _, s := range sinks {
		m.Events.WithLabelValues(s.Name())
		m.Dropped.WithLabelValues(s.Name())
		m.Errors.WithLabelValues(s.Name())
	}
	return &Auditor{sinks: sinks, metrics: m, now: time.Now}
}

// Start runs the sinks until ctx ends; Wait waits for them to drain.
func (a *Auditor) Start(ctx context.Context, drain time.Duration) {
	for _, s := range a.sinks {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			s.Run(ctx, drain)
		}()
	}
}

// Wait returns once every sink has drained after Start's context ended.
func (a *Auditor) Wait() { a.wg.Wait() }

// Record writes req's event for stage; id ties a request's stages
// together.
func (a *Auditor) Record(stage string, id types.UID, req *Request) {
	b, err := json.Marshal(NewEvent(stage, id, req, a.now()))
	if err != nil { // every field marshals; a bug, not the client's
		klog.Background().Error(err, "Encoding an audit event")
		return
	}
	for _, s := range a.sinks {
		if s.Enqueue(b) {
			a.metrics.Events.WithLabelValues(s.Name()).Inc()
		} else {
			a.metrics.Dropped.WithLabelValues(s.Name()).Inc()
		}
	}
}
