package resolver

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// Result values of the resolve_total metric.
const (
	ResultOK              = "ok"
	ResultNotFound        = "not_found"
	ResultNotPlaced       = "not_placed"
	ResultClusterNotReady = "cluster_not_ready"
	// ResultNotApplied: the gateway acts as itself and Karmada reports no
	// scheduled cluster applied (503 in progress, 409 failed).
	ResultNotApplied = "not_applied"
	// ResultNotCopy: the gateway acts as itself and the member object is
	// not the template's own copy (409), or could not be read (503).
	ResultNotCopy = "not_copy"
)

// retryAfterSeconds is the delay the not-placed and not-ready Statuses
// suggest: placement and cluster recovery are usually seconds away.
const retryAfterSeconds = 1

// Options configures New.
type Options struct {
	// Informers are the shared caches; Pods, Bindings (with the
	// karmada.BindingsByResourceIndex index) and Clusters are required.
	// The caller starts them and waits for their sync.
	Informers *karmada.Informers
	// Metrics receives resolve counts. When nil, counts go to a private
	// registry nobody scrapes.
	Metrics *metrics.Metrics
	// ActsAsGateway is set when the proxy uses what Resolve and
	// ResolveService answer with the gateway's own identity (authorize
	// mode). They then answer only a member whose object is the template's
	// own copy (see "Acting as the gateway" in the package doc). Members is
	// required with it.
	ActsAsGateway bool
	// Members reads member objects' metadata with the gateway's identity
	// (*karmada.MemberMetadata); used only with ActsAsGateway.
	Members MemberObjects
}

// MemberObjects reads an object's metadata in a member cluster with the
// gateway's own identity. *karmada.MemberMetadata implements it.
type MemberObjects interface {
	Metadata(ctx context.Context, cluster string, resource schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error)
}

// Resolver maps pod templates to member clusters. It is safe for concurrent use.
type Resolver struct {
	informers *karmada.Informers
	pods      cache.Indexer
	clusters  cache.Indexer
	// members is set when the gateway acts as itself on what is resolved
	// (Options.ActsAsGateway): only a template's own copy may be reached.
	members MemberObjects

	// counters are resolved once so a lookup does not hash label values.
	counters  [numSources][numResults]prometheus.Counter
	ambiguous prometheus.Counter

	validNames sync.Map // cluster name -> bool; see validClusterName
}

type (
	source int
	result int
)

const (
	sourceNone source = iota
	sourceLabel
	sourceBinding
	sourcePath
	numSources
)

const (
	resultOK result = iota
	resultNotFound
	resultNotPlaced
	resultClusterNotReady
	resultNotApplied
	resultNotCopy
	numResults
)

var (
	sourceNames = [numSources]string{sourceNone: metrics.SourceNone, sourceLabel: metrics.SourceLabel, sourceBinding: metrics.SourceBinding, sourcePath: metrics.SourcePath}
	resultNames = [numResults]string{
		resultOK: ResultOK, resultNotFound: ResultNotFound, resultNotPlaced: ResultNotPlaced,
		resultClusterNotReady: ResultClusterNotReady, resultNotApplied: ResultNotApplied, resultNotCopy: ResultNotCopy,
	}
)

// New returns a Resolver reading opts.Informers.
func New(opts Options) (*Resolver, error) {
	inf := opts.Informers
	if inf == nil || inf.Pods == nil || inf.Bindings == nil || inf.Clusters == nil {
		return nil, errors.New("resolver: Informers with Pods, Bindings and Clusters are required")
	}
	if _, ok := inf.Bindings.GetIndexer().GetIndexers()[karmada.BindingsByResourceIndex]; !ok {
		return nil, fmt.Errorf("resolver: bindings informer lacks the %q index", karmada.BindingsByResourceIndex)
	}
	if opts.ActsAsGateway && opts.Members == nil {
		return nil, errors.New("resolver: ActsAsGateway requires Members, to check member objects are the templates' copies")
	}
	m := opts.Metrics
	if m == nil {
		m = metrics.New(prometheus.NewRegistry())
	}
	r := &Resolver{
		informers: inf,
		pods:      inf.Pods.GetIndexer(),
		clusters:  inf.Clusters.GetIndexer(),
		ambiguous: m.ResolveAmbiguousTotal,
	}
	// Only the combinations Resolve produces are created, so the exported
	// series start at zero without advertising impossible ones.
	type combination struct {
		s source
		r result
	}
	combinations := []combination{
		{sourceNone, resultNotFound},
		{sourceNone, resultNotPlaced},
		{sourceLabel, resultOK},
		{sourceLabel, resultClusterNotReady},
		{sourceBinding, resultOK},
		{sourceBinding, resultClusterNotReady},
		{sourcePath, resultOK},
		{sourcePath, resultNotPlaced},
		{sourcePath, resultClusterNotReady},
	}
	if opts.ActsAsGateway {
		r.members = opts.Members
		combinations = append(combinations,
			combination{sourceBinding, resultNotApplied},
			combination{sourceLabel, resultNotCopy},
			combination{sourceBinding, resultNotCopy},
			combination{sourcePath, resultNotApplied},
			combination{sourcePath, resultNotCopy})
	}
	for _, c := range combinations {
		r.counters[c.s][c.r] = m.ResolveTotal.WithLabelValues(sourceNames[c.s], resultNames[c.r])
	}
	return r, nil
}

