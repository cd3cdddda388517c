package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
)

// auditOptions are the audit flags, named and defaulted as kube-apiserver's
// (--audit-log-*, --audit-webhook-*), so operators find what they know.
type auditOptions struct {
	logPath            string
	logMaxSizeMB       int
	logMaxBackup       int
	logBufferSize      int
	logBufferBytes     int64
	webhookConfig      string
	webhookBatch       int
	webhookBatchBytes  int
	webhookWait        time.Duration
	webhookBuffer      int
	webhookBufferBytes int64
	webhookBackoff     time.Duration
	webhookRetries     int
	webhookTimeout     time.Duration
	maxEventSize       int
	drain              time.Duration
}

func bindAuditFlags(fs *flag.FlagSet) *auditOptions {
	o := &auditOptions{}
	fs.StringVar(&o.logPath, "audit-log-path", "", "write an audit.k8s.io/v1 event (JSON line, mode 0600) for every request routed to a member cluster and every refusal of one to this file; empty disables the audit log")
	fs.IntVar(&o.logMaxSizeMB, "audit-log-maxsize", 100, "size in megabytes at which the audit log is rotated")
	fs.IntVar(&o.logMaxBackup, "audit-log-maxbackup", 5, "rotated audit log files kept (the log takes at most (maxbackup+1) x maxsize)")
	fs.IntVar(&o.logBufferSize, "audit-log-buffer-size", 10000, "audit events waiting for the log writer at most; more are dropped and counted (karmada_gateway_audit_events_dropped_total), never waited for")
	fs.Int64Var(&o.logBufferBytes, "audit-log-buffer-max-bytes", 32<<20, "bytes the audit events waiting for the log writer take at most; more are dropped and counted, never waited for")
	fs.IntVar(&o.maxEventSize, "audit-max-event-size", audit.DefaultMaxEventSize, "bytes an encoded audit event takes at most, as kube-apiserver's --audit-log-truncate-max-event-size: the request URI, command, user agent and impersonation a client sends are cut first (annotation audit.k8s.io/truncated); an event that still does not fit is dropped and counted")
	fs.StringVar(&o.webhookConfig, "audit-webhook-config-file", "", "kubeconfig naming the audit webhook (its server URL and credentials), as kube-apiserver's; events are POSTed as audit.k8s.io/v1 EventList batches")
	fs.IntVar(&o.webhookBatch, "audit-webhook-batch-max-size", 400, "most events in one webhook batch")
	fs.DurationVar(&o.webhookWait, "audit-webhook-batch-max-wait", 30*time.Second, "longest an event waits for its webhook batch to fill")
	fs.IntVar(&o.webhookBatchBytes, "audit-webhook-batch-max-bytes", audit.DefaultBatchMaxBytes, "bytes of events in one webhook batch at most, as kube-apiserver's --audit-webhook-truncate-max-batch-size")
	fs.IntVar(&o.webhookBuffer, "audit-webhook-batch-buffer-size", 10000, "audit events waiting for the webhook at most; more are dropped and counted, never waited for")
	fs.Int64Var(&o.webhookBufferBytes, "audit-webhook-batch-buffer-max-bytes", 32<<20, "bytes the audit events waiting for the webhook, and the batch being sent, take at most; more are dropped and counted, never waited for")
	fs.DurationVar(&o.webhookBackoff, "audit-webhook-initial-backoff", 10*time.Second, "wait before a failed webhook batch is retried; it doubles at each retry")
	fs.IntVar(&o.webhookRetries, "audit-webhook-retries", 3, "retries of a failed webhook batch before it is dropped and counted")
	fs.DurationVar(&o.webhookTimeout, "audit-webhook-timeout", 30*time.Second, "deadline of each webhook request")
	fs.DurationVar(&o.drain, "audit-drain-timeout", 10*time.Second, "on shutdown, how long events still buffered may take to be written or sent")
	return o
}

func (o *auditOptions) validate() error {
	if o.logPath != "" && (o.logMaxSizeMB <= 0 || o.logMaxBackup < 0 || o.logBufferSize <= 0 || o.logBufferBytes <= 0) {
		return errors.New("--audit-log-maxsize, --audit-log-buffer-size and --audit-log-buffer-max-bytes must be positive, --audit-log-maxbackup not negative")
	}
	if o.webhookConfig != "" && (o.webhookBatch <= 0 || o.webhookBatchBytes <= 0 || o.webhookWait <= 0 || o.webhookBuffer <= 0 || o.webhookBufferBytes <= 0 ||
		o.webhookBackoff <= 0 || o.webhookRetries < 0 || o.webhookTimeout <= 0) {
		return errors.New("--audit-webhook-* sizes and durations must be positive, retries not negative")
	}
	if o.maxEventSize < 1024 {
		return errors.New("--audit-max-event-size must be at least 1024 bytes")
	}
	return nil
}

// build is the Auditor the flags ask for, or nil when neither sink is
// configured. Its collectors are on reg either way, at 0 for both sinks:
// the dashboard's panel and the alerts read a series that exists.
func (o *auditOptions) build(reg prometheus.Registerer) (*audit.Auditor, error) {
	m := audit.NewMetrics(reg)
	for _, sink := range []string{"log", "webhook"} {
		m.Events.WithLabelValues(sink)
		m.Dropped.WithLabelValues(sink)
		m.Errors.WithLabelValues(sink)
	}
	if o.logPath == "" && o.webhookConfig == "" {
		return nil, nil
	}
	var sinks []audit.Sink
	if o.logPath != "" {
		s, err := audit.NewFileSink(audit.FileOptions{
			Path: o.logPath, MaxSize: int64(o.logMaxSizeMB) << 20, MaxBackups: o.logMaxBackup, Buffer: o.logBufferSize, BufferBytes: o.logBufferBytes,
		}, m)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, s)
	}
	if o.webhookConfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.webhookConfig)
		if err != nil {
			return nil, fmt.Errorf("--audit-webhook-config-file: %w", err)
		}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("--audit-webhook-config-file: %w", err)
		}
		s, err := audit.NewWebhookSink(audit.WebhookOptions{
			Client: client, URL: cfg.Host, BatchMaxSize: o.webhookBatch, BatchMaxBytes: o.webhookBatchBytes, BatchMaxWait: o.webhookWait,
			Buffer: o.webhookBuffer, BufferBytes: o.webhookBufferBytes,
			InitialBackoff: o.webhookBackoff, Retries: o.webhookRetries, Timeout: o.webhookTimeout,
		}, m)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, s)
	}
	return audit.New(audit.Options{Metrics: m, MaxEventSize: o.maxEventSize, Sinks: sinks}), nil
}

// startAudit builds and starts the Auditor; stop, once the proxy drained,
// has it write what is left and returns when it did.
func (o *auditOptions) start(reg prometheus.Registerer) (a *audit.Auditor, stop func(), err error) {
	a, err = o.build(reg)
	if a == nil || err != nil {
		return nil, func() {}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.Start(ctx, o.drain)
	return a, func() { cancel(); a.Wait() }, nil
}
