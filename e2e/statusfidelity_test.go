package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

const (
	fidelityPod = "status-fidelity"
	// fidelityContainer is the container name GitLab Runner's kubernetes
	// executor gives the job container and looks up in containerStatuses.
	fidelityContainer = "build"
	fidelityImage     = images.Busybox
	// symptomTimeout bounds the executor-style waits expected to hang
	// without the customization: several of Karmada's status syncs (they
	// follow member pod events), short enough to keep the test quick.
	symptomTimeout = 10 * time.Second
	// fixedTimeout bounds the same waits once the customization is applied.
	fixedTimeout = 30 * time.Second
)

// TestPodStatusFidelity shows the symptom deploy/karmada/README.md
// describes, through the gateway against real Karmada, and that the shipped
// pod-status-interpreter.yaml fixes it: without it the template is Running
// with a nameless ready container status and no conditions, so GitLab
// Runner's wait (container "build" ready), fabric8's (condition Ready True)
// and kubectl wait all time out; with it they all succeed for a pod created
// after it, and the template carries the member pod's IPs, start time and
// container name and image. (Karmada applies the customization to statuses
// it aggregates from then on: a pod already running keeps its stale status
// until its member status changes, as deploy/karmada/README.md says.)
//
// Not parallel: the customization is cluster-scoped and changes every Pod
// template's status, which other tests could observe.
func TestPodStatusFidelity(t *testing.T) {
	e := testEnv
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	customizations := dyn.Resource(karmada.ResourceInterpreterCustomizationGVR)
	shipped := shippedPodStatusInterpreter(t)
	name := shipped.GetName()

	// Step 1: Karmada's built-in aggregation, i.e. no customization for Pods.
	others, err := customizations.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ResourceInterpreterCustomizations: %v", err)
	}
	var prior *unstructured.Unstructured
	for i := range others.Items {
		c := &others.Items[i]
		if c.GetName() == name {
			prior = c.DeepCopy()
			continue
		}
		apiVersion, _, _ := unstructured.NestedString(c.Object, "spec", "target", "apiVersion")
		kind, _, _ := unstructured.NestedString(c.Object, "spec", "target", "kind")
		if apiVersion == "v1" && kind == "Pod" {
			t.Fatalf("ResourceInterpreterCustomization %s targets v1/Pod: the test needs Karmada's built-in Pod aggregation to start from", c.GetName())
		}
	}
	if err := deleteCustomization(ctx, customizations, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deleteCustomization(ctx, customizations, name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if prior == nil {
			return
		}
		// Put back what was there before the test, as it was.
		restore := prior.DeepCopy()
		for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"} {
			unstructured.RemoveNestedField(restore.Object, "metadata", f)
		}
		if _, err := customizations.Create(ctx, restore, metav1.CreateOptions{}); err != nil {
			t.Errorf("cleanup: restore ResourceInterpreterCustomization %s: %v", name, err)
		}
	})

	createFidelityPod(t, fidelityPod)
	if _, err := e.WaitPodRunning(ctx, env.Namespace, fidelityPod, 60*time.Second); err != nil {
		t.Fatal(err)
	}

	gwConfig, err := e.GatewayConfig(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	// Several waits poll side by side; client-go's default 5 QPS would
	// throttle them into their deadlines.
	gwConfig.QPS, gwConfig.Burst = 50, 100
	gw, err := kubernetes.NewForConfig(gwConfig)
	if err != nil {
		t.Fatal(err)
	}
	getPod := func(name string) func(ctx context.Context) (*corev1.Pod, error) {
		return func(ctx context.Context) (*corev1.Pod, error) {
			// A dead kubelet or containerd would make every wait below time out
			// for the wrong reason.
			if err := e.ComponentErrors(); err != nil {
				return nil, err
			}
			pod, err := gw.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("get pod %s through the gateway: %w", name, err)
			}
			return pod, nil
		}
	}
	get := getPod(fidelityPod)

	// Step 2: the symptom. First wait until Karmada has written the
	// member's container readiness to the template, so that the timeouts
	// below are about the missing name and condition, not a slow sync.
	synced, err := waitTemplate(ctx, get, symptomTimeout, func(pod *corev1.Pod) bool {
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Ready && cs.State.Running != nil {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("template never got a ready, running container status from the built-in aggregation (last status %s): %v", statusSummary(synced), err)
	}
	if cs := synced.Status.ContainerStatuses; len(cs) != 1 || cs[0].Name != "" || cs[0].Image != "" {
		t.Errorf("built-in aggregation gave containerStatuses %+v, want one nameless, imageless entry", cs)
	}
	if len(synced.Status.Conditions) != 0 || synced.Status.PodIP != "" {
		t.Errorf("built-in aggregation gave conditions %+v and podIP %q, want none", synced.Status.Conditions, synced.Status.PodIP)
	}

	// The two executor waits and kubectl wait run side by side: each must
	// time out on its own bound, and together they take one bound.
	var wg sync.WaitGroup
	var gitlabErr, fabric8Err, kubectlErr error
	var gitlabLast, fabric8Last *corev1.Pod
	var kubectlStderr string
	wg.Go(func() { gitlabLast, gitlabErr = waitTemplate(ctx, get, symptomTimeout, gitlabContainerReady) })
	wg.Go(func() { fabric8Last, fabric8Err = waitTemplate(ctx, get, symptomTimeout, fabric8PodReady) })
	wg.Go(func() {
		kctx, cancel := context.WithTimeout(ctx, symptomTimeout+20*time.Second)
		defer cancel()
		_, kubectlStderr, kubectlErr = e.RunKubectl(kctx, e.GatewayKubeconfig(env.UserAdmin), nil,
			"wait", "--for=condition=Ready", "pod/"+fidelityPod, fmt.Sprintf("--timeout=%s", symptomTimeout))
	})
	wg.Wait()
	expectWaitTimeout(t, "GitLab Runner's wait (container status named build ready)", gitlabErr, gitlabLast)
	expectWaitTimeout(t, "fabric8's wait (condition Ready True)", fabric8Err, fabric8Last)
	if kubectlErr == nil {
		t.Errorf("kubectl wait --for=condition=Ready through the gateway succeeded without the customization")
	} else if !strings.Contains(kubectlStderr, "timed out") {
		t.Errorf("kubectl wait --for=condition=Ready failed, want a timeout: %v", kubectlErr)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("without the customization, all three waits timed out after %s: %s", symptomTimeout, statusSummary(gitlabLast))

	// Step 3: apply the shipped customization to karmada-apiserver, then
	// run the next job's pod.
	if _, err := customizations.Create(ctx, shipped, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ResourceInterpreterCustomization %s: %v", name, err)
	}
	applied := time.Now()
	fixedPod := fidelityPod + "-next"
	createFidelityPod(t, fixedPod)
	get = getPod(fixedPod)
	tmpl, err := waitTemplate(ctx, get, fixedTimeout, gitlabContainerReady)
	if err != nil {
		t.Fatalf("GitLab Runner's wait with the customization (last status %s): %v", statusSummary(tmpl), err)
	}
	if tmpl, err = waitTemplate(ctx, get, fixedTimeout, fabric8PodReady); err != nil {
		t.Fatalf("fabric8's wait with the customization (last status %s): %v", statusSummary(tmpl), err)
	}
	t.Logf("with the customization, both waits succeeded %s after it was created: %s", time.Since(applied).Round(time.Millisecond), statusSummary(tmpl))

	clusters, err := e.PodClusters(ctx, env.Namespace, fixedPod)
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 1 {
		t.Fatalf("pod scheduled to %v, want exactly one cluster", clusters)
	}
	memberPod, err := e.MemberPod(ctx, clusters[0], env.Namespace, fixedPod)
	if err != nil {
		t.Fatal(err)
	}
	got, want := tmpl.Status, memberPod.Status
	if got.PodIP == "" || got.PodIP != want.PodIP {
		t.Errorf("template podIP %q, member pod's %q", got.PodIP, want.PodIP)
	}
	if got.HostIP == "" || got.HostIP != want.HostIP {
		t.Errorf("template hostIP %q, member pod's %q", got.HostIP, want.HostIP)
	}
	if got.StartTime == nil || want.StartTime == nil || !got.StartTime.Equal(want.StartTime) {
		t.Errorf("template startTime %v, member pod's %v", got.StartTime, want.StartTime)
	}
	if cs := namedContainerStatus(tmpl, fidelityContainer); cs == nil {
		t.Errorf("template has no container status named %q: %+v", fidelityContainer, got.ContainerStatuses)
	} else if cs.Image != fidelityImage {
		t.Errorf("template container %q has image %q, want %q", fidelityContainer, cs.Image, fidelityImage)
	}

	// Step 4: the real kubectl through the gateway agrees.
	kctx, cancel := context.WithTimeout(ctx, fixedTimeout+10*time.Second)
	defer cancel()
	if _, _, err := e.RunKubectl(kctx, e.GatewayKubeconfig(env.UserAdmin), nil,
		"wait", "--for=condition=Ready", "pod/"+fixedPod, fmt.Sprintf("--timeout=%s", fixedTimeout)); err != nil {
		t.Errorf("kubectl wait with the customization: %v", err)
	}
	jsonpath := fmt.Sprintf(`jsonpath={.status.containerStatuses[?(@.name=="%s")].ready}`, fidelityContainer)
	if stdout, _, err := e.RunKubectl(kctx, e.GatewayKubeconfig(env.UserAdmin), nil, "get", "pod", fixedPod, "-o", jsonpath); err != nil {
		t.Errorf("kubectl get: %v", err)
	} else if stdout != "true" {
		t.Errorf("kubectl get -o %s printed %q, want %q", jsonpath, stdout, "true")
	}
}

// shippedPodStatusInterpreter is deploy/karmada/pod-status-interpreter.yaml,
// the object operators apply, read from the repository.
func shippedPodStatusInterpreter(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	root, err := env.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "karmada", "pod-status-interpreter.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
		t.Fatalf("decode pod-status-interpreter.yaml: %v", err)
	}
	if gvk := obj.GroupVersionKind(); gvk.GroupVersion() != karmada.ResourceInterpreterCustomizationGVR.GroupVersion() || gvk.Kind != "ResourceInterpreterCustomization" || obj.GetName() == "" {
		t.Fatalf("pod-status-interpreter.yaml holds %s %q, want a named ResourceInterpreterCustomization", gvk, obj.GetName())
	}
	return obj
}

// deleteCustomization deletes the customization named name and waits until
// it is gone (absent already is fine).
func deleteCustomization(ctx context.Context, client dynamic.NamespaceableResourceInterface, name string) error {
	if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete ResourceInterpreterCustomization %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("wait for ResourceInterpreterCustomization %s to be deleted: %w", name, err)
	}
	return nil
}

