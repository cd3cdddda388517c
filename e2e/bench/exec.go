package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// Protocols kubectl speaks for exec: SPDY, and WebSocket (v5.channel.k8s.io),
// kubectl's default since 1.31 and the one most likely to hit proxy bugs.
var protocols = []string{"SPDY", "WebSocket"}

const execThroughputFloor = 0.95 // issue #15: gateway keeps 95% of direct throughput

// execSession runs cmd in the shell pod with cfg over proto.
func execSession(ctx context.Context, cfg *rest.Config, proto string, cmd []string, stdin io.Reader, stdout io.Writer) error {
	return execPod(ctx, cfg, proto, shellPod, cmd, stdin, stdout)
}

// execPod runs cmd in pod's container with cfg over proto, to its exit status.
func execPod(ctx context.Context, cfg *rest.Config, proto, pod string, cmd []string, stdin io.Reader, stdout io.Writer) error {
	return execIn(ctx, cfg, proto, pod, cmd, false, stdin, stdout)
}

// execIn is execPod with, when tty, a terminal as `kubectl exec -it` asks
// for one: no stderr stream then, the terminal's output is stdout.
func execIn(ctx context.Context, cfg *rest.Config, proto, pod string, cmd []string, tty bool, stdin io.Reader, stdout io.Writer) error {
	u, err := podURL(cfg, pod, "exec", &corev1.PodExecOptions{Container: containerName, Command: cmd, Stdin: stdin != nil, Stdout: true, Stderr: !tty, TTY: tty})
	if err != nil {
		return err
	}
	ex, err := newExecutor(cfg, proto, u)
	if err != nil {
		return err
	}
	return streamExec(ctx, ex, cmd, proto, tty, stdin, stdout)
}

// podURL is the URL of pod's subresource sub below cfg's host, with opts
// as its query, as client-go builds it for kubectl.
func podURL(cfg *rest.Config, pod, sub string, opts runtime.Object) (*url.URL, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return cs.CoreV1().RESTClient().Post().Namespace(env.Namespace).Resource("pods").Name(pod).SubResource(sub).
		VersionedParams(opts, scheme.ParameterCodec).URL(), nil
}

// newExecutor is kubectl's executor for u over proto.
func newExecutor(cfg *rest.Config, proto string, u *url.URL) (remotecommand.Executor, error) {
	switch proto {
	case "SPDY":
		return remotecommand.NewSPDYExecutor(cfg, "POST", u)
	case "WebSocket":
		return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	}
	return nil, fmt.Errorf("unknown protocol %q", proto)
}

// streamExec runs ex to its exit status, with a terminal when tty (as ex's
// URL asked for); cmd and proto name it in errors.
func streamExec(ctx context.Context, ex remotecommand.Executor, cmd []string, proto string, tty bool, stdin io.Reader, stdout io.Writer) error {
	var stderr bytes.Buffer
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Tty: tty}
	if !tty {
		opts.Stderr = &stderr
	}
	if err := ex.StreamWithContext(ctx, opts); err != nil {
		return fmt.Errorf("exec %s over %s: %w (stderr %q)", strings.Join(cmd, " "), proto, err, stderr.String())
	}
	return nil
}

// firstByte counts what is written and remembers when the first byte came.
type firstByte struct {
	mu    sync.Mutex
	n     int64
	first time.Time
	buf   []byte // the first bytes, for checks
}

func (w *firstByte) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() && len(p) > 0 {
		w.first = time.Now()
	}
	if len(w.buf) < 64 {
		w.buf = append(w.buf, p[:min(len(p), 64-len(w.buf))]...)
	}
	w.n += int64(len(p))
	return len(p), nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Exec measures session setup (request to first stdout byte), stdout and
