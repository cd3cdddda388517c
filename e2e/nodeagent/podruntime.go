package nodeagent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// errPodGone means the pod object this runtime belongs to no longer exists
// (deleted, or replaced by a pod of the same name).
var errPodGone = errors.New("pod is gone")

// containerRuntime is one container of a pod across its restarts. All fields
// after dir are guarded by the pod runtime's mu.
type containerRuntime struct {
	spec   v1.Container
	isInit bool
	dir    string // RootDir/<ns>/<pod>/<container>

	restartCount int32 // index of the newest instance
	started      bool  // an instance has been started (or failed to start)
	state        v1.ContainerState
	lastState    v1.ContainerState
	containerID  string
	proc         *containerProcess // newest instance, kept after it exits
}

// podRuntime runs one pod (one UID) on this node and reports its status.
type podRuntime struct {
	a   *Agent
	pod *v1.Pod // as first seen: the spec is what runs
	key string
	dir string

	mu         sync.Mutex
	startTime  metav1.Time
	initDone   bool
	ended      bool        // run returned: nothing will run again
	finalized  atomic.Bool // the deletion was finalized
	grace      time.Duration
	inits      []*containerRuntime
	containers []*containerRuntime

	stopCh   chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	dirty    chan struct{}
	statusMu sync.Mutex // orders status writes
}

func newPodRuntime(a *Agent, pod *v1.Pod, key string) *podRuntime {
	p := &podRuntime{
		a:         a,
		pod:       pod.DeepCopy(),
		key:       key,
		dir:       filepath.Join(a.rootDir, pod.Namespace, pod.Name),
		startTime: metav1.Now(),
		stopCh:    make(chan struct{}),
		done:      make(chan struct{}),
		dirty:     make(chan struct{}, 1),
	}
	for _, c := range pod.Spec.InitContainers {
		p.inits = append(p.inits, &containerRuntime{spec: c, isInit: true, dir: filepath.Join(p.dir, c.Name)})
	}
	for _, c := range pod.Spec.Containers {
		p.containers = append(p.containers, &containerRuntime{spec: c, dir: filepath.Join(p.dir, c.Name)})
	}
	return p
}

// resume continues a restartPolicy=Always pod an earlier agent process
// started: its processes died with that agent, so every container restarts,
// keeping the restart counts going up as after a node reboot.
func (p *podRuntime) resume(old v1.PodStatus) {
	if old.StartTime != nil {
		p.startTime = *old.StartTime
	}
	for _, c := range old.Conditions {
		if c.Type == v1.PodInitialized && c.Status == v1.ConditionTrue {
			p.initDone = true
		}
	}
	for _, cs := range old.ContainerStatuses {
		for _, c := range p.containers {
			if c.spec.Name == cs.Name {
				c.restartCount = cs.RestartCount + 1
				c.lastState = cs.State
			}
		}
	}
}

// stop asks the pod to terminate: SIGTERM now, SIGKILL after grace.
func (p *podRuntime) stop(grace time.Duration) {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		p.grace = grace
		p.mu.Unlock()
		close(p.stopCh)
	})
}

func (p *podRuntime) stopRequested() bool {
	select {
	case <-p.stopCh:
		return true
	default:
		return false
	}
}

func (p *podRuntime) isEnded() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended
}

func (p *podRuntime) markDirty() {
	select {
	case p.dirty <- struct{}{}:
	default:
	}
}

func (p *podRuntime) run(ctx context.Context, fresh bool) {
	defer p.a.podRuns.Done()
	logger := klog.FromContext(ctx).WithValues("pod", p.key, "podUID", p.pod.UID)
	ctx = klog.NewContext(ctx, logger)

	var statusDone sync.WaitGroup
	statusDone.Add(1)
	go func() {
		defer statusDone.Done()
		p.statusLoop(ctx)
	}()
	defer statusDone.Wait()
	defer close(p.done)

	logger.Info("Starting pod")
	if err := p.prepareDirs(fresh); err != nil {
		logger.Error(err, "Preparing pod directories")
	}
	p.markDirty()
	p.mu.Lock()
	initDone := p.initDone
	p.mu.Unlock()
	if !initDone && p.runInits(ctx) {
		p.mu.Lock()
		p.initDone = true
		initDone = true
		p.mu.Unlock()
		p.markDirty()
	}
	if initDone {
		p.runContainers(ctx)
	}

	p.mu.Lock()
	p.ended = true
	p.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	if err := p.pushStatus(ctx); err != nil && !errors.Is(err, errPodGone) {
		logger.Error(err, "Writing final pod status")
	}
	logger.Info("Pod finished")
	// The controller decides what an ended pod needs (e.g. finalizing its
	// deletion).
	p.a.queue.Add(p.key)
}

