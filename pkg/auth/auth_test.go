package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

func TestNew(t *testing.T) {
	_, client := newFakeAPI()
	tests := []struct {
		name    string
		opts    Options
		wantErr bool
		wantTTL time.Duration
		wantNeg time.Duration
	}{
		{name: "no client", opts: Options{}, wantErr: true},
		{name: "negative ttl", opts: Options{Client: client, CacheTTL: -time.Second}, wantErr: true},
		{name: "defaults", opts: Options{Client: client}, wantTTL: DefaultCacheTTL, wantNeg: DefaultNegativeCacheTTL},
		{name: "negative ttl capped at ttl", opts: Options{Client: client, CacheTTL: time.Second}, wantTTL: time.Second, wantNeg: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.opts)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New() error = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if a.ttl != tc.wantTTL || a.negativeTTL != tc.wantNeg {
				t.Errorf("ttl = %v/%v, want %v/%v", a.ttl, a.negativeTTL, tc.wantTTL, tc.wantNeg)
			}
		})
	}
}

func TestAuthorizePod(t *testing.T) {
	aliceExec := rule("alice", "create", "", "pods/exec", "ci", "job-42")
	tests := []struct {
		name       string
		header     http.Header
		grant      []string
		setup      func(api *fakeAPI)
		wantCode   int32 // 0 = allowed
		wantMsg    string
		wantCaller identity.Caller
		wantSAR    *authorizationv1.SubjectAccessReviewSpec
		wantResult string
	}{
		{
			name:   "valid token allowed",
			header: bearer("alice-token"),
			grant:  []string{aliceExec},
			wantCaller: identity.Caller{
				Name: "alice", UID: "alice-uid", Groups: []string{"dev", "system:authenticated"},
			},
			wantSAR: &authorizationv1.SubjectAccessReviewSpec{
				User: "alice", UID: "alice-uid", Groups: []string{"dev", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: "ci", Verb: "create", Group: "", Version: "v1",
					Resource: "pods", Subresource: "exec", Name: "job-42",
				},
			},
			wantResult: "allowed/miss",
		},
		{
			name:       "bearer scheme is case-insensitive",
			header:     http.Header{"Authorization": {"bEaReR alice-token"}},
			grant:      []string{aliceExec},
			wantCaller: identity.Caller{Name: "alice", UID: "alice-uid", Groups: []string{"dev", "system:authenticated"}},
			wantResult: "allowed/miss",
		},
		{
			name:       "system:authenticated is not added twice",
			header:     bearer("admin-token"),
			grant:      []string{rule("admin", "create", "", "pods/exec", "ci", "job-42")},
			wantCaller: identity.Caller{Name: "admin", Groups: []string{"system:masters", "system:authenticated"}},
			wantResult: "allowed/miss",
		},
		{
			name:       "invalid token",
			header:     bearer("nope"),
			wantCode:   http.StatusUnauthorized,
			wantMsg:    "Unauthorized",
			wantResult: "unauthenticated/miss",
		},
		{
			name:       "no credentials",
			header:     http.Header{},
			wantCode:   http.StatusUnauthorized,
			wantMsg:    "Unauthorized",
			wantResult: "unauthenticated/miss",
		},
		{
			name:       "basic auth is not a credential here",
			header:     http.Header{"Authorization": {"Basic YWxpY2U6cHc="}},
			wantCode:   http.StatusUnauthorized,
			wantMsg:    "Unauthorized",
			wantResult: "unauthenticated/miss",
		},
		{
			name:       "empty bearer token",
			header:     http.Header{"Authorization": {"Bearer "}},
			wantCode:   http.StatusUnauthorized,
			wantMsg:    "Unauthorized",
			wantResult: "unauthenticated/miss",
		},
		{
			name:       "denied",
			header:     bearer("alice-token"),
			wantCode:   http.StatusForbidden,
			wantMsg:    `pods "job-42" is forbidden: User "alice" cannot create resource "pods/exec" in API group "" in the namespace "ci"`,
			wantResult: "denied/miss",
		},
		{
			name:       "denied with the authorizer's reason",
			header:     bearer("alice-token"),
			setup:      func(api *fakeAPI) { api.denyReason = "no RBAC policy matched" },
			wantCode:   http.StatusForbidden,
			wantMsg:    `pods "job-42" is forbidden: User "alice" cannot create resource "pods/exec" in API group "" in the namespace "ci": no RBAC policy matched`,
			wantResult: "denied/miss",
		},
		{
			name:       "TokenReview unavailable",
			header:     bearer("alice-token"),
			setup:      func(api *fakeAPI) { api.tokenErr = errors.New("connection refused") },
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    "authentication unavailable",
			wantResult: "error/miss",
		},
		{
			name:       "SubjectAccessReview unavailable",
			header:     bearer("alice-token"),
			setup:      func(api *fakeAPI) { api.sarErr = apierrors.NewInternalError(errors.New("etcd down")) },
			wantCode:   http.StatusServiceUnavailable,
			wantMsg:    "authorization unavailable",
			wantResult: "error/miss",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, nil)
			env.api.grant(tc.grant...)
			if tc.setup != nil {
				env.api.set(tc.setup)
			}
			caller, err := env.authz.AuthorizeResource(context.Background(), newRequest(tc.header, nil), execJob42)
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("AuthorizeResource: %v", err)
				}
				if !reflect.DeepEqual(caller, tc.wantCaller) {
					t.Errorf("caller = %#v, want %#v", caller, tc.wantCaller)
				}
			} else {
				if err == nil {
					t.Fatalf("AuthorizeResource allowed %#v, want %d", caller, tc.wantCode)
				}
				code, msg := statusOf(t, err)
				if code != tc.wantCode || msg != tc.wantMsg {
					t.Errorf("status = %d %q, want %d %q", code, msg, tc.wantCode, tc.wantMsg)
				}
			}
			if tc.wantSAR != nil {
				sars := env.api.seenSARs()
				if len(sars) != 1 || !reflect.DeepEqual(sars[0], *tc.wantSAR) {
					t.Errorf("SARs = %#v, want one %#v", sars, *tc.wantSAR)
				}
			}
			if got := env.decisions(t); got[tc.wantResult] != 1 || len(got) != 1 {
				t.Errorf("decisions = %v, want only %s=1", got, tc.wantResult)
			}
		})
	}
}

