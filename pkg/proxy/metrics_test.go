package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

func TestMetrics(t *testing.T) {
	up := newEchoUpgrader(t, "websocket")
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			up.ServeHTTP(w, r)
			return
		}
		_, _ = io.WriteString(w, "{}")
	})
	p, gw := newUpgradeEnv(t, mux, nil)
	m := metrics.New(prometheus.NewRegistry())
	p.metrics, p.series = m, metrics.NewRequestSeries(m)

	c := dialGateway(t, gw)
	if resp := c.send(t, "GET", "/api/v1/namespaces/ci/pods/p/exec", websocketRequest); resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c.echo(t, "x")
	if got := value(t, m.RequestsTotal.WithLabelValues("exec", "101")); got != 1 {
		t.Errorf("requests{exec,101} = %v", got)
	}
	if got := value(t, m.ActiveStreams.WithLabelValues("exec")); got != 1 {
		t.Errorf("active streams while open = %v", got)
	}
	c.conn.Close()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return value(t, m.ActiveStreams.WithLabelValues("exec")) == 0, nil
	})
	if err != nil {
		t.Fatal("active streams never went back to 0")
	}
	var d dto.Metric
	if err := m.StreamDuration.WithLabelValues("exec").(prometheus.Metric).Write(&d); err != nil || d.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("stream duration samples = %d, %v", d.GetHistogram().GetSampleCount(), err)
	}

	resp, err := gw.Client().Get(gw.URL + "/api/v1/namespaces/ci/pods/p/exec")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = gw.Client().Get(gw.URL + "/api/v1/namespaces/ci/pods/a%2Fb/exec")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := value(t, m.RequestsTotal.WithLabelValues("exec", "200")); got != 1 {
		t.Errorf("requests{exec,200} = %v", got)
	}
	if got := value(t, m.RequestsTotal.WithLabelValues(metrics.RouteRefused, "400")); got != 1 {
		t.Errorf("requests{refused,400} = %v", got)
	}
	if got := value(t, m.RequestsTotal.WithLabelValues(metrics.RoutePassthrough, "400")); got != 0 {
		t.Errorf("requests{passthrough,400} = %v: a refused request counted as passed through", got)
	}
}

// TestRefusedRequestsHaveTheirOwnRoute: what the path guards answer
// themselves never went upstream, so it must not be counted as passthrough
// traffic (nor as the route it tried), where it would hide among
// karmada-apiserver's own 400s and 405s.
func TestRefusedRequestsHaveTheirOwnRoute(t *testing.T) {
	tests := []struct {
		name, method, target string
		wantCode             int
	}{
		{"encoded slash in pod name", "POST", "/api/v1/namespaces/ci/pods/a%2Fb/exec", 400},
		{"dot segments to exec", "GET", "/api/v1/namespaces/ci/pods/x/status/../exec", 400},
		{"canonical exec, wrong method", "PUT", "/api/v1/namespaces/ci/pods/x/exec", 405},
		{"CONNECT", "CONNECT", "/api/v1/namespaces/ci/pods/x/exec", 405},
		{"non-canonical service proxy", "GET", "/api/v1/namespaces/ci/services/w%65b/proxy/", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.New(prometheus.NewRegistry())
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, Metrics: m, ServiceResolver: &proxytest.Resolver{Cluster: proxytest.Cluster}})
			out := recordUpstream(p)
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, tt.method, tt.target, nil, ""))
			if rec.Code != tt.wantCode || len(out.requests) != 0 {
				t.Fatalf("code %d, %d upstream requests; want %d and none", rec.Code, len(out.requests), tt.wantCode)
			}
			code := strconv.Itoa(tt.wantCode)
			if got := value(t, m.RequestsTotal.WithLabelValues(metrics.RouteRefused, code)); got != 1 {
				t.Errorf("requests{refused,%s} = %v, want 1", code, got)
			}
			for _, route := range []string{metrics.RoutePassthrough, metrics.RouteExec, metrics.RouteServiceProxy} {
				if got := value(t, m.RequestsTotal.WithLabelValues(route, code)); got != 0 {
					t.Errorf("requests{%s,%s} = %v, want 0", route, code, got)
				}
			}
		})
	}
}

func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}
