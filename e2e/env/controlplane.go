package env

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
)

// Karmada's control-plane processes KillControlPlane and
// StartControlPlane know.
const (
	ProcessKarmadaAPIServer    = "karmada-apiserver"
	ProcessAggregatedAPIServer = "karmada-aggregated-apiserver"
)

// controlPlaneProcess is the process name names.
func (e *Env) controlPlaneProcess(name string) (*process, error) {
	switch name {
	case ProcessKarmadaAPIServer:
		return e.karmada.proc, nil
	case ProcessAggregatedAPIServer:
		return e.karmadaProcs.aggregated, nil
	}
	return nil, fmt.Errorf("env: %q is not a control-plane process (%s, %s)", name, ProcessKarmadaAPIServer, ProcessAggregatedAPIServer)
}

// KillControlPlane kills karmada-apiserver or karmada-aggregated-apiserver
// (ProcessKarmadaAPIServer, ProcessAggregatedAPIServer) with SIGKILL, as a
// crash, an OOM kill or the end of a rollout's grace period does. The other
// components keep running (none of them elects a leader here, so none exits
// while it is gone).
func (e *Env) KillControlPlane(name string) error {
	p, err := e.controlPlaneProcess(name)
	if err != nil {
		return err
	}
	p.kill()
	return nil
}

// StartControlPlane starts what KillControlPlane killed again, on the same
// port with the same flags and data, and waits until Karmada serves as
// before: karmada-apiserver ready, kube-aggregator reporting the
// aggregated apiserver's APIService Available, every Cluster Ready.
func (e *Env) StartControlPlane(ctx context.Context, name string) error {
	p, err := e.controlPlaneProcess(name)
	if err != nil {
		return err
	}
	if err := p.start(); err != nil {
		return err
	}
	switch name {
	case ProcessKarmadaAPIServer:
		if err := e.waitReady(ctx, e.karmada); err != nil {
			return err
		}
	case ProcessAggregatedAPIServer:
		port := ""
		for _, a := range p.args {
			if v, ok := strings.CutPrefix(a, "--secure-port="); ok {
				port = v
			}
		}
		if err := e.waitHTTP(ctx, p, "https://127.0.0.1:"+port+"/readyz", e.tokens[UserAdmin], 60*time.Second); err != nil {
			return err
		}
	}
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	if err := e.waitAPIServiceAvailable(ctx, dyn); err != nil {
		return err
	}
	for _, c := range e.opts.Members {
		if err := e.WaitClusterReady(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times: 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcessCPU is the CPU time (user and system) that the environment's
// process name (ProcessKarmadaAPIServer, ProcessAggregatedAPIServer, or any
// other of its process names) has used since it started.
func (e *Env) ProcessCPU(name string) (time.Duration, error) {
	p := e.process(name)
	if p == nil {
		return 0, fmt.Errorf("env: no process %q (known: %v)", name, e.processNames())
	}
	pid := p.pid()
	if pid == 0 {
		return 0, fmt.Errorf("env: %s is not running", name)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces, so count after ')'.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("env: /proc/%d/stat: %q", pid, stat)
	}
	// utime and stime are fields 14 and 15 of stat, 12 and 13 after comm.
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("env: /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
