package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/auth"
)

// Figures of TestTokenFlood, stated in docs/security.md.
const (
	floodRate     = 1000 // random-token requests a second
	floodDuration = 60 * time.Second
	// floodExecP99 bounds the legitimate caller's exec (setup and a
	// `true`) at the 99th percentile under the flood.
	floodExecP99 = time.Second
	// tokenFloodMemoryBound bounds the gateway's peak resident memory.
	tokenFloodMemoryBound = 256 << 20
)

// TestTokenFlood: an authorize-mode gateway (built without the race
// detector) gets 1,000 requests a second with random bearer tokens for a
// minute, from one address, on pods/log (which takes no stream slot),
// beside a legitimate exec-only caller running execs. Each random token
// costs a TokenReview until the source failed 20 times, then a 429 without
// one (--auth-failed-per-source); the legitimate caller's token, known
// good, is reviewed on a budget of its own when its cache entry expires.
// Its execs' 99th percentile stays under a second, /readyz answers 200
// throughout, the gateway's memory stays bounded, and karmada-apiserver was
// asked about a few hundred random tokens, not 60,000.
func TestTokenFlood(t *testing.T) {
	dumpLogsOnFailure(t)
	const pod = "token-flood"
	placePod(t, sleepPod(pod), []string{"member1"}, "member1")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	gw, err := testEnv.StartExtraGatewayWithoutRace(ctx, "gateway-token-flood", "--auth-mode=authorize")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)

	floodCtx, stopFlood := context.WithTimeout(ctx, floodDuration)
	defer stopFlood()
	transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: 64} //nolint:gosec // the gateway's own certificate, on loopback
	flooder := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	var sent, throttled, unauthorized atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / floodRate) // shared: 1,000 ticks a second among the workers
	defer tick.Stop()
	for range 16 {
		wg.Go(func() {
			target := gw.URL() + "/api/v1/namespaces/" + env.Namespace + "/pods/" + pod + "/log"
			for floodCtx.Err() == nil {
				select {
				case <-tick.C:
				case <-floodCtx.Done():
					return
				}
				token := make([]byte, 16)
				_, _ = rand.Read(token)
				req, _ := http.NewRequestWithContext(floodCtx, http.MethodGet, target, nil)
				req.Header.Set("Authorization", "Bearer "+hex.EncodeToString(token))
				res, err := flooder.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				sent.Add(1)
				switch res.StatusCode {
				case http.StatusTooManyRequests:
					throttled.Add(1)
				case http.StatusUnauthorized:
					unauthorized.Add(1)
				}
			}
		})
	}

	// Readiness, probed as the kubelet probes it.
	var probes, notReady atomic.Int64
	wg.Go(func() {
		for floodCtx.Err() == nil {
			res, err := http.Get(gw.MetricsURL() + "/readyz")
			probes.Add(1)
			if err != nil || res.StatusCode != http.StatusOK {
				notReady.Add(1)
			}
			if err == nil {
				res.Body.Close()
			}
			select {
			case <-floodCtx.Done():
			case <-time.After(time.Second):
			}
		}
	})

	// The legitimate caller execs `true` one after the other.
	cfg := gw.Config(env.UserExecOnly)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(env.Namespace).Name(pod).SubResource("exec").
		Param("command", "true").Param("stdout", "true").URL()
	var took []time.Duration
	for floodCtx.Err() == nil {
		exe, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
		if err != nil {
			t.Errorf("the legitimate caller's exec under the flood: %v", err)
			break
		}
		took = append(took, time.Since(start))
	}
	wg.Wait()
	slices.Sort(took)
	if len(took) == 0 {
		t.Fatal("no exec ran")
	}
	p99, p50 := took[len(took)*99/100], took[len(took)/2]
	peak := peakRSS(t, gw.PID())
	b := scrapeMetrics(t, gw.MetricsURL())
	reviews := metricValue(string(b), `karmada_gateway_auth_decisions_total{cache="miss",result="unauthenticated"}`)
	t.Logf("flood: %d random-token requests in %s (%d 429 without a review, %d 401 after one; %.0f unauthenticated decisions missed the cache); "+
		"legitimate execs: %d, p50 %s, p99 %s; /readyz %d of %d probes not 200; peak RSS %d MiB",
		sent.Load(), floodDuration, throttled.Load(), unauthorized.Load(), reviews, len(took), p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		notReady.Load(), probes.Load(), peak>>20)
	if sent.Load() < floodRate*int64(floodDuration/time.Second)/2 {
		t.Errorf("the flood sent only %d requests", sent.Load())
	}
	if p99 > floodExecP99 {
		t.Errorf("the legitimate caller's exec p99 was %s under the flood, over %s", p99, floodExecP99)
	}
	if notReady.Load() > 0 {
		t.Errorf("/readyz was not 200 for %d of %d probes during the flood", notReady.Load(), probes.Load())
	}
	if peak > tokenFloodMemoryBound {
		t.Errorf("the gateway's peak RSS was %d MiB, over %d MiB", peak>>20, tokenFloodMemoryBound>>20)
	}
	// One source's failures: --auth-failed-per-source a second, and its
	// burst of twice that.
	if limit := float64(auth.DefaultFailedPerSource)*floodDuration.Seconds() + 2*float64(auth.DefaultFailedPerSource); reviews > limit+float64(auth.DefaultFailedPerSource) {
		t.Errorf("karmada-apiserver reviewed %.0f random tokens from one source in %s; the limit allows %.0f", reviews, floodDuration, limit)
	}
	if throttled.Load() < sent.Load()/2 {
		t.Errorf("only %d of %d random-token requests were answered 429 without a review", throttled.Load(), sent.Load())
	}
}