func TestForbiddenStatusDetails(t *testing.T) {
	env := newTestEnv(t, nil)
	_, err := env.authz.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), execJob42)
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a StatusError", err)
	}
	st := se.Status()
	if st.Reason != "Forbidden" || st.Details == nil || st.Details.Kind != "pods" || st.Details.Name != "job-42" || st.Details.Group != "" {
		t.Errorf("status = %#v, want reason Forbidden and details pods/job-42", st)
	}
	want := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "job-42",
		errors.New(`User "alice" cannot create resource "pods/exec" in API group "" in the namespace "ci"`))
	if !reflect.DeepEqual(se.ErrStatus, want.ErrStatus) {
		t.Errorf("status = %#v, want %#v", se.ErrStatus, want.ErrStatus)
	}
}

// TestVerbPerSubresource: the SubjectAccessReviews of a pod subresource
// request carry the verbs kube-apiserver checks for its method, in order
// (which verbs those are is pkg/identity's TestPodStreamRequests).
func TestVerbPerSubresource(t *testing.T) {
	for _, sub := range []string{"exec", "attach", "portforward", "log"} {
		for _, method := range []string{"GET", "POST"} {
			t.Run(method+" "+sub, func(t *testing.T) {
				env := newTestEnv(t, nil)
				rrs := identity.PodStreamRequests(method, "ci", "job-42", sub)
				for _, rr := range rrs {
					env.api.grant(rule("alice", rr.Verb, "", "pods/"+sub, "ci", "job-42"))
				}
				for _, rr := range rrs {
					if _, err := env.authz.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), rr); err != nil {
						t.Fatalf("AuthorizeResource %+v: %v", rr, err)
					}
				}
				sars := env.api.seenSARs()
				if len(sars) != len(rrs) {
					t.Fatalf("SARs = %d, want %d", len(sars), len(rrs))
				}
				for i, sar := range sars {
					ra := sar.ResourceAttributes
					if ra.Verb != rrs[i].Verb || ra.Resource != "pods" || ra.Subresource != sub || ra.Version != "v1" {
						t.Errorf("SAR %d attributes = %#v, want %s pods/%s", i, ra, rrs[i].Verb, sub)
					}
				}
			})
		}
	}
}