// Placement is where a pod template runs, and what the resolution learnt
// of the objects on the way, for the audit events.
type Placement struct {
	// Cluster is the member cluster that runs the pod.
	Cluster string
	// TemplateUID is the template's UID in karmada-apiserver, from the pods
	// cache (set whenever the pod was found, also with an error).
	TemplateUID types.UID
	// MemberUID is the UID of the template's copy in Cluster. Only acting as
	// the gateway does the resolution read the member's pod (rule 5), so it
	// is empty otherwise: finding it would cost a member call per request.
	MemberUID types.UID
	// Scheduled are the clusters the pod's binding schedules it to, in its
	// order (set whenever the binding was found): more than one for a pod
	// Karmada runs in several clusters. It is the cached binding's own
	// slice, so that a resolution allocates nothing for it: read only.
	Scheduled []karmada.TargetCluster
}

// Resolve returns the member cluster that runs namespace/pod, by the rules in
// the package doc. Its errors are *apierrors.StatusError: 404 when the pod is
// not in the cache, 503 when it is not placed or its cluster is not usable;
// acting as the gateway, also 409 when Karmada failed to apply it or the
// member's pod is not its copy, 503 while its copy is not applied yet.
func (r *Resolver) Resolve(ctx context.Context, namespace, pod string) (string, error) {
	p, err := r.ResolvePod(ctx, namespace, pod)
	return p.Cluster, err
}

// ClusterHint is the cluster the label the labeler keeps on namespace/pod
// names, from the cache, recording nothing; "" when there is none. It is a
// guess to dial ahead with, never a placement: anyone who can write the pod
// can write the label, so nothing may be sent to what it names before the
// request was checked and resolved.
func (r *Resolver) ClusterHint(namespace, pod string) string {
	obj, exists, err := r.pods.GetByKey(namespace + "/" + pod)
	if err != nil || !exists {
		return ""
	}
	meta, ok := karmada.PodOf(obj)
	if !ok {
		return ""
	}
	return meta.Labels[karmada.ClusterNameLabel]
}

// ResolvePod is Resolve with the UIDs it learnt on the way (Placement).
func (r *Resolver) ResolvePod(ctx context.Context, namespace, pod string) (Placement, error) {
	p, src, res, err := r.resolve(ctx, namespace, pod)
	r.counters[src][res].Inc()
	if err != nil {
		p.Cluster, p.MemberUID = "", ""
	}
	return p, err
}

