package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// TestKarmadaDownAndBack: while karmada-apiserver cannot be reached every
// request gets a 503 Status, and the gateway serves again as soon as it can
// be reached, with nothing restarted.
func TestKarmadaDownAndBack(t *testing.T) {
	up := &proxytest.RecordingUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	var down atomic.Bool
	down.Store(true)
	dialer := &net.Dialer{}
	cfg := &rest.Config{Host: upstream.URL, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			return nil, errors.New("connect: connection refused")
		}
		return dialer.DialContext(ctx, network, addr)
	}}
	p := newTestProxy(t, Options{Upstream: cfg})
	gw := httptest.NewServer(p)
	defer gw.Close()

	// A rewritten route names karmada-apiserver too: in passthrough mode
	// its admission check is what cannot reach it, and nothing may name the
	// member to a caller karmada-apiserver has not judged.
	targets := []struct{ target, upstreamName string }{
		{"/api/v1/namespaces/ci/pods?watch=1", "karmada-apiserver"},
		{"/version", "karmada-apiserver"},
		{"/api/v1/namespaces/ci/pods/p/exec", "karmada-apiserver"},
	}
	for round, wantDown := range []bool{true, false, true, false} {
		down.Store(wantDown)
		if wantDown {
			upstream.CloseClientConnections() // an outage ends open connections too
		}
		for _, tc := range targets {
			resp, err := http.Post(gw.URL+tc.target, "", nil)
			if err != nil {
				t.Fatalf("round %d %s: %v", round, tc.target, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !wantDown {
				if resp.StatusCode != 200 {
					t.Fatalf("round %d %s: upstream back but got %d %s", round, tc.target, resp.StatusCode, body)
				}
				continue
			}
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("round %d %s: %d %s, want 503", round, tc.target, resp.StatusCode, body)
			}
			st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
			if !strings.Contains(st.Message, "error trying to reach "+tc.upstreamName) {
				t.Errorf("round %d %s: message %q does not name %s", round, tc.target, st.Message, tc.upstreamName)
			}
		}
	}
}

// mapResolver places each pod on its own cluster, or fails it.
type mapResolver map[string]func() (string, error)

func (m mapResolver) Resolve(_ context.Context, namespace, pod string) (string, error) {
	if f, ok := m[namespace+"/"+pod]; ok {
		return f()
	}
	return "", apierrors.NewNotFound(podsResource, pod)
}

// TestMemberClusterDownFailsOnlyItsPods: with one member not ready and
// another whose cluster proxy cannot reach it, only their pods fail, each
// with a Status naming its cluster; pods elsewhere keep working.
func TestMemberClusterDownFailsOnlyItsPods(t *testing.T) {
	deadProxy := karmada.ClusterProxyPath("member3", "/")
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, deadProxy) {
			// What Karmada's aggregated apiserver answers when a member is unreachable.
			apiresponse.WriteStatus(w, apierrors.NewServiceUnavailable(`error trying to reach cluster "member3": dial tcp: connect: connection refused`))
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer upstream.Close()
	res := mapResolver{
		"ci/on-member1": func() (string, error) { return "member1", nil },
		"ci/on-member2": func() (string, error) {
			return "", apierrors.NewServiceUnavailable(`member cluster "member2" of pod "ci/on-member2" is not ready: cluster is not reachable`)
		},
		"ci/on-member3": func() (string, error) { return "member3", nil },
	}
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: upstream.URL}, Resolver: res})
	gw := httptest.NewServer(p)
	defer gw.Close()

	for _, tc := range []struct {
		pod      string
		wantCode int
		naming   string
	}{
		{"on-member1", 200, ""},
		{"on-member2", 503, `"member2"`},
		{"on-member3", 503, `"member3"`},
		{"on-member1", 200, ""}, // still fine after its neighbours failed
	} {
		for _, sub := range []string{"exec", "log"} {
			resp, err := http.Post(fmt.Sprintf("%s/api/v1/namespaces/ci/pods/%s/%s", gw.URL, tc.pod, sub), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("%s/%s: %d %s, want %d", tc.pod, sub, resp.StatusCode, body, tc.wantCode)
			}
			if tc.wantCode == 200 {
				continue
			}
			st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
			if !strings.Contains(st.Message, tc.naming) {
				t.Errorf("%s/%s: message %q does not name %s", tc.pod, sub, st.Message, tc.naming)
			}
		}
	}
}
