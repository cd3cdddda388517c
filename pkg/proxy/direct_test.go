package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberaccess/memberaccesstest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// gatewaySA is the gateway's own identity in directHarness.
const gatewaySA = "system:serviceaccount:karmada-system:karmada-exec-gateway"

// directHarness is a gateway in direct mode between a karmada-apiserver
// that admits every caller and member clusters' kube-apiservers that record
// what reaches them.
type directHarness struct {
	karmada     *proxytest.RecordingUpstream
	selfReviews atomic.Int32 // GatewayIdentity's calls
	member      *proxytest.RecordingUpstream
	authz       *proxytest.Authorizer
	p           *Proxy
	met         *metrics.Metrics
}

func newDirectHarness(t *testing.T, mode AuthMode, authz *proxytest.Authorizer, members ...memberaccesstest.Member) *directHarness {
	t.Helper()
	h := &directHarness{karmada: &proxytest.RecordingUpstream{}, member: &proxytest.RecordingUpstream{}, authz: authz}
	up := httptest.NewServer(h.karmada)
	t.Cleanup(up.Close)
	if len(members) == 0 {
		srv := httptest.NewUnstartedServer(h.member)
		srv.EnableHTTP2 = true
		srv.StartTLS()
		t.Cleanup(srv.Close)
		members = []memberaccesstest.Member{{Name: proxytest.Cluster, Server: srv, Token: "impersonator-token"}}
	}
	h.met = metrics.New(prometheus.NewRegistry())
	h.p = newTestProxy(t, Options{
		Upstream: &rest.Config{Host: up.URL, BearerToken: "gateway-token"}, AuthMode: mode, Authorizer: authz, Metrics: h.met,
		Members: memberaccesstest.New(t, h.met, members...),
		GatewayIdentity: func(context.Context, identity.ResourceRequest) (identity.Caller, error) {
			h.selfReviews.Add(1)
			return identity.Caller{Name: gatewaySA, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:karmada-system", "system:authenticated"}}, nil
		},
	})
	return h
}

func (h *directHarness) serve(t *testing.T, method, target string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.p.ServeHTTP(rec, proxytest.RawRequest(t, method, target, header, ""))
	return rec
}

var callerHeaders = http.Header{
	"Authorization":            {"Bearer caller-token"},
	"Impersonate-User":         {"bob"},
	"Impersonate-Extra-Scopes": {"all"},
	"X-Remote-User":            {"admin"},
}

func TestDirectActsAsTheCallerInPassthroughMode(t *testing.T) {
	caller := identity.Caller{Name: "bob", UID: "uid-bob", Groups: []string{"ci", "system:authenticated"}, Extra: map[string][]string{"scopes": {"all"}}}
	for _, tt := range []struct {
		method, target, memberPath, verb string
	}{
		{http.MethodPost, "/api/v1/namespaces/ci/pods/p/exec?command=id&stdout=true", "/api/v1/namespaces/ci/pods/p/exec", "create"},
		{http.MethodGet, "/api/v1/namespaces/ci/pods/p/log?follow=false", "/api/v1/namespaces/ci/pods/p/log", "get"},
		{http.MethodPut, "/api/v1/namespaces/ci/pods/p:8080/proxy/a%2Fb?x=1", "/api/v1/namespaces/ci/pods/p:8080/proxy/a%2Fb", "update"},
	} {
		t.Run(tt.method+" "+tt.memberPath, func(t *testing.T) {
			h := newDirectHarness(t, AuthPassthrough, &proxytest.Authorizer{Caller: caller})
			rec := h.serve(t, tt.method, tt.target, callerHeaders)
			if rec.Code != http.StatusOK {
				t.Fatalf("code %d: %s", rec.Code, rec.Body)
			}
			// karmada-apiserver judges the caller as through the cluster
			// proxy: the admission check with their own headers, then
			// clusters/proxy on the Cluster with the method's verb.
			want := identity.ResourceRequest{Verb: tt.verb, Group: "cluster.karmada.io", Resource: "clusters", Subresource: "proxy", Name: proxytest.Cluster}
			if got := h.authz.Authorized(); len(got) != 1 || got[0] != want {
				t.Errorf("authorized %+v, want %+v", got, want)
			}
			if got := h.karmada.Requests(); len(got) != 0 {
				t.Errorf("karmada-apiserver carried %d requests (%s): direct mode must not ride the cluster proxy", len(got), got[0].Path)
			}
			got := h.member.Requests()
			if len(got) != 1 {
				t.Fatalf("member got %d requests, want 1", len(got))
			}
			m := got[0]
			if escaped := strings.SplitN(m.RequestURI, "?", 2)[0]; escaped != tt.memberPath {
				t.Errorf("member path %q, want %q", escaped, tt.memberPath)
			}
			if q := strings.SplitN(tt.target, "?", 2)[1]; m.RawQuery != q {
				t.Errorf("query %q, want %q", m.RawQuery, q)
			}
			wantHeader := http.Header{
				"Authorization":     {"Bearer impersonator-token"},
				"Impersonate-User":  {"bob"},
				"Impersonate-Group": {"ci"},
			}
			for k, v := range wantHeader {
				if g := m.Header.Values(k); strings.Join(g, "|") != strings.Join(v, "|") {
					t.Errorf("member got %s %q, want %q", k, g, v)
				}
			}
			for k := range m.Header {
				if strings.HasPrefix(k, "X-Remote-") || strings.HasPrefix(k, "Impersonate-") && wantHeader[k] == nil {
					t.Errorf("client identity header %s reached the member: %q", k, m.Header[k])
				}
			}
		})
	}
}

func TestDirectRefusesWhatKarmadaRefuses(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "cluster.karmada.io", Resource: "clusters"}, proxytest.Cluster,
		io.EOF) // the message is pkg/auth's; its shape is TestForbiddenMessage's
	h := newDirectHarness(t, AuthPassthrough, &proxytest.Authorizer{Caller: identity.Caller{Name: "bob"}, Deny: forbidden})
	rec := h.serve(t, http.MethodPost, "/api/v1/namespaces/ci/pods/p/exec?command=id", callerHeaders)
	if rec.Code != http.StatusForbidden {
		t.Errorf("code %d, want 403: %s", rec.Code, rec.Body)
	}
	if n := len(h.member.Requests()); n != 0 {
		t.Errorf("a caller refused clusters/proxy reached the member (%d requests)", n)
	}
}