func (p *podRuntime) prepareDirs(fresh bool) error {
	if fresh {
		// A new pod may reuse the name of an old one: start from nothing.
		if err := os.RemoveAll(p.dir); err != nil {
			return err
		}
	}
	for _, c := range append(append([]*containerRuntime{}, p.inits...), p.containers...) {
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func (p *podRuntime) runInits(ctx context.Context) bool {
	for _, c := range p.inits {
		for attempt := 0; ; attempt++ {
			if p.stopRequested() || ctx.Err() != nil {
				return false
			}
			code, stopped := p.runOnce(ctx, c, int32(attempt))
			if stopped {
				return false
			}
			if code == 0 {
				break
			}
			if p.pod.Spec.RestartPolicy == v1.RestartPolicyNever {
				return false
			}
			if !p.backoff(ctx, c, attempt) {
				return false
			}
		}
	}
	return true
}

func (p *podRuntime) runContainers(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range p.containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.mu.Lock()
			first := c.restartCount
			p.mu.Unlock()
			for attempt := 0; ; attempt++ {
				if p.stopRequested() || ctx.Err() != nil {
					return
				}
				code, stopped := p.runOnce(ctx, c, first+int32(attempt))
				if stopped {
					return
				}
				switch p.pod.Spec.RestartPolicy {
				case v1.RestartPolicyNever:
					return
				case v1.RestartPolicyOnFailure:
					if code == 0 {
						return
					}
				}
				if !p.backoff(ctx, c, attempt) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// backoff waits before a restart, showing CrashLoopBackOff meanwhile. It
// returns false when the pod is stopping instead.
func (p *podRuntime) backoff(ctx context.Context, c *containerRuntime, attempt int) bool {
	d := p.a.opts.RestartBackoff << min(attempt, 3)
	p.mu.Lock()
	c.lastState = c.state
	c.state = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{
		Reason:  "CrashLoopBackOff",
		Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, c.spec.Name, p.pod.Name, p.pod.Namespace, p.pod.UID),
	}}
	p.mu.Unlock()
	p.markDirty()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.stopCh:
		return false
	case <-ctx.Done():
		return false
	}
}

// runOnce runs instance n of container c to its end. stopped reports that
// the pod is terminating (or the agent stopping), so nothing restarts.
func (p *podRuntime) runOnce(ctx context.Context, c *containerRuntime, n int32) (code int, stopped bool) {
	logger := klog.FromContext(ctx).WithValues("container", c.spec.Name, "restart", n)
	id := "nodeagent://" + randomHex(32)
	log, err := newLogWriter(p.a.logPath(p.pod.Namespace, p.pod.Name, c.spec.Name, n))
	var cp *containerProcess
	if err == nil {
		var spec processSpec
		if spec, err = p.containerSpec(c); err == nil {
			cp, err = p.a.startContainerProcess(spec, c.spec.TTY, c.spec.Stdin, c.spec.StdinOnce, log)
		}
		if err != nil {
			log.write("stderr", []byte(err.Error()+"\n"))
			log.close()
		}
	}
	if err != nil {
		// What runc reports when the entrypoint cannot be started.
		logger.Info("Container failed to start", "err", err.Error())
		now := metav1.Now()
		p.mu.Lock()
		c.restartCount, c.started, c.containerID = n, true, id
		c.state = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: err.Error(),
			StartedAt: now, FinishedAt: now, ContainerID: id,
		}}
		p.mu.Unlock()
		p.markDirty()
		return 128, p.stopRequested() || ctx.Err() != nil
	}
	logger.V(2).Info("Container started", "pid", cp.pgid)
	cp.index = n
	p.mu.Lock()
	c.restartCount, c.started, c.containerID, c.proc = n, true, id, cp
	c.state = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(cp.startedAt)}}
	p.mu.Unlock()
	p.markDirty()

	stopped = p.waitProcess(ctx, cp)
	code = cp.exitCode()
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	logger.V(2).Info("Container exited", "exitCode", code)
	p.mu.Lock()
	c.state = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason,
		StartedAt: metav1.NewTime(cp.startedAt), FinishedAt: metav1.NewTime(cp.finishedAt), ContainerID: id,
	}}
	p.mu.Unlock()
	p.markDirty()
	return code, stopped || p.stopRequested()
}