func TestCache(t *testing.T) {
	ctx := context.Background()
	env := newTestEnv(t, nil)
	env.api.grant(
		rule("alice", "create", "", "pods/exec", "ci", "job-42"),
		rule("alice", "get", "", "pods/log", "ci", "job-42"),
	)
	logJob42 := identity.PodStreamRequests(http.MethodGet, "ci", "job-42", "log")[0]
	call := func(token string, rr identity.ResourceRequest) error {
		t.Helper()
		_, err := env.authz.AuthorizeResource(ctx, newRequest(bearer(token), nil), rr)
		return err
	}
	expectCalls := func(step string, wantTR, wantSAR int) {
		t.Helper()
		if tr, sar := env.api.calls(); tr != wantTR || sar != wantSAR {
			t.Errorf("%s: TokenReviews/SARs = %d/%d, want %d/%d", step, tr, sar, wantTR, wantSAR)
		}
	}

	if err := call("alice-token", execJob42); err != nil {
		t.Fatal(err)
	}
	expectCalls("first", 1, 1)
	env.clock.Step(9 * time.Second)
	if err := call("alice-token", execJob42); err != nil {
		t.Fatal(err)
	}
	expectCalls("within TTL", 1, 1)
	if err := call("alice-token", logJob42); err != nil {
		t.Fatal(err)
	}
	expectCalls("other subresource reuses the token review", 1, 2)
	env.clock.Step(2 * time.Second)
	if err := call("alice-token", execJob42); err != nil {
		t.Fatal(err)
	}
	expectCalls("after TTL", 2, 3)

	want := map[string]float64{"allowed/miss": 3, "allowed/hit": 1}
	if got := env.decisions(t); !reflect.DeepEqual(got, want) {
		t.Errorf("decisions = %v, want %v", got, want)
	}
}

func TestNegativeCache(t *testing.T) {
	ctx := context.Background()
	t.Run("denial is cached for the negative TTL only", func(t *testing.T) {
		env := newTestEnv(t, nil)
		req := func() *http.Request { return newRequest(bearer("alice-token"), nil) }
		if _, err := env.authz.AuthorizeResource(ctx, req(), execJob42); !apierrors.IsForbidden(err) {
			t.Fatalf("err = %v, want forbidden", err)
		}
		// A RoleBinding created now is not seen until the denial expires.
		env.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
		env.clock.Step(time.Second)
		if _, err := env.authz.AuthorizeResource(ctx, req(), execJob42); !apierrors.IsForbidden(err) {
			t.Fatalf("err = %v, want cached forbidden", err)
		}
		if _, sars := env.api.calls(); sars != 1 {
			t.Errorf("SARs = %d, want 1", sars)
		}
		env.clock.Step(1500 * time.Millisecond)
		if _, err := env.authz.AuthorizeResource(ctx, req(), execJob42); err != nil {
			t.Fatalf("after negative TTL: %v", err)
		}
		want := map[string]float64{"denied/miss": 1, "denied/hit": 1, "allowed/miss": 1}
		if got := env.decisions(t); !reflect.DeepEqual(got, want) {
			t.Errorf("decisions = %v, want %v", got, want)
		}
	})
	t.Run("rejected token is cached for the negative TTL only", func(t *testing.T) {
		env := newTestEnv(t, nil)
		for range 2 {
			if _, err := env.authz.AuthorizeResource(ctx, newRequest(bearer("nope"), nil), execJob42); !apierrors.IsUnauthorized(err) {
				t.Fatalf("err = %v, want unauthorized", err)
			}
		}
		if tr, _ := env.api.calls(); tr != 1 {
			t.Errorf("TokenReviews = %d, want 1", tr)
		}
		env.clock.Step(2500 * time.Millisecond)
		if _, err := env.authz.AuthorizeResource(ctx, newRequest(bearer("nope"), nil), execJob42); !apierrors.IsUnauthorized(err) {
			t.Fatalf("err = %v, want unauthorized", err)
		}
		if tr, _ := env.api.calls(); tr != 2 {
			t.Errorf("TokenReviews = %d, want 2", tr)
		}
	})
	t.Run("API errors are not cached", func(t *testing.T) {
		env := newTestEnv(t, nil)
		env.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
		env.api.set(func(api *fakeAPI) { api.tokenErr = errors.New("timeout") })
		if _, err := env.authz.AuthorizeResource(ctx, newRequest(bearer("alice-token"), nil), execJob42); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("err = %v, want 503", err)
		}
		env.api.set(func(api *fakeAPI) { api.tokenErr, api.sarErr = nil, errors.New("timeout") })
		if _, err := env.authz.AuthorizeResource(ctx, newRequest(bearer("alice-token"), nil), execJob42); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("err = %v, want 503", err)
		}
		env.api.set(func(api *fakeAPI) { api.sarErr = nil })
		if _, err := env.authz.AuthorizeResource(ctx, newRequest(bearer("alice-token"), nil), execJob42); err != nil {
			t.Fatalf("after recovery: %v", err)
		}
		if tr, sars := env.api.calls(); tr != 2 || sars != 2 {
			t.Errorf("TokenReviews/SARs = %d/%d, want 2/2", tr, sars)
		}
	})
}

