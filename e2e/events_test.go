package e2e

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// TestMemberPodEvents lists a federated pod's events through the gateway
// the way executors do (fieldSelector involvedObject.name=<pod>, and the
// kubectl describe selector pinning the template's UID): an event that
// exists only in the member cluster, about the member pod, is returned as
// an event of the template.
// memberClusterAnnotation is memberClusterAnnotation (not imported:
// it would pull the proxy's dependencies into this module).
const memberClusterAnnotation = "karmada-exec-gateway.io/member-cluster"

func TestMemberPodEvents(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	const name = "events-pod"
	placePod(t, sleepPod(name), []string{"member1"}, "member1")

	ev := createMemberEvent(t, "member1", name, "e2e-image-pull", corev1.EventTypeWarning, "Failed", "Failed to pull image \"nope\": ErrImagePull")

	karmadaCS, template := podTemplate(t, name)
	if template.UID == ev.InvolvedObject.UID {
		t.Fatalf("template and member pod share UID %s; the test proves nothing", template.UID)
	}

	gw := gatewayClient(t, env.UserAdmin)
	for _, sel := range []fields.Set{
		{"involvedObject.name": name},
		{"involvedObject.name": name, "involvedObject.namespace": env.Namespace, "involvedObject.kind": "Pod", "involvedObject.uid": string(template.UID)},
	} {
		list, err := gw.CoreV1().Events(env.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
		if err != nil {
			t.Fatalf("list events %v through the gateway: %v", sel, err)
		}
		var found *corev1.Event
		for i := range list.Items {
			if list.Items[i].Reason == "Failed" && list.Items[i].Message == ev.Message {
				found = &list.Items[i]
			}
		}
		if found == nil {
			t.Fatalf("selector %v: member event missing from %d events", sel, len(list.Items))
		}
		if found.InvolvedObject.UID != template.UID {
			t.Errorf("selector %v: involvedObject.uid = %s, want the template's %s", sel, found.InvolvedObject.UID, template.UID)
		}
		if found.Name != "member1."+ev.Name || found.Annotations[memberClusterAnnotation] != "member1" {
			t.Errorf("selector %v: merged event %s annotations %v", sel, found.Name, found.Annotations)
		}
		if found.ResourceVersion != list.ResourceVersion {
			t.Errorf("selector %v: member event resourceVersion %s, want karmada's list resourceVersion %s", sel, found.ResourceVersion, list.ResourceVersion)
		}
	}

	// kubectl describe (client-go, protobuf-or-JSON Accept, the uid-pinned
	// selector) prints it in the pod's Events.
	out, _, err := testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserAdmin), nil, "describe", "pod", name)
	if err != nil {
		t.Fatalf("kubectl describe: %v", err)
	}
	if !strings.Contains(out, "ErrImagePull") {
		t.Errorf("kubectl describe pod through the gateway does not show the member event:\n%s", out)
	}

	out, _, err = testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserAdmin), nil, "events", "--for", "pod/"+name)
	if err != nil || !strings.Contains(out, "ErrImagePull") {
		t.Errorf("kubectl events --for pod/%s through the gateway does not show the member event (%v):\n%s", name, err, out)
	}

	// karmada-apiserver itself has no such event: the merge is the gateway's.
	direct, err := karmadaCS.CoreV1().Events(env.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range direct.Items {
		if e.Message == ev.Message {
			t.Fatalf("karmada-apiserver already has the member event %s", e.Name)
		}
	}
}

// createMemberEvent creates, in member's apiserver, an Event about the
// member pod of the template name, as the member's kubelet would.
func createMemberEvent(t *testing.T, member, name, suffix, typ, reason, message string) *corev1.Event {
	t.Helper()
	ctx := t.Context()
	memberPod, err := testEnv.MemberPod(ctx, member, env.Namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	client, err := testEnv.MemberClient(member)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name + "." + suffix, Namespace: env.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: env.Namespace, Name: name, UID: memberPod.UID,
		},
		Reason: reason, Message: message, Type: typ,
		Source:         corev1.EventSource{Component: "kubelet", Host: member + "-node"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	created, err := client.CoreV1().Events(env.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create member event: %v", err)
	}
	return created
}

// TestMemberPodEventsWatch replays GitLab Runner's pod events feature
// through the gateway: a client-go watch of events with
// fieldSelector=involvedObject.name=<pod> and no resourceVersion, opened
// before Karmada places the pod, streams the member's events for it as
// events of the template; the runner's warning-events list
// (involvedObject.name=<pod>,type=Warning, limit 200) returns only the
// member's warnings; and a watch resumed from the resourceVersion of an
// event it got loses nothing that happened in the member meanwhile.
func TestMemberPodEventsWatch(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	const name, member = "events-watch-pod", "member2"
	gw := gatewayClient(t, env.UserAdmin) // exec-only may not read events
	counter := countRoute(t, metrics.RouteEvents, "200")

	w, err := gw.CoreV1().Events(env.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatalf("watch events through the gateway: %v", err)
	}
	defer w.Stop()

	createPlacedPod(t, sleepPod(name), []string{member})
	waitPlaced(t, name, member)
	_, template := podTemplate(t, name)

	// kubectl events --for pod/<p> --watch, started now, sees what happens
	// in the member from here on.
	kubectlWatch := startKubectl(t, testEnv.GatewayKubeconfig(env.UserAdmin), nil, "events", "--for", "pod/"+name, "--watch")
	pull := createMemberEvent(t, member, name, "pull", corev1.EventTypeWarning, "Failed", "Failed to pull image \"nope\": ErrImagePull")
	started := createMemberEvent(t, member, name, "started", corev1.EventTypeNormal, "Started", "Started container main")
	var lastRV string
	for _, want := range []*corev1.Event{pull, started} {
		got := nextMemberEvent(t, w, want.Message)
		if got.InvolvedObject.UID != template.UID || got.Name != member+"."+want.Name || got.Annotations[memberClusterAnnotation] != member {
			t.Errorf("watched member event %s: involvedObject.uid %s (template %s), annotations %v", got.Name, got.InvolvedObject.UID, template.UID, got.Annotations)
		}
		lastRV = got.ResourceVersion
	}
	w.Stop()
	if err := kubectlWatch.waitOutput(ctx, "ErrImagePull", 30*time.Second); err != nil {
		t.Error(err)
	}
	kubectlWatch.kill()

	list, err := gw.CoreV1().Events(env.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",type=Warning", Limit: 200,
	})
	if err != nil {
		t.Fatalf("list warning events through the gateway: %v", err)
	}
	var messages []string
	for _, e := range list.Items {
		if e.Annotations[memberClusterAnnotation] != "" {
			messages = append(messages, e.Message)
		}
	}
	if len(messages) != 1 || messages[0] != pull.Message {
		t.Errorf("warning list: member events %q, want only %q", messages, pull.Message)
	}

	// What happens in the member while no watch is open arrives once the
	// client resumes from the last resourceVersion it saw.
	killed := createMemberEvent(t, member, name, "oom", corev1.EventTypeWarning, "OOMKilling", "Container main was OOM-killed")
	resumed, err := gw.CoreV1().Events(env.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name, ResourceVersion: lastRV})
	if err != nil {
		t.Fatalf("resume the events watch from %s: %v", lastRV, err)
	}
	defer resumed.Stop()
	nextMemberEvent(t, resumed, killed.Message)
	counter.check(t, 3)
}

// nextMemberEvent reads w until the member event with message arrives,
// failing t after 30 s or when the watch ends or reports an error.
func nextMemberEvent(t *testing.T, w watch.Interface, message string) *corev1.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the events watch ended before %q arrived", message)
			}
			if ev.Type == watch.Error {
				t.Fatalf("the events watch reported %v before %q arrived", ev.Object, message)
			}
			e, isEvent := ev.Object.(*corev1.Event)
			if !isEvent {
				t.Fatalf("the events watch sent a %T", ev.Object)
			}
			if e.Reason == "MemberEventsUnavailable" {
				t.Fatalf("the gateway reports member events unavailable: %s", e.Message)
			}
			if e.Message == message && e.Annotations[memberClusterAnnotation] != "" {
				return e
			}
		case <-timeout:
			t.Fatalf("no member event %q through the gateway's events watch within 30s", message)
		}
	}
}

