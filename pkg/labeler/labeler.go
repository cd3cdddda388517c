package labeler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// Patch results counted in metrics.LabelerPatchesTotal.
const (
	ResultSuccess  = "success"
	ResultNotFound = "not_found"
	ResultError    = "error"
)

// FieldManager is the field manager the labeler's patches are recorded under.
const FieldManager = "karmada-exec-gateway-labeler"

// Defaults applied by New to zero-valued Options fields.
const (
	DefaultWorkers       = 2
	DefaultLeaseName     = "karmada-exec-gateway-labeler"
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Options configures New.
type Options struct {
	// Informers are the shared caches; the labeler reads Pods and Bindings.
	Informers *karmada.Informers
	// Client sends the label patches and holds the Lease lock.
	Client kubernetes.Interface
	// Metrics receives patch counts, label latency and the leader gauge. When
	// nil, the labeler records into a private registry nobody exports.
	Metrics *metrics.Metrics
	// Workers is the number of concurrent reconcilers (DefaultWorkers if 0).
	Workers int

	// LeaderElection runs the workers only while this replica holds the Lease.
	LeaderElection bool
	// LeaseNamespace is required with LeaderElection.
	LeaseNamespace string
	// LeaseName defaults to DefaultLeaseName.
	LeaseName string
	// Identity names this replica in the Lease; defaults to hostname_uuid.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod default to client-go's
	// usual 15s, 10s and 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Labeler is the labeling controller. Create it with New before the
// informers start, then call Run once.
type Labeler struct {
	opts     Options
	pods     cache.Indexer
	bindings cache.Indexer
	metrics  *metrics.Metrics
	synced   []cache.InformerSynced
	ran      atomic.Bool

	// mu guards queue, which exists only while workers run (a term). Events
	// outside a term are dropped: every term starts by enqueueing every
	// bound pod from the caches, so nothing is lost.
	mu    sync.RWMutex
	queue workqueue.TypedRateLimitingInterface[string]
}

// New validates opts, fills defaults and adds the labeler's event handlers to
// the pod and binding informers.
func New(opts Options) (*Labeler, error) {
	if opts.Informers == nil || opts.Informers.Pods == nil || opts.Informers.Bindings == nil {
		return nil, errors.New("labeler: Informers with Pods and Bindings are required")
	}
	if opts.Client == nil {
		return nil, errors.New("labeler: Client is required")
	}
	if opts.Workers < 0 {
		return nil, fmt.Errorf("labeler: Workers must not be negative, got %d", opts.Workers)
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(prometheus.NewRegistry())
	}
	if opts.LeaderElection {
		if err := defaultLeaderElection(&opts); err != nil {
			return nil, err
		}
		// Validate the timings now, so a bad flag fails at startup rather
		// than when Run is called.
		if _, err := leaderelection.NewLeaderElector(electionConfig(opts, leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {},
			OnStoppedLeading: func() {},
		})); err != nil {
			return nil, fmt.Errorf("labeler: leader election: %w", err)
		}
	}

	l := &Labeler{
		opts:     opts,
		pods:     opts.Informers.Pods.GetIndexer(),
		bindings: opts.Informers.Bindings.GetIndexer(),
		metrics:  opts.Metrics,
	}
	podReg, err := opts.Informers.Pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    l.onPodAdd,
		UpdateFunc: l.onPodUpdate,
	})
	if err != nil {
		return nil, fmt.Errorf("labeler: pod event handler: %w", err)
	}
	bindingReg, err := opts.Informers.Bindings.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    l.onBinding,
		UpdateFunc: l.onBindingUpdate,
		DeleteFunc: l.onBinding,
	})
	if err != nil {
		return nil, fmt.Errorf("labeler: binding event handler: %w", err)
	}
	l.synced = []cache.InformerSynced{podReg.HasSynced, bindingReg.HasSynced}
	return l, nil
}

func defaultLeaderElection(opts *Options) error {
	if opts.LeaseNamespace == "" {
		return errors.New("labeler: LeaseNamespace is required with LeaderElection")
	}
	if opts.LeaseName == "" {
		opts.LeaseName = DefaultLeaseName
	}
	if opts.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("labeler: leader identity: %w", err)
		}
		// The uuid keeps two processes on one host (or a restarted pod
		// reusing its name) from mistaking each other's lease for their own.
		opts.Identity = host + "_" + string(uuid.NewUUID())
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.RenewDeadline == 0 {
		opts.RenewDeadline = DefaultRenewDeadline
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = DefaultRetryPeriod
	}
	return nil
}

func electionConfig(opts Options, cb leaderelection.LeaderCallbacks) leaderelection.LeaderElectionConfig {
	return leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: opts.LeaseNamespace, Name: opts.LeaseName},
			Client:     opts.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: opts.Identity},
		},
		LeaseDuration: opts.LeaseDuration,
		RenewDeadline: opts.RenewDeadline,
		RetryPeriod:   opts.RetryPeriod,
		Callbacks:     cb,
		// A SIGTERM hands the lease over at once instead of leaving the other
		// replicas waiting a full LeaseDuration. Run stops the workers before
		// it lets the elector release, as ReleaseOnCancel requires.
		ReleaseOnCancel: true,
		Name:            opts.LeaseName,
	}
}

