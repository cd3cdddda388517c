package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// The agent is the "container runtime" behind the CRI streaming handlers.
var (
	_ remotecommand.Executor    = (*Agent)(nil)
	_ remotecommand.Attacher    = (*Agent)(nil)
	_ portforward.PortForwarder = (*Agent)(nil)
)

// The streaming handlers are called with the pod key (namespace/name) as
// the pod name, as kubelet passes its pod full name.
func (a *Agent) container(key, uid, container string) (*podRuntime, *containerRuntime, *containerProcess, error) {
	rt := a.runtimeFor(key, uid)
	if rt == nil {
		return nil, nil, nil, fmt.Errorf("pod %q is not running on node %q", key, a.nodeName)
	}
	c, cp, err := rt.runningContainer(container)
	return rt, c, cp, err
}

// ExecInContainer runs cmd as a local process in the container's directory
// with its environment, under a pty when tty is set.
func (a *Agent) ExecInContainer(ctx context.Context, key, uid, container string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	rt, c, cp, err := a.container(key, uid, container)
	if err != nil {
		return err
	}
	spec, err := rt.execSpec(c, cmd)
	if err != nil {
		return err
	}
	ecmd, err := spec.command()
	if err != nil {
		return err
	}
	var p *proc
	if tty {
		if p, err = a.execTTY(ecmd, in, out, resize); err != nil {
			return err
		}
	} else {
		if in != nil {
			stdin, err := ecmd.StdinPipe()
			if err != nil {
				return err
			}
			go func() {
				_, _ = io.Copy(stdin, in)
				_ = stdin.Close()
			}()
		}
		if out != nil {
			ecmd.Stdout = out
		}
		if errOut != nil {
			ecmd.Stderr = errOut
		}
		// A background child keeping stdout open must not hold the exec
		// open forever once the command itself has exited.
		ecmd.WaitDelay = 2 * time.Second
		if p, _, err = a.spawn(ecmd, false); err != nil {
			return err
		}
		if resize != nil {
			go drainResize(resize)
		}
	}
	defer cp.trackExec(p)()
	select {
	case <-p.exited:
	case <-ctx.Done():
		p.signal(syscall.SIGKILL)
		<-p.exited
	}
	if code := p.exitCode(); code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

func (a *Agent) execTTY(ecmd *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) (*proc, error) {
	p, master, err := a.spawn(ecmd, true)
	if err != nil {
		return nil, err
	}
	if resize != nil {
		go applyResize(master, resize)
	}
	if in != nil {
		go func() { _, _ = io.Copy(master, in) }()
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if out == nil {
			out = io.Discard
		}
		// Reading the master fails (EIO) once every holder of the terminal
		// has exited.
		_, _ = io.Copy(out, master)
	}()
	go func() {
		<-p.exited
		t := time.NewTimer(2 * time.Second)
		defer t.Stop()
		select {
		case <-copied:
		case <-t.C:
		}
		_ = master.Close()
	}()
	// Output must be complete before the exit status is reported.
	wrapped := &proc{cmd: p.cmd, pgid: p.pgid, exited: make(chan struct{})}
	go func() {
		<-p.exited
		<-copied
		wrapped.state = p.state
		close(wrapped.exited)
	}()
	return wrapped, nil
}

func applyResize(t *os.File, resize <-chan remotecommand.TerminalSize) {
	for size := range resize {
		setTerminalSize(t, size.Width, size.Height)
	}
}

// drainResize keeps the resize stream flowing when there is no terminal.
func drainResize(resize <-chan remotecommand.TerminalSize) {
	for range resize {
	}
}

// AttachContainer connects a client to the running container process: its
// input goes to the container's stdin, and the output from now on fans out
// to it alongside every other attached client.
func (a *Agent) AttachContainer(ctx context.Context, key, uid, container string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	_, _, cp, err := a.container(key, uid, container)
	if err != nil {
		return err
	}
	if resize != nil {
		if cp.tty != nil {
			go applyResize(cp.tty, resize)
		} else {
			go drainResize(resize)
		}
	}
	// The attach lasts until every requested stream is done (as containerd's
	// does), the container exits, or the agent stops.
	var waits []<-chan struct{}
	if out != nil {
		s := cp.stdout.subscribe(out)
		defer cp.stdout.unsubscribe(s)
		waits = append(waits, s.done)
	}
	if errOut != nil && cp.tty == nil {
		s := cp.stderr.subscribe(errOut)
		defer cp.stderr.unsubscribe(s)
		waits = append(waits, s.done)
	}
	if in != nil {
		stdinDone := make(chan struct{})
		go func() {
			defer close(stdinDone)
			cp.writeStdin(in)
		}()
		waits = append(waits, stdinDone)
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-cp.done:
			return nil
		case <-ctx.Done():
			return nil
		case <-a.stopping:
			return errors.New("node agent is shutting down")
		}
	}
	return nil
}

// PortForward connects the stream to 127.0.0.1:port: pods share the host
// loopback here.
func (a *Agent) PortForward(ctx context.Context, key, uid string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	if a.runtimeFor(key, uid) == nil {
		return fmt.Errorf("pod %q is not running on node %q", key, a.nodeName)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(loopbackIP, strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside namespace of pod %q: %w", port, key, err)
	}
	defer conn.Close()
	// The client-to-pod copy ends when the client closes its side or the
	// streaming connection goes away; it is not waited for.
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	fromPod := make(chan struct{})
	go func() {
		defer close(fromPod)
		_, _ = io.Copy(stream, conn)
	}()
	// The forward ends when the pod side closes, as with a CRI runtime.
	select {
	case <-fromPod:
	case <-ctx.Done():
	case <-a.stopping:
	}
	_ = conn.Close()
	<-fromPod
	return nil
}
