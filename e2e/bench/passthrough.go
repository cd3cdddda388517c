package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// Passthrough targets from issue #15.
const (
	passthroughP50Limit = 1.05 // gateway p50 at most 5% above direct
	passthroughRPSFloor = 0.95 // gateway keeps at least 95% of direct req/s
	// passthroughGETCPULimit is the gateway's CPU per proxied GET.
	passthroughGETCPULimit = 100 * time.Microsecond
)

// Passthrough measures GET of one pod and LIST of ListPods pods through the
// gateway and directly against karmada-apiserver, closed loop at each
// concurrency, interleaved in rounds.
func (r *Runner) Passthrough(ctx context.Context) (*Table, error) {
	p, err := r.passthroughPaths(env.UserExecOnly)
	if err != nil {
		return nil, err
	}
	gw, direct, err := p.clients()
	if err != nil {
		return nil, err
	}
	listOpts := metav1.ListOptions{LabelSelector: listLabel + "=true"}
	// The pod count is checked once so the LIST rows are about what they say.
	list, err := direct.CoreV1().Pods(env.Namespace).List(ctx, listOpts)
	if err != nil {
		return nil, err
	}
	if len(list.Items) != r.Sizes.ListPods {
		return nil, fmt.Errorf("LIST returns %d pods, want %d", len(list.Items), r.Sizes.ListPods)
	}
	ops := []struct {
		name string
		call func(kubernetes.Interface) func(context.Context) error
	}{
		{"GET pod", func(c kubernetes.Interface) func(context.Context) error {
			return func(ctx context.Context) error {
				_, err := c.CoreV1().Pods(env.Namespace).Get(ctx, shellPod, metav1.GetOptions{})
				return err
			}
		}},
		{fmt.Sprintf("LIST %d pods", r.Sizes.ListPods), func(c kubernetes.Interface) func(context.Context) error {
			return func(ctx context.Context) error {
				_, err := c.CoreV1().Pods(env.Namespace).List(ctx, listOpts)
				return err
			}
		}},
	}
	t := &Table{
		Title: "Passthrough: gateway vs karmada-apiserver",
		Columns: []string{"request", "concurrency", "p50 gateway", "p50 direct", "p50 ratio",
			"p99 gateway", "p99 direct", "req/s gateway", "req/s direct", "req/s ratio", "gateway CPU/req", "target", "verdict"},
		Note: fmt.Sprintf("Closed loop, %d interleaved rounds of %s per path and row; ratio is gateway/direct. User exec-only, JSON. "+
			"Gateway CPU/req is the gateway process's CPU time (process_cpu_seconds_total) over its rounds divided by its requests.",
			r.Sizes.Rounds, r.Sizes.RoundDuration),
	}
	for _, op := range ops {
		for _, c := range r.Sizes.Concurrency {
			r.logf("passthrough %s at concurrency %d", op.name, c)
			// Warm both paths (connections, caches) outside the figures.
			RunLoad(ctx, c, 200*time.Millisecond, op.call(gw))
			RunLoad(ctx, c, 200*time.Millisecond, op.call(direct))
			// The gateway's own CPU seconds over its rounds, per request,
			// show what the extra hop costs on a machine where the gateway
			// shares cores with the apiserver it is measured against.
			var (
				gwCPU  float64
				cpuErr error
			)
			g, d := Interleave(r.Sizes.Rounds,
				func() Load {
					before, err := r.gatewayProcess(ctx)
					l := RunLoad(ctx, c, r.Sizes.RoundDuration, op.call(gw))
					after, err2 := r.gatewayProcess(ctx)
					if e := eitherErr(err, err2); e != nil {
						cpuErr = e
					} else {
						gwCPU += after.cpu - before.cpu
					}
					return l
				},
				func() Load { return RunLoad(ctx, c, r.Sizes.RoundDuration, op.call(direct)) })
			if err := g.Err(); err != nil {
				return nil, fmt.Errorf("%s through the gateway: %w", op.name, err)
			}
			if err := d.Err(); err != nil {
				return nil, fmt.Errorf("%s direct: %w", op.name, err)
			}
			cpuPerReq, cpu := "n/a", math.NaN()
			if cpuErr == nil {
				cpu = gwCPU / float64(len(g.Latencies)) * 1e9
				cpuPerReq = FormatDuration(time.Duration(cpu))
			}
			gp50, dp50 := Percentile(g.Latencies, 50), Percentile(d.Latencies, 50)
			p50Ratio := Ratio(float64(gp50), float64(dp50))
			rpsRatio := Ratio(g.PerSecond(), d.PerSecond())
			target, verdict := "p50 ≤ 1.05×, req/s ≥ 0.95×", Met
			if AtMost(p50Ratio, passthroughP50Limit) == Missed || AtLeast(rpsRatio, passthroughRPSFloor) == Missed {
				verdict = Missed
			}
			if op.name == "GET pod" {
				target += ", CPU/req ≤ 100µs"
				if AtMost(cpu, float64(passthroughGETCPULimit)) == Missed {
					verdict = Missed
				}
			}
			row := []string{op.name, strconv.Itoa(c),
				FormatDuration(gp50), FormatDuration(dp50), FormatRatio(p50Ratio),
				FormatDuration(Percentile(g.Latencies, 99)), FormatDuration(Percentile(d.Latencies, 99)),
				FormatRate(g.PerSecond(), ""), FormatRate(d.PerSecond(), ""), FormatRatio(rpsRatio), cpuPerReq,
				target, string(verdict)}
			if g.Errors+d.Errors > 0 {
				row[len(row)-1] += fmt.Sprintf(" (errors: gateway %d, direct %d)", g.Errors, d.Errors)
			}
			t.Add(row...)
		}
	}
	return t, nil
}
