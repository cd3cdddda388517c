package resolver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

const ns = "ci"

func pod(name string, labels map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels},
	}
}

func clusterLabel(c string) map[string]string { return map[string]string{karmada.ClusterNameLabel: c} }

// binding places podName on clusters in that order; applied lists the
// clusters the aggregated status reports applied.
func binding(name, podName string, clusters []string, applied ...string) *karmada.ResourceBinding {
	b := &karmada.ResourceBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: karmada.ResourceBindingSpec{Resource: karmada.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: podName,
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

func cluster(name string, ready bool, message string) *karmada.Cluster {
	status := metav1.ConditionTrue
	if !ready {
		status = metav1.ConditionFalse
	}
	return &karmada.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: karmada.ClusterStatus{Conditions: []metav1.Condition{{
			Type: karmada.ClusterConditionReady, Status: status, Message: message,
		}}},
	}
}

// storeInformers fills informer stores directly: the resolver only reads
// indexers, and the shipped index function is the one under test.
func storeInformers(t testing.TB, pods []*metav1.PartialObjectMetadata, bindings []*karmada.ResourceBinding, clusters []*karmada.Cluster) *karmada.Informers {
	t.Helper()
	inf := &karmada.Informers{
		Pods:     cache.NewSharedIndexInformer(&cache.ListWatch{}, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{}),
		Bindings: cache.NewSharedIndexInformer(&cache.ListWatch{}, &karmada.ResourceBinding{}, 0, cache.Indexers{karmada.BindingsByResourceIndex: karmada.IndexBindingByResource}),
		Clusters: cache.NewSharedIndexInformer(&cache.ListWatch{}, &karmada.Cluster{}, 0, cache.Indexers{}),
	}
	for _, p := range pods {
		if err := inf.Pods.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range bindings {
		if err := inf.Bindings.GetIndexer().Add(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clusters {
		if err := inf.Clusters.GetIndexer().Add(c); err != nil {
			t.Fatal(err)
		}
	}
	return inf
}

var (
	member1 = cluster("member1", true, "cluster is healthy and ready to accept workloads")
	member2 = cluster("member2", true, "cluster is healthy and ready to accept workloads")
	member3 = cluster("member3", true, "cluster is healthy and ready to accept workloads")
	down1   = cluster("member1", false, "cluster is not reachable")
	down2   = cluster("member2", false, "cluster is not reachable")
)

// counters returns the non-zero series of the counter family name, keyed by
// label values joined with "/" in label name order. It reads the registry
// rather than using prometheus/testutil, which would add a module to go.sum.
func counters(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				var values []string
				for _, l := range m.GetLabel() {
					values = append(values, l.GetValue())
				}
				out[strings.Join(values, "/")] = v
			}
		}
	}
	return out
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name     string
		pods     []*metav1.PartialObjectMetadata
		bindings []*karmada.ResourceBinding
		clusters []*karmada.Cluster
		pod      string // defaults to job-42

		want       string
		wantCode   int32    // 0 when Resolve succeeds
		wantMsg    []string // substrings of the Status message
		notInMsg   []string
		wantMetric string // source/result
		ambiguous  float64
		wantLog    []string // substrings of the log output
		notInLog   []string
	}{
		{
			name:       "label picks among the binding's clusters",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", clusterLabel("member2"))},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member1")},
			clusters:   []*karmada.Cluster{member1, member2},
			want:       "member2",
			wantMetric: "label/ok",
		},
		{
			name:       "forged label naming a cluster outside the placement is not followed",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", clusterLabel("member2"))},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1"}, "member1")},
			clusters:   []*karmada.Cluster{member1, member2},
			want:       "member1",
			wantMetric: "binding/ok",
			wantLog:    []string{"not one of its binding's clusters", `cluster="member2"`},
		},
		{
			name:       "label without a binding: not placed, whatever the label says",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", clusterLabel("member2"))},
			clusters:   []*karmada.Cluster{member1, member2},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{"not placed", "no ResourceBinding"},
			wantMetric: "none/not_placed",
		},
		{
			name:       "binding when no label",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1"})},
			clusters:   []*karmada.Cluster{member1, member2},
			want:       "member1",
			wantMetric: "binding/ok",
		},
		{
			name:       "applied cluster preferred over scheduler order",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member2")},
			clusters:   []*karmada.Cluster{member1, member2},
			want:       "member2",
			wantMetric: "binding/ok",
		},
		{
			name:       "several unapplied clusters: first in spec order, ambiguous counted",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member2", "member1", "member3"})},
			clusters:   []*karmada.Cluster{member1, member2, member3},
			want:       "member2",
			wantMetric: "binding/ok",
			ambiguous:  1,
			wantLog:    []string{"several clusters", `candidates=["member2","member1","member3"]`, `chosen="member2"`},
		},
		{
			name:       "several applied clusters: first applied in spec order, unapplied not candidates",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1", "member3", "member2"}, "member2", "member3")},
			clusters:   []*karmada.Cluster{member1, member2, member3},
			want:       "member3",
			wantMetric: "binding/ok",
			ambiguous:  1,
			wantLog:    []string{`candidates=["member3","member2"]`},
			notInLog:   []string{`"member1"`},
		},
		{
			name:       "first candidate not ready: next ready candidate",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member1", "member2")},
			clusters:   []*karmada.Cluster{down1, member2},
			want:       "member2",
			wantMetric: "binding/ok",
			ambiguous:  1,
		},
		{
			name:       "no candidate ready: error names the first",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member2", "member1"})},
			clusters:   []*karmada.Cluster{down1, down2},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`member cluster "member2" of pod "ci/job-42" is not ready: cluster is not reachable`},
			wantMetric: "binding/cluster_not_ready",
			ambiguous:  1,
		},
		{
			name:       "invalid label value ignored, binding used",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", clusterLabel("Member_1"))},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1"})},
			clusters:   []*karmada.Cluster{member1, cluster("Member_1", true, "")},
			want:       "member1",
			wantMetric: "binding/ok",
			wantLog:    []string{"Ignoring invalid cluster label", "RFC 1123"},
		},
		{
			name:       "invalid label value and no binding: not placed, label not echoed",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", clusterLabel("a..b"))},
			clusters:   []*karmada.Cluster{member1},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{"not placed"},
			notInMsg:   []string{"a..b"},
			wantMetric: "none/not_placed",
		},
		{
			name:       "label naming an unknown cluster falls back to binding",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", clusterLabel("gone"))},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"gone", "member1"})},
			clusters:   []*karmada.Cluster{member1},
			want:       "member1",
			wantMetric: "binding/ok",
			wantLog:    []string{"names no known Cluster", `cluster="gone"`},
			ambiguous:  1,
		},
		{
			name:       "binding naming only an unknown cluster: error names the cluster",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", clusterLabel("gone"))},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"gone"})},
			clusters:   []*karmada.Cluster{member1},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`member cluster "gone" of pod "ci/job-42"`, "not a registered Karmada Cluster"},
			wantMetric: "binding/cluster_not_ready",
		},
		{
			name:       "label naming a not-ready cluster of the placement is authoritative",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", clusterLabel("member1"))},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member2")},
			clusters:   []*karmada.Cluster{down1, member2},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`member cluster "member1" of pod "ci/job-42" is not ready: cluster is not reachable`},
			wantMetric: "label/cluster_not_ready",
		},
		{
			name:       "binding cluster without Ready condition",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1"})},
			clusters:   []*karmada.Cluster{{ObjectMeta: metav1.ObjectMeta{Name: "member1"}}},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`member cluster "member1"`, "has no Ready condition"},
			wantMetric: "binding/cluster_not_ready",
		},
		{
			name:       "binding cluster not registered",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member9"})},
			clusters:   []*karmada.Cluster{member1},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`member cluster "member9" of pod "ci/job-42" is not a registered Karmada Cluster`},
			wantMetric: "binding/cluster_not_ready",
		},
		{
			name:       "pod not found",
			pods:       []*metav1.PartialObjectMetadata{pod("job-43", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", []string{"member1"})},
			clusters:   []*karmada.Cluster{member1},
			wantCode:   http.StatusNotFound,
			wantMsg:    []string{`pods "job-42" not found`},
			wantMetric: "none/not_found",
		},
		{
			name:       "pod of the same name in another namespace is not found",
			pods:       []*metav1.PartialObjectMetadata{{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "job-42"}}},
			clusters:   []*karmada.Cluster{member1},
			wantCode:   http.StatusNotFound,
			wantMetric: "none/not_found",
		},
		{
			name:       "no binding: not placed",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			clusters:   []*karmada.Cluster{member1},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`pod "ci/job-42" is not placed on any member cluster`, "no ResourceBinding", "PropagationPolicy"},
			wantMetric: "none/not_placed",
		},
		{
			name:       "binding without clusters: not placed",
			pods:       []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings:   []*karmada.ResourceBinding{binding("job-42-pod", "job-42", nil)},
			clusters:   []*karmada.Cluster{member1},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`pod "ci/job-42" is not placed on any member cluster yet`, `ResourceBinding "job-42-pod" has no scheduled clusters`},
			wantMetric: "none/not_placed",
		},
		{
			name: "binding found by index, not by name",
			pods: []*metav1.PartialObjectMetadata{pod("job-42", nil), pod("job-43", nil)},
			bindings: []*karmada.ResourceBinding{
				binding("unrelated-name", "job-42", []string{"member1"}),
				// Named as job-42's binding would be, but binds job-43.
				binding(karmada.BindingName("job-42", "Pod"), "job-43", []string{"member2"}),
			},
			clusters:   []*karmada.Cluster{member1, member2},
			want:       "member1",
			wantMetric: "binding/ok",
		},
		{
			name: "binding in another namespace cannot place the pod",
			pods: []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings: []*karmada.ResourceBinding{func() *karmada.ResourceBinding {
				b := binding("job-42-pod", "job-42", []string{"member1"})
				b.Namespace = "attacker"
				return b
			}()},
			clusters:   []*karmada.Cluster{member1},
			wantCode:   http.StatusServiceUnavailable,
			wantMetric: "none/not_placed",
		},
		{
			name: "binding of a non-core Pod kind is ignored",
			pods: []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings: []*karmada.ResourceBinding{func() *karmada.ResourceBinding {
				b := binding("job-42-pod", "job-42", []string{"member1"})
				b.Spec.Resource.APIVersion = "example.com/v1"
				return b
			}()},
			clusters:   []*karmada.Cluster{member1},
			wantCode:   http.StatusServiceUnavailable,
			wantMetric: "none/not_placed",
		},
		{
			name: "several bindings: lowest name wins",
			pods: []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings: []*karmada.ResourceBinding{
				binding("c-binding", "job-42", []string{"member3"}),
				binding("a-binding", "job-42", []string{"member1"}),
				binding("b-binding", "job-42", []string{"member2"}),
			},
			clusters:   []*karmada.Cluster{member1, member2, member3},
			want:       "member1",
			wantMetric: "binding/ok",
			wantLog:    []string{"Several ResourceBindings", `chosen="a-binding"`},
		},
		{
			name: "a binding of an earlier pod with the same name is ignored",
			pods: []*metav1.PartialObjectMetadata{pod("job-42", nil)},
			bindings: []*karmada.ResourceBinding{
				func() *karmada.ResourceBinding {
					b := binding("a-binding", "job-42", []string{"member1"})
					b.Spec.Resource.UID = "uid-of-an-earlier-job-42"
					return b
				}(),
				func() *karmada.ResourceBinding {
					b := binding("b-binding", "job-42", []string{"member2"})
					b.Spec.Resource.UID = "uid-job-42"
					return b
				}(),
			},
			clusters:   []*karmada.Cluster{member1, member2},
			want:       "member2",
			wantMetric: "binding/ok",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(context.Background(), logger)
			reg := prometheus.NewRegistry()
			m := metrics.New(reg)
			r, err := New(Options{Informers: storeInformers(t, tc.pods, tc.bindings, tc.clusters), Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			podName := tc.pod
			if podName == "" {
				podName = "job-42"
			}
			// Map iteration in the index makes a wrong tie-break show up
			// as flakiness; resolving many times makes it show up here.
			const rounds = 20
			for i := range rounds {
				got, err := r.Resolve(ctx, ns, podName)
				if got != tc.want {
					t.Fatalf("round %d: Resolve() = %q, want %q (err %v)", i, got, tc.want, err)
				}
				checkErr(t, err, tc.wantCode, podName, tc.wantMsg, tc.notInMsg)
			}
			// Label names sort, so keys read result/source.
			source, result, _ := strings.Cut(tc.wantMetric, "/")
			wantTotals := map[string]float64{result + "/" + source: rounds}
			if got := counters(t, reg, "karmada_gateway_resolve_total"); !maps.Equal(got, wantTotals) {
				t.Errorf("resolve_total = %v, want %v", got, wantTotals)
			}
			wantAmbiguous := map[string]float64{}
			if tc.ambiguous > 0 {
				wantAmbiguous[""] = tc.ambiguous * rounds
			}
			if got := counters(t, reg, "karmada_gateway_resolve_ambiguous_total"); !maps.Equal(got, wantAmbiguous) {
				t.Errorf("resolve_ambiguous_total = %v, want %v", got, wantAmbiguous)
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			for _, s := range tc.wantLog {
				if !strings.Contains(logs, s) {
					t.Errorf("log lacks %q:\n%s", s, logs)
				}
			}
			for _, s := range tc.notInLog {
				if strings.Contains(logs, s) {
					t.Errorf("log contains %q:\n%s", s, logs)
				}
			}
		})
	}
}

