package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording"
)

// ephemeralUpstream is karmada-apiserver and the cluster proxy in one: it
// answers each pods/ephemeralcontainers write, "member dry run",
// "template" or "member", with a Pod or, for the steps in refuse, a 403,
// and records them.
type ephemeralUpstream struct {
	refuse map[string]bool

	mu    sync.Mutex
	steps []string
	heads []http.Header
	body  []string
}

func (u *ephemeralUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	proxytest.Admitting(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		step := "template"
		switch {
		case strings.HasPrefix(r.URL.Path, karmada.ClusterProxyPath(proxytest.Cluster, "")):
			step = "member"
		case strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews"):
			step = "review"
		}
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.steps = append(u.steps, r.Method+" "+step)
		u.heads = append(u.heads, r.Header.Clone())
		u.body = append(u.body, string(b))
		refused := u.refuse[step]
		u.mu.Unlock()
		if step == "review" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","status":{"allowed":%v}}`, !refused)
			return
		}
		if !refused {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","annotations":{"from":%q}}}`, step)
			return
		}
		apiresponse.WriteStatus(w, apierrors.NewForbidden(podsResource, "p", fmt.Errorf("%s says no", step)))
	})).ServeHTTP(w, r)
}

// TestEphemeralContainersReachTheTemplateAndTheMember: a kubectl debug
// patch, once the caller may make it (passthrough: a SelfSubjectAccessReview
// as the caller; authorize mode: the Authorizer), goes to the member's
// copy, then to the template in karmada-apiserver, the body unchanged; the
// client gets the template's answer. A refusal of the review or by the
// member is relayed and nothing more is written, so the template and its
// copy never differ in ephemeral containers (Karmada's sync of the pod
// fails when they do). A pod Karmada runs in several clusters is refused:
// its other copies would lack the container. A template refused after the
// member took it is reported, naming the member and the consequence.
func TestEphemeralContainersReachTheTemplateAndTheMember(t *testing.T) {
	const target = "/api/v1/namespaces/ci/pods/p/ephemeralcontainers"
	patch := `{"spec":{"ephemeralContainers":[{"name":"dbg","image":"busybox"}]}}`
	for _, tc := range []struct {
		name      string
		mode      AuthMode
		refuse    map[string]bool
		scheduled []karmada.TargetCluster
		wantCode  int
		wantSteps []string
		wantFrom  string // the annotation of the answer relayed
		wantMsg   string
	}{
		{name: "added to both", mode: AuthPassthrough, wantCode: 200, wantSteps: []string{"POST review", "PATCH member", "PATCH template"}, wantFrom: "template"},
		{name: "added to both, authorize mode", mode: AuthAuthorize, wantCode: 200, wantSteps: []string{"PATCH member", "PATCH template"}, wantFrom: "template"},
		{name: "karmada-apiserver's review refuses: nothing written", mode: AuthPassthrough, refuse: map[string]bool{"review": true}, wantCode: 403, wantSteps: []string{"POST review"}, wantMsg: "may not patch it in karmada-apiserver"},
		{name: "the member refuses: nothing written", mode: AuthPassthrough, refuse: map[string]bool{"member": true}, wantCode: 403, wantSteps: []string{"POST review", "PATCH member"}, wantMsg: "member says no"},
		{name: "a pod in several clusters: refused, nothing written", mode: AuthPassthrough, scheduled: []karmada.TargetCluster{{Name: "member1"}, {Name: "member2"}}, wantCode: 409, wantSteps: []string{"POST review"}, wantMsg: "runs in several member clusters (member1, member2)"},
		{name: "the template refused after the member took it: reported", mode: AuthAuthorize, refuse: map[string]bool{"template": true}, wantCode: 502, wantSteps: []string{"PATCH member", "PATCH template"}, wantMsg: `karmada-apiserver did not add it to the template`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &ephemeralUpstream{refuse: tc.refuse}
			srv := httptest.NewServer(up)
			defer srv.Close()
			authz := &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}}
			res := &proxytest.Resolver{Cluster: proxytest.Cluster, Scheduled: tc.scheduled}
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL, BearerToken: "gateway-token"}, AuthMode: tc.mode, Authorizer: authz, Resolver: res})
			rec := httptest.NewRecorder()
			req := proxytest.RawRequest(t, http.MethodPatch, target+"?fieldManager=kubectl-debug", http.Header{
				"Authorization": {"Bearer caller-token"}, "Content-Type": {"application/strategic-merge-patch+json"},
			}, patch)
			p.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", rec.Code, tc.wantCode, rec.Body)
			}
			if !slices.Equal(up.steps, tc.wantSteps) {
				t.Errorf("upstream writes %q, want %q", up.steps, tc.wantSteps)
			}
			for i, b := range up.body {
				if up.steps[i] == "POST review" {
					continue
				}
				if b != patch || up.heads[i].Get("Content-Type") != "application/strategic-merge-patch+json" {
					t.Errorf("%s got %q as %q, want the client's patch as sent", up.steps[i], b, up.heads[i].Get("Content-Type"))
				}
				member := strings.HasPrefix(up.steps[i], "PATCH member")
				wantToken := "Bearer caller-token"
				if member && tc.mode == AuthAuthorize {
					wantToken = "Bearer gateway-token"
				}
				if got := up.heads[i].Get("Authorization"); got != wantToken {
					t.Errorf("%s sent as %q, want %q", up.steps[i], got, wantToken)
				}
			}
			if tc.wantFrom != "" {
				var pod struct {
					Metadata struct{ Annotations map[string]string } `json:"metadata"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &pod); err != nil || pod.Metadata.Annotations["from"] != tc.wantFrom {
					t.Errorf("answer %s, want the %s's", rec.Body, tc.wantFrom)
				}
			}
			if tc.wantMsg != "" {
				if st := proxytest.DecodeStatus(t, rec.Header().Get("Content-Type"), rec.Body.Bytes()); !strings.Contains(st.Message, tc.wantMsg) {
					t.Errorf("Status %q, want it to say %q", st.Message, tc.wantMsg)
				}
			}
			if tc.mode == AuthAuthorize {
				want := identity.ResourceRequest{Namespace: "ci", Verb: "patch", Resource: "pods", Subresource: "ephemeralcontainers", Name: "p"}
				if got := authz.Authorized(); len(got) == 0 || got[0] != want {
					t.Errorf("authorized %+v, want %+v first", got, want)
				}
			}
		})
	}
}

// TestEphemeralContainersPathGuard: a write of pods/ephemeralcontainers in
// any non-canonical form is refused with nothing sent (karmada-apiserver
// alone would add the container to the template only), another method
// than GET, PATCH or PUT is 405, and GET reads the template.
func TestEphemeralContainersPathGuard(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		wantCode       int
		wantSteps      int
	}{
		{http.MethodPatch, "/api/v1/namespaces/ci/pods/p/ephemeral%63ontainers", 400, 0},
		{http.MethodPatch, "/api/v1/namespaces/ci/pods/p/ephemeralcontainers/", 400, 0},
		{http.MethodPatch, "/api/v1/namespaces/ci/pods/x/../p/ephemeralcontainers", 400, 0},
		{http.MethodPatch, "//api/v1/namespaces/ci/pods/p/ephemeralcontainers", 400, 0},
		{http.MethodPut, "/api/v1/namespaces/ci/pods/P/ephemeralcontainers", 400, 0},
		{http.MethodDelete, "/api/v1/namespaces/ci/pods/p/ephemeralcontainers", 405, 0},
		{http.MethodPost, "/api/v1/namespaces/ci/pods/p/ephemeralcontainers", 405, 0},
		{http.MethodGet, "/api/v1/namespaces/ci/pods/p/ephemeralcontainers", 200, 1},
		{http.MethodPut, "/api/v1/namespaces/ci/pods/p/ephemeralcontainers", 200, 3},
		{http.MethodPatch, "/clusters/member1/api/v1/namespaces/ci/pods/p/ephemeralcontainers", 200, 3},
		{http.MethodPatch, "/clusters/member1/api/v1/namespaces/ci/pods/p/ephemeral%63ontainers", 400, 0},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			up := &ephemeralUpstream{}
			srv := httptest.NewServer(up)
			defer srv.Close()
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}})
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, tc.method, tc.target, http.Header{"Content-Type": {"application/json"}}, `{}`))
			if rec.Code != tc.wantCode || len(up.steps) != tc.wantSteps {
				t.Errorf("code %d with upstream writes %q, want %d and %d writes: %s", rec.Code, up.steps, tc.wantCode, tc.wantSteps, rec.Body)
			}
		})
	}
}

// TestEphemeralContainersBodyDeadline: a client that trickles its debug
// patch gets a 408 once the upstream header timeout passed, and nothing
// is written anywhere; without the deadline it holds the request until it
// gives up.
func TestEphemeralContainersBodyDeadline(t *testing.T) {
	up := &ephemeralUpstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}, UpstreamHeaderTimeout: 200 * time.Millisecond})
	gw := httptest.NewServer(p)
	defer gw.Close()
	c, err := net.Dial("tcp", gw.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "PATCH /api/v1/namespaces/ci/pods/p/ephemeralcontainers HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer caller-token\r\n"+
		"Content-Type: application/strategic-merge-patch+json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"reason":"Timeout"`) {
		t.Errorf("trickled body: %s %s, want a 408 Timeout Status", res.Status, body)
	}
	if len(up.steps) != 0 {
		t.Errorf("a body that never came was written: %q", up.steps)
	}
}

