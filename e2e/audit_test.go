package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording/recordingtest"
)

// decodeStrict decodes b into v with kube-apiserver's own audit types,
// refusing any field they do not have: a field the gateway misnames fails
// here, not in a user's pipeline.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// auditWebhook is an audit webhook as kube-apiserver's batching backend
// posts to: it keeps every event of the EventLists it is sent.
type auditWebhook struct {
	t      *testing.T
	mu     sync.Mutex
	events []auditv1.Event
}

func (h *auditWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var list auditv1.EventList
	if err := decodeStrict(body, &list); err != nil || list.Kind != "EventList" || list.APIVersion != "audit.k8s.io/v1" {
		h.t.Errorf("webhook got %v (%s): %.300s", err, list.Kind, body)
		http.Error(w, "bad EventList", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.events = append(h.events, list.Items...)
	h.mu.Unlock()
}

func (h *auditWebhook) received() []auditv1.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// readAuditLog decodes every line of the audit log and its rotated files.
func readAuditLog(t *testing.T, path string) []auditv1.Event {
	t.Helper()
	var events []auditv1.Event
	for _, name := range []string{path + ".1", path} {
		b, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var ev auditv1.Event
			if err := decodeStrict(line, &ev); err != nil {
				t.Fatalf("audit log line not an audit.k8s.io/v1 Event: %v\n%s", err, line)
			}
			events = append(events, ev)
		}
	}
	return events
}

// findComplete is the ResponseComplete event of an exec of pod whose
// command contains marker.
func findComplete(events []auditv1.Event, pod, marker string) *auditv1.Event {
	for i, ev := range events {
		if ev.Stage == auditv1.StageResponseComplete && ev.ObjectRef != nil && ev.ObjectRef.Name == pod &&
			ev.ObjectRef.Subresource == "exec" && strings.Contains(ev.Annotations["gateway.karmada.io/command"], marker) {
			return &events[i]
		}
	}
	return nil
}

// TestAuditEvents: the real gateway, started with --audit-log-path and
// --audit-webhook-config-file (a kubeconfig naming a webhook, as
// kube-apiserver's), writes kube-apiserver-shaped audit events for real
// kubectl execs into a federated pod, over WebSocket and SPDY, and for an
// exec karmada-apiserver refused: decoded with k8s.io/apiserver's audit/v1
// types, strictly, from the log file and from the webhook's EventLists.
// Each carries the member cluster, the command and the exit code the
// gateway read from the error channel; the token appears nowhere. Their
// objectRef.uid is the template's UID as karmada-apiserver has it; the
// member pod's UID, read through clusters/member1/proxy, is named in
// authorize mode only (the gateway reads that pod there; passthrough never
// does, docs/security.md). The gateway also records TTY sessions
// (--record-sessions=tty): see the "recording" subtest.
func TestAuditEvents(t *testing.T) {
	dumpLogsOnFailure(t)
	const name = "audited"
	placePod(t, sleepPod(name), []string{"member1"}, "member1")

	dir := t.TempDir()
	logPath := filepath.Join(dir, "audit.log")
	hook := &auditWebhook{t: t}
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)
	webhookConfig := filepath.Join(dir, "webhook.kubeconfig")
	kubeconfig := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: audit\n  cluster:\n    server: %s\ncontexts:\n- name: audit\n  context:\n    cluster: audit\n    user: audit\ncurrent-context: audit\nusers:\n- name: audit\n  user: {}\n", srv.URL)
	if err := os.WriteFile(webhookConfig, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	recordings := filepath.Join(dir, "recordings")
	if err := os.Mkdir(recordings, 0o700); err != nil {
		t.Fatal(err)
	}
	auditArgs := []string{
		"--audit-log-path=" + logPath, "--audit-webhook-config-file=" + webhookConfig, "--audit-webhook-batch-max-wait=200ms",
		"--record-sessions=tty", "--record-sessions-dir=" + recordings,
	}
	restartGatewayFor(t, auditArgs, "--audit-log-path=")

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	templateUID, memberUID := podUIDs(ctx, t, name, "member1")
	execKubeconfig := testEnv.GatewayKubeconfig(env.UserExecOnly)
	for _, tr := range kubectlTransports {
		_, _, err := runKubectlEnv(ctx, execKubeconfig, tr.env, nil, "exec", name, "--", "sh", "-c", "echo audit-"+tr.name+"; exit 3")
		if code := exitCode(errors.Unwrap(err)); code != 3 {
			t.Fatalf("%s exec exited %d (%v), want 3", tr.name, code, err)
		}
	}
	if _, _, err := runKubectlEnv(ctx, testEnv.GatewayKubeconfig(env.UserNoExec), nil, nil, "exec", name, "--", "echo", "audit-refused"); err == nil {
		t.Fatal("no-exec could exec")
	}

	// Both sinks get every event, or the checks below say which is missing.
	var logged, posted []auditv1.Event
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		logged, posted = readAuditLog(t, logPath), hook.received()
		done := true
		for _, marker := range []string{"audit-websocket", "audit-spdy", "audit-refused"} {
			done = done && findComplete(logged, name, marker) != nil && findComplete(posted, name, marker) != nil
		}
		return done, nil
	})
	for _, tr := range kubectlTransports {
		ev := findComplete(logged, name, "audit-"+tr.name)
		if ev == nil {
			t.Fatalf("no ResponseComplete for the %s exec in the audit log (%d events)", tr.name, len(logged))
		}
		a := ev.Annotations
		if ev.ResponseStatus == nil || ev.ResponseStatus.Code != http.StatusSwitchingProtocols || a["gateway.karmada.io/member-cluster"] != "member1" ||
			a["gateway.karmada.io/exit-code"] != "3" || a["gateway.karmada.io/stream-end"] != "completed" || ev.ObjectRef.Namespace != env.Namespace {
			t.Errorf("%s exec audited as %+v, status %+v", tr.name, a, ev.ResponseStatus)
		}
		if ev.ObjectRef.UID != templateUID || a["gateway.karmada.io/member-pod-uid"] != "" {
			t.Errorf("%s exec audited with objectRef.uid %q and member pod UID %q; want the template's %q and none in passthrough mode",
				tr.name, ev.ObjectRef.UID, a["gateway.karmada.io/member-pod-uid"], templateUID)
		}
		if !slices.ContainsFunc(logged, func(s auditv1.Event) bool { return s.AuditID == ev.AuditID && s.Stage == auditv1.StageResponseStarted }) {
			t.Errorf("%s exec has no ResponseStarted", tr.name)
		}
		if findComplete(posted, name, "audit-"+tr.name) == nil {
			t.Errorf("the webhook got no ResponseComplete for the %s exec", tr.name)
		}
	}
	refused := findComplete(logged, name, "audit-refused")
	if refused == nil || refused.ResponseStatus == nil || refused.ResponseStatus.Code != http.StatusForbidden {
		t.Errorf("the refused exec audited as %+v", refused)
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if tok := testEnv.Token(env.UserExecOnly); tok == "" || bytes.Contains(raw, []byte(tok)) {
		t.Error("the audit log holds the caller's bearer token")
	}
	if st, err := os.Stat(logPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("audit log mode %v (%v), want 0600", st.Mode().Perm(), err)
	}

	t.Run("recording", func(t *testing.T) { testRecordedTTYSession(ctx, t, name, logPath, recordings) })

	// Authorize mode reads the member's pod to check it is the template's
	// copy, and names it.
	if err := testEnv.RestartGateway(ctx, append(auditArgs, "--auth-mode=authorize")...); err != nil {
		t.Fatalf("restart the gateway in authorize mode: %v", err)
	}
	_, _, err = runKubectlEnv(ctx, execKubeconfig, nil, nil, "exec", name, "--", "sh", "-c", "echo audit-authorize; exit 4")
	if code := exitCode(errors.Unwrap(err)); code != 4 {
		t.Fatalf("authorize mode exec exited %d (%v), want 4", code, err)
	}
	ev := waitAuditEvent(t, logPath, name, "audit-authorize")
	if a := ev.Annotations; ev.ObjectRef.UID != templateUID || a["gateway.karmada.io/member-pod-uid"] != string(memberUID) ||
		a["authorization.k8s.io/decision"] != "allow" || a["gateway.karmada.io/exit-code"] != "4" {
		t.Errorf("authorize mode exec audited with objectRef.uid %q, annotations %v; want the template's UID %q and member-pod-uid %q",
			ev.ObjectRef.UID, a, templateUID, memberUID)
	}
}

