package streamfollow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// FollowedLog is a pods/log follow body whose clean end is checked: Check
// runs once, when upstream ended the body cleanly, and the error it
// returns replaces the clean end. kube-apiserver ends a proxied log body
// with a clean last chunk also when the kubelet died, so the caller checks
// the end against the member's pod (ContainerEnd).
type FollowedLog struct {
	io.ReadCloser
	Check func() error
}

func (b *FollowedLog) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.Check != nil {
		check := b.Check
		b.Check = nil
		if cut := check(); cut != nil {
			return n, cut
		}
	}
	return n, err
}

// LogEnd is what the member's pod says of a followed container.
type LogEnd int

const (
	LogEndRunning    LogEnd = iota // the followed instance still runs: a cut
	LogEndReal                     // it ended, restarted, or the pod is gone
	LogEndUnverified               // the pod cannot be read or does not name it
)

// ContainerEnd is what pod says of container's instance that was running
// at since (clocks of the member's node and the gateway are compared:
// restarts are told apart by time only when no other state shows them).
func ContainerEnd(pod *corev1.Pod, container string, since time.Time) LogEnd {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return LogEndReal
	}
	if container == "" {
		if len(pod.Spec.Containers) != 1 {
			return LogEndUnverified
		}
		container = pod.Spec.Containers[0].Name // as kube-apiserver defaults it
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range statuses {
			if cs.Name != container {
				continue
			}
			running := cs.State.Running
			switch {
			case running == nil: // terminated, or waiting to restart
				return LogEndReal
			case running.StartedAt.After(since): // a later instance
				return LogEndReal
			case cs.LastTerminationState.Terminated != nil && !cs.LastTerminationState.Terminated.FinishedAt.Time.Before(since.Truncate(time.Second)):
				return LogEndReal // the followed instance ended, a new one runs
			}
			return LogEndRunning
		}
	}
	return LogEndUnverified
}

// maxPodBodyBytes bounds what is read of a member's pod.
const maxPodBodyBytes = 4 << 20

// JudgeLogEnd reads the member's pod with get every interval until it
// shows the end of container's instance that was running at since, for at
// most window, and returns the last verdict and the last error. A member
// that does not answer, or answers an error, is no evidence of an end
// (LogEndRunning); one that refuses the read (401, 403) leaves the end
// unverified; a pod gone (404) ended it.
func JudgeLogEnd(ctx context.Context, window, interval time.Duration, get func(context.Context) (*http.Response, error), container string, since time.Time) (LogEnd, error) {
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		verdict, err := readLogEnd(ctx, get, container, since)
		if verdict != LogEndRunning {
			return verdict, err
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return verdict, err
		}
	}
}

func readLogEnd(ctx context.Context, get func(context.Context) (*http.Response, error), container string, since time.Time) (LogEnd, error) {
	res, err := get(ctx)
	if err != nil {
		return LogEndRunning, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxPodBodyBytes))
	switch {
	case err != nil:
		return LogEndRunning, err
	case res.StatusCode == http.StatusNotFound:
		return LogEndReal, nil
	case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden:
		return LogEndUnverified, fmt.Errorf("reading the pod: HTTP %d", res.StatusCode)
	case res.StatusCode != http.StatusOK:
		return LogEndRunning, fmt.Errorf("reading the pod: HTTP %d", res.StatusCode)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(body, &pod); err != nil {
		return LogEndRunning, fmt.Errorf("reading the pod: %w", err)
	}
	return ContainerEnd(&pod, container, since), nil
}
