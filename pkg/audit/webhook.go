package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// WebhookOptions configures a WebhookSink; the defaults are
// kube-apiserver's audit webhook's where it has one.
type WebhookOptions struct {
	// Client and URL are where EventLists are POSTed (cmd/gateway builds
	// them from a kubeconfig, as kube-apiserver's --audit-webhook-config-file).
	Client *http.Client
	URL    string
	// BatchMaxSize events, or what came within BatchMaxWait of the first,
	// make a batch.
	BatchMaxSize int
	BatchMaxWait time.Duration
	// Buffer is how many events wait at most, BufferBytes how many bytes
	// they and the batch being sent take; more are dropped.
	Buffer      int
	BufferBytes int64
	// BatchMaxBytes bounds a batch's events' bytes, as kube-apiserver's
	// --audit-webhook-truncate-max-batch-size; 0 is DefaultBatchMaxBytes.
	BatchMaxBytes int
	// InitialBackoff is the first wait before a failed batch is retried;
	// it doubles up to Retries times, then the batch is dropped.
	InitialBackoff time.Duration
	Retries        int
	// Timeout bounds each POST.
	Timeout time.Duration
}

// DefaultBatchMaxBytes is WebhookOptions.BatchMaxBytes' default,
// kube-apiserver's --audit-webhook-truncate-max-batch-size.
const DefaultBatchMaxBytes = 10 << 20

// WebhookSink sends events in audit.k8s.io/v1 EventList batches, as
// kube-apiserver's batching audit webhook does.
type WebhookSink struct {
	opts    WebhookOptions
	metrics *Metrics
	q       *queue
	// next is an event taken from the queue that did not fit in the
	// batch before it, for the next one.
	next []byte
}

// NewWebhookSink checks opts.
func NewWebhookSink(opts WebhookOptions, m *Metrics) (*WebhookSink, error) {
	if opts.BatchMaxBytes == 0 {
		opts.BatchMaxBytes = DefaultBatchMaxBytes
	}
	if opts.Client == nil || opts.URL == "" || opts.BatchMaxSize <= 0 || opts.BatchMaxWait <= 0 || opts.Buffer <= 0 || opts.BufferBytes <= 0 ||
		opts.BatchMaxBytes < 0 || opts.InitialBackoff <= 0 || opts.Retries < 0 || opts.Timeout <= 0 {
		return nil, fmt.Errorf("audit webhook: incomplete options %+v", opts)
	}
	return &WebhookSink{opts: opts, metrics: m, q: newQueue(opts.Buffer, opts.BufferBytes)}, nil
}

func (s *WebhookSink) Name() string { return "webhook" }

func (s *WebhookSink) Enqueue(event []byte) bool { return s.q.push(event) }

// add collects events into b up to the batch's bounds: it adds ev and
// says whether the batch is full. An event that would take the batch past
// BatchMaxBytes is kept for the next one.
func (s *WebhookSink) add(b *batch, ev []byte) (full bool) {
	if len(b.events) > 0 && b.bytes+len(ev) > s.opts.BatchMaxBytes {
		s.next = ev
		return true
	}
	b.events = append(b.events, ev)
	b.bytes += len(ev)
	return len(b.events) >= s.opts.BatchMaxSize || b.bytes >= s.opts.BatchMaxBytes
}

// batch is the events of one EventList and their bytes.
type batch struct {
	events [][]byte
	bytes  int
}

// Run sends batches until ctx ends, then what is enqueued, for at most
// drain.
func (s *WebhookSink) Run(ctx context.Context, drain time.Duration) {
	for {
		var b batch
		if s.next != nil {
			ev := s.next
			s.next = nil
			s.add(&b, ev)
		} else {
			select {
			case ev := <-s.q.ch:
				s.add(&b, ev)
			case <-ctx.Done():
				s.drain(drain, b)
				return
			}
		}
		timer := time.NewTimer(s.opts.BatchMaxWait)
	collect:
		for s.next == nil && len(b.events) < s.opts.BatchMaxSize && b.bytes < s.opts.BatchMaxBytes {
			select {
			case ev := <-s.q.ch:
				if s.add(&b, ev) {
					break collect
				}
			case <-timer.C:
				break collect
			case <-ctx.Done():
				break collect
			}
		}
		timer.Stop()
		if ctx.Err() != nil {
			s.drain(drain, b)
			return
		}
		s.send(ctx, b)
	}
}

// drain sends b and what is enqueued within d, and counts what it could
// not send as dropped.
func (s *WebhookSink) drain(d time.Duration, b batch) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		if s.next != nil {
			ev := s.next
			s.next = nil
			s.add(&b, ev)
		}
	collect:
		for s.next == nil && len(b.events) < s.opts.BatchMaxSize && b.bytes < s.opts.BatchMaxBytes {
			select {
			case ev := <-s.q.ch:
				if s.add(&b, ev) {
					break collect
				}
			default:
				break collect
			}
		}
		if len(b.events) == 0 {
			return
		}
		if ctx.Err() != nil {
			s.drop(b)
			for {
				select {
				case ev := <-s.q.ch:
					s.drop(batch{events: [][]byte{ev}, bytes: len(ev)})
				default:
					if s.next != nil {
						s.drop(batch{events: [][]byte{s.next}, bytes: len(s.next)})
						s.next = nil
					}
					return
				}
			}
		}
		s.send(ctx, b)
		b = batch{}
	}
}

// drop counts b's events as dropped and gives their bytes back.
func (s *WebhookSink) drop(b batch) {
	s.metrics.Dropped.WithLabelValues(s.Name()).Add(float64(len(b.events)))
	s.q.done(b.bytes)
}

// send POSTs b, retrying with doubling backoff; a batch that fails
// every attempt, or whose retries ctx ended, is dropped and counted. Its
// bytes count against the queue's until then.
func (s *WebhookSink) send(ctx context.Context, b batch) {
	defer s.q.done(b.bytes)
	batch := b.events
	body := encodeList(batch)
	attempt := 0
	var failed error // the last attempt's
	backoff := wait.Backoff{Duration: s.opts.InitialBackoff, Factor: 2, Steps: s.opts.Retries + 1}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		attempt++
		if failed = s.post(ctx, body); failed != nil {
			s.metrics.Errors.WithLabelValues(s.Name()).Inc()
			klog.Background().V(2).Info("Audit webhook batch failed", "attempt", attempt, "events", len(batch), "err", failed)
			return false, nil
		}
		return true, nil
	})
	if err == nil {
		return
	}
	if failed == nil {
		failed = err
	}
	s.metrics.Dropped.WithLabelValues(s.Name()).Add(float64(len(batch)))
	klog.Background().Error(failed, "Audit webhook batch dropped", "events", len(batch))
}

func (s *WebhookSink) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := s.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 1<<10))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Errorf("audit webhook answered %d: %s", res.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// encodeList is the EventList of the encoded events.
func encodeList(batch [][]byte) []byte {
	list := EventList{Kind: "EventList", APIVersion: "audit.k8s.io/v1", Items: make([]json.RawMessage, len(batch))}
	for i, b := range batch {
		list.Items[i] = b
	}
	b, err := json.Marshal(list)
	if err != nil { // raw items came from json.Marshal
		panic(errors.Join(errors.New("encoding an audit EventList"), err))
	}
	return b
}