// stdin throughput over SPDY and WebSocket, through the gateway and through
// the cluster proxy it rewrites to.
func (r *Runner) Exec(ctx context.Context) (*Table, error) {
	p, err := r.rewrittenPaths(env.UserExecOnly)
	if err != nil {
		return nil, err
	}
	t := &Table{
		Title:   "Exec: gateway vs Karmada cluster proxy",
		Columns: []string{"measurement", "protocol", "gateway", "direct", "ratio", "target", "verdict"},
		Note: fmt.Sprintf("Setup: %d sessions of `echo` per path, request to first stdout byte. Stdout: `head -c %s /dev/zero` ×%d per path; "+
			"stdin: %s into `wc -c` ×%d per path; throughput over the whole session. Direct is the cluster proxy URL of the member (the gateway's upstream).",
			r.Sizes.SetupSamples, FormatBytes(float64(r.Sizes.ExecBytes)), r.Sizes.ExecRounds, FormatBytes(float64(r.Sizes.StdinBytes)), r.Sizes.ExecRounds) + r.proxyNote("Direct path"),
	}
	for _, proto := range protocols {
		r.logf("exec setup over %s", proto)
		setup := func(cfg *rest.Config) func() Load {
			return func() Load {
				var l Load
				for range max(1, r.Sizes.SetupSamples/r.Sizes.Rounds) {
					w := &firstByte{}
					t0 := time.Now()
					if err := execSession(ctx, cfg, proto, []string{"echo", "ready"}, nil, w); err != nil {
						l.Errors++
						l.FirstErr = err
						continue
					}
					l.Latencies = append(l.Latencies, w.first.Sub(t0))
				}
				return l
			}
		}
		g, d := Interleave(r.Sizes.Rounds, setup(p.gateway), setup(p.direct))
		if err := eitherErr(g.Err(), d.Err()); err != nil {
			return nil, fmt.Errorf("exec setup over %s: %w", proto, err)
		}
		for _, q := range []float64{50, 99} {
			gq, dq := Percentile(g.Latencies, q), Percentile(d.Latencies, q)
			t.Add(fmt.Sprintf("setup p%.0f", q), proto, FormatDuration(gq), FormatDuration(dq), FormatRatio(Ratio(float64(gq), float64(dq))), "", string(NoTarget))
		}
	}
	for _, proto := range protocols {
		r.logf("exec stdout throughput over %s (%s per transfer)", proto, FormatBytes(float64(r.Sizes.ExecBytes)))
		size := r.Sizes.ExecBytes
		stdout := func(cfg *rest.Config) func() Load {
			return func() Load {
				w := &firstByte{}
				t0 := time.Now()
				err := execSession(ctx, cfg, proto, []string{"head", "-c", strconv.FormatInt(size, 10), "/dev/zero"}, nil, w)
				if err == nil && w.n != size {
					err = fmt.Errorf("received %d bytes, want %d", w.n, size)
				}
				if err != nil {
					return Load{Errors: 1, FirstErr: err}
				}
				el := time.Since(t0)
				return Load{Latencies: []time.Duration{el}, Elapsed: el}
			}
		}
		g, d := Interleave(r.Sizes.ExecRounds, stdout(p.gateway), stdout(p.direct))
		if err := eitherErr(g.Err(), d.Err()); err != nil {
			return nil, fmt.Errorf("exec stdout over %s: %w", proto, err)
		}
		gr, dr := g.PerSecond()*float64(size), d.PerSecond()*float64(size)
		ratio := Ratio(gr, dr)
		t.Add("stdout throughput", proto, FormatRate(gr, "B"), FormatRate(dr, "B"), FormatRatio(ratio), "≥ 0.95×", string(AtLeast(ratio, execThroughputFloor)))
	}
	for _, proto := range protocols {
		r.logf("exec stdin throughput over %s (%s per transfer)", proto, FormatBytes(float64(r.Sizes.StdinBytes)))
		size := r.Sizes.StdinBytes
		stdin := func(cfg *rest.Config) func() Load {
			return func() Load {
				w := &firstByte{}
				t0 := time.Now()
				err := execSession(ctx, cfg, proto, []string{"wc", "-c"}, io.LimitReader(zeros{}, size), w)
				if got := strings.TrimSpace(string(w.buf)); err == nil && got != strconv.FormatInt(size, 10) {
					err = fmt.Errorf("wc -c counted %q bytes, want %d", got, size)
				}
				if err != nil {
					return Load{Errors: 1, FirstErr: err}
				}
				el := time.Since(t0)
				return Load{Latencies: []time.Duration{el}, Elapsed: el}
			}
		}
		g, d := Interleave(r.Sizes.ExecRounds, stdin(p.gateway), stdin(p.direct))
		if err := eitherErr(g.Err(), d.Err()); err != nil {
			return nil, fmt.Errorf("exec stdin over %s: %w", proto, err)
		}
		gr, dr := g.PerSecond()*float64(size), d.PerSecond()*float64(size)
		ratio := Ratio(gr, dr)
		t.Add("stdin throughput", proto, FormatRate(gr, "B"), FormatRate(dr, "B"), FormatRatio(ratio), "≥ 0.95×", string(AtLeast(ratio, execThroughputFloor)))
	}
	return t, nil
}

func eitherErr(gateway, direct error) error {
	switch {
	case gateway != nil:
		return fmt.Errorf("through the gateway: %w", gateway)
	case direct != nil:
		return fmt.Errorf("direct: %w", direct)
	}
	return nil
}
