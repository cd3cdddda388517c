package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberaccess/memberaccesstest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// logMember serves a pods/log body that ends cleanly after one line, as
// kube-apiserver ends one whose kubelet died, and the member's pod through
// the cluster proxy as podStatus answers.
type logMember struct {
	// auth is the Authorization the pod read must carry: the identity the
	// log request went with.
	auth, impersonate string
	// podPath is where the pod is read ("": through the cluster proxy).
	podPath   string
	podCode   int
	container corev1.ContainerState
	podReads  atomic.Int32
}

func (m *logMember) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	podPath := m.podPath
	if podPath == "" {
		podPath = karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/pods/job-42")
	}
	switch {
	case r.URL.Path == podPath:
		m.podReads.Add(1)
		if r.Header.Get("Authorization") != m.auth || r.Header.Get("Impersonate-User") != m.impersonate {
			proxytest.WriteJSON(w, http.StatusUnauthorized, metav1.Status{Status: metav1.StatusFailure, Code: 401})
			return
		}
		if m.podCode != http.StatusOK {
			proxytest.WriteJSON(w, m.podCode, metav1.Status{Status: metav1.StatusFailure, Code: int32(m.podCode)})
			return
		}
		p := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "build"}}}}
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "build", State: m.container}}
		proxytest.WriteJSON(w, http.StatusOK, p)
	case proxytest.IsAdmissionCheck(r):
		proxytest.Admitting(nil).ServeHTTP(w, r)
	default:
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "line 1\n")
		w.(http.Flusher).Flush()
	}
}

func TestLogFollowCutIsReported(t *testing.T) {
	runningLong := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Add(-time.Hour))}}
	terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	cases := []struct {
		name      string
		query     string
		podCode   int
		container corev1.ContainerState
		wantCut   bool
		wantReads bool
		result    string // the cut result counted, if any
		authorize bool
	}{
		{name: "authorize mode: container runs: cut", query: "follow=true", podCode: 200, container: runningLong, wantCut: true, wantReads: true, result: metrics.CutReported, authorize: true},
		{name: "authorize mode: container ended", query: "follow=true", podCode: 200, container: terminated, wantReads: true, authorize: true},
		{name: "container runs: cut", query: "follow=true", podCode: 200, container: runningLong, wantCut: true, wantReads: true, result: metrics.CutReported},
		{name: "container ended", query: "follow=1&container=build", podCode: 200, container: terminated, wantReads: true},
		{name: "pod gone", query: "follow=true", podCode: 404, wantReads: true},
		{name: "member not answering: cut", query: "follow=true", podCode: 503, wantCut: true, wantReads: true, result: metrics.CutReported},
		{name: "pod not readable", query: "follow=true", podCode: 403, wantReads: true, result: metrics.CutUnreported},
		{name: "no follow", query: "tailLines=1", podCode: 200, container: runningLong},
		{name: "follow=false", query: "follow=false", podCode: 200, container: runningLong},
		{name: "previous", query: "follow=true&previous=true", podCode: 200, container: runningLong},
		{name: "limitBytes", query: "follow=true&limitBytes=7", podCode: 200, container: runningLong},
	}
	for _, tc := range cases {
		for _, h2 := range []bool{false, true} {
			name := tc.name + "/http1"
			if h2 {
				name = tc.name + "/http2"
			}
			t.Run(name, func(t *testing.T) {
				member := &logMember{auth: "Bearer caller-token", impersonate: "someone", podCode: tc.podCode, container: tc.container}
				upstream := httptest.NewTLSServer(member)
				t.Cleanup(upstream.Close)
				m := metrics.New(prometheus.NewRegistry())
				opts := Options{Upstream: tlsUpstreamConfig(upstream), Metrics: m, LogEndWindow: 300 * time.Millisecond}
				if tc.authorize {
					member.auth, member.impersonate = "Bearer gateway-token", ""
					opts.Upstream.BearerToken = "gateway-token"
					opts.AuthMode, opts.Authorizer = AuthAuthorize, &proxytest.Authorizer{}
				}
				p := newTestProxy(t, opts)
				gw := httptest.NewUnstartedServer(p)
				gw.EnableHTTP2 = true
				gw.StartTLS()
				t.Cleanup(gw.Close)
				client := gw.Client()
				if !h2 {
					client.Transport.(*http.Transport).ForceAttemptHTTP2 = false
					client.Transport.(*http.Transport).TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+"/api/v1/namespaces/ci/pods/job-42/log?"+tc.query, nil)
				req.Header.Set("Authorization", "Bearer caller-token")
				req.Header.Set("Impersonate-User", "someone")
				res, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				if (res.ProtoMajor == 2) != h2 {
					t.Fatalf("response over HTTP/%d", res.ProtoMajor)
				}
				line, err := bufio.NewReader(res.Body).ReadString('\n')
				if line != "line 1\n" {
					t.Fatalf("first line %q (%v)", line, err)
				}
				_, err = io.ReadAll(res.Body)
				if tc.wantCut && err == nil {
					t.Error("the body ended cleanly, want an aborted response")
				}
				if !tc.wantCut && err != nil {
					t.Errorf("the body ended with %v, want a clean end", err)
				}
				if reads := member.podReads.Load() > 0; reads != tc.wantReads {
					t.Errorf("pod read from the member: %v, want %v", reads, tc.wantReads)
				}
				for _, result := range []string{metrics.CutReported, metrics.CutUnreported} {
					want := 0.0
					if result == tc.result {
						want = 1
					}
					if got := testutil.ToFloat64(m.StreamCutsTotal.WithLabelValues(metrics.RouteLog, result)); got != want {
						t.Errorf("stream_cuts_total{route=log,result=%s} = %v, want %v", result, got, want)
					}
				}
			})
		}
	}
}

