// Package metrics owns the gateway's Prometheus collectors. They live in one
// struct, registered once on a Registerer the caller chooses, so tests get a
// fresh registry and the binary has no metrics state outside what it wires.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "karmada_gateway"

// Route values label every request metric.
const (
	RoutePassthrough = "passthrough"
	RouteExec        = "exec"
	RouteAttach      = "attach"
	RouteLog         = "log"
	RoutePortForward = "portforward"
	// RouteServiceProxy is services/{name}/proxy rewritten to a member.
	RouteServiceProxy = "serviceproxy"
	// RoutePodProxy is pods/{name}/proxy rewritten to a member.
	RoutePodProxy = "podproxy"
	// RouteEvents is an events list or watch scoped to one pod, answered
	// with the member cluster's events merged in.
	RouteEvents = "events"
	// RouteEphemeralContainers is a write of pods/{name}/ephemeralcontainers
	// (kubectl debug), made in the template and in the member's copy.
	RouteEphemeralContainers = "ephemeralcontainers"
	// RouteRefused is a request the gateway's path guards answered
	// themselves (400, 405): nothing went upstream.
	RouteRefused = "refused"
)

// Resolve sources label resolve results.
const (
	SourceLabel   = "label"
	SourceBinding = "binding"
	SourceNone    = "none"
	// SourcePath: the request's server URL pinned the member cluster
	// (/clusters/<name>/).
	SourcePath = "path"
)

// Stream cut results label StreamCutsTotal: the client got an error, or
// the gateway found a cut it could not tell.
const (
	CutReported   = "reported"
	CutUnreported = "unreported"
)

// Limit scopes label stream limit rejections.
const (
	LimitScopeTotal  = "total"
	LimitScopeClient = "client"
)

// Metrics holds every collector the gateway exports.
type Metrics struct {
	// RequestsTotal counts requests by route and HTTP status code.
	RequestsTotal *prometheus.CounterVec
	// RequestDuration is the time until response headers (or 101) by route.
	RequestDuration *prometheus.HistogramVec
	// ActiveStreams is the number of upgraded or streaming connections by route.
	ActiveStreams *prometheus.GaugeVec
	// StreamDuration is how long upgraded or streaming connections lasted, by route.
	StreamDuration *prometheus.HistogramVec
	// ResolveTotal counts pod->cluster resolutions by source and result.
	ResolveTotal *prometheus.CounterVec
	// ResolveAmbiguousTotal counts resolutions of pods scheduled to several clusters.
	ResolveAmbiguousTotal prometheus.Counter
	// LabelerPatchesTotal counts label patches by result (success, error, conflict).
	LabelerPatchesTotal *prometheus.CounterVec
	// LabelLatency is the time from a binding's scheduling to its pod's label being set.
	LabelLatency prometheus.Histogram
	// LabelerLeader is 1 while this replica leads the labeler.
	LabelerLeader prometheus.Gauge
	// CacheObjects is the number of objects in each informer cache.
	CacheObjects *prometheus.GaugeVec
	// AuthDecisionsTotal counts authorize-mode decisions by result and whether they came from cache.
	AuthDecisionsTotal *prometheus.CounterVec
	// StreamLimitRejectionsTotal counts streams refused with 429 by the limit
	// that was hit: scope "total" (the whole gateway) or "client" (one identity).
	StreamLimitRejectionsTotal *prometheus.CounterVec
	// StreamCutsTotal counts streams a member cut without the end their
	// protocol promises (an exec or attach without its exit status, a log
	// follow while the container still runs: the node's kubelet or
	// container runtime died), by route and result: "reported" when the
	// client got an error, "unreported" when the gateway could not tell it
	// (the upstream ended inside a frame or message; a log follow's pod could not
	// be read to tell a cut from an end).
	StreamCutsTotal *prometheus.CounterVec
	// StreamHeartbeatsTotal counts heartbeats on exec and attach streams
	// by kind: "answered", a client's the gateway answered itself (never
	// relayed: pkg/streamfollow's heartbeat.go says why); "sent", the
	// gateway's own to an upstream that sent nothing for a period.
	StreamHeartbeatsTotal *prometheus.CounterVec
	// MemberEventsUnavailableTotal counts merged events requests that could
	// not read a member's events, by cluster: the client got karmada's events
	// and a warning, which only an alert on this makes an operator see.
	MemberEventsUnavailableTotal *prometheus.CounterVec
	// CertificateReloadsTotal counts reloads of files the gateway serves
	// with (the serving certificate, the client CA bundle) by name and
	// result (success, error): an error means it keeps serving the previous
	// ones, which only an alert on this makes an operator see before they
	// expire.
	CertificateReloadsTotal *prometheus.CounterVec
	// CertificateExpiry is the NotAfter, in Unix seconds, of the certificate
	// (or the first CA of the bundle to expire) being served, by name.
	CertificateExpiry *prometheus.GaugeVec
	// MemberAccess is 1 for the way the gateway reaches member clusters
	// (mode "cluster-proxy" or "direct"), so dashboards and alerts can
	// tell the replicas' paths apart.
	MemberAccess *prometheus.GaugeVec
	// MemberConnections is the number of connections open to each member
	// cluster in direct mode, idle ones in the pools included.
	MemberConnections *prometheus.GaugeVec
	// MemberDialsTotal counts connections dialed to each member cluster
	// (or its proxy) in direct mode, by result (success, error).
	MemberDialsTotal *prometheus.CounterVec
	// MemberTransportRebuildsTotal counts the times a member's connections
	// were closed because what they were trusted on changed, by cluster and
	// reason: "config_changed" (endpoint, CA, TLS or proxy of its Cluster or
	// Secret), "cluster_deleted", "cluster_unusable" (its Cluster or
	// published token or CA no longer lets it be reached).
	MemberTransportRebuildsTotal *prometheus.CounterVec
}

