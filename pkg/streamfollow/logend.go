package streamfollow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	corev1 "k8s.io/api/core/v1"
)

// ErrLogFollowCut ends a follow the member cut: ReverseProxy aborts the
// response (HTTP/1.1: no last chunk, HTTP/2: RST_STREAM), so the client
// reads an unexpected EOF instead of a clean end.
var ErrLogFollowCut = errors.New("log follow cut by the member cluster while the container runs")

// LogFollowOptions configures FollowLog.
type LogFollowOptions struct {
	// Get reads the member's pod.
	Get func(context.Context) (*http.Response, error)
	// Window bounds how long a clean end is held while the pod is read,
	// every Interval (JudgeLogEnd).
	Window, Interval time.Duration
	// OnVerdict is told a clean end found a cut (LogEndRunning: the
	// response is aborted with ErrLogFollowCut) or could not tell
	// (LogEndUnverified: the end stays clean), with the last error.
	OnVerdict func(LogEnd, error)
}

// FollowLog has the pods/log response res judged when upstream ends it
// cleanly, if it is a follow of the current container (GET, follow, not
// previous=true: that one ended long ago; not limitBytes: it ends early by
// design), and reports whether it is. kube-apiserver ends a proxied log
// body with a clean last chunk also when the kubelet died, so the end is
// checked against the member's pod: the container's instance ends for
// real only when it stops running (or the pod goes).
func FollowLog(res *http.Response, opts LogFollowOptions) bool {
	out := res.Request
	q := out.URL.Query()
	if out.Method != http.MethodGet || !queryBool(q, "follow") || queryBool(q, "previous") || q.Has("limitBytes") {
		return false
	}
	since, container := time.Now(), q.Get("container")
	res.Body = &FollowedLog{ReadCloser: res.Body, Check: func() error {
		ctx := out.Context()
		verdict, err := JudgeLogEnd(ctx, opts.Window, opts.Interval, opts.Get, container, since)
		if ctx.Err() != nil || verdict == LogEndReal { // the client left: nobody to tell
			return nil
		}
		opts.OnVerdict(verdict, err)
		if verdict == LogEndUnverified {
			return nil
		}
		return ErrLogFollowCut
	}}
	return true
}

// queryBool reads key as kube-apiserver's bool conversion does: present
// with anything but 0 or false.
func queryBool(q url.Values, key string) bool {
	var on bool
	v, ok := q[key]
	return ok && runtime.Convert_Slice_string_To_bool(&v, &on, nil) == nil && on
}

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
