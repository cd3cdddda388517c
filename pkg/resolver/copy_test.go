package resolver

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// fakeMembers serves member objects' metadata by "cluster/resource/ns/name"
// and records every read.
type fakeMembers struct {
	objects map[string]*metav1.PartialObjectMetadata
	errs    map[string]error

	mu    sync.Mutex
	reads []string
}

func (f *fakeMembers) Metadata(_ context.Context, cluster string, resource schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	key := cluster + "/" + resource.Resource + "/" + namespace + "/" + name
	f.mu.Lock()
	f.reads = append(f.reads, key)
	f.mu.Unlock()
	if err := f.errs[key]; err != nil {
		return nil, err
	}
	if m, ok := f.objects[key]; ok {
		return m, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: resource.Resource}, name)
}

// memberObject is a member object as Karmada propagates it (managed label,
// template UID annotation) when templateUID is set, else as created in the
// member directly.
func memberObject(name string, templateUID types.UID) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "member-uid-" + types.UID(name)}}
	if templateUID != "" {
		m.Labels = map[string]string{karmada.ManagedLabel: "true"}
		m.Annotations = map[string]string{karmada.TemplateUIDAnnotation: string(templateUID), karmada.WorkNamespaceAnnotation: "karmada-es-x"}
	}
	return m
}

// failedOn adds to b an aggregated status entry that Karmada could not apply
// it to cluster, with msg.
func failedOn(b *karmada.ResourceBinding, cluster, msg string) *karmada.ResourceBinding {
	b.Status.AggregatedStatus = append(b.Status.AggregatedStatus, karmada.AggregatedStatusItem{ClusterName: cluster, AppliedMessage: msg, Health: "Unknown"})
	return b
}

const conflictMsg = "resource(kind=Pod, ci/job-42) already exists in the cluster member1 and the work.karmada.io/conflict-resolution strategy value is empty, Karmada will not manage this resource"

