package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/admission"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/inflight"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberaccess"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/resolver"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/serving"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamlimit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/upstream"
)

// AuthMode selects who authenticates and authorizes requests.
type AuthMode string

const (
	// AuthPassthrough forwards the caller's credentials unchanged and never
	// adds the gateway's: karmada-apiserver decides everything.
	AuthPassthrough AuthMode = "passthrough"
	// AuthAuthorize authorizes rewritten routes in the gateway and calls the
	// cluster proxy with the gateway's identity.
	AuthAuthorize AuthMode = "authorize"
)

// DefaultUpstreamHeaderTimeout is Options.UpstreamHeaderTimeout's default.
const DefaultUpstreamHeaderTimeout = upstream.DefaultHeaderTimeout

var podsResource = schema.GroupResource{Resource: "pods"}

// Options configures a Proxy.
type Options struct {
	// Upstream is karmada-apiserver, from --kubeconfig or in-cluster config.
	// Its credentials are the gateway's identity, used only in authorize mode.
	Upstream *rest.Config
	// Resolver maps pods to member clusters. Required.
	Resolver Resolver
	// ServiceResolver, when set, makes the gateway rewrite
	// services/{name}/proxy to the cluster proxy of the Service's member
	// cluster (in authorize mode after authorizing the original request, as
	// pod subresources are). Nil passes services/proxy through unchanged.
	ServiceResolver ServiceResolver
	// Events, when set, builds the EventsMerger that answers the events
	// requests it claims, given the Proxy it calls back into
	// (pkg/memberevents merges member clusters' events into pod-scoped
	// lists and watches). Nil passes every events request through.
	Events func(*Proxy) (EventsMerger, error)
	// AuthMode defaults to AuthPassthrough.
	AuthMode AuthMode
	// Authorizer is required in authorize mode.
	Authorizer Authorizer
	// Metrics receives request and stream metrics; nil records into a
	// private registry.
	Metrics *metrics.Metrics
	// MaxStreams bounds the streams open at once, as isStreamRequest
	// classifies every request before routing (any Upgrade, watch or follow
	// on any path, pods/services/nodes proxy, also below the cluster proxy);
	// MaxStreamsPerClient bounds them per client identity (see
	// identity.ClientKey). A request over either limit gets 429 before anything
	// is sent upstream. 0 is unlimited.
	MaxStreams          int
	MaxStreamsPerClient int
	// Auditor, when set, is told of every request routed to a member
	// cluster and every refusal of one (pkg/audit); Recorder records exec
	// and attach sessions (pkg/recording).
	Auditor  Auditor
	Recorder *recording.Recorder
	// LogEndWindow bounds how long a pods/log follow that upstream ended
	// cleanly is held while the member's pod is read to tell the
	// container's end from a cut (see watchLogFollow); 0 is 10s.
	LogEndWindow time.Duration
	// UpstreamHeaderTimeout bounds how long karmada-apiserver, or a member
	// through its cluster proxy, may take to answer a request with response
	// headers (a 101 for an upgrade), from when the request was sent; past it
	// the client gets a 504 Status naming the upstream. It bounds every
	// request, log follows included (a kubelet answers a follow's headers
	// at once, before the container's first line: e2e
	// TestHungDependencies' follow probes), and never a response once it
	// started (watches, streams). 0 is DefaultUpstreamHeaderTimeout;
	// negative is none.
	UpstreamHeaderTimeout time.Duration
	// StreamHeartbeatPeriod and StreamHeartbeatDeadline time the
	// heartbeats the gateway sends upstream on an exec or attach that went
	// silent, and how long it waits for upstream's answer before it cuts
	// the stream (pkg/streamfollow); 0 is 5 s and 60 s.
	StreamHeartbeatPeriod, StreamHeartbeatDeadline time.Duration
	// Admissions reuses passthrough admission checks' 200s; nil: none.
	Admissions *admission.Cache
	// ForwardedFor says what becomes of a client's X-Forwarded-For;
	// "" is ForwardedForAppend.
	ForwardedFor ForwardedFor
	// Members, when set, reaches member clusters' kube-apiservers directly
	// (--member-access=direct) rather than through Karmada's cluster proxy
	// in karmada-apiserver; see direct.go. In passthrough mode it needs an
	// Authorizer, which authenticates callers and authorizes clusters/proxy
	// for them as karmada-apiserver would.
	Members MemberAccess
	// GatewayIdentity is the gateway's own identity, which a member reached
	// directly acts as in authorize mode, once karmada-apiserver allows it
	// the ResourceRequest (its clusters/proxy on the Cluster, as for its
	// own call through the cluster proxy: *memberaccess.Self's ActAs);
	// required with Members in authorize mode.
	GatewayIdentity func(context.Context, identity.ResourceRequest) (identity.Caller, error)
	// StreamEndWait bounds how long Shutdown, once its context ended and
	// it ended the requests still open, waits for them to write their
	// audit events and recordings; 0 is DefaultStreamEndWait.
	StreamEndWait time.Duration
}

