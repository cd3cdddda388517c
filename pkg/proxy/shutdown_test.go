package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

// waitDraining polls with new requests until the gateway refuses them.
func waitDraining(t *testing.T, gw string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTestTLS()}}
	defer client.CloseIdleConnections()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := client.Get(gw + "/version")
		if err != nil {
			return false, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return false, nil
		}
		st := proxytest.DecodeStatus(t, resp.Header.Get("Content-Type"), body)
		if st.Message != "gateway shutting down" || !resp.Close {
			t.Errorf("draining answer %+v close=%v", st, resp.Close)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("gateway never started refusing requests: %v", err)
	}
}

func TestShutdownWaitsForUpgradedStreams(t *testing.T) {
	up := newEchoUpgrader(t, "SPDY/3.1")
	p, gw := newUpgradeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		up.ServeHTTP(w, r)
	}), nil)
	c := dialGateway(t, gw)
	if resp := c.send(t, "POST", "/api/v1/namespaces/ci/pods/p/exec", [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}}); resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}

	done := make(chan error, 1)
	go func() { done <- p.Shutdown(context.Background()) }()
	waitDraining(t, gw.URL)

	c.echo(t, "still working while draining")
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a stream open", err)
	default:
	}
	c.conn.Close() // the client ends the stream
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown did not return after the last stream ended")
	}
}

func TestShutdownDeadlineCutsStreams(t *testing.T) {
	up := newEchoUpgrader(t, "websocket")
	p, gw := newUpgradeEnv(t, up, nil)
	c := dialGateway(t, gw)
	if resp := c.send(t, "GET", "/api/v1/namespaces/ci/pods/p/exec", websocketRequest); resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c.echo(t, "before")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	// The stream is cut: the client connection ends and the upstream's too.
	if n, err := c.br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("stream still open after a forced shutdown: %d, %v", n, err)
	}
	select {
	case <-up.ended:
	case <-time.After(20 * time.Second):
		t.Fatal("upstream connection left open")
	}
}