// podTemplate reads the template name from karmada-apiserver as admin.
func podTemplate(t *testing.T, name string) (kubernetes.Interface, *corev1.Pod) {
	t.Helper()
	karmadaCS, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	template, err := karmadaCS.CoreV1().Pods(env.Namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return karmadaCS, template
}

// TestMemberPodEventsAuthorizeMode: a caller with events RBAC in
// karmada-apiserver only (no clusters/proxy, nothing in members) gets the
// member's events for its pod in authorize mode, where the gateway reads
// them as itself after a SubjectAccessReview; in passthrough mode the same
// caller gets karmada's events and a Warning naming the member.
func TestMemberPodEventsAuthorizeMode(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	const name, member = "events-authz-pod", "member1"
	placePod(t, sleepPod(name), []string{member}, member)
	ev := createMemberEvent(t, member, name, "pull", corev1.EventTypeWarning, "Failed", "Failed to pull image \"authz\": ErrImagePull")
	selector := metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}

	client, warnings := gatewayClientWithWarnings(t, env.UserExecKarmadaOnly)
	list, err := client.CoreV1().Events(env.Namespace).List(ctx, selector)
	if err != nil {
		t.Fatalf("passthrough mode: list events as %s: %v", env.UserExecKarmadaOnly, err)
	}
	// The Warning carries karmada-apiserver's refusal of the cluster proxy
	// as text, though the gateway asked for (and got) it in protobuf.
	refusal := rawStatus(t, http.MethodGet, testEnv.KarmadaURL()+"/apis/cluster.karmada.io/v1alpha1/clusters/"+member+"/proxy/api/v1/namespaces/"+env.Namespace+"/events", testEnv.Token(env.UserExecKarmadaOnly))
	wantWarning := "member events from " + member + " unavailable: HTTP 403: " + refusal.Message
	if hasMessage(list.Items, ev.Message) || refusal.Code != http.StatusForbidden || warnings.String() != wantWarning {
		t.Fatalf("passthrough mode: want karmada's events and the Warning %q for %s without clusters/proxy; got %d events, warnings %q", wantWarning, env.UserExecKarmadaOnly, len(list.Items), warnings.String())
	}

	restartGatewayFor(t, []string{"--auth-mode=authorize"}, "--auth-mode=passthrough")
	client, warnings = gatewayClientWithWarnings(t, env.UserExecKarmadaOnly)
	list, err = client.CoreV1().Events(env.Namespace).List(ctx, selector)
	if err != nil {
		t.Fatalf("authorize mode: list events as %s: %v", env.UserExecKarmadaOnly, err)
	}
	if !hasMessage(list.Items, ev.Message) || warnings.String() != "" {
		t.Fatalf("authorize mode: want the member event without warnings; got %d events, warnings %q", len(list.Items), warnings.String())
	}
	w, err := client.CoreV1().Events(env.Namespace).Watch(ctx, selector)
	if err != nil {
		t.Fatalf("authorize mode: watch events as %s: %v", env.UserExecKarmadaOnly, err)
	}
	defer w.Stop()
	nextMemberEvent(t, w, ev.Message)
	later := createMemberEvent(t, member, name, "oom", corev1.EventTypeWarning, "OOMKilling", "authz: OOM-killed")
	nextMemberEvent(t, w, later.Message)

	// A caller without events RBAC in karmada-apiserver gets its refusal.
	_, err = gatewayClient(t, env.UserNoExec).CoreV1().Events(env.Namespace).List(ctx, selector)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("authorize mode: list events as %s: %v, want Forbidden", env.UserNoExec, err)
	}
}

func hasMessage(events []corev1.Event, message string) bool {
	for _, e := range events {
		if e.Message == message && e.Annotations[memberClusterAnnotation] != "" {
			return true
		}
	}
	return false
}

// warningRecorder keeps the Warning headers a client-go client received.
type warningRecorder struct {
	mu   sync.Mutex
	text []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

func (w *warningRecorder) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.text, "; ")
}

// gatewayClientWithWarnings is gatewayClient that records Warning headers.
func gatewayClientWithWarnings(t *testing.T, user string) (kubernetes.Interface, *warningRecorder) {
	t.Helper()
	cfg, err := testEnv.GatewayConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	rec := &warningRecorder{}
	cfg.WarningHandler = rec
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, rec
}