// DefaultStreamEndWait is Options.StreamEndWait's default: the chart gives
// the pod --shutdown-grace-period plus 15 s, which this and the audit
// sinks' drain share.
const DefaultStreamEndWait = 3 * time.Second

// Proxy is the gateway's HTTP handler.
type Proxy struct {
	upstream   *upstream.Transports
	resolver   Resolver
	services   ServiceResolver
	authMode   AuthMode
	authorizer Authorizer
	metrics    *metrics.Metrics
	series     *metrics.RequestSeries
	router     http.Handler
	reverse    *httputil.ReverseProxy
	limiter    *streamlimit.Limiter
	events     EventsMerger
	auditor    Auditor
	recorder   *recording.Recorder
	admissions *admission.Cache
	// logEndWindow is Options.LogEndWindow, defaulted.
	logEndWindow time.Duration
	// headerTimeout is Options.UpstreamHeaderTimeout, defaulted.
	headerTimeout time.Duration
	// heartbeatPeriod and heartbeatDeadline are Options'
	// StreamHeartbeatPeriod and StreamHeartbeatDeadline (0: streamfollow's
	// defaults).
	heartbeatPeriod, heartbeatDeadline time.Duration
	// inflight parents every request's context and drains them.
	inflight *inflight.Tracker
	// streams are the followed upgraded streams open, for Shutdown;
	// streamEndWait is Options.StreamEndWait, defaulted.
	streams       openStreams
	streamEndWait time.Duration
	// reviews learns passthrough callers for the audit (nil otherwise).
	reviews *callerReviews
	// forwardedFor is Options.ForwardedFor, defaulted.
	forwardedFor ForwardedFor
	// members reaches members directly (nil: through the cluster proxy);
	// gatewayIdentity is whom they act as in authorize mode.
	members         MemberAccess
	gatewayIdentity func(context.Context, identity.ResourceRequest) (identity.Caller, error)
}

