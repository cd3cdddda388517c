// Package membertrust publishes what direct member access
// (--member-access=direct, pkg/memberaccess) needs of each Cluster's
// Secrets, and nothing else, into one Secret that the gateway alone reads:
// for a Cluster <c>,
//
//   - <c>.token: the token of the Secret spec.impersonatorSecretRef names,
//     which Karmada's cluster proxy sends to the member;
//   - <c>.caBundle: the caBundle of the Secret spec.secretRef names, the
//     member's CA (present, perhaps empty, exactly when the Cluster has a
//     secretRef: Karmada then trusts that bundle alone, and the system
//     roots only without one).
//
// Why a copy: a Push member's secretRef Secret (karmadactl join) holds,
// beside caBundle, the token of a member ServiceAccount bound to */*/*, and
// a Pull member's (karmada-agent) the agent's. RBAC grants a Secret whole,
// so a gateway that read those Secrets held every member's cluster-admin
// credential. With the copy, the gateway's identity may read one Secret by
// name; the Secrets that Clusters name are read by this controller, which
// serves nothing, in a process and identity of its own (`gateway
// member-trust`, the chart's member-trust Deployment).
//
// The controller follows the Clusters and the Secrets they name (an
// informer per namespace named, keeping only the two keys read), and
// rewrites the published Secret whenever what it should hold differs:
// rotated tokens and CAs, new and deleted Clusters. A Cluster whose Secret
// cannot be read (yet) keeps what was published for it, so a namespace
// the controller may not read never empties what gateways have.
package membertrust

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// Keys of Karmada's cluster Secrets (clusterapis.SecretTokenKey,
// SecretCADataKey), and the suffixes of the published keys.
const (
	TokenKey    = "token"
	CABundleKey = "caBundle"
)

// TokenOf and CABundleOf name cluster's keys in the published Secret.
func TokenOf(cluster string) string    { return cluster + "." + TokenKey }
func CABundleOf(cluster string) string { return cluster + "." + CABundleKey }

// DefaultCallTimeout is Options.CallTimeout's default.
const DefaultCallTimeout = 30 * time.Second

// Options configures a Controller.
type Options struct {
	// Clusters holds *karmada.Cluster (karmada.NewClusterInformer).
	Clusters cache.SharedIndexInformer
	// Client reads the Secrets Clusters name and writes Published.
	Client kubernetes.Interface
	// Published is the Secret written.
	Published types.NamespacedName
	// Resync is the Secret informers' resync period.
	Resync time.Duration
	// CallTimeout bounds each read and write of Published; 0 is
	// DefaultCallTimeout.
	CallTimeout time.Duration
}

// Controller keeps Options.Published current.
type Controller struct {
	opts  Options
	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	ctx     context.Context // Secret informers run until it ends
	secrets map[string]cache.SharedIndexInformer
}

// publishKey is the queue's one item: every change rewrites the whole
// Secret, computed from the caches.
const publishKey = "publish"

// New is a Controller on opts; Run runs it.
func New(opts Options) (*Controller, error) {
	if opts.Clusters == nil || opts.Client == nil || opts.Published.Namespace == "" || opts.Published.Name == "" {
		return nil, errors.New("membertrust: a Cluster informer, a client and the published Secret's namespace and name are required")
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	c := &Controller{
		opts:    opts,
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "membertrust"}),
		secrets: map[string]cache.SharedIndexInformer{},
	}
	_, err := opts.Clusters.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.clusterChanged(obj) },
		UpdateFunc: func(_, obj any) { c.clusterChanged(obj) },
		DeleteFunc: func(any) { c.queue.Add(publishKey) },
	})
	if err != nil {
		return nil, fmt.Errorf("membertrust: %w", err)
	}
	return c, nil
}

// Run publishes until ctx ends, once the Clusters informer (which the
// caller runs) has synced.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.opts.Clusters.HasSynced) {
		return ctx.Err()
	}
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	for _, obj := range c.opts.Clusters.GetStore().List() {
		c.clusterChanged(obj)
	}
	// A first publication before the Secrets were listed would hold no
	// token; one the controller may not list is waited for no longer
	// than a call.
	waitCtx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	c.mu.Lock()
	synced := make([]cache.InformerSynced, 0, len(c.secrets))
	for _, inf := range c.secrets {
		synced = append(synced, inf.HasSynced)
	}
	c.mu.Unlock()
	cache.WaitForCacheSync(waitCtx.Done(), synced...)
	cancel()
	c.queue.Add(publishKey)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.processNext(ctx) {
	}
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.publish(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Publishing the members' tokens and CAs failed; retrying", "secret", c.opts.Published.String())
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *Controller) clusterChanged(obj any) {
	cl, ok := obj.(*karmada.Cluster)
	if !ok {
		return
	}
	for _, ref := range []*karmada.LocalSecretRef{cl.Spec.SecretRef, cl.Spec.ImpersonatorSecretRef} {
		if ref != nil && ref.Namespace != "" {
			c.secretInformer(ref.Namespace)
		}
	}
	c.queue.Add(publishKey)
}