func (r *Resolver) resolve(ctx context.Context, namespace, pod string) (p Placement, src source, res result, err error) {
	obj, exists, err := r.pods.GetByKey(namespace + "/" + pod)
	if err != nil || !exists {
		// The indexer's GetByKey cannot fail; a miss is the only real case.
		return p, sourceNone, resultNotFound, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, pod)
	}
	meta, ok := karmada.PodOf(obj)
	if !ok {
		return p, sourceNone, resultNotFound, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, pod)
	}
	p.TemplateUID = meta.UID

	// Only Karmada's placement says where a pod runs. Whoever can create a
	// pod can also write its label, so a pod without a binding is not placed
	// whatever its label says, and the label only picks among the binding's
	// own clusters: in authorize mode the gateway calls the cluster proxy as
	// itself, and a forged label must not aim that at another cluster.
	b := r.binding(ctx, namespace, pod, meta)
	if b == nil || len(b.Spec.Clusters) == 0 {
		return p, sourceNone, resultNotPlaced, notPlaced(namespace, pod, b)
	}
	p.Scheduled = b.Spec.Clusters
	src = sourceBinding
	var cluster string
	if pin, ok := PinnedCluster(ctx); ok {
		if res, err := r.onPinned("pod", namespace, pod, b, pin); err != nil {
			return p, sourcePath, res, err
		}
		cluster, src = pin, sourcePath
	} else if label, ok := meta.Cluster, meta.HasCluster; ok {
		switch c, found, problem := r.labelCluster(label); {
		case problem != "":
			klog.FromContext(ctx).Info("Ignoring invalid cluster label on pod; following its ResourceBinding",
				"pod", klog.KRef(namespace, pod), "label", karmada.ClusterNameLabel, "problem", problem)
		case !scheduledOn(b, label):
			klog.FromContext(ctx).Info("Pod's cluster label is not one of its binding's clusters; following the binding",
				"pod", klog.KRef(namespace, pod), "cluster", label, "binding", b.Name)
		case r.members != nil && !appliedOn(b, label):
			klog.FromContext(ctx).V(2).Info("Pod's cluster label names a cluster its copy is not applied on; following the binding",
				"pod", klog.KRef(namespace, pod), "cluster", label, "binding", b.Name)
		case !found:
			klog.FromContext(ctx).Info("Pod's cluster label names no known Cluster; following its ResourceBinding",
				"pod", klog.KRef(namespace, pod), "cluster", label)
		default:
			if ready, msg := c.Ready(); !ready {
				return p, sourceLabel, resultClusterNotReady, notReady("pod", namespace, pod, label, msg)
			}
			cluster, src = label, sourceLabel
		}
	}
	if cluster == "" {
		if cluster, res, err = r.bindingCluster(ctx, "pod", namespace, pod, b); err != nil {
			return p, sourceBinding, res, err
		}
	}
	if p.MemberUID, err = r.verifyCopy(ctx, karmada.PodGVR, "pod", namespace, pod, meta.UID, cluster); err != nil {
		return p, src, resultNotCopy, err
	}
	p.Cluster = cluster
	return p, src, resultOK, nil
}

// pinKey carries the member cluster a request's server URL pinned.
type pinKey struct{}

// WithPinnedCluster returns ctx pinned to the member cluster cluster: the
// gateway's /clusters/<cluster>/ server URLs, which reach the copies of a
// workload Karmada runs in several clusters one member at a time. Resolve,
// ResolvePod and ResolveService then answer cluster or an error, never
// another cluster. cluster must be a DNS-1123 label (the proxy parsed it).
func WithPinnedCluster(ctx context.Context, cluster string) context.Context {
	return context.WithValue(ctx, pinKey{}, cluster)
}

// PinnedCluster is the member cluster ctx is pinned to, if any.
func PinnedCluster(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(pinKey{}).(string)
	return c, ok
}

// onPinned decides whether the kind namespace/name that b places may be
// reached in the pinned cluster pin: b schedules it there (and, acting as
// the gateway, Karmada applied it there: rule 3's condition), and pin is a
// Ready Cluster. A workload not scheduled there is 404, naming where it is.
func (r *Resolver) onPinned(kind, namespace, name string, b *karmada.CachedBinding, pin string) (result, error) {
	if !scheduledOn(b, pin) {
		return resultNotPlaced, statusError(http.StatusNotFound, metav1.StatusReasonNotFound, kind, name,
			fmt.Sprintf("%s %q is not placed on member cluster %q, which this server URL (/clusters/%s/) pins: Karmada placed it on %s",
				kind, namespace+"/"+name, pin, pin, strings.Join(b.ClusterNames(), ", ")), 0)
	}
	if r.members != nil {
		if applied, msg := b.AppliedOn(pin); !applied {
			if msg != "" {
				return resultNotApplied, conflict(kind, name, fmt.Sprintf("%s %q has no copy Karmada applied on member cluster %q, so the gateway will not act on the member's object: %s",
					kind, namespace+"/"+name, pin, msg))
			}
			return resultNotApplied, unavailable(kind, name, fmt.Sprintf("%s %q is scheduled to member cluster %q but Karmada has not reported its copy applied there yet",
				kind, namespace+"/"+name, pin))
		}
	}
	c := r.cluster(pin)
	if c == nil {
		return resultClusterNotReady, unregistered(kind, namespace, name, pin)
	}
	if ready, msg := c.Ready(); !ready {
		return resultClusterNotReady, notReady(kind, namespace, name, pin, msg)
	}
	return resultOK, nil
}

// appliedOn reports whether b's status says cluster applied its workload.
func appliedOn(b *karmada.CachedBinding, cluster string) bool {
	applied, _ := b.AppliedOn(cluster)
	return applied
}

