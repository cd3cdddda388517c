package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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
				code, ok := randomTokenRequest(floodCtx, flooder, target)
				if !ok {
					continue
				}
				sent.Add(1)
				switch code {
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

// randomTokenRequest GETs target with a random bearer token, as a flood
// does, and returns the answer's status, or false when none came.
func randomTokenRequest(ctx context.Context, client *http.Client, target string) (int, bool) {
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	req.Header.Set("Authorization", "Bearer "+hex.EncodeToString(token))
	res, err := client.Do(req)
	if err != nil {
		return 0, false
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, true
}

// Figures of TestSpreadTokenFlood, stated in docs/security.md.
const (
	spreadSources  = 200 // flooding addresses, 127.0.0.2 on
	spreadRate     = 1000
	spreadDuration = 20 * time.Second
	// spreadBudget is the new credentials' review budget the gateway is
	// given (--kube-api-qps, --kube-api-burst): the flood asks for ten
	// times it.
	spreadBudget = 100
	// spreadNewTokenP99 bounds a new good token's first request, from
	// an address that does not flood.
	spreadNewTokenP99 = time.Second
)

// TestSpreadTokenFlood: an authorize-mode gateway gets 1,000 random-token
// requests a second for 20 s spread over 200 addresses (127.0.0.2 on),
// each within its failure limit: together they ask for ten times the new
// credentials' review budget (spreadBudget), which they keep full. Meanwhile a caller on 127.0.0.1 presents a
// new, valid ServiceAccount token every 200 ms, each seen for the first
// time: each must be reviewed. The flood's sources, once caught with bad
// tokens, wait behind every clean source, so the new tokens' first
// requests stay under a second at the 99th percentile (first come first
// served, one took 4.55 s, live).
func TestSpreadTokenFlood(t *testing.T) {
	dumpLogsOnFailure(t)
	const pod = "spread-token-flood"
	placePod(t, sleepPod(pod), []string{"member1"}, "member1")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	gw, err := testEnv.StartExtraGatewayWithoutRace(ctx, "gateway-spread-token-flood", "--auth-mode=authorize",
		fmt.Sprintf("--kube-api-qps=%d", spreadBudget), fmt.Sprintf("--kube-api-burst=%d", spreadBudget))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	admin := karmadaClient(t)
	const sa = "spread-flood-newcomer"
	if _, err := admin.CoreV1().ServiceAccounts(env.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().ServiceAccounts(env.Namespace).Delete(context.Background(), sa, metav1.DeleteOptions{})
	})
	// Tokens made before the flood: the TokenRequests do not share its time.
	var fresh []string
	for range int(spreadDuration / (200 * time.Millisecond)) {
		tr, err := admin.CoreV1().ServiceAccounts(env.Namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, tr.Status.Token)
	}

	floodCtx, stopFlood := context.WithTimeout(ctx, spreadDuration)
	defer stopFlood()
	target := gw.URL() + "/api/v1/namespaces/" + env.Namespace + "/pods/" + pod + "/log"
	var sent atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / spreadRate)
	defer tick.Stop()
	for i := range spreadSources {
		source := &net.TCPAddr{IP: net.IPv4(127, 0, byte((i+2)>>8), byte(i+2))}
		transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the gateway's own certificate, on loopback
			DialContext: (&net.Dialer{LocalAddr: source, Timeout: 10 * time.Second}).DialContext, MaxIdleConnsPerHost: 4}
		client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
		t.Cleanup(transport.CloseIdleConnections)
		wg.Go(func() {
			for floodCtx.Err() == nil {
				select {
				case <-tick.C:
				case <-floodCtx.Done():
					return
				}
				if _, ok := randomTokenRequest(floodCtx, client, target); ok {
					sent.Add(1)
				}
			}
		})
	}

	// The newcomer, from 127.0.0.1: a request per fresh token. Its
	// ServiceAccount may not read the log: a 403 after the review is the
	// answer that proves the review ran.
	newcomer := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 30 * time.Second} //nolint:gosec // as above
	// The flood at full strength first: karmada-apiserver has refused as
	// many random tokens as there are flooding addresses.
	if err := wait.PollUntilContextTimeout(floodCtx, 100*time.Millisecond, spreadDuration/2, true, func(context.Context) (bool, error) {
		return metricValue(string(scrapeMetrics(t, gw.MetricsURL())), `karmada_gateway_auth_decisions_total{cache="miss",result="unauthenticated"}`) >= spreadSources, nil
	}); err != nil {
		t.Fatalf("the flood did not get %d random tokens reviewed in %s", spreadSources, spreadDuration/2)
	}
	var took []time.Duration
	for _, token := range fresh {
		if floodCtx.Err() != nil {
			break
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		start := time.Now()
		res, err := newcomer.Do(req)
		if err != nil {
			t.Fatalf("the newcomer's request under the flood: %v", err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		took = append(took, time.Since(start))
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("the newcomer's fresh token was answered %d, want the 403 of a reviewed ServiceAccount without the rule", res.StatusCode)
		}
		select {
		case <-floodCtx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	stopFlood()
	wg.Wait()
	if len(took) == 0 {
		t.Fatal("no fresh token was tried under the flood")
	}
	slices.Sort(took)
	p99, p50 := took[len(took)*99/100], took[len(took)/2]
	b := scrapeMetrics(t, gw.MetricsURL())
	reviews := metricValue(string(b), `karmada_gateway_auth_decisions_total{cache="miss",result="unauthenticated"}`)
	t.Logf("spread flood: %d random-token requests from %d addresses in %s (%.0f reviewed and refused); the newcomer's %d fresh tokens: p50 %s, p99 %s",
		sent.Load(), spreadSources, spreadDuration, reviews, len(took), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	// The flood kept the budget full: its requests wait for it, so it
	// sends about what the budget reviews.
	if reviews < 0.75*spreadBudget*spreadDuration.Seconds() {
		t.Errorf("the flood had only %.0f random tokens reviewed in %s; the budget is %d a second", reviews, spreadDuration, spreadBudget)
	}
	if p99 > spreadNewTokenP99 {
		t.Errorf("a fresh token's first request took %s at the 99th percentile under the spread flood, over %s", p99, spreadNewTokenP99)
	}
	if len(took) < 20 { // one every 200 ms unless they wait
		t.Errorf("only %d fresh tokens were tried under the flood: a p99 of so few is their slowest", len(took))
	}
}