// podUIDs are the UIDs of pod's template in karmada-apiserver and of its
// copy in member, read through clusters/<member>/proxy; they must differ,
// or a test could not tell one from the other.
func podUIDs(ctx context.Context, t *testing.T, pod, member string) (template, memberCopy types.UID) {
	t.Helper()
	karmadaClient, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := karmadaClient.CoreV1().Pods(env.Namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("template: %v", err)
	}
	memberClient, err := kubernetes.NewForConfig(testEnv.ClusterProxyConfig(member, env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := memberClient.CoreV1().Pods(env.Namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s's pod through its cluster proxy: %v", member, err)
	}
	if tpl.UID == "" || cp.UID == "" || tpl.UID == cp.UID {
		t.Fatalf("template UID %q, member pod UID %q: want two different UIDs", tpl.UID, cp.UID)
	}
	return tpl.UID, cp.UID
}

// waitAuditEvent polls the audit log for the ResponseComplete of the exec
// of pod whose command holds marker.
func waitAuditEvent(t *testing.T, logPath, pod, marker string) *auditv1.Event {
	t.Helper()
	var ev *auditv1.Event
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ev = findComplete(readAuditLog(t, logPath), pod, marker)
		return ev != nil, nil
	}); err != nil {
		t.Fatalf("no ResponseComplete for the exec %q in the audit log: %v", marker, err)
	}
	return ev
}

