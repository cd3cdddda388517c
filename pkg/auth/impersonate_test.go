package auth

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// imp is a SAR alice's impersonation check is expected to send.
func imp(group, resource, sub, namespace, name string) authorizationv1.ResourceAttributes {
	ra := authorizationv1.ResourceAttributes{
		Verb: "impersonate", Group: group, Resource: resource, Subresource: sub, Namespace: namespace, Name: name,
	}
	if group == authenticationGroup {
		ra.Version = "v1"
	}
	return ra
}

func impRule(ra authorizationv1.ResourceAttributes) string {
	resource := ra.Resource
	if ra.Subresource != "" {
		resource += "/" + ra.Subresource
	}
	return rule("alice", "impersonate", ra.Group, resource, ra.Namespace, ra.Name)
}

func TestImpersonation(t *testing.T) {
	var (
		users   = imp("", "users", "", "", "bob")
		devs    = imp("", "groups", "", "", "devs")
		ops     = imp("", "groups", "", "", "ops")
		sa      = imp("", "serviceaccounts", "", "ci", "runner")
		uid     = imp(authenticationGroup, "uids", "", "", "bob-uid")
		view    = imp(authenticationGroup, "userextras", "scopes", "", "view")
		edit    = imp(authenticationGroup, "userextras", "scopes", "", "edit")
		team    = imp(authenticationGroup, "userextras", "example.com/team", "", "a")
		anon    = imp("", "users", "", "", "system:anonymous")
		podExec = func(user string) string { return rule(user, "create", "", "pods/exec", "ci", "job-42") }
	)
	tests := []struct {
		name       string
		header     http.Header
		grant      []authorizationv1.ResourceAttributes
		podRule    string
		wantCode   int32
		wantMsg    string
		wantChecks []authorizationv1.ResourceAttributes
		wantCaller identity.Caller
	}{
		{
			name:       "user allowed",
			header:     http.Header{"Impersonate-User": {"bob"}},
			grant:      []authorizationv1.ResourceAttributes{users},
			podRule:    podExec("bob"),
			wantChecks: []authorizationv1.ResourceAttributes{users},
			wantCaller: identity.Caller{Name: "bob", Groups: []string{"system:authenticated"}},
		},
		{
			name:       "user denied",
			header:     http.Header{"Impersonate-User": {"bob"}},
			wantCode:   http.StatusForbidden,
			wantMsg:    `users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`,
			wantChecks: []authorizationv1.ResourceAttributes{users},
		},
		{
			name:       "user and groups",
			header:     http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": {"devs", "ops"}},
			grant:      []authorizationv1.ResourceAttributes{users, devs, ops},
			podRule:    podExec("bob"),
			wantChecks: []authorizationv1.ResourceAttributes{users, devs, ops},
			wantCaller: identity.Caller{Name: "bob", Groups: []string{"devs", "ops", "system:authenticated"}},
		},
		{
			name:       "one group denied",
			header:     http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": {"devs", "ops"}},
			grant:      []authorizationv1.ResourceAttributes{users, devs},
			wantCode:   http.StatusForbidden,
			wantMsg:    `groups "ops" is forbidden: User "alice" cannot impersonate resource "groups" in API group "" at the cluster scope`,
			wantChecks: []authorizationv1.ResourceAttributes{users, devs, ops},
		},
		{
			name:       "service account gets its groups",
			header:     http.Header{"Impersonate-User": {"system:serviceaccount:ci:runner"}},
			grant:      []authorizationv1.ResourceAttributes{sa},
			podRule:    podExec("system:serviceaccount:ci:runner"),
			wantChecks: []authorizationv1.ResourceAttributes{sa},
			wantCaller: identity.Caller{Name: "system:serviceaccount:ci:runner", Groups: []string{
				"system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated",
			}},
		},
		{
			name:       "service account with explicit groups",
			header:     http.Header{"Impersonate-User": {"system:serviceaccount:ci:runner"}, "Impersonate-Group": {"devs"}},
			grant:      []authorizationv1.ResourceAttributes{sa, devs},
			podRule:    podExec("system:serviceaccount:ci:runner"),
			wantChecks: []authorizationv1.ResourceAttributes{sa, devs},
			wantCaller: identity.Caller{Name: "system:serviceaccount:ci:runner", Groups: []string{"devs", "system:authenticated"}},
		},
		{
			name:       "service account denied",
			header:     http.Header{"Impersonate-User": {"system:serviceaccount:ci:runner"}},
			wantCode:   http.StatusForbidden,
			wantMsg:    `serviceaccounts "runner" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "ci"`,
			wantChecks: []authorizationv1.ResourceAttributes{sa},
		},
		{
			name:       "malformed service account name is a plain user",
			header:     http.Header{"Impersonate-User": {"system:serviceaccount:ci:runner:x"}},
			wantCode:   http.StatusForbidden,
			wantMsg:    `users "system:serviceaccount:ci:runner:x" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`,
			wantChecks: []authorizationv1.ResourceAttributes{imp("", "users", "", "", "system:serviceaccount:ci:runner:x")},
		},
		{
			name:       "uid allowed",
			header:     http.Header{"Impersonate-User": {"bob"}, "Impersonate-Uid": {"bob-uid"}},
			grant:      []authorizationv1.ResourceAttributes{users, uid},
			podRule:    podExec("bob"),
			wantChecks: []authorizationv1.ResourceAttributes{users, uid},
			wantCaller: identity.Caller{Name: "bob", UID: "bob-uid", Groups: []string{"system:authenticated"}},
		},
		{
			name:       "uid alone is checked too",
			header:     http.Header{"Impersonate-User": {"bob"}, "Impersonate-Uid": {"bob-uid"}},
			grant:      []authorizationv1.ResourceAttributes{users},
			wantCode:   http.StatusForbidden,
			wantMsg:    `uids.authentication.k8s.io "bob-uid" is forbidden: User "alice" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope`,
			wantChecks: []authorizationv1.ResourceAttributes{users, uid},
		},
		{
			name:       "extras allowed",
			header:     http.Header{"Impersonate-User": {"bob"}, "Impersonate-Extra-Scopes": {"view", "edit"}},
			grant:      []authorizationv1.ResourceAttributes{users, view, edit},
			podRule:    podExec("bob"),
			wantChecks: []authorizationv1.ResourceAttributes{users, view, edit},
			wantCaller: identity.Caller{Name: "bob", Groups: []string{"system:authenticated"}, Extra: map[string][]string{"scopes": {"view", "edit"}}},
		},
		{
			name:       "each extra value is checked",
			header:     http.Header{"Impersonate-User": {"bob"}, "Impersonate-Extra-Scopes": {"view", "edit"}},
			grant:      []authorizationv1.ResourceAttributes{users, view},
			wantCode:   http.StatusForbidden,
			wantMsg:    `userextras.authentication.k8s.io "edit" is forbidden: User "alice" cannot impersonate resource "userextras/scopes" in API group "authentication.k8s.io" at the cluster scope`,
			wantChecks: []authorizationv1.ResourceAttributes{users, view, edit},
		},
		{
			name:       "extra key is lower-cased and unescaped",
			header:     http.Header{"Impersonate-User": {"bob"}, "Impersonate-Extra-Example.com%2fTeam": {"a"}},
			grant:      []authorizationv1.ResourceAttributes{users, team},
			podRule:    podExec("bob"),
			wantChecks: []authorizationv1.ResourceAttributes{users, team},
			wantCaller: identity.Caller{Name: "bob", Groups: []string{"system:authenticated"}, Extra: map[string][]string{"example.com/team": {"a"}}},
		},
		{
			name:       "non-canonical header keys are honoured",
			header:     http.Header{"impersonate-user": {"bob"}, "IMPERSONATE-UID": {"bob-uid"}},
			grant:      []authorizationv1.ResourceAttributes{users},
			wantCode:   http.StatusForbidden,
			wantMsg:    `uids.authentication.k8s.io "bob-uid" is forbidden: User "alice" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope`,
			wantChecks: []authorizationv1.ResourceAttributes{users, uid},
		},
		{
			name:       "anonymous gets system:unauthenticated",
			header:     http.Header{"Impersonate-User": {"system:anonymous"}},
			grant:      []authorizationv1.ResourceAttributes{anon},
			podRule:    podExec("system:anonymous"),
			wantChecks: []authorizationv1.ResourceAttributes{anon},
			wantCaller: identity.Caller{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}},
		},
		{
			name:       "pod SAR is for the impersonated user",
			header:     http.Header{"Impersonate-User": {"bob"}},
			grant:      []authorizationv1.ResourceAttributes{users},
			podRule:    podExec("alice"),
			wantCode:   http.StatusForbidden,
			wantMsg:    `pods "job-42" is forbidden: User "bob" cannot create resource "pods/exec" in API group "" in the namespace "ci"`,
			wantChecks: []authorizationv1.ResourceAttributes{users},
		},
		{name: "group without user", header: http.Header{"Impersonate-Group": {"devs"}}, wantCode: http.StatusBadRequest},
		{name: "uid without user", header: http.Header{"Impersonate-Uid": {"x"}}, wantCode: http.StatusBadRequest},
		{name: "extra without user", header: http.Header{"Impersonate-Extra-Scopes": {"view"}}, wantCode: http.StatusBadRequest},
		{name: "empty user with group", header: http.Header{"Impersonate-User": {""}, "Impersonate-Group": {"devs"}}, wantCode: http.StatusBadRequest},
		{name: "two users", header: http.Header{"Impersonate-User": {"bob", "carol"}}, wantCode: http.StatusBadRequest},
		{name: "two users by case", header: http.Header{"Impersonate-User": {"bob"}, "impersonate-user": {"carol"}}, wantCode: http.StatusBadRequest},
		{name: "too many groups", header: http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": manyGroups(maxImpersonationChecks)}, wantCode: http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, nil)
			for _, ra := range tc.grant {
				env.api.grant(impRule(ra))
			}
			if tc.podRule != "" {
				env.api.grant(tc.podRule)
			}
			header := http.Header{"Authorization": {"Bearer alice-token"}}
			for k, v := range tc.header {
				header[k] = v
			}
			caller, err := env.authz.AuthorizeResource(context.Background(), newRequest(header, nil), execJob42)
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("AuthorizeResource: %v", err)
				}
				if !reflect.DeepEqual(caller, tc.wantCaller) {
					t.Errorf("caller = %#v, want %#v", caller, tc.wantCaller)
				}
			} else {
				code, msg := statusOf(t, err)
				if code != tc.wantCode || (tc.wantMsg != "" && msg != tc.wantMsg) {
					t.Errorf("status = %d %q, want %d %q", code, msg, tc.wantCode, tc.wantMsg)
				}
			}

			var checks []authorizationv1.ResourceAttributes
			var podSARs []authorizationv1.SubjectAccessReviewSpec
			for _, s := range env.api.seenSARs() {
				if s.ResourceAttributes.Verb != "impersonate" {
					podSARs = append(podSARs, s)
					continue
				}
				if s.User != "alice" || !reflect.DeepEqual(s.Groups, []string{"dev", "system:authenticated"}) {
					t.Errorf("impersonation checked for %q %v, want the authenticated alice", s.User, s.Groups)
				}
				checks = append(checks, *s.ResourceAttributes)
			}
			if !reflect.DeepEqual(checks, tc.wantChecks) {
				t.Errorf("impersonation checks = %+v, want %+v", checks, tc.wantChecks)
			}
			if tc.wantCode == 0 {
				if len(podSARs) != 1 {
					t.Fatalf("pod SARs = %d, want 1", len(podSARs))
				}
				p := podSARs[0]
				got := identity.Caller{Name: p.User, UID: p.UID, Groups: p.Groups}
				if len(p.Extra) > 0 {
					got.Extra = map[string][]string{}
					for k, v := range p.Extra {
						got.Extra[k] = v
					}
				}
				if !reflect.DeepEqual(got, tc.wantCaller) {
					t.Errorf("pod SAR identity = %#v, want %#v", got, tc.wantCaller)
				}
			}
		})
	}
}

