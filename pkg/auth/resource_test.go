package auth

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

var webProxyGet = identity.ResourceRequest{Namespace: "ci", Verb: "get", Resource: "services", Subresource: "proxy", Name: "https:web:443"}

// TestResourceAttributesAndDenials checks the SubjectAccessReview sent for a resource
// request and, when it is denied, the Status kube-apiserver's authorization
// filter would write (responsewriters.ForbiddenStatusError) for the same
// attributes.
func TestResourceAttributesAndDenials(t *testing.T) {
	tests := []struct {
		name      string
		rr        identity.ResourceRequest
		wantAttrs authorizationv1.ResourceAttributes
		wantMsg   string
		wantGR    schema.GroupResource
	}{
		{
			name:      "services/proxy named by its whole path segment",
			rr:        webProxyGet,
			wantAttrs: authorizationv1.ResourceAttributes{Namespace: "ci", Verb: "get", Version: "v1", Resource: "services", Subresource: "proxy", Name: "https:web:443"},
			wantMsg:   `services "https:web:443" is forbidden: User "alice" cannot get resource "services/proxy" in API group "" in the namespace "ci"`,
			wantGR:    schema.GroupResource{Resource: "services"},
		},
		{
			name:      "namespaced list has no name",
			rr:        identity.ResourceRequest{Namespace: "ci", Verb: "list", Resource: "events"},
			wantAttrs: authorizationv1.ResourceAttributes{Namespace: "ci", Verb: "list", Version: "v1", Resource: "events"},
			wantMsg:   `events is forbidden: User "alice" cannot list resource "events" in API group "" in the namespace "ci"`,
			wantGR:    schema.GroupResource{Resource: "events"},
		},
		{
			name:      "named group has no version to guess",
			rr:        identity.ResourceRequest{Namespace: "ci", Verb: "watch", Group: "events.k8s.io", Resource: "events"},
			wantAttrs: authorizationv1.ResourceAttributes{Namespace: "ci", Verb: "watch", Group: "events.k8s.io", Resource: "events"},
			wantMsg:   `events.events.k8s.io is forbidden: User "alice" cannot watch resource "events" in API group "events.k8s.io" in the namespace "ci"`,
			wantGR:    schema.GroupResource{Group: "events.k8s.io", Resource: "events"},
		},
		{
			name:      "cluster scope",
			rr:        identity.ResourceRequest{Verb: "get", Resource: "namespaces", Name: "ci"},
			wantAttrs: authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "namespaces", Name: "ci"},
			wantMsg:   `namespaces "ci" is forbidden: User "alice" cannot get resource "namespaces" in API group "" at the cluster scope`,
			wantGR:    schema.GroupResource{Resource: "namespaces"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantSAR := authorizationv1.SubjectAccessReviewSpec{
				User: "alice", UID: "alice-uid", Groups: []string{"dev", "system:authenticated"}, ResourceAttributes: &tc.wantAttrs,
			}
			resource := tc.rr.Resource
			if tc.rr.Subresource != "" {
				resource += "/" + tc.rr.Subresource
			}

			t.Run("allowed", func(t *testing.T) {
				env := newTestEnv(t, nil)
				env.api.grant(rule("alice", tc.rr.Verb, tc.rr.Group, resource, tc.rr.Namespace, tc.rr.Name))
				caller, err := env.authz.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), tc.rr)
				if err != nil {
					t.Fatalf("AuthorizeResource: %v", err)
				}
				if caller.Name != "alice" {
					t.Errorf("caller %q, want alice", caller.Name)
				}
				if sars := env.api.seenSARs(); len(sars) != 1 || !reflect.DeepEqual(sars[0], wantSAR) {
					t.Errorf("SARs = %+v, want one %+v", sars, wantSAR)
				}
			})
			t.Run("denied", func(t *testing.T) {
				env := newTestEnv(t, nil)
				_, err := env.authz.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), tc.rr)
				var se *apierrors.StatusError
				if !errors.As(err, &se) {
					t.Fatalf("err = %v, want a StatusError", err)
				}
				st := se.ErrStatus
				wantDetails := &metav1.StatusDetails{Name: tc.rr.Name, Group: tc.wantGR.Group, Kind: tc.wantGR.Resource}
				if st.Code != http.StatusForbidden || st.Reason != metav1.StatusReasonForbidden || st.Message != tc.wantMsg || !reflect.DeepEqual(st.Details, wantDetails) {
					t.Errorf("status = %d %s %q %+v\nwant 403 Forbidden %q %+v", st.Code, st.Reason, st.Message, st.Details, tc.wantMsg, wantDetails)
				}
				if got := env.decisions(t); !reflect.DeepEqual(got, map[string]float64{"denied/miss": 1}) {
					t.Errorf("decisions = %v, want denied/miss=1", got)
				}
			})
		})
	}
}