// createFidelityPod creates a policy selecting only the pod name and the pod
// itself (a single container named build) through the gateway as admin;
// both are deleted when t ends.
func createFidelityPod(t *testing.T, name string) {
	t.Helper()
	e := testEnv
	ctx := t.Context()
	policy := env.PropagationPolicy(env.Namespace, name, e.Members())
	spec := policy.Object["spec"].(map[string]any)
	spec["resourceSelectors"] = []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": name}}
	// Above any namespace-wide policy, so this one decides.
	spec["priority"] = int64(10)
	if err := e.CreatePolicy(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.DumpLogs(t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.DeletePod(ctx, env.Namespace, name); err != nil {
			t.Errorf("delete pod: %v", err)
		}
		if err := e.DeletePolicy(ctx, env.Namespace, name); err != nil {
			t.Errorf("delete policy: %v", err)
		}
	})
	pod := env.ShellPod(env.Namespace, name, "sleep 3600")
	pod.Spec.Containers[0].Name = fidelityContainer
	pod.Spec.Containers[0].Image = fidelityImage
	cfg, err := e.GatewayConfig(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.CoreV1().Pods(env.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod through the gateway: %v", err)
	}
}

// waitTemplate polls get until done holds or timeout passes, and returns the
// last pod read. An error reading the pod ends the wait with that error,
// so a timeout means the condition was false on every read.
func waitTemplate(ctx context.Context, get func(context.Context) (*corev1.Pod, error), timeout time.Duration, done func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		// Each read has its own bound instead of the wait's deadline, so
		// that no read is cut short by it: the wait ends with a timeout
		// only after reads that all completed and found done false.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		pod, err := get(rctx)
		if err != nil {
			return false, err
		}
		last = pod
		return done(pod), nil
	})
	return last, err
}