// New builds a Proxy from opts.
func New(opts Options) (*Proxy, error) {
	if opts.Resolver == nil {
		return nil, errors.New("proxy: a Resolver is required")
	}
	switch opts.AuthMode {
	case "":
		opts.AuthMode = AuthPassthrough
	case AuthPassthrough:
		if opts.Members != nil && opts.Authorizer == nil {
			return nil, errors.New("proxy: direct member access in passthrough mode requires an Authorizer")
		}
	case AuthAuthorize:
		if opts.Authorizer == nil {
			return nil, errors.New("proxy: authorize mode requires an Authorizer")
		}
		if opts.Members != nil && opts.GatewayIdentity == nil {
			return nil, errors.New("proxy: direct member access in authorize mode requires the gateway's identity")
		}
	default:
		return nil, fmt.Errorf("proxy: unknown auth mode %q", opts.AuthMode)
	}
	if opts.StreamHeartbeatPeriod < 0 || opts.StreamHeartbeatDeadline < 0 {
		return nil, errors.New("proxy: stream heartbeat period and deadline must not be negative")
	}
	if opts.MaxStreams < 0 || opts.MaxStreamsPerClient < 0 {
		return nil, errors.New("proxy: stream limits must not be negative (0 is unlimited)")
	}
	up, err := upstream.New(opts.Upstream)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(prometheus.NewRegistry())
	}
	if opts.LogEndWindow <= 0 {
		opts.LogEndWindow = defaultLogEndWindow
	}
	if opts.UpstreamHeaderTimeout == 0 {
		opts.UpstreamHeaderTimeout = DefaultUpstreamHeaderTimeout
	}
	if opts.StreamEndWait <= 0 {
		opts.StreamEndWait = DefaultStreamEndWait
	}
	if opts.ForwardedFor == "" {
		opts.ForwardedFor = ForwardedForAppend
	}
	if _, err := ParseForwardedFor(string(opts.ForwardedFor)); err != nil {
		return nil, fmt.Errorf("proxy: forwarded-for: %w", err)
	}
	p := &Proxy{
		upstream:        up,
		resolver:        opts.Resolver,
		services:        opts.ServiceResolver,
		authMode:        opts.AuthMode,
		authorizer:      opts.Authorizer,
		metrics:         opts.Metrics,
		series:          metrics.NewRequestSeries(opts.Metrics),
		limiter:         streamlimit.New(opts.MaxStreams, opts.MaxStreamsPerClient),
		logEndWindow:    opts.LogEndWindow,
		auditor:         opts.Auditor,
		recorder:        opts.Recorder,
		admissions:      opts.Admissions,
		inflight:        inflight.New(),
		headerTimeout:   opts.UpstreamHeaderTimeout,
		heartbeatPeriod: opts.StreamHeartbeatPeriod, heartbeatDeadline: opts.StreamHeartbeatDeadline,
		streamEndWait: opts.StreamEndWait,
		forwardedFor:  opts.ForwardedFor,
		members:       opts.Members,

		gatewayIdentity: opts.GatewayIdentity,
	}
	access := metrics.MemberAccessClusterProxy
	if p.members != nil {
		access = metrics.MemberAccessDirect
	}
	p.metrics.MemberAccess.WithLabelValues(access).Set(1)
	if p.auditor != nil && p.authMode == AuthPassthrough {
		p.reviews = newCallerReviews(p.upstream.For(false, false), strings.TrimSuffix(p.upstream.Base.String(), "/"))
	}
	p.reverse = &httputil.ReverseProxy{
		Rewrite:   p.rewriteRequest,
		Transport: roundTripperFunc(p.roundTrip),
		// 0, not -1: ReverseProxy flushes every write anyway for the
		// responses that stream (no Content-Length: watches, log follows,
		// most LISTs; text/event-stream). A response of known length is
		// whole, and flushing it per write only cost a frame and a syscall
		// each (HTTP/2 sent HEADERS, DATA and END_STREAM apart).
		FlushInterval:  0,
		BufferPool:     copyBuffers{},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.handleError,
		ErrorLog:       log.New(klogWriter{}, "", 0),
	}
	var services http.HandlerFunc
	if p.services != nil {
		services = p.serveServiceProxy
	}
	var events func(http.Handler) http.Handler
	if opts.Events != nil {
		if p.events, err = opts.Events(p); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		events = routeClaimed(p.events.Claims, p.serveEvents)
	}
	var clusterKnown func(string) bool
	if k, ok := opts.Resolver.(ClusterKnower); ok {
		clusterKnown = k.ClusterKnown
	}
	p.router = newRouter(routes{
		rewrite: p.serveRewrite, passthrough: p.servePassthrough, pods: p.servePodProxy,
		services: services, ephemeral: p.serveEphemeralContainers, events: events, clusterKnown: clusterKnown,
	})
	return p, nil
}

// requestState is what the handlers decide about one request, read by the
// Rewrite hook, the transport, the error handler and the metrics writer.
type requestState struct {
	route string
	// upgrade: the request asks for an Upgrade. stream: it takes a stream
	// slot (isStreamRequest), upgrades included.
	upgrade, stream bool
	// releaseStream gives the stream slot back; set once holdStream took it.
	releaseStream func()
	// clientGone marks a request whose client left before any response.
	clientGone bool

	upstreamName string // for error messages and logs
	// pinned is the member cluster the path prefix pinned (pinClusterPath).
	pinned string
	// cluster is the member a rewritten request goes to; pod, for pod
	// subresources, the pod. Streams name them when a member cuts them.
	// member, in direct mode, is how it is reached (nil: through
	// karmada-apiserver).
	cluster string
	member  *memberaccess.Member
	// warmedMember is the member an upgrade's connection was dialed ahead
	// to, from the pod's label (warmUpMember).
	warmedMember string
	pod          PodRequest
	// placement is what resolving the pod learnt: the template's and the
	// member pod's UIDs, for the audit events (resolvePod).
	placement       resolver.Placement
	path, rawPath   string // outbound path below the upstream base path
	gatewayIdentity bool
	editHeader      func(http.Header)
	// certVerified is set once the Authorizer accepted the client
	// certificate as the request's credential.
	certVerified bool
	// caller is the identity passthrough sends the request with, for the
	// EventsMerger's reads (serveEvents).
	caller upstreamIdentity
	// authorized is the caller authorize mode allowed, refusedBy why it
	// did not; audit is the request's audit trail (nil without Auditor).
	authorized *identity.Caller
	refusedBy  error
	audit      *audit.Trail
	// phases times an upgrade's setup for the debug log (nil unless V(4)).
	phases *upstream.Phases
	// ephemeral is what a pods/ephemeralcontainers write adds, for the
	// audit event (debugContainers).
	ephemeral string
	// recording is the session's recording, started before the upgrade
	// is forwarded; followed, the upgraded stream once it is followed.
	recording *recording.Session
	followed  *streamfollow.Stream
	// attribution is who the caller is, for the audit events (nil
	// without Auditor); sourceIPs where it comes from, as sent upstream.
	attribution *identity.Attribution
	sourceIPs   []string
}