// testRecordedTTYSession: a TTY exec through the gateway started with
// --record-sessions=tty, into the pod on member1's real kubelet, is
// recorded; Debian's asciinema (make tools) cats the recording as exactly
// what the client saw, multibyte characters included, and the exec's audit
// event names the file. Over SPDY and WebSocket, as kubectl and client-go
// executors speak them.
func testRecordedTTYSession(ctx context.Context, t *testing.T, pod, logPath, recordings string) {
	player, err := exec.LookPath("asciinema")
	if err != nil {
		t.Fatal("asciinema is not installed: run make tools (Debian's asciinema plays the recordings)")
	}
	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"spdy", "websocket"} {
		t.Run(kind, func(t *testing.T) {
			marker := "rec-" + kind
			script := "printf '%s h\303\251llo \342\234\223\n' " + marker + "; ls -d / /tmp; exit 0"
			u := execURL(t, pod, &corev1.PodExecOptions{Command: []string{"sh", "-c", script}, Stdout: true, TTY: true})
			exe := execExecutor(t, kind, cfg, u)
			sizes := make(chanSizeQueue, 1)
			sizes <- &remotecommand.TerminalSize{Width: 100, Height: 30}
			close(sizes)
			var stdout bytes.Buffer
			if err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Tty: true, TerminalSizeQueue: sizes}); err != nil {
				t.Fatalf("TTY exec: %v", err)
			}
			if !strings.Contains(stdout.String(), marker+" héllo ✓\r\n") {
				t.Fatalf("the client saw %q", stdout.String())
			}
			ev := waitAuditEvent(t, logPath, pod, marker)
			name := ev.Annotations["gateway.karmada.io/recording"]
			if !strings.HasPrefix(name, env.Namespace+"_"+pod+"_") || filepath.Base(name) != name {
				t.Fatalf("the audit event names recording %q, want a file named after pod %s/%s: %v", name, env.Namespace, pod, ev.Annotations)
			}
			path := filepath.Join(recordings, name)
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("recording %s: %v (want a file of mode 0600)", path, err)
			}
			out, err := recordingtest.Cat(player, path)
			if err != nil {
				t.Fatalf("asciinema cat %s: %v", path, err)
			}
			if string(out) != stdout.String() {
				t.Errorf("asciinema cat printed %q, the client saw %q", out, stdout.String())
			}
		})
	}
}