func manyGroups(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("g%d", i)
	}
	return out
}

func TestImpersonationIsCachedPerRequestedIdentity(t *testing.T) {
	env := newTestEnv(t, nil)
	env.api.grant(
		impRule(imp("", "users", "", "", "bob")),
		rule("bob", "create", "", "pods/exec", "ci", "job-42"),
		rule("bob", "get", "", "pods/log", "ci", "job-42"),
	)
	req := func(user string) *http.Request {
		return newRequest(http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {user}}, nil)
	}
	if _, err := env.authz.AuthorizeResource(context.Background(), req("bob"), execJob42); err != nil {
		t.Fatal(err)
	}
	// Another pod request reuses the impersonation check.
	if _, err := env.authz.AuthorizeResource(context.Background(), req("bob"), identity.PodStreamRequests(http.MethodGet, "ci", "job-42", "log")[0]); err != nil {
		t.Fatal(err)
	}
	if _, sars := env.api.calls(); sars != 3 {
		t.Errorf("SARs = %d, want 3 (1 impersonation + 2 pod)", sars)
	}
	// A different impersonated user on the same pod is not a cache hit.
	if _, err := env.authz.AuthorizeResource(context.Background(), req("carol"), execJob42); err == nil || !strings.Contains(err.Error(), `users "carol"`) {
		t.Errorf("impersonating carol: err = %v, want forbidden for carol", err)
	}
}

