package labeler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada/karmadatest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

const ns = "ci"

// harness keeps pod templates in a fake metadata client (what the Pods
// informer watches) and bindings in a fake dynamic client (what the Bindings
// informer watches), both read through the real karmada.NewInformers. Pod
// patches sent to the fake clientset are applied to the metadata client, so
// a patch shows up in the labeler's cache as it would against a real server.
type harness struct {
	md   *metadatafake.FakeMetadataClient
	dyn  *dynamicfake.FakeDynamicClient
	kube *kubefake.Clientset
	inf  *karmada.Informers
}

func newHarness(t *testing.T, pods []*metav1.PartialObjectMetadata, bindings []*karmada.ResourceBinding) *harness {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	podObjs := make([]runtime.Object, 0, len(pods))
	for _, p := range pods {
		podObjs = append(podObjs, p)
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, podObjs...)

	bindingObjs := make([]runtime.Object, 0, len(bindings))
	for _, b := range bindings {
		bindingObjs = append(bindingObjs, karmadatest.Unstructured(t, b, bindingGVK))
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		karmada.ResourceBindingGVR: "ResourceBindingList",
		karmada.ClusterGVR:         "ClusterList",
	}, bindingObjs...)

	kube := kubefake.NewClientset()
	kube.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		p := action.(k8stesting.PatchAction)
		got, err := md.Resource(karmada.PodGVR).Namespace(p.GetNamespace()).
			Patch(context.Background(), p.GetName(), p.GetPatchType(), p.GetPatch(), metav1.PatchOptions{})
		if err != nil {
			return true, nil, err
		}
		return true, &corev1.Pod{ObjectMeta: got.ObjectMeta}, nil
	})

	inf, err := karmada.NewInformers(karmada.InformersOptions{Metadata: md, Dynamic: dyn})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{md: md, dyn: dyn, kube: kube, inf: inf}
}

// start starts the informers and waits for their first list.
func (h *harness) start(t *testing.T, ctx context.Context) {
	t.Helper()
	h.inf.Start(ctx)
	if !h.inf.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
}

func (h *harness) labeler(t *testing.T, opts Options) *Labeler {
	t.Helper()
	opts.Informers = h.inf
	opts.Client = h.kube
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(prometheus.NewRegistry())
	}
	l, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (h *harness) updateBinding(t *testing.T, b *karmada.ResourceBinding) {
	t.Helper()
	if _, err := h.dyn.Resource(karmada.ResourceBindingGVR).Namespace(b.Namespace).
		Update(context.Background(), karmadatest.Unstructured(t, b, bindingGVK), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) createBinding(t *testing.T, b *karmada.ResourceBinding) {
	t.Helper()
	if _, err := h.dyn.Resource(karmada.ResourceBindingGVR).Namespace(b.Namespace).
		Create(context.Background(), karmadatest.Unstructured(t, b, bindingGVK), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// cachedLabel is the pod's cluster label as the labeler's cache sees it.
func (h *harness) cachedLabel(name string) (string, bool) {
	obj, ok, _ := h.inf.Pods.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return "", false
	}
	p, _ := karmada.PodOf(obj)
	return p.Cluster, p.HasCluster
}

func (h *harness) podPatches() []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range h.kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "pods" {
			out = append(out, p)
		}
	}
	return out
}

var bindingGVK = karmada.ResourceBindingGVR.GroupVersion().WithKind("ResourceBinding")

func pod(name string, labels map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels},
	}
}

// binding binds Pod name to clusters; applied lists the clusters the
// status reports as applied.
func binding(name string, clusters []string, applied ...string) *karmada.ResourceBinding {
	b := &karmada.ResourceBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: karmada.BindingName(name, "Pod"),
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Minute))},
		Spec: karmada.ResourceBindingSpec{Resource: karmada.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name, UID: "uid-" + name,
		}},
	}
	for _, c := range clusters {
		b.Spec.Clusters = append(b.Spec.Clusters, karmada.TargetCluster{Name: c})
	}
	for _, c := range applied {
		b.Status.AggregatedStatus = append(b.Status.AggregatedStatus, karmada.AggregatedStatusItem{ClusterName: c, Applied: true})
	}
	return b
}

