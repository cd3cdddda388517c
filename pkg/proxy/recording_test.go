package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording/recordingtest"
)

// TestTTYSessionRecordedAndPlayed covers Options.Recorder on a TTY exec
// through the gateway as cmd/gateway builds it, over SPDY and WebSocket:
// the session is written as asciicast v2 (0600, renamed into place when it
// ends), its header written before the session started (80x24) and the
// client's terminal sizes as resize events, the audit event names it, and Debian's asciinema (make
// tools) cats exactly what the client saw, multibyte characters split
// across frames included. The file is named after the pod, and a
// per-namespace mode applies to the pod's namespace (reading them from the
// cluster proxy path sent upstream named "clusters_proxy" and ignored the
// override). Without the hook in followStream there is no file.
func TestTTYSessionRecordedAndPlayed(t *testing.T) {
	player, err := exec.LookPath("asciinema")
	if err != nil {
		t.Fatal("asciinema is not installed: run make tools (Debian's asciinema plays the recordings)")
	}
	for _, kind := range []string{"spdy", "websocket"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			// Over WebSocket the pod's namespace selects the mode: the
			// gateway must name the template's namespace, not read it
			// from the cluster proxy path it sends.
			ropts := recording.Options{Dir: dir, Mode: recording.ModeTTY, MaxSessionBytes: 1 << 20, MaxTotalBytes: 10 << 20}
			if kind == "websocket" {
				ropts.Mode, ropts.Namespaces = recording.ModeNone, map[string]recording.Mode{"ci": recording.ModeTTY}
			}
			rec, err := recording.New(ropts)
			if err != nil {
				t.Fatal(err)
			}
			auditor, sink := newCapturingAuditor()
			env := newExecEnvWith(t, nil, Options{Recorder: rec, Auditor: auditor})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			queue := make(sizeQueue, 2)
			queue <- remotecommand.TerminalSize{Width: 100, Height: 30}
			stdinR, stdinW := io.Pipe()
			var stdout bytes.Buffer
			done := make(chan error, 1)
			go func() {
				done <- env.executor(t, kind, "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdin=true&stdout=true&tty=true").
					StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: &stdout, Tty: true, TerminalSizeQueue: queue})
			}()
			if got := <-env.server.resizes; got.Width != 100 {
				t.Fatalf("first resize %+v", got)
			}
			// "é" (2 bytes) and "✓" (3 bytes) written a byte at a time: each
			// byte is its own frame.
			for _, b := range []byte("héllo ✓\r\n") {
				if _, err := stdinW.Write([]byte{b}); err != nil {
					t.Fatal(err)
				}
			}
			queue <- remotecommand.TerminalSize{Width: 120, Height: 40}
			if got := <-env.server.resizes; got.Width != 120 {
				t.Fatalf("second resize %+v", got)
			}
			_, _ = io.WriteString(stdinW, "bye\r\n")
			close(queue)
			stdinW.Close()
			if err := <-done; err != nil {
				t.Fatalf("Stream: %v", err)
			}
			complete := sink.waitEvents(t, 2)[1]
			name := complete.Annotations[audit.AnnotationRecording]
			if !strings.HasPrefix(name, "ci_job-42_") {
				t.Fatalf("the audit event names recording %q, want one of pod ci/job-42: %v", name, complete.Annotations)
			}
			path := filepath.Join(dir, name)
			entries, _ := os.ReadDir(dir)
			st, err := os.Stat(path)
			if err != nil || st.Mode().Perm() != 0o600 || len(entries) != 1 {
				t.Fatalf("recording %s: %v, mode %v, %d files in the directory; want one file of mode 0600", name, err, st.Mode().Perm(), len(entries))
			}
			header, resizes := readCast(t, path)
			if header.Version != 2 || header.Width != 80 || header.Height != 24 || strings.Join(resizes, ",") != "100x30,120x40" {
				t.Errorf("header %+v, resizes %q; want version 2, 80x24 (written before the session started), and the client's sizes", header, resizes)
			}
			if inc, ok := complete.Annotations[audit.AnnotationRecordingIncomplete]; ok {
				t.Errorf("a whole session's recording said incomplete: %q", inc)
			}
			out, err := recordingtest.Cat(player, path)
			if err != nil {
				t.Fatalf("asciinema cat: %v", err)
			}
			if string(out) != stdout.String() || !strings.Contains(stdout.String(), "héllo ✓") {
				t.Errorf("asciinema cat printed %q, the client saw %q", out, stdout.String())
			}
		})
	}
}