func TestCacheBound(t *testing.T) {
	ctx := context.Background()
	const size = 16
	env := newTestEnv(t, func(o *Options) { o.MaxCacheEntries = size })
	pod := func(i int) identity.ResourceRequest {
		return identity.PodStreamRequests(http.MethodPost, "ci", fmt.Sprintf("job-%d", i), "exec")[0]
	}
	for i := range 200 {
		env.api.grant(rule("alice", "create", "", "pods/exec", "ci", pod(i).Name))
		if _, err := env.authz.AuthorizeResource(ctx, newRequest(bearer("alice-token"), nil), pod(i)); err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	if n := len(env.authz.cache.Keys()); n > size {
		t.Errorf("cache holds %d entries, bound is %d", n, size)
	}
	_, before := env.api.calls()
	if _, err := env.authz.AuthorizeResource(ctx, newRequest(bearer("alice-token"), nil), pod(199)); err != nil {
		t.Fatal(err)
	}
	if _, after := env.api.calls(); after != before {
		t.Errorf("most recent decision was evicted: SARs %d -> %d", before, after)
	}
	if _, err := env.authz.AuthorizeResource(ctx, newRequest(bearer("alice-token"), nil), pod(0)); err != nil {
		t.Fatal(err)
	}
	if _, after := env.api.calls(); after != before+1 {
		t.Errorf("oldest decision still cached: SARs %d -> %d", before, after)
	}

	t.Run("oversized entries are not cached", func(t *testing.T) {
		env := newTestEnv(t, nil)
		huge := strings.Repeat("g", maxCachedEntryBytes+1)
		env.api.set(func(api *fakeAPI) {
			api.tokens["huge-token"] = userInfo("huge", huge)
		})
		env.api.grant(rule("huge", "create", "", "pods/exec", "ci", "job-42"))
		for range 2 {
			if _, err := env.authz.AuthorizeResource(ctx, newRequest(bearer("huge-token"), nil), execJob42); err != nil {
				t.Fatal(err)
			}
		}
		if tr, sars := env.api.calls(); tr != 2 || sars != 2 {
			t.Errorf("TokenReviews/SARs = %d/%d, want 2/2 (nothing cached)", tr, sars)
		}
	})
}

func TestCachedCallerIsNotShared(t *testing.T) {
	env := newTestEnv(t, nil)
	env.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
	// The first answer is computed, the next ones come from the cache: edit
	// each and check that the next is unaffected.
	for i := range 3 {
		c, err := env.authz.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), execJob42)
		if err != nil {
			t.Fatal(err)
		}
		if c.Groups[0] != "dev" {
			t.Fatalf("call %d: cached caller was modified through a returned value: %v", i, c.Groups)
		}
		c.Groups[0] = "system:masters"
	}
}

func TestTokenNeverInErrorsOrLogs(t *testing.T) {
	const secret = "s3cr3t-t0ken-value"
	tests := []struct {
		name   string
		header http.Header
		setup  func(api *fakeAPI)
	}{
		{name: "rejected", header: bearer(secret), setup: func(api *fakeAPI) { api.rejectText = "invalid bearer token " + secret }},
		{name: "TokenReview error echoes the token", header: bearer(secret), setup: func(api *fakeAPI) {
			api.tokenErr = errors.New(`Post "https://karmada/apis": body {"token":"` + secret + `"}`)
		}},
		{name: "denied", header: bearer(secret), setup: func(api *fakeAPI) {
			api.tokens[secret] = userInfo("carol")
		}},
		{name: "impersonation denied", header: http.Header{
			"Authorization": {"Bearer " + secret}, "Impersonate-User": {"bob"},
		}, setup: func(api *fakeAPI) {
			api.tokens[secret] = userInfo("carol")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, nil)
			env.api.set(tc.setup)
			var logs bytes.Buffer
			ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(
				textlogger.Output(&logs), textlogger.Verbosity(10))))
			_, err := env.authz.AuthorizeResource(ctx, newRequest(tc.header, nil), execJob42)
			if err == nil {
				t.Fatal("AuthorizeResource allowed, want an error")
			}
			_, msg := statusOf(t, err)
			for what, s := range map[string]string{"error": err.Error(), "status": msg, "logs": logs.String()} {
				if strings.Contains(s, secret) {
					t.Errorf("token appears in %s: %s", what, s)
				}
			}
			if logs.Len() == 0 {
				t.Error("nothing was logged; the log check proves nothing")
			}
		})
	}
}