func labels(cluster string) map[string]string {
	return map[string]string{karmada.ClusterNameLabel: cluster, "app": "job"}
}

func mergePatch(cluster string) string {
	return `{"metadata":{"labels":{"cluster.karmada.io/name":"` + cluster + `"}}}`
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func patchCount(t *testing.T, m *metrics.Metrics, result string) float64 {
	return counterValue(t, m.LabelerPatchesTotal.WithLabelValues(result))
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	return ctx
}

// TestSync covers the reconcile decision for one pod, against caches filled
// from the fake clients.
func TestSync(t *testing.T) {
	deployment := binding("web", []string{"member1"})
	deployment.Name = "web-deployment"
	deployment.Spec.Resource.APIVersion, deployment.Spec.Resource.Kind = "apps/v1", "Deployment"

	wrongVersion := binding("weird", []string{"member1"})
	wrongVersion.Spec.Resource.APIVersion = "v2"

	noTime := binding("old", []string{"member1"})
	noTime.Status.LastScheduledTime = nil
	scheduled := binding("job", []string{"member1"})
	scheduled.Status.LastScheduledTime = &metav1.Time{Time: time.Now().Add(-2 * time.Second)}

	deleting := pod("leaving", nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}

	tests := []struct {
		name     string
		pods     []*metav1.PartialObjectMetadata
		bindings []*karmada.ResourceBinding
		key      string
		// failPatch, when set, is what the API answers to the patch.
		failPatch error
		// wantPatch is the exact patch body, "" for no patch at all.
		wantPatch  string
		wantErr    bool
		wantResult string
	}{
		{
			name:       "new binding adds the label",
			pods:       []*metav1.PartialObjectMetadata{pod("job", map[string]string{"app": "job"})},
			bindings:   []*karmada.ResourceBinding{scheduled},
			key:        "ci/job",
			wantPatch:  mergePatch("member1"),
			wantResult: ResultSuccess,
		},
		{
			name:     "label already right: no patch",
			pods:     []*metav1.PartialObjectMetadata{pod("job", labels("member1"))},
			bindings: []*karmada.ResourceBinding{binding("job", []string{"member1"}, "member1")},
			key:      "ci/job",
		},
		{
			name:       "wrong label is corrected",
			pods:       []*metav1.PartialObjectMetadata{pod("job", labels("member9"))},
			bindings:   []*karmada.ResourceBinding{binding("job", []string{"member1"})},
			key:        "ci/job",
			wantPatch:  mergePatch("member1"),
			wantResult: ResultSuccess,
		},
		{
			name:       "applied cluster preferred over spec order",
			pods:       []*metav1.PartialObjectMetadata{pod("job", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job", []string{"member1", "member2", "member3"}, "member3", "member2")},
			key:        "ci/job",
			wantPatch:  mergePatch("member2"),
			wantResult: ResultSuccess,
		},
		{
			name:       "nothing applied: first in spec order",
			pods:       []*metav1.PartialObjectMetadata{pod("job", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job", []string{"member2", "member1"}, "member9")},
			key:        "ci/job",
			wantPatch:  mergePatch("member2"),
			wantResult: ResultSuccess,
		},
		{
			name:       "binding without lastScheduledTime",
			pods:       []*metav1.PartialObjectMetadata{pod("old", nil)},
			bindings:   []*karmada.ResourceBinding{noTime},
			key:        "ci/old",
			wantPatch:  mergePatch("member1"),
			wantResult: ResultSuccess,
		},
		{
			name: "pod without binding untouched, even with a label",
			pods: []*metav1.PartialObjectMetadata{pod("job", labels("member1"))},
			key:  "ci/job",
		},
		{
			name:     "binding for a non-Pod kind ignored",
			pods:     []*metav1.PartialObjectMetadata{pod("web", nil)},
			bindings: []*karmada.ResourceBinding{deployment},
			key:      "ci/web",
		},
		{
			name:     "binding for a Pod of another apiVersion ignored",
			pods:     []*metav1.PartialObjectMetadata{pod("weird", nil)},
			bindings: []*karmada.ResourceBinding{wrongVersion},
			key:      "ci/weird",
		},
		{
			name: "binding of an earlier pod with the same name ignored",
			pods: []*metav1.PartialObjectMetadata{func() *metav1.PartialObjectMetadata {
				p := pod("job", nil)
				p.UID = "uid-recreated"
				return p
			}()},
			bindings: []*karmada.ResourceBinding{binding("job", []string{"member1"})},
			key:      "ci/job",
		},
		{
			name:     "not scheduled yet",
			pods:     []*metav1.PartialObjectMetadata{pod("job", nil)},
			bindings: []*karmada.ResourceBinding{binding("job", nil)},
			key:      "ci/job",
		},
		{
			name:     "cluster name not a DNS-1123 label is not written",
			pods:     []*metav1.PartialObjectMetadata{pod("job", nil)},
			bindings: []*karmada.ResourceBinding{binding("job", []string{"Member_1/../x"})},
			key:      "ci/job",
		},
		{
			name:     "pod not in the cache",
			bindings: []*karmada.ResourceBinding{binding("job", []string{"member1"})},
			key:      "ci/job",
		},
		{
			name:     "pod being deleted",
			pods:     []*metav1.PartialObjectMetadata{deleting},
			bindings: []*karmada.ResourceBinding{binding("leaving", []string{"member1"})},
			key:      "ci/leaving",
		},
		{
			name:       "404 on patch is done, not an error",
			pods:       []*metav1.PartialObjectMetadata{pod("job", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job", []string{"member1"})},
			key:        "ci/job",
			failPatch:  apierrors.NewNotFound(corev1.Resource("pods"), "job"),
			wantPatch:  mergePatch("member1"),
			wantResult: ResultNotFound,
		},
		{
			name:       "conflict on patch is an error",
			pods:       []*metav1.PartialObjectMetadata{pod("job", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job", []string{"member1"})},
			key:        "ci/job",
			failPatch:  apierrors.NewConflict(corev1.Resource("pods"), "job", errors.New("changed")),
			wantPatch:  mergePatch("member1"),
			wantErr:    true,
			wantResult: ResultError,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			h := newHarness(t, tt.pods, tt.bindings)
			if tt.failPatch != nil {
				h.kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.failPatch
				})
			}
			m := metrics.New(prometheus.NewRegistry())
			l := h.labeler(t, Options{Metrics: m})
			h.start(t, ctx)

			err := l.sync(ctx, tt.key)
			if (err != nil) != tt.wantErr {
				t.Fatalf("sync error = %v, want error %v", err, tt.wantErr)
			}

			patches := h.podPatches()
			if tt.wantPatch == "" {
				if len(patches) != 0 {
					t.Fatalf("want no patch, got %d: %s", len(patches), patches[0].GetPatch())
				}
			} else {
				if len(patches) != 1 {
					t.Fatalf("want 1 patch, got %d", len(patches))
				}
				p := patches[0]
				if p.GetPatchType() != types.MergePatchType {
					t.Errorf("patch type = %s, want %s", p.GetPatchType(), types.MergePatchType)
				}
				if got := string(p.GetPatch()); got != tt.wantPatch {
					t.Errorf("patch body = %s, want %s", got, tt.wantPatch)
				}
				if p.GetNamespace()+"/"+p.GetName() != tt.key {
					t.Errorf("patched %s/%s, want %s", p.GetNamespace(), p.GetName(), tt.key)
				}
			}

			for _, r := range []string{ResultSuccess, ResultNotFound, ResultError} {
				want := 0.0
				if r == tt.wantResult {
					want = 1
				}
				if got := patchCount(t, m, r); got != want {
					t.Errorf("patches{result=%q} = %v, want %v", r, got, want)
				}
			}
			wantLatency := uint64(0)
			if tt.wantResult == ResultSuccess {
				wantLatency = 1
			}
			if got := histogramCount(t, m.LabelLatency); got != wantLatency {
				t.Errorf("label latency observations = %d, want %d", got, wantLatency)
			}
		})
	}
}

func TestScheduledAt(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	scheduled := created.Add(time.Hour)
	tests := []struct {
		name string
		last *metav1.Time
		want time.Time
	}{
		{"lastScheduledTime wins", &metav1.Time{Time: scheduled}, scheduled},
		{"creation time without it", nil, created},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &karmada.CachedBinding{CreationTimestamp: metav1.NewTime(created)}
			b.Status.LastScheduledTime = tt.last
			if got := scheduledAt(b); !got.Equal(tt.want) {
				t.Errorf("scheduledAt = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestEventHandlers checks which events enqueue which key.
func TestEventHandlers(t *testing.T) {
	deployment := binding("web", []string{"member1"})
	deployment.Spec.Resource.APIVersion, deployment.Spec.Resource.Kind = "apps/v1", "Deployment"
	otherVersion := binding("job", []string{"member1"})
	otherVersion.Spec.Resource.APIVersion = "v1beta1"
	moved := binding("other", []string{"member1"})

	tests := []struct {
		name  string
		event func(l *Labeler)
		want  []string
	}{
		{"pod add", func(l *Labeler) { l.onPodAdd(pod("job", nil)) }, []string{"ci/job"}},
		{"pod update, label changed", func(l *Labeler) { l.onPodUpdate(pod("job", labels("a")), pod("job", labels("b"))) }, []string{"ci/job"}},
		{"pod update, label removed", func(l *Labeler) { l.onPodUpdate(pod("job", labels("a")), pod("job", nil)) }, []string{"ci/job"}},
		{"pod update, label unchanged", func(l *Labeler) {
			l.onPodUpdate(pod("job", labels("a")), pod("job", map[string]string{karmada.ClusterNameLabel: "a", "x": "y"}))
		}, nil},
		{"binding add", func(l *Labeler) { l.onBinding(binding("job", []string{"member1"})) }, []string{"ci/job"}},
		{"binding update", func(l *Labeler) {
			l.onBindingUpdate(binding("job", []string{"member1"}), binding("job", []string{"member2"}))
		}, []string{"ci/job"}},
		{"binding update, resource changed", func(l *Labeler) {
			l.onBindingUpdate(binding("job", []string{"member1"}), moved)
		}, []string{"ci/job", "ci/other"}},
		{"binding delete tombstone", func(l *Labeler) {
			l.onBinding(cache.DeletedFinalStateUnknown{Key: "ci/job-pod", Obj: binding("job", nil)})
		}, []string{"ci/job"}},
		{"binding for a Deployment", func(l *Labeler) { l.onBinding(deployment) }, nil},
		{"binding for another apiVersion", func(l *Labeler) { l.onBinding(otherVersion) }, nil},
		{"not a binding", func(l *Labeler) { l.onBinding(pod("job", nil)) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil, nil)
			l := h.labeler(t, Options{})
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
			defer q.ShutDown()
			l.setQueue(q)
			tt.event(l)
			l.setQueue(nil)
			// Outside a term events are dropped, which this must not panic on.
			tt.event(l)

			got := map[string]bool{}
			for q.Len() > 0 {
				k, _ := q.Get()
				got[k] = true
				q.Done(k)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("enqueued %v, want %v", got, tt.want)
			}
			for _, k := range tt.want {
				if !got[k] {
					t.Errorf("enqueued %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestProcessNextRequeue drives the worker step directly, so "not retried"
// is checked on the queue itself rather than inferred from silence.
func TestProcessNextRequeue(t *testing.T) {
	tests := []struct {
		name         string
		answer       error
		wantRequeues int
	}{
		{"success forgets the key", nil, 0},
		{"404 is not retried", apierrors.NewNotFound(corev1.Resource("pods"), "job"), 0},
		{"server error is retried", apierrors.NewInternalError(errors.New("etcd timeout")), 1},
		{"conflict is retried", apierrors.NewConflict(corev1.Resource("pods"), "job", errors.New("changed")), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			h := newHarness(t, []*metav1.PartialObjectMetadata{pod("job", nil)},
				[]*karmada.ResourceBinding{binding("job", []string{"member1"})})
			if tt.answer != nil {
				h.kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.answer
				})
			}
			l := h.labeler(t, Options{})
			h.start(t, ctx)

			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
			defer q.ShutDown()
			q.Add("ci/job")
			if !l.processNext(ctx, q) {
				t.Fatal("processNext stopped")
			}
			if got := len(h.podPatches()); got != 1 {
				t.Fatalf("patches = %d, want 1", got)
			}
			if got := q.NumRequeues("ci/job"); got != tt.wantRequeues {
				t.Errorf("requeues = %d, want %d", got, tt.wantRequeues)
			}
			if tt.wantRequeues == 0 && q.Len() != 0 {
				t.Errorf("queue length = %d, want 0", q.Len())
			}
		})
	}
}

type runResult struct {
	done chan struct{}
	err  error
}

func run(ctx context.Context, l *Labeler) *runResult {
	r := &runResult{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = l.Run(ctx)
	}()
	return r
}

func (r *runResult) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
}

// TestRunFollowsFailover runs the whole controller without leader election:
// a binding created after start labels its pod, a failover relabels it.
func TestRunFollowsFailover(t *testing.T) {
	ctx := testContext(t)
	h := newHarness(t, []*metav1.PartialObjectMetadata{pod("job", nil), pod("plain", labels("mine"))}, nil)
	m := metrics.New(prometheus.NewRegistry())
	l := h.labeler(t, Options{Metrics: m, Workers: 3})
	h.start(t, ctx)
	runCtx, stop := context.WithCancel(ctx)
	r := run(runCtx, l)
	eventually(t, "leader gauge 1 without leader election", func() bool { return gaugeValue(t, m.LabelerLeader) == 1 })

	b := binding("job", []string{"member1"})
	h.createBinding(t, b)
	eventually(t, "label member1", func() bool { v, _ := h.cachedLabel("job"); return v == "member1" })

	// Failover: Karmada reschedules to member2, member1 stops reporting applied.
	b.Spec.Clusters = []karmada.TargetCluster{{Name: "member1"}, {Name: "member2"}}
	b.Status.AggregatedStatus = []karmada.AggregatedStatusItem{{ClusterName: "member1"}, {ClusterName: "member2", Applied: true}}
	b.Status.LastScheduledTime = &metav1.Time{Time: time.Now()}
	h.updateBinding(t, b)
	eventually(t, "label member2", func() bool { v, _ := h.cachedLabel("job"); return v == "member2" })

	// A user overwriting the label gets it corrected back.
	if _, err := h.md.Resource(karmada.PodGVR).Namespace(ns).Patch(ctx, "job", types.MergePatchType,
		[]byte(mergePatch("elsewhere")), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The cache may not have seen the overwrite yet, so wait for the third
	// patch rather than for the label alone. A fourth can follow: a worker
	// that takes the key again before the cache shows the restored label
	// patches it once more, to the same value (seen on a busy machine).
	eventually(t, "label restored to member2", func() bool {
		v, _ := h.cachedLabel("job")
		return v == "member2" && patchCount(t, m, ResultSuccess) >= 3
	})

	stop()
	r.wait(t)
	if got := gaugeValue(t, m.LabelerLeader); got != 0 {
		t.Errorf("leader gauge after Run = %v, want 0", got)
	}
	patches := patchCount(t, m, ResultSuccess)
	if patches < 3 || patches > 4 {
		t.Errorf("successful patches = %v, want 3 (or 4, one repeated from a stale cache)", patches)
	}
	if got := histogramCount(t, m.LabelLatency); float64(got) != patches {
		t.Errorf("latency observations = %d, want one per patch (%v)", got, patches)
	}
	for _, p := range h.podPatches() {
		if p.GetName() != "job" {
			t.Errorf("patched pod %s, which has no binding", p.GetName())
		}
	}
	if v, _ := h.cachedLabel("plain"); v != "mine" {
		t.Errorf("unbound pod's label = %q, want it left as %q", v, "mine")
	}
}

// TestRunRetriesErrors fails the first patch and checks the workqueue
// retries it to success.
func TestRunRetriesErrors(t *testing.T) {
	ctx := testContext(t)
	h := newHarness(t, []*metav1.PartialObjectMetadata{pod("job", nil)},
		[]*karmada.ResourceBinding{binding("job", []string{"member1"})})
	var mu sync.Mutex
	failures := 1
	h.kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			return true, nil, apierrors.NewServiceUnavailable("try again")
		}
		return false, nil, nil
	})
	m := metrics.New(prometheus.NewRegistry())
	l := h.labeler(t, Options{Metrics: m})
	h.start(t, ctx)
	runCtx, stop := context.WithCancel(ctx)
	r := run(runCtx, l)
	eventually(t, "label after a retry", func() bool { v, _ := h.cachedLabel("job"); return v == "member1" })
	stop()
	r.wait(t)

	if got := len(h.podPatches()); got != 2 {
		t.Errorf("patch attempts = %d, want 2", got)
	}
	if e, s := patchCount(t, m, ResultError), patchCount(t, m, ResultSuccess); e != 1 || s != 1 {
		t.Errorf("patches error=%v success=%v, want 1 and 1", e, s)
	}
}

func leaseHolder(t *testing.T, h *harness) string {
	t.Helper()
	lease, err := h.kube.CoordinationV1().Leases("gateway").Get(context.Background(), "labeler", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// TestLeaderElection runs two replicas on one Lease: only the leader
// patches; cancelling it releases the lease and the other takes over.
func TestLeaderElection(t *testing.T) {
	ctx := testContext(t)
	h := newHarness(t, []*metav1.PartialObjectMetadata{pod("job", nil)},
		[]*karmada.ResourceBinding{binding("job", []string{"member1"})})

	type replica struct {
		id     string
		m      *metrics.Metrics
		l      *Labeler
		r      *runResult
		cancel context.CancelFunc
	}
	replicas := make([]*replica, 2)
	for i := range replicas {
		rp := &replica{id: fmt.Sprintf("replica-%d", i), m: metrics.New(prometheus.NewRegistry())}
		rp.l = h.labeler(t, Options{
			Metrics: rp.m, Workers: 1,
			LeaderElection: true, LeaseNamespace: "gateway", LeaseName: "labeler", Identity: rp.id,
			LeaseDuration: 10 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: 20 * time.Millisecond,
		})
		replicas[i] = rp
	}
	h.start(t, ctx)
	for _, rp := range replicas {
		runCtx, cancel := context.WithCancel(klog.NewContext(ctx, klog.FromContext(ctx).WithValues("replica", rp.id)))
		rp.cancel, rp.r = cancel, run(runCtx, rp.l)
	}

	var leader, follower *replica
	eventually(t, "one leader", func() bool {
		for i, rp := range replicas {
			if gaugeValue(t, rp.m.LabelerLeader) == 1 {
				leader, follower = rp, replicas[1-i]
				return true
			}
		}
		return false
	})
	eventually(t, "label member1", func() bool { v, _ := h.cachedLabel("job"); return v == "member1" })
	// The informer can show the labeled pod before the worker that patched
	// it counts the patch: wait for the count, then check it is one.
	eventually(t, "the leader's patch counted", func() bool { return patchCount(t, leader.m, ResultSuccess) > 0 })
	if got := leaseHolder(t, h); got != leader.id {
		t.Errorf("lease holder = %q, want leader %q", got, leader.id)
	}
	if got := gaugeValue(t, follower.m.LabelerLeader); got != 0 {
		t.Errorf("follower leader gauge = %v, want 0", got)
	}
	if got := patchCount(t, leader.m, ResultSuccess); got != 1 {
		t.Errorf("leader patches = %v, want 1", got)
	}
	if got := patchCount(t, follower.m, ResultSuccess) + patchCount(t, follower.m, ResultError) + patchCount(t, follower.m, ResultNotFound); got != 0 {
		t.Errorf("follower patches = %v, want 0", got)
	}

	// SIGTERM on the leader: Run returns and the lease is released, not
	// left to expire.
	leader.cancel()
	leader.r.wait(t)
	if got := leaseHolder(t, h); got == leader.id {
		t.Errorf("lease still held by the stopped leader %q", got)
	}
	if got := gaugeValue(t, leader.m.LabelerLeader); got != 0 {
		t.Errorf("stopped leader's gauge = %v, want 0", got)
	}
	eventually(t, "follower takes over", func() bool { return gaugeValue(t, follower.m.LabelerLeader) == 1 })

	b := binding("job", []string{"member2"}, "member2")
	h.updateBinding(t, b)
	eventually(t, "label member2 from the new leader", func() bool { v, _ := h.cachedLabel("job"); return v == "member2" })
	eventually(t, "the new leader's patch counted", func() bool { return patchCount(t, follower.m, ResultSuccess) > 0 })
	if got := patchCount(t, follower.m, ResultSuccess); got != 1 {
		t.Errorf("new leader patches = %v, want 1", got)
	}
	if got := patchCount(t, leader.m, ResultSuccess); got != 1 {
		t.Errorf("old leader patches = %v, want still 1", got)
	}

	follower.cancel()
	follower.r.wait(t)
	if got := leaseHolder(t, h); got != "" {
		t.Errorf("lease holder after both stopped = %q, want released", got)
	}
}

func TestRunTwice(t *testing.T) {
	ctx := testContext(t)
	h := newHarness(t, nil, nil)
	l := h.labeler(t, Options{})
	h.start(t, ctx)
	runCtx, stop := context.WithCancel(ctx)
	r := run(runCtx, l)
	eventually(t, "first Run started", l.ran.Load)
	if err := l.Run(ctx); err == nil {
		t.Error("second Run returned nil, want an error")
	}
	stop()
	r.wait(t)
}

func TestNewValidates(t *testing.T) {
	h := newHarness(t, nil, nil)
	tests := []struct {
		name string
		opts Options
	}{
		{"no informers", Options{Client: h.kube}},
		{"no client", Options{Informers: h.inf}},
		{"negative workers", Options{Informers: h.inf, Client: h.kube, Workers: -1}},
		{"leader election without namespace", Options{Informers: h.inf, Client: h.kube, LeaderElection: true}},
		{"renew deadline not below lease duration", Options{Informers: h.inf, Client: h.kube, LeaderElection: true,
			LeaseNamespace: "gateway", LeaseDuration: time.Second, RenewDeadline: 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.opts); err == nil {
				t.Error("New returned nil error")
			}
		})
	}

	l, err := New(Options{Informers: h.inf, Client: h.kube, LeaderElection: true, LeaseNamespace: "gateway"})
	if err != nil {
		t.Fatal(err)
	}
	if l.opts.Identity == "" || l.opts.LeaseName != DefaultLeaseName || l.opts.Workers != DefaultWorkers ||
		l.opts.LeaseDuration != DefaultLeaseDuration || l.opts.RenewDeadline != DefaultRenewDeadline ||
		l.opts.RetryPeriod != DefaultRetryPeriod {
		t.Errorf("defaults not applied: %+v", l.opts)
	}
}
