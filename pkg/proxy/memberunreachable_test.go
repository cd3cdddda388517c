package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// TestMemberUnreachableReported covers upstream.ReportMemberUnreachable as
// the proxy applies it: Karmada's cluster proxy answers its own failure to reach a member (a Pull member's
// spec.proxyURL proxy down, as TestPullMember kills it) with a bare Go
// error naming no cluster; the gateway answers 503 naming the cluster proxy
// and the member, the original message kept. The member's own errors, and
// karmada-apiserver's on passthrough routes, are relayed byte for byte.
// The gateway is built by New as cmd/gateway builds it, in front of a fake
// karmada-apiserver answering what Karmada's cluster proxy and a member's
// kube-apiserver answer. Without the modifyResponse hook the "wrapped"
// rows fail (the raw 500 comes through).
func TestMemberUnreachableReported(t *testing.T) {
	statusJSON := func(code int32, reason metav1.StatusReason, msg string) []byte {
		b, _ := json.Marshal(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg})
		return b
	}
	statusProtobuf := func(code int32, msg string) []byte {
		info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), "application/vnd.kubernetes.protobuf")
		if !ok {
			t.Fatal("no protobuf serializer")
		}
		var buf bytes.Buffer
		st := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: code, Message: msg}
		if err := info.Serializer.Encode(st, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	const (
		jsonType     = "application/json"
		protobufType = "application/vnd.kubernetes.protobuf"
		exec         = "/api/v1/namespaces/ci/pods/x/exec?command=date&stdout=true"
		logs         = "/api/v1/namespaces/ci/pods/x/log?follow=true"
		podProxy     = "/api/v1/namespaces/ci/pods/x/proxy/healthz"
		proxyDown    = "dial tcp 198.18.2.2:37101: connect: connection refused"
	)
	tests := []struct {
		name        string
		target      string
		upgrade     bool
		code        int
		contentType string
		body        []byte
		// wrapped: the gateway answers 503 naming the cluster proxy, with
		// the original message; otherwise the answer comes as it was.
		wrapped     bool
		wantMessage string
	}{
		{"SPDY exec, proxy down", exec, true, 500, jsonType, statusJSON(500, "", proxyDown), true, proxyDown},
		{"exec, proxy down", exec, false, 500, jsonType, statusJSON(500, "", proxyDown), true, proxyDown},
		{"logs -f, proxy down (ReverseProxy transport)", logs, false, 500, jsonType,
			statusJSON(500, "", "proxyconnect tcp: "+proxyDown), true, "proxyconnect tcp: " + proxyDown},
		{"exec, proxy refuses the CONNECT", exec, true, 500, jsonType,
			statusJSON(500, "", "CONNECT request to http://198.18.2.2:37101 returned response: 503 Service Unavailable"), true, "CONNECT request to http://198.18.2.2:37101"},
		{"exec, socks5 proxy down", exec, true, 500, jsonType,
			statusJSON(500, "", "socks connect tcp 198.18.2.2:1080->198.18.2.3:6443: "+proxyDown), true, "socks connect tcp"},
		{"exec, protobuf Status", exec, false, 500, protobufType, statusProtobuf(500, proxyDown), true, proxyDown},
		// karmada-apiserver's aggregation layer, in front of the cluster
		// proxy (karmada-aggregated-apiserver down): it says nothing of
		// the member, and the Status does not say the member was
		// unreachable.
		{"exec, aggregation layer text", exec, false, 503, "text/plain; charset=utf-8", []byte("service unavailable\n"), true,
			`karmada-apiserver answered in front of the cluster proxy for cluster "member1", not a Status of the cluster proxy or the member: HTTP 503: service unavailable`},
		{"exec, aggregated apiserver down", exec, true, 503, "text/plain; charset=utf-8", []byte("error dialing backend: dial tcp 127.0.0.1:20053: connect: connection refused\n"), true,
			`karmada-apiserver answered in front of the cluster proxy for cluster "member1", not a Status of the cluster proxy or the member: HTTP 503: error dialing backend`},
		{"pods/proxy, proxy down", podProxy, false, 500, jsonType, statusJSON(500, "", proxyDown), true, proxyDown},

		{"member: pod not found", exec, true, 404, jsonType, statusJSON(404, metav1.StatusReasonNotFound, `pods "x" not found`), false, ""},
		{"member: forbidden", exec, false, 403, jsonType, statusJSON(403, metav1.StatusReasonForbidden, `pods "x" is forbidden`), false, ""},
		{"member: kubelet unreachable", exec, true, 500, jsonType,
			statusJSON(500, "", "error dialing backend: dial tcp 198.18.0.5:10250: connect: connection refused"), false, ""},
		{"member: log read failed", logs, false, 500, jsonType,
			statusJSON(500, "", `Get "https://198.18.0.5:10250/containerLogs/ci/x/main?follow=true": `+proxyDown), false, ""},
		{"member: internal error with a reason", exec, false, 500, jsonType, statusJSON(500, metav1.StatusReasonInternalError, proxyDown), false, ""},
		{"member: unavailable", exec, false, 503, jsonType, statusJSON(503, metav1.StatusReasonServiceUnavailable, "etcd unavailable"), false, ""},
		{"member: 500 text", exec, true, 500, "text/plain", []byte("container not found"), false, ""},
		{"pod's own 503 on pods/proxy", podProxy, false, 503, "text/plain", []byte("warming up"), false, ""},
		{"passthrough: karmada-apiserver's own", "/api/v1/namespaces/ci/pods", false, 500, jsonType, statusJSON(500, "", proxyDown), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			upstream := httptest.NewServer(proxytest.Admitting(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				viaClusterProxy := strings.HasPrefix(r.URL.Path, "/apis/cluster.karmada.io/v1alpha1/clusters/member1/proxy/")
				if viaClusterProxy == (tt.target == "/api/v1/namespaces/ci/pods") {
					t.Errorf("upstream got %s", r.URL.Path)
				}
				w.Header().Set("Content-Type", tt.contentType)
				w.Header().Set("Audit-Id", "a1")
				w.WriteHeader(tt.code)
				_, _ = w.Write(tt.body)
			})))
			defer upstream.Close()
			gw := httptest.NewServer(newTestProxy(t, Options{Upstream: &rest.Config{Host: upstream.URL}}))
			defer gw.Close()

			req, _ := http.NewRequest(http.MethodGet, gw.URL+tt.target, nil)
			if tt.upgrade {
				req.Method = http.MethodPost
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "SPDY/3.1")
				req.Header.Set("X-Stream-Protocol-Version", "v4.channel.k8s.io")
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if !tt.wrapped {
				if res.StatusCode != tt.code || !bytes.Equal(body, tt.body) || res.Header.Get("Content-Type") != tt.contentType {
					t.Errorf("HTTP %d %q %q; want the upstream's %d %q %q unchanged", res.StatusCode, res.Header.Get("Content-Type"), body, tt.code, tt.contentType, tt.body)
				}
				return
			}
			if res.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("HTTP %d %s; want 503", res.StatusCode, body)
			}
			st := proxytest.DecodeStatus(t, res.Header.Get("Content-Type"), body)
			for _, want := range []string{`the cluster proxy for cluster "member1"`, `member cluster "member1"`, tt.wantMessage} {
				if st.Code != 503 || st.Reason != metav1.StatusReasonServiceUnavailable || !strings.Contains(st.Message, want) {
					t.Errorf("Status %d %q %q; want 503 ServiceUnavailable with %q", st.Code, st.Reason, st.Message, want)
				}
			}
			if strings.Contains(tt.wantMessage, "in front of") && strings.Contains(st.Message, "could not reach member") {
				t.Errorf("Status %q blames the member for karmada-apiserver's answer", st.Message)
			}
			if tt.upgrade && !res.Close {
				t.Errorf("refused upgrade answered without Connection: close")
			}
			if res.Header.Get("Audit-Id") != "a1" {
				t.Errorf("Audit-Id %q, want the upstream's kept", res.Header.Get("Audit-Id"))
			}
		})
	}
}

// TestMemberUnreachableLongBody: an error body too long for a Status is
// relayed whole, never cut at the bound the gateway reads to.
func TestMemberUnreachableLongBody(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 64<<10+100) // past what upstream.ReportMemberUnreachable reads
	upstream := httptest.NewServer(proxytest.Admitting(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(long)
	})))
	defer upstream.Close()
	gw := httptest.NewServer(newTestProxy(t, Options{Upstream: &rest.Config{Host: upstream.URL}}))
	defer gw.Close()
	res, err := http.Get(gw.URL + "/api/v1/namespaces/ci/pods/x/log")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !bytes.Equal(body, long) {
		t.Errorf("HTTP %d, %d bytes; want the upstream's 503 and its %d bytes", res.StatusCode, len(body), len(long))
	}
}