// TestEphemeralContainersAreAudited: a kubectl debug write is audited
// under its own route, with the member it went to, the caller authorize
// mode authorized and the pod's ephemeralcontainers subresource.
func TestEphemeralContainersAreAudited(t *testing.T) {
	up := &ephemeralUpstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	auditor, sink := newCapturingAuditor()
	authz := &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}}
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL, BearerToken: "gateway-token"}, AuthMode: AuthAuthorize, Authorizer: authz, Auditor: auditor})
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, proxytest.RawRequest(t, http.MethodPatch, "/api/v1/namespaces/ci/pods/p/ephemeralcontainers",
		http.Header{"Authorization": {"Bearer caller-token"}, "Content-Type": {"application/strategic-merge-patch+json"}}, kubectlDebugPatch))
	if rec.Code != http.StatusOK {
		t.Fatalf("code %d: %s", rec.Code, rec.Body)
	}
	ev := sink.waitEvents(t, 1)[0]
	a := ev.Annotations
	if a[audit.AnnotationRoute] != metrics.RouteEphemeralContainers || a[audit.AnnotationCluster] != proxytest.Cluster || ev.User.Username != "alice" ||
		ev.ObjectRef == nil || ev.ObjectRef.Name != "p" || ev.ObjectRef.Subresource != ephemeralSubresource || ev.Verb != "patch" {
		t.Errorf("audit event %+v, want route %s, member %s, user alice, patch of pods/p/ephemeralcontainers", ev, metrics.RouteEphemeralContainers, proxytest.Cluster)
	}
	// What the debug container runs, and with what reach, is in the event:
	// it is an exec the caller chose.
	want := `[{"name":"debugger-x7k2","image":"busybox","command":["sh","-c","id \u003e /tmp/x"],"targetContainerName":"main","securityContext":{"privileged":true}}]`
	if got := a[audit.AnnotationEphemeralContainers]; got != want {
		t.Errorf("ephemeral-containers annotation %s, want %s", got, want)
	}
}

