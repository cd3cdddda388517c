package nodeagent

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func condition(p *v1.Pod, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func TestNodeRegistration(t *testing.T) {
	ta := startAgent(t)
	node, err := ta.client.CoreV1().Nodes().Get(ta.ctx, testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port := ta.agent.port
	if got := node.Status.DaemonEndpoints.KubeletEndpoint.Port; int(got) != port {
		t.Errorf("kubelet port %d, want %d", got, port)
	}
	addrs := map[v1.NodeAddressType]string{}
	for _, a := range node.Status.Addresses {
		addrs[a.Type] = a.Address
	}
	if addrs[v1.NodeInternalIP] != "127.0.0.1" || addrs[v1.NodeHostName] != testNode {
		t.Errorf("addresses %v", node.Status.Addresses)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		ready = ready || (c.Type == v1.NodeReady && c.Status == v1.ConditionTrue)
	}
	if !ready {
		t.Errorf("node not Ready: %+v", node.Status.Conditions)
	}
	for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods} {
		if q := node.Status.Allocatable[r]; q.IsZero() {
			t.Errorf("allocatable %s is zero", r)
		}
	}
	if node.Status.NodeInfo.KubeletVersion == "" || node.Labels[v1.LabelHostname] != testNode {
		t.Errorf("nodeInfo %+v labels %v", node.Status.NodeInfo, node.Labels)
	}
}

func TestPodLifecycle(t *testing.T) {
	ta := startAgent(t)
	workDir := filepath.Join(ta.root, "ci", "lifecycle", "main", "work", "dir")
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lifecycle", Namespace: testNS},
		Spec: v1.PodSpec{
			// Unscheduled: the agent binds it.
			RestartPolicy: v1.RestartPolicyNever,
			InitContainers: []v1.Container{{
				Name: "init", Image: "busybox", Command: []string{"sh", "-c", "echo from-init > ../main/marker"},
			}},
			Containers: []v1.Container{{
				Name: "main", Image: "busybox:1.36", WorkingDir: "/work/dir",
				Command: []string{"sh", "-c"},
				Args: []string{`[ "$(pwd)" = "$WANT_DIR" ] || exit 11
[ "$(cat ../../marker)" = from-init ] || exit 12
[ "$POD_NAME/$POD_NS/$PLAIN" = lifecycle/ci/value ] || exit 13
while [ ! -e finish ]; do sleep 0.02; done`},
				Env: []v1.EnvVar{
					{Name: "WANT_DIR", Value: workDir},
					{Name: "PLAIN", Value: "value"},
					{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_NS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				},
			}},
		},
	}
	ta.createPod(p)

	running := ta.waitPod("lifecycle", "Running", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && podReady(p)
	})
	if running.Spec.NodeName != testNode {
		t.Fatalf("nodeName %q", running.Spec.NodeName)
	}
	st := running.Status
	for _, c := range []v1.PodConditionType{v1.PodScheduled, v1.PodInitialized, v1.ContainersReady, v1.PodReady} {
		if condition(running, c) != v1.ConditionTrue {
			t.Errorf("condition %s = %q, want True", c, condition(running, c))
		}
	}
	if st.PodIP != "127.0.0.1" || st.HostIP != "127.0.0.1" || len(st.PodIPs) != 1 || len(st.HostIPs) != 1 || st.StartTime == nil || st.QOSClass != v1.PodQOSBestEffort {
		t.Errorf("pod status fields: %+v", st)
	}
	if len(st.ContainerStatuses) != 1 {
		t.Fatalf("container statuses %+v", st.ContainerStatuses)
	}
	cs := st.ContainerStatuses[0]
	if cs.Name != "main" || cs.Image != "busybox:1.36" || !strings.Contains(cs.ImageID, "@sha256:") ||
		!strings.HasPrefix(cs.ContainerID, "nodeagent://") || !cs.Ready || cs.Started == nil || !*cs.Started ||
		cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() || cs.RestartCount != 0 {
		t.Errorf("container status %+v", cs)
	}
	if len(st.InitContainerStatuses) != 1 || st.InitContainerStatuses[0].Name != "init" ||
		st.InitContainerStatuses[0].State.Terminated == nil || st.InitContainerStatuses[0].State.Terminated.Reason != "Completed" {
		t.Errorf("init container statuses %+v", st.InitContainerStatuses)
	}

	if err := os.WriteFile(filepath.Join(workDir, "finish"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := ta.waitPod("lifecycle", "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	term := done.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 0 || term.Reason != "Completed" || term.FinishedAt.IsZero() {
		t.Fatalf("terminated %+v", done.Status.ContainerStatuses[0].State)
	}
	if condition(done, v1.PodReady) != v1.ConditionFalse || done.Status.ContainerStatuses[0].Ready {
		t.Errorf("completed pod still ready: %+v", done.Status)
	}
}

func TestPodFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		reason string
		code   int32
	}{
		{"non-zero exit", pod("fails", v1.RestartPolicyNever, "sh", "-c", "exit 3"), "Error", 3},
		{"command not found", pod("missing", v1.RestartPolicyNever, "no-such-command-here"), "StartError", 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ta := startAgent(t)
			ta.createPod(tc.pod)
			p := ta.waitPod(tc.pod.Name, "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
			term := p.Status.ContainerStatuses[0].State.Terminated
			if term == nil || term.ExitCode != tc.code || term.Reason != tc.reason {
				t.Fatalf("terminated %+v, want %s %d", p.Status.ContainerStatuses[0].State, tc.reason, tc.code)
			}
		})
	}
}