func checkErr(t *testing.T, err error, wantCode int32, podName string, wantMsg, notInMsg []string) {
	t.Helper()
	if wantCode == 0 {
		if err != nil {
			t.Fatalf("Resolve() error = %v, want nil", err)
		}
		return
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("Resolve() error = %#v, want an APIStatus", err)
	}
	s := status.Status()
	if s.Code != wantCode || s.Status != metav1.StatusFailure {
		t.Fatalf("Status code %d status %q, want %d Failure: %+v", s.Code, s.Status, wantCode, s)
	}
	switch wantCode {
	case http.StatusNotFound:
		if !apierrors.IsNotFound(err) {
			t.Errorf("IsNotFound(%v) = false", err)
		}
		if s.Details == nil || s.Details.Kind != "pods" || s.Details.Name != podName {
			t.Errorf("Status details = %+v, want pods %q", s.Details, podName)
		}
	case http.StatusServiceUnavailable:
		if !apierrors.IsServiceUnavailable(err) || apierrors.IsNotFound(err) {
			t.Errorf("want ServiceUnavailable only, got reason %q", s.Reason)
		}
		if delay, ok := apierrors.SuggestsClientDelay(err); !ok || delay != retryAfterSeconds {
			t.Errorf("SuggestsClientDelay = %d, %v; want %d", delay, ok, retryAfterSeconds)
		}
		if s.Details == nil || s.Details.Kind != "pods" || s.Details.Name != podName {
			t.Errorf("Status details = %+v, want pods %q", s.Details, podName)
		}
	}
	for _, m := range wantMsg {
		if !strings.Contains(s.Message, m) {
			t.Errorf("message %q lacks %q", s.Message, m)
		}
	}
	for _, m := range notInMsg {
		if strings.Contains(s.Message, m) {
			t.Errorf("message %q contains %q", s.Message, m)
		}
	}
}

