package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// Issue #41's targets for --member-access=direct, as ratios to Karmada's
// cluster proxy measured in the same run: opening a stream, a CI job, the
// bytes of an exec, and what the federation's control plane spends per MiB
// streamed.
const (
	direct101Ceiling        = 0.8
	directExitCeiling       = 0.9
	directJobCeiling        = 0.9
	directThroughputFloor   = 1.2
	directControlPlaneShare = 0.05
)

// directPaths are Karmada's cluster proxy, the environment's gateway
// (passthrough, through the cluster proxy), gateways reaching the member
// directly in passthrough and authorize mode (two processes, started here;
// stop stops them) and the member's kube-apiserver itself, the limit.
func (r *Runner) directPaths(ctx context.Context) (out []streamPath, stop func(), err error) {
	p, err := r.rewrittenPaths(env.UserExecOnly)
	if err != nil {
		return nil, nil, err
	}
	var gws extraGateways
	out = []streamPath{
		{name: "cluster proxy", cfg: p.direct, clusterProxy: true},
		{name: "gateway passthrough, cluster proxy", cfg: p.gateway},
	}
	for _, mode := range []string{"passthrough", "authorize"} {
		x, err := gws.start(ctx, r.Env, "gateway-"+mode+"-direct", "--auth-mode="+mode, "--member-access=direct")
		if err != nil {
			return nil, nil, err
		}
		out = append(out, streamPath{
			name: "gateway " + mode + ", direct", cfg: unlimited(x.Config(env.UserExecOnly)),
			to101: direct101Ceiling, toExit: directExitCeiling, job: directJobCeiling,
		})
	}
	out = append(out, streamPath{name: "member", cfg: unlimited(r.Env.MemberConfig(r.member))})
	return out, gws.stop, nil
}