// TestResolveActingAsGateway is the rule that keeps authorize mode off
// member objects Karmada does not manage: only a cluster the binding
// reports applied, and only when the member's object carries Karmada's
// managed label and this template's UID. ResolvePod names the template's
// UID and, only where the copy was read and accepted, the copy's.
func TestResolveActingAsGateway(t *testing.T) {
	copyOf := func(cluster string, m *metav1.PartialObjectMetadata) map[string]*metav1.PartialObjectMetadata {
		return map[string]*metav1.PartialObjectMetadata{cluster + "/pods/" + ns + "/job-42": m}
	}
	ownCopy := memberObject("job-42", "uid-job-42")
	tests := []struct {
		name        string
		passthrough bool   // ActsAsGateway false
		pinned      string // WithPinnedCluster
		pod         *metav1.PartialObjectMetadata
		binding     *karmada.ResourceBinding
		objects     map[string]*metav1.PartialObjectMetadata
		errs        map[string]error

		want       string
		wantCode   int32
		wantMsg    []string
		notInMsg   []string
		wantMetric string   // source/result
		wantReads  []string // member reads, in order
	}{
		{
			name:       "applied copy is reached",
			binding:    binding("job-42-pod", "job-42", []string{"member1"}, "member1"),
			objects:    copyOf("member1", ownCopy),
			want:       "member1",
			wantMetric: "binding/ok",
			wantReads:  []string{"member1/pods/ci/job-42"},
		},
		{
			name:       "label of an applied cluster, copy checked",
			pod:        pod("job-42", clusterLabel("member2")),
			binding:    binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member1", "member2"),
			objects:    copyOf("member2", ownCopy),
			want:       "member2",
			wantMetric: "label/ok",
			wantReads:  []string{"member2/pods/ci/job-42"},
		},
		{
			name:       "label of a scheduled cluster not applied is not followed",
			pod:        pod("job-42", clusterLabel("member1")),
			binding:    failedOn(binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member2"), "member1", conflictMsg),
			objects:    copyOf("member2", ownCopy),
			want:       "member2",
			wantMetric: "binding/ok",
			wantReads:  []string{"member2/pods/ci/job-42"},
		},
		{
			name:       "not applied yet: 503, the member is not read",
			binding:    binding("job-42-pod", "job-42", []string{"member1"}),
			objects:    copyOf("member1", memberObject("job-42", "")),
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`pod "ci/job-42" is scheduled to member1 but Karmada has not reported its copy applied there yet`},
			wantMetric: "binding/not_applied",
		},
		{
			name:       "Karmada refused (member object it does not manage): 409 with its message, the member is not read",
			pod:        pod("job-42", clusterLabel("member1")),
			binding:    failedOn(binding("job-42-pod", "job-42", []string{"member1"}), "member1", conflictMsg),
			objects:    copyOf("member1", memberObject("job-42", "")),
			wantCode:   http.StatusConflict,
			wantMsg:    []string{`pod "ci/job-42" has no copy Karmada applied`, "member1: " + conflictMsg},
			wantMetric: "binding/not_applied",
		},
		{
			name:       "applied, but the member's pod is not managed by Karmada: 409",
			binding:    binding("job-42-pod", "job-42", []string{"member1"}, "member1"),
			objects:    copyOf("member1", memberObject("job-42", "")),
			wantCode:   http.StatusConflict,
			wantMsg:    []string{`pod "ci/job-42" in member cluster "member1" is not Karmada's copy of this pod template: Karmada does not manage it`},
			wantMetric: "binding/not_copy",
			wantReads:  []string{"member1/pods/ci/job-42"},
		},
		{
			name:     "the copy of an earlier template of the same name: 409, by UID not name",
			binding:  binding("job-42-pod", "job-42", []string{"member1"}, "member1"),
			objects:  copyOf("member1", memberObject("job-42", "uid-of-an-earlier-job-42")),
			wantCode: http.StatusConflict,
			wantMsg:  []string{"Karmada propagated it from another template of that name"},
			// the other template's UID is not disclosed
			notInMsg:   []string{"uid-of-an-earlier-job-42"},
			wantMetric: "binding/not_copy",
			wantReads:  []string{"member1/pods/ci/job-42"},
		},
		{
			name:       "a label-chosen cluster is checked too",
			pod:        pod("job-42", clusterLabel("member1")),
			binding:    binding("job-42-pod", "job-42", []string{"member1"}, "member1"),
			objects:    copyOf("member1", memberObject("job-42", "")),
			wantCode:   http.StatusConflict,
			wantMetric: "label/not_copy",
			wantReads:  []string{"member1/pods/ci/job-42"},
		},
		{
			name:       "copy missing in the member: 503",
			binding:    binding("job-42-pod", "job-42", []string{"member1"}, "member1"),
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`pod "ci/job-42" has no copy in member cluster "member1"`},
			wantMetric: "binding/not_copy",
			wantReads:  []string{"member1/pods/ci/job-42"},
		},
		{
			name:       "member unreadable: 503 naming why, nothing forwarded",
			binding:    binding("job-42-pod", "job-42", []string{"member1"}, "member1"),
			errs:       map[string]error{"member1/pods/ci/job-42": apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "job-42", nil)},
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`cannot check that pod "ci/job-42" in member cluster "member1" is Karmada's copy`, "forbidden"},
			wantMetric: "binding/not_copy",
			wantReads:  []string{"member1/pods/ci/job-42"},
		},
		{
			name:       "duplicated: the applied cluster, never the refused one",
			binding:    failedOn(binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member2"), "member1", conflictMsg),
			objects:    copyOf("member2", ownCopy),
			want:       "member2",
			wantMetric: "binding/ok",
			wantReads:  []string{"member2/pods/ci/job-42"},
		},
		{
			name:        "passthrough keeps following the scheduled cluster and reads nothing",
			passthrough: true,
			binding:     failedOn(binding("job-42-pod", "job-42", []string{"member1"}), "member1", conflictMsg),
			objects:     copyOf("member1", memberObject("job-42", "")),
			want:        "member1",
			wantMetric:  "binding/ok",
		},

		// A server URL pinning a member (/clusters/<name>/) reaches that
		// copy of a Duplicated pod, whatever the label says, by the same
		// rules; never another cluster.
		{
			name:       "pinned: the second copy of a Duplicated pod, not the labelled first",
			pinned:     "member2",
			pod:        pod("job-42", clusterLabel("member1")),
			binding:    binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member1", "member2"),
			objects:    copyOf("member2", ownCopy),
			want:       "member2",
			wantMetric: "path/ok",
			wantReads:  []string{"member2/pods/ci/job-42"},
		},
		{
			name:       "pinned where Karmada did not place it: 404 naming where it is",
			pinned:     "member3",
			binding:    binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member1", "member2"),
			objects:    copyOf("member1", ownCopy),
			wantCode:   http.StatusNotFound,
			wantMsg:    []string{`pod "ci/job-42" is not placed on member cluster "member3"`, "Karmada placed it on member1, member2"},
			wantMetric: "path/not_placed",
		},
		{
			name:        "pinned where Karmada did not place it, in passthrough too",
			passthrough: true,
			pinned:      "member2",
			binding:     binding("job-42-pod", "job-42", []string{"member1"}, "member1"),
			wantCode:    http.StatusNotFound,
			wantMsg:     []string{`is not placed on member cluster "member2"`, "Karmada placed it on member1"},
			wantMetric:  "path/not_placed",
		},
		{
			name:       "pinned where Karmada failed to apply it: 409 with its message",
			pinned:     "member1",
			binding:    failedOn(binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member2"), "member1", conflictMsg),
			objects:    copyOf("member2", ownCopy),
			wantCode:   http.StatusConflict,
			wantMsg:    []string{`has no copy Karmada applied on member cluster "member1"`, conflictMsg},
			wantMetric: "path/not_applied",
		},
		{
			name:       "pinned where its copy is not applied yet: 503",
			pinned:     "member2",
			binding:    binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member1"),
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    []string{`is scheduled to member cluster "member2" but Karmada has not reported its copy applied there yet`},
			wantMetric: "path/not_applied",
		},
		{
			name:       "pinned, and the member's pod is not the template's copy: 409",
			pinned:     "member2",
			binding:    binding("job-42-pod", "job-42", []string{"member1", "member2"}, "member1", "member2"),
			objects:    copyOf("member2", memberObject("job-42", "")),
			wantCode:   http.StatusConflict,
			wantMetric: "path/not_copy",
			wantReads:  []string{"member2/pods/ci/job-42"},
		},
		{
			name:        "pinned to a scheduled cluster that is not registered: 503",
			passthrough: true,
			pinned:      "member3",
			binding:     binding("job-42-pod", "job-42", []string{"member1", "member3"}, "member1", "member3"),
			wantCode:    http.StatusServiceUnavailable,
			wantMsg:     []string{`member cluster "member3" of pod "ci/job-42" is not a registered Karmada Cluster`},
			wantMetric:  "path/cluster_not_ready",
		},
		{
			name:        "pinned in passthrough: scheduled is enough, nothing read",
			passthrough: true,
			pinned:      "member2",
			binding:     binding("job-42-pod", "job-42", []string{"member1", "member2"}),
			want:        "member2",
			wantMetric:  "path/ok",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig()))
			if tc.pinned != "" {
				ctx = WithPinnedCluster(ctx, tc.pinned)
			}
			reg := prometheus.NewRegistry()
			p := tc.pod
			if p == nil {
				p = pod("job-42", nil)
			}
			members := &fakeMembers{objects: tc.objects, errs: tc.errs}
			r, err := New(Options{
				Informers:     storeInformers(t, []*metav1.PartialObjectMetadata{p}, []*karmada.ResourceBinding{tc.binding}, []*karmada.Cluster{member1, member2}),
				Metrics:       metrics.New(reg),
				ActsAsGateway: !tc.passthrough,
				Members:       members,
			})
			if err != nil {
				t.Fatal(err)
			}
			placed, err := r.ResolvePod(ctx, ns, "job-42")
			if got := placed.Cluster; got != tc.want {
				t.Fatalf("ResolvePod() = %q, want %q (err %v)", got, tc.want, err)
			}
			var wantMember types.UID
			if err == nil && !tc.passthrough {
				wantMember = "member-uid-job-42"
			}
			if placed.TemplateUID != p.UID || placed.MemberUID != wantMember {
				t.Errorf("ResolvePod() UIDs template %q member %q, want %q and %q", placed.TemplateUID, placed.MemberUID, p.UID, wantMember)
			}
			if !slices.Equal(placed.Scheduled, tc.binding.Spec.Clusters) {
				t.Errorf("ResolvePod() scheduled %v, want the binding's %v", placed.Scheduled, tc.binding.Spec.Clusters)
			}
			checkErr(t, err, tc.wantCode, "job-42", tc.wantMsg, tc.notInMsg)
			if tc.wantCode == http.StatusConflict && !apierrors.IsConflict(err) {
				t.Errorf("IsConflict(%v) = false", err)
			}
			if !slices.Equal(members.reads, tc.wantReads) {
				t.Errorf("member reads = %q, want %q", members.reads, tc.wantReads)
			}
			source, result, _ := strings.Cut(tc.wantMetric, "/")
			if got, want := counters(t, reg, "karmada_gateway_resolve_total"), map[string]float64{result + "/" + source: 1}; !maps.Equal(got, want) {
				t.Errorf("resolve_total = %v, want %v", got, want)
			}
		})
	}
}

