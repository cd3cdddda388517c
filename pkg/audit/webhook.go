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
	// Buffer is how many events wait at most; more are dropped.
	Buffer int
	// InitialBackoff is the first wait before a failed batch is retried;
	// it doubles up to Retries times, then the batch is dropped.
	InitialBackoff time.Duration
	Retries        int
	// Timeout bounds each POST.
	Timeout time.Duration
}

// WebhookSink sends events in audit.k8s.io/v1 EventList batches, as
// kube-apiserver's batching audit webhook does.
type WebhookSink struct {
	opts    WebhookOptions
	metrics *Metrics
	ch      chan []byte
}

// NewWebhookSink checks opts.
func NewWebhookSink(opts WebhookOptions, m *Metrics) (*WebhookSink, error) {
	if opts.Client == nil || opts.URL == "" || opts.BatchMaxSize <= 0 || opts.BatchMaxWait <= 0 || opts.Buffer <= 0 ||
		opts.InitialBackoff <= 0 || opts.Retries < 0 || opts.Timeout <= 0 {
		return nil, fmt.Errorf("audit webhook: incomplete options %+v", opts)
	}
	return &WebhookSink{opts: opts, metrics: m, ch: make(chan []byte, opts.Buffer)}, nil
}

func (s *WebhookSink) Name() string { return "webhook" }

func (s *WebhookSink) Enqueue(event []byte) bool {
	select {
	case s.ch <- event:
		return true
	default:
		return false
	}
}

// Run sends batches until ctx ends, then what is enqueued, for at most
// drain.
func (s *WebhookSink) Run(ctx context.Context, drain time.Duration) {
	for {
		var first []byte
		select {
		case first = <-s.ch:
		case <-ctx.Done():
			s.drain(drain, nil)
			return
		}
		batch := [][]byte{first}
		timer := time.NewTimer(s.opts.BatchMaxWait)
	collect:
		for len(batch) < s.opts.BatchMaxSize {
			select {
			case ev := <-s.ch:
				batch = append(batch, ev)
			case <-timer.C:
				break collect
			case <-ctx.Done():
				break collect
			}
		}
		timer.Stop()
		if ctx.Err() != nil {
			s.drain(drain, batch)
			return
		}
		s.send(ctx, batch)
	}
}

// drain sends batch and what is enqueued within d, and counts what it
// could not send as dropped.
func (s *WebhookSink) drain(d time.Duration, batch [][]byte) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
	collect:
		for len(batch) < s.opts.BatchMaxSize {
			select {
			case ev := <-s.ch:
				batch = append(batch, ev)
			default:
				break collect
			}
		}
		if len(batch) == 0 || ctx.Err() != nil {
			s.metrics.Dropped.WithLabelValues(s.Name()).Add(float64(len(batch) + len(s.ch)))
			return
		}
		s.send(ctx, batch)
		batch = nil
	}
}

// send POSTs batch, retrying with doubling backoff; a batch that fails
// every attempt, or whose retries ctx ended, is dropped and counted.
func (s *WebhookSink) send(ctx context.Context, batch [][]byte) {
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
