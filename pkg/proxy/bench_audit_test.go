package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording"
)

// Issue #28's cost, side by side in one run: the same gateway with audit
// and TTY recording off, then on (audit to a rotated log file, recording to
// a directory, as cmd/gateway builds them).
//   - exec: a TTY exec through the gateway echoing benchStreamChunk bytes
//     (stdin up, the same bytes down), real SPDY frames through the
//     followers; goal: on >= 0.95x off in MB/s.
//   - routed: a pods/log GET routed to a member; goal: on - off <= 20 us
//     of cpu-ns/op (at -cpu 1 close to the CPU all parties spend).
//   - idle: BENCH_RECORDED_SESSIONS (default 1000) recorded idle TTY
//     sessions open at once; goal: process RSS under 300 MiB.
//
// Run: go test ./pkg/proxy -run '^$' -bench BenchmarkAuditRecordingCost -cpu 1
func BenchmarkAuditRecordingCost(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "audit+recording-tty"
		}
		b.Run("exec/"+name, func(b *testing.B) {
			env := newExecEnvWith(b, nil, auditRecordingOptions(b, on))
			// After the TempDir's removal (registered first) would race the
			// last recording's rename.
			b.Cleanup(func() { waitRecordingsWritten(b, env) })
			payload := bytes.Repeat([]byte("0123456789abcdef"), benchStreamChunk/16)
			b.SetBytes(2 * benchStreamChunk)
			defer reportCPU(b)()
			for b.Loop() {
				var out countingWriter
				err := env.executor(b, "spdy", "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdin=true&stdout=true&tty=true").
					StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdin: bytes.NewReader(payload), Stdout: &out, Tty: true})
				if err != nil || out.n != len(payload) {
					b.Fatalf("exec: %v, %d bytes back", err, out.n)
				}
				// The fake member reports each stdin EOF on a small
				// buffered channel: unread, the fifth exec blocked it.
				<-env.server.stdinEOF
			}
		})
		b.Run("routed/"+name, func(b *testing.B) {
			upstream := benchServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "a log line\n")
			}))
			gw := httptest.NewUnstartedServer(newTestProxy(b, withUpstream(auditRecordingOptions(b, on), upstream)))
			gw.EnableHTTP2 = true
			gw.StartTLS()
			b.Cleanup(gw.Close)
			c := benchClient(gw, true)
			buf := make([]byte, 4<<10)
			defer reportCPU(b)()
			for b.Loop() {
				benchGet(b, c, gw.URL+"/api/v1/namespaces/ci/pods/job-42/log?container=build", buf)
			}
		})
	}
	b.Run("idle-recorded-sessions", func(b *testing.B) {
		n := 1000
		if v, err := strconv.Atoi(os.Getenv("BENCH_RECORDED_SESSIONS")); err == nil && v > 0 {
			n = v
		}
		env := newExecEnvWith(b, nil, auditRecordingOptions(b, true))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, n)
		writers := make([]*io.PipeWriter, n)
		// Sessions open in waves of openWave, each waited for: a thousand
		// TLS handshakes at once (client to gateway, gateway to upstream)
		// on a loaded machine all outlive the 10 s handshake timeout, and
		// no session opens at all. RSS is read once all n are open.
		const openWave = 50
		for i := range writers {
			r, w := io.Pipe()
			writers[i] = w
			go func() {
				done <- env.executor(b, "spdy", "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdin=true&stdout=true&tty=true").
					StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: r, Stdout: io.Discard, Tty: true})
			}()
			if open := i + 1; open%openWave != 0 && open != n {
				continue
			}
			if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
				return countTemp(b, env) >= i+1, nil
			}); err != nil {
				b.Fatalf("%d of %d sessions recording", countTemp(b, env), i+1)
			}
		}
		rss := processRSS(b)
		for b.Loop() {
		}
		b.ReportMetric(float64(rss)/(1<<20), "RSS-MiB")
		b.ReportMetric(float64(n), "sessions")
		// Teardown is not measured: the sessions are cut with the context.
		for _, w := range writers {
			w.Close()
		}
		cancel()
		timeout := time.After(2 * time.Minute)
		for range n {
			select {
			case <-done:
			case <-timeout:
				b.Fatal("sessions still open 2m after they were cut")
			}
		}
		waitRecordingsWritten(b, env)
	})
}

// waitRecordingsWritten waits until env's gateway, if it records, has
// renamed every recording into place: it does so after the client returned,
// and the TempDir's removal must not race the renames.
func waitRecordingsWritten(b *testing.B, env *execEnv) {
	if env.proxy.recorder == nil {
		return
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return countTemp(b, env) == 0, nil
	}); err != nil {
		b.Fatalf("%d recordings still being written 2m after their sessions ended", countTemp(b, env))
	}
}

// benchRecordingDir is where auditRecordingOptions' recorder writes.
const benchRecordingDir = "recordings"

func auditRecordingOptions(b *testing.B, on bool) Options {
	if !on {
		return Options{}
	}
	dir := b.TempDir()
	m := audit.NewMetrics(prometheus.NewRegistry())
	sink, err := audit.NewFileSink(audit.FileOptions{Path: filepath.Join(dir, "audit.log"), MaxSize: 100 << 20, MaxBackups: 1, Buffer: 10000, BufferBytes: 64 << 20}, m)
	if err != nil {
		b.Fatal(err)
	}
	a := audit.New(audit.Options{Metrics: m, Sinks: []audit.Sink{sink}})
	ctx, cancel := context.WithCancel(context.Background())
	a.Start(ctx, time.Second)
	b.Cleanup(func() { cancel(); a.Wait() })
	recDir := filepath.Join(dir, benchRecordingDir)
	if err := os.Mkdir(recDir, 0o700); err != nil {
		b.Fatal(err)
	}
	rec, err := recording.New(recording.Options{Dir: recDir, Mode: recording.ModeTTY, MaxSessionBytes: 1 << 30, MaxTotalBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	benchRecorders[rec] = recDir
	return Options{Auditor: a, Recorder: rec}
}

var benchRecorders = map[*recording.Recorder]string{}

func withUpstream(opts Options, srv *httptest.Server) Options {
	opts.Upstream = tlsUpstreamConfig(srv)
	return opts
}

// countTemp counts the recordings being written by env's gateway.
func countTemp(b *testing.B, env *execEnv) int {
	entries, err := os.ReadDir(benchRecorders[env.proxy.recorder])
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			n++
		}
	}
	return n
}

// processRSS is this process's resident set (client, gateway and
// upstream together: an upper bound of the gateway's).
func processRSS(b *testing.B) int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }
