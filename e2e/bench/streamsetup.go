package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// Issue #27's targets for opening a stream, medians as ratios to Karmada's
// cluster proxy measured in the same run.
const (
	to101Ceiling  = 1.15
	toExitCeiling = 1.10
)

// streamConcurrency is how many clients open streams at once in
// stream-setup: one, and an executor fleet's burst.
var streamConcurrency = []int{1, 16}

// upgradeTimer remembers when an upgrade request's 101 Switching Protocols
// arrived.
type upgradeTimer struct {
	mu sync.Mutex
	at time.Time
}

func (t *upgradeTimer) switched() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.at
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// timed copies cfg so that its upgrade requests note in the timer when
// their 101 came back: client-go wraps the SPDY and the WebSocket upgrade
// round trippers in WrapTransport (under the credentials), and both return
// from RoundTrip as soon as the 101's headers are read.
func timed(cfg *rest.Config) (*rest.Config, *upgradeTimer) {
	c := rest.CopyConfig(cfg)
	t := &upgradeTimer{}
	prev := c.WrapTransport
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			res, err := rt.RoundTrip(req)
			if err == nil && res.StatusCode == http.StatusSwitchingProtocols {
				t.mu.Lock()
				t.at = time.Now()
				t.mu.Unlock()
			}
			return res, err
		})
	}
	return c, t
}

// streamPath is one way to the bench pods' exec and attach.
type streamPath struct {
	name string
	cfg  *rest.Config
	// clusterProxy is what the others are compared with; to101, toExit
	// and job are a path's targets, ceilings of its ratio to it (0: none).
	clusterProxy       bool
	to101, toExit, job float64
}

// gatewayPath is a gateway path with issue #27's targets.
func gatewayPath(name string, cfg *rest.Config) streamPath {
	return streamPath{name: name, cfg: cfg, to101: to101Ceiling, toExit: toExitCeiling, job: toExitCeiling}
}

// memberCopyCacheTTL is the --member-copy-cache-ttl of the third gateway,
// admissionCacheTTL the --admission-cache-ttl of the fourth.
const memberCopyCacheTTL, admissionCacheTTL = "5s", "5s"

// streamPaths are the gateway in passthrough (the environment's) and with
// --admission-cache-ttl, in authorize mode as it starts by default and with
// --member-copy-cache-ttl (three more gateway processes, started here; stop
// stops them), Karmada's cluster proxy and, when withMember, the member's
// own apiserver.
func (r *Runner) streamPaths(ctx context.Context, withMember bool) (out []streamPath, stop func(), err error) {
	p, err := r.rewrittenPaths(env.UserExecOnly)
	if err != nil {
		return nil, nil, err
	}
	var gws extraGateways
	out = []streamPath{gatewayPath("gateway passthrough", p.gateway)}
	for _, g := range []struct {
		name, label string
		args        []string
	}{
		{"gateway-passthrough-cached", "gateway passthrough, admission cache " + admissionCacheTTL, []string{"--admission-cache-ttl=" + admissionCacheTTL}},
		{"gateway-authorize", "gateway authorize", []string{"--auth-mode=authorize"}},
		{"gateway-authorize-cached", "gateway authorize, copy cache " + memberCopyCacheTTL, []string{"--auth-mode=authorize", "--member-copy-cache-ttl=" + memberCopyCacheTTL}},
	} {
		x, err := gws.start(ctx, r.Env, g.name, g.args...)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, gatewayPath(g.label, unlimited(x.Config(env.UserExecOnly))))
	}
	out = append(out, streamPath{name: "cluster proxy", cfg: p.direct, clusterProxy: true})
	if withMember {
		out = append(out, streamPath{name: "member", cfg: unlimited(r.Env.MemberConfig(r.member))})
	}
	return out, gws.stop, nil
}

// extraGateways are the gateway processes a section starts beside the
// environment's, stopped together.
type extraGateways []*env.ExtraGateway

// start starts a gateway named name with args; when it fails, the ones
// started before are stopped.
func (g *extraGateways) start(ctx context.Context, e *env.Env, name string, args ...string) (*env.ExtraGateway, error) {
	x, err := e.StartExtraGateway(ctx, name, args...)
	if err != nil {
		g.stop()
		return nil, fmt.Errorf("start a gateway with %s: %w", strings.Join(args, " "), err)
	}
	*g = append(*g, x)
	return x, nil
}