// Member access modes label MemberAccess.
const (
	MemberAccessClusterProxy = "cluster-proxy"
	MemberAccessDirect       = "direct"
)

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		RequestsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "requests_total",
			Help: "Requests handled by the gateway, by route and HTTP status code.",
		}, []string{"route", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "request_duration_seconds",
			Help:    "Time until response headers were written (or 101 Switching Protocols), by route.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"route"}),
		ActiveStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "active_streams",
			Help: "Streams (upgraded connections, watches, log follows, pods and services proxy requests) open now, by route.",
		}, []string{"route"}),
		StreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "stream_duration_seconds",
			Help:    "Lifetime of upgraded and streaming connections, by route.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12),
		}, []string{"route"}),
		ResolveTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "resolve_total",
			Help: "Pod to member cluster resolutions, by source (label, binding, path, none) and result.",
		}, []string{"source", "result"}),
		ResolveAmbiguousTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "resolve_ambiguous_total",
			Help: "Resolutions of pods whose binding schedules them to more than one cluster.",
		}),
		LabelerPatchesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "labeler_patches_total",
			Help: "Pod label patches sent by the labeler, by result.",
		}, []string{"result"}),
		LabelLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "label_latency_seconds",
			Help:    "Time from a ResourceBinding being scheduled to its pod carrying the cluster label.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		LabelerLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "labeler_leader",
			Help: "1 while this replica holds the labeler's leader lease.",
		}),
		CacheObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "informer_cache_objects",
			Help: "Objects held in each informer cache.",
		}, []string{"resource"}),
		AuthDecisionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "auth_decisions_total",
			Help: "authorize-mode decisions, by result (allowed, denied, unauthenticated, error) and cache (hit, miss).",
		}, []string{"result", "cache"}),
		StreamLimitRejectionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "stream_limit_rejections_total",
			Help: "Upgraded or streaming requests refused with 429 because a concurrency limit was reached, by scope (total, client).",
		}, []string{"scope"}),
		StreamCutsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "stream_cuts_total",
			Help: "Streams a member cut without the end their protocol promises (exec or attach without an exit status, log follow of a running container), by route and result (reported: the client got an error; unreported: the gateway could not tell it).",
		}, []string{"route", "result"}),
		StreamHeartbeatsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "stream_heartbeats_total",
			Help: "Heartbeats on exec and attach streams, by kind (answered: a client's, answered by the gateway; sent: the gateway's own, to an upstream silent for --stream-heartbeat-period).",
		}, []string{"kind"}),
		MemberEventsUnavailableTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "member_events_unavailable_total",
			Help: "Reads of a member cluster's pod events for a merged events list or watch that failed (lists: per request; watches: per outage), by cluster.",
		}, []string{"cluster"}),
		CertificateReloadsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "certificate_reloads_total",
			Help: "Changed certificate files read from disk, by name (serving, client-ca) and result (success, error; an error keeps the previous ones in use).",
		}, []string{"name", "result"}),
		CertificateExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "certificate_expiry_timestamp_seconds",
			Help: "NotAfter, in Unix seconds, of the certificate in use (for a CA bundle, of its first certificate to expire), by name (serving, client-ca).",
		}, []string{"name"}),
		MemberAccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "member_access",
			Help: "1 for the way this gateway reaches member clusters (mode: cluster-proxy through karmada-apiserver, or direct).",
		}, []string{"mode"}),
		MemberConnections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "member_connections",
			Help: "Connections open to each member cluster in direct mode, idle pooled ones included.",
		}, []string{"cluster"}),
		MemberDialsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "member_dials_total",
			Help: "Connections dialed to member clusters (or their proxies) in direct mode, by cluster and result (success, error).",
		}, []string{"cluster", "result"}),
		MemberTransportRebuildsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "member_transport_rebuilds_total",
			Help: "Times a member's direct connections were all closed, by cluster and reason (config_changed, cluster_deleted, cluster_unusable).",
		}, []string{"cluster", "reason"}),
	}
	// The routes a member can cut start at 0: a cut is rare, and a series
	// that only appears with the first one hides it from increase() and
	// leaves the dashboard's panel empty until then.
	for _, route := range []string{RouteExec, RouteAttach, RouteLog} {
		for _, result := range []string{CutReported, CutUnreported} {
			m.StreamCutsTotal.WithLabelValues(route, result)
		}
	}
	// Heartbeats start at 0 too: short streams have none.
	for _, kind := range []string{"answered", "sent"} {
		m.StreamHeartbeatsTotal.WithLabelValues(kind)
	}
	reg.MustRegister(
		m.RequestsTotal, m.RequestDuration, m.ActiveStreams, m.StreamDuration,
		m.ResolveTotal, m.ResolveAmbiguousTotal, m.LabelerPatchesTotal, m.LabelLatency,
		m.LabelerLeader, m.CacheObjects, m.AuthDecisionsTotal, m.StreamLimitRejectionsTotal,
		m.StreamCutsTotal, m.StreamHeartbeatsTotal, m.MemberEventsUnavailableTotal, m.CertificateReloadsTotal, m.CertificateExpiry,
		m.MemberAccess, m.MemberConnections, m.MemberDialsTotal, m.MemberTransportRebuildsTotal,
	)
	return m
}
