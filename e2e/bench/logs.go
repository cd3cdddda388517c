package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// Logs follows the tick pod's log through the gateway and the cluster proxy
// at the same time and compares when each line arrives, then reads the
// bulk pod's whole log through each, interleaved, for throughput.
func (r *Runner) Logs(ctx context.Context) (*Table, error) {
	p, err := r.rewrittenPaths(env.UserExecOnly)
	if err != nil {
		return nil, err
	}
	gwClient, directClient, err := p.clients()
	if err != nil {
		return nil, err
	}
	n := r.Sizes.LogLines
	follow := func(ctx context.Context, c kubernetes.Interface, a *arrivals, written *sync.Map) error {
		zero := int64(0)
		// Each line is numbered; the time it was written is the one the
		// container runtime recorded as it took the line (timestamps=true).
		s, err := c.CoreV1().Pods(env.Namespace).GetLogs(logTickPod, &corev1.PodLogOptions{Follow: true, TailLines: &zero, Timestamps: true}).Stream(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		sc := bufio.NewScanner(s)
		for sc.Scan() {
			now := time.Now()
			ts, line, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
			at, err := time.Parse(time.RFC3339Nano, ts)
			if !ok || err != nil {
				return fmt.Errorf("log line %q does not start with a timestamp: %v", sc.Text(), err)
			}
			written.Store(line, at)
			a.see(line, now)
			select {
			case <-a.done:
				return nil
			default:
			}
		}
		if err := sc.Err(); err != nil {
			return err
		}
		return io.ErrUnexpectedEOF
	}
	r.logf("logs -f: following %d lines on both paths", n)
	// The two follows start a few lines apart; only lines seen on both are
	// compared.
	gw, direct := newArrivals(n), newArrivals(n)
	var written sync.Map
	fctx, cancel := context.WithTimeout(ctx, time.Duration(n)*100*time.Millisecond+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var gErr, dErr error
	wg.Go(func() { gErr = follow(fctx, gwClient, gw, &written) })
	wg.Go(func() { dErr = follow(fctx, directClient, direct, &written) })
	wg.Wait()
	if err := eitherErr(gErr, dErr); err != nil {
		return nil, fmt.Errorf("logs -f: %w", err)
	}
	g, d := gw.snapshot(), direct.snapshot()
	added := addedLatency(g, d)
	endToEnd := func(at map[string]time.Time) []time.Duration {
		var out []time.Duration
		for line, t := range at {
			if w, ok := written.Load(line); ok {
				out = append(out, t.Sub(w.(time.Time)))
			}
		}
		return out
	}
	ge, de := endToEnd(g), endToEnd(d)

	r.logf("logs: reading %s through both paths", FormatBytes(float64(r.Sizes.LogBytes)))
	size := r.Sizes.LogBytes / 100 * 100
	read := func(c kubernetes.Interface) func() Load {
		return func() Load {
			t0 := time.Now()
			s, err := c.CoreV1().Pods(env.Namespace).GetLogs(logBulkPod, &corev1.PodLogOptions{LimitBytes: &size}).Stream(ctx)
			if err != nil {
				return Load{Errors: 1, FirstErr: err}
			}
			defer s.Close()
			got, err := io.Copy(io.Discard, s)
			if err == nil && got != size {
				err = fmt.Errorf("read %d log bytes, want %d (is the bulk log complete?)", got, size)
			}
			if err != nil {
				return Load{Errors: 1, FirstErr: err}
			}
			el := time.Since(t0)
			return Load{Latencies: []time.Duration{el}, Elapsed: el}
		}
	}
	gl, dl := Interleave(max(2, r.Sizes.ExecRounds*2), read(gwClient), read(directClient))
	if err := eitherErr(gl.Err(), dl.Err()); err != nil {
		return nil, fmt.Errorf("log throughput: %w", err)
	}
	gRate, dRate := gl.PerSecond()*float64(size), dl.PerSecond()*float64(size)

	t := &Table{
		Title:   "Logs: gateway vs Karmada cluster proxy",
		Columns: []string{"measurement", "gateway", "direct", "ratio"},
		Note: fmt.Sprintf("logs -f: %d lines (one every 20ms; written at the time the container runtime recorded for it, timestamps=true) followed on both paths at once; added latency is, per line, "+
			"arrival through the gateway minus arrival through the cluster proxy; write→read includes containerd's CRI log file and the kubelet reading it. Throughput: a %s log read whole, %d interleaved reads per path.",
			n, FormatBytes(float64(r.Sizes.LogBytes)), max(2, r.Sizes.ExecRounds*2)) + r.proxyNote("Direct path"),
	}
	t.Add("logs -f added latency per line p50", FormatDuration(Percentile(added, 50)), "", "")
	t.Add("logs -f added latency per line p99", FormatDuration(Percentile(added, 99)), "", "")
	t.Add("logs -f write→read p50", FormatDuration(Percentile(ge, 50)), FormatDuration(Percentile(de, 50)), FormatRatio(Ratio(float64(Percentile(ge, 50)), float64(Percentile(de, 50)))))
	t.Add("logs -f write→read p99", FormatDuration(Percentile(ge, 99)), FormatDuration(Percentile(de, 99)), FormatRatio(Ratio(float64(Percentile(ge, 99)), float64(Percentile(de, 99)))))
	t.Add("log throughput", FormatRate(gRate, "B"), FormatRate(dRate, "B"), FormatRatio(Ratio(gRate, dRate)))
	return t, nil
}
