package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy"
)

// The proxy defines what it needs of authorize mode; this package does not
// import it outside tests.
var _ proxy.Authorizer = (*Authorizer)(nil)

// TestServiceProxyThroughTheGateway drives services/proxy through a real
// Proxy in authorize mode with this Authorizer: the SubjectAccessReview is
// about the original request as kube-apiserver reads it, Impersonate-* is
// honoured only when the caller may impersonate, and whatever was decided,
// only the gateway's identity goes upstream.
func TestServiceProxyThroughTheGateway(t *testing.T) {
	const target = "/api/v1/namespaces/ci/services/https:web:443/proxy/session?x=1"
	impersonateBob := rule("alice", "impersonate", "", "users", "", "bob")
	tests := []struct {
		name     string
		method   string
		header   http.Header
		grant    []string
		wantCode int
		wantMsg  string
		// wantUser is who the services/proxy review was about.
		wantUser string
		wantVerb string
	}{
		{
			name: "allowed", method: "GET", header: bearer("alice-token"),
			grant:    []string{rule("alice", "get", "", "services/proxy", "ci", "https:web:443")},
			wantCode: http.StatusOK, wantUser: "alice", wantVerb: "get",
		},
		{
			name: "POST is create", method: "POST", header: bearer("alice-token"),
			grant:    []string{rule("alice", "get", "", "services/proxy", "ci", "https:web:443")},
			wantCode: http.StatusForbidden, wantUser: "alice", wantVerb: "create",
			wantMsg: `services "https:web:443" is forbidden: User "alice" cannot create resource "services/proxy" in API group "" in the namespace "ci"`,
		},
		{
			name: "a grant on the bare name does not cover the segment", method: "GET", header: bearer("alice-token"),
			grant:    []string{rule("alice", "get", "", "services/proxy", "ci", "web")},
			wantCode: http.StatusForbidden, wantUser: "alice", wantVerb: "get",
			wantMsg: `services "https:web:443" is forbidden: User "alice" cannot get resource "services/proxy" in API group "" in the namespace "ci"`,
		},
		{
			name: "impersonation allowed", method: "GET",
			header:   http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {"bob"}},
			grant:    []string{impersonateBob, rule("bob", "get", "", "services/proxy", "ci", "https:web:443")},
			wantCode: http.StatusOK, wantUser: "bob", wantVerb: "get",
		},
		{
			name: "impersonation not allowed", method: "GET",
			header:   http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {"bob"}},
			grant:    []string{rule("alice", "get", "", "services/proxy", "ci", "https:web:443"), rule("bob", "get", "", "services/proxy", "ci", "https:web:443")},
			wantCode: http.StatusForbidden,
			wantMsg:  `users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`,
		},
		{
			name: "impersonated user denied", method: "GET",
			header:   http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {"bob"}},
			grant:    []string{impersonateBob, rule("alice", "get", "", "services/proxy", "ci", "https:web:443")},
			wantCode: http.StatusForbidden, wantUser: "bob", wantVerb: "get",
			wantMsg: `services "https:web:443" is forbidden: User "bob" cannot get resource "services/proxy" in API group "" in the namespace "ci"`,
		},
		{
			name: "unauthenticated", method: "GET", header: bearer("nope"),
			wantCode: http.StatusUnauthorized, wantMsg: "Unauthorized",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, nil)
			env.api.grant(tc.grant...)
			up := &headerRecorder{}
			upstream := httptest.NewServer(up)
			t.Cleanup(upstream.Close)
			services := &countingServiceResolver{cluster: "member1"}
			p, err := proxy.New(proxy.Options{
				Upstream:        &rest.Config{Host: upstream.URL, BearerToken: "gateway-token"},
				Resolver:        &countingServiceResolver{},
				ServiceResolver: services,
				AuthMode:        proxy.AuthAuthorize,
				Authorizer:      env.authz,
			})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(tc.method, target, nil)
			for k, v := range tc.header {
				r.Header[k] = v
			}
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, r)
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d %s, want %d", rec.Code, rec.Body, tc.wantCode)
			}
			if tc.wantMsg != "" {
				if _, msg := statusOf(t, decodeStatusError(t, rec)); msg != tc.wantMsg {
					t.Errorf("message %q\nwant    %q", msg, tc.wantMsg)
				}
			}

			var reviewed []authorizationv1.SubjectAccessReviewSpec
			for _, s := range env.api.seenSARs() {
				if s.ResourceAttributes.Resource == "services" {
					reviewed = append(reviewed, s)
				}
			}
			if tc.wantUser == "" {
				if len(reviewed) != 0 {
					t.Errorf("services/proxy reviewed %+v, want no review", reviewed)
				}
			} else {
				wantAttrs := authorizationv1.ResourceAttributes{
					Namespace: "ci", Verb: tc.wantVerb, Version: "v1", Resource: "services", Subresource: "proxy", Name: "https:web:443",
				}
				if len(reviewed) != 1 || reviewed[0].User != tc.wantUser || !reflect.DeepEqual(*reviewed[0].ResourceAttributes, wantAttrs) {
					t.Errorf("services/proxy reviews %+v, want one for %s of %+v", reviewed, tc.wantUser, wantAttrs)
				}
			}

			got := up.seen()
			if tc.wantCode != http.StatusOK {
				if len(got) != 0 || services.count() != 0 {
					t.Errorf("refused request resolved %d times, sent upstream %d times", services.count(), len(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d upstream requests", len(got))
			}
			if a := got[0].Values("Authorization"); !reflect.DeepEqual(a, []string{"Bearer gateway-token"}) {
				t.Errorf("upstream Authorization %q, want only the gateway's", a)
			}
			for k := range got[0] {
				if strings.HasPrefix(k, "Impersonate-") {
					t.Errorf("%s reached the upstream: the gateway acts as itself in the member", k)
				}
			}
		})
	}
}

// decodeStatusError turns a recorded Status answer back into an error.
func decodeStatusError(t *testing.T, rec *httptest.ResponseRecorder) error {
	t.Helper()
	var se apierrors.StatusError
	if err := json.Unmarshal(rec.Body.Bytes(), &se.ErrStatus); err != nil {
		t.Fatalf("decode Status %s: %v", rec.Body, err)
	}
	return &se
}

type headerRecorder struct {
	mu      sync.Mutex
	headers []http.Header
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.headers = append(h.headers, r.Header.Clone())
	h.mu.Unlock()
}

func (h *headerRecorder) seen() []http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]http.Header(nil), h.headers...)
}

// countingServiceResolver resolves every pod and Service to cluster.
type countingServiceResolver struct {
	cluster string
	mu      sync.Mutex
	calls   int
}

func (c *countingServiceResolver) Resolve(ctx context.Context, namespace, name string) (string, error) {
	return c.ResolveService(ctx, namespace, name)
}

func (c *countingServiceResolver) ResolveService(context.Context, string, string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return c.cluster, nil
}

func (c *countingServiceResolver) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}
