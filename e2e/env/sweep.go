package env

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// An environment's own processes die with its test process (Pdeathsig),
// but not all it leaves: containerd's shims are not its children and run
// on, and so do the pods' containers under them; Dante drops the death
// signal when it changes its user; the pods' volumes and rootfs stay
// mounted; etcd's data stays in /dev/shm, in memory. Stop removes all of
// it, but a test process killed outright (a CI job's timeout, SIGKILL,
// SIGTERM) never calls Stop, and on a machine that runs the suite again
// each such run would keep its share of memory and CPU for good.
//
// So an environment holds a lock in its work dir from its start until
// Stop, as a pod network slot is held (the kernel frees the lock however
// the process dies), and every environment that starts sweeps the work
// dirs whose lock nobody holds.

// workDirPattern names the work dirs Start makes in os.TempDir().
const workDirPattern = "karmada-exec-gateway-e2e-"

// workDirLockName is the lock's file in a work dir. Stop removes it: a work
// dir without one (a kept one, E2E_KEEP) is not swept.
const workDirLockName = "env.lock"

// lockWorkDir takes dir's lock for as long as this process lives. The lock
// file is locked before it takes its name, so a sweep starting at the same
// moment never finds it free. A dir already locked by a running
// environment is refused; one left by a dead environment is swept first.
func lockWorkDir(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "."+workDirLockName+"-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock work dir %s: %w", dir, err)
	}
	for attempt := 1; ; attempt++ {
		err := os.Link(f.Name(), filepath.Join(dir, workDirLockName))
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrExist) || attempt == 3 {
			f.Close()
			return nil, fmt.Errorf("lock work dir %s (is another environment running in it?): %w", dir, err)
		}
		sweepWorkDir(dir)
	}
}

// unlockWorkDir marks dir stopped, then lets its lock go.
func unlockWorkDir(dir string, lock *os.File) {
	if lock != nil {
		_ = os.Remove(filepath.Join(dir, workDirLockName))
		lock.Close()
	}
}

// sweepDeadWorkDirs sweeps the work dirs in parent whose environment's
// process died without Stop, and says what it did, a line per dir.
func sweepDeadWorkDirs(parent string) []string {
	dirs, _ := filepath.Glob(filepath.Join(parent, workDirPattern+"*"))
	var out []string
	for _, dir := range dirs {
		if s := sweepWorkDir(dir); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// sweepWorkDir sweeps dir if its lock is free: it kills the shims and
// proxies that name it and every process in its kubelets' cgroups, then
// unmounts what is mounted below it and removes etcd's data and all but
// the logs, which stay for whoever wants to know why the run died.
func sweepWorkDir(dir string) string {
	lock, err := os.OpenFile(filepath.Join(dir, workDirLockName), os.O_RDWR, 0)
	if err != nil {
		return "" // stopped, kept, or not an environment's
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return "" // its process lives, or another start sweeps it now
	}
	if !sameFile(lock, lock.Name()) {
		return "" // swept between the open and the lock, and maybe locked anew
	}
	killed := killLeftProcesses(dir)
	roots := kubeletCgroupRoots(dir)
	for _, root := range roots {
		killCgroup(root)
	}
	for _, root := range roots {
		removeCgroup(root)
	}
	mounts := len(mountsUnder(dir))
	unmountUnder(dir)
	var freed []string
	if target, err := os.Readlink(filepath.Join(dir, "etcd")); err == nil && strings.HasPrefix(target, "/dev/shm/") {
		if os.RemoveAll(target) == nil {
			freed = append(freed, "etcd's data "+target)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, ent := range entries {
		if ent.Name() != "logs" && ent.Name() != workDirLockName {
			_ = os.RemoveAll(filepath.Join(dir, ent.Name()))
		}
	}
	freed = append(freed, "all but its logs")
	_ = os.Remove(lock.Name())
	return fmt.Sprintf("swept %s, whose process died without stopping its environment: killed %d processes and the pods of %d kubelet cgroups, detached %d mounts, removed %s",
		dir, killed, len(roots), mounts, strings.Join(freed, " and "))
}

// sameFile reports whether path still names f.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// leftProcesses are the processes an environment starts that can outlive
// its test process: containerd's shims (started by containerd, not by the
// test) and the Pull members' proxies (Dante drops Pdeathsig when it
// changes its user). They name the work dir in their arguments: a socket
// or a configuration file in it. Nothing else is killed, so a user's
// `tail -f` on a log in the dir is left alone.
var leftProcesses = []string{"containerd-shim", "danted", "tinyproxy"}

// killLeftProcesses kills the leftProcesses that name dir, waits a little
// for them to go, and returns how many it killed.
func killLeftProcesses(dir string) int {
	var pids []int
	for _, pid := range pidsWhere(func(args []string) bool { return isLeftProcess(args, dir) }) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			pids = append(pids, pid)
		}
	}
	// They are not our children: they are gone when init has reaped them.
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return len(pids)
}

// isLeftProcess reports whether args are one of leftProcesses naming dir.
func isLeftProcess(args []string, dir string) bool {
	name := filepath.Base(args[0])
	known := false
	for _, p := range leftProcesses {
		known = known || strings.HasPrefix(name, p)
	}
	if !known {
		return false
	}
	for _, a := range args[1:] {
		if strings.HasPrefix(a, dir+"/") {
			return true
		}
	}
	return false
}

// kubeletCgroupRoots are the cgroupRoots of dir's kubelets: their pods'
// containers run below them, and a killed shim leaves its containers
// running. Each root carries its claim's nonce, so it is this dir's alone.
func kubeletCgroupRoots(dir string) []string {
	configs, _ := filepath.Glob(filepath.Join(dir, "nodes", "*", "kubelet-config.yaml"))
	var roots []string
	for _, c := range configs {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		var cfg kubeletv1beta1.KubeletConfiguration
		if yaml.Unmarshal(b, &cfg) == nil && strings.HasPrefix(cfg.CgroupRoot, "/"+workDirPattern) {
			roots = append(roots, cfg.CgroupRoot)
		}
	}
	return roots
}