// kubectlDebugPatch is the strategic merge patch kubectl debug
// --image=busybox --target=main --profile=sysadmin -- sh -c 'id > /tmp/x'
// sends.
const kubectlDebugPatch = `{"spec":{"ephemeralContainers":[{"name":"debugger-x7k2","image":"busybox","command":["sh","-c","id > /tmp/x"],` +
	`"resources":{},"terminationMessagePolicy":"File","imagePullPolicy":"Always","securityContext":{"privileged":true},"targetContainerName":"main"}]}}`

// TestDebugContainersReadInEveryWriteForm: the containers a write adds are
// read from a strategic merge patch (kubectl debug's), a whole Pod (PUT)
// and a JSON patch; a body of none of these forms says so.
func TestDebugContainersReadInEveryWriteForm(t *testing.T) {
	one := `{"name":"d","image":"busybox","args":["top"],"stdin":true,"tty":true}`
	for _, tc := range []struct{ name, body, want string }{
		{"strategic merge patch", `{"spec":{"ephemeralContainers":[` + one + `]}}`, `[{"name":"d","image":"busybox","args":["top"],"stdin":true,"tty":true}]`},
		{"pod", `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"},"spec":{"containers":[{"name":"main","image":"x"}],"ephemeralContainers":[` + one + `]}}`,
			`[{"name":"d","image":"busybox","args":["top"],"stdin":true,"tty":true}]`},
		{"json patch, one", `[{"op":"add","path":"/spec/ephemeralContainers/-","value":` + one + `}]`, `[{"name":"d","image":"busybox","args":["top"],"stdin":true,"tty":true}]`},
		{"json patch, the list", `[{"op":"add","path":"/spec/ephemeralContainers","value":[` + one + `]}]`, `[{"name":"d","image":"busybox","args":["top"],"stdin":true,"tty":true}]`},
		{"garbage", `not json`, `unparsed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := debugContainers([]byte(tc.body))
			if got.audit() != tc.want || !got.tty() && tc.want != "unparsed" {
				t.Errorf("%s: %s, tty %v; want %s", tc.name, got.audit(), got.tty(), tc.want)
			}
		})
	}
}

// TestDebugContainerRefusedWhenRecordingFailsClosed: where sessions are
// recorded failing closed, a debug container is refused (503) before any
// write: it runs its command whether or not a session attaches, so
// nothing could record it. Failing open, or where the namespace records
// nothing, it is added as before.
func TestDebugContainerRefusedWhenRecordingFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    recording.Options
		refused bool
	}{
		{"fail-closed, all", recording.Options{Mode: recording.ModeAll, FailClosed: true}, true},
		{"fail-closed, namespace override", recording.Options{Mode: recording.ModeNone, Namespaces: map[string]recording.Mode{"ci": recording.ModeAll}, FailClosed: true}, true},
		{"fail-closed, tty only, no terminal", recording.Options{Mode: recording.ModeTTY, FailClosed: true}, false},
		{"fail-open", recording.Options{Mode: recording.ModeAll}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Dir, tc.opts.MaxSessionBytes, tc.opts.MaxTotalBytes = t.TempDir(), 1<<20, 1<<20
			rec, err := recording.New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			up := &ephemeralUpstream{}
			srv := httptest.NewServer(up)
			defer srv.Close()
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}, Recorder: rec})
			rw := httptest.NewRecorder()
			p.ServeHTTP(rw, proxytest.RawRequest(t, http.MethodPatch, "/api/v1/namespaces/ci/pods/p/ephemeralcontainers",
				http.Header{"Authorization": {"Bearer caller-token"}, "Content-Type": {"application/strategic-merge-patch+json"}}, kubectlDebugPatch))
			up.mu.Lock()
			writes := slices.DeleteFunc(slices.Clone(up.steps), func(s string) bool { return !strings.HasPrefix(s, "PATCH") })
			up.mu.Unlock()
			switch {
			case tc.refused && (rw.Code != http.StatusServiceUnavailable || len(writes) != 0 || !strings.Contains(rw.Body.String(), "cannot be recorded")):
				t.Errorf("%d %s, writes %v; want 503 before anything is written", rw.Code, rw.Body, writes)
			case !tc.refused && (rw.Code != http.StatusOK || len(writes) != 2):
				t.Errorf("%d %s, writes %v; want the member's copy and the template written", rw.Code, rw.Body, writes)
			}
		})
	}
}
