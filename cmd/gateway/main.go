// Command gateway serves karmada-exec-gateway: a reverse proxy in front of
// karmada-apiserver that sends pods/exec, attach, log, portforward and proxy
// to the member cluster running the pod, plus the controller that labels pod
// templates with their cluster. This file only wires flags to constructors.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/admission"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/auth"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/labeler"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberaccess"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberevents"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/resolver"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/serving"
)

func main() {
	klog.InitFlags(nil)
	if len(os.Args) > 1 && os.Args[1] == memberTrustCommand {
		os.Exit(memberTrustMain(os.Args[2:]))
	}
	opts := bindFlags(flag.CommandLine)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		klog.ErrorS(err, "gateway failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, o *options) error {
	if err := errors.Join(o.validate(), o.audit.validate()); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)

	cfg, err := upstreamConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)

	// The gateway's own clients read caches and patch labels; raise client-go's
	// default 5 QPS so a burst of new CI pods is labelled without queueing.
	clientCfg := rest.CopyConfig(cfg)
	clientCfg.QPS, clientCfg.Burst = float32(o.clientQPS), o.clientBurst
	clients, err := newReviewClients(clientCfg)
	if err != nil {
		return err
	}
	md, err := metadata.NewForConfig(clientCfg)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(clientCfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}

	informers, err := karmada.NewInformers(karmada.InformersOptions{Metadata: md, Dynamic: dyn, Resync: o.resync, Metrics: m, Services: o.enableServiceProxy})
	if err != nil {
		return err
	}
	var (
		members *memberaccess.Members
		self    *memberaccess.Self
	)
	if o.memberAccess == metrics.MemberAccessDirect {
		// One Secret is read, by name: the tokens and CAs gateway
		// member-trust publishes.
		published, err := parseSecretName("--member-trust-secret", o.memberTrustSecret)
		if err != nil {
			return err
		}
		members, err = memberaccess.New(memberaccess.Options{Clusters: informers.Clusters, Client: clients.secrets, Published: published, Resync: o.resync, Metrics: m})
		if err != nil {
			return err
		}
		self = memberaccess.NewSelf(clients.knownCallers)
	}
	ropts := resolver.Options{Informers: informers, Metrics: m}
	if proxy.AuthMode(o.authMode) == proxy.AuthAuthorize {
		// The proxy acts as the gateway on what is resolved, so the
		// Resolver checks, as the gateway, that the member object is the
		// template's own copy before anything is forwarded to it: read
		// the way the member is reached.
		ropts.ActsAsGateway = true
		var copies resolver.MemberObjects
		if members != nil {
			copies = members.Reader(self, o.memberTimeout)
		} else if copies, err = karmada.NewMemberMetadata(cfg, o.memberTimeout); err != nil {
			return err
		}
		ropts.Members = copies
		if o.memberCopyCacheTTL > 0 {
			ropts.Members = karmada.NewCachedMemberMetadata(copies, o.memberCopyCacheTTL)
		}
	}
	res, err := resolver.New(ropts)
	if err != nil {
		return err
	}
	var lab *labeler.Labeler
	if o.enableLabeler {
		// Label patches and Lease calls are plain requests: bound each, so
		// a hung karmada-apiserver fails them (and leader election's
		// acquire loop, which has no deadline of its own, retries) rather
		// than holding a worker or the elector for good. No watch uses
		// this client: a client timeout would cut one.
		labCfg := rest.CopyConfig(clientCfg)
		labCfg.Timeout = o.kubeAPITimeout
		labClient, err := kubernetes.NewForConfig(labCfg)
		if err != nil {
			return fmt.Errorf("labeler client: %w", err)
		}
		lab, err = labeler.New(labeler.Options{
			Informers:      informers,
			Client:         labClient,
			Metrics:        m,
			Workers:        o.labelerWorkers,
			LeaderElection: o.leaderElect,
			LeaseNamespace: o.leaseNamespace,
			LeaseName:      o.leaseName,
			Identity:       leaderIdentity(),
			LeaseDuration:  o.leaseDuration,
			RenewDeadline:  o.renewDeadline,
			RetryPeriod:    o.retryPeriod,
		})
		if err != nil {
			return err
		}
	}

	// reloaders re-read certificate files from disk until ctx ends.
	var reloaders []func(context.Context)
	var clientCA *serving.ClientCA
	if o.clientCAFile != "" {
		clientCA, err = serving.NewClientCA(serving.ClientCAOptions{File: o.clientCAFile, Interval: o.certReloadInterval, Metrics: m})
		if err != nil {
			return err
		}
		reloaders = append(reloaders, clientCA.Run)
	}
	popts := proxy.Options{
		Upstream: cfg, Resolver: res, AuthMode: proxy.AuthMode(o.authMode), Metrics: m,
		MaxStreams: o.maxStreams, MaxStreamsPerClient: o.maxStreamsPerClient,
		UpstreamHeaderTimeout: o.upstreamHeaderTimeout, ForwardedFor: proxy.ForwardedFor(o.forwardedFor),
		StreamHeartbeatPeriod: o.heartbeatPeriod, StreamHeartbeatDeadline: o.heartbeatDeadline,
	}
	if o.admissionCacheTTL > 0 && popts.AuthMode == proxy.AuthPassthrough {
		popts.Admissions = admission.NewCache(o.admissionCacheTTL)
	}
	if o.mergeMemberEvents {
		popts.Events = func(gw *proxy.Proxy) (proxy.EventsMerger, error) {
			return memberevents.New(memberevents.Options{Gateway: gw, Resolver: res, Metrics: m, MemberTimeout: o.memberTimeout})
		}
	}
	if o.enableServiceProxy {
		popts.ServiceResolver = res
	}
	if members != nil {
		popts.Members, popts.GatewayIdentity = members, self.ActAs
	}
	if popts.AuthMode == proxy.AuthAuthorize || popts.Members != nil {
		// Reviews have budgets of their own (client-go limits each client
		// apart): the informers and the labeler never wait for them, and
		// a flood of unknown tokens spends only the new credentials' one.
		// The new credentials' budget serves first the sources with no
		// credential rejected lately, at that client's own limits.
		aopts := auth.Options{
			Client: clients.knownCallers, NewCredentialClient: clients.newCredentials, FailedPerSource: rate.Limit(o.authFailedPerSource),
			NewCredentialQPS: o.clientQPS, NewCredentialBurst: o.clientBurst,
			CacheTTL: o.authCacheTTL, Metrics: m, Timeout: o.authTimeout,
		}
		if clientCA != nil {
			aopts.ClientCAPool = clientCA.Pool
		}
		a, err := auth.New(aopts)
		if err != nil {
			return err
		}
		popts.Authorizer = a
	}
	recs, err := o.recording.build(reg)
	if err != nil {
		return err
	}
	popts.Recorder = recs.recorder
	auditor, stopAudit, err := o.audit.start(reg)
	if err != nil {
		return err
	}
	// After the streams drained, at once: their last audit events are
	// written, and their recordings uploaded.
	defer func() {
		var wg sync.WaitGroup
		wg.Go(stopAudit)
		wg.Go(func() { recs.drainUploads(logger) })
		wg.Wait()
	}()
	if auditor != nil {
		popts.Auditor = auditor
	}
	px, err := proxy.New(popts)
	if err != nil {
		return err
	}

	// Readiness waits for direct member access to have started its Secret
	// informers, not for them to sync: one Cluster naming a namespace the
	// gateway may not read would keep every replica unready. A request to
	// a member whose Secrets are not read yet waits for them
	// (memberaccess), then gets a 503 naming why.
	synced := informers.HasSynced
	if members != nil {
		synced = func() bool { return informers.HasSynced() && members.Started() }
	}
	health := newHealth(synced, newUpstreamCheck(clients.readiness.Discovery().RESTClient()))
	metricsSrv := serving.NewServer(serving.ServerOptions{
		Handler:           health.mux(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), o.profiling),
		ReadHeaderTimeout: o.readHeaderTimeout,
		IdleTimeout:       o.idleTimeout,
	})
	var proxyTLS *tls.Config
	if !o.insecureHTTP {
		cert, err := serving.NewCertificate(serving.CertificateOptions{
			CertFile: o.tlsCertFile, KeyFile: o.tlsKeyFile, Interval: o.certReloadInterval, Metrics: m,
		})
		if err != nil {
			return err
		}
		reloaders = append(reloaders, cert.Run)
		proxyTLS = serving.TLSConfig(cert)
	}
	proxySrv := newProxyServer(o, px, proxyTLS)

	proxyLn, err := net.Listen("tcp", o.bindAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.bindAddr, err)
	}
	metricsLn, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		proxyLn.Close()
		return fmt.Errorf("listen %s: %w", o.metricsAddr, err)
	}
	logger.Info("serving", "address", proxyLn.Addr().String(), "tls", !o.insecureHTTP,
		"metricsAddress", metricsLn.Addr().String(), "authMode", o.authMode, "memberAccess", o.memberAccess, "labeler", o.enableLabeler,
		"upstream", cfg.Host)

	lc := &lifecycle{
		health:     health,
		proxy:      server{proxySrv, proxyLn},
		metrics:    server{metricsSrv, metricsLn},
		streams:    px,
		background: reloaders,
		grace:      o.shutdownGrace,
		start: func(ctx context.Context) {
			informers.Start(ctx)
			if members != nil {
				go func() {
					// Before the Cluster informer synced, Start would see
					// no Cluster and start no Secret informer.
					if informers.WaitForCacheSync(ctx) {
						members.Start(ctx)
					}
				}()
			}
			go func() {
				if !informers.WaitForCacheSync(ctx) {
					return
				}
				logger.Info("caches synced; ready")
				checkCtx, cancel := context.WithTimeout(ctx, o.kubeAPITimeout)
				defer cancel()
				warnWithoutPodStatusInterpreter(checkCtx, dyn)
			}()
		},
	}
	if lab != nil {
		lc.labeler = lab
	}
	if recs.uploader != nil {
		lc.background = append(lc.background, recs.uploader.Run)
	}
	return lc.run(ctx)
}

