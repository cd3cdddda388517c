package nodeagent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// processSpec is what a container or an exec runs: argv in dir with env.
type processSpec struct {
	argv []string
	dir  string
	env  []string
}

// command resolves argv[0] against the process's own PATH (not the
// agent's), as a container runtime resolves it inside the container.
func (s processSpec) command() (*exec.Cmd, error) {
	if len(s.argv) == 0 || s.argv[0] == "" {
		return nil, errors.New("no command specified (images are ignored, so the pod must set command or args)")
	}
	path := s.argv[0]
	if !strings.Contains(path, "/") {
		found, err := lookPath(path, envValue(s.env, "PATH"))
		if err != nil {
			return nil, err
		}
		path = found
	}
	cmd := exec.Command(path, s.argv[1:]...)
	cmd.Args[0] = s.argv[0]
	cmd.Dir = s.dir
	cmd.Env = s.env
	return cmd, nil
}

func lookPath(file, pathEnv string) (string, error) {
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
}

func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// proc is a started process leading its own process group, so signals
// reach everything it spawned, as they would reach a container's cgroup.
type proc struct {
	cmd    *exec.Cmd
	pgid   int
	exited chan struct{} // closed once Wait returned
	state  *os.ProcessState
}

// spawn starts cmd in a new process group (a new session with a controlling
// pty when tty is set) and returns the pty master for tty processes. Every
// spawned process is counted in a.procs until reaped.
func (a *Agent) spawn(cmd *exec.Cmd, tty bool) (*proc, *os.File, error) {
	a.procMu.Lock()
	defer a.procMu.Unlock()
	select {
	case <-a.stopping:
		return nil, nil, errors.New("node agent is shutting down")
	default:
	}
	// Pdeathsig is a safety net for an agent that dies without running its
	// shutdown: the direct child goes with it.
	attrs := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var master *os.File
	var err error
	if tty {
		attrs.Setsid, attrs.Setctty = true, true
		master, err = pty.StartWithAttrs(cmd, &pty.Winsize{Rows: 24, Cols: 80}, attrs)
	} else {
		attrs.Setpgid = true
		cmd.SysProcAttr = attrs
		err = cmd.Start()
	}
	if err != nil {
		return nil, nil, err
	}
	if master != nil {
		if master, err = pollable(master); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, nil, err
		}
	}
	a.procs.Add(1)
	p := &proc{cmd: cmd, pgid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		defer a.procs.Done()
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	go func() {
		// The agent stopping kills the whole group at once: nothing it
		// started may outlive Run.
		select {
		case <-a.stopping:
			p.signal(syscall.SIGKILL)
		case <-p.exited:
		}
	}()
	return p, master, nil
}

func (p *proc) signal(sig syscall.Signal) {
	// The group may be gone already; that is the point.
	_ = syscall.Kill(-p.pgid, sig)
}

// exitCode reports the status as a container runtime does: the exit code,
// or 128+signal for a process killed by a signal. Only valid after exited.
func (p *proc) exitCode() int {
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return p.state.ExitCode()
}

// broadcaster fans a container's output out to every attached client, from
// the moment each attaches.
type broadcaster struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

type subscriber struct {
	w    io.Writer
	done chan struct{} // closed when output ended or a write to w failed
	once sync.Once
}

func (s *subscriber) finish() { s.once.Do(func() { close(s.done) }) }

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: map[*subscriber]struct{}{}}
}

func (b *broadcaster) subscribe(w io.Writer) *subscriber {
	s := &subscriber{w: w, done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.finish()
		return s
	}
	b.subs[s] = struct{}{}
	return s
}

func (b *broadcaster) unsubscribe(s *subscriber) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
	s.finish()
}

func (b *broadcaster) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if _, err := s.w.Write(p); err != nil {
			delete(b.subs, s)
			s.finish()
		}
	}
	return len(p), nil
}

func (b *broadcaster) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		delete(b.subs, s)
		s.finish()
	}
}

// containerProcess is one instance (one restart) of a container.
type containerProcess struct {
	*proc
	tty       *os.File // pty master, when the container has tty
	stdout    *broadcaster
	stderr    *broadcaster // unused with tty: the terminal merges both
	log       *logWriter
	startedAt time.Time
	index     int32 // which restart of the container this is

	stdinMu     sync.Mutex
	stdin       io.WriteCloser // nil when the container has no stdin
	stdinOnce   bool
	stdinClosed bool

	done       chan struct{} // exited, output drained, log closed
	finishedAt time.Time     // valid after done

	execMu    sync.Mutex
	execs     map[*proc]struct{} // running execs, which die with the container
	execsDone bool
}

// trackExec ties an exec'd process to this container instance: like any
// process in a container, it is killed when the container ends.
func (cp *containerProcess) trackExec(p *proc) (untrack func()) {
	cp.execMu.Lock()
	defer cp.execMu.Unlock()
	if cp.execsDone {
		p.signal(syscall.SIGKILL)
		return func() {}
	}
	if cp.execs == nil {
		cp.execs = map[*proc]struct{}{}
	}
	cp.execs[p] = struct{}{}
	return func() {
		cp.execMu.Lock()
		delete(cp.execs, p)
		cp.execMu.Unlock()
	}
}

