package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/auth"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberevents"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/serving"
)

type options struct {
	kubeconfig          string
	bindAddr            string
	tlsCertFile         string
	tlsKeyFile          string
	insecureHTTP        bool
	metricsAddr         string
	authMode            string
	memberAccess        string
	memberTrustSecret   string
	forwardedFor        string
	authFailedPerSource float64
	clientCAFile        string
	authCacheTTL        time.Duration
	enableLabeler       bool
	labelerWorkers      int
	leaderElect         bool
	leaseNamespace      string
	leaseName           string
	leaseDuration       time.Duration
	renewDeadline       time.Duration
	retryPeriod         time.Duration
	shutdownGrace       time.Duration
	resync              time.Duration
	readHeaderTimeout   time.Duration
	idleTimeout         time.Duration
	heartbeatPeriod     time.Duration
	heartbeatDeadline   time.Duration
	certReloadInterval  time.Duration
	maxHeaderBytes      int
	clientQPS           float64
	clientBurst         int
	maxStreams          int
	maxStreamsPerClient int
	enableServiceProxy  bool
	mergeMemberEvents   bool
	profiling           bool
	audit               *auditOptions
	recording           *recordingOptions

	upstreamHeaderTimeout time.Duration
	authTimeout           time.Duration
	memberTimeout         time.Duration
	memberCopyCacheTTL    time.Duration
	admissionCacheTTL     time.Duration
	kubeAPITimeout        time.Duration
}