func (g *extraGateways) stop() {
	for _, x := range *g {
		x.Stop()
	}
}

// streamTimes are one path's time to 101 and time to exit status.
type streamTimes struct {
	mu     sync.Mutex
	to101  []time.Duration
	toExit Load
}

// openTrue runs `exec -- true` on the shell pod over proto and records its
// times. The executor is built before the clock starts: that is client
// work, the same on every path.
func (s *streamTimes) openTrue(ctx context.Context, cfg *rest.Config, proto string, u *url.URL) {
	c, timer := timed(cfg)
	ex, err := newExecutor(c, proto, u)
	var t0 time.Time
	if err == nil {
		t0 = time.Now()
		err = streamExec(ctx, ex, []string{"true"}, proto, false, nil, io.Discard)
	}
	el := time.Since(t0)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && timer.switched().IsZero() {
		err = fmt.Errorf("exec over %s ended without a 101", proto)
	}
	if err != nil {
		s.toExit.Errors++
		if s.toExit.FirstErr == nil {
			s.toExit.FirstErr = err
		}
		return
	}
	s.to101 = append(s.to101, timer.switched().Sub(t0))
	s.toExit.Latencies = append(s.toExit.Latencies, el)
}

// StreamSetup measures what opening a stream costs, where the gateway
// spends it: time to the 101 and time to the exit status of `exec -- true`
// over SPDY and WebSocket, at concurrency 1 and 16, through the gateway in
// both modes, Karmada's cluster proxy and the member, interleaved.
func (r *Runner) StreamSetup(ctx context.Context) (*Table, error) {
	ps, stop, err := r.streamPaths(ctx, true)
	if err != nil {
		return nil, err
	}
	defer stop()
	t := &Table{
		Title:   "Stream setup: time to 101 and to the exit status of `exec -- true`",
		Columns: []string{"measurement", "protocol", "clients", "path", "p50", "p90", "p50 ratio", "p90 ratio", "target", "verdict"},
		Note: fmt.Sprintf("%d sessions of `exec -- true` per path, protocol and concurrency, in %d interleaved rounds (paths forwards, then backwards), "+
			"after one warm-up session per path; each session on a new connection as kubectl opens it (client-go's own executors), timed from the first byte sent, "+
			"the executor built beforehand. Time to 101: until the response headers of `101 Switching Protocols`; to exit: until the executor returned the exit status. "+
			"Ratios are to the cluster proxy in the same run. Paths: the gateway in passthrough (`%s`, admission GET as the caller first; and another gateway process "+
			"with `--admission-cache-ttl=%s`, which reuses the admission GET's 200) and in authorize mode "+
			"(a third gateway process, authorization cached for `--auth-cache-ttl`; and a fourth with `--member-copy-cache-ttl=%s`), all forwarding to the cluster proxy; the cluster proxy directly; "+
			"the member's kube-apiserver directly (user admin: the bench user exists only in Karmada).",
			r.Sizes.StreamSamples, r.Sizes.Rounds, env.UserExecOnly, admissionCacheTTL, memberCopyCacheTTL) + r.proxyNote("Cluster proxy"),
	}
	return t, r.streamSetup(ctx, ps, t)
}

