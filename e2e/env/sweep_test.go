package env

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"
)

// TestSweepDeadWorkDirs leaves a work dir as a test process killed
// outright leaves it (its lock free, a shim and Dante running, a pod's
// container in its kubelet's cgroup, a volume mounted, etcd's data in
// /dev/shm) beside a live environment's and a kept one's, and checks that
// a sweep takes down the dead one's leftovers and nothing else.
func TestSweepDeadWorkDirs(t *testing.T) {
	parent := t.TempDir()
	dead, live, kept := filepath.Join(parent, workDirPattern+"dead"), filepath.Join(parent, workDirPattern+"live"), filepath.Join(parent, workDirPattern+"kept")
	for _, d := range []string{dead, live, kept} {
		if err := os.MkdirAll(filepath.Join(d, "logs"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	deadLock, err := lockWorkDir(dead)
	if err != nil {
		t.Fatal(err)
	}
	deadLock.Close() // the process died
	liveLock, err := lockWorkDir(live)
	if err != nil {
		t.Fatal(err)
	}
	defer liveLock.Close()

	deadShim := startNamed(t, "containerd-shim-runc-v2", "-address", dead+"/nodes/member1/containerd.sock")
	deadDante := startNamed(t, "danted", "-f", dead+"/pull/member2/danted.conf")
	userTail := startNamed(t, "tail", "-f", dead+"/logs/etcd.log")
	liveShim := startNamed(t, "containerd-shim-runc-v2", "-address", live+"/nodes/member1/containerd.sock")
	keptShim := startNamed(t, "containerd-shim-runc-v2", "-address", kept+"/nodes/member1/containerd.sock")

	// A pod's container, in the dead kubelet's cgroup.
	root := fmt.Sprintf("/%ssweep-test-%04x", workDirPattern, rand.Uint32()&0xffff)
	if err := createCgroup(root); err != nil {
		t.Fatalf("%v (the sweep's test needs root, as the environment does)", err)
	}
	t.Cleanup(func() { killCgroup(root); removeCgroup(root) })
	container := startNamed(t, "pause")
	dirs := cgroupDirs(root)
	if len(dirs) == 0 {
		t.Fatalf("no cgroup %s made", root)
	}
	if err := os.WriteFile(filepath.Join(dirs[0], "cgroup.procs"), []byte(strconv.Itoa(container.pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	writeKubeletConfig(t, filepath.Join(dead, "nodes", "member1"), root)
	writeKubeletConfig(t, filepath.Join(dead, "nodes", "member2"), "/not-an-environment-cgroup")

	volume := filepath.Join(dead, "nodes", "member1", "kubelet", "pods", "uid", "volumes", "secret")
	if err := os.MkdirAll(volume, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", volume, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountUnder(dead) })

	if err := os.MkdirAll(filepath.Join(dead, "gateway"), 0o755); err != nil { // the gateway's build
		t.Fatal(err)
	}
	etcdData, err := os.MkdirTemp("/dev/shm", "e2e-etcd-sweep-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etcdData) })
	if err := os.Symlink(etcdData, filepath.Join(dead, "etcd")); err != nil {
		t.Fatal(err)
	}

	swept := sweepDeadWorkDirs(parent)
	if len(swept) != 1 || !strings.Contains(swept[0], dead) || !strings.Contains(swept[0], "killed 2 processes and the pods of 1 kubelet cgroups, detached 1 mounts") {
		t.Errorf("sweep said %q, want one line for %s: 2 processes, 1 cgroup, 1 mount", swept, dead)
	}
	for _, p := range []*namedProcess{deadShim, deadDante, container} {
		p.wantKilled(t)
	}
	for _, p := range []*namedProcess{userTail, liveShim, keptShim} {
		p.wantRunning(t)
	}
	if m := mountsUnder(dead); len(m) != 0 {
		t.Errorf("still mounted after the sweep: %v", m)
	}
	if len(cgroupDirs(root)) != 0 {
		t.Errorf("cgroup %s still there after the sweep: %v", root, cgroupDirs(root))
	}
	for _, gone := range []string{etcdData, filepath.Join(dead, "nodes"), filepath.Join(dead, "gateway"), filepath.Join(dead, workDirLockName)} {
		if fileExists(gone) {
			t.Errorf("%s still there after the sweep", gone)
		}
	}
	for _, stays := range []string{filepath.Join(dead, "logs"), filepath.Join(live, workDirLockName)} {
		if !fileExists(stays) {
			t.Errorf("%s removed by the sweep", stays)
		}
	}
	if again := sweepDeadWorkDirs(parent); len(again) != 0 {
		t.Errorf("a second sweep said %q, want nothing: the dir is swept", again)
	}
}

// TestLockWorkDirHeld checks that a work dir's lock is not free while its
// holder lives (a second environment in the same dir is refused), and that
// Stop's unlock leaves nothing for a sweep.
func TestLockWorkDirHeld(t *testing.T) {
	dir := filepath.Join(t.TempDir(), workDirPattern+"x")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := lockWorkDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := lockWorkDir(dir); err == nil {
		second.Close()
		t.Error("a second lock of a held work dir succeeded")
	}
	if s := sweepWorkDir(dir); s != "" {
		t.Errorf("swept a live work dir: %s", s)
	}
	unlockWorkDir(dir, lock)
	if fileExists(filepath.Join(dir, workDirLockName)) {
		t.Error("the lock file stays after unlock: a kept work dir would be swept")
	}
}

type namedProcess struct {
	name   string
	pid    int
	exited chan error
}

// startNamed starts a shell whose command line is name and args, as the
// process it stands for: it waits on a pipe and runs no child of its own.
func startNamed(t *testing.T, name string, args ...string) *namedProcess {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: "/bin/sh", Args: append([]string{name, "-c", "read x; true"}, args...), Stdin: r}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	p := &namedProcess{name: name, pid: cmd.Process.Pid, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		w.Close()
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *namedProcess) wantKilled(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("%s (pid %d) ended with %v, want SIGKILL", p.name, p.pid, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s (pid %d) still runs after the sweep", p.name, p.pid)
	}
}

func (p *namedProcess) wantRunning(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		t.Errorf("%s (pid %d) ended during the sweep: %v", p.name, p.pid, err)
	default:
		if err := syscall.Kill(p.pid, 0); err != nil {
			t.Errorf("%s (pid %d) is gone after the sweep: %v", p.name, p.pid, err)
		}
	}
}

func writeKubeletConfig(t *testing.T, dir, cgroupRoot string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(map[string]any{"kind": "KubeletConfiguration", "cgroupRoot": cgroupRoot})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet-config.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