type stateKey struct{}

func stateFrom(ctx context.Context) *requestState {
	s, _ := ctx.Value(stateKey{}).(*requestState)
	return s
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Whether a request is a stream is decided here, once, before any route
	// sees it: a stream limit that each route had to remember could be
	// bypassed by the route that forgot.
	state := &requestState{
		route: metrics.RoutePassthrough, upstreamName: upstream.Karmada,
		upgrade: upgradeType(r.Header) != "", stream: isStreamRequest(r),
	}
	state.phases = upstream.NewPhases(klog.FromContext(r.Context()), state.upgrade)
	if p.auditor != nil {
		state.sourceIPs = p.sourceIPs(r)
		state.attribution = identity.NewAttribution()
		state.audit = audit.NewTrail(p.auditor, r, string(p.authMode), state.decided, state.attribution)
	}
	var hooks metrics.ResponseHooks
	if state.audit != nil {
		hooks = state.audit
	}
	rw := metrics.NewResponseWriter(w, p.series, func() metrics.RequestInfo {
		return metrics.RequestInfo{Route: state.route, Stream: state.stream, ClientGone: state.clientGone}
	}, hooks)
	rw.WrapHijacked = serving.Lingering
	if !p.inflight.Enter() {
		defer rw.Finish()
		rw.Header().Set("Connection", "close")
		apiresponse.WriteStatus(rw, apierrors.NewServiceUnavailable("gateway shutting down"))
		return
	}
	// Leave comes last: a drain waits for the request's audit event
	// (Finish) and, before it, its stream's end and recording (forward).
	defer p.inflight.Leave()
	defer rw.Finish()
	// ReverseProxy returns only when the stream ended, upgraded ones
	// included, so a slot is held exactly as long as the stream.
	defer func() {
		if state.releaseStream != nil {
			state.releaseStream()
		}
	}()

	// The request keeps the server's context values (ReverseProxy only
	// aborts a cut stream when it sees it runs under an http.Server) and is
	// also cancelled when a drain runs out of time.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(p.inflight.Context(), cancel)
	defer stop()
	ctx = context.WithValue(ctx, stateKey{}, state)
	ctx = identity.WithAttribution(ctx, state.attribution)

	p.router.ServeHTTP(rw, r.WithContext(ctx))
}

func (p *Proxy) serveRewrite(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	state := stateFrom(ctx)
	pr, ok := parsePodRequest(r.URL)
	if !ok { // guardPodRequests already refused these; never rewrite what was not parsed
		refuse(w, r, apierrors.NewBadRequest("invalid pod subresource path"))
		return
	}
	state.route = pr.Subresource
	state.pod = pr
	logger := klog.FromContext(ctx).WithValues("namespace", pr.Namespace, "pod", pr.Name, "subresource", pr.Subresource)

	if state.upgrade {
		p.warmUpMember(ctx, pr.Namespace, pr.Name)
	}
	// Authorize (or, in passthrough mode, have karmada-apiserver judge the
	// caller) before resolving, so placement is not disclosed to callers
	// who may not use the pod.
	if p.authMode == AuthAuthorize {
		if state.upgrade && p.members == nil {
			// The upgrade will need a connection as the gateway: dial it
			// while the caller is authorized (nothing is sent on it before).
			p.upstream.WarmUp(true)
		}
		for _, rr := range identity.PodStreamRequests(r.Method, pr.Namespace, pr.Name, pr.Subresource) {
			if logger, ok = p.authorizeAsGateway(w, r, rr, logger); !ok {
				return
			}
		}
		if pr.Subresource == "log" && r.Method != http.MethodGet {
			// kube-apiserver serves pods/log with GET only: having
			// authorized create as it does, answer its 405 here rather
			// than let the member refuse the gateway's identity.
			w.Header().Set("Allow", http.MethodGet)
			apiresponse.WriteStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "pods/log"}, r.Method))
			return
		}
	} else if !p.admittedByKarmada(w, r, podsResource.Resource, pr.Namespace, pr.Name) {
		return
	}

	resolved := state.phases.TimeResolve()
	cluster, err := p.resolvePod(ctx, pr.Namespace, pr.Name)
	resolved()
	if err != nil {
		logger.V(2).Info("Pod not resolved to a member cluster", "err", err)
		apiresponse.WriteStatus(w, err)
		return
	}
	path := "/api/v1/namespaces/" + pr.Namespace + "/pods/" + pr.Name + "/" + pr.Subresource
	if !p.routeToCluster(w, r, logger, cluster, "pod "+pr.Namespace+"/"+pr.Name, path, "", "") {
		return
	}
	if p.recorder != nil && state.upgrade {
		// Before the upgrade goes upstream: failing closed, a session that
		// cannot be recorded never starts.
		if state.recording, err = p.recorder.Start(r, pr.Namespace, pr.Name, pr.Subresource); err != nil {
			refuseUpgrade(w, r)
			apiresponse.WriteStatus(w, err)
			return
		}
	}
	logger.V(4).Info("Rewriting to the member cluster", "cluster", cluster, "upstream", state.upstreamName)
	p.forward(w, r)
}