func TestAuthenticate(t *testing.T) {
	tests := []struct {
		name       string
		header     http.Header
		grant      []string
		wantCode   int32
		wantCaller identity.Caller
		wantSARs   int
	}{
		{
			name:       "token",
			header:     bearer("alice-token"),
			wantCaller: identity.Caller{Name: "alice", UID: "alice-uid", Groups: []string{"dev", "system:authenticated"}},
		},
		{
			name:       "impersonation applied",
			header:     http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {"bob"}},
			grant:      []string{impRule(imp("", "users", "", "", "bob"))},
			wantCaller: identity.Caller{Name: "bob", Groups: []string{"system:authenticated"}},
			wantSARs:   1,
		},
		{
			name:     "impersonation denied",
			header:   http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-User": {"bob"}},
			wantCode: http.StatusForbidden,
			wantSARs: 1,
		},
		{name: "no credentials", header: http.Header{}, wantCode: http.StatusUnauthorized},
		{name: "no credentials and malformed impersonation", header: http.Header{"Impersonate-Group": {"x"}}, wantCode: http.StatusUnauthorized},
		{name: "invalid token and malformed impersonation", header: http.Header{"Authorization": {"Bearer nope"}, "Impersonate-Group": {"x"}}, wantCode: http.StatusUnauthorized},
		{name: "malformed impersonation", header: http.Header{"Authorization": {"Bearer alice-token"}, "Impersonate-Group": {"x"}}, wantCode: http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, nil)
			env.api.grant(tc.grant...)
			caller, err := env.authz.Authenticate(context.Background(), newRequest(tc.header, nil))
			if tc.wantCode != 0 {
				if code, _ := statusOf(t, err); code != tc.wantCode {
					t.Errorf("code = %d (%v), want %d", code, err, tc.wantCode)
				}
			} else if err != nil {
				t.Fatalf("Authenticate: %v", err)
			} else if !reflect.DeepEqual(caller, tc.wantCaller) {
				t.Errorf("caller = %#v, want %#v", caller, tc.wantCaller)
			}
			if _, sars := env.api.calls(); sars != tc.wantSARs {
				t.Errorf("SARs = %d, want %d", sars, tc.wantSARs)
			}
		})
	}
}
