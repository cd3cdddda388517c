package karmada

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
)

func TestBindingOf(t *testing.T) {
	otherAPI := testBinding(testNS, "crd-pod", "job", "uid-job", "member1")
	otherAPI.Spec.Resource.APIVersion = "example.com/v1"

	for _, tc := range []struct {
		name     string
		bindings []*ResourceBinding
		uid      types.UID
		want     string // binding name, "" for none
		count    int
	}{
		{
			name: "no binding",
			uid:  "uid-job",
		},
		{
			name:     "the pod's binding",
			bindings: []*ResourceBinding{testBinding(testNS, "job-pod", "job", "uid-job", "member1")},
			uid:      "uid-job",
			want:     "job-pod",
			count:    1,
		},
		{
			// Whoever may create bindings in another namespace must not
			// steer this pod, even naming it in spec.resource.
			name:     "binding in another namespace ignored",
			bindings: []*ResourceBinding{testBinding("team-b", "job-pod", "job", "uid-job", "member1")},
			uid:      "uid-job",
		},
		{
			name:     "binding of another API's Pod kind ignored",
			bindings: []*ResourceBinding{otherAPI},
			uid:      "uid-job",
		},
		{
			name: "binding of an earlier pod of the same name skipped",
			bindings: []*ResourceBinding{
				testBinding(testNS, "a-stale", "job", "uid-old", "member2"),
				testBinding(testNS, "job-pod", "job", "uid-job", "member1"),
			},
			uid:   "uid-job",
			want:  "job-pod",
			count: 1,
		},
		{
			name:     "only a stale binding",
			bindings: []*ResourceBinding{testBinding(testNS, "job-pod", "job", "uid-old", "member1")},
			uid:      "uid-job",
		},
		{
			name:     "binding without a UID qualifies",
			bindings: []*ResourceBinding{testBinding(testNS, "job-pod", "job", "", "member1")},
			uid:      "uid-job",
			want:     "job-pod",
			count:    1,
		},
		{
			name:     "caller without a UID takes any",
			bindings: []*ResourceBinding{testBinding(testNS, "job-pod", "job", "uid-old", "member1")},
			want:     "job-pod",
			count:    1,
		},
		{
			name: "several qualify: lowest name wins",
			bindings: []*ResourceBinding{
				testBinding(testNS, "job-pod-c", "job", "uid-job", "member3"),
				testBinding(testNS, "job-pod-a", "job", "uid-job", "member1"),
				testBinding(testNS, "job-pod-b", "job", "", "member2"),
			},
			uid:   "uid-job",
			want:  "job-pod-a",
			count: 3,
		},
		{
			// Found by its name, not the index: it must still bind this pod.
			name:     "binding named for the pod but binding another ignored",
			bindings: []*ResourceBinding{testBinding(testNS, "job-pod", "other", "uid-job", "member2")},
			uid:      "uid-job",
		},
		{
			name: "binding named for the pod and one named otherwise both count",
			bindings: []*ResourceBinding{
				testBinding(testNS, "job-pod", "job", "uid-job", "member1"),
				testBinding(testNS, "custom", "job", "uid-job", "member2"),
			},
			uid:   "uid-job",
			want:  "custom",
			count: 2,
		},
		{
			name: "bindings of other pods ignored",
			bindings: []*ResourceBinding{
				testBinding(testNS, "a-other-pod", "other", "uid-job", "member2"),
				testBinding(testNS, "job-pod", "job", "uid-job", "member1"),
			},
			uid:   "uid-job",
			want:  "job-pod",
			count: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inf := unstartedInformers(t)
			for _, b := range tc.bindings {
				if err := inf.Bindings.GetIndexer().Add(b); err != nil {
					t.Fatal(err)
				}
			}
			got, n, err := inf.BindingOf("Pod", testNS, "job", tc.uid)
			if err != nil {
				t.Fatalf("BindingOf: %v", err)
			}
			gotName := ""
			if got != nil {
				gotName = got.Name
			}
			if gotName != tc.want || n != tc.count {
				t.Errorf("BindingOf = %q, %d; want %q, %d", gotName, n, tc.want, tc.count)
			}
		})
	}
}

// unstartedInformers are the real informers with the real index, never
// started: the test fills the indexer itself.
func unstartedInformers(t *testing.T) *Informers {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	inf, err := NewInformers(InformersOptions{
		Metadata: metadatafake.NewSimpleMetadataClient(scheme),
		Dynamic:  dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
	})
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

func TestCandidateClusters(t *testing.T) {
	type status struct {
		cluster string
		applied bool
	}
	for _, tc := range []struct {
		name     string
		clusters []string
		status   []status
		want     []string
	}{
		{
			name: "not scheduled",
			want: nil,
		},
		{
			name:     "none applied yet: every scheduled cluster in spec order",
			clusters: []string{"member2", "member1", "member3"},
			want:     []string{"member2", "member1", "member3"},
		},
		{
			name:     "reported but not applied counts as none applied",
			clusters: []string{"member2", "member1"},
			status:   []status{{"member1", false}, {"member2", false}},
			want:     []string{"member2", "member1"},
		},
		{
			name:     "only the applied one",
			clusters: []string{"member2", "member1", "member3"},
			status:   []status{{"member2", false}, {"member1", true}},
			want:     []string{"member1"},
		},
		{
			// Spec order, the scheduler's, not status order.
			name:     "several applied: spec order",
			clusters: []string{"member3", "member1", "member2"},
			status:   []status{{"member1", true}, {"member2", true}, {"member3", true}},
			want:     []string{"member3", "member1", "member2"},
		},
		{
			// A status left over from a cluster no longer scheduled does not
			// make it a candidate, nor hide the scheduled ones.
			name:     "applied on an unscheduled cluster only",
			clusters: []string{"member2"},
			status:   []status{{"member1", true}},
			want:     []string{"member2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBinding(testNS, "job-pod", "job", "uid-job", tc.clusters...)
			for _, s := range tc.status {
				b.Status.AggregatedStatus = append(b.Status.AggregatedStatus, AggregatedStatusItem{ClusterName: s.cluster, Applied: s.applied})
			}
			if got := slices.Collect(b.CandidateClusters()); !slices.Equal(got, tc.want) {
				t.Errorf("CandidateClusters = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("stops when the consumer does", func(t *testing.T) {
		b := testBinding(testNS, "job-pod", "job", "uid-job", "member1", "member2", "member3")
		var got []string
		for c := range b.CandidateClusters() {
			got = append(got, c)
			if len(got) == 2 {
				break
			}
		}
		if !slices.Equal(got, []string{"member1", "member2"}) {
			t.Errorf("first two candidates = %v, want [member1 member2]", got)
		}
	})
}