// authorizeAsGateway asks the Authorizer whether the caller of r may do rr
// and, if so, has the request sent with the gateway's identity and without
// any identity header of the client's. Otherwise it writes the Status and
// returns false.
func (p *Proxy) authorizeAsGateway(w http.ResponseWriter, r *http.Request, rr identity.ResourceRequest, logger klog.Logger) (klog.Logger, bool) {
	logger, ok := p.authorize(w, r, rr, logger)
	if !ok {
		return logger, false
	}
	state := stateFrom(r.Context())
	state.certVerified = !identity.HasBearerToken(r) && identity.HasClientCertificate(r)
	state.gatewayIdentity = true
	state.editHeader = identity.StripHeaders
	return logger, true
}

// authorize is authorize mode's decision on r: the Authorizer's answer to
// whether its caller may do rr, noted for the audit event. A refusal is
// written and reported false.
func (p *Proxy) authorize(w http.ResponseWriter, r *http.Request, rr identity.ResourceRequest, logger klog.Logger) (klog.Logger, bool) {
	state := stateFrom(r.Context())
	done := state.phases.TimeCheck("authorization")
	caller, err := p.authorizer.AuthorizeResource(r.Context(), r, rr)
	done()
	state.authorizedBy(caller, err)
	if err != nil {
		logger.V(2).Info("Request not authorized", "err", err)
		apiresponse.WriteStatus(w, err)
		return logger, false
	}
	return logger.WithValues("user", caller.Name), true
}

// routeToCluster points the request at prefix+rest below cluster: its
// cluster proxy, or its kube-apiserver in direct mode (restPath is rest
// decoded; rest is sent as the escaped form when they differ). A cluster
// name that is not a DNS label could change the path, so it is refused
// with a 500 naming object. Otherwise the Status is written and it returns
// false.
func (p *Proxy) routeToCluster(w http.ResponseWriter, r *http.Request, logger klog.Logger, cluster, object, prefix, rest, restPath string) bool {
	state := stateFrom(r.Context())
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		logger.Error(nil, "Resolver returned an invalid cluster name", "cluster", cluster)
		apiresponse.WriteStatus(w, apierrors.NewInternalError(fmt.Errorf("invalid member cluster name %q for %s", cluster, object)))
		return false
	}
	state.cluster = cluster
	base := p.memberPath(cluster, prefix)
	path, rawPath := base+restPath, ""
	if rest != restPath {
		rawPath = base + rest
	}
	if p.members != nil {
		return p.routeToMember(w, r, state, cluster, path, rawPath)
	}
	state.upstreamName = upstream.ClusterProxyName(cluster)
	state.path, state.rawPath = path, rawPath
	return true
}

// partialObjectMetadataJSON: the admission check needs a verdict, not the object.
const partialObjectMetadataJSON = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// maxCheckBodyBytes bounds what is read of an admission check's answer (a Status).
const maxCheckBodyBytes = 1 << 20

