package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/remotecommand"

	"golang.org/x/sys/unix"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording/recordingtest"
)

// recordedSession is a TTY exec through a gateway: it printed its marker
// and waits for a line on stdin, then prints it and exits 0.
type recordedSession struct {
	marker string
	stdin  *io.PipeWriter
	stdout *syncBuffer
	done   chan error
}

// openRecordedSessions opens n TTY execs into pod through the gateway at
// cfg, alternately over SPDY and WebSocket, and waits until each printed
// its marker.
func openRecordedSessions(ctx context.Context, t *testing.T, gw *env.ExtraGateway, pod, prefix string, n int) []*recordedSession {
	t.Helper()
	client, err := kubernetes.NewForConfig(gw.Config(env.UserExecOnly))
	if err != nil {
		t.Fatal(err)
	}
	var out []*recordedSession
	for i := range n {
		s := &recordedSession{marker: fmt.Sprintf("%s-%d", prefix, i), stdout: &syncBuffer{}, done: make(chan error, 1)}
		u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(env.Namespace).Name(pod).SubResource("exec").
			Param("command", "sh").Param("command", "-c").Param("command", "echo "+s.marker+"; read line; echo got-$line").
			Param("stdin", "true").Param("stdout", "true").Param("tty", "true").URL()
		exe := execExecutor(t, []string{"spdy", "websocket"}[i%2], gw.Config(env.UserExecOnly), u)
		r, w := io.Pipe()
		s.stdin = w
		go func() {
			s.done <- exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: r, Stdout: s.stdout, Tty: true})
		}()
		out = append(out, s)
	}
	for _, s := range out {
		if err := waitString(ctx, s.stdout, s.marker, time.Minute); err != nil {
			t.Fatalf("session %s did not start: %v (it printed %q)", s.marker, err, s.stdout.String())
		}
	}
	return out
}

// execEvents are the audit events of the execs whose command holds
// prefix, by audit ID.
func execEvents(events []auditv1.Event, prefix string) map[string][]auditv1.Event {
	out := map[string][]auditv1.Event{}
	for _, ev := range events {
		if ev.ObjectRef != nil && ev.ObjectRef.Subresource == "exec" && strings.Contains(ev.Annotations["gateway.karmada.io/command"], prefix) {
			out[string(ev.AuditID)] = append(out[string(ev.AuditID)], ev)
		}
	}
	return out
}

