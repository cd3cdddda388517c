package env

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child program. It runs in a process group of its own so a
// stop reaches whatever it forked, and it can be started again with the same
// arguments (and so the same port) after a stop.
type process struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string
	// netns, if set, is the network namespace (under /run/netns) the
	// process runs in: nsenter enters it and execs path, so the pid, the
	// process group and the signals are path's own.
	netns string
	// cpus, if set, pins the process to these CPUs: taskset execs path,
	// so the pid is path's own as with netns.
	cpus string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// halted is set while the process is down on purpose (stop or kill).
	halted bool
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running", p.name)
		}
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p.name, err)
	}
	// The header makes restarts visible in the log tail printed on failure.
	fmt.Fprintf(logFile, "=== %s start %s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.name, p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	if p.netns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=" + netnsPath(p.netns), "--", p.path}, p.args...)...)
	}
	if p.cpus != "" {
		cmd = exec.Command("taskset", append([]string{"-c", p.cpus}, cmd.Args...)...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if p.env != nil {
		cmd.Env = append(os.Environ(), p.env...)
	}
	// Pdeathsig takes the child down when the test binary dies without
	// running its cleanups (a panic, a -timeout kill), so no apiserver outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err, p.halted = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logFile, "=== %s exit %s: %v\n", time.Now().Format(time.RFC3339Nano), p.name, err)
		logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// pid is the current run's process id (0 if never started).
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// exited returns a channel closed when the current run ends, or nil if the
// process was never started.
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *process) running() bool {
	done := p.exited()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// exitErr describes why the last run ended, for startup errors. It quotes
// the log's last line: a test's output may be cut before the log tails that
// follow it, and that line is most often why (a kubelet logs its fatal
// error, then exits 1).
func (p *process) exitErr() error {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	last := lastLogLine(p.logPath)
	switch {
	case err == nil && last == "":
		return fmt.Errorf("%s exited", p.name)
	case err == nil:
		return fmt.Errorf("%s exited; its log ends %q", p.name, last)
	case last == "":
		return fmt.Errorf("%s exited: %w", p.name, err)
	}
	return fmt.Errorf("%s exited: %w; its log ends %q", p.name, err, last)
}

// lastLogLine is the last line of the log at path that the process wrote,
// not one of the start and exit headers, cut to a readable length.
func lastLogLine(path string) string {
	lines, err := logTail(path, 64<<10)
	if err != nil {
		return ""
	}
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "=== ") {
			continue
		}
		if len(line) > 500 {
			line = line[:500] + "..."
		}
		return line
	}
	return ""
}

// logTail returns the whole lines in the last window bytes of the file at
// path: a child's log can be hundreds of megabytes (a kubelet at -v=4, a
// gateway under load), and only its end is ever shown.
func logTail(path string, window int64) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cut := false
	if st, err := f.Stat(); err == nil && st.Size() > window {
		// From the byte before the window: whether it ends a line says
		// whether the window starts with a whole one.
		if _, err := f.Seek(st.Size()-window-1, io.SeekStart); err != nil {
			return nil, err
		}
		cut = true
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	text := strings.TrimRight(string(data), "\n")
	if cut {
		// The window's first line is whole only after a newline.
		_, text, _ = strings.Cut(text, "\n")
	}
	if text == "" {
		return nil, nil
	}
	return strings.Split(text, "\n"), nil
}

// restarter starts a process again when it died on its own, a bounded
// number of times, as a service manager does for a daemon that exits to be
// restarted.
type restarter struct {
	p *process
	// attempts counts the starts so far, max bounds them.
	attempts, max int
	logf          func(format string, args ...any)
}

// ensureRunning returns nil if the process runs or was started again, and
// why it is down otherwise: stopped on purpose, or out of attempts.
func (r *restarter) ensureRunning() error {
	if r.p.running() {
		return nil
	}
	if !r.p.died() || r.attempts >= r.max {
		return r.p.exitErr()
	}
	r.attempts++
	r.logf("%v; starting it again (attempt %d of %d)", r.p.exitErr(), r.attempts, r.max)
	return r.p.start()
}

// died reports whether the process was started and has exited without a
// stop or kill.
func (p *process) died() bool {
	p.mu.Lock()
	halted := p.halted
	p.mu.Unlock()
	return !halted && p.exited() != nil && !p.running()
}

// halt marks the process as down on purpose and returns its current run.
func (p *process) halt() (*exec.Cmd, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.halted = true
	return p.cmd, p.done
}

// kill sends SIGKILL to the process group and waits for the exit: a crash.
func (p *process) kill() {
	cmd, done := p.halt()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	cmd, done := p.halt()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	// A process Freeze stopped acts on SIGTERM only once continued.
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	// Anything the child forked into its group must not outlive it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