// admittedByKarmada lets karmada-apiserver speak first in passthrough mode.
// The Resolver answers from the gateway's caches, so without this check a
// caller karmada-apiserver would refuse learns from a 404, 409 or 503 (or a
// 403 from the cluster proxy naming the cluster) whether the object exists
// and where it runs. Before a rewritten route resolves anything, the gateway
// GETs the object itself with the caller's own credentials and identity
// headers, from karmada-apiserver's watch cache (resourceVersion=0, so no
// etcd read per exec). A 200 lets the request go on; any other answer is
// karmada-apiserver's own for this caller and is relayed as it came.
// With Options.Admissions a 200 is reused for the same headers and object.
func (p *Proxy) admittedByKarmada(w http.ResponseWriter, r *http.Request, resource, namespace, name string) bool {
	state := stateFrom(r.Context())
	if !p.holdStream(w, r, state) { // a refused stream sends nothing upstream, the check included
		return false
	}
	if state.upgrade && p.members == nil {
		// The upgrade will need a new connection: dial it while
		// karmada-apiserver judges the caller. Nothing is sent on it
		// before the check allowed the request.
		p.upstream.WarmUp(false)
	}
	edit, err := identity.PlainRequestHeader(r.Header)
	if err != nil {
		klog.FromContext(r.Context()).V(2).Info("WebSocket bearer token refused", "err", fmt.Errorf("admission check: %w", err))
		refuseUpgrade(w, r)
		apiresponse.WriteStatus(w, apierrors.NewUnauthorized("Unauthorized")) // kube-apiserver's answer to it
		return false
	}
	path := "/api/v1/namespaces/" + namespace + "/" + resource + "/" + name + "?resourceVersion=0"
	as := upstreamIdentity{editHeader: edit}
	var key admission.Key
	if p.admissions != nil {
		key = admission.KeyOf(checkHeader(r, as, partialObjectMetadataJSON), path)
	}
	if p.admissions.Admitted(key) {
		return true
	}
	done := state.phases.TimeCheck("admission")
	res, err := p.getAccepting(r.Context(), r, as, path, partialObjectMetadataJSON)
	done()
	if err != nil {
		p.handleError(w, r, fmt.Errorf("checking the caller's access to %s %s/%s: %w", resource, namespace, name, err))
		return false
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxCheckBodyBytes))
	if err != nil {
		p.handleError(w, r, fmt.Errorf("checking the caller's access to %s %s/%s: %w", resource, namespace, name, err))
		return false
	}
	p.credentialAccepted(r, res.StatusCode)
	if res.StatusCode == http.StatusOK {
		p.admissions.Remember(key)
		return true
	}
	klog.FromContext(r.Context()).V(2).Info("karmada-apiserver refused the caller", "resource", resource, "namespace", namespace, "name", name, "code", res.StatusCode)
	refuseUpgrade(w, r)
	apiresponse.Relay(w, res, body)
	return false
}

// refuseUpgrade closes the client connection after the gateway refused an
// upgrade, as after any refused upgrade, so that nothing the client sends
// next is taken for tunnelled bytes.
func refuseUpgrade(w http.ResponseWriter, r *http.Request) {
	if upgradeType(r.Header) != "" {
		w.Header().Set("Connection", "close")
	}
}

func (p *Proxy) servePassthrough(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if targetsPodSubresource(r.URL) {
		// Unreachable behind guardPodRequests; passthrough must never carry a
		// pod stream request karmada-apiserver would refuse as host-less.
		refuse(w, r, apierrors.NewBadRequest("invalid pod subresource path"))
		return
	}
	id, err := p.passthroughIdentity(ctx, r)
	if err != nil {
		apiresponse.WriteStatus(w, err)
		return
	}
	p.forwardAs(w, r, id)
}

// forwardAs forwards r to karmada-apiserver unchanged, with id's
// credentials.
func (p *Proxy) forwardAs(w http.ResponseWriter, r *http.Request, id upstreamIdentity) {
	state := stateFrom(r.Context())
	state.path, state.rawPath = r.URL.Path, r.URL.RawPath
	state.certVerified, state.gatewayIdentity, state.editHeader = id.certVerified, id.gateway, id.editHeader
	p.forward(w, r)
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	state := stateFrom(r.Context())
	up := upgradeType(r.Header)
	if up != "" && !isPrintableASCII(up) {
		apiresponse.WriteStatus(w, apierrors.NewBadRequest("invalid Upgrade header"))
		return
	}
	if !p.holdStream(w, r, state) {
		return
	}
	// A body gets as long to arrive as the upstream gets to answer.
	if err := upstream.Replayable(w, r, p.headerTimeout); err != nil {
		p.abandonRecording(state)
		apiresponse.WriteStatus(w, err)
		return
	}
	p.reverse.ServeHTTP(w, r)
	// ReverseProxy closes an upgraded stream in a goroutine of its own,
	// after it returned: closed here, the stream's end (its audit event
	// and recording) is written before the request ends, so a drain that
	// waits for requests waits for it too.
	if s := state.followed; s != nil {
		_ = s.Close()
		p.streams.remove(s)
	}
	p.abandonRecording(state)
}

