package proxy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// judgingKarmada stands in for karmada-apiserver judging the caller's own
// credentials: "Bearer good" may do anything, "Bearer denied" is
// authenticated but may do nothing (403), anything else is not
// authenticated (401), with kube-apiserver's own Status bodies. It records
// the path and headers of every request.
type judgingKarmada struct {
	mu   sync.Mutex
	seen []*http.Request
}

func (k *judgingKarmada) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.seen = append(k.seen, r.Clone(r.Context()))
	k.mu.Unlock()
	switch r.Header.Get("Authorization") {
	case "Bearer good":
		proxytest.WriteJSON(w, http.StatusOK, &metav1.PartialObjectMetadata{})
	case "Bearer denied":
		st := apierrors.NewForbidden(podsResource, "p", errors.New(`User "bob" cannot get resource "pods" in API group "" in the namespace "ci"`)).ErrStatus
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		proxytest.WriteJSON(w, http.StatusForbidden, &st)
	default:
		st := apierrors.NewUnauthorized("Unauthorized").ErrStatus
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		proxytest.WriteJSON(w, http.StatusUnauthorized, &st)
	}
}

func (k *judgingKarmada) requests() []*http.Request {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*http.Request(nil), k.seen...)
}

// refusedCallers are the callers judgingKarmada refuses, and its answer.
var refusedCallers = []struct {
	name     string
	header   http.Header
	wantCode int
}{
	{"anonymous", http.Header{}, http.StatusUnauthorized},
	{"bad token", http.Header{"Authorization": {"Bearer nope"}}, http.StatusUnauthorized},
	{"bad WebSocket subprotocol token", http.Header{
		"Connection": {"Upgrade"}, "Upgrade": {"websocket"},
		"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte("nope")) + ", v5.channel.k8s.io"},
	}, http.StatusUnauthorized},
	{"authenticated, not authorized", http.Header{"Authorization": {"Bearer denied"}}, http.StatusForbidden},
}

// TestPassthroughRefusalDisclosesNothing: in passthrough mode a caller
// karmada-apiserver refuses learns nothing about the pod or Service of a
// rewritten route, nor about member clusters: whatever the Resolver would
// say (placed, not found, not placed, cluster not ready), the answer is
// karmada-apiserver's own 401 or 403, byte for byte, the Resolver is never
// asked, and nothing reaches a cluster proxy.
func TestPassthroughRefusalDisclosesNothing(t *testing.T) {
	resolvers := []struct {
		name    string
		cluster string
		err     error
	}{
		{"placed", proxytest.Cluster, nil},
		{"not found", "", apierrors.NewNotFound(podsResource, "p")},
		{"not placed", "", apierrors.NewConflict(podsResource, "p", errors.New("not scheduled to any cluster yet"))},
		{"cluster not ready", "", apierrors.NewServiceUnavailable(`cluster "member1" is not ready: ClusterNotReachable`)},
	}
	routes := []struct {
		name, method, target string
	}{
		{"exec", "POST", "/api/v1/namespaces/ci/pods/p/exec?command=sh"},
		{"attach", "POST", "/api/v1/namespaces/ci/pods/p/attach"},
		{"log", "GET", "/api/v1/namespaces/ci/pods/p/log?follow=true"},
		{"portforward", "GET", "/api/v1/namespaces/ci/pods/p/portforward?ports=80"},
		{"pods/proxy", "GET", "/api/v1/namespaces/ci/pods/http:p:80/proxy/x"},
		{"services/proxy", "GET", "/api/v1/namespaces/ci/services/web/proxy/x"},
	}
	for _, route := range routes {
		for _, caller := range refusedCallers {
			t.Run(route.name+" "+caller.name, func(t *testing.T) {
				var first []byte
				for _, res := range resolvers {
					k := &judgingKarmada{}
					srv := httptest.NewServer(k)
					pods := &proxytest.Resolver{Cluster: res.cluster, Err: res.err}
					services := &proxytest.Resolver{Cluster: res.cluster, Err: res.err}
					p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: pods, ServiceResolver: services})
					rec := httptest.NewRecorder()
					p.ServeHTTP(rec, proxytest.RawRequest(t, route.method, route.target, caller.header, ""))
					srv.Close()

					if rec.Code != caller.wantCode {
						t.Fatalf("%s: code %d %s, want %d", res.name, rec.Code, rec.Body, caller.wantCode)
					}
					if first == nil {
						first = rec.Body.Bytes()
						if st := proxytest.DecodeStatus(t, rec.Header().Get("Content-Type"), first); int(st.Code) != caller.wantCode {
							t.Fatalf("Status %d, want %d", st.Code, caller.wantCode)
						}
					} else if !bytes.Equal(rec.Body.Bytes(), first) {
						t.Errorf("%s: answer differs with placement:\n%s\nvs\n%s", res.name, rec.Body, first)
					}
					if c := append(pods.Called(), services.Called()...); len(c) != 0 {
						t.Errorf("%s: a refused caller's request was resolved: %q", res.name, c)
					}
					for _, r := range k.requests() {
						if strings.HasPrefix(r.URL.Path, "/apis/cluster.karmada.io/") {
							t.Errorf("%s: a refused caller's request reached %s", res.name, r.URL.Path)
						}
					}
				}
			})
		}
	}
}