type castHeader struct {
	Version       int
	Width, Height int
}

// readCast reads an asciicast v2 file: its header and its resize events;
// every line must be JSON.
func readCast(t *testing.T, path string) (castHeader, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var h castHeader
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &h) != nil {
		t.Fatalf("no asciicast header in %s", path)
	}
	var resizes []string
	for sc.Scan() {
		var ev []any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || len(ev) != 3 {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		if ev[1] == "r" {
			resizes = append(resizes, ev[2].(string))
		}
	}
	return h, resizes
}

// TestFailClosedRefusalIsAudited: failing closed, a session whose recording
// cannot be started is refused before anything is sent upstream (the
// member never sees it, so its command never runs), with a 503 Status
// saying why without the server's directory, and the refusal is audited
// with that Status. The former code started the recording at the 101,
// after the member had started the command, and left no audit event.
func TestFailClosedRefusalIsAudited(t *testing.T) {
	dir := t.TempDir()
	rec, err := recording.New(recording.Options{Dir: dir, Mode: recording.ModeAll, FailClosed: true, MaxSessionBytes: 1 << 20, MaxTotalBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil { // the volume went away
		t.Fatal(err)
	}
	auditor, sink := newCapturingAuditor()
	env := newExecEnvWith(t, nil, Options{Recorder: rec, Auditor: auditor})
	for _, kind := range []string{"spdy", "websocket"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := env.executor(t, kind, "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdin=true&stdout=true").
			StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("x"), Stdout: io.Discard})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "cannot be recorded") || strings.Contains(err.Error(), dir) {
			t.Errorf("%s: %v; want the refusal, naming no path", kind, err)
		}
	}
	if seen := env.server.seen(); len(seen) != 0 {
		t.Fatalf("refused sessions reached the member: %v", seen)
	}
	for _, ev := range sink.waitEvents(t, 2) {
		if ev.Stage != audit.StageResponseComplete || ev.ResponseStatus.Code != http.StatusServiceUnavailable ||
			!strings.Contains(ev.ResponseStatus.Message, "cannot be recorded") || strings.Contains(ev.ResponseStatus.Message, dir) {
			t.Errorf("refusal audited as %s %+v", ev.Stage, ev.ResponseStatus)
		}
	}
}

