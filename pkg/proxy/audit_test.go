package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// captureSink is an audit sink keeping the encoded events.
type captureSink struct {
	mu     sync.Mutex
	events [][]byte
}

func (s *captureSink) Name() string                       { return "capture" }
func (s *captureSink) Run(context.Context, time.Duration) {}
func (s *captureSink) Enqueue(ev []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	return true
}

// waitEvents polls until n events were written, and decodes them.
func (s *captureSink) waitEvents(t *testing.T, n int) []audit.Event {
	t.Helper()
	var got [][]byte
	_ = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		got = append([][]byte(nil), s.events...)
		return len(got) >= n, nil
	})
	if len(got) != n {
		t.Fatalf("%d audit events, want %d: %s", len(got), n, bytes.Join(got, []byte("\n")))
	}
	out := make([]audit.Event, n)
	for i, b := range got {
		if bytes.Contains(b, []byte("caller-token")) {
			t.Fatalf("an audit event holds the bearer token: %s", b)
		}
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func newCapturingAuditor() (*audit.Auditor, *captureSink) {
	sink := &captureSink{}
	return audit.New(audit.Options{Metrics: audit.NewMetrics(prometheus.NewRegistry()), Sinks: []audit.Sink{sink}}), sink
}

// TestExecIsAudited covers Options.Auditor on an exec through the gateway
// as cmd/gateway builds it: a stream gets ResponseStarted at the 101 and
// ResponseComplete once the stream ended, with the member, the command,
// the exit status read from the error channel and the bytes each way, the
// template's UID as objectRef.uid and the member pod's as an annotation,
// as the Resolver placed them (resolvePod; calling Resolve instead loses
// both). Without the hooks in ServeHTTP and followStream there are no
// events.
//
// Under a server URL pinning the member (/clusters/<name>/) the event keeps
// the URI as sent, reads objectRef below the prefix and names the pin.
func TestExecIsAudited(t *testing.T) {
	payload := make([]byte, 64<<10)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ kind, pinned string }{{"spdy", ""}, {"websocket", ""}, {"spdy", proxytest.Cluster}, {"websocket", proxytest.Cluster}} {
		kind, target := tc.kind, execTarget
		if tc.pinned != "" {
			target = "/clusters/" + tc.pinned + execTarget
		}
		t.Run(kind+" "+target, func(t *testing.T) {
			auditor, sink := newCapturingAuditor()
			placer := &proxytest.Resolver{Cluster: proxytest.Cluster, TemplateUID: "template-uid", MemberUID: "member-uid"}
			env := newExecEnvWith(t, nil, Options{Auditor: auditor, Resolver: placer})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := env.executor(t, kind, target).StreamWithContext(ctx, remotecommand.StreamOptions{
				Stdin: bytes.NewReader(payload), Stdout: io.Discard,
			}); err != nil {
				t.Fatal(err)
			}
			evs := sink.waitEvents(t, 2)
			if got := evs[1].RequestURI; !strings.HasPrefix(got, target) {
				t.Errorf("requestURI %q, want the target as sent, %q", got, target)
			}
			if got := evs[1].Annotations[audit.AnnotationPinnedCluster]; got != tc.pinned {
				t.Errorf("pinned-cluster annotation %q, want %q", got, tc.pinned)
			}
			started, complete := evs[0], evs[1]
			if started.Stage != audit.StageResponseStarted || complete.Stage != audit.StageResponseComplete || started.AuditID != complete.AuditID {
				t.Fatalf("stages %s, %s with IDs %s, %s; want ResponseStarted then ResponseComplete of one request", started.Stage, complete.Stage, started.AuditID, complete.AuditID)
			}
			ref := complete.ObjectRef
			if ref == nil || ref.Resource != "pods" || ref.Namespace != "ci" || ref.Name != "job-42" || ref.Subresource != "exec" || ref.UID != "template-uid" {
				t.Errorf("objectRef %+v", ref)
			}
			wantVerb := map[string]string{"spdy": "create", "websocket": "get"}[kind]
			if complete.Verb != wantVerb || complete.ResponseStatus == nil || complete.ResponseStatus.Code != http.StatusSwitchingProtocols {
				t.Errorf("verb %q status %+v, want %s and 101", complete.Verb, complete.ResponseStatus, wantVerb)
			}
			a := complete.Annotations
			for k, want := range map[string]string{
				audit.AnnotationCluster: proxytest.Cluster, audit.AnnotationCommand: `["cat"]`, audit.AnnotationContainer: "build",
				audit.AnnotationStdin: "true", audit.AnnotationTTY: "false", audit.AnnotationExitCode: "0",
				audit.AnnotationStreamEnd: "completed", audit.AnnotationAuthMode: "passthrough",
				audit.AnnotationMemberUID: "member-uid",
			} {
				if a[k] != want {
					t.Errorf("annotation %s = %q, want %q", k, a[k], want)
				}
			}
			if !strings.HasPrefix(a[audit.AnnotationCredential], "token-sha256:") {
				t.Errorf("credential %q, want the token's hash", a[audit.AnnotationCredential])
			}
			for _, k := range []string{audit.AnnotationBytesIn, audit.AnnotationBytesOut} {
				var n int
				if err := json.Unmarshal([]byte(a[k]), &n); err != nil || n < len(payload) {
					t.Errorf("%s = %q, want at least the %d bytes echoed", k, a[k], len(payload))
				}
			}
		})
	}
}

