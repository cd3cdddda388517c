package e2e

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
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

	memberPod, err := testEnv.MemberPod(ctx, "member1", env.Namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	member, err := testEnv.MemberClient("member1")
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name + ".e2e-image-pull", Namespace: env.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: env.Namespace, Name: name, UID: memberPod.UID,
		},
		Reason: "Failed", Message: "Failed to pull image \"nope\": ErrImagePull", Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: "member1-node"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := member.CoreV1().Events(env.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create member event: %v", err)
	}

	karmadaCS, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	template, err := karmadaCS.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if template.UID == memberPod.UID {
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