// gitlabContainerReady is GitLab Runner's kubernetes executor's readiness
// check: the pod is Running and the container status named build is ready.
func gitlabContainerReady(pod *corev1.Pod) bool {
	cs := namedContainerStatus(pod, fidelityContainer)
	return pod.Status.Phase == corev1.PodRunning && cs != nil && cs.Ready
}

// fabric8PodReady is fabric8's Readiness.isPodReady, used by the Jenkins
// kubernetes plugin: the Ready condition is True.
func fabric8PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func namedContainerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// expectWaitTimeout fails t unless err is the wait's own timeout, with the
// pod still Running: the executor would wait forever on a running pod.
func expectWaitTimeout(t *testing.T, what string, err error, last *corev1.Pod) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s succeeded without the customization (status %s)", what, statusSummary(last))
	case !wait.Interrupted(err):
		t.Errorf("%s failed, want a timeout: %v", what, err)
	case last == nil || last.Status.Phase != corev1.PodRunning:
		t.Errorf("%s timed out but the pod was not Running (status %s)", what, statusSummary(last))
	}
}

// statusSummary is the parts of a pod's status the waits look at, for
// failure messages.
func statusSummary(pod *corev1.Pod) string {
	if pod == nil {
		return "<no pod read>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s podIP=%q", pod.Status.Phase, pod.Status.PodIP)
	for _, c := range pod.Status.Conditions {
		fmt.Fprintf(&b, " condition[%s]=%s", c.Type, c.Status)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		fmt.Fprintf(&b, " container[%q image=%q ready=%t]", cs.Name, cs.Image, cs.Ready)
	}
	return b.String()
}