// newProxyServer is the proxy port's server, its client-facing limits
// (slowloris, header size) from o. The tests of those limits build the
// server with this function and the flags' defaults.
func newProxyServer(o *options, handler http.Handler, tlsConfig *tls.Config) *http.Server {
	return serving.NewServer(serving.ServerOptions{
		Handler:           handler,
		ReadHeaderTimeout: o.readHeaderTimeout,
		IdleTimeout:       o.idleTimeout,
		MaxHeaderBytes:    o.maxHeaderBytes,
		TLSConfig:         tlsConfig,
		ErrorLog:          klogStdLogger(),
	})
}

// reviewClients are the clients whose requests stand before a caller's or
// a probe's answer, each with a rate limit of its own (client-go keeps one
// per clientset), so none waits behind another's load: authorize mode's
// reviews of callers known good and its SubjectAccessReviews, its
// TokenReviews of credentials seen for the first time (what a flood of
// random tokens costs), and readiness.
type reviewClients struct {
	knownCallers, newCredentials, readiness kubernetes.Interface
	// secrets reads the Secret of direct member access (the published
	// tokens and CAs), never behind the reviews.
	secrets kubernetes.Interface
}

func newReviewClients(cfg *rest.Config) (*reviewClients, error) {
	var c reviewClients
	for _, client := range []*kubernetes.Interface{&c.knownCallers, &c.newCredentials, &c.readiness, &c.secrets} {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		*client = cs
	}
	return &c, nil
}

func upstreamConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

func leaderIdentity() string {
	host, err := os.Hostname()
	if err != nil {
		host = "gateway"
	}
	return host + "_" + string(uuid.NewUUID())
}

// warnWithoutPodStatusInterpreter says once, at startup, what users would
// otherwise hunt for: without a Pod status interpreter Karmada strips
// container names and conditions, and executors wait for a pod that never
// looks ready even though exec would work.
func warnWithoutPodStatusInterpreter(ctx context.Context, dyn dynamic.Interface) {
	logger := klog.FromContext(ctx)
	name, err := karmada.PodStatusAggregation(ctx, dyn)
	switch {
	case err != nil:
		logger.Info("Could not check for a Pod status ResourceInterpreterCustomization", "err", err)
	case name == "":
		logger.Info("WARNING: no ResourceInterpreterCustomization aggregates v1 Pod status in karmada-apiserver; " +
			"executors that wait on container names or the Ready condition (GitLab Runner, Jenkins) will wait forever. " +
			"Apply deploy/karmada/pod-status-interpreter.yaml (the Helm chart does by default).")
	default:
		logger.V(1).Info("Pod status interpreter present", "resourceInterpreterCustomization", name)
	}
}