// TestRecordsThroughRestarts: what a rollout or a crash does to the
// records of open sessions, on real gateway processes recording real TTY
// execs on member1's kubelet.
//
// SIGTERM with 10 recorded sessions open, half of which end inside the
// grace period: the gateway exits by itself; the sessions that ended exited
// 0, the others got the gateway's Failure; every one has ResponseStarted
// and ResponseComplete in the audit log (completed, or gateway_shutdown)
// and a recording, renamed into place, that asciinema plays, the cut ones
// marked incomplete and named so in their events.
//
// SIGKILL with 2 sessions open, their output written (within a second):
// the next gateway started on the directory keeps their recordings,
// marked, renamed, playable, and counts them.
func TestRecordsThroughRestarts(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	player, err := exec.LookPath("asciinema")
	if err != nil {
		t.Fatal("asciinema is not installed: run make tools")
	}
	const pod = "records"
	placePod(t, sleepPod(pod), []string{"member1"}, "member1")
	dir := t.TempDir()
	logPath, recordings := filepath.Join(dir, "audit.log"), filepath.Join(dir, "recordings")
	if err := os.Mkdir(recordings, 0o700); err != nil {
		t.Fatal(err)
	}
	const grace = 8 * time.Second
	args := []string{"--audit-log-path=" + logPath, "--record-sessions=tty", "--record-sessions-dir=" + recordings,
		fmt.Sprintf("--shutdown-grace-period=%s", grace)}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := func(name string) *env.ExtraGateway {
		gw, err := testEnv.StartExtraGateway(ctx, name, args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.Stop)
		return gw
	}

	t.Run("SIGTERM", func(t *testing.T) {
		gw := start("gateway-rollout")
		sessions := openRecordedSessions(ctx, t, gw, pod, "rollout", 10)
		exited := terminating(gw, grace+30*time.Second)
		// Once the gateway is draining, half the sessions end.
		waitDraining(ctx, t, gw)
		for _, s := range sessions[:5] {
			if _, err := io.WriteString(s.stdin, "bye\r"); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range sessions[:5] {
			if err := <-s.done; err != nil {
				t.Errorf("session %s, ending inside the grace period: %v", s.marker, err)
			}
		}
		for _, s := range sessions[5:] {
			if err := <-s.done; err == nil || !strings.Contains(err.Error(), "the gateway ended the stream: it is shutting down") {
				t.Errorf("session %s, open past the grace period, ended with %v; want the gateway's Failure", s.marker, err)
			}
		}
		took := <-exited
		if took < 0 || took > grace+20*time.Second {
			t.Fatalf("the gateway took %v to exit after SIGTERM (-1: killed); want it to exit by itself within the chart's grace + 20 s", took)
		}
		sessionRecords{command: "rollout-", output: "rollout-", exit: "0", n: 10, ends: map[string]int{"completed": 5, "gateway_shutdown": 5}}.
			check(t, player, readAuditLog(t, logPath), recordings)
	})

	t.Run("SIGKILL", func(t *testing.T) {
		gw := start("gateway-crash")
		sessions := openRecordedSessions(ctx, t, gw, pod, "crash", 2)
		// The sessions' ResponseStarted are in the log and their output in
		// their recordings (written within a second) when the gateway dies.
		var started map[string][]auditv1.Event
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			started = execEvents(readAuditLog(t, logPath), "crash-")
			tmp, _ := filepath.Glob(filepath.Join(recordings, ".*.tmp"))
			written := 0
			for _, f := range tmp {
				if b, _ := os.ReadFile(f); strings.Contains(string(b), `"o","crash-`) {
					written++
				}
			}
			return len(started) == 2 && written == 2, nil
		}); err != nil {
			t.Fatalf("%d sessions' events logged before the kill: %v", len(started), err)
		}
		gw.Kill()
		// A dead gateway tells its clients nothing: client-go's SPDY
		// executor reads the lost connection as success, its WebSocket one
		// as an abnormal closure (docs/security.md).
		for _, s := range sessions {
			err := <-s.done
			t.Logf("session %s, its gateway killed, ended with %v", s.marker, err)
		}
		next := start("gateway-after-crash")
		b := scrapeMetrics(t, next.MetricsURL())
		if !strings.Contains(string(b), "karmada_gateway_recordings_recovered_total 2") {
			t.Errorf("the next gateway did not count 2 recovered recordings:\n%s", grepLines(string(b), "recordings_"))
		}
		for id, evs := range started {
			name := evs[0].Annotations["gateway.karmada.io/recording"]
			path := filepath.Join(recordings, name)
			out, err := recordingtest.Cat(player, path)
			if err != nil || !strings.Contains(string(out), "crash-") {
				t.Errorf("session %s's recording %s plays %q, %v", id, name, out, err)
			}
			raw, _ := os.ReadFile(path)
			if !strings.Contains(string(raw), "the gateway stopped before the session ended") {
				t.Errorf("recording %s is not marked as recovered", name)
			}
		}
		if tmp, _ := filepath.Glob(filepath.Join(recordings, ".*.tmp")); len(tmp) != 0 {
			t.Errorf("left under temporary names after the restart: %v", tmp)
		}
	})
}

// terminating sends gw SIGTERM and reports how long it took to exit by
// itself, or -1 when it was still running after within and was killed.
func terminating(gw *env.ExtraGateway, within time.Duration) <-chan time.Duration {
	exited := make(chan time.Duration, 1)
	go func() {
		ok, took := gw.Terminate(within)
		if !ok {
			took = -1
		}
		exited <- took
	}()
	return exited
}

// sessionRecords says what the audit events and recordings of some exec
// sessions must show: the sessions are the execs whose command holds
// command, their recordings play output holding output, the completed ones
// exited with exit ("": not checked).
type sessionRecords struct {
	command, output, exit string
	n                     int
	ends                  map[string]int // stream-end: sessions
}