// waitProcess waits for cp to end, terminating it as kubelet does when the
// pod is stopped: SIGTERM to the group, SIGKILL after the grace period.
func (p *podRuntime) waitProcess(ctx context.Context, cp *containerProcess) (stopped bool) {
	kill := func() {
		cp.signal(syscall.SIGKILL)
		<-cp.done
	}
	select {
	case <-cp.done:
		return false
	case <-ctx.Done():
		kill()
		return true
	case <-p.stopCh:
	}
	p.mu.Lock()
	grace := p.grace
	p.mu.Unlock()
	cp.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-cp.done:
	case <-t.C:
		kill()
	case <-ctx.Done():
		kill()
	}
	return true
}

// containerSpec is the process for container c: command+args in its
// directory with its environment.
func (p *podRuntime) containerSpec(c *containerRuntime) (processSpec, error) {
	argv := append(append([]string{}, c.spec.Command...), c.spec.Args...)
	dir := c.dir
	if c.spec.WorkingDir != "" {
		// Never a host path: the working dir lives inside the container dir.
		dir = filepath.Join(c.dir, filepath.Clean("/"+c.spec.WorkingDir))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return processSpec{}, err
		}
	}
	return processSpec{argv: argv, dir: dir, env: p.containerEnv(c)}, nil
}

// execSpec is an exec'd command: the container's directory and environment.
func (p *podRuntime) execSpec(c *containerRuntime, argv []string) (processSpec, error) {
	spec, err := p.containerSpec(c)
	spec.argv = argv
	return spec, err
}

func (p *podRuntime) containerEnv(c *containerRuntime) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	env := []string{"PATH=" + path, "HOME=" + c.dir, "HOSTNAME=" + p.pod.Name}
	if c.spec.TTY {
		env = append(env, "TERM=xterm")
	}
	for _, e := range c.spec.Env {
		value := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			value = p.fieldValue(e.ValueFrom.FieldRef.FieldPath)
		}
		env = append(env, e.Name+"="+value)
	}
	return env
}

// fieldValue resolves the downward-API fields a pod can reference.
func (p *podRuntime) fieldValue(path string) string {
	switch path {
	case "metadata.name":
		return p.pod.Name
	case "metadata.namespace":
		return p.pod.Namespace
	case "metadata.uid":
		return string(p.pod.UID)
	case "spec.nodeName":
		return p.a.nodeName
	case "spec.serviceAccountName":
		return p.pod.Spec.ServiceAccountName
	case "status.podIP", "status.hostIP", "status.podIPs", "status.hostIPs":
		return loopbackIP
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": p.pod.Labels, "metadata.annotations": p.pod.Annotations} {
		if k, ok := strings.CutPrefix(path, prefix+"['"); ok {
			return m[strings.TrimSuffix(k, "']")]
		}
	}
	return ""
}

// runningContainer returns the running process of a container by name.
func (p *podRuntime) runningContainer(name string) (*containerRuntime, *containerProcess, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range append(append([]*containerRuntime{}, p.inits...), p.containers...) {
		if c.spec.Name != name {
			continue
		}
		if c.proc == nil || !c.proc.running() {
			return nil, nil, fmt.Errorf("container %q in pod %q is not running", name, p.pod.Name)
		}
		return c, c.proc, nil
	}
	return nil, nil, fmt.Errorf("container %q not found in pod %q", name, p.pod.Name)
}