// DirectAccess measures --member-access=direct against Karmada's cluster
// proxy, everything in one run: stream setup, a GitLab Runner job,
// exec throughput, and the CPU karmada-apiserver and the aggregated
// apiserver spend per MiB streamed.
func (r *Runner) DirectAccess(ctx context.Context) (*Table, error) {
	ps, stop, err := r.directPaths(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	setup := &Table{Columns: []string{"measurement", "protocol", "clients", "path", "p50", "p90", "p50 ratio", "p90 ratio", "target", "verdict"}}
	if err := r.streamSetup(ctx, ps, setup); err != nil {
		return nil, err
	}
	job := &Table{Columns: []string{"path", "p50", "p90", "p50 ratio", "target", "verdict"}}
	if err := r.jobReplay(ctx, ps, job); err != nil {
		return nil, err
	}
	t := &Table{
		Title:   "Direct member access: the gateway reaching the member itself vs Karmada's cluster proxy",
		Columns: []string{"measurement", "protocol", "clients", "path", "p50 or rate", "p90", "ratio", "p90 ratio", "target", "verdict"},
		Note: fmt.Sprintf("Paths: Karmada's cluster proxy (the reference of every ratio); the environment's gateway in passthrough through it; "+
			"two gateway processes with `--member-access=direct`, in passthrough and in authorize mode; the member's kube-apiserver itself, the limit (user admin). "+
			"Stream setup: %d sessions of `exec -- true` per path, protocol and concurrency, interleaved (stream-setup's method). "+
			"Job: %d GitLab Runner jobs per path (job-replay's method). Throughput: stdout `head -c %s`, stdin %s into `wc -c`, ×%d per path and protocol, interleaved. "+
			"Control plane: the CPU time karmada-apiserver and karmada-aggregated-apiserver used while %s went through exec stdout on each path, beyond their idle use, per GiB.",
			r.Sizes.StreamSamples, r.Sizes.JobReplays, FormatBytes(float64(r.Sizes.ExecBytes)), FormatBytes(float64(r.Sizes.StdinBytes)),
			r.Sizes.ExecRounds, FormatBytes(float64(r.Sizes.ExecBytes*int64(r.Sizes.ExecRounds)))) + r.proxyNote("Cluster proxy"),
	}
	t.Rows = append(t.Rows, setup.Rows...)
	for _, row := range job.Rows {
		// path, p50, p90, ratio, target, verdict
		t.Add("GitLab job", "SPDY", "1", row[0], row[1], row[2], row[3], "", row[4], row[5])
	}
	if err := r.directThroughput(ctx, ps, t); err != nil {
		return nil, err
	}
	if err := r.controlPlaneCost(ctx, ps, t); err != nil {
		return nil, err
	}
	return t, nil
}

// directThroughput adds stdout and stdin throughput rows per path.
func (r *Runner) directThroughput(ctx context.Context, ps []streamPath, t *Table) error {
	for _, dir := range []string{"stdout", "stdin"} {
		for _, proto := range protocols {
			r.logf("direct access: exec %s throughput over %s", dir, proto)
			fns := make([]func() Load, len(ps))
			size := r.Sizes.ExecBytes
			if dir == "stdin" {
				size = r.Sizes.StdinBytes
			}
			for i, p := range ps {
				fns[i] = func() Load {
					el, err := transfer(ctx, p.cfg, proto, dir, size)
					if err != nil {
						return Load{Errors: 1, FirstErr: fmt.Errorf("%s: %w", p.name, err)}
					}
					return Load{Latencies: []time.Duration{el}, Elapsed: el}
				}
			}
			loads := InterleaveAll(r.Sizes.ExecRounds, fns...)
			var ref float64
			for i, p := range ps {
				if err := loads[i].Err(); err != nil {
					return fmt.Errorf("exec %s over %s: %w", dir, proto, err)
				}
				if p.clusterProxy {
					ref = loads[i].PerSecond() * float64(size)
				}
			}
			for i, p := range ps {
				rate := loads[i].PerSecond() * float64(size)
				ratio := Ratio(rate, ref)
				target, verdict := "", NoTarget
				if p.to101 > 0 { // the direct gateways
					target, verdict = fmt.Sprintf("≥ %.2f×", directThroughputFloor), AtLeast(ratio, directThroughputFloor)
				}
				t.Add(dir+" throughput", proto, "1", p.name, FormatRate(rate, "B"), "", FormatRatio(ratio), "", target, string(verdict))
			}
		}
	}
	return nil
}

// transfer is one exec moving size bytes on stdout or stdin, timed.
func transfer(ctx context.Context, cfg *rest.Config, proto, dir string, size int64) (time.Duration, error) {
	w := &firstByte{}
	t0 := time.Now()
	var err error
	if dir == "stdout" {
		err = execSession(ctx, cfg, proto, []string{"head", "-c", strconv.FormatInt(size, 10), "/dev/zero"}, nil, w)
		if err == nil && w.n != size {
			err = fmt.Errorf("received %d bytes, want %d", w.n, size)
		}
	} else {
		err = execSession(ctx, cfg, proto, []string{"wc", "-c"}, io.LimitReader(zeros{}, size), w)
		if got := strings.TrimSpace(string(w.buf)); err == nil && got != strconv.FormatInt(size, 10) {
			err = fmt.Errorf("wc -c counted %q bytes, want %d", got, size)
		}
	}
	return time.Since(t0), err
}

// idleWindow is how long the control plane's own CPU use is measured,
// before and after the transfers, to be taken off what they cost it.
const idleWindow = 5 * time.Second

// controlPlaneCost adds, per path, the CPU time karmada-apiserver and the
// aggregated apiserver spent while exec stdout moved ExecRounds transfers
// through it, less what they use idle (their controllers' and nodes'
// requests), per GiB; the direct gateways' as a share of the cluster
// proxy's.
func (r *Runner) controlPlaneCost(ctx context.Context, ps []streamPath, t *Table) error {
	procs := []string{env.ProcessKarmadaAPIServer, env.ProcessAggregatedAPIServer}
	cpu := func() (time.Duration, error) {
		var sum time.Duration
		for _, p := range procs {
			d, err := r.Env.ProcessCPU(p)
			if err != nil {
				return 0, err
			}
			sum += d
		}
		return sum, nil
	}
	idleRate := func() (float64, error) {
		before, err := cpu()
		if err != nil {
			return 0, err
		}
		select {
		case <-time.After(idleWindow):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		after, err := cpu()
		return (after - before).Seconds() / idleWindow.Seconds(), err
	}
	idleBefore, err := idleRate()
	if err != nil {
		return err
	}
	type spent struct{ cpu, wall time.Duration }
	costs := make([]spent, len(ps))
	var moved int64 = r.Sizes.ExecBytes * int64(r.Sizes.ExecRounds)
	for i, p := range ps {
		if p.name == "member" {
			continue // nothing of the control plane's
		}
		r.logf("direct access: control plane CPU while %s streams", p.name)
		before, err := cpu()
		if err != nil {
			return err
		}
		t0 := time.Now()
		for range r.Sizes.ExecRounds {
			if _, err := transfer(ctx, p.cfg, "SPDY", "stdout", r.Sizes.ExecBytes); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
		}
		wall := time.Since(t0)
		after, err := cpu()
		if err != nil {
			return err
		}
		costs[i] = spent{cpu: after - before, wall: wall}
	}
	idleAfter, err := idleRate()
	if err != nil {
		return err
	}
	idle := (idleBefore + idleAfter) / 2
	perGiB := make([]float64, len(ps))
	ref := -1
	for i, p := range ps {
		if p.name == "member" {
			continue
		}
		extra := max(0, costs[i].cpu.Seconds()-idle*costs[i].wall.Seconds())
		perGiB[i] = extra / (float64(moved) / (1 << 30))
		if p.clusterProxy {
			ref = i
		}
	}
	for i, p := range ps {
		if p.name == "member" {
			continue
		}
		share := Ratio(perGiB[i], perGiB[ref])
		target, verdict := "", NoTarget
		if p.to101 > 0 {
			target, verdict = fmt.Sprintf("≤ %.2f×", directControlPlaneShare), AtMost(share, directControlPlaneShare)
		}
		t.Add("control plane CPU per GiB", "SPDY", "1", p.name, fmt.Sprintf("%.2f s", perGiB[i]), "", fmt.Sprintf("%.3f×", share), "", target, string(verdict))
	}
	t.Note += fmt.Sprintf(" Control plane idle: %.3f CPU-seconds a second (before and after the transfers, %s each), taken off each path's figure.", idle, idleWindow)
	return nil
}
