package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

const watchLabel = "bench.karmada-exec-gateway.io/watch"

// arrivals records when each named object was first seen on a stream.
type arrivals struct {
	mu   sync.Mutex
	at   map[string]time.Time
	want int
	done chan struct{}
}

func newArrivals(want int) *arrivals {
	return &arrivals{at: map[string]time.Time{}, want: want, done: make(chan struct{})}
}

func (a *arrivals) see(name string, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.at[name]; ok {
		return
	}
	a.at[name] = t
	if len(a.at) == a.want {
		close(a.done)
	}
}

func (a *arrivals) snapshot() map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]time.Time, len(a.at))
	for k, v := range a.at {
		out[k] = v
	}
	return out
}

// recordArrivals reads w until ctx ends or w closes, and records when each
// ADDED object that key names first arrives; w is stopped at the end.
func recordArrivals(ctx context.Context, wg *sync.WaitGroup, w watch.Interface, want int, key func(runtime.Object) (string, bool)) *arrivals {
	a := newArrivals(want)
	wg.Go(func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if name, ok := key(ev.Object); ok && ev.Type == watch.Added {
					a.see(name, time.Now())
				}
			}
		}
	})
	return a
}

// span is the time between the first and the last arrival.
func span(at map[string]time.Time) time.Duration {
	var first, last time.Time
	for _, t := range at {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return last.Sub(first)
}

// addedLatency is, per name seen on both, the gateway's arrival minus the
// direct one: what the extra hop costs an event or a line.
func addedLatency(gw, direct map[string]time.Time) []time.Duration {
	var out []time.Duration
	for name, g := range gw {
		if d, ok := direct[name]; ok {
			out = append(out, g.Sub(d))
		}
	}
	return out
}

// watchFromCache starts a watch at resourceVersion "0": from the watch
// cache as it is. The environment's apiservers share one etcd, whose revision
// moves with every apiserver's writes, so a watch from "now" (a fresh etcd
// revision) can wait for a cache that has no reason to catch up and end in
// "Too large resource version". Objects made after the watch started are
// delivered either way; older ones are not, because the selectors match
// only what the measurement creates.
func watchFromCache(opts metav1.ListOptions) metav1.ListOptions {
	opts.ResourceVersion = "0"
	return opts
}

// Watch opens the same pod watch through the gateway and directly at the
// same time, creates Sizes.ListPods pods as fast as 16 writers can, and
// compares when each ADDED event arrives on each stream.
func (r *Runner) Watch(ctx context.Context) (*Table, error) {
	p, err := r.passthroughPaths(env.UserExecOnly)
	if err != nil {
		return nil, err
	}
	n := r.Sizes.ListPods
	opts := metav1.ListOptions{LabelSelector: watchLabel + "=true"}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	stream := func(name string, c *kubernetes.Clientset) (*arrivals, error) {
		w, err := c.CoreV1().Pods(env.Namespace).Watch(ctx, watchFromCache(opts))
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", name, err)
		}
		return recordArrivals(ctx, &wg, w, n, func(obj runtime.Object) (string, bool) {
			pod, isPod := obj.(*corev1.Pod)
			if !isPod {
				return "", false
			}
			return pod.Name, true
		}), nil
	}
	gwClient, directClient, err := p.clients()
	if err != nil {
		return nil, err
	}
	gw, err := stream("through the gateway", gwClient)
	if err != nil {
		return nil, err
	}
	direct, err := stream("direct", directClient)
	if err != nil {
		return nil, err
	}
	admin, err := r.Env.KarmadaClient(env.UserAdmin)
	if err != nil {
		return nil, err
	}
	r.logf("watch: creating %d pods", n)
	if err := createPods(ctx, admin, "bench-watch", n, map[string]string{watchLabel: "true"}); err != nil {
		return nil, err
	}
	for _, a := range []*arrivals{gw, direct} {
		select {
		case <-a.done:
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("watch: %d of %d events arrived through the gateway, %d direct", len(gw.snapshot()), n, len(direct.snapshot()))
		}
	}
	g, d := gw.snapshot(), direct.snapshot()
	added := addedLatency(g, d)
	gRate, dRate := float64(n)/span(g).Seconds(), float64(n)/span(d).Seconds()
	t := &Table{
		Title:   "Watch: gateway vs karmada-apiserver, both streams open at once",
		Columns: []string{"measurement", "gateway", "direct", "ratio"},
		Note: fmt.Sprintf("%d pods created by 16 writers; events/s is ADDED events over the span from first to last arrival (bounded by the writers). "+
			"Added delivery latency is, per event, its arrival through the gateway minus its arrival on the direct watch (negative: the gateway's stream was first).", n),
	}
	t.Add("events/s delivered", FormatRate(gRate, ""), FormatRate(dRate, ""), FormatRatio(Ratio(gRate, dRate)))
	t.Add("added delivery latency p50", FormatDuration(Percentile(added, 50)), "", "")
	t.Add("added delivery latency p99", FormatDuration(Percentile(added, 99)), "", "")
	return t, nil
}