// bindFlags registers every flag; the README's flag table mirrors this list.
func bindFlags(fs *flag.FlagSet) *options {
	o := &options{audit: bindAuditFlags(fs), recording: bindRecordingFlags(fs)}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of karmada-apiserver (the gateway's own identity); empty uses the in-cluster config")
	fs.StringVar(&o.bindAddr, "bind-address", ":8443", "address the proxy serves on")
	fs.StringVar(&o.tlsCertFile, "tls-cert-file", "", "serving certificate (PEM) for the proxy")
	fs.StringVar(&o.tlsKeyFile, "tls-key-file", "", "serving key (PEM) for the proxy")
	fs.BoolVar(&o.insecureHTTP, "insecure-serve-http", false, "serve the proxy over plain HTTP instead of TLS (only behind a TLS-terminating hop you trust)")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address for /metrics, /healthz and /readyz")
	fs.BoolVar(&o.profiling, "profiling", false, "serve Go's pprof profiles under /debug/pprof/ on the metrics address")
	fs.StringVar(&o.authMode, "auth-mode", string(proxy.AuthPassthrough), "passthrough: callers' credentials go upstream unchanged; authorize: the gateway authenticates and authorizes callers and calls the cluster proxy as itself")
	fs.StringVar(&o.memberAccess, "member-access", metrics.MemberAccessClusterProxy, "how rewritten requests reach member clusters: cluster-proxy (through karmada-apiserver and Karmada's cluster proxy) or direct (the gateway dials each member's kube-apiserver from its Cluster object, as karmada-aggregated-apiserver does, with the member's impersonator token; needs get/list/watch on the --member-trust-secret Secret, and in passthrough mode TokenReviews and SubjectAccessReviews)")
	fs.StringVar(&o.clientCAFile, "client-ca-file", "", "CA bundle that verifies client certificates (authorize mode)")
	fs.StringVar(&o.memberTrustSecret, "member-trust-secret", defaultMemberTrustSecret, "--member-access=direct: namespace/name of the Secret `gateway member-trust` publishes each Cluster's impersonator token and CA in; the gateway reads that Secret alone, never the Secrets the Clusters name")
	fs.DurationVar(&o.authCacheTTL, "auth-cache-ttl", 10*time.Second, "how long the gateway's own authentication and authorization results are cached (authorize mode; passthrough mode with --member-access=direct)")
	fs.Float64Var(&o.authFailedPerSource, "auth-failed-per-source", float64(auth.DefaultFailedPerSource), "authorize mode and --member-access=direct: failed authentications a second a client address may cause (twice that at once); past it, its tokens not known good get 429 without a TokenReview (a token that authenticated within the hour always gets one); negative is unlimited")
	fs.BoolVar(&o.enableLabeler, "enable-labeler", true, "run the controller that labels pod templates with cluster.karmada.io/name")
	fs.IntVar(&o.labelerWorkers, "labeler-workers", 4, "concurrent label patches")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "run the labeler only while holding a Lease, so several replicas are safe")
	fs.StringVar(&o.leaseNamespace, "leader-election-namespace", "karmada-system", "namespace of the labeler's Lease in karmada-apiserver")
	fs.StringVar(&o.leaseName, "leader-election-id", "karmada-exec-gateway-labeler", "name of the labeler's Lease")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "Lease duration")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "Lease renew deadline")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "Lease retry period")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace-period", 30*time.Second, "on SIGTERM, how long open exec/attach/log/port-forward streams may drain before they are cut")
	fs.DurationVar(&o.resync, "resync-period", 10*time.Minute, "informer resync period")
	fs.DurationVar(&o.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time a client has to send request headers (guards against slowloris)")
	fs.DurationVar(&o.heartbeatPeriod, "stream-heartbeat-period", 5*time.Second, "on an exec or attach, the gateway answers the client's heartbeats itself (relayed, one reaching a proxy that already closed makes it drop the end of the output: kubernetes/kubernetes#124571) and sends upstream a heartbeat of its own after this long without a byte from it, which keeps idle streams alive through proxies with idle timeouts")
	fs.DurationVar(&o.heartbeatDeadline, "stream-heartbeat-deadline", time.Minute, "an exec or attach whose upstream sends nothing for this long after the gateway's heartbeat is cut, and the client told it timed out (client-go gives up on its own heartbeats after 61 s)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", serving.DefaultIdleTimeout, "close a keep-alive connection (an HTTP/2 connection: one with no open stream) after this long without a request, on the proxy and metrics ports; never applies to open exec/attach/port-forward streams, watches or log -f (0 = never)")
	fs.DurationVar(&o.certReloadInterval, "certificate-reload-interval", serving.DefaultReloadInterval, "how often --tls-cert-file, --tls-key-file and --client-ca-file are read again; changed files are used from the next connection (client CA: request) on, and files that do not load leave the previous ones in use")
	fs.IntVar(&o.maxHeaderBytes, "max-header-bytes", 1<<20, "largest request header block accepted")
	fs.StringVar(&o.forwardedFor, "forwarded-for", string(proxy.ForwardedForAppend), "what becomes of a client's X-Forwarded-For, which karmada-apiserver's audit log and the gateway's take as the request's source IPs: append (keep it and append the peer's address, behind a load balancer or ingress that sets it) or replace (send the peer's address alone, where the gateway is the first hop and anything a client sends is a claim)")
	// One label patch per new pod, and in authorize mode up to two reviews
	// per uncached decision: 200 keeps up with 100 new CI pods a second.
	fs.Float64Var(&o.clientQPS, "kube-api-qps", 200, "QPS of the gateway's own clients (caches, label patches, reviews)")
	fs.IntVar(&o.clientBurst, "kube-api-burst", 400, "burst of the gateway's own clients")
	// An open stream costs the gateway two TLS connections, their copy
	// buffers and a few goroutines: ~210 KiB measured on loopback for client,
	// gateway and upstream together, ~130 KiB of it the gateway's. 2000 take
	// ~260 MiB, inside the chart's 512Mi limit beside the informer caches.
	// 200 per client lets one runner manager hold ~60 concurrent jobs (attach,
	// exec and log -f each) while leaving nine tenths of the total to others.
	fs.IntVar(&o.maxStreams, "max-streams", 2000, "most streams open at once: any Upgrade (exec, attach, port-forward, WebSocket), watch or follow on any path, pods/services/nodes proxy requests, on every route; over it clients get 429 (0 = unlimited)")
	fs.IntVar(&o.maxStreamsPerClient, "max-streams-per-client", 200, "most such streams open at once per client identity (bearer token hash, verified client certificate subject, else remote IP); over it clients get 429 (0 = unlimited)")
	fs.BoolVar(&o.enableServiceProxy, "enable-service-proxy", false, "rewrite services/{name}/proxy to the cluster proxy of the Service's member cluster (needs list/watch on services; in authorize mode the gateway authorizes each request as kube-apiserver would and its own identity needs services/proxy in every member)")
	fs.BoolVar(&o.mergeMemberEvents, "merge-member-events", true, "merge the member cluster's events into events lists and watches scoped to one pod (fieldSelector involvedObject.name=<pod>), rewritten to the template's UID; in authorize mode the member's are read with the gateway's identity once a SubjectAccessReview allows the caller to list or watch events in the namespace")
	// Deadlines of the gateway's outbound calls: a dependency that hangs
	// must cost a client a Status naming it, not a request held until the
	// client gives up.
	fs.DurationVar(&o.upstreamHeaderTimeout, "upstream-header-timeout", proxy.DefaultUpstreamHeaderTimeout, "time karmada-apiserver, or a member cluster (through its cluster proxy, or directly), has to answer a forwarded request with response headers (101 for exec, attach, port-forward); past it the client gets a 504 Status naming which. Never cuts a response once it started (watches, streams); log follows get their headers at once too")
	fs.DurationVar(&o.authTimeout, "auth-timeout", auth.DefaultTimeout, "authorize mode and --member-access=direct: time karmada-apiserver has to answer each TokenReview and SubjectAccessReview; past it the client gets a 504 Status")
	fs.DurationVar(&o.memberTimeout, "member-timeout", memberevents.DefaultMemberTimeout, "time a member cluster has, through its cluster proxy or directly, to answer the reads the gateway makes on its own: its events merged into a pod's events list (past it the list carries karmada-apiserver's events and a Warning), and in authorize mode the check that the member's pod is the template's copy")
	fs.DurationVar(&o.memberCopyCacheTTL, "member-copy-cache-ttl", 0, "authorize mode: how long a member pod read for the check that it is the template's copy is reused for later streams to it (0 = read before every stream). Saves a round trip through the cluster proxy per exec and attach; a member object that Karmada does not manage, put in place of Karmada's copy, may be reached as the gateway for up to this long (a template deleted and recreated is refused at once: the check compares the template's current UID)")
	fs.DurationVar(&o.admissionCacheTTL, "admission-cache-ttl", 0, "passthrough mode: how long karmada-apiserver's 200 to the admission check (a GET of the pod or Service with the caller's own headers, before each stream) is reused for the same headers and object (0 = check before every stream). Saves a round trip per exec and attach; a caller whose access to the object is revoked can still open streams to it for up to this long (Karmada's cluster proxy and the member still check each one)")
	fs.DurationVar(&o.kubeAPITimeout, "kube-api-timeout", 10*time.Second, "time karmada-apiserver has to answer each of the gateway's own requests other than watches: label patches, Lease reads and updates of leader election, the startup check for the Pod status interpreter")
	return o
}