func TestResolveServiceActingAsGateway(t *testing.T) {
	app := map[string]string{"app": "job"}
	svcCopy := func(m *metav1.PartialObjectMetadata) map[string]*metav1.PartialObjectMetadata {
		return map[string]*metav1.PartialObjectMetadata{"member1/services/" + ns + "/web": m}
	}
	applied := func(b *karmada.ResourceBinding) *karmada.ResourceBinding {
		b.Status.AggregatedStatus = []karmada.AggregatedStatusItem{{ClusterName: "member1", Applied: true}}
		return b
	}
	tests := []struct {
		name     string
		pinned   string // WithPinnedCluster
		bindings []*karmada.ResourceBinding
		objects  map[string]*metav1.PartialObjectMetadata
		want     string
		wantCode int32
		wantMsg  []string
	}{
		{name: "applied copy", bindings: []*karmada.ResourceBinding{applied(serviceBinding("web-service", "web", "member1"))},
			objects: svcCopy(memberObject("web", "uid-web")), want: "member1"},
		{name: "pinned to its cluster", pinned: "member1", bindings: []*karmada.ResourceBinding{applied(serviceBinding("web-service", "web", "member1"))},
			objects: svcCopy(memberObject("web", "uid-web")), want: "member1"},
		{name: "pinned elsewhere: 404 naming where it is", pinned: "member2", bindings: []*karmada.ResourceBinding{applied(serviceBinding("web-service", "web", "member1"))},
			objects: svcCopy(memberObject("web", "uid-web")), wantCode: http.StatusNotFound,
			wantMsg: []string{`service "ci/web" is not placed on member cluster "member2"`, "Karmada placed it on member1"}},
		{name: "pinned, and the member's Service is not the copy", pinned: "member1", bindings: []*karmada.ResourceBinding{applied(serviceBinding("web-service", "web", "member1"))},
			objects: svcCopy(memberObject("web", "")), wantCode: http.StatusConflict},
		{name: "member Service Karmada does not manage", bindings: []*karmada.ResourceBinding{applied(serviceBinding("web-service", "web", "member1"))},
			objects: svcCopy(memberObject("web", "")), wantCode: http.StatusConflict,
			wantMsg: []string{`service "ci/web" in member cluster "member1" is not Karmada's copy of this service template`}},
		{name: "not applied yet", bindings: []*karmada.ResourceBinding{serviceBinding("web-service", "web", "member1")},
			objects: svcCopy(memberObject("web", "uid-web")), wantCode: http.StatusServiceUnavailable, wantMsg: []string{"has not reported its copy applied"}},
		// Without a binding no member Service is a copy: the selected pods'
		// cluster (member1, applied and verified) is not followed.
		{name: "no binding: the selected pods' fallback is off", bindings: []*karmada.ResourceBinding{binding("p1-pod", "p1", []string{"member1"}, "member1")},
			objects: svcCopy(memberObject("web", "")), wantCode: http.StatusServiceUnavailable,
			wantMsg: []string{"it has no ResourceBinding", "reaches only Karmada's copy of a Service"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig()))
			inf := storeInformers(t, []*metav1.PartialObjectMetadata{pod("p1", app)}, tc.bindings, []*karmada.Cluster{member1})
			inf.Services = servicesInformer(t, service("web", app))
			r, err := New(Options{Informers: inf, ActsAsGateway: true, Members: &fakeMembers{objects: tc.objects}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.pinned != "" {
				ctx = WithPinnedCluster(ctx, tc.pinned)
			}
			got, err := r.ResolveService(ctx, ns, "web")
			if got != tc.want {
				t.Fatalf("ResolveService() = %q, want %q (err %v)", got, tc.want, err)
			}
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if s, ok := err.(apierrors.APIStatus); !ok || s.Status().Code != tc.wantCode {
				t.Fatalf("ResolveService() error = %v, want code %d", err, tc.wantCode)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q lacks %q", err, m)
				}
			}
		})
	}
}

func TestNewActingAsGatewayNeedsMembers(t *testing.T) {
	if _, err := New(Options{Informers: storeInformers(t, nil, nil, nil), ActsAsGateway: true}); err == nil || !strings.Contains(err.Error(), "Members") {
		t.Fatalf("New(ActsAsGateway without Members) error = %v, want one naming Members", err)
	}
}
