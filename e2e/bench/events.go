package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// Events measures what merging a member's pod events costs: a watch of the
// shell pod's events through the gateway (karmada-apiserver's watch and the
// member's, merged) against the member's own events watch through the
// cluster proxy, both open at once while events are created in the member;
// and the scoped list through the gateway (karmada's list, the template and
// the member's list) against karmada-apiserver's list alone. Admin reads
// both: the bench users have no events RBAC.
func (r *Runner) Events(ctx context.Context) (*Table, error) {
	gwCfg, err := r.Env.GatewayConfig(env.UserAdmin)
	if err != nil {
		return nil, err
	}
	gwClient, err := kubernetes.NewForConfig(unlimited(gwCfg))
	if err != nil {
		return nil, err
	}
	proxyClient, err := kubernetes.NewForConfig(unlimited(r.Env.ClusterProxyConfig(r.member, env.UserAdmin)))
	if err != nil {
		return nil, err
	}
	karmadaClient, err := kubernetes.NewForConfig(unlimited(r.Env.KarmadaConfig(env.UserAdmin)))
	if err != nil {
		return nil, err
	}
	member, err := r.Env.MemberClient(r.member)
	if err != nil {
		return nil, err
	}
	memberPod, err := r.Env.MemberPod(ctx, r.member, env.Namespace, shellPod)
	if err != nil {
		return nil, err
	}
	scoped := metav1.ListOptions{FieldSelector: "involvedObject.name=" + shellPod}
	n := r.Sizes.MemberEvents

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// Names arrive as the member's on the direct path and as
	// "<cluster>.<name>" through the gateway.
	stream := func(w watch.Interface, prefix string) *arrivals {
		return recordArrivals(ctx, &wg, w, n+1 /* the probe too */, func(obj runtime.Object) (string, bool) {
			e, isEvent := obj.(*corev1.Event)
			if !isEvent || !strings.HasPrefix(e.Name, prefix) {
				return "", false
			}
			return strings.TrimPrefix(e.Name, prefix), true
		})
	}
	gw, err := gwClient.CoreV1().Events(env.Namespace).Watch(ctx, scoped)
	if err != nil {
		return nil, fmt.Errorf("events watch through the gateway: %w", err)
	}
	direct, err := proxyClient.CoreV1().Events(env.Namespace).Watch(ctx, watchFromCache(scoped))
	if err != nil {
		return nil, fmt.Errorf("events watch through the cluster proxy: %w", err)
	}
	gwSeen, directSeen := stream(gw, r.member+"."), stream(direct, "")

	create := func(name string) error {
		now := metav1.Now()
		_, err := member.CoreV1().Events(env.Namespace).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: env.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: env.Namespace, Name: shellPod, UID: memberPod.UID},
			Reason:         "Bench", Message: name, Type: corev1.EventTypeNormal,
			Source:         corev1.EventSource{Component: "bench"},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}, metav1.CreateOptions{})
		return err
	}
	// The gateway's member watch starts behind its response headers: a
	// probe seen on both streams means both are live.
	probe := fmt.Sprintf("bench-events-probe-%d", time.Now().UnixNano())
	if err := create(probe); err != nil {
		return nil, err
	}
	if err := waitSeen(ctx, probe, gwSeen, directSeen); err != nil {
		return nil, err
	}
	r.logf("events: creating %d member events", n)
	prefix := fmt.Sprintf("bench-events-%d-", time.Now().UnixNano())
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if err := create(fmt.Sprintf("%s%d", prefix, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for _, a := range []*arrivals{gwSeen, directSeen} {
		select {
		case <-a.done:
		case err := <-errs:
			return nil, fmt.Errorf("events: create: %w", err)
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("events: %d of %d arrived through the gateway, %d direct", len(gwSeen.snapshot())-1, n, len(directSeen.snapshot())-1)
		}
	}
	g, d := gwSeen.snapshot(), directSeen.snapshot()
	delete(g, probe)
	delete(d, probe)
	added := addedLatency(g, d)
	gRate, dRate := float64(n)/span(g).Seconds(), float64(n)/span(d).Seconds()

	list := func(c kubernetes.Interface) func() Load {
		return func() Load {
			t0 := time.Now()
			if _, err := c.CoreV1().Events(env.Namespace).List(ctx, scoped); err != nil {
				return Load{Errors: 1, FirstErr: err}
			}
			el := time.Since(t0)
			return Load{Latencies: []time.Duration{el}, Elapsed: el}
		}
	}
	rounds := max(20, r.Sizes.SetupSamples*2)
	gl, kl := Interleave(rounds, list(gwClient), list(karmadaClient))
	gl2, pl := Interleave(rounds, list(gwClient), list(proxyClient))
	if err := errors.Join(eitherErr(gl.Err(), kl.Err()), eitherErr(gl2.Err(), pl.Err())); err != nil {
		return nil, fmt.Errorf("events list: %w", err)
	}

	// Issue #15: the merged list at most 1.5 times what the member's own
	// list through the cluster proxy costs.
	const eventsListLimit = 1.5
	t := &Table{
		Title:   "Member pod events: gateway merge vs the member's own events",
		Columns: []string{"measurement", "gateway", "direct", "ratio", "target", "verdict"},
		Note: fmt.Sprintf("Watch: %d events created in %s by 8 writers, watched through the gateway (merged, fieldSelector involvedObject.name) and through the cluster proxy at once; "+
			"added latency is, per event, arrival through the gateway minus arrival on the cluster proxy's watch. "+
			"List: the pod's scoped events list (%d events in the member), %d interleaved rounds against each direct path: karmada-apiserver's list alone, which has none of "+
			"them, and the member's list through the cluster proxy alone (what a patched executor would call); the gateway reads both, the member's side while karmada-apiserver answers.",
			n, r.member, n+1, rounds) + r.proxyNote("Direct path"),
	}
	none := string(NoTarget)
	t.Add("member events/s delivered", FormatRate(gRate, ""), FormatRate(dRate, ""), FormatRatio(Ratio(gRate, dRate)), "", none)
	t.Add("added delivery latency p50", FormatDuration(Percentile(added, 50)), "", "", "", none)
	t.Add("added delivery latency p99", FormatDuration(Percentile(added, 99)), "", "", "", none)
	gp, kp := Percentile(gl.Latencies, 50), Percentile(kl.Latencies, 50)
	t.Add("scoped list p50 vs karmada-apiserver", FormatDuration(gp), FormatDuration(kp), FormatRatio(Ratio(float64(gp), float64(kp))), "", none)
	gp2, pp := Percentile(gl2.Latencies, 50), Percentile(pl.Latencies, 50)
	listRatio := Ratio(float64(gp2), float64(pp))
	t.Add("scoped list p50 vs the cluster proxy", FormatDuration(gp2), FormatDuration(pp), FormatRatio(listRatio), "≤ 1.5×", string(AtMost(listRatio, eventsListLimit)))
	return t, nil
}

// waitSeen waits until name arrived on every stream.
func waitSeen(ctx context.Context, name string, streams ...*arrivals) error {
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		seen := 0
		for _, a := range streams {
			if _, ok := a.snapshot()[name]; ok {
				seen++
			}
		}
		if seen == len(streams) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("events: the probe event arrived on %d of %d watches within a minute", seen, len(streams))
		case <-tick.C:
		}
	}
}