func (o *options) validate() error {
	switch proxy.AuthMode(o.authMode) {
	case proxy.AuthPassthrough, proxy.AuthAuthorize:
	default:
		return fmt.Errorf("--auth-mode must be %q or %q, not %q", proxy.AuthPassthrough, proxy.AuthAuthorize, o.authMode)
	}
	switch o.memberAccess {
	case metrics.MemberAccessClusterProxy, metrics.MemberAccessDirect:
	default:
		return fmt.Errorf("--member-access must be %q or %q, not %q", metrics.MemberAccessClusterProxy, metrics.MemberAccessDirect, o.memberAccess)
	}
	if _, err := proxy.ParseForwardedFor(o.forwardedFor); err != nil {
		return fmt.Errorf("--forwarded-for: %w", err)
	}
	if !o.insecureHTTP && (o.tlsCertFile == "" || o.tlsKeyFile == "") {
		return fmt.Errorf("--tls-cert-file and --tls-key-file are required (or --insecure-serve-http to serve plain HTTP)")
	}
	if o.clientCAFile != "" && o.insecureHTTP {
		return fmt.Errorf("--client-ca-file needs TLS serving: client certificates cannot be presented over plain HTTP")
	}
	if o.clientCAFile != "" && proxy.AuthMode(o.authMode) != proxy.AuthAuthorize {
		return fmt.Errorf("--client-ca-file is only used in --auth-mode=authorize: in passthrough mode a client certificate cannot be forwarded upstream")
	}
	if o.maxStreams < 0 || o.maxStreamsPerClient < 0 {
		return fmt.Errorf("--max-streams and --max-streams-per-client must not be negative (0 is unlimited)")
	}
	if o.idleTimeout < 0 {
		return fmt.Errorf("--idle-timeout must not be negative (0 is never)")
	}
	if o.certReloadInterval <= 0 {
		return fmt.Errorf("--certificate-reload-interval must be positive")
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--upstream-header-timeout", o.upstreamHeaderTimeout}, {"--auth-timeout", o.authTimeout},
		{"--member-timeout", o.memberTimeout}, {"--kube-api-timeout", o.kubeAPITimeout},
		{"--stream-heartbeat-period", o.heartbeatPeriod}, {"--stream-heartbeat-deadline", o.heartbeatDeadline},
	} {
		if d.value <= 0 {
			return fmt.Errorf("%s must be positive: every outbound call has a deadline", d.flag)
		}
	}
	if o.heartbeatDeadline <= o.heartbeatPeriod {
		return fmt.Errorf("--stream-heartbeat-deadline must be longer than --stream-heartbeat-period")
	}
	if o.shutdownGrace < 0 {
		return fmt.Errorf("--shutdown-grace-period must not be negative")
	}
	if o.admissionCacheTTL < 0 {
		return fmt.Errorf("--admission-cache-ttl must not be negative (0 checks before every stream)")
	}
	if o.memberCopyCacheTTL < 0 {
		return fmt.Errorf("--member-copy-cache-ttl must not be negative (0 reads before every stream)")
	}
	return nil
}