func TestDirectActsAsTheGatewayInAuthorizeMode(t *testing.T) {
	h := newDirectHarness(t, AuthAuthorize, &proxytest.Authorizer{Caller: identity.Caller{Name: "bob", Groups: []string{"ci"}}})
	for range 3 {
		if rec := h.serve(t, http.MethodPost, "/api/v1/namespaces/ci/pods/p/exec?command=id", callerHeaders); rec.Code != http.StatusOK {
			t.Fatalf("code %d: %s", rec.Code, rec.Body)
		}
	}
	// Authorized as today: the pod subresource, never clusters/proxy.
	for _, rr := range h.authz.Authorized() {
		if rr.Resource != "pods" || rr.Subresource != "exec" {
			t.Errorf("authorized %+v in authorize mode", rr)
		}
	}
	// The cluster proxy would impersonate whoever calls it: the gateway.
	for _, m := range h.member.Requests() {
		if u, g := m.Header.Get("Impersonate-User"), m.Header.Values("Impersonate-Group"); u != gatewaySA ||
			strings.Join(g, "|") != "system:serviceaccounts|system:serviceaccounts:karmada-system" {
			t.Errorf("member acted as %q %q, want the gateway's identity without system:authenticated", u, g)
		}
	}
	if n := h.selfReviews.Load(); n != 3 {
		t.Errorf("the gateway's identity was asked for %d times for three requests, want 3", n)
	}
	if got := testutil.ToFloat64(h.met.MemberAccess.WithLabelValues(metrics.MemberAccessDirect)); got != 1 {
		t.Errorf("member_access{mode=direct} = %v", got)
	}
}

