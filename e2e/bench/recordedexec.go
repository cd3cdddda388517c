package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// recordedExecFloor is issue #28's target: exec throughput with audit on and
// tty recording at least 95% of the same gateway with both off.
const recordedExecFloor = 0.95

// recordedExecPath is one of the paths RecordedExec compares.
type recordedExecPath struct {
	label      string
	cfg        *rest.Config
	metricsURL string // the gateway's, for its CPU; empty for the cluster proxy
	recordings string // where its recordings go; empty when it records nothing
}

// recordedExecRun is what one path did over the rounds of one measurement.
type recordedExecRun struct {
	load  Load
	bytes float64 // transferred, over every round
	cpu   float64 // the gateway process's CPU seconds during its sessions
}

// RecordedExec is what recording costs an exec stream's throughput (issue
// #28), end to end on real kubelets: TTY exec sessions (`kubectl exec -it`,
// the sessions `--record-sessions=tty` records) moving stdout, then stdin,
// over SPDY and WebSocket, through two gateway processes started for this
// section and alive together (recording and audit off; tty recording with
// an audit log) and through the cluster proxy, interleaved round by round.
// The terminal is put in raw mode first, so the bytes arrive as the command
// wrote them. Each recorded session must leave one written recording, at
// least as large as the output it moved, with no recording failure, or the
// section is not measured: a recording that silently stopped would make the
// recorded figure an unrecorded one. Each gateway's CPU per MiB is read from
// its own process_cpu_seconds_total around its sessions, so the table gives
// the CPU recording costs beside what a client sees of it.
func (r *Runner) RecordedExec(ctx context.Context) (*Table, error) {
	dir, recordings, auditLog, err := recordingDirs("bench-recorded-exec-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The caps must not cut a session short: a truncated recording stops
	// writing, which would flatter the recorded figure.
	size, rounds := r.Sizes.RecordedExecBytes, r.Sizes.RecordedExecRounds
	capMB := strconv.FormatInt(2*size>>20+1, 10)
	gateways := []recordedGateway{
		{name: "gateway-exec-unrecorded", label: "gateway, recording and audit off", args: []string{"--record-sessions=none"}},
		{name: "gateway-exec-recorded", label: "gateway, tty recording and audit log", recorded: true, args: []string{
			"--record-sessions=tty", "--record-sessions-dir=" + recordings, "--audit-log-path=" + auditLog,
			"--record-sessions-max-session-size=" + capMB, "--record-sessions-max-total-size=" + capMB}},
	}
	var paths []recordedExecPath
	for _, g := range gateways {
		r.logf("recorded exec: starting %s (%s)", g.name, strings.Join(g.args, " "))
		x, err := r.Env.StartExtraGateway(ctx, g.name, g.args...)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", g.name, err)
		}
		defer x.Stop()
		p := recordedExecPath{label: g.label, cfg: unlimited(x.Config(env.UserExecOnly)), metricsURL: x.MetricsURL()}
		if g.recorded {
			p.recordings = recordings
		}
		paths = append(paths, p)
	}
	paths = append(paths, recordedExecPath{label: "cluster proxy", cfg: unlimited(r.Env.ClusterProxyConfig(r.member, env.UserExecOnly))})

	t := &Table{
		Title: "Exec throughput with tty recording and audit: the same gateway with both off, and the cluster proxy",
		Columns: []string{"measurement", "protocol", paths[0].label, paths[1].label, paths[2].label, "ratio recorded / off",
			"gateway CPU per MiB, off", "gateway CPU per MiB, recorded", "target", "verdict"},
		Note: fmt.Sprintf("TTY exec sessions of the exec-only user (`kubectl exec -it`, which `--record-sessions=tty` records), "+
			"the terminal put in raw mode (`stty raw -echo`) first. Stdout: `head -c %[1]s /dev/zero | tr '\\000' a`, plain ASCII as a terminal's "+
			"output mostly is; stdin: %[1]s of letters into `head -c %[1]s | wc -c`, sent once the command says it is ready, the client's stdin "+
			"held open until the count is back (a terminal's stdin closed hangs the session up); ×%[2]d per path and protocol, "+
			"interleaved round by round (A B C, C B A), throughput over the whole sessions. Two gateway processes started for this section "+
			"beside the environment's and alive together: `%[3]s`, and `%[4]s` (recording directory and audit log in a temporary directory; "+
			"stdin is not recorded, as by default). Every recorded session left one written recording at least as large as what it moved, "+
			"with no recording failure, or the section would not be measured; each recording is removed once checked. "+
			"Gateway CPU per MiB is each gateway process's own process_cpu_seconds_total over its sessions.",
			FormatBytes(float64(size)), rounds, flags(gateways[0].args, dir), flags(gateways[1].args, dir)) + r.proxyNote("The gateways' upstream and the direct path"),
	}
	for _, m := range []struct {
		name  string
		stdin bool
	}{{"stdout throughput", false}, {"stdin throughput", true}} {
		for _, proto := range protocols {
			r.logf("recorded exec: %s over %s (%s per transfer)", m.name, proto, FormatBytes(float64(size)))
			runs := make([]recordedExecRun, len(paths))
			fns := make([]func() Load, len(paths))
			for i, p := range paths {
				fns[i] = func() Load {
					l, cpu, err := r.recordedExecSession(ctx, p, proto, size, m.stdin)
					if err != nil {
						return Load{Errors: 1, FirstErr: fmt.Errorf("%s: %w", p.label, err)}
					}
					runs[i].bytes += float64(size)
					runs[i].cpu += cpu
					return l
				}
			}
			for i, l := range InterleaveAll(rounds, fns...) {
				if err := l.Err(); err != nil {
					return nil, fmt.Errorf("%s over %s: %w", m.name, proto, err)
				}
				runs[i].load = l
			}
			rate := func(run recordedExecRun) float64 { return run.bytes / run.load.Elapsed.Seconds() }
			cpuPerMiB := func(run recordedExecRun) string {
				return FormatDuration(time.Duration(run.cpu / (run.bytes / (1 << 20)) * float64(time.Second)))
			}
			ratio := Ratio(rate(runs[1]), rate(runs[0]))
			t.Add(m.name, proto, FormatRate(rate(runs[0]), "B"), FormatRate(rate(runs[1]), "B"), FormatRate(rate(runs[2]), "B"),
				FormatRatio(ratio), cpuPerMiB(runs[0]), cpuPerMiB(runs[1]), "≥ 0.95× of the gateway with both off",
				string(AtLeast(ratio, recordedExecFloor)))
		}
	}
	return t, nil
}

