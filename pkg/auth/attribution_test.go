package auth

import (
	"context"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// TestAuthenticatedCallerIsAttributed: whatever is then decided, a
// credential that authenticated is recorded as the request's caller for
// its audit events (kube-apiserver writes user on every event, refusals
// included), from a fresh decision and from a cached one; an impersonation
// does not change who the caller is; a bad token records nobody.
func TestAuthenticatedCallerIsAttributed(t *testing.T) {
	env := newTestEnv(t, nil)
	env.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
	cases := []struct {
		name     string
		header   http.Header
		wantCode int
		wantUser string
	}{
		{"allowed", bearer("alice-token"), 0, "alice"},
		{"allowed, cached", bearer("alice-token"), 0, "alice"},
		{"refused", bearer("alice-token"), http.StatusForbidden, "alice"},
		{"refused, cached", bearer("alice-token"), http.StatusForbidden, "alice"},
		{"impersonation refused", func() http.Header { h := bearer("alice-token"); h.Set("Impersonate-User", "bob"); return h }(), http.StatusForbidden, "alice"},
		{"unknown token", bearer("nobody"), http.StatusUnauthorized, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			who := identity.NewAttribution()
			ctx := identity.WithAttribution(context.Background(), who)
			rr := execJob42
			if tc.wantCode == http.StatusForbidden && tc.header.Get("Impersonate-User") == "" {
				rr.Name = "other-pod"
			}
			_, err := env.authz.AuthorizeResource(ctx, newRequest(tc.header, nil), rr)
			if code := statusCode(err); code != tc.wantCode {
				t.Fatalf("answered %d (%v), want %d", code, err, tc.wantCode)
			}
			user, ok, _ := who.Wait(0)
			if ok != (tc.wantUser != "") || user.Name != tc.wantUser {
				t.Fatalf("attributed to %+v (%v), want %q", user, ok, tc.wantUser)
			}
		})
	}
}

func statusCode(err error) int {
	if err == nil {
		return 0
	}
	if s, ok := err.(apierrors.APIStatus); ok {
		return int(s.Status().Code)
	}
	return -1
}
