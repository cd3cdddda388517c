package proxy

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

func TestErrorsAreStatus(t *testing.T) {
	up := &proxytest.RecordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()

	downAddr := proxytest.RefusedAddr(t)

	tests := []struct {
		name        string
		upstream    string
		resolver    *proxytest.Resolver
		target      string
		wantCode    int32
		wantReason  metav1.StatusReason
		wantMessage string
	}{
		{"pod not found", upstream.URL,
			&proxytest.Resolver{Err: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x")},
			"/api/v1/namespaces/ci/pods/x/exec", 404, metav1.StatusReasonNotFound, `pods "x" not found`},
		{"cluster not ready", upstream.URL,
			&proxytest.Resolver{Err: apierrors.NewServiceUnavailable(`cluster "member1" is not ready`)},
			"/api/v1/namespaces/ci/pods/x/log", 503, metav1.StatusReasonServiceUnavailable, `cluster "member1" is not ready`},
		{"not placed conflict", upstream.URL,
			&proxytest.Resolver{Err: apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "x", errors.New("scheduled to member1 and member2"))},
			"/api/v1/namespaces/ci/pods/x/attach", 409, metav1.StatusReasonConflict, "member1 and member2"},
		{"plain resolver error is internal", upstream.URL,
			&proxytest.Resolver{Err: errors.New("cache exploded")},
			"/api/v1/namespaces/ci/pods/x/exec", 500, metav1.StatusReasonInternalError, "cache exploded"},
		{"invalid cluster name from resolver", upstream.URL,
			&proxytest.Resolver{Cluster: "../../secrets"},
			"/api/v1/namespaces/ci/pods/x/exec", 500, metav1.StatusReasonInternalError, "invalid member cluster name"},
		{"karmada-apiserver down", "http://" + downAddr,
			&proxytest.Resolver{Cluster: proxytest.Cluster},
			"/api/v1/namespaces/ci/pods", 503, metav1.StatusReasonServiceUnavailable, "error trying to reach karmada-apiserver"},
		// Passthrough mode: the admission check cannot reach
		// karmada-apiserver, and the member is not named to a caller it has
		// not judged.
		{"karmada-apiserver down on a rewritten route", "http://" + downAddr,
			&proxytest.Resolver{Cluster: proxytest.Cluster},
			"/api/v1/namespaces/ci/pods/x/exec", 503, metav1.StatusReasonServiceUnavailable, "error trying to reach karmada-apiserver"},
		{"cluster proxy down (authorize mode)", "http://" + downAddr,
			&proxytest.Resolver{Cluster: proxytest.Cluster},
			"/api/v1/namespaces/ci/pods/x/exec", 503, metav1.StatusReasonServiceUnavailable, `error trying to reach the cluster proxy for cluster "member1"`},
		{"bad path", upstream.URL, &proxytest.Resolver{Cluster: proxytest.Cluster},
			"/api/v1/namespaces/ci/pods/a%2Fb/exec", 400, metav1.StatusReasonBadRequest, "invalid pod subresource path"},
		{"bad method", upstream.URL, &proxytest.Resolver{Cluster: proxytest.Cluster},
			"/api/v1/namespaces/ci/pods/x/exec", 405, metav1.StatusReasonMethodNotAllowed, "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Upstream: &rest.Config{Host: tt.upstream}, Resolver: tt.resolver}
			if strings.HasSuffix(tt.name, "(authorize mode)") {
				opts.AuthMode, opts.Authorizer = AuthAuthorize, &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}}
			}
			p := newTestProxy(t, opts)
			gw := httptest.NewServer(p)
			defer gw.Close()
			method := "POST"
			if tt.wantCode == 405 {
				method = "PUT"
			}
			before := len(up.Requests())
			req, _ := http.NewRequest(method, gw.URL+tt.target, nil)
			req.URL.Opaque = "//" + req.URL.Host + tt.target // keep the escaping
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != int(tt.wantCode) {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tt.wantCode, body)
			}
			st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
			if st.Code != tt.wantCode || st.Reason != tt.wantReason || !strings.Contains(st.Message, tt.wantMessage) {
				t.Errorf("Status code %d reason %q message %q; want %d %q containing %q", st.Code, st.Reason, st.Message, tt.wantCode, tt.wantReason, tt.wantMessage)
			}
			if tt.upstream == upstream.URL && len(up.Requests()) != before {
				t.Errorf("an error answered by the gateway reached the upstream")
			}
		})
	}
}