// scheduledOn reports whether b schedules its workload to cluster.
func scheduledOn(b *karmada.CachedBinding, cluster string) bool {
	for _, c := range b.Spec.Clusters {
		if c.Name == cluster {
			return true
		}
	}
	return false
}

// labelCluster looks up the Cluster a label value names. problem is set when
// the value is not a DNS-1123 label, which Karmada requires of cluster names.
func (r *Resolver) labelCluster(value string) (c *karmada.Cluster, found bool, problem string) {
	c = r.cluster(value)
	if c != nil && r.validClusterName(value) {
		return c, true, ""
	}
	if errs := validation.IsDNS1123Label(value); len(errs) > 0 {
		return nil, false, errs[0]
	}
	return nil, false, ""
}

// validClusterName is validation.IsDNS1123Label memoized for the names of
// Clusters in the cache: the regexp costs a third of a lookup, and keying
// only by existing Cluster names keeps the memo as small as the fleet
// whatever label values pods carry.
func (r *Resolver) validClusterName(name string) bool {
	if v, ok := r.validNames.Load(name); ok {
		return v.(bool)
	}
	valid := len(validation.IsDNS1123Label(name)) == 0
	r.validNames.Store(name, valid)
	return valid
}

// ClusterKnown reports whether Karmada has a member cluster named name.
func (r *Resolver) ClusterKnown(name string) bool { return r.cluster(name) != nil }

func (r *Resolver) cluster(name string) *karmada.Cluster {
	obj, exists, err := r.clusters.GetByKey(name)
	if err != nil || !exists {
		return nil
	}
	c, _ := obj.(*karmada.Cluster)
	return c
}

// binding returns the pod's ResourceBinding, or nil (see
// karmada.Informers.BindingOf for which bindings count).
func (r *Resolver) binding(ctx context.Context, namespace, pod string, meta *karmada.CachedPod) *karmada.CachedBinding {
	b, qualified, err := r.informers.BindingOf("Pod", namespace, pod, meta.UID)
	if err != nil {
		// Only a missing index fails, and New checked for it.
		klog.FromContext(ctx).Error(err, "Looking up ResourceBinding", "pod", klog.KRef(namespace, pod))
		return nil
	}
	if qualified > 1 {
		klog.FromContext(ctx).Info("Several ResourceBindings point at pod; using the lowest name",
			"pod", klog.KRef(namespace, pod), "count", qualified, "chosen", b.Name)
	}
	return b
}

// bindingCluster picks among b's scheduled clusters for the object kind
// ("pod" or "service") namespace/pod; see the package doc. Its result tells
// why it found none.
func (r *Resolver) bindingCluster(ctx context.Context, kind, namespace, pod string, b *karmada.CachedBinding) (string, result, error) {
	var (
		chosen   string
		firstErr error
		names    []string
	)
	candidates := b.CandidateClusters()
	if r.members != nil {
		// Acting as the gateway: only where Karmada applied the template's
		// copy, never the fallback to every scheduled cluster, which would
		// reach a member object of the same name Karmada does not manage.
		candidates = appliedClusters(b)
	}
	for name := range candidates {
		names = append(names, name)
		if chosen != "" {
			continue // keep collecting candidates for the ambiguity report
		}
		c := r.cluster(name)
		switch {
		case c == nil:
			if firstErr == nil {
				firstErr = unregistered(kind, namespace, pod, name)
			}
		default:
			if ready, msg := c.Ready(); ready {
				chosen = name
			} else if firstErr == nil {
				firstErr = notReady(kind, namespace, pod, name, msg)
			}
		}
	}
	if len(names) > 1 {
		r.ambiguous.Inc()
		klog.FromContext(ctx).Info("Object is scheduled to several clusters; choosing the first ready one in scheduler order",
			kind, klog.KRef(namespace, pod), "binding", b.Name, "candidates", names, "chosen", chosen)
	}
	switch {
	case chosen != "":
		return chosen, resultOK, nil
	case len(names) == 0: // acting as the gateway, nothing applied
		return "", resultNotApplied, notApplied(kind, namespace, pod, b)
	}
	return "", resultClusterNotReady, firstErr
}

// appliedClusters yields b's scheduled clusters that its status reports
// applied, in spec.clusters order.
func appliedClusters(b *karmada.CachedBinding) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, c := range b.Spec.Clusters {
			if appliedOn(b, c.Name) && !yield(c.Name) {
				return
			}
		}
	}
}