// check checks events and the recordings dir for the sessions: both
// stages each, the stream ends counted as want.ends, every recording named
// at both stages, present and playable with asciinema, the incomplete ones
// named so in their event, none left under a temporary name.
func (want sessionRecords) check(t *testing.T, player string, events []auditv1.Event, recordings string) {
	t.Helper()
	byID := execEvents(events, want.command)
	if len(byID) != want.n {
		t.Fatalf("%d sessions in the audit log, want %d", len(byID), want.n)
	}
	ends := map[string]int{}
	for id, evs := range byID {
		var started, complete *auditv1.Event
		for i := range evs {
			switch evs[i].Stage {
			case auditv1.StageResponseStarted:
				started = &evs[i]
			case auditv1.StageResponseComplete:
				complete = &evs[i]
			}
		}
		if started == nil || complete == nil {
			t.Errorf("session %s: ResponseStarted %v, ResponseComplete %v; want both", id, started != nil, complete != nil)
			continue
		}
		a := complete.Annotations
		end := a["gateway.karmada.io/stream-end"]
		ends[end]++
		name := a["gateway.karmada.io/recording"]
		if name == "" || started.Annotations["gateway.karmada.io/recording"] != name {
			t.Errorf("session %s: recording %q at the start, %q at the end", id, started.Annotations["gateway.karmada.io/recording"], name)
			continue
		}
		out, err := recordingtest.Cat(player, filepath.Join(recordings, name))
		if err != nil || !strings.Contains(string(out), want.output) {
			t.Errorf("session %s: recording %s plays %q, %v", id, name, out, err)
		}
		incomplete := a["gateway.karmada.io/recording-incomplete"]
		if (end == "completed") != (incomplete == "") {
			t.Errorf("session %s ended %s, its recording says incomplete %q", id, end, incomplete)
		}
		if end == "completed" && want.exit != "" && a["gateway.karmada.io/exit-code"] != want.exit {
			t.Errorf("session %s completed with exit code %q, want %s", id, a["gateway.karmada.io/exit-code"], want.exit)
		}
	}
	for end, n := range want.ends {
		if ends[end] != n {
			t.Errorf("stream ends %v, want %v", ends, want.ends)
			break
		}
	}
	if tmp, _ := filepath.Glob(filepath.Join(recordings, ".*.tmp")); len(tmp) != 0 {
		t.Errorf("recordings left under temporary names: %v", tmp)
	}
}

// grepLines is the lines of s holding substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRecordingOnAFullVolume: the recording volume (a real tmpfs of 256
// KiB) fills under a TTY exec printing about 300 KB, over SPDY and
// WebSocket. Failing open, the session runs to its end and the recording
// is kept as far as it got, playable, its audit event naming it and
// saying why it is incomplete. Failing closed, the session is ended with
// a Failure on its error channel that names the cause and no server path,
// the recording kept and named likewise, and a session on the volume still
// full is refused before it starts (its command never runs), with the
// refusal audited. No message names the recording directory.
func TestRecordingOnAFullVolume(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	player, err := exec.LookPath("asciinema")
	if err != nil {
		t.Fatal("asciinema is not installed: run make tools")
	}
	const pod = "fullvolume"
	placePod(t, sleepPod(pod), []string{"member1"}, "member1")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	for _, failClosed := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail-closed=%v", failClosed), func(t *testing.T) {
			dir := t.TempDir()
			logPath, recordings := filepath.Join(dir, "audit.log"), filepath.Join(dir, "recordings")
			if err := os.Mkdir(recordings, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("tmpfs", recordings, "tmpfs", 0, "size=256k,mode=0700"); err != nil {
				t.Fatalf("mount a small tmpfs: %v", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(recordings, unix.MNT_DETACH) })
			args := []string{"--audit-log-path=" + logPath, "--record-sessions=tty", "--record-sessions-dir=" + recordings}
			if failClosed {
				args = append(args, "--record-sessions-fail-closed")
			}
			gw, err := testEnv.StartExtraGateway(ctx, fmt.Sprintf("gateway-full-volume-%v", failClosed), args...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(gw.Stop)
			client, err := kubernetes.NewForConfig(gw.Config(env.UserExecOnly))
			if err != nil {
				t.Fatal(err)
			}
			run := func(kind, marker, script string) (string, error) {
				u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(env.Namespace).Name(pod).SubResource("exec").
					Param("command", "sh").Param("command", "-c").Param("command", script).
					Param("stdout", "true").Param("tty", "true").URL()
				exe := execExecutor(t, kind, gw.Config(env.UserExecOnly), u)
				var out syncBuffer
				err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Tty: true})
				return out.String(), err
			}
			// About 300 KB of output, then its end.
			filler := func(marker string) string {
				return `i=0; while [ $i -lt 4000 ]; do echo ` + marker + `-$i-abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopq; i=$((i+1)); done; echo ` + marker + `-finished`
			}
			if failClosed {
				refuseUnrecordableOffers(ctx, t, gw, pod)
			}
			for _, kind := range []string{"spdy", "websocket"} {
				marker := "full-" + kind
				out, err := run(kind, marker, filler(marker))
				finished := strings.Contains(out, marker+"-finished")
				switch {
				case !failClosed && (err != nil || !finished):
					t.Errorf("%s, failing open: the session ended with %v, finished %v; want it to run to its end", kind, err, finished)
				case failClosed && (err == nil || finished || !strings.Contains(err.Error(), "no space left on device") ||
					!strings.Contains(err.Error(), "recording fails closed") || strings.Contains(err.Error(), recordings)):
					t.Errorf("%s, failing closed: the session ended with %v, finished %v; want it cut with the cause and no path", kind, err, finished)
				}
				ev := waitAuditEvent(t, logPath, pod, marker)
				a := ev.Annotations
				name, incomplete := a["gateway.karmada.io/recording"], a["gateway.karmada.io/recording-incomplete"]
				wantEnd := map[bool]string{false: "completed", true: "recording_failed"}[failClosed]
				if a["gateway.karmada.io/stream-end"] != wantEnd || name == "" || !strings.Contains(incomplete, "no space left on device") || strings.Contains(incomplete, recordings) {
					t.Errorf("%s: audited with stream-end %q, recording %q, recording-incomplete %q; want %s, the file, and why",
						kind, a["gateway.karmada.io/stream-end"], name, incomplete, wantEnd)
				}
				played, err := recordingtest.Cat(player, filepath.Join(recordings, name))
				if err != nil || !strings.Contains(string(played), marker+"-0-") || !strings.HasPrefix(out, string(played[:min(len(played), 1000)])) {
					t.Errorf("%s: the kept recording plays %.60q, %v; want the start of what the client saw", kind, played, err)
				}
				// The operator ships and removes it: room for the next one.
				if err := os.Remove(filepath.Join(recordings, name)); err != nil {
					t.Fatal(err)
				}
			}
			// The volume full before a session starts.
			fillVolume(t, filepath.Join(recordings, "filler"))
			_, err = run("websocket", "at-start", "echo at-start-ran > /tmp/at-start-"+fmt.Sprint(failClosed)+"; echo at-start")
			ev := waitAuditEvent(t, logPath, pod, "at-start")
			if !failClosed {
				if err != nil || ev.Annotations["gateway.karmada.io/recording"] != "" ||
					!strings.Contains(ev.Annotations["gateway.karmada.io/recording-incomplete"], "not recorded: no space left on device") {
					t.Errorf("failing open on a full volume: %v, audited %v; want the session run, unrecorded, and why", err, ev.Annotations)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "cannot be recorded (no space left on device)") || strings.Contains(err.Error(), recordings) {
				t.Errorf("failing closed on a full volume: %v; want the session refused with the cause and no path", err)
			}
			if ev.ResponseStatus == nil || ev.ResponseStatus.Code != http.StatusServiceUnavailable || !strings.Contains(ev.ResponseStatus.Message, "cannot be recorded") {
				t.Errorf("the refusal audited as %+v", ev.ResponseStatus)
			}
			check, _, err := testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserExecOnly), nil, "exec", pod, "--", "sh", "-c", "cat /tmp/at-start-true 2>/dev/null; echo checked")
			if err != nil || strings.Contains(check, "at-start-ran") {
				t.Errorf("the refused session's command ran: %q, %v", check, err)
			}
		})
	}
}

