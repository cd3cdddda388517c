package standin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

const (
	karmadaSystemNamespace  = "karmada-system"
	karmadaClusterNamespace = "karmada-cluster"
	defaultHealthInterval   = 10 * time.Second
	propagationWorkers      = 2
)

// Member is one member cluster the stand-in serves and propagates to.
type Member struct {
	Name string // "member1"
	// Config is admin access to the member apiserver, used by propagation
	// and the health probe. The cluster proxy uses only its endpoint and CA:
	// it reaches the member with the token in the Secret named by the
	// Cluster's spec.impersonatorSecretRef (karmada-cluster/<name>-impersonator,
	// key "token") in karmada-apiserver, as real Karmada does.
	Config *rest.Config
}

// Options configures New.
type Options struct {
	Karmada  *rest.Config // admin to karmada-apiserver
	Members  []Member
	Listener net.Listener // 127.0.0.1:0 for the aggregated API (TLS inside)
	// ServingCert serves the aggregated API. kube-aggregator verifies it
	// against ServingCA (the APIService caBundle) for the server name
	// karmada-aggregated-apiserver.karmada-system.svc.
	ServingCert tls.Certificate
	ServingCA   []byte // PEM
	// RequestHeaderCAs verify the aggregator's front-proxy client
	// certificate; RequestHeaderAllowedNames, when not empty, restrict its CN.
	RequestHeaderCAs          *x509.CertPool
	RequestHeaderAllowedNames []string
	// HealthInterval is how often member /readyz is probed to set Cluster
	// Ready (10s when zero).
	HealthInterval time.Duration
}

// StandIn is a running Karmada stand-in: aggregated API plus propagation.
type StandIn struct {
	opts        Options
	store       *clusterStore
	handler     *aggregatedHandler
	propagator  *propagator
	probes      map[string]healthProbe
	kube        kubernetes.Interface
	dyn         dynamic.Interface
	ready       chan struct{}
	readyOnce   sync.Once
	servingPort int
}

// New validates opts and builds the clients; nothing runs until Run.
func New(opts Options) (*StandIn, error) {
	if opts.Karmada == nil {
		return nil, errors.New("standin: Karmada rest.Config is required")
	}
	if opts.Listener == nil {
		return nil, errors.New("standin: Listener is required")
	}
	if len(opts.ServingCA) == 0 {
		return nil, errors.New("standin: ServingCA is required for the APIService caBundle")
	}
	tcp, ok := opts.Listener.Addr().(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("standin: listener address %v is not TCP", opts.Listener.Addr())
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = defaultHealthInterval
	}
	kube, err := kubernetes.NewForConfig(opts.Karmada)
	if err != nil {
		return nil, fmt.Errorf("standin: karmada client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(opts.Karmada)
	if err != nil {
		return nil, fmt.Errorf("standin: karmada dynamic client: %w", err)
	}
	store := newClusterStore()
	transports := map[string]*memberTransport{}
	clients := map[string]kubernetes.Interface{}
	probes := map[string]healthProbe{}
	for _, m := range opts.Members {
		if m.Name == "" || m.Config == nil {
			return nil, fmt.Errorf("standin: member %q needs a name and a rest.Config", m.Name)
		}
		t, err := newMemberTransport(m.Config)
		if err != nil {
			return nil, fmt.Errorf("standin: member %s: %w", m.Name, err)
		}
		c, err := kubernetes.NewForConfig(m.Config)
		if err != nil {
			return nil, fmt.Errorf("standin: member %s client: %w", m.Name, err)
		}
		transports[m.Name], clients[m.Name], probes[m.Name] = t, c, readyzProbe(c)
		store.add(m.Name, clusterSpecFor(m))
	}
	prop, err := newPropagator(propagatorOptions{Karmada: dyn, Members: clients, Ready: store.ready})
	if err != nil {
		return nil, fmt.Errorf("standin: %w", err)
	}
	return &StandIn{
		opts:  opts,
		store: store,
		handler: newAggregatedHandler(aggregatedOptions{
			Store:                     store,
			Karmada:                   kube,
			Members:                   transports,
			RequestHeaderCAs:          opts.RequestHeaderCAs,
			RequestHeaderAllowedNames: opts.RequestHeaderAllowedNames,
		}),
		propagator:  prop,
		probes:      probes,
		kube:        kube,
		dyn:         dyn,
		ready:       make(chan struct{}),
		servingPort: tcp.Port,
	}, nil
}

// clusterSpecFor is the Cluster karmadactl join would register for m in
// Push mode.
func clusterSpecFor(m Member) karmada.ClusterSpec {
	return karmada.ClusterSpec{
		APIEndpoint:                 m.Config.Host,
		SyncMode:                    "Push",
		SecretRef:                   &karmada.LocalSecretRef{Namespace: karmadaClusterNamespace, Name: m.Name},
		ImpersonatorSecretRef:       &karmada.LocalSecretRef{Namespace: karmadaClusterNamespace, Name: m.Name + "-impersonator"},
		InsecureSkipTLSVerification: m.Config.Insecure,
	}
}

// Ready is closed once the APIService reports Available and propagation
// caches are synced.
func (s *StandIn) Ready() <-chan struct{} { return s.ready }

// Run serves the aggregated API, registers it, probes members and
// propagates until ctx ends. It returns nil on a clean shutdown.
func (s *StandIn) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logger := klog.FromContext(ctx).WithName("standin")
	ctx = klog.NewContext(ctx, logger)

	srv := &http.Server{
		Handler: s.handler,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{s.opts.ServingCert},
			// Verified by the front-proxy authenticator, not the handshake,
			// so health checks without a certificate still work.
			ClientAuth: tls.RequestClientCert,
			MinVersion: tls.VersionTLS12,
		},
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 30 * time.Second,
	}
	errCh := make(chan error, 3)
	go func() {
		if err := srv.ServeTLS(s.opts.Listener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errCh <- fmt.Errorf("aggregated API server: %w", err)
		}
	}()
	defer func() {
		shutdownCtx, c := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer c()
		_ = srv.Shutdown(shutdownCtx)
		_ = srv.Close()
	}()

	// One probe round first, so the first schedule sees real readiness.
	probeAll(ctx, s.store, s.probes)
	go runHealth(ctx, s.store, s.probes, s.opts.HealthInterval)

	if err := s.register(ctx); err != nil {
		return err
	}
	synced := make(chan struct{})
	go func() {
		if err := s.propagator.run(ctx, propagationWorkers, synced); err != nil && ctx.Err() == nil {
			errCh <- err
		}
	}()
	go func() {
		select {
		case <-synced:
		case <-ctx.Done():
			return
		}
		if err := s.waitAvailable(ctx); err != nil {
			if ctx.Err() == nil {
				errCh <- err
			}
			return
		}
		logger.Info("Karmada stand-in ready", "port", s.servingPort)
		s.readyOnce.Do(func() { close(s.ready) })
	}()

	select {
	case <-ctx.Done():
		return nil
	case err := <-errCh:
		return err
	}
}
