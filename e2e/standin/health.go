package standin

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// probeTimeout bounds one health probe, so a hung member turns NotReady
// within one interval instead of stalling the loop.
const probeTimeout = 5 * time.Second

// healthProbe reports a member's version, or why it is not ready.
type healthProbe func(ctx context.Context) (version string, result probeResult)

// probeResult is a probe outcome in the terms of the Ready condition.
type probeResult struct {
	ready   bool
	reason  string
	message string
}

// readyzProbe probes the member like Karmada's cluster status controller:
// /readyz answering ok means Ready; an error reaching it means
// ClusterNotReachable, naming the error; any other answer ClusterNotReady.
func readyzProbe(client kubernetes.Interface) healthProbe {
	return func(ctx context.Context) (string, probeResult) {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		var code int
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Raw()
		if err != nil && code == 0 {
			return "", probeResult{reason: clusterNotReachableReason, message: fmt.Sprintf("%s: %v", clusterNotReachableMessage, err)}
		}
		if code != http.StatusOK || string(body) != "ok" {
			return "", probeResult{reason: clusterNotReadyReason, message: fmt.Sprintf("cluster is not healthy and ready to accept workloads: /readyz answered %d", code)}
		}
		version := ""
		if v, err := client.Discovery().ServerVersion(); err == nil {
			version = v.GitVersion
		}
		return version, probeResult{ready: true, reason: clusterReadyReason, message: clusterReadyMessage}
	}
}

// probeAll probes every member once, in parallel so one hung member does
// not delay the others, and records the results.
func probeAll(ctx context.Context, store *clusterStore, probes map[string]healthProbe) {
	var wg sync.WaitGroup
	for name, probe := range probes {
		wg.Go(func() {
			version, res := probe(ctx)
			if ctx.Err() != nil {
				return
			}
			prevReady := store.ready(name)
			store.setHealth(name, version, res.ready, res.reason, res.message)
			if prevReady != res.ready {
				klog.FromContext(ctx).Info("Cluster readiness changed", "cluster", name, "ready", res.ready, "reason", res.reason, "message", res.message)
			}
		})
	}
	wg.Wait()
}

// runHealth probes every interval until ctx ends.
func runHealth(ctx context.Context, store *clusterStore, probes map[string]healthProbe, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			probeAll(ctx, store, probes)
		}
	}
}
