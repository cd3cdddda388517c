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
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
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
// gateway read from the error channel; the token appears nowhere.
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
	restartGatewayFor(t, []string{
		"--audit-log-path=" + logPath, "--audit-webhook-config-file=" + webhookConfig, "--audit-webhook-batch-max-wait=200ms",
	}, "--audit-log-path=")

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
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

	var logged, posted []auditv1.Event
	deadline := time.Now().Add(30 * time.Second)
	for {
		logged, posted = readAuditLog(t, logPath), hook.received()
		done := true
		for _, marker := range []string{"audit-websocket", "audit-spdy", "audit-refused"} {
			done = done && findComplete(logged, name, marker) != nil && findComplete(posted, name, marker) != nil
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling the sinks with a deadline
	}
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
}