// TestLogFollowCutIsReportedDirect: in direct mode the end of a follow is
// judged from the member's pod read directly, as the follow went: the
// impersonator's token acting as the caller.
func TestLogFollowCutIsReportedDirect(t *testing.T) {
	runningLong := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Add(-time.Hour))}}
	terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	for _, tc := range []struct {
		name      string
		container corev1.ContainerState
		wantCut   bool
	}{
		{"container runs: cut", runningLong, true},
		{"container ended", terminated, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			member := &logMember{auth: "Bearer impersonator-token", impersonate: "someone", podPath: "/api/v1/namespaces/ci/pods/job-42",
				podCode: http.StatusOK, container: tc.container}
			srv := httptest.NewTLSServer(member)
			t.Cleanup(srv.Close)
			karmadaAPI := httptest.NewTLSServer(proxytest.Admitting(http.NotFoundHandler()))
			t.Cleanup(karmadaAPI.Close)
			m := metrics.New(prometheus.NewRegistry())
			p := newTestProxy(t, Options{
				Upstream: tlsUpstreamConfig(karmadaAPI), Metrics: m, LogEndWindow: 300 * time.Millisecond,
				Authorizer: &proxytest.Authorizer{Caller: identity.Caller{Name: "someone"}},
				Members:    memberaccesstest.New(t, m, memberaccesstest.Member{Name: proxytest.Cluster, Server: srv, Token: "impersonator-token"}),
			})
			gw := httptest.NewTLSServer(p)
			t.Cleanup(gw.Close)
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, gw.URL+"/api/v1/namespaces/ci/pods/job-42/log?follow=true", nil)
			req.Header.Set("Authorization", "Bearer caller-token")
			res, err := gw.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			_, err = io.ReadAll(res.Body)
			if tc.wantCut != (err != nil) {
				t.Errorf("the body ended with %v, want a cut: %v", err, tc.wantCut)
			}
			if member.podReads.Load() == 0 {
				t.Error("the member's pod was not read to judge the end")
			}
		})
	}
}
