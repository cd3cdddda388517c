package env

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// PropagationPolicy selects every Pod in namespace and places each on
// exactly one of clusters (spreadConstraints maxGroups 1, Divided), the
// policy a CI namespace should use so exec has one answer.
func PropagationPolicy(namespace, name string, clusters []string) *unstructured.Unstructured {
	names := make([]any, 0, len(clusters))
	for _, c := range clusters {
		names = append(names, c)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.karmada.io/v1alpha1",
		"kind":       "PropagationPolicy",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}},
			"placement": map[string]any{
				"clusterAffinity":   map[string]any{"clusterNames": names},
				"spreadConstraints": []any{map[string]any{"spreadByField": "cluster", "maxGroups": int64(1), "minGroups": int64(1)}},
				"replicaScheduling": map[string]any{"replicaSchedulingType": "Divided"},
			},
		},
	}}
}

// ShellPod is a one-container Pod (container "main") running script with
// sh in the local busybox image, which no node ever pulls.
func ShellPod(namespace, name, script string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{LocalContainer("main", images.Busybox, "sh", "-c", script)},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// LocalContainer is a container of one of the environment's local images
// (package images) with imagePullPolicy Never.
func LocalContainer(name, image string, command ...string) corev1.Container {
	return corev1.Container{Name: name, Image: image, ImagePullPolicy: corev1.PullNever, Command: command}
}

// CreatePolicy creates a PropagationPolicy in karmada-apiserver as admin.
func (e *Env) CreatePolicy(ctx context.Context, policy *unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	if _, err := dyn.Resource(karmada.PropagationPolicyGVR).Namespace(policy.GetNamespace()).Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PropagationPolicy %s/%s: %w", policy.GetNamespace(), policy.GetName(), err)
	}
	return nil
}

// DeletePolicy deletes a PropagationPolicy (gone already is fine).
func (e *Env) DeletePolicy(ctx context.Context, namespace, name string) error {
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	if err := dyn.Resource(karmada.PropagationPolicyGVR).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete PropagationPolicy %s/%s: %w", namespace, name, err)
	}
	return nil
}

// DeletePod deletes a Pod template in karmada-apiserver and waits until it
// is gone; Karmada propagates the deletion to the member.
func (e *Env) DeletePod(ctx context.Context, namespace, name string) error {
	client, err := e.KarmadaClient(UserAdmin)
	if err != nil {
		return err
	}
	if err := client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", namespace, name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("wait for pod %s/%s to be deleted: %w", namespace, name, err)
	}
	return nil
}

// WaitPodRunning waits until the Pod template in karmada-apiserver reports
// phase Running, i.e. Karmada propagated it, the member's scheduler bound it, the kubelet started it
// and the status came back, then returns the template.
func (e *Env) WaitPodRunning(ctx context.Context, namespace, name string, timeout time.Duration) (*corev1.Pod, error) {
	client, err := e.KarmadaClient(UserAdmin)
	if err != nil {
		return nil, err
	}
	var pod *corev1.Pod
	last := "not found"
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := e.ComponentErrors(); err != nil {
			return false, err
		}
		p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		pod, last = p, "phase "+string(p.Status.Phase)
		switch p.Status.Phase {
		case corev1.PodRunning:
			return true, nil
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("pod %s/%s ended (%s)", namespace, name, p.Status.Phase)
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for pod %s/%s to run (%s): %w", namespace, name, last, err)
	}
	return pod, nil
}

// PodClusters returns the clusters the Pod template's ResourceBinding is
// scheduled to, found by spec.resource as the gateway finds it.
func (e *Env) PodClusters(ctx context.Context, namespace, name string) ([]string, error) {
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(karmada.ResourceBindingGVR).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ResourceBindings in %s: %w", namespace, err)
	}
	for i := range list.Items {
		rb, err := karmada.FromUnstructured[karmada.ResourceBinding](&list.Items[i])
		if err != nil {
			return nil, err
		}
		r := rb.Spec.Resource
		if r.APIVersion == "v1" && r.Kind == "Pod" && r.Name == name {
			if names := rb.ClusterNames(); len(names) > 0 {
				return names, nil
			}
			return nil, fmt.Errorf("ResourceBinding %s/%s is not scheduled yet", rb.Namespace, rb.Name)
		}
	}
	return nil, fmt.Errorf("no ResourceBinding for pod %s/%s", namespace, name)
}

// MemberPod returns the Pod Karmada created in member for the template.
func (e *Env) MemberPod(ctx context.Context, member, namespace, name string) (*corev1.Pod, error) {
	client, err := e.MemberClient(member)
	if err != nil {
		return nil, err
	}
	list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no pod %s/%s in %s", namespace, name, member)
	}
	return &list.Items[0], nil
}

// MemberExec runs command in container of pod through member's apiserver
// directly (kubectl as the member's admin), past Karmada and the gateway:
// a test's witness of what is in which member's container.
func (e *Env) MemberExec(ctx context.Context, member, namespace, pod, container string, command ...string) (string, error) {
	args := append([]string{"-n", namespace, "exec", pod, "-c", container, "--"}, command...)
	stdout, _, err := e.RunKubectl(ctx, e.MemberKubeconfig(member), nil, args...)
	if err != nil {
		return stdout, fmt.Errorf("in %s: %w", member, err)
	}
	return stdout, nil
}