// abandonRecording removes a recording started for a session that never
// began (no 101 came).
func (p *Proxy) abandonRecording(state *requestState) {
	if rec := state.recording; rec != nil && !rec.Attached() {
		rec.Abandon()
	}
}

// rewriteRequest is the ReverseProxy Rewrite hook. It points the request at
// the upstream and undoes ReverseProxy's generic-proxy edits that would
// break byte-for-byte forwarding.
func (p *Proxy) rewriteRequest(pr *httputil.ProxyRequest) {
	state := stateFrom(pr.In.Context())
	out := pr.Out
	base := p.upstream.Base
	if state.member != nil {
		base = state.member.Base
	}
	out.URL.Scheme = base.Scheme
	out.URL.Host = base.Host
	out.URL.Path = base.Path + state.path
	out.URL.RawPath = ""
	if state.rawPath != "" {
		out.URL.RawPath = base.EscapedPath() + state.rawPath
	}
	out.URL.RawQuery = pr.In.URL.RawQuery
	out.Host = "" // the Host header becomes the upstream's

	p.setForwarded(pr.In, out.Header)
	if state.editHeader != nil {
		state.editHeader(out.Header)
	}
}

func (p *Proxy) roundTrip(req *http.Request) (*http.Response, error) {
	state := stateFrom(req.Context())
	rt := p.upstream.For(state.gatewayIdentity, state.upgrade)
	if state.member != nil {
		rt = state.member.For(state.upgrade)
	}
	if state.phases == nil {
		return upstream.RoundTripWithin(rt, req, p.headerTimeout, state.upstreamName)
	}
	res, err := upstream.RoundTripWithin(rt, state.phases.WithTrace(req), p.headerTimeout, state.upstreamName)
	code := 0
	if err == nil {
		code = res.StatusCode
	}
	state.phases.Log(klog.FromContext(req.Context()).WithValues("upstream", state.upstreamName), code)
	return res, err
}

// copyBufferSize is ReverseProxy's own default, the size io.Copy uses.
const copyBufferSize = 32 << 10

var copyBufferPool = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

// copyBuffers lends ReverseProxy its body copy buffers: without a pool it
// allocates 32 KiB per response, most of what a small GET allocated.
// Arrays, not slices, go into the pool so that Put does not allocate.
type copyBuffers struct{}

func (copyBuffers) Get() []byte { return copyBufferPool.Get().(*[copyBufferSize]byte)[:] }

func (copyBuffers) Put(b []byte) {
	if len(b) == copyBufferSize {
		copyBufferPool.Put((*[copyBufferSize]byte)(b))
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var errUpgradeMismatch = errors.New("upstream switched to another protocol than requested")

// modifyResponse refuses a 101 of another Upgrade type than requested, and
// closes the client connection after a refused upgrade so that nothing the
// client sends next can be taken for tunnelled bytes. It has the streams
// whose cut a member can make look like their end watched: SPDY exec and
// attach for their exit status (streamfollow.Stream), log follows for their
// container's end (streamfollow.FollowedLog). A cluster proxy's own failure
// to reach its member is reported naming them
// (upstream.ReportMemberUnreachable).
func (p *Proxy) modifyResponse(res *http.Response) error {
	requested := upgradeType(res.Request.Header)
	if res.StatusCode == http.StatusSwitchingProtocols {
		if got := upgradeType(res.Header); requested == "" || !strings.EqualFold(requested, got) {
			return fmt.Errorf("%w: requested %q, got %q", errUpgradeMismatch, requested, got)
		}
		return p.followStream(res)
	}
	if requested != "" {
		res.Header.Set("Connection", "close")
	}
	if state := stateFrom(res.Request.Context()); state != nil {
		if !state.gatewayIdentity {
			p.credentialAccepted(res.Request, res.StatusCode)
		}
		// A member's own answers in direct mode are relayed as they are:
		// only the cluster proxy's failures need telling apart.
		if state.member == nil {
			if err := upstream.ReportMemberUnreachable(res, state.cluster, podSubresourceRoute(state.route)); err != nil {
				return err
			}
		}
	}
	if res.StatusCode == http.StatusOK {
		p.watchLogFollow(res)
	}
	return nil
}

func (p *Proxy) handleError(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	state := stateFrom(ctx)
	logger := klog.FromContext(ctx).WithValues("method", r.Method, "path", r.URL.EscapedPath(), "route", state.route, "upstream", state.upstreamName)
	if rw, ok := w.(*metrics.ResponseWriter); ok && rw.Hijacked() {
		logger.V(2).Info("Upgraded stream ended with an error", "err", err)
		return
	}
	var timeout *upstream.TimeoutError
	switch {
	case errors.As(err, &timeout) && ctx.Err() == nil:
		// The upstream hung: say which, rather than hold the client until
		// it gives up.
		logger.Info("Upstream sent no response in time", "err", err)
		apiresponse.WriteStatus(w, timeout.Status())
	case errors.Is(err, errUpgradeMismatch):
		logger.Info("Refusing upstream protocol switch", "err", err)
		apiresponse.WriteStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusBadGateway, Reason: metav1.StatusReasonInternalError,
			Message: fmt.Sprintf("error upgrading the connection through %s: %v", state.upstreamName, err),
		}})
	case errors.As(err, new(apierrors.APIStatus)):
		// The gateway refused the stream itself (a recording that fails
		// closed): its Status says why.
		logger.Info("Refusing an upgraded stream", "err", err)
		apiresponse.WriteStatus(w, err)
	case ctx.Err() != nil && p.inflight.Context().Err() != nil:
		apiresponse.WriteStatus(w, apierrors.NewServiceUnavailable("gateway shutting down"))
	case ctx.Err() != nil:
		// The client went away; there is nobody to answer.
		logger.V(4).Info("Client cancelled the request", "err", err)
		state.clientGone = true
	default:
		if state.member != nil {
			// A dialer's error may quote the member's proxy URL.
			err = errors.New(state.member.Scrub(err.Error()))
		}
		logger.Error(err, "Upstream unreachable")
		apiresponse.WriteStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("error trying to reach %s: %v", state.upstreamName, err)))
	}
}