// streamSetup adds to t the stream-setup rows of every path in ps, the
// cluster proxy's among them.
func (r *Runner) streamSetup(ctx context.Context, ps []streamPath, t *Table) error {
	var err error
	for _, proto := range protocols {
		urls := make([]*url.URL, len(ps))
		for i, p := range ps {
			if urls[i], err = podURL(p.cfg, shellPod, "exec", &corev1.PodExecOptions{Container: containerName, Command: []string{"true"}, Stdout: true, Stderr: true}); err != nil {
				return err
			}
			// Warm-up, not counted; a path that never works fails below,
			// with its error, rather than on one session's hiccup here.
			(&streamTimes{}).openTrue(ctx, p.cfg, proto, urls[i])
		}
		for _, c := range streamConcurrency {
			r.logf("stream setup over %s, %d clients", proto, c)
			perWorker := max(1, (r.Sizes.StreamSamples/r.Sizes.Rounds+c-1)/c)
			times := make([]*streamTimes, len(ps))
			fns := make([]func() Load, len(ps))
			for i, p := range ps {
				times[i] = &streamTimes{}
				fns[i] = func() Load {
					var wg sync.WaitGroup
					for range c {
						wg.Go(func() {
							for range perWorker {
								times[i].openTrue(ctx, p.cfg, proto, urls[i])
							}
						})
					}
					wg.Wait()
					return Load{}
				}
			}
			InterleaveAll(r.Sizes.Rounds, fns...)
			ref := -1
			for i, p := range ps {
				if err := times[i].toExit.Err(); err != nil {
					return fmt.Errorf("%s over %s at %d clients: %w", p.name, proto, c, err)
				}
				if p.clusterProxy {
					ref = i
				}
			}
			for _, m := range []struct {
				name    string
				samples func(*streamTimes) []time.Duration
				ceiling func(streamPath) float64
			}{
				{"time to 101", func(s *streamTimes) []time.Duration { return s.to101 }, func(p streamPath) float64 { return p.to101 }},
				{"time to exit", func(s *streamTimes) []time.Duration { return s.toExit.Latencies }, func(p streamPath) float64 { return p.toExit }},
			} {
				ref50, ref90 := Percentile(m.samples(times[ref]), 50), Percentile(m.samples(times[ref]), 90)
				for i, p := range ps {
					s := m.samples(times[i])
					p50, p90 := Percentile(s, 50), Percentile(s, 90)
					r50 := Ratio(float64(p50), float64(ref50))
					target, verdict := "", NoTarget
					if c := m.ceiling(p); c > 0 {
						target, verdict = fmt.Sprintf("≤ %.2f×", c), AtMost(r50, c)
					}
					t.Add(m.name, proto, fmt.Sprint(c), p.name, FormatDuration(p50), FormatDuration(p90),
						FormatRatio(r50), FormatRatio(Ratio(float64(p90), float64(ref90))), target, string(verdict))
				}
			}
			if n := times[0].toExit.Errors; n > 0 {
				t.Note += fmt.Sprintf(" %s over %s at %d clients: %d sessions failed (first: %v).", ps[0].name, proto, c, n, times[0].toExit.FirstErr)
			}
		}
	}
	return nil
}

// JobReplay replays the stream calls of one GitLab Runner job (kubernetes
// executor, attach strategy, as e2e/executors_gitlab_test.go replays them)
// end to end: GET the pod, the tailLines=10 log probe, attach the build
// container's stdin and write the job script on it, a read-logs exec that
// reads the job's output once it is complete, a legacy-strategy exec of sh
// with a script on stdin, then drop the attach.
func (r *Runner) JobReplay(ctx context.Context) (*Table, error) {
	ps, stop, err := r.streamPaths(ctx, false)
	if err != nil {
		return nil, err
	}
	defer stop()
	t := &Table{
		Title:   "GitLab Runner job replay: one job's calls end to end",
		Columns: []string{"path", "p50", "p90", "p50 ratio", "target", "verdict"},
		Note: fmt.Sprintf("%d jobs per path in interleaved rounds, over SPDY as the runner's client-go does, user %s: GET pod, pods/log?tailLines=10, "+
			"attach (stdin) to the build container and the job script written on it, an exec reading the job's output once complete (read-logs), "+
			"an exec of sh with a script on stdin (legacy strategy), attach dropped. Ratio to the cluster proxy; the target is stream setup's time to exit.",
			r.Sizes.JobReplays, env.UserExecOnly) + r.proxyNote("Cluster proxy"),
	}
	return t, r.jobReplay(ctx, ps, t)
}