func TestNew(t *testing.T) {
	full := storeInformers(t, nil, nil, nil)
	noIndex := storeInformers(t, nil, nil, nil)
	noIndex.Bindings = cache.NewSharedIndexInformer(&cache.ListWatch{}, &karmada.ResourceBinding{}, 0, cache.Indexers{})
	noClusters := storeInformers(t, nil, nil, nil)
	noClusters.Clusters = nil
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "ok without metrics", opts: Options{Informers: full}},
		{name: "no informers", opts: Options{}, wantErr: "required"},
		{name: "missing informer", opts: Options{Informers: noClusters}, wantErr: "required"},
		{name: "missing index", opts: Options{Informers: noIndex}, wantErr: karmada.BindingsByResourceIndex},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.opts)
			if tc.wantErr == "" {
				if err != nil || r == nil {
					t.Fatalf("New() = %v, %v", r, err)
				}
				// Without Metrics, counting must still work.
				if _, err := r.Resolve(context.Background(), ns, "absent"); !apierrors.IsNotFound(err) {
					t.Fatalf("Resolve() error = %v, want NotFound", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New() error = %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

// BenchmarkResolve measures lookups among 20k pods and bindings, on the
// binding path (the labeler has not labelled yet) and the label path.
func BenchmarkResolve(b *testing.B) {
	const n = 10000
	pods := make([]*metav1.PartialObjectMetadata, 0, 2*n)
	bindings := make([]*karmada.ResourceBinding, 0, 2*n)
	for i := range n {
		name := fmt.Sprintf("job-%d", i)
		pods = append(pods, pod(name, nil), pod("labelled-"+name, clusterLabel("member2")))
		bindings = append(bindings,
			binding(karmada.BindingName(name, "Pod"), name, []string{"member1"}, "member1"),
			binding(karmada.BindingName("labelled-"+name, "Pod"), "labelled-"+name, []string{"member1", "member2"}, "member2"))
	}
	inf := storeInformers(b, pods, bindings, []*karmada.Cluster{member1, member2})
	r, err := New(Options{Informers: inf, Metrics: metrics.New(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("job-%d", i)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name, prefix, want string
	}{
		{name: "binding", want: "member1"},
		{name: "label", prefix: "labelled-", want: "member2"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = bc.prefix + names[i]
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				got, err := r.Resolve(ctx, ns, keys[i%n])
				if err != nil || got != bc.want {
					b.Fatalf("Resolve(%s) = %q, %v", keys[i%n], got, err)
				}
				i++
			}
		})
	}
}

// TestClusterHint: the label, or nothing, and no resolution counted.
func TestClusterHint(t *testing.T) {
	reg := prometheus.NewRegistry()
	inf := storeInformers(t, []*metav1.PartialObjectMetadata{pod("labelled", clusterLabel("member2")), pod("bare", nil)}, nil, nil)
	r, err := New(Options{Informers: inf, Metrics: metrics.New(reg)})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"labelled": "member2", "bare": "", "absent": ""} {
		if got := r.ClusterHint(ns, name); got != want {
			t.Errorf("ClusterHint(%s) = %q, want %q", name, got, want)
		}
	}
	if got := counters(t, reg, "karmada_gateway_resolve_total"); len(got) != 0 {
		t.Errorf("hints counted as resolutions: %v", got)
	}
}