func TestDirectStatusesNameTheMember(t *testing.T) {
	noImp := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(noImp.Close)
	down := httptest.NewTLSServer(http.NotFoundHandler())
	down.Close()
	for _, tt := range []struct {
		name    string
		member  memberaccesstest.Member
		cluster string
		code    int
		msg     string
	}{
		{"no impersonatorSecretRef", memberaccesstest.Member{Name: "m2", Server: noImp, NoImpersonator: true}, "m2", 503,
			"the impersonatorSecretRef of cluster m2 is nil"},
		{"member down", memberaccesstest.Member{Name: "m3", Server: down, Token: "t"}, "m3", 503,
			`error trying to reach the kube-apiserver of member cluster "m3"`},
		{"no such Cluster", memberaccesstest.Member{Name: "m4", Server: noImp, Token: "t"}, "ghost", 404,
			`clusters.cluster.karmada.io "ghost" not found`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newDirectHarness(t, AuthPassthrough, &proxytest.Authorizer{Caller: identity.Caller{Name: "bob"}}, tt.member)
			h.p.resolver = &proxytest.Resolver{Cluster: tt.cluster}
			rec := h.serve(t, http.MethodGet, "/api/v1/namespaces/ci/pods/p/log", callerHeaders)
			st := proxytest.DecodeStatus(t, rec.Header().Get("Content-Type"), rec.Body.Bytes())
			if rec.Code != tt.code || !strings.Contains(st.Message, tt.msg) {
				t.Errorf("got %d %q, want %d containing %q", rec.Code, st.Message, tt.code, tt.msg)
			}
		})
	}
}

// hintingResolver also guesses the pod's cluster from its label.
type hintingResolver struct {
	proxytest.Resolver
	hint string
}

func (r *hintingResolver) ClusterHint(string, string) string { return r.hint }

// TestDirectDialsAheadOncePerUpgrade: an upgrade's connection to the member
// is dialed while the caller is checked, from the pod's label when it has
// one, and only once.
func TestDirectDialsAheadOncePerUpgrade(t *testing.T) {
	for _, hint := range []string{"", proxytest.Cluster} {
		t.Run("hint "+hint, func(t *testing.T) {
			h := newDirectHarness(t, AuthPassthrough, &proxytest.Authorizer{Caller: identity.Caller{Name: "bob"}})
			h.p.resolver = &hintingResolver{Resolver: proxytest.Resolver{Cluster: proxytest.Cluster}, hint: hint}
			header := callerHeaders.Clone()
			header.Set("Connection", "Upgrade")
			header.Set("Upgrade", "SPDY/3.1")
			rec := h.serve(t, http.MethodPost, "/api/v1/namespaces/ci/pods/p/exec?command=id", header)
			if rec.Code != http.StatusOK { // the recording member answers 200 to anything
				t.Fatalf("code %d: %s", rec.Code, rec.Body)
			}
			if got := testutil.ToFloat64(h.met.MemberDialsTotal.WithLabelValues(proxytest.Cluster, "success")); got != 1 {
				t.Errorf("member dialed %v times for one upgrade, want 1", got)
			}
		})
	}
}

// TestDirectLogsSayWhatHappened: in direct mode a rewritten request is
// logged as going to the member, not to the cluster proxy; a caller whose
// review karmada-apiserver could not answer (it was down: the client got a
// 503) is logged as not checked, not as refused; a refused one as refused.
func TestDirectLogsSayWhatHappened(t *testing.T) {
	caller := identity.Caller{Name: "bob", Groups: []string{"ci"}}
	for _, tt := range []struct {
		name      string
		authz     *proxytest.Authorizer
		code      int
		want, not string
	}{
		{"served", &proxytest.Authorizer{Caller: caller}, http.StatusOK,
			`Rewriting to the member cluster namespace="ci" pod="p" subresource="log" cluster="member1" upstream="the kube-apiserver of member cluster \"member1\""`, "cluster proxy"},
		{"review unanswered", &proxytest.Authorizer{Caller: caller, Deny: apierrors.NewServiceUnavailable("karmada-apiserver did not answer")}, http.StatusServiceUnavailable,
			"Caller's use of the cluster's proxy could not be checked", "may not use"},
		{"refused", &proxytest.Authorizer{Caller: caller, Deny: apierrors.NewForbidden(schema.GroupResource{Group: "cluster.karmada.io", Resource: "clusters/proxy"}, "member1", errors.New("no"))}, http.StatusForbidden,
			"Caller may not use the cluster's proxy", "could not be checked"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newDirectHarness(t, AuthPassthrough, tt.authz)
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4), ktesting.BufferLogs(true)))
			rec := httptest.NewRecorder()
			req := proxytest.RawRequest(t, http.MethodGet, "/api/v1/namespaces/ci/pods/p/log", callerHeaders, "")
			h.p.ServeHTTP(rec, req.WithContext(klog.NewContext(req.Context(), logger)))
			if rec.Code != tt.code {
				t.Fatalf("code %d: %s", rec.Code, rec.Body)
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if !strings.Contains(logs, tt.want) || strings.Contains(logs, tt.not) {
				t.Errorf("logs\n%s\nwant %q and no %q", logs, tt.want, tt.not)
			}
		})
	}
}

