package nodeagent

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// The version the agent reports: the apiserver and kubectl print it, and it
// matches the binaries the e2e environment runs.
const kubeletVersion = "v1.37.2"

const loopbackIP = "127.0.0.1"

// registerNode creates the Node or takes over an existing one (an agent
// restarted on the same member), then writes its status.
func (a *Agent) registerNode(ctx context.Context) error {
	nodes := a.client.CoreV1().Nodes()
	want := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: a.nodeName, Labels: a.nodeLabels()},
		Status:     a.nodeStatus(v1.NodeStatus{}),
	}
	if _, err := nodes.Create(ctx, want, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("nodeagent: create node %s: %w", a.nodeName, err)
		}
		err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur, err := nodes.Get(ctx, a.nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = cur.DeepCopy()
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			for k, v := range want.Labels {
				cur.Labels[k] = v
			}
			cur.Spec.Unschedulable = false
			_, err = nodes.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("nodeagent: update node %s: %w", a.nodeName, err)
		}
	}
	// Status on create is not trusted to stick, so it is always written
	// through the status subresource as kubelet does.
	if err := a.updateNodeStatus(ctx); err != nil {
		return fmt.Errorf("nodeagent: node %s status: %w", a.nodeName, err)
	}
	klog.FromContext(ctx).Info("Registered node", "kubeletPort", a.port)
	return nil
}

func (a *Agent) heartbeat(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(a.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := a.updateNodeStatus(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			logger.Error(err, "Updating node status")
			if apierrors.IsNotFound(err) {
				if err := a.registerNode(ctx); err != nil && ctx.Err() == nil {
					logger.Error(err, "Re-registering node")
				}
			}
		}
	}
}

func (a *Agent) updateNodeStatus(ctx context.Context) error {
	nodes := a.client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := nodes.Get(ctx, a.nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur = cur.DeepCopy()
		cur.Status = a.nodeStatus(cur.Status)
		_, err = nodes.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func (a *Agent) nodeLabels() map[string]string {
	return map[string]string{
		v1.LabelHostname:   a.nodeName,
		v1.LabelOSStable:   runtime.GOOS,
		v1.LabelArchStable: runtime.GOARCH,
	}
}

// nodeStatus is the full status kubelet would report, keeping condition
// transition times from old.
func (a *Agent) nodeStatus(old v1.NodeStatus) v1.NodeStatus {
	now := metav1.Now()
	capacity := v1.ResourceList{
		v1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(hostMemory(), resource.BinarySI),
		v1.ResourcePods:             *resource.NewQuantity(110, resource.DecimalSI),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	cond := func(t v1.NodeConditionType, s v1.ConditionStatus, reason, msg string) v1.NodeCondition {
		c := v1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		for _, o := range old.Conditions {
			if o.Type == t && o.Status == s {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	var uname syscall.Utsname
	kernel := ""
	if syscall.Uname(&uname) == nil {
		kernel = utsString(uname.Release[:])
	}
	id := string(types.UID(a.nodeName))
	return v1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity.DeepCopy(),
		Phase:       old.Phase,
		Conditions: []v1.NodeCondition{
			cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
		},
		Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: loopbackIP},
			{Type: v1.NodeHostName, Address: a.nodeName},
		},
		DaemonEndpoints: v1.NodeDaemonEndpoints{KubeletEndpoint: v1.DaemonEndpoint{Port: int32(a.port)}},
		NodeInfo: v1.NodeSystemInfo{
			MachineID:               id,
			SystemUUID:              id,
			BootID:                  id,
			KernelVersion:           kernel,
			OSImage:                 "karmada-exec-gateway e2e node agent",
			ContainerRuntimeVersion: "nodeagent://" + kubeletVersion,
			KubeletVersion:          kubeletVersion,
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
		},
	}
}

func hostMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 8 << 30
	}
	return int64(si.Totalram) * int64(si.Unit)
}

func utsString[T int8 | uint8](b []T) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