// Run waits for the caches to sync and runs the workers until ctx ends: for
// the whole time without leader election, otherwise only while this replica
// holds the Lease, campaigning again after a lost lease. It returns nil when
// ctx ends, after the workers have stopped and the lease is released. Run
// may be called only once.
func (l *Labeler) Run(ctx context.Context) error {
	if !l.ran.CompareAndSwap(false, true) {
		return errors.New("labeler: Run called more than once")
	}
	logger := klog.FromContext(ctx).WithName("labeler")
	ctx = klog.NewContext(ctx, logger)

	logger.Info("Waiting for caches to sync")
	if !cache.WaitForCacheSync(ctx.Done(), l.synced...) {
		logger.Info("Stopped before caches synced")
		return nil
	}
	if !l.opts.LeaderElection {
		l.metrics.LabelerLeader.Set(1)
		defer l.metrics.LabelerLeader.Set(0)
		l.runTerm(ctx)
		return nil
	}
	for {
		if err := l.campaign(ctx); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		logger.Info("Lost the leader lease, campaigning again", "lease", l.opts.LeaseNamespace+"/"+l.opts.LeaseName)
	}
}

// campaign runs one leader elector until ctx ends or the lease is lost. The
// elector gets a context that ctx does not cancel, so that on shutdown the
// workers stop first and only then does the elector release the lease.
func (l *Labeler) campaign(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	leading := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(electionConfig(l.opts, leaderelection.LeaderCallbacks{
		// The callbacks run on the elector's goroutines; the gauge is set
		// here instead, around the term, so it can never be left at 1 by a
		// late OnStartedLeading after Run has returned.
		OnStartedLeading: func(leadCtx context.Context) { leading <- leadCtx },
		OnStoppedLeading: func() {},
		OnNewLeader: func(identity string) {
			logger.Info("Labeler leader observed", "leader", identity, "self", identity == l.opts.Identity)
		},
	}))
	if err != nil {
		return fmt.Errorf("labeler: leader elector: %w", err)
	}

	electCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		le.Run(electCtx)
	}()

	select {
	case <-ctx.Done():
	case <-elected:
	case leadCtx := <-leading:
		termCtx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(leadCtx, cancel)
		l.metrics.LabelerLeader.Set(1)
		l.runTerm(termCtx)
		l.metrics.LabelerLeader.Set(0)
		stop()
		cancel()
	}
	stopElection()
	<-elected
	return nil
}

// runTerm runs the workers on a fresh queue until ctx ends and returns once
// they have all stopped.
func (l *Labeler) runTerm(ctx context.Context) {
	logger := klog.FromContext(ctx)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "labeler"},
	)
	// Publish the queue before listing the cache, so a change that lands
	// after the list still reaches the queue through its event.
	l.setQueue(q)
	n := l.enqueueAllBound(q)
	logger.Info("Starting workers", "workers", l.opts.Workers, "boundPods", n)

	var wg sync.WaitGroup
	for range l.opts.Workers {
		wg.Go(func() {
			for l.processNext(ctx, q) {
			}
		})
	}
	<-ctx.Done()
	l.setQueue(nil)
	q.ShutDown()
	wg.Wait()
	logger.Info("Workers stopped")
}

func (l *Labeler) setQueue(q workqueue.TypedRateLimitingInterface[string]) {
	l.mu.Lock()
	l.queue = q
	l.mu.Unlock()
}

func (l *Labeler) enqueue(key string) {
	l.mu.RLock()
	q := l.queue
	l.mu.RUnlock()
	if q != nil {
		q.Add(key)
	}
}

func (l *Labeler) enqueueAllBound(q workqueue.TypedRateLimitingInterface[string]) int {
	n := 0
	for _, obj := range l.bindings.List() {
		if key, ok := podKeyOf(obj); ok {
			q.Add(key)
			n++
		}
	}
	return n
}

func (l *Labeler) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	// Get keeps handing out queued items after ShutDown; a term that ended
	// must not patch any more.
	if ctx.Err() != nil {
		return false
	}
	if err := l.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Labeling pod failed, will retry", "pod", key, "retries", q.NumRequeues(key))
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