// jobReplay adds to t the job-replay rows of every path in ps, the
// cluster proxy's among them.
func (r *Runner) jobReplay(ctx context.Context, ps []streamPath, t *Table) error {
	var (
		mu   sync.Mutex
		seq  int
		next = func() int { mu.Lock(); defer mu.Unlock(); seq++; return seq }
	)
	loads := InterleaveAll(max(2, r.Sizes.Rounds), func() []func() Load {
		var fns []func() Load
		for _, p := range ps {
			fns = append(fns, func() Load {
				var l Load
				for range max(1, r.Sizes.JobReplays/max(2, r.Sizes.Rounds)) {
					t0 := time.Now()
					if err := replayJob(ctx, p.cfg, next()); err != nil {
						l.Errors++
						if l.FirstErr == nil {
							l.FirstErr = fmt.Errorf("%s: %w", p.name, err)
						}
						continue
					}
					l.Latencies = append(l.Latencies, time.Since(t0))
				}
				return l
			})
		}
		return fns
	}()...)
	var ref Load
	for i, p := range ps {
		if p.clusterProxy {
			ref = loads[i]
		}
	}
	for i, p := range ps {
		if err := loads[i].Err(); err != nil {
			return err
		}
		p50 := Percentile(loads[i].Latencies, 50)
		r50 := Ratio(float64(p50), float64(Percentile(ref.Latencies, 50)))
		target, verdict := "", NoTarget
		if p.job > 0 {
			target, verdict = fmt.Sprintf("≤ %.2f×", p.job), AtMost(r50, p.job)
		}
		t.Add(p.name, FormatDuration(p50), FormatDuration(Percentile(loads[i].Latencies, 90)), FormatRatio(r50), target, string(verdict))
	}
	return nil
}

// replayJob is one job through cfg; n names its files.
func replayJob(ctx context.Context, cfg *rest.Config, n int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Pods(env.Namespace).Get(ctx, jobPod, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("get pod: %w", err)
	}
	tail := int64(10)
	logs, err := cs.CoreV1().Pods(env.Namespace).GetLogs(jobPod, &corev1.PodLogOptions{Container: containerName, TailLines: &tail}).DoRaw(ctx)
	if err != nil || !strings.HasSuffix(string(logs), "boot-12\n") {
		return fmt.Errorf("log probe: %q, %v", logs, err)
	}

	logFile := fmt.Sprintf("/tmp/job-%d-%d.log", time.Now().UnixNano(), n)
	au, err := podURL(cfg, jobPod, "attach", &corev1.PodAttachOptions{Container: containerName, Stdin: true})
	if err != nil {
		return err
	}
	attach, err := newExecutor(cfg, "SPDY", au)
	if err != nil {
		return err
	}
	stdinR, stdinW := io.Pipe()
	attachCtx, dropAttach := context.WithCancel(ctx)
	attachDone := make(chan error, 1)
	go func() {
		attachDone <- attach.StreamWithContext(attachCtx, remotecommand.StreamOptions{Stdin: stdinR})
	}()
	defer func() {
		dropAttach()
		_ = stdinW.Close()
		<-attachDone
	}()
	script := fmt.Sprintf("{ echo job-%[1]d-1; echo job-%[1]d-2; echo job-%[1]d-end; } >> %[2]s\n", n, logFile)
	if _, err := io.WriteString(stdinW, script); err != nil {
		return fmt.Errorf("write the job script on the attach: %w", err)
	}

	readLogs := []string{"sh", "-c", fmt.Sprintf("while ! grep -q job-%d-end %s 2>/dev/null; do sleep 0.01; done; cat %[2]s; rm %[2]s", n, logFile)}
	out := &firstByte{}
	if err := execPod(ctx, cfg, "SPDY", jobPod, readLogs, nil, out); err != nil {
		return fmt.Errorf("read-logs: %w", err)
	}
	if want := fmt.Sprintf("job-%[1]d-1\njob-%[1]d-2\njob-%[1]d-end\n", n); string(out.buf) != want {
		return fmt.Errorf("read-logs read %q, want %q", out.buf, want)
	}
	out = &firstByte{}
	if err := execPod(ctx, cfg, "SPDY", jobPod, []string{"sh"}, strings.NewReader("echo legacy-$((6*7))\n"), out); err != nil {
		return fmt.Errorf("legacy exec: %w", err)
	}
	if string(out.buf) != "legacy-42\n" {
		return fmt.Errorf("legacy exec printed %q, want legacy-42", out.buf)
	}
	return nil
}