func (cp *containerProcess) endExecs() {
	cp.execMu.Lock()
	defer cp.execMu.Unlock()
	cp.execsDone = true
	for p := range cp.execs {
		p.signal(syscall.SIGKILL)
	}
}

// startContainerProcess runs spec with the container's stdio wiring and
// drains its output into the log and the attach fan-out.
func (a *Agent) startContainerProcess(spec processSpec, tty, stdin, stdinOnce bool, log *logWriter) (*containerProcess, error) {
	cmd, err := spec.command()
	if err != nil {
		return nil, err
	}
	cp := &containerProcess{
		stdout:    newBroadcaster(),
		stderr:    newBroadcaster(),
		log:       log,
		stdinOnce: stdinOnce,
		done:      make(chan struct{}),
	}
	var readers []io.Reader
	var streams []string
	var childEnds []*os.File
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			_ = f.Close()
		}
	}
	// With tty the terminal is stdin, stdout and stderr (pty.Start wires
	// it); without container.stdin nobody ever writes to it, as with
	// "docker run -t" without -i.
	if !tty {
		outR, outW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll(outR, outW)
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = outW, errW
		childEnds = append(childEnds, outW, errW)
		readers = append(readers, outR, errR)
		streams = append(streams, "stdout", "stderr")
		if stdin {
			inR, inW, err := os.Pipe()
			if err != nil {
				closeAll(outR, outW, errR, errW)
				return nil, err
			}
			cmd.Stdin = inR
			childEnds = append(childEnds, inR)
			cp.stdin = inW
		}
	}
	p, master, err := a.spawn(cmd, tty)
	closeAll(childEnds...)
	if err != nil {
		for _, r := range readers {
			_ = r.(*os.File).Close()
		}
		if cp.stdin != nil {
			_ = cp.stdin.Close()
		}
		return nil, err
	}
	cp.proc = p
	cp.startedAt = time.Now()
	if tty {
		cp.tty = master
		readers = []io.Reader{master}
		streams = []string{"stdout"}
		if stdin {
			cp.stdin = nopCloser{master}
		}
	}

	var drained sync.WaitGroup
	for i, r := range readers {
		fanout := cp.stdout
		if streams[i] == "stderr" {
			fanout = cp.stderr
		}
		drained.Add(1)
		go func() {
			defer drained.Done()
			pump(r, streams[i], log, fanout)
		}()
	}
	go func() {
		<-p.exited
		// When a container's main process exits the runtime kills the
		// rest of the container; that also releases the output pipes.
		p.signal(syscall.SIGKILL)
		if !waitTimeout(&drained, 2*time.Second) {
			// Something escaped the group and holds the pipe: stop reading.
			for _, r := range readers {
				_ = r.(*os.File).Close()
			}
			drained.Wait()
		}
		if tty {
			_ = master.Close()
		} else {
			for _, r := range readers {
				_ = r.(*os.File).Close()
			}
		}
		cp.closeStdin()
		cp.endExecs()
		cp.finishedAt = time.Now()
		log.close()
		cp.stdout.close()
		cp.stderr.close()
		close(cp.done)
	}()
	return cp, nil
}

func pump(r io.Reader, stream string, log *logWriter, fanout *broadcaster) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			log.write(stream, buf[:n])
			_, _ = fanout.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	ch := make(chan struct{})
	go func() {
		wg.Wait()
		close(ch)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// writeStdin copies an attach client's input into the container.
func (cp *containerProcess) writeStdin(in io.Reader) {
	cp.stdinMu.Lock()
	w := cp.stdin
	closed := cp.stdinClosed
	cp.stdinMu.Unlock()
	if w == nil || closed {
		_, _ = io.Copy(io.Discard, in)
		return
	}
	_, _ = io.Copy(w, in)
	if cp.stdinOnce {
		cp.closeStdin()
	}
}

func (cp *containerProcess) closeStdin() {
	cp.stdinMu.Lock()
	defer cp.stdinMu.Unlock()
	if cp.stdin != nil && !cp.stdinClosed {
		cp.stdinClosed = true
		_ = cp.stdin.Close()
	}
}

func (cp *containerProcess) running() bool {
	select {
	case <-cp.done:
		return false
	default:
		return true
	}
}

// nopCloser keeps the pty master open when a tty container's "stdin" is
// closed: the master is also its output.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// pollable swaps the pty master for a non-blocking, poller-managed copy:
// creack/pty leaves it in blocking mode, where Close cannot interrupt a Read
// and Fd races with Close.
func pollable(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("dup pty: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("pty non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// setTerminalSize resizes a pty through the poller's fd reference, which is
// safe against a concurrent Close.
func setTerminalSize(f *os.File, width, height uint16) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: height, Col: width})
	})
}