// recordedExecSession moves size bytes through p in one TTY exec session
// over proto (stdout, or stdin when stdin), and returns its duration and the
// gateway's CPU seconds meanwhile. For the recorded gateway it then waits
// for the session's recording, checks it and removes it, outside the time
// measured but before the next path's session starts, so the recording's
// final flush and fsync is not charged to another path.
func (r *Runner) recordedExecSession(ctx context.Context, p recordedExecPath, proto string, size int64, stdin bool) (Load, float64, error) {
	cpu := func() (float64, error) {
		if p.metricsURL == "" {
			return 0, nil
		}
		s, err := r.processAt(ctx, p.metricsURL)
		return s.cpu, err
	}
	cpu0, err := cpu()
	if err != nil {
		return Load{}, 0, err
	}
	w := &readyWriter{ready: make(chan struct{}), answered: make(chan struct{})}
	session, cancel := context.WithCancel(ctx)
	defer cancel() // ends a stdin reader still waiting for a command that failed
	var in io.Reader
	cmd := fmt.Sprintf("stty raw -echo && head -c %d /dev/zero | tr '\\000' a", size)
	if stdin {
		// Input sent before stty would meet a cooked terminal (echoed,
		// held in a 4 KiB line): it is sent once the command says ready.
		cmd = fmt.Sprintf("stty raw -echo && echo ready && head -c %d | wc -c", size)
		in = &gatedReader{r: io.LimitReader(letters{}, size), gate: w.ready, release: w.answered, done: session.Done()}
	}
	t0 := time.Now()
	err = execIn(ctx, p.cfg, proto, shellPod, []string{"sh", "-c", cmd}, true, in, w)
	el := time.Since(t0)
	if err == nil {
		err = w.check(size, stdin)
	}
	if err != nil {
		return Load{}, 0, err
	}
	cpu1, err := cpu()
	if err != nil {
		return Load{}, 0, err
	}
	if p.recordings != "" {
		minSize := int64(0)
		if !stdin {
			minSize = size
		}
		if err := r.takeRecording(ctx, p, minSize); err != nil {
			return Load{}, 0, err
		}
	}
	return Load{Latencies: []time.Duration{el}, Elapsed: el}, cpu1 - cpu0, nil
}

