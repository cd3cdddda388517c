package env

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
)

// Processes Freeze can stop, by the name their log file has.
const (
	// ProcEtcd is the one etcd every apiserver of the environment stores in.
	ProcEtcd = "etcd"
	// ProcKarmadaAPIServer is karmada-apiserver.
	ProcKarmadaAPIServer = KarmadaName + "-apiserver"
	// ProcAggregatedAPIServer serves cluster.karmada.io, the cluster proxy included.
	ProcAggregatedAPIServer = "karmada-aggregated-apiserver"
)

// MemberAPIServer names member's kube-apiserver for Freeze.
func MemberAPIServer(member string) string { return member + "-apiserver" }

// Freeze stops the named process (ProcEtcd, ProcKarmadaAPIServer,
// ProcAggregatedAPIServer, MemberAPIServer(m), or any process by the name of
// its log file) with SIGSTOP, with its whole process group: a hang, not a
// crash. Its sockets stay open and the kernel keeps accepting connections on
// its listening ports, so callers see connects succeed and answers never
// come, as with a deadlocked or swapping server. thaw sends SIGCONT; it is
// safe to call more than once, and Stop thaws whatever is still frozen.
func (e *Env) Freeze(name string) (thaw func(), err error) {
	p := e.process(name)
	if p == nil {
		return nil, fmt.Errorf("env: no process %q (known: %v)", name, e.processNames())
	}
	return p.freeze()
}

// freeze stops p and its process group with SIGSTOP; thaw sends SIGCONT.
func (p *process) freeze() (thaw func(), err error) {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("freeze %s: %w", p.name, err)
	}
	return func() { _ = p.signal(syscall.SIGCONT) }, nil
}

// process returns the environment's process called name, or nil.
func (e *Env) process(name string) *process {
	for _, p := range e.processes() {
		if p.name == name {
			return p
		}
	}
	return nil
}

func (e *Env) processNames() []string {
	var names []string
	for _, p := range e.processes() {
		names = append(names, p.name)
	}
	slices.Sort(names)
	return names
}

// processes lists every child process of the environment.
func (e *Env) processes() []*process {
	var out []*process
	if e.etcd != nil {
		out = append(out, e.etcd)
	}
	for _, s := range e.apiServers() {
		if s.proc != nil {
			out = append(out, s.proc)
		}
	}
	out = append(out, e.karmadaProcs.all()...)
	for _, m := range e.clusters() {
		if n := e.nodes[m]; n != nil {
			for _, p := range []*process{n.containerd, n.kubelet, n.scheduler, n.controllers} {
				if p != nil {
					out = append(out, p)
				}
			}
		}
	}
	e.gwMu.Lock()
	if e.gateway != nil {
		out = append(out, e.gateway.proc)
	}
	e.gwMu.Unlock()
	return out
}

// signal sends sig to the process group of the current run.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return errors.New("never started")
	}
	select {
	case <-done:
		return errors.New("not running")
	default:
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}
