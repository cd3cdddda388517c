package nodeagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Options configures an Agent. Zero values of the optional fields pick
// kubelet-like defaults.
type Options struct {
	Client      kubernetes.Interface // member apiserver, admin identity
	NodeName    string               // e.g. "member1-node"
	Listener    net.Listener         // 127.0.0.1:0, TLS is done inside with ServingCert
	ServingCert tls.Certificate      // SAN 127.0.0.1; member apiserver verifies it via --kubelet-certificate-authority
	ClientCAs   *x509.CertPool       // verifies the apiserver's --kubelet-client-certificate (nil = no client auth)
	RootDir     string               // containers run in RootDir/<ns>/<pod>/<container>

	// HeartbeatInterval is how often the Node's conditions are refreshed
	// (default 10s, kubelet's nodeStatusUpdateFrequency).
	HeartbeatInterval time.Duration
	// RestartBackoff is the first delay before a container is restarted;
	// it doubles per restart up to 10x (default 200ms: kubelet's 10s is too
	// slow for tests).
	RestartBackoff time.Duration
}

// Agent is one node: Node object, pod runtime and kubelet API server.
type Agent struct {
	opts     Options
	client   kubernetes.Interface
	nodeName string
	rootDir  string
	port     int

	factory   informers.SharedInformerFactory
	podLister corelisters.PodLister
	podSynced cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	pods    map[string]*podRuntime // by namespace/name
	started bool

	// stopping is closed when Run's context ends; every process watches it.
	// procMu orders spawning against it, so procs.Wait sees every process.
	stopping chan struct{}
	procMu   sync.Mutex
	// procs counts every live process (containers and execs) so Run can
	// wait until all of them are reaped.
	procs sync.WaitGroup
	// podRuns counts pod lifecycle goroutines.
	podRuns sync.WaitGroup
}

// New validates opts and builds an Agent; nothing runs until Run.
func New(opts Options) (*Agent, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("nodeagent: Client is required")
	case opts.NodeName == "":
		return nil, errors.New("nodeagent: NodeName is required")
	case opts.Listener == nil:
		return nil, errors.New("nodeagent: Listener is required")
	case len(opts.ServingCert.Certificate) == 0:
		return nil, errors.New("nodeagent: ServingCert is required")
	case opts.RootDir == "":
		return nil, errors.New("nodeagent: RootDir is required")
	}
	tcpAddr, ok := opts.Listener.Addr().(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("nodeagent: listener address %s is not TCP", opts.Listener.Addr())
	}
	root, err := filepath.Abs(opts.RootDir)
	if err != nil {
		return nil, fmt.Errorf("nodeagent: root dir: %w", err)
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 10 * time.Second
	}
	if opts.RestartBackoff <= 0 {
		opts.RestartBackoff = 200 * time.Millisecond
	}
	factory := informers.NewSharedInformerFactory(opts.Client, 0)
	podInformer := factory.Core().V1().Pods()
	a := &Agent{
		opts:      opts,
		client:    opts.Client,
		nodeName:  opts.NodeName,
		rootDir:   root,
		port:      tcpAddr.Port,
		factory:   factory,
		podLister: podInformer.Lister(),
		podSynced: podInformer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeagent-" + opts.NodeName}),
		pods:     map[string]*podRuntime{},
		stopping: make(chan struct{}),
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueue,
		UpdateFunc: func(_, obj any) { a.enqueue(obj) },
		DeleteFunc: a.enqueue,
	}); err != nil {
		return nil, fmt.Errorf("nodeagent: pod handler: %w", err)
	}
	return a, nil
}

// Run registers the node, serves the kubelet API and runs pods until ctx
// ends; then it kills every process it started, waits for them and returns.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("nodeagent: Run called twice")
	}
	a.started = true
	a.mu.Unlock()

	logger := klog.FromContext(ctx).WithValues("node", a.nodeName)
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	defer cancel()

	srv, err := a.startServer(ctx)
	if err != nil {
		return err
	}

	var heartbeat, workers sync.WaitGroup
	defer func() {
		cancel()
		// Order matters: no worker may start a pod, and no handler a
		// process, once the waits below begin.
		a.procMu.Lock()
		close(a.stopping)
		a.procMu.Unlock()
		a.queue.ShutDown()
		workers.Wait()
		heartbeat.Wait()
		a.factory.Shutdown()
		srv.close()
		a.podRuns.Wait()
		a.procs.Wait()
		logger.Info("Node agent stopped")
	}()

	if err := a.registerNode(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	heartbeat.Add(1)
	go func() {
		defer heartbeat.Done()
		a.heartbeat(ctx)
	}()

	a.factory.Start(ctx.Done())
	if !cache.WaitForNamedCacheSyncWithContext(ctx, a.podSynced) {
		return nil // only a cancelled context stops the wait
	}
	const workerCount = 2
	for range workerCount {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for a.processNext(ctx) {
			}
		}()
	}
	logger.Info("Node agent running", "port", a.port, "rootDir", a.rootDir)
	<-ctx.Done()
	return nil
}

func (a *Agent) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	a.queue.Add(key)
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	if err := a.syncPod(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Syncing pod", "pod", key)
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// runtimeFor returns the pod runtime for key if it belongs to uid (any uid
// when uid is empty).
func (a *Agent) runtimeFor(key, uid string) *podRuntime {
	a.mu.Lock()
	defer a.mu.Unlock()
	rt := a.pods[key]
	if rt == nil || (uid != "" && string(rt.pod.UID) != uid) {
		return nil
	}
	return rt
}
