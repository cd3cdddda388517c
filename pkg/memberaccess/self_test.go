package memberaccess

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// selfClient answers SelfSubjectReviews as the gateway's ServiceAccount,
// or with err when it is set, counting them.
func selfClient(reviews *atomic.Int32, err *error) *kubefake.Clientset {
	c := kubefake.NewClientset()
	c.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		if *err != nil {
			return true, nil, *err
		}
		return true, &authnv1.SelfSubjectReview{Status: authnv1.SelfSubjectReviewStatus{UserInfo: authnv1.UserInfo{
			Username: "system:serviceaccount:karmada-system:gw", UID: "sa-uid",
			Groups: []string{"system:serviceaccounts", "system:authenticated"},
			Extra:  map[string]authnv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"gw-0"}},
		}}}, nil
	})
	// The gateway may use every Cluster's proxy but "narrowed"'s.
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ssar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SelfSubjectAccessReview).DeepCopy()
		ssar.Status.Allowed = ssar.Spec.ResourceAttributes.Name != "narrowed"
		return true, ssar, nil
	})
	return c
}

// TestActAsChecksTheGatewaysClusterProxy: in authorize mode a member
// reached directly acts as the gateway only where karmada-apiserver allows
// the gateway the Cluster's proxy with the request's verb, as it checks the
// gateway's own call through the cluster proxy: an operator's
// resourceNames on the gateway's clusters/proxy are kept. Answers are
// reused briefly, one review per Cluster and verb.
func TestActAsChecksTheGatewaysClusterProxy(t *testing.T) {
	var reviews atomic.Int32
	var fail error
	c := selfClient(&reviews, &fail)
	s := NewSelf(c)
	for range 3 {
		if caller, err := s.ActAs(context.Background(), identity.ClusterProxyRequest(http.MethodPost, "member1")); err != nil || caller.Name != "system:serviceaccount:karmada-system:gw" {
			t.Fatalf("ActAs on member1: %+v, %v", caller, err)
		}
	}
	_, err := s.ActAs(context.Background(), identity.ClusterProxyRequest(http.MethodPost, "narrowed"))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the gateway's own identity") {
		t.Errorf("ActAs on a Cluster the gateway may not proxy: %v; want a 403 naming the gateway", err)
	}
	var sars []authzv1.ResourceAttributes
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "selfsubjectaccessreviews" {
			sars = append(sars, *a.(k8stesting.CreateAction).GetObject().(*authzv1.SelfSubjectAccessReview).Spec.ResourceAttributes)
		}
	}
	want := []authzv1.ResourceAttributes{
		{Verb: "create", Group: "cluster.karmada.io", Resource: "clusters", Subresource: "proxy", Name: "member1"},
		{Verb: "create", Group: "cluster.karmada.io", Resource: "clusters", Subresource: "proxy", Name: "narrowed"},
	}
	if len(sars) != len(want) || sars[0] != want[0] || sars[1] != want[1] {
		t.Errorf("reviews %+v, want %+v", sars, want)
	}
}

func TestSelfIsReviewedOnceAndRetriedAfterAFailure(t *testing.T) {
	var reviews atomic.Int32
	var fail error
	now := time.Unix(1000, 0)
	s := NewSelf(selfClient(&reviews, &fail))
	s.now = func() time.Time { return now }
	for range 3 {
		c, err := s.Caller(context.Background())
		if err != nil || c.Name != "system:serviceaccount:karmada-system:gw" || strings.Join(c.Groups, ",") != "system:serviceaccounts,system:authenticated" {
			t.Fatalf("Caller = %+v, %v", c, err)
		}
		if c.UID != "" || c.Extra != nil {
			t.Errorf("Caller keeps UID %q or extra %v, which Karmada never passes", c.UID, c.Extra)
		}
	}
	if n := reviews.Load(); n != 1 {
		t.Errorf("%d reviews for three calls, want 1", n)
	}
	now = now.Add(selfTTL + time.Second)
	fail = apierrors.NewServiceUnavailable("down")
	for range 2 {
		if _, err := s.Caller(context.Background()); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("Caller with karmada-apiserver down: %v, want a 503", err)
		}
	}
	if n := reviews.Load(); n != 2 {
		t.Errorf("%d reviews after a failure and a retry within %s, want 2", n, selfRetry)
	}
	fail = nil
	now = now.Add(selfRetry + time.Second)
	if _, err := s.Caller(context.Background()); err != nil {
		t.Errorf("Caller once karmada-apiserver is back: %v", err)
	}
}

func TestReaderReadsAsTheGateway(t *testing.T) {
	var got http.Header
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/namespaces/ci/pods/p":
			if r.URL.RawQuery != "resourceVersion=0" {
				t.Errorf("query %q, want the watch cache", r.URL.RawQuery)
			}
			_, _ = w.Write([]byte(`{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p","uid":"member-uid","labels":{"karmada.io/managed":"true"}}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"pods \"q\" not found"}`))
		}
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	h := newHarness(t, []*karmada.Cluster{cluster("member1", srv.URL)},
		secret("member1", map[string]string{"caBundle": string(ca)}),
		secret("member1-impersonator", map[string]string{"token": "impersonator-token"}))
	var reviews atomic.Int32
	var fail error
	r := h.m.Reader(NewSelf(selfClient(&reviews, &fail)), 5*time.Second)

	m, err := r.Metadata(context.Background(), "member1", karmada.PodGVR, "ci", "p")
	if err != nil || m.UID != "member-uid" || m.Labels[karmada.ManagedLabel] != "true" {
		t.Fatalf("Metadata = %+v, %v", m, err)
	}
	if got.Get("Impersonate-User") != "system:serviceaccount:karmada-system:gw" || strings.Join(got.Values("Impersonate-Group"), ",") != "system:serviceaccounts" ||
		got.Get("Authorization") != "Bearer impersonator-token" {
		t.Errorf("the member read went as %q", got)
	}
	if _, err := r.Metadata(context.Background(), "member1", karmada.PodGVR, "ci", "q"); !apierrors.IsNotFound(err) {
		t.Errorf("a missing pod: %v, want the member's 404", err)
	}
	var status apierrors.APIStatus
	if _, err := r.Metadata(context.Background(), "ghost", karmada.PodGVR, "ci", "p"); !errors.As(err, &status) || status.Status().Code != 404 {
		t.Errorf("a missing Cluster: %v, want a 404 Status", err)
	}
}
