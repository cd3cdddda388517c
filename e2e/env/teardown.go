package env

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criClient dials containerd's CRI on socket.
func criClient(socket string) (runtimeapi.RuntimeServiceClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return runtimeapi.NewRuntimeServiceClient(conn), func() { conn.Close() }, nil
}

func criVersion(ctx context.Context, socket string) error {
	client, done, err := criClient(socket)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = client.Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

// removeSandboxes stops and removes every pod sandbox through the CRI, as
// a kubelet deleting its pods would: containerd kills the containers and
// their shims, runs CNI DEL (which frees the address and the veth) and
// removes the network namespace.
func removeSandboxes(ctx context.Context, socket string) error {
	client, done, err := criClient(socket)
	if err != nil {
		return err
	}
	defer done()
	list, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range list.Items {
		if _, err := client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox %s: %w", sb.Metadata.GetName(), err))
		}
		if _, err := client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox %s: %w", sb.Metadata.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// stopNode takes a node down so that nothing of it is left: the kubelet
// first (it would start the pods again), then every sandbox through the
// CRI, then containerd; whatever survives that (shims of a containerd that
// was killed, processes in the node's cgroups, mounts under its directory)
// is killed, unmounted and removed, and last the bridge and the cgroups go.
func (e *Env) stopNode(n *node) {
	for _, p := range []*process{n.scheduler, n.controllers, n.kubelet} {
		if p != nil {
			p.stop(5 * time.Second)
		}
	}
	if n.containerd != nil && n.containerd.running() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := removeSandboxes(ctx, n.socket()); err != nil {
			e.logf("remove pod sandboxes of %s: %v", n.member, err)
		}
		cancel()
	}
	if n.containerd != nil {
		n.containerd.stop(10 * time.Second)
	}
	killShims(n.socket())
	if n.slot != nil {
		killCgroup(n.slot.cgroupRoot())
	}
	unmountUnder(n.dir)
	if n.slot != nil {
		// A veth outlives its bridge; its peer's namespace is gone by now.
		for _, v := range n.slot.veths() {
			n.veths = append(n.veths, v)
			_ = ip("link", "del", v)
		}
		if err := n.slot.deleteBridge(); err != nil {
			e.logf("delete bridge of %s: %v", n.member, err)
		}
		removeCgroup(n.slot.cgroupRoot())
		n.slot.release()
	}
}

// shimPIDs are the containerd shims serving the containerd at socket: a
// shim runs in its own session, so stopping containerd does not stop it.
func shimPIDs(socket string) []int {
	return pidsWhere(func(args []string) bool {
		if !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			return false
		}
		i := slices.Index(args, "-address")
		return i >= 0 && i+1 < len(args) && args[i+1] == socket
	})
}

// pidsWhere are the processes, this one aside, whose command line match
// accepts (args[0] first; a kernel thread, with none, is never passed).
func pidsWhere(match func(args []string) bool) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		if match(strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func killShims(socket string) {
	for _, pid := range shimPIDs(socket) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// cgroupHierarchies are the mounted cgroup hierarchies (v1 controllers and
// the unified one).
func cgroupHierarchies() []string {
	var out []string
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && (fields[2] == "cgroup" || fields[2] == "cgroup2") {
			out = append(out, fields[1])
		}
	}
	return out
}

// cgroupDirs are the directories of cgroup root in every hierarchy that
// has one.
func cgroupDirs(root string) []string {
	var out []string
	for _, h := range cgroupHierarchies() {
		if d := filepath.Join(h, root); fileExists(d) {
			out = append(out, d)
		}
	}
	return out
}

// createCgroup makes root in every hierarchy: the kubelet requires its
// cgroupRoot to exist. A v1 cpuset cgroup starts with no CPUs and no
// memory nodes, so those are copied from the parent, as runc does.
func createCgroup(root string) error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, root)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("set %s of %s: %w", f, d, err)
				}
			}
		}
	}
	return nil
}

// killCgroup kills every process left in the node's cgroups: containers
// whose shim was killed outlive it, and they are ours alone.
func killCgroup(root string) {
	for _, d := range cgroupDirs(root) {
		_ = filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err != nil || de.IsDir() || de.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

// removeCgroup removes root's cgroups, deepest first; a cgroup still
// holding a process (it takes a moment to exit) is retried for a while.
func removeCgroup(root string) {
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range cgroupDirs(root) {
		var dirs []string
		_ = filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, dir := range dirs {
			for {
				err := unix.Rmdir(dir)
				if err == nil || errors.Is(err, fs.ErrNotExist) || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond) // the kernel frees a cgroup when its last task is reaped
			}
		}
	}
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount below dir: volumes the kubelet
// mounted (Secrets are tmpfs), rootfs overlays and network namespaces of
// sandboxes that were not removed.
func unmountUnder(dir string) {
	for range 3 { // a mount may be stacked on another at the same point
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return
		}
		for _, mp := range mps {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
}

// Leftovers lists what of the environment's nodes still exists on the
// machine: shims, processes in the kubelets' cgroups, mounts under the
// work directory, bridges. After Stop it must be empty.
func (e *Env) Leftovers() []string {
	var out []string
	for _, m := range e.clusters() {
		n := e.nodes[m]
		if n == nil {
			continue
		}
		for _, pid := range shimPIDs(n.socket()) {
			out = append(out, fmt.Sprintf("%s: containerd shim pid %d", m, pid))
		}
		for _, p := range []*process{n.containerd, n.kubelet, n.scheduler, n.controllers} {
			if p != nil && p.running() {
				out = append(out, fmt.Sprintf("%s: %s still running", m, p.name))
			}
		}
		if n.slot != nil {
			if _, err := net.InterfaceByName(n.slot.bridge()); err == nil {
				out = append(out, fmt.Sprintf("%s: bridge %s", m, n.slot.bridge()))
			}
			for _, d := range cgroupDirs(n.slot.cgroupRoot()) {
				out = append(out, fmt.Sprintf("%s: cgroup %s", m, d))
			}
		}
		for _, v := range n.veths {
			if _, err := net.InterfaceByName(v); err == nil {
				out = append(out, fmt.Sprintf("%s: veth %s", m, v))
			}
		}
	}
	out = append(out, e.pullLeftovers()...)
	if e.hostForward != nil && !e.hostForward.isClosed() {
		out = append(out, "forwarder to karmada-apiserver still listening on "+e.hostForward.addr().String())
	}
	for _, mp := range mountsUnder(e.workDir) {
		out = append(out, "mount "+mp)
	}
	return out
}