// secretInformer is namespace's Secret informer, started now if it was not
// and Run has begun; nil before.
func (c *Controller) secretInformer(namespace string) cache.SharedIndexInformer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if inf, ok := c.secrets[namespace]; ok {
		return inf
	}
	if c.ctx == nil {
		return nil
	}
	f := informers.NewSharedInformerFactoryWithOptions(c.opts.Client, c.opts.Resync, informers.WithNamespace(namespace))
	inf := f.Core().V1().Secrets().Informer()
	_ = inf.SetTransform(trimSecret)
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.queue.Add(publishKey) },
		UpdateFunc: func(_, _ any) { c.queue.Add(publishKey) },
		DeleteFunc: func(any) { c.queue.Add(publishKey) },
	})
	c.secrets[namespace] = inf
	go inf.Run(c.ctx.Done())
	return inf
}

// trimSecret keeps of a Secret only the two keys read; the rest of a
// cluster Secret never enters the cache. (A secretRef Secret's token is
// kept as the key is one name for both kinds, but never published.)
func trimSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	out := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, ResourceVersion: s.ResourceVersion, UID: s.UID}}
	for _, k := range []string{TokenKey, CABundleKey} {
		if v, ok := s.Data[k]; ok {
			if out.Data == nil {
				out.Data = map[string][]byte{}
			}
			out.Data[k] = v
		}
	}
	return out, nil
}

// lookup reads key of the Secret ref names: known reports whether the
// cache can tell (its namespace was listed), found whether it has the key.
func (c *Controller) lookup(ref *karmada.LocalSecretRef, key string) (value []byte, found, known bool) {
	c.mu.Lock()
	inf := c.secrets[ref.Namespace]
	c.mu.Unlock()
	if inf == nil || !inf.HasSynced() {
		return nil, false, false
	}
	obj, exists, err := inf.GetStore().GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil || !exists {
		return nil, false, true
	}
	v, ok := obj.(*corev1.Secret).Data[key]
	return v, ok, true
}

// desired is what the published Secret should hold, given what it holds.
func (c *Controller) desired(current map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for _, obj := range c.opts.Clusters.GetStore().List() {
		cl, ok := obj.(*karmada.Cluster)
		if !ok {
			continue
		}
		take := func(ref *karmada.LocalSecretRef, key, published string, orEmpty bool) {
			if ref == nil {
				return
			}
			v, found, known := c.lookup(ref, key)
			switch {
			case !known:
				if old, ok := current[published]; ok {
					out[published] = old
				}
			case found:
				out[published] = v
			case orEmpty:
				// A secretRef without caBundle: Karmada trusts no CA.
				out[published] = []byte{}
			}
		}
		take(cl.Spec.ImpersonatorSecretRef, TokenKey, TokenOf(cl.Name), false)
		take(cl.Spec.SecretRef, CABundleKey, CABundleOf(cl.Name), true)
	}
	return out
}

// publish writes the published Secret if it differs from what it should
// hold.
func (c *Controller) publish(ctx context.Context) error {
	secrets := c.opts.Client.CoreV1().Secrets(c.opts.Published.Namespace)
	callCtx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	cur, err := secrets.Get(callCtx, c.opts.Published.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.opts.Published.Namespace, Name: c.opts.Published.Name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "karmada-exec-gateway-member-trust"}},
			Type: corev1.SecretTypeOpaque,
			Data: c.desired(nil),
		}
		if _, err := secrets.Create(callCtx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s: %w", c.opts.Published, err)
		}
		klog.FromContext(ctx).Info("Published the members' tokens and CAs", "secret", c.opts.Published.String(), "keys", len(s.Data))
		return nil
	case err != nil:
		return fmt.Errorf("reading %s: %w", c.opts.Published, err)
	}
	want := c.desired(cur.Data)
	if maps.EqualFunc(cur.Data, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		return nil
	}
	cur.Data = want
	if _, err := secrets.Update(callCtx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating %s: %w", c.opts.Published, err)
	}
	klog.FromContext(ctx).Info("Published the members' tokens and CAs", "secret", c.opts.Published.String(), "keys", len(want))
	return nil
}