// Shutdown stops accepting requests (they get 503) and waits for in-flight
// ones, upgraded and streaming included, to end. When ctx ends first it
// ends them: each followed exec and attach gets a Failure on its error
// channel saying the gateway shut down, every request is cancelled, and
// Shutdown waits up to Options.StreamEndWait more for them to end, so
// their audit events and recordings are written, before it returns
// ctx.Err(). Run it alongside http.Server.Shutdown, which does not wait
// for hijacked connections.
func (p *Proxy) Shutdown(ctx context.Context) error {
	defer p.upstream.CloseIdleConnections()
	err := p.inflight.Drain(ctx)
	if err == nil {
		return nil
	}
	ended := p.streams.terminateAll(streamfollow.EndGatewayShutdown, shutdownStatus())
	open := p.inflight.Cancel()
	klog.FromContext(ctx).Info("Shutdown grace period over: ending the requests still open", "requests", open, "followedStreams", ended)
	wait, cancel := context.WithTimeout(context.Background(), p.streamEndWait)
	defer cancel()
	if werr := p.inflight.Wait(wait); werr != nil {
		klog.FromContext(ctx).Error(werr, "Requests still open after the gateway ended them", "requests", p.inflight.Open(), "waited", p.streamEndWait)
	}
	return err
}

// shutdownStatus tells a client why the gateway ended its stream at
// shutdown.
func shutdownStatus() metav1.Status {
	return metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     http.StatusServiceUnavailable,
		Reason:   metav1.StatusReasonServiceUnavailable,
		Message: "the gateway ended the stream: it is shutting down and the stream outlived its grace period " +
			"(--shutdown-grace-period); the command's outcome is unknown",
	}
}

// upgradeType is the requested protocol, as ReverseProxy determines it.
func upgradeType(h http.Header) string {
	if !containsFold(headerTokens(h["Connection"]), "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

func headerTokens(values []string) []string {
	var tokens []string
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				tokens = append(tokens, t)
			}
		}
	}
	return tokens
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// klogWriter routes ReverseProxy's own log lines (body copy errors of cut
// streams) to klog at a verbosity that keeps them out of normal logs.
type klogWriter struct{}

func (klogWriter) Write(b []byte) (int, error) {
	klog.Background().V(2).Info("Reverse proxy", "msg", strings.TrimSpace(string(b)))
	return len(b), nil
}

// podSubresourceRoute: route is a pod's exec, attach, log or portforward,
// which a member's kube-apiserver answers with a Status when it fails.
func podSubresourceRoute(route string) bool {
	switch route {
	case metrics.RouteExec, metrics.RouteAttach, metrics.RouteLog, metrics.RoutePortForward:
		return true
	}
	return false
}