// sync brings one pod's label in line with its binding. A nil error means
// there is nothing more to do for key until its next event.
func (l *Labeler) sync(ctx context.Context, key string) error {
	logger := klog.FromContext(ctx).WithValues("pod", key)
	obj, exists, err := l.pods.GetByKey(key)
	if err != nil {
		return fmt.Errorf("read pod %s from cache: %w", key, err)
	}
	if !exists {
		return nil
	}
	pod, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Errorf("pod %s in cache: %w", key, err)
	}
	if pod.GetDeletionTimestamp() != nil {
		return nil
	}
	b, err := l.bindingFor(pod)
	if err != nil {
		return err
	}
	if b == nil {
		return nil
	}
	cluster := preferredCluster(b)
	if cluster == "" {
		// Not scheduled yet; the binding's update will bring the pod back.
		return nil
	}
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		// Retrying cannot fix the binding's data; its next update re-enqueues.
		logger.Error(nil, "Binding names a cluster that is not a DNS-1123 label, not labeling",
			"binding", b.Namespace+"/"+b.Name, "cluster", cluster, "reasons", strings.Join(errs, "; "))
		return nil
	}
	if pod.GetLabels()[karmada.ClusterNameLabel] == cluster {
		return nil
	}

	patch, err := labelPatch(cluster)
	if err != nil {
		return err
	}
	_, err = l.opts.Client.CoreV1().Pods(pod.GetNamespace()).Patch(ctx, pod.GetName(), types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsNotFound(err):
		l.metrics.LabelerPatchesTotal.WithLabelValues(ResultNotFound).Inc()
		logger.V(2).Info("Pod gone before it could be labeled")
		return nil
	case err != nil:
		l.metrics.LabelerPatchesTotal.WithLabelValues(ResultError).Inc()
		return fmt.Errorf("patch label %s=%s on pod %s: %w", karmada.ClusterNameLabel, cluster, key, err)
	}
	l.metrics.LabelerPatchesTotal.WithLabelValues(ResultSuccess).Inc()
	if since := scheduledAt(b); !since.IsZero() {
		l.metrics.LabelLatency.Observe(max(0, time.Since(since).Seconds()))
	}
	logger.V(2).Info("Labeled pod", "cluster", cluster, "previous", pod.GetLabels()[karmada.ClusterNameLabel])
	return nil
}

// bindingFor returns the ResourceBinding of pod, or nil (see
// karmada.Informers.BindingOf for which bindings count).
func (l *Labeler) bindingFor(pod metav1.Object) (*karmada.CachedBinding, error) {
	b, _, err := l.opts.Informers.BindingOf("Pod", pod.GetNamespace(), pod.GetName(), pod.GetUID())
	return b, err
}

// preferredCluster is the cluster the label should name: the first
// candidate, the same rule the resolver applies.
func preferredCluster(b *karmada.CachedBinding) string {
	for name := range b.CandidateClusters() {
		return name
	}
	return ""
}

// labelPatch is a JSON merge patch that sets only the cluster label, so the
// labeler never overwrites another writer's labels or any other field.
func labelPatch(cluster string) ([]byte, error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"labels": map[string]string{karmada.ClusterNameLabel: cluster},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("encode label patch: %w", err)
	}
	return patch, nil
}

// scheduledAt is when the binding's current placement was decided: Karmada
// sets lastScheduledTime on every (re)schedule, and a binding that lacks it
// was at least not placed before it existed.
func scheduledAt(b *karmada.CachedBinding) time.Time {
	if t := b.Status.LastScheduledTime; t != nil && !t.IsZero() {
		return t.Time
	}
	return b.CreationTimestamp.Time
}

func (l *Labeler) onPodAdd(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("labeler: pod key: %w", err))
		return
	}
	l.enqueue(key)
}

// onPodUpdate reacts only to the label changing: that is the only pod field
// the labeler reads, and pods are updated far more often than labeled.
func (l *Labeler) onPodUpdate(oldObj, newObj any) {
	o, err1 := meta.Accessor(oldObj)
	n, err2 := meta.Accessor(newObj)
	if err := errors.Join(err1, err2); err != nil {
		utilruntime.HandleError(fmt.Errorf("labeler: pod update: %w", err))
		return
	}
	if o.GetLabels()[karmada.ClusterNameLabel] == n.GetLabels()[karmada.ClusterNameLabel] {
		return
	}
	l.onPodAdd(newObj)
}

func (l *Labeler) onBinding(obj any) {
	if key, ok := podKeyOf(obj); ok {
		l.enqueue(key)
	}
}

func (l *Labeler) onBindingUpdate(oldObj, newObj any) {
	l.onBinding(newObj)
	// spec.resource does not change in Karmada, but if it did the old pod
	// must be looked at again too.
	if o, ok := podKeyOf(oldObj); ok {
		if n, _ := podKeyOf(newObj); n != o {
			l.enqueue(o)
		}
	}
}

// podKeyOf returns the namespace/name of the v1 Pod a binding binds.
func podKeyOf(obj any) (string, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	_, _, r, ok := karmada.BindingResource(obj)
	if !ok {
		return "", false
	}
	if r.Kind != "Pod" || r.APIVersion != "v1" || r.Namespace == "" || r.Name == "" {
		return "", false
	}
	return r.Namespace + "/" + r.Name, true
}
