package nodeagent

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// syncPod reconciles one pod key: bind it if unscheduled, run it if it is
// ours, terminate and finalize it when deleted.
func (a *Agent) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := a.podLister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return err
	}

	a.mu.Lock()
	rt := a.pods[key]
	a.mu.Unlock()
	if rt != nil && (pod == nil || pod.UID != rt.pod.UID) {
		// What we run was force-deleted, or replaced by a pod of the same
		// name: stop it; its end requeues the key.
		rt.stop(time.Second)
		if !rt.isEnded() {
			return nil
		}
		a.mu.Lock()
		if a.pods[key] == rt {
			delete(a.pods, key)
		}
		a.mu.Unlock()
		rt = nil
	}
	if pod == nil {
		return nil
	}

	if pod.Spec.NodeName == "" {
		if pod.DeletionTimestamp != nil || len(pod.Spec.SchedulingGates) > 0 {
			return nil
		}
		return a.bind(ctx, pod)
	}
	if pod.Spec.NodeName != a.nodeName {
		return nil
	}

	if pod.DeletionTimestamp != nil {
		if rt == nil {
			return a.finalizeDeletion(ctx, pod)
		}
		if !rt.isEnded() {
			rt.stop(gracePeriod(pod))
			return nil
		}
		// The informer may show the pod a while after it was deleted.
		if rt.finalized.Load() {
			return nil
		}
		if err := a.finalizeDeletion(ctx, pod); err != nil {
			return err
		}
		rt.finalized.Store(true)
		return nil
	}
	if rt != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return nil
	}

	rt = newPodRuntime(a, pod, key)
	fresh := pod.Status.StartTime == nil
	if !fresh {
		if pod.Spec.RestartPolicy != v1.RestartPolicyAlways {
			return a.markLost(ctx, pod)
		}
		rt.resume(pod.Status)
	}
	a.mu.Lock()
	a.pods[key] = rt
	a.mu.Unlock()
	a.podRuns.Add(1)
	go rt.run(ctx, fresh)
	return nil
}

// bind does the scheduler's job: every member has exactly one node.
func (a *Agent) bind(ctx context.Context, pod *v1.Pod) error {
	err := a.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: a.nodeName},
	}, metav1.CreateOptions{})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Bound pod", "pod", klog.KObj(pod))
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or bound meanwhile: the next event says which.
		return nil
	default:
		return fmt.Errorf("bind %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}

// finalizeDeletion removes a pod whose processes are all gone, as kubelet's
// status manager does: grace period 0, preconditioned on the UID so a new
// pod of the same name is never deleted by mistake.
func (a *Agent) finalizeDeletion(ctx context.Context, pod *v1.Pod) error {
	err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: ptr.To(pod.UID)},
	})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Deleted pod", "pod", klog.KObj(pod))
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	default:
		return fmt.Errorf("delete %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}

// markLost fails a pod an earlier agent process ran: its processes died
// with that agent and its restart policy forbids starting them again.
func (a *Agent) markLost(ctx context.Context, pod *v1.Pod) error {
	updated := pod.DeepCopy()
	updated.Status = lostStatus(pod)
	_, err := a.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mark lost pod %s/%s failed: %w", pod.Namespace, pod.Name, err)
	}
	klog.FromContext(ctx).Info("Pod was started by an earlier agent and cannot restart: marked failed", "pod", klog.KObj(pod))
	return nil
}

func gracePeriod(pod *v1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	default:
		return v1.DefaultTerminationGracePeriodSeconds * time.Second
	}
}
