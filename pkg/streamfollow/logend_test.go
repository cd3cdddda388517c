package streamfollow

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContainerEnd(t *testing.T) {
	since := time.Date(2026, 1, 1, 10, 0, 0, 500e6, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(since.Add(d).Truncate(time.Second)) }
	running := func(started metav1.Time) corev1.ContainerState {
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	}
	pod := func(statuses ...corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = statuses
		return p
	}
	deleted := pod(corev1.ContainerStatus{Name: "main", State: running(at(-time.Hour))})
	deleted.DeletionTimestamp = &metav1.Time{Time: since}
	succeeded := pod()
	succeeded.Status.Phase = corev1.PodSucceeded
	twoContainers := pod(corev1.ContainerStatus{Name: "main", State: running(at(-time.Hour))})
	twoContainers.Spec.Containers = append(twoContainers.Spec.Containers, corev1.Container{Name: "side"})
	initPod := pod()
	initPod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: running(at(-time.Hour))}}

	cases := []struct {
		name      string
		pod       *corev1.Pod
		container string
		want      LogEnd
	}{
		{"still running", pod(corev1.ContainerStatus{Name: "main", State: running(at(-time.Hour))}), "main", LogEndRunning},
		{"still running, container defaulted", pod(corev1.ContainerStatus{Name: "main", State: running(at(-time.Hour))}), "", LogEndRunning},
		{"started the same second", pod(corev1.ContainerStatus{Name: "main", State: running(at(0))}), "main", LogEndRunning},
		{"terminated", pod(corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}), "main", LogEndReal},
		{"waiting to restart", pod(corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}), "main", LogEndReal},
		{"restarted since", pod(corev1.ContainerStatus{Name: "main", State: running(at(3 * time.Second))}), "main", LogEndReal},
		{"previous instance finished since", pod(corev1.ContainerStatus{
			Name: "main", State: running(at(0)),
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: at(0)}},
		}), "main", LogEndReal},
		{"previous instance finished before", pod(corev1.ContainerStatus{
			Name: "main", State: running(at(-time.Minute)),
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: at(-2 * time.Minute)}},
		}), "main", LogEndRunning},
		{"pod deleting", deleted, "main", LogEndReal},
		{"pod succeeded", succeeded, "main", LogEndReal},
		{"init container running", initPod, "init", LogEndRunning},
		{"container unknown", pod(), "main", LogEndUnverified},
		{"no container and two in the pod", twoContainers, "", LogEndUnverified},
	}
	for _, tc := range cases {
		if got := ContainerEnd(tc.pod, tc.container, since); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFollowedLogChecksOnlyCleanEnds(t *testing.T) {
	cut := errors.New("cut")
	var checks int
	body := &FollowedLog{ReadCloser: io.NopCloser(io.MultiReader(strings.NewReader("abc"), errReader{io.ErrUnexpectedEOF})), Check: func() error { checks++; return cut }}
	if _, err := io.ReadAll(body); !errors.Is(err, io.ErrUnexpectedEOF) || checks != 0 {
		t.Errorf("a broken body: %v after %d checks, want it as it came, unchecked", err, checks)
	}
	body = &FollowedLog{ReadCloser: io.NopCloser(strings.NewReader("abc")), Check: func() error { checks++; return cut }}
	if b, err := io.ReadAll(body); !errors.Is(err, cut) || string(b) != "abc" || checks != 1 {
		t.Errorf("a clean end: %q, %v after %d checks, want abc and the check's error once", b, err, checks)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
