package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

const (
	labelerRateLabel = "bench.karmada-exec-gateway.io/labeler-rate"
	labelerP99Limit  = time.Second // at 100 pods/s
)

// Labeler creates propagated pods at each of Sizes.LabelerRates for
// Sizes.LabelerFor and measures, per pod, from the moment a watch on
// ResourceBindings sees it scheduled to the moment a watch on pods sees the
// gateway's cluster label on the template.
func (r *Runner) Labeler(ctx context.Context) (*Table, error) {
	t := &Table{
		Title:   "Labeler: binding scheduled → cluster label visible",
		Columns: []string{"new pods/s", "pods created", "seen scheduled", "then labelled", "p50", "p99", "max", "target", "verdict"},
		Note: "Both instants are taken by this program's own watches on karmada-apiserver (ResourceBindings with spec.clusters set; " +
			"pod templates carrying cluster.karmada.io/name), so the figure is what a client sees, including one watch delivery each. " +
			"Pods are waited for 30s after the last create; a scheduled pod not labelled by then misses the target.",
	}
	for _, rate := range r.Sizes.LabelerRates {
		lat, created, scheduled, err := r.labelerAtRate(ctx, rate)
		if err != nil {
			return nil, fmt.Errorf("labeler at %d pods/s: %w", rate, err)
		}
		if len(lat) == 0 {
			return nil, fmt.Errorf("labeler at %d pods/s: none of %d pods was seen scheduled and then labelled", rate, created)
		}
		target, verdict := "", NoTarget
		if rate == 100 {
			target, verdict = "p99 < 1s", AtMost(float64(Percentile(lat, 99)), float64(labelerP99Limit-1))
			if len(lat) < scheduled {
				verdict = Missed // a scheduled pod never labelled within the wait
			}
		}
		t.Add(strconv.Itoa(rate), strconv.Itoa(created), strconv.Itoa(scheduled), strconv.Itoa(len(lat)),
			FormatDuration(Percentile(lat, 50)), FormatDuration(Percentile(lat, 99)), FormatDuration(Percentile(lat, 100)), target, string(verdict))
	}
	return t, nil
}

func (r *Runner) labelerAtRate(ctx context.Context, rate int) (lat []time.Duration, created, scheduledPods int, err error) {
	n := max(1, int(float64(rate)*r.Sizes.LabelerFor.Seconds()))
	prefix := fmt.Sprintf("bench-lab%d", rate)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	dyn, err := dynamic.NewForConfig(unlimited(r.Env.KarmadaConfig(env.UserAdmin)))
	if err != nil {
		return nil, 0, 0, err
	}
	admin, err := r.Env.KarmadaClient(env.UserAdmin)
	if err != nil {
		return nil, 0, 0, err
	}
	scheduled, labelled := newArrivals(n), newArrivals(n)
	bw, err := dyn.Resource(karmada.ResourceBindingGVR).Namespace(env.Namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, 0, 0, err
	}
	defer bw.Stop()
	sel := metav1.ListOptions{LabelSelector: labelerRateLabel + "=" + strconv.Itoa(rate)}
	pw, err := admin.CoreV1().Pods(env.Namespace).Watch(ctx, watchFromCache(sel))
	if err != nil {
		return nil, 0, 0, err
	}
	defer pw.Stop()
	var bindingEvents, podEvents atomic.Int64
	var watchErr atomic.Value
	wg.Go(func() {
		for ev := range bw.ResultChan() {
			bindingEvents.Add(1)
			if ev.Type == watch.Error {
				watchErr.Store(fmt.Sprintf("binding watch: %v", ev.Object))
				continue
			}
			b, err := karmada.Transform[karmada.ResourceBinding]()(ev.Object)
			rb, ok := b.(*karmada.ResourceBinding)
			// The watch starts from the cache, so it also lists the other bench pods' bindings.
			if err != nil || !ok || len(rb.Spec.Clusters) == 0 || !strings.HasPrefix(rb.Spec.Resource.Name, prefix+"-") {
				continue
			}
			scheduled.see(rb.Spec.Resource.Name, time.Now())
		}
	})
	wg.Go(func() {
		for ev := range pw.ResultChan() {
			podEvents.Add(1)
			if ev.Type == watch.Error {
				watchErr.Store(fmt.Sprintf("pod watch: %v", ev.Object))
			}
			if pod, ok := ev.Object.(*corev1.Pod); ok && pod.Labels[karmada.ClusterNameLabel] != "" {
				labelled.see(pod.Name, time.Now())
			}
		}
	})

	r.logf("labeler: creating %d pods at %d/s", n, rate)
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	errs := make(chan error, n)
	for i := range n {
		// Open loop: pod i is created at start+i*interval whatever earlier
		// creates cost, so the offered rate is the rate asked for.
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			select {
			case <-ctx.Done():
				return nil, 0, 0, ctx.Err()
			case <-time.After(d):
			}
		}
		go func() {
			p := env.ShellPod(env.Namespace, fmt.Sprintf("%s-%05d", prefix, i), "exec sleep 100000")
			p.Labels = map[string]string{placedLabel: "true", labelerRateLabel: strconv.Itoa(rate)}
			_, err := admin.CoreV1().Pods(env.Namespace).Create(ctx, p, metav1.CreateOptions{})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return nil, 0, 0, fmt.Errorf("create pod: %w", err)
		}
	}
	select {
	case <-labelled.done:
	case <-time.After(30 * time.Second):
		// Measured what arrived; the table shows how many were labelled.
	}
	s, l := scheduled.snapshot(), labelled.snapshot()
	if len(l) == 0 {
		// Say what the first pod looks like, so a labeler that never labels is diagnosable.
		name := prefix + "-00000"
		p, err := admin.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, 0, 0, fmt.Errorf("no pod labelled (%d seen scheduled); get %s: %w", len(s), name, err)
		}
		return nil, 0, 0, fmt.Errorf("no pod labelled (%d seen scheduled, %d binding and %d pod events, last watch error %v); %s has labels %v", len(s), bindingEvents.Load(), podEvents.Load(), watchErr.Load(), name, p.Labels)
	}
	cancel()
	for name, at := range l {
		if sAt, ok := s[name]; ok {
			lat = append(lat, at.Sub(sAt))
		}
	}
	// Deleting propagates to the members, where the kubelets stop the
	// containers; with a hundred real pods just started, the apiservers
	// answer slowly on two cores.
	// One DeleteCollection of them all outlasts the apiserver's request
	// timeout: the pods go one request each, 16 at a time.
	delCtx, delCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer delCancel()
	if err := deletePods(delCtx, admin, sel); err != nil {
		return nil, 0, 0, fmt.Errorf("delete labeler pods: %w", err)
	}
	return lat, n, len(s), nil
}

// deletePods deletes the pods opts selects in namespace e2e, 16 requests
// at a time; pods already gone are fine.
func deletePods(ctx context.Context, client kubernetes.Interface, opts metav1.ListOptions) error {
	list, err := client.CoreV1().Pods(env.Namespace).List(ctx, opts)
	if err != nil {
		return err
	}
	sem := make(chan struct{}, 16)
	errs := make(chan error, len(list.Items))
	for _, p := range list.Items {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			err := client.CoreV1().Pods(env.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				err = nil
			}
			errs <- err
		}()
	}
	var all []error
	for range list.Items {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}
