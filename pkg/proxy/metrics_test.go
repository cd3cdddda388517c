package proxy

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
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
	p.metrics, p.series = m, newRequestSeries(m)

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
	if got := value(t, m.RequestsTotal.WithLabelValues("passthrough", "400")); got != 1 {
		t.Errorf("requests{passthrough,400} = %v", got)
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