// TestPassthroughAdmissionCheck: before it resolves a rewritten route, the
// gateway asks karmada-apiserver for the object with the caller's own
// credentials and identity headers (a WebSocket subprotocol token as the
// Authorization it stands for), from the watch cache, and goes on only when
// karmada-apiserver serves it.
func TestPassthroughAdmissionCheck(t *testing.T) {
	good := base64.RawURLEncoding.EncodeToString([]byte("good"))
	tests := []struct {
		name, method, target string
		header               http.Header
		wantCheck            string // path and query of the check
		// wantProtocols is the Sec-WebSocket-Protocol the rewritten request carries.
		wantProtocols []string
	}{
		{name: "exec", method: "POST", target: "/api/v1/namespaces/ci/pods/p/exec?command=sh",
			header:    http.Header{"Authorization": {"Bearer good"}, "Impersonate-User": {"carol"}, "Impersonate-Group": {"dev"}},
			wantCheck: "/api/v1/namespaces/ci/pods/p?resourceVersion=0"},
		{name: "pods/proxy names the pod", method: "PUT", target: "/api/v1/namespaces/ci/pods/https:p:8443/proxy/a",
			header:    http.Header{"Authorization": {"Bearer good"}},
			wantCheck: "/api/v1/namespaces/ci/pods/p?resourceVersion=0"},
		{name: "services/proxy names the Service", method: "GET", target: "/api/v1/namespaces/ci/services/http:web:80/proxy/",
			header:    http.Header{"Authorization": {"Bearer good"}},
			wantCheck: "/api/v1/namespaces/ci/services/web?resourceVersion=0"},
		{name: "WebSocket subprotocol token", method: "GET", target: "/api/v1/namespaces/ci/pods/p/exec?command=sh",
			header: http.Header{
				"Connection": {"Upgrade"}, "Upgrade": {"websocket"},
				"Sec-Websocket-Protocol": {"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io." + good},
			},
			wantCheck:     "/api/v1/namespaces/ci/pods/p?resourceVersion=0",
			wantProtocols: []string{"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io." + good}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &judgingKarmada{}
			srv := httptest.NewServer(k)
			defer srv.Close()
			pods := &proxytest.Resolver{Cluster: proxytest.Cluster}
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: pods, ServiceResolver: &proxytest.Resolver{Cluster: proxytest.Cluster}})
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, tt.method, tt.target, tt.header, ""))
			reqs := k.requests()
			if len(reqs) != 2 {
				t.Fatalf("code %d %s: %d upstream requests, want the check and the rewritten request", rec.Code, rec.Body, len(reqs))
			}
			check, sent := reqs[0], reqs[1]
			if check.Method != http.MethodGet || check.URL.RequestURI() != tt.wantCheck {
				t.Errorf("check %s %s, want GET %s", check.Method, check.URL.RequestURI(), tt.wantCheck)
			}
			if check.Header.Get("Authorization") != "Bearer good" {
				t.Errorf("check Authorization %q, want the caller's", check.Header.Get("Authorization"))
			}
			for _, h := range []string{"Impersonate-User", "Impersonate-Group"} {
				if got, want := check.Header.Values(h), tt.header.Values(h); strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("check %s %q, want the caller's %q", h, got, want)
				}
			}
			if v := check.Header.Values("Sec-Websocket-Protocol"); len(v) != 0 {
				t.Errorf("check carried Sec-WebSocket-Protocol %q", v)
			}
			if !strings.HasPrefix(sent.URL.Path, "/apis/cluster.karmada.io/") || sent.Method != tt.method {
				t.Errorf("rewritten request %s %s", sent.Method, sent.URL.Path)
			}
			if got := sent.Header.Values("Sec-Websocket-Protocol"); strings.Join(got, "|") != strings.Join(tt.wantProtocols, "|") {
				t.Errorf("rewritten request Sec-WebSocket-Protocol %q, want %q unchanged", got, tt.wantProtocols)
			}
		})
	}
}

// TestPassthroughEventsRefusalDisclosesNothing: the member-events merge lets
// karmada-apiserver answer first; a caller it refuses gets its 401 or 403
// whether or not the pod is placed, lists and watches alike.
func TestPassthroughEventsRefusalDisclosesNothing(t *testing.T) {
	targets := []string{
		proxytest.EventsTarget("involvedObject.name=p", ""),
		proxytest.EventsTarget("involvedObject.name=p,type=Warning", "&limit=200"),
		proxytest.EventsTarget("involvedObject.name=p", "&watch=true"),
		proxytest.EventsTarget("involvedObject.name=p", "&watch=true&resourceVersion=42"),
	}
	for _, target := range targets {
		for _, caller := range refusedCallers {
			t.Run(target+" "+caller.name, func(t *testing.T) {
				var first []byte
				for _, res := range []*proxytest.Resolver{
					{Cluster: proxytest.Cluster},
					{Err: apierrors.NewConflict(podsResource, "p", errors.New("not scheduled to any cluster yet"))},
				} {
					srv := httptest.NewServer(&judgingKarmada{})
					p := newTestProxy(t, withMemberEvents(Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: res}))
					rec := httptest.NewRecorder()
					p.ServeHTTP(rec, proxytest.RawRequest(t, "GET", target, caller.header, ""))
					srv.Close()
					if rec.Code != caller.wantCode {
						t.Fatalf("resolver %+v: code %d %s, want %d", res, rec.Code, rec.Body, caller.wantCode)
					}
					if first == nil {
						first = rec.Body.Bytes()
					} else if !bytes.Equal(rec.Body.Bytes(), first) {
						t.Errorf("answer differs with placement:\n%s\nvs\n%s", rec.Body, first)
					}
				}
			})
		}
	}
}