// logInstance is the newest log instance of a container and its writer.
func (p *podRuntime) logInstance(name string) (int32, *logWriter, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range append(append([]*containerRuntime{}, p.inits...), p.containers...) {
		if c.spec.Name == name && c.started {
			var w *logWriter
			if c.proc != nil && c.restartCount == c.proc.index {
				w = c.proc.log
			}
			return c.restartCount, w, true
		}
	}
	return 0, nil, false
}

func (p *podRuntime) statusLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-p.dirty:
		case <-p.done:
			return
		case <-ctx.Done():
			return
		}
		delay := 100 * time.Millisecond
		for {
			err := p.pushStatus(ctx)
			if err == nil || errors.Is(err, errPodGone) || ctx.Err() != nil {
				break
			}
			logger.Error(err, "Updating pod status")
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			delay = min(2*delay, 5*time.Second)
		}
	}
}

// pushStatus writes the current status; writes are serialized and each
// builds the newest state, so the last write always wins with the truth.
func (p *podRuntime) pushStatus(ctx context.Context) error {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	pods := p.a.client.CoreV1().Pods(p.pod.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, p.pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errPodGone
		}
		if err != nil {
			return err
		}
		if cur.UID != p.pod.UID {
			return errPodGone
		}
		p.mu.Lock()
		status := p.statusLocked(cur)
		p.mu.Unlock()
		if apiequality.Semantic.DeepEqual(cur.Status, status) {
			return nil
		}
		updated := cur.DeepCopy()
		updated.Status = status
		_, err = pods.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return errPodGone
		}
		return err
	})
}

// phaseLocked follows kubelet's getPhase for the states this runtime has.
func (p *podRuntime) phaseLocked() v1.PodPhase {
	if !p.initDone {
		if p.ended {
			return v1.PodFailed
		}
		return v1.PodPending
	}
	allTerminated, failed := true, false
	for _, c := range p.containers {
		if !c.started {
			return v1.PodPending
		}
		if t := c.state.Terminated; t != nil {
			failed = failed || t.ExitCode != 0
		} else {
			allTerminated = false
		}
	}
	switch {
	case !allTerminated:
		return v1.PodRunning
	case failed:
		return v1.PodFailed
	default:
		return v1.PodSucceeded
	}
}

// statusLocked is the pod status kubelet would report for cur.
func (p *podRuntime) statusLocked(cur *v1.Pod) v1.PodStatus {
	old := cur.Status
	phase := p.phaseLocked()
	terminal := phase == v1.PodSucceeded || phase == v1.PodFailed
	now := metav1.Now()
	cond := func(t v1.PodConditionType, ok bool, reason, msg string) v1.PodCondition {
		s := v1.ConditionFalse
		if ok {
			s, reason, msg = v1.ConditionTrue, "", ""
		}
		c := v1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: now, ObservedGeneration: cur.Generation}
		for _, o := range old.Conditions {
			if o.Type == t && o.Status == s {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}

	var notInit, notReady []string
	initStatuses := make([]v1.ContainerStatus, 0, len(p.inits))
	for _, c := range p.inits {
		st := p.containerStatusLocked(c, "PodInitializing")
		if t := c.state.Terminated; t != nil && t.ExitCode == 0 {
			st.Ready = true
		} else {
			notInit = append(notInit, c.spec.Name)
		}
		initStatuses = append(initStatuses, st)
	}
	if p.initDone {
		notInit = nil
	}
	waiting := "ContainerCreating"
	if !p.initDone {
		waiting = "PodInitializing"
	}
	statuses := make([]v1.ContainerStatus, 0, len(p.containers))
	for _, c := range p.containers {
		st := p.containerStatusLocked(c, waiting)
		st.Ready = c.state.Running != nil && !p.ended
		if !st.Ready {
			notReady = append(notReady, c.spec.Name)
		}
		statuses = append(statuses, st)
	}

	readyReason, readyMsg := "ContainersNotReady", fmt.Sprintf("containers with unready status: %v", notReady)
	if terminal {
		readyReason, readyMsg = "PodCompleted", ""
	}
	conds := []v1.PodCondition{
		cond(v1.PodReadyToStartContainers, !terminal, "", ""),
		cond(v1.PodInitialized, len(notInit) == 0, "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: %v", notInit)),
		cond(v1.PodReady, len(notReady) == 0, readyReason, readyMsg),
		cond(v1.ContainersReady, len(notReady) == 0, readyReason, readyMsg),
		cond(v1.PodScheduled, true, "", ""),
	}
	owned := map[v1.PodConditionType]bool{}
	for _, c := range conds {
		owned[c.Type] = true
	}
	for _, o := range old.Conditions {
		if !owned[o.Type] {
			conds = append(conds, o)
		}
	}

	qos := old.QOSClass
	if qos == "" {
		qos = qosClass(p.pod)
	}
	start := p.startTime
	return v1.PodStatus{
		ObservedGeneration:    cur.Generation,
		Phase:                 phase,
		Conditions:            conds,
		HostIP:                loopbackIP,
		HostIPs:               []v1.HostIP{{IP: loopbackIP}},
		PodIP:                 loopbackIP,
		PodIPs:                []v1.PodIP{{IP: loopbackIP}},
		StartTime:             &start,
		InitContainerStatuses: initStatuses,
		ContainerStatuses:     statuses,
		QOSClass:              qos,
	}
}

