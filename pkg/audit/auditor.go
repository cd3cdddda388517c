package audit

import (
	"context"
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

// DefaultMaxEventSize is Options.MaxEventSize's default, kube-apiserver's
// --audit-log-truncate-max-event-size.
const DefaultMaxEventSize = 100 << 10

// Options configures an Auditor.
type Options struct {
	// Metrics are the audit collectors; the sinks are given the same to
	// count their errors and drops.
	Metrics *Metrics
	// MaxEventSize bounds an encoded event, as kube-apiserver's truncating
	// backend bounds its own: the fields a client chooses the length of
	// (the request URI, the command, the user agent, impersonated groups)
	// are cut first and the event marked audit.k8s.io/truncated; one that
	// still does not fit is dropped and counted. 0 is DefaultMaxEventSize.
	MaxEventSize int
	Sinks        []Sink
}

// Auditor encodes each event once and hands it to every sink.
type Auditor struct {
	sinks        []Sink
	metrics      *Metrics
	maxEventSize int
	wg           sync.WaitGroup
	// held counts the trails still to write events (Hold).
	held sync.WaitGroup
}

// New is an Auditor writing to opts.Sinks.
func New(opts Options) *Auditor {
	for _, s := range opts.Sinks {
		opts.Metrics.Events.WithLabelValues(s.Name())
		opts.Metrics.Dropped.WithLabelValues(s.Name())
		opts.Metrics.Errors.WithLabelValues(s.Name())
	}
	if opts.MaxEventSize <= 0 {
		opts.MaxEventSize = DefaultMaxEventSize
	}
	return &Auditor{sinks: opts.Sinks, metrics: opts.Metrics, maxEventSize: opts.MaxEventSize}
}

// Start runs the sinks until ctx ends and the events held back were
// written (Hold); Wait waits for them to drain.
func (a *Auditor) Start(ctx context.Context, drain time.Duration) {
	stopped, stop := context.WithCancel(context.Background())
	go func() {
		<-ctx.Done()
		a.held.Wait() // each is bounded: callerWait
		stop()
	}()
	for _, s := range a.sinks {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			s.Run(stopped, drain)
		}()
	}
}

// Wait returns once every sink has drained after Start's context ended.
func (a *Auditor) Wait() { a.wg.Wait() }

// Hold keeps the sinks running until release: a trail writes events once
// their caller is known.
func (a *Auditor) Hold() (release func()) {
	a.held.Add(1)
	var once sync.Once
	return func() { once.Do(a.held.Done) }
}

// Record writes req's event for stage, which happened at at; id ties a
// request's stages together.
func (a *Auditor) Record(stage string, id types.UID, req *Request, at time.Time) {
	b, err := encodeWithin(NewEvent(stage, id, req, at, a.maxEventSize), a.maxEventSize)
	if err != nil {
		klog.Background().Error(err, "Audit event dropped", "stage", stage, "auditID", id)
		for _, s := range a.sinks {
			a.metrics.Dropped.WithLabelValues(s.Name()).Inc()
		}
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