// refuseUnrecordableOffers: failing closed, a TTY exec through gw that
// offers only protocols the gateway cannot record (base64 WebSocket ones,
// or no subprotocol) is refused with a 503, and its command, which would
// leave a file in the pod at the member's 101, never runs.
func refuseUnrecordableOffers(ctx context.Context, t *testing.T, gw *env.ExtraGateway, pod string) {
	t.Helper()
	offers := map[string][]string{
		"base64": {"base64.channel.k8s.io"}, "v4-base64": {"v4.base64.channel.k8s.io"}, "none": nil,
	}
	for name, protocols := range offers {
		q := url.Values{"command": {"sh", "-c", "echo ran > /tmp/unrecordable-" + name}, "stdout": {"true"}, "tty": {"true"}}
		conn, resp, err := dialRawWS(t, gw.Config(env.UserExecOnly), "/api/v1/namespaces/"+env.Namespace+"/pods/"+pod+"/exec", q.Encode(), protocols)
		if conn != nil {
			conn.Close()
		}
		r := refusal(resp)
		if err == nil || r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "offers no protocol") {
			t.Errorf("a WebSocket exec offering %q: %v, %d %s; want it refused before it starts", protocols, err, r.code, r.body)
		}
	}
	check, _, err := testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserExecOnly), nil, "exec", pod, "--", "sh", "-c", "cat /tmp/unrecordable-* 2>/dev/null; echo checked")
	if err != nil || strings.Contains(check, "ran") || !strings.Contains(check, "checked") {
		t.Errorf("a refused unrecordable session's command ran: %q, %v", check, err)
	}
}

// fillVolume writes path until its volume has no byte left.
func fillVolume(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
	}
	for _, n := range []int{512, 64, 1} { // what a page left
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
}