// TestFailClosedOffersOnlyRecordableProtocols: failing closed, an exec or
// attach is offered to the member with only the protocols whose channels
// the gateway records, and one that offers none of them is refused before
// anything goes upstream. The member picks the protocol and starts the
// command at its 101, so a refusal after it (as before) let a base64 or
// unnamed-protocol WebSocket exec run its command unrecorded while the
// client got a 503. Failing open, the offers pass unchanged (the session
// runs unrecorded, its audit event says why).
func TestFailClosedOffersOnlyRecordableProtocols(t *testing.T) {
	const target = "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdout=true"
	ws := func(protocols ...string) [][2]string {
		h := [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "websocket"}, {"Sec-WebSocket-Version", "13"},
			{"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}, {"Authorization", "Bearer caller-token"}}
		for _, p := range protocols {
			h = append(h, [2]string{"Sec-WebSocket-Protocol", p})
		}
		return h
	}
	spdy := func(versions ...string) [][2]string {
		h := [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "SPDY/3.1"}, {"Authorization", "Bearer caller-token"}}
		for _, v := range versions {
			h = append(h, [2]string{"X-Stream-Protocol-Version", v})
		}
		return h
	}
	bearer := "base64url.bearer.authorization.k8s.io.Y2FsbGVyLXRva2Vu"
	for _, tc := range []struct {
		name, upgrade string
		header        [][2]string
		// sent is what the member must be offered; nil: the session is
		// refused and nothing reaches it.
		sent       http.Header
		passesOpen bool // failing open, the offers reach the member unchanged
	}{
		{name: "websocket base64 only", upgrade: "websocket", header: ws("base64.channel.k8s.io")},
		{name: "websocket v4 base64 only", upgrade: "websocket", header: ws("v4.base64.channel.k8s.io")},
		{name: "websocket no subprotocol", upgrade: "websocket", header: ws()},
		{name: "websocket bearer token only", upgrade: "websocket", header: ws(bearer)},
		{name: "websocket unknown", upgrade: "websocket", header: ws("v6.channel.k8s.io")},
		{name: "spdy no version", upgrade: "SPDY/3.1", header: spdy()},
		{name: "spdy websocket's v5", upgrade: "SPDY/3.1", header: spdy("v5.channel.k8s.io")},
		{name: "websocket narrowed", upgrade: "websocket",
			header: append(ws("v5.channel.k8s.io, base64.channel.k8s.io", "v4.base64.channel.k8s.io, channel.k8s.io, "+bearer),
				[2]string{"Sec-WebSocket-Extensions", "permessage-deflate"}),
			sent: http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io, channel.k8s.io, " + bearer}}},
		{name: "spdy narrowed", upgrade: "SPDY/3.1", header: spdy("v9.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io"),
			sent: http.Header{"X-Stream-Protocol-Version": {"v4.channel.k8s.io", "v3.channel.k8s.io"}}},
	} {
		for _, failClosed := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fail-closed=%v", tc.name, failClosed), func(t *testing.T) {
				dir := t.TempDir()
				rec, err := recording.New(recording.Options{Dir: dir, Mode: recording.ModeAll, FailClosed: failClosed,
					MaxSessionBytes: 1 << 20, MaxTotalBytes: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				up := newEchoUpgrader(t, tc.upgrade)
				// The member's choice: the first protocol the gateway sent.
				if tc.sent != nil {
					for k, v := range tc.sent {
						up.header = http.Header{k: {strings.Split(v[0], ",")[0]}}
					}
				}
				upstream := httptest.NewTLSServer(up)
				t.Cleanup(upstream.Close)
				p := newTestProxy(t, Options{Upstream: tlsUpstreamConfig(upstream), Recorder: rec})
				gw := httptest.NewTLSServer(p)
				t.Cleanup(gw.Close)
				// The member ends the session, and its recording is settled
				// (renamed, or discarded), before the directory is removed.
				t.Cleanup(func() {
					close(up.release)
					if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
						temps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
						return len(temps) == 0, nil
					}); err != nil {
						t.Errorf("the session's recording was never settled")
					}
				})

				resp := dialGateway(t, gw).send(t, http.MethodGet, target, tc.header)
				resp.Body.Close()
				sent := up.requestHeaders()
				switch {
				case !failClosed:
					if resp.StatusCode != http.StatusSwitchingProtocols || len(sent) != 1 {
						t.Fatalf("failing open: %d, %d requests upstream; want the session relayed", resp.StatusCode, len(sent))
					}
					for _, h := range tc.header {
						if k := http.CanonicalHeaderKey(h[0]); k != "Authorization" && k != "Connection" && !slices.Contains(sent[0].Values(k), h[1]) {
							t.Errorf("failing open, upstream got %s %q; want %q among them", k, sent[0].Values(k), h[1])
						}
					}
				case tc.sent == nil:
					if resp.StatusCode != http.StatusServiceUnavailable || len(sent) != 0 {
						t.Fatalf("%d, %d requests upstream; want 503 and nothing sent to the member", resp.StatusCode, len(sent))
					}
				default:
					if resp.StatusCode != http.StatusSwitchingProtocols || len(sent) != 1 {
						t.Fatalf("%d, %d requests upstream; want the narrowed session relayed", resp.StatusCode, len(sent))
					}
					for k, want := range tc.sent {
						if got := sent[0].Values(k); !slices.Equal(got, want) {
							t.Errorf("upstream was offered %s %q; want %q", k, got, want)
						}
					}
					if ext := sent[0].Values("Sec-WebSocket-Extensions"); len(ext) != 0 {
						t.Errorf("upstream was offered extensions %q", ext)
					}
				}
			})
		}
	}
}