// TestDirectJudgesTheCallerBeforeTheMember: a passthrough caller
// karmada-apiserver refuses clusters/proxy gets its 403, as through the
// cluster proxy, even where the member cannot be reached directly: the 503
// it used to get named the Cluster's Secret and the gateway's identity.
func TestDirectJudgesTheCallerBeforeTheMember(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	refused := apierrors.NewForbidden(schema.GroupResource{Group: "cluster.karmada.io", Resource: "clusters/proxy"}, proxytest.Cluster, errors.New("no"))
	h := newDirectHarness(t, AuthPassthrough, &proxytest.Authorizer{Caller: identity.Caller{Name: "bob"}, Deny: refused},
		memberaccesstest.Member{Name: proxytest.Cluster, Server: srv, NoImpersonator: true})
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		header := callerHeaders.Clone()
		if method == http.MethodPost {
			header.Set("Connection", "Upgrade")
			header.Set("Upgrade", "SPDY/3.1")
			header.Set("X-Stream-Protocol-Version", "v4.channel.k8s.io")
		}
		rec := h.serve(t, method, "/api/v1/namespaces/ci/pods/p/exec?command=id&stdout=true", header)
		if rec.Code != http.StatusForbidden || strings.Contains(rec.Body.String(), "impersonator") {
			t.Errorf("%s: %d %s; want karmada-apiserver's 403, naming nothing of the member's access", method, rec.Code, rec.Body)
		}
	}
}

// TestDirectAuthorizeModeAsksForTheGatewaysClusterProxy: in authorize mode
// a member reached directly acts as the gateway only once its own identity
// is allowed the Cluster's proxy with the request's verb, as
// karmada-apiserver checks the gateway's call through the cluster proxy
// (memberaccess.Self.ActAs, which cmd/gateway wires): a refusal reaches no
// member.
func TestDirectAuthorizeModeAsksForTheGatewaysClusterProxy(t *testing.T) {
	h := newDirectHarness(t, AuthAuthorize, &proxytest.Authorizer{Caller: identity.Caller{Name: "bob"}})
	var asked []identity.ResourceRequest
	h.p.gatewayIdentity = func(_ context.Context, rr identity.ResourceRequest) (identity.Caller, error) {
		asked = append(asked, rr)
		return identity.Caller{}, apierrors.NewForbidden(schema.GroupResource{Group: rr.Group, Resource: "clusters/proxy"}, rr.Name, errors.New("narrowed"))
	}
	rec := h.serve(t, http.MethodPost, "/api/v1/namespaces/ci/pods/p/exec?command=id", callerHeaders)
	if rec.Code != http.StatusForbidden || len(h.member.Requests()) != 0 {
		t.Errorf("%d %s, %d member requests; want the gateway's refusal, nothing sent", rec.Code, rec.Body, len(h.member.Requests()))
	}
	if want := identity.ClusterProxyRequest(http.MethodPost, proxytest.Cluster); len(asked) != 1 || asked[0] != want {
		t.Errorf("asked for %+v, want %+v", asked, want)
	}
}