// TestMethodWithoutAVerbIsAskedAsKubeApiserverAsks: a method
// kube-apiserver's RequestInfo has no verb for (OPTIONS, a CORS
// preflight) is authorized with the empty verb, which only a "*" rule
// allows, as kube-apiserver authorizes it; it used to be a 500 in direct
// mode, where karmada-apiserver allowed it through the cluster proxy.
func TestMethodWithoutAVerbIsAskedAsKubeApiserverAsks(t *testing.T) {
	rr := identity.ClusterProxyRequest(http.MethodOptions, "member1")
	for _, granted := range []bool{true, false} {
		env := newTestEnv(t, nil)
		if granted {
			env.api.grant(rule("alice", "", "cluster.karmada.io", "clusters/proxy", "", "member1"))
		}
		caller, err := env.authz.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), rr)
		switch {
		case granted && (err != nil || caller.Name != "alice"):
			t.Errorf("OPTIONS with a \"*\" rule: %+v, %v; want alice allowed", caller, err)
		case !granted && !apierrors.IsForbidden(err):
			t.Errorf("OPTIONS without one: %v; want 403", err)
		}
		if sars := env.api.seenSARs(); len(sars) != 1 || sars[0].ResourceAttributes.Verb != "" {
			t.Errorf("SubjectAccessReviews %+v; want one with the empty verb", sars)
		}
	}
}

func TestAuthorizeResourceRefusesIncompleteRequests(t *testing.T) {
	for _, rr := range []identity.ResourceRequest{
		{Namespace: "ci", Verb: "get", Name: "web"},
	} {
		env := newTestEnv(t, nil)
		_, err := env.authz.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), rr)
		if !apierrors.IsInternalError(err) {
			t.Errorf("%+v: err = %v, want 500", rr, err)
		}
		if tr, sars := env.api.calls(); tr != 0 || sars != 0 {
			t.Errorf("%+v: TokenReviews/SARs = %d/%d, want none", rr, tr, sars)
		}
	}
}

// TestResourceCacheKeyedOnEveryField: a decision cached for one request
// never answers a request that differs in any one field, so a grant on one
// object cannot leak to its neighbours.
func TestResourceCacheKeyedOnEveryField(t *testing.T) {
	variants := map[string]func(rr *identity.ResourceRequest){
		"namespace":   func(rr *identity.ResourceRequest) { rr.Namespace = "prod" },
		"verb":        func(rr *identity.ResourceRequest) { rr.Verb = "create" },
		"group":       func(rr *identity.ResourceRequest) { rr.Group = "example.com" },
		"resource":    func(rr *identity.ResourceRequest) { rr.Resource = "pods" },
		"subresource": func(rr *identity.ResourceRequest) { rr.Subresource = "" },
		"name":        func(rr *identity.ResourceRequest) { rr.Name = "http:web:80" },
	}
	for field, edit := range variants {
		t.Run(field, func(t *testing.T) {
			env := newTestEnv(t, nil)
			env.api.grant(rule("alice", "get", "", "services/proxy", "ci", "https:web:443"))
			req := func() *http.Request { return newRequest(bearer("alice-token"), nil) }
			for range 2 {
				if _, err := env.authz.AuthorizeResource(context.Background(), req(), webProxyGet); err != nil {
					t.Fatal(err)
				}
			}
			if _, sars := env.api.calls(); sars != 1 {
				t.Fatalf("SARs = %d, want 1: the same request is not cached", sars)
			}
			other := webProxyGet
			edit(&other)
			if _, err := env.authz.AuthorizeResource(context.Background(), req(), other); !apierrors.IsForbidden(err) {
				t.Errorf("%+v: err = %v, want its own (forbidden) decision, not the cached one", other, err)
			}
			if _, sars := env.api.calls(); sars != 2 {
				t.Errorf("SARs = %d, want 2", sars)
			}
		})
	}
}