func TestDeletion(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   string
		grace    int64
		wantCode int32
	}{
		// SIGTERM goes to the whole process group; the shell's trap exits.
		{"exits on SIGTERM", `trap "exit 0" TERM; while :; do sleep 0.02; done`, 30, 0},
		// Ignoring SIGTERM (children inherit it) earns SIGKILL after grace.
		{"ignores SIGTERM", `trap "" TERM; while :; do sleep 0.02; done`, 1, 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ta := startAgent(t)
			created := ta.createPod(pod("victim", v1.RestartPolicyAlways, "sh", "-c", tc.script))
			running := ta.waitRunning("victim")

			// What the apiserver does on a graceful delete of a bound pod.
			deleting := running.DeepCopy()
			deleting.DeletionTimestamp = ptr.To(metav1.Now())
			deleting.DeletionGracePeriodSeconds = ptr.To(tc.grace)
			if _, err := ta.client.CoreV1().Pods(testNS).Update(ta.ctx, deleting, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ta.waitFor("pod deleted", func() (bool, error) {
				_, err := ta.getPod("victim")
				return apierrors.IsNotFound(err), nil
			})
			if tc.grace == 30 && time.Since(start) > 10*time.Second {
				t.Errorf("a pod exiting on SIGTERM took %s to go", time.Since(start))
			}

			var deletes []clienttesting.DeleteAction
			var lastStatus *v1.Pod
			for _, a := range ta.client.Actions() {
				switch a := a.(type) {
				case clienttesting.DeleteAction:
					if a.GetResource().Resource == "pods" {
						deletes = append(deletes, a)
					}
				case clienttesting.UpdateAction:
					if a.GetSubresource() == "status" {
						if p, ok := a.GetObject().(*v1.Pod); ok && p.Name == "victim" {
							lastStatus = p
						}
					}
				}
			}
			if len(deletes) != 1 {
				t.Fatalf("%d pod deletes, want 1", len(deletes))
			}
			opts := deletes[0].GetDeleteOptions()
			if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 ||
				opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != created.UID {
				t.Fatalf("delete options %+v: want grace 0 and UID precondition %s", opts, created.UID)
			}
			if lastStatus == nil || len(lastStatus.Status.ContainerStatuses) != 1 {
				t.Fatalf("no final status written: %+v", lastStatus)
			}
			term := lastStatus.Status.ContainerStatuses[0].State.Terminated
			if term == nil || term.ExitCode != tc.wantCode {
				t.Fatalf("final container state %+v, want exit %d", lastStatus.Status.ContainerStatuses[0].State, tc.wantCode)
			}
			if got := lastStatus.Status.ContainerStatuses[0].RestartCount; got != 0 {
				t.Errorf("terminating pod restarted its container (%d restarts)", got)
			}
		})
	}
}

func TestRunKillsProcesses(t *testing.T) {
	ta := startAgent(t)
	// The shell starts a background child in its group and then waits.
	ta.createPod(pod("orphan", v1.RestartPolicyAlways, "sh", "-c", `sleep 600 & echo $! > child; echo $$ > pid; wait`))
	ta.waitRunning("orphan")
	var pids []int
	ta.waitFor("pid files", func() (bool, error) {
		pids = nil
		for _, f := range []string{"pid", "child"} {
			b, err := os.ReadFile(filepath.Join(ta.root, "ci", "orphan", "main", f))
			if err != nil {
				return false, nil
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return false, nil
			}
			pids = append(pids, pid)
		}
		return true, nil
	})
	ta.stop()
	for _, pid := range pids {
		// Run has returned, so every process must be gone (and reaped, for
		// the direct child; the grandchild is re-parented and reaped by init
		// or a subreaper, so "zombie" is the most it may be).
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) && !isZombie(pid) {
			t.Errorf("process %d survived Run: kill(0) = %v", pid, err)
		}
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone meanwhile
	}
	// Format: pid (comm) state ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}