// verifyCopy, when the gateway acts as itself, reads the metadata of
// namespace/name in cluster with the gateway's identity and accepts it
// only as Karmada's copy of the template whose UID is uid: labelled
// karmada.io/managed=true and annotated with that UID. Names do not prove
// anything: a member object of the same name that Karmada does not manage,
// or the copy of an earlier template of that name, is refused. It returns
// the copy's UID (empty when not acting as the gateway).
func (r *Resolver) verifyCopy(ctx context.Context, resource schema.GroupVersionResource, kind, namespace, name string, uid types.UID, cluster string) (types.UID, error) {
	if r.members == nil {
		return "", nil
	}
	m, err := r.members.Metadata(ctx, cluster, resource, namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		return "", unavailable(kind, name, fmt.Sprintf("%s %q has no copy in member cluster %q (Karmada has not created it yet, or is recreating it)",
			kind, namespace+"/"+name, cluster))
	case err != nil:
		klog.FromContext(ctx).Info("Cannot read the member object to check it is the template's copy",
			kind, klog.KRef(namespace, name), "cluster", cluster, "err", err)
		return "", unavailable(kind, name, fmt.Sprintf("cannot check that %s %q in member cluster %q is Karmada's copy of the template: %v",
			kind, namespace+"/"+name, cluster, err))
	}
	var why string
	switch {
	case m.Labels[karmada.ManagedLabel] != "true":
		why = "Karmada does not manage it"
	case uid == "" || m.Annotations[karmada.TemplateUIDAnnotation] != string(uid):
		why = "Karmada propagated it from another template of that name"
	default:
		return m.UID, nil
	}
	klog.FromContext(ctx).Info("Member object is not the template's copy; refusing to act on it as the gateway",
		kind, klog.KRef(namespace, name), "cluster", cluster, "reason", why)
	return "", conflict(kind, name, fmt.Sprintf("%s %q in member cluster %q is not Karmada's copy of this %s template: %s; the gateway acts only on a template's own copy",
		kind, namespace+"/"+name, cluster, kind, why))
}

func unavailable(kind, name, message string) *apierrors.StatusError {
	return statusError(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, kind, name, message, retryAfterSeconds)
}

func conflict(kind, name, message string) *apierrors.StatusError {
	return statusError(http.StatusConflict, metav1.StatusReasonConflict, kind, name, message, 0)
}

func statusError(code int32, reason metav1.StatusReason, kind, name, message string, retryAfter int32) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    code,
		Reason:  reason,
		Message: message,
		Details: &metav1.StatusDetails{Kind: kind + "s", Name: name, RetryAfterSeconds: retryAfter},
	}}
}

// notApplied explains why no scheduled cluster of b has the template's copy:
// 409 when Karmada reports it tried and failed (a member object it does not
// manage holds the name, which retrying does not fix), else 503 while
// Karmada is still applying it.
func notApplied(kind, namespace, name string, b *karmada.CachedBinding) error {
	var failures []string
	for _, c := range b.Spec.Clusters {
		if _, msg := b.AppliedOn(c.Name); msg != "" {
			failures = append(failures, fmt.Sprintf("%s: %s", c.Name, msg))
		}
	}
	if len(failures) > 0 {
		return conflict(kind, name, fmt.Sprintf("%s %q has no copy Karmada applied on a member cluster, so the gateway will not act on the member's object: %s",
			kind, namespace+"/"+name, strings.Join(failures, "; ")))
	}
	return unavailable(kind, name, fmt.Sprintf("%s %q is scheduled to %s but Karmada has not reported its copy applied there yet",
		kind, namespace+"/"+name, strings.Join(b.ClusterNames(), ", ")))
}

func notPlaced(namespace, pod string, b *karmada.CachedBinding) error {
	if b == nil {
		return unavailable("pod", pod, fmt.Sprintf("pod %q is not placed on any member cluster: it has no ResourceBinding (is a PropagationPolicy selecting it?)", namespace+"/"+pod))
	}
	return unavailable("pod", pod, fmt.Sprintf("pod %q is not placed on any member cluster yet: its ResourceBinding %q has no scheduled clusters", namespace+"/"+pod, b.Name))
}

func notReady(kind, namespace, name, cluster, condition string) error {
	return unavailable(kind, name, fmt.Sprintf("member cluster %q of %s %q is not ready: %s", cluster, kind, namespace+"/"+name, condition))
}

func unregistered(kind, namespace, name, cluster string) error {
	return unavailable(kind, name, fmt.Sprintf("member cluster %q of %s %q is not a registered Karmada Cluster", cluster, kind, namespace+"/"+name))
}