// TestExecCutIsAudited: a stream the member cut is audited as cut, with no
// exit code.
func TestExecCutIsAudited(t *testing.T) {
	auditor, sink := newCapturingAuditor()
	env := newExecEnvWith(t, func(s *execServer) { s.cutAfter = 10 }, Options{Auditor: auditor})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := env.executor(t, "spdy", execTarget).StreamWithContext(ctx, remotecommand.StreamOptions{
		Stdin: io.MultiReader(strings.NewReader("0123456789"), blockUntil(ctx)), Stdout: io.Discard,
	})
	if err == nil {
		t.Fatal("a cut stream ended without an error")
	}
	complete := sink.waitEvents(t, 2)[1]
	if a := complete.Annotations; a[audit.AnnotationStreamEnd] != "cut_reported" || a[audit.AnnotationExitCode] != "" {
		t.Errorf("annotations %v, want a reported cut and no exit code", a)
	}
}

// blockUntil is a reader that blocks until ctx ends.
func blockUntil(ctx context.Context) io.Reader {
	return readerFunc(func([]byte) (int, error) { <-ctx.Done(); return 0, io.EOF })
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestRefusalsAreAudited: a request for a member the gateway refuses is
// audited with the refusal's Status and authorize mode's decision; a
// request passed through to karmada-apiserver is not (kube-apiserver
// audits it).
func TestRefusalsAreAudited(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"}, "job-42", nil)
	auditor, sink := newCapturingAuditor()
	up := httptest.NewServer(&proxytest.RecordingUpstream{})
	t.Cleanup(up.Close)
	p := newTestProxy(t, Options{
		Upstream: &rest.Config{Host: up.URL}, AuthMode: AuthAuthorize, Auditor: auditor,
		Authorizer: &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}, Deny: forbidden},
	})
	for _, target := range []string{
		"/api/v1/namespaces/ci/pods/job-42/exec?command=id",
		"/api/v1/namespaces/ci/pods/job-42/%65xec",
		"/api/v1/namespaces/ci/pods",
	} {
		req := proxytest.RawRequest(t, http.MethodPost, target, http.Header{"Authorization": {"Bearer caller-token"}}, "")
		p.ServeHTTP(httptest.NewRecorder(), req)
	}
	evs := sink.waitEvents(t, 2)
	denied, guarded := evs[0], evs[1]
	if denied.User.Username != "alice" {
		t.Errorf("denied exec audited with user %+v, want the caller who authenticated", denied.User)
	}
	if denied.ResponseStatus.Code != http.StatusForbidden || denied.Annotations[audit.AnnotationDecision] != "forbid" ||
		!strings.Contains(denied.Annotations[audit.AnnotationReason], "forbidden") || denied.Annotations[audit.AnnotationCommand] != `["id"]` {
		t.Errorf("denied exec audited as %+v", denied)
	}
	if guarded.ResponseStatus.Code != http.StatusBadRequest || guarded.Annotations[audit.AnnotationRoute] != "refused" || guarded.ResponseStatus.Message == "" {
		t.Errorf("refused path audited as %+v %+v", guarded, guarded.ResponseStatus)
	}
}