// takeRecording waits for the one recording a session left in p.recordings
// to be written, checks that it holds at least minSize bytes and that the
// gateway counted no recording failure, and removes it.
func (r *Runner) takeRecording(ctx context.Context, p recordedExecPath, minSize int64) error {
	var open, written int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, recordingsWrittenTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if open, written, err = recordingFiles(p.recordings); err != nil {
			return false, err
		}
		return open == 0 && written >= 1, nil
	})
	if err != nil {
		return fmt.Errorf("recording not written %s after the session (%d open, %d written): %w", recordingsWrittenTimeout, open, written, err)
	}
	v, err := r.scrape(ctx, p.metricsURL, recordedMetrics[1:4]...)
	if err != nil {
		return err
	}
	if failures := v[0] + v[1] + v[2]; failures > 0 {
		return fmt.Errorf("karmada_gateway_recording_failures_total is %v", failures)
	}
	casts, err := filepath.Glob(filepath.Join(p.recordings, "*.cast"))
	if err != nil || len(casts) != 1 {
		return errors.Join(err, fmt.Errorf("%d recordings written for one session: %v", len(casts), casts))
	}
	fi, err := os.Stat(casts[0])
	if err != nil {
		return err
	}
	if fi.Size() < minSize {
		return fmt.Errorf("recording %s holds %d bytes, less than the %d the session moved", casts[0], fi.Size(), minSize)
	}
	return os.Remove(casts[0])
}

// readyWriter is a firstByte that closes ready once the output has started
// with "ready", and answered once a second line follows it.
type readyWriter struct {
	firstByte
	readyOnce, answeredOnce sync.Once
	ready, answered         chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	n, err := w.firstByte.Write(p)
	w.mu.Lock()
	out := string(w.buf)
	w.mu.Unlock()
	if rest, ok := strings.CutPrefix(out, "ready\n"); ok {
		w.readyOnce.Do(func() { close(w.ready) })
		if strings.Contains(rest, "\n") {
			w.answeredOnce.Do(func() { close(w.answered) })
		}
	}
	return n, err
}

// check says whether the session's output is what its command writes:
// size letters, or "ready" and the count of size letters read.
func (w *readyWriter) check(size int64, stdin bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if stdin {
		if want := "ready\n" + strconv.FormatInt(size, 10) + "\n"; string(w.buf) != want {
			return fmt.Errorf("output %q, want %q", w.buf, want)
		}
		return nil
	}
	if w.n != size || strings.Trim(string(w.buf), "a") != "" {
		return fmt.Errorf("received %d bytes starting %q, want %d letters a", w.n, w.buf, size)
	}
	return nil
}

// gatedReader reads r once gate is closed, then holds its end until
// release is: a terminal's stdin closed by the client hangs the session
// up, which would kill the command before it answers. Until then it
// blocks, and it ends when done is.
type gatedReader struct {
	r                   io.Reader
	gate, release, done <-chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	select {
	case <-g.gate:
	case <-g.done:
		return 0, io.EOF
	}
	n, err := g.r.Read(p)
	if err == io.EOF {
		select {
		case <-g.release:
		case <-g.done:
		}
	}
	return n, err
}

// letters reads as an endless run of the letter a.
type letters struct{}

func (letters) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}