// TestShutdownWritesEverySessionsRecords: SIGTERM with recorded, audited
// exec sessions open, stopped in cmd/gateway's order (the proxy drains, then
// the audit sinks stop). Sessions that end inside the grace period end as
// they would have; those still open when it is over get a Failure saying
// the gateway ended them. Every one has its ResponseStarted and
// ResponseComplete in the audit log (a real FileSink) before the sinks
// stop, and a recording renamed into place, the cut ones marked and named
// incomplete. The former code wrote ResponseComplete and the recording
// only after the handler returned, racing the process's exit.
func TestShutdownWritesEverySessionsRecords(t *testing.T) {
	dir := t.TempDir()
	rec, err := recording.New(recording.Options{Dir: dir, Mode: recording.ModeTTY, MaxSessionBytes: 1 << 20, MaxTotalBytes: 10 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m := audit.NewMetrics(prometheus.NewRegistry())
	logPath := filepath.Join(dir, "audit.log")
	sink, err := audit.NewFileSink(audit.FileOptions{Path: logPath, MaxSize: 1 << 20, MaxBackups: 1, Buffer: 100, BufferBytes: 64 << 20}, m)
	if err != nil {
		t.Fatal(err)
	}
	auditor := audit.New(audit.Options{Metrics: m, Sinks: []audit.Sink{sink}})
	auditCtx, stopAudit := context.WithCancel(context.Background())
	auditor.Start(auditCtx, 5*time.Second)
	env := newExecEnvWith(t, nil, Options{Recorder: rec, Auditor: auditor, StreamEndWait: 5 * time.Second})

	type session struct {
		kind   string
		stdin  *io.PipeWriter
		done   chan error
		finish bool // ends inside the grace period
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sessions []*session
	for i, kind := range []string{"spdy", "websocket", "spdy", "websocket"} {
		s := &session{kind: kind, done: make(chan error, 1), finish: i < 2}
		r, w := io.Pipe()
		s.stdin = w
		go func() {
			s.done <- env.executor(t, kind, "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdin=true&stdout=true&tty=true").
				StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: r, Stdout: io.Discard, Tty: true})
		}()
		if _, err := io.WriteString(w, "started\r\n"); err != nil { // echoed: the session is open
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}

	grace, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	shutdown := make(chan error, 1)
	go func() { shutdown <- env.proxy.Shutdown(grace) }()
	waitDraining(t, env.gateway.URL)
	for _, s := range sessions[:2] {
		_ = s.stdin.Close() // these end inside the grace period
		if err := <-s.done; err != nil {
			t.Errorf("%s session ending inside the grace period: %v", s.kind, err)
		}
	}
	if err := <-shutdown; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the grace period exceeded", err)
	}
	for _, s := range sessions[2:] {
		if err := <-s.done; err == nil || !strings.Contains(err.Error(), "the gateway ended the stream: it is shutting down") {
			t.Errorf("%s session open past the grace period ended with %v, want the gateway's Failure", s.kind, err)
		}
	}
	stopAudit()
	auditor.Wait()

	complete := map[string]map[string]string{} // auditID: annotations
	started := 0
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var ev audit.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Stage {
		case audit.StageResponseStarted:
			started++
		case audit.StageResponseComplete:
			complete[string(ev.AuditID)] = ev.Annotations
		}
	}
	if started != 4 || len(complete) != 4 {
		t.Fatalf("%d ResponseStarted and %d ResponseComplete events, want 4 of each:\n%s", started, len(complete), b)
	}
	ends := map[string]int{}
	for _, a := range complete {
		end := a[audit.AnnotationStreamEnd]
		ends[end]++
		name := a[audit.AnnotationRecording]
		if _, err := os.Stat(filepath.Join(dir, name)); name == "" || err != nil {
			t.Errorf("session ending %s names recording %q: %v", end, name, err)
		}
		incomplete := a[audit.AnnotationRecordingIncomplete]
		if (end == string(streamfollow.EndGatewayShutdown)) != strings.Contains(incomplete, "when it shut down") {
			t.Errorf("session ending %s: recording-incomplete %q", end, incomplete)
		}
	}
	if ends[string(streamfollow.EndCompleted)] != 2 || ends[string(streamfollow.EndGatewayShutdown)] != 2 {
		t.Errorf("stream ends %v, want 2 completed and 2 ended by the gateway's shutdown", ends)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(tmp) != 0 {
		t.Errorf("recordings left under their temporary names: %v", tmp)
	}
}

// TestSessionsTypingAtTheGraceEndGetTheFailure: clients still sending when
// the grace period ends get the gateway's Failure all the same. Shutdown
// cancels the requests right after it ends the streams, which closes each
// stream; a client frame arriving then failed its copy at once, and
// ReverseProxy closed the client's connection before the Failure was
// written to it (a WebSocket client saw an abnormal closure, in CI behind
// a port-forward).
func TestSessionsTypingAtTheGraceEndGetTheFailure(t *testing.T) {
	env := newExecEnvWith(t, func(s *execServer) { s.endedByGateway = true }, Options{StreamEndWait: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type session struct {
		kind string
		done chan error
	}
	var sessions []*session
	typing := make(chan struct{})
	for i := range 16 {
		s := &session{kind: []string{"spdy", "websocket"}[i%2], done: make(chan error, 1)}
		r, w := io.Pipe()
		go func() {
			s.done <- env.executor(t, s.kind, "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdin=true&stdout=true&tty=true").
				StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: r, Stdout: io.Discard, Tty: true})
			_ = r.Close()
		}()
		if _, err := io.WriteString(w, "started\r\n"); err != nil {
			t.Fatal(err)
		}
		// Once every session is open, the users type on, as fast as the
		// stream takes it, up to the end.
		go func() {
			<-typing
			for {
				if _, err := io.WriteString(w, "x"); err != nil {
					return
				}
			}
		}()
		sessions = append(sessions, s)
	}
	close(typing)
	grace, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	if err := env.proxy.Shutdown(grace); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the grace period exceeded", err)
	}
	for _, s := range sessions {
		if err := <-s.done; err == nil || !strings.Contains(err.Error(), "the gateway ended the stream: it is shutting down") {
			t.Errorf("%s session typing past the grace period ended with %v, want the gateway's Failure", s.kind, err)
		}
	}
}
