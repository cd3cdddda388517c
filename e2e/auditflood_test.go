package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// floodMemoryBound is what the gateway's peak resident memory must stay
// under while TestAuditMemoryUnderFlood floods it (docs/security.md
// states it): its webhook queue holds at most 8 MiB here (32 MiB by
// default), events are cut to 100 KiB, and what is left is the requests in
// flight and the garbage collector's slack. Before the byte bounds a flood
// like it took the gateway past 4 GB.
const floodMemoryBound = 256 << 20

// TestAuditMemoryUnderFlood: anonymous clients send 1,000 requests with a
// 1 MiB request line (a 1,000 KB query) to a path the gateway refuses
// (each refusal is audited) while the audit webhook accepts connections
// and never answers, its queue bounded at 8 MiB. The gateway (built as the
// image is, without the race detector) answers every one with its 400
// Status, keeps its peak resident memory under floodMemoryBound, counts
// the events its full webhook queue dropped (each is cut to about 13 KB,
// so 8 MiB hold some 600), and stays ready.
func TestAuditMemoryUnderFlood(t *testing.T) {
	dumpLogsOnFailure(t)
	dir := t.TempDir()
	hung := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hung:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hook.Close)
	t.Cleanup(func() { close(hung) })
	webhookConfig := filepath.Join(dir, "webhook.kubeconfig")
	kubeconfig := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: audit\n  cluster:\n    server: %s\ncontexts:\n- name: audit\n  context:\n    cluster: audit\n    user: audit\ncurrent-context: audit\nusers:\n- name: audit\n  user: {}\n", hook.URL)
	if err := os.WriteFile(webhookConfig, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	gw, err := testEnv.StartExtraGatewayWithoutRace(ctx, "gateway-audit-flood", "--audit-webhook-config-file="+webhookConfig,
		"--audit-webhook-batch-buffer-max-bytes=8388608")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	before := peakRSS(t, gw.PID())

	const requests, clients = 1000, 16
	target := gw.URL() + "/api/v1/namespaces/e2e/pods/x/%65xec?q=" + strings.Repeat("a", 1000<<10)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: clients}} //nolint:gosec // the gateway's own certificate, on loopback
	var sent, refused atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for sent.Add(1) <= requests && ctx.Err() == nil {
				res, err := client.Get(target)
				if err != nil {
					t.Errorf("request: %v", err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusBadRequest {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	peak := peakRSS(t, gw.PID())
	t.Logf("%d refusals in %s; the gateway's peak RSS %d MiB (before the flood %d MiB)", refused.Load(), took, peak>>20, before>>20)
	if refused.Load() != requests {
		t.Errorf("%d of %d requests refused with 400", refused.Load(), requests)
	}
	if peak > floodMemoryBound {
		t.Errorf("the gateway's peak RSS was %d MiB, over %d MiB", peak>>20, floodMemoryBound>>20)
	}
	b := scrapeMetrics(t, gw.MetricsURL())
	dropped := metricValue(string(b), `karmada_gateway_audit_events_dropped_total{sink="webhook"}`)
	if dropped <= 0 {
		t.Errorf("no dropped events counted: %s", grepLines(string(b), "audit_events"))
	}
	if res, err := http.Get(gw.MetricsURL() + "/readyz"); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("/readyz after the flood: %v %v", res, err)
	}
}

// peakRSS is pid's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// scrapeMetrics is the text exposition an extra gateway's plain HTTP
// metrics port serves at metricsURL.
func scrapeMetrics(t *testing.T, metricsURL string) []byte {
	t.Helper()
	res, err := http.Get(metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// metricValue is the value of the sample named exactly series in a
// Prometheus text exposition, or -1.
func metricValue(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