// TestPassthroughEventsNameTheCaller: in passthrough mode an audited
// request's events name the caller as karmada-apiserver authenticates its
// credential (its SelfSubjectReview, sent with the caller's token alone,
// never its impersonation), whom it asked to be as impersonatedUser; one
// review serves every request with the token, WebSocket or not; a token
// karmada-apiserver answered 401 costs no review, so random tokens cannot
// multiply the gateway's calls.
func TestPassthroughEventsNameTheCaller(t *testing.T) {
	var mu sync.Mutex
	var reviews []http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if proxytest.IsSelfSubjectReview(r) {
			mu.Lock()
			reviews = append(reviews, r.Header.Clone())
			mu.Unlock()
		}
		if r.Header.Get("Authorization") == "Bearer bad-token" {
			apiresponse.WriteStatus(w, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		(&proxytest.RecordingUpstream{}).ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	auditor, sink := newCapturingAuditor()
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: up.URL}, Auditor: auditor})
	logs := "/api/v1/namespaces/ci/pods/job-42/log"
	for _, h := range []http.Header{
		{"Authorization": {"Bearer caller-token"}},
		{"Authorization": {"Bearer caller-token"}, "Impersonate-User": {"bob"}},
		{"Authorization": {"Bearer bad-token"}},
		{}, // anonymous, which karmada-apiserver admits here
	} {
		p.ServeHTTP(httptest.NewRecorder(), proxytest.RawRequest(t, http.MethodGet, logs, h, ""))
	}
	evs := sink.waitEvents(t, 4)
	// An event waits for its caller's review; the refused token's, which
	// has none, may come first.
	slices.SortStableFunc(evs, func(a, b audit.Event) int {
		rank := func(ev audit.Event) int {
			switch {
			case ev.User.Username == identity.UserAnonymous:
				return 3
			case ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusUnauthorized:
				return 2
			case ev.ImpersonatedUser != nil:
				return 1
			}
			return 0
		}
		return rank(a) - rank(b)
	})
	for i, ev := range evs[:2] {
		if ev.User.Username != proxytest.ReviewedUser || strings.Join(ev.User.Groups, ",") != "devs,system:authenticated" {
			t.Errorf("event %d: user %+v, want karmada-apiserver's answer", i, ev.User)
		}
	}
	if imp := evs[1].ImpersonatedUser; imp == nil || imp.Username != "bob" || strings.Join(imp.Groups, ",") != "system:authenticated" {
		t.Errorf("impersonatedUser %+v, want bob as kube-apiserver builds him", imp)
	}
	if evs[2].User.Username != "" || evs[2].ResponseStatus.Code != http.StatusUnauthorized {
		t.Errorf("a refused token's event: user %+v, code %d", evs[2].User, evs[2].ResponseStatus.Code)
	}
	// As kube-apiserver's audit log names an anonymous caller.
	if u := evs[3].User; u.Username != identity.UserAnonymous || strings.Join(u.Groups, ",") != identity.GroupUnauthenticated {
		t.Errorf("an anonymous caller's event: user %+v, want system:anonymous in system:unauthenticated", u)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reviews) != 1 || reviews[0].Get("Impersonate-User") != "" || reviews[0].Get("Authorization") != "Bearer caller-token" {
		t.Fatalf("reviews sent: %v; want one, with the caller's token alone", reviews)
	}
}