func (p *podRuntime) containerStatusLocked(c *containerRuntime, waitingReason string) v1.ContainerStatus {
	st := v1.ContainerStatus{
		Name:                 c.spec.Name,
		Image:                c.spec.Image,
		ImageID:              imageID(c.spec.Image),
		ContainerID:          c.containerID,
		RestartCount:         c.restartCount,
		State:                c.state,
		LastTerminationState: c.lastState,
		Started:              ptr.To(c.state.Running != nil),
	}
	if !c.started && c.state.Waiting == nil {
		st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: waitingReason}}
	}
	return st
}

// imageID is a stable digest-style ID: images are never pulled, but
// clients expect a resolved reference.
func imageID(image string) string {
	if strings.Contains(image, "@sha256:") {
		return image
	}
	sum := sha256.Sum256([]byte(image))
	repo, _, _ := strings.Cut(image, ":")
	return repo + "@sha256:" + hex.EncodeToString(sum[:])
}

// qosClass mirrors the apiserver's computation for the common cases, used
// only when the apiserver did not set it.
func qosClass(pod *v1.Pod) v1.PodQOSClass {
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	hasResources, guaranteed := false, true
	for _, c := range all {
		if len(c.Resources.Requests) > 0 || len(c.Resources.Limits) > 0 {
			hasResources = true
		}
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			l, hasLimit := c.Resources.Limits[r]
			req, hasReq := c.Resources.Requests[r]
			if !hasLimit || (hasReq && req.Cmp(l) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !hasResources:
		return v1.PodQOSBestEffort
	case guaranteed:
		return v1.PodQOSGuaranteed
	default:
		return v1.PodQOSBurstable
	}
}

// lostStatus is the status of a pod an earlier agent process started and
// that cannot restart: its processes died with that agent, so, as kubelet
// reports containers that vanished, it failed with ContainerStatusUnknown.
func lostStatus(pod *v1.Pod) v1.PodStatus {
	st := *pod.Status.DeepCopy()
	now := metav1.Now()
	lose := func(list []v1.ContainerStatus) {
		for i := range list {
			if list[i].State.Terminated != nil {
				continue
			}
			list[i].LastTerminationState = list[i].State
			list[i].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				ExitCode: 137, Reason: "ContainerStatusUnknown",
				Message:    "The container could not be located when the pod was terminated",
				FinishedAt: now,
			}}
			list[i].Ready = false
			list[i].Started = ptr.To(false)
		}
	}
	lose(st.InitContainerStatuses)
	lose(st.ContainerStatuses)
	st.Phase = v1.PodFailed
	for i := range st.Conditions {
		switch st.Conditions[i].Type {
		case v1.PodReady, v1.ContainersReady, v1.PodReadyToStartContainers:
			if st.Conditions[i].Status != v1.ConditionFalse {
				st.Conditions[i].Status = v1.ConditionFalse
				st.Conditions[i].Reason = "PodCompleted"
				st.Conditions[i].LastTransitionTime = now
			}
		}
	}
	return st
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