// TestForwardedFor: what a client says of its origin in X-Forwarded-For
// is kept and the peer's address appended (append, as httputil's
// SetXForwarded), or replaced by the peer's address alone (replace), the
// same on the request the gateway forwards, on its own admission check
// sent on the client's behalf, and in its audit event's sourceIPs;
// Forwarded and X-Forwarded-Host/Proto go as sent or not at all.
func TestForwardedFor(t *testing.T) {
	for _, tc := range []struct {
		mode   ForwardedFor
		header http.Header
		want   string
	}{
		{ForwardedForAppend, http.Header{"X-Forwarded-For": {"203.0.113.9"}, "X-Forwarded-Proto": {"https"}}, "203.0.113.9, 192.0.2.1"},
		{ForwardedForAppend, http.Header{}, "192.0.2.1"},
		{ForwardedForAppend, http.Header{"X-Forwarded-For": {"203.0.113.9"}, "Connection": {"X-Forwarded-For"}}, "192.0.2.1"},
		{ForwardedForReplace, http.Header{"X-Forwarded-For": {"203.0.113.9, 198.51.100.2"}, "X-Forwarded-Proto": {"https"}}, "192.0.2.1"},
		// X-Real-Ip, which kube-apiserver reads after the list, never goes
		// upstream: replacing, it is dropped; appending, folded into the
		// list where kube-apiserver would have read it (once, if it parses).
		{ForwardedForReplace, http.Header{"X-Real-Ip": {"7.7.7.7"}}, "192.0.2.1"},
		{ForwardedForAppend, http.Header{"X-Forwarded-For": {"203.0.113.9"}, "X-Real-Ip": {"7.7.7.7"}}, "203.0.113.9, 7.7.7.7, 192.0.2.1"},
		{ForwardedForAppend, http.Header{"X-Forwarded-For": {"203.0.113.9"}, "X-Real-Ip": {"203.0.113.9"}}, "203.0.113.9, 192.0.2.1"},
		{ForwardedForAppend, http.Header{"X-Real-Ip": {"not-an-ip"}}, "192.0.2.1"},
		{ForwardedForAppend, http.Header{"X-Real-Ip": {"7.7.7.7"}, "Connection": {"X-Real-Ip"}}, "192.0.2.1"},
	} {
		t.Run(string(tc.mode)+"/"+tc.header.Get("X-Forwarded-For")+"/"+tc.header.Get("X-Real-Ip"), func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]http.Header{}
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				switch {
				case proxytest.IsAdmissionCheck(r):
					seen["check"] = r.Header.Clone()
				case !proxytest.IsSelfSubjectReview(r):
					seen["forward"] = r.Header.Clone()
				}
				mu.Unlock()
				(&proxytest.RecordingUpstream{}).ServeHTTP(w, r)
			}))
			t.Cleanup(up.Close)
			auditor, sink := newCapturingAuditor()
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: up.URL}, Auditor: auditor, ForwardedFor: tc.mode})
			h := tc.header.Clone()
			h.Set("Authorization", "Bearer caller-token")
			req := proxytest.RawRequest(t, http.MethodGet, "/api/v1/namespaces/ci/pods/job-42/log", h, "")
			req.RemoteAddr = "192.0.2.1:4444"
			p.ServeHTTP(httptest.NewRecorder(), req)
			ev := sink.waitEvents(t, 1)[0]
			mu.Lock()
			defer mu.Unlock()
			for _, which := range []string{"check", "forward"} {
				got := seen[which]
				if got.Get("X-Forwarded-For") != tc.want {
					t.Errorf("%s: X-Forwarded-For %q, want %q", which, got.Get("X-Forwarded-For"), tc.want)
				}
				if real := got.Values("X-Real-Ip"); len(real) != 0 {
					t.Errorf("%s: X-Real-Ip %q went upstream", which, real)
				}
				if proto := got.Get("X-Forwarded-Proto"); (tc.mode == ForwardedForReplace) != (proto == "") && tc.header.Get("X-Forwarded-Proto") != "" {
					t.Errorf("%s: X-Forwarded-Proto %q in %s mode", which, proto, tc.mode)
				}
			}
			if got := strings.Join(ev.SourceIPs, ", "); got != tc.want {
				t.Errorf("audit sourceIPs %q, want %q", got, tc.want)
			}
		})
	}
}
