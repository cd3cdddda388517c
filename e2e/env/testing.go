package env

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// StartForTest starts an environment for t and registers its teardown: the
// log tails are printed if t failed, then everything is stopped. A start
// failure fails t (with the logs), it never skips.
func StartForTest(t testing.TB, opts Options) *Env {
	t.Helper()
	if opts.Log == nil {
		opts.Log = testWriter{t}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start e2e environment: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.DumpLogs(t)
		}
		e.Stop()
	})
	return e
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// DumpLogs logs the last lines of every log file to t.
func (e *Env) DumpLogs(t testing.TB) {
	t.Helper()
	var b bytes.Buffer
	e.WriteLogTails(&b, 60)
	t.Log(b.String())
}

// WriteLogTails writes the last n lines of every process and component log
// to w, and says where the whole files are.
func (e *Env) WriteLogTails(w io.Writer, n int) {
	files, _ := filepath.Glob(filepath.Join(e.logDir, "*.log"))
	sort.Strings(files)
	for _, f := range files {
		// Read from the file's end, 4 KiB a line: when the last n lines are
		// longer, fewer are shown; the file is never read whole.
		lines, err := logTail(f, int64(n)*4<<10)
		if err != nil {
			fmt.Fprintf(w, "--- %s: %v\n", f, err)
			continue
		}
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(w, "----- last %d lines of %s -----\n%s\n", len(lines), f, strings.Join(lines, "\n"))
	}
	if err := e.ComponentErrors(); err != nil {
		fmt.Fprintf(w, "----- in-process components that stopped -----\n%v\n", err)
	}
	if !e.opts.KeepWorkDir {
		fmt.Fprintf(w, "(set E2E_KEEP=1 to keep %s after the run)\n", e.workDir)
	}
}

// RunKubectl runs bin/kubectl with kubeconfig and args and returns its
// stdout and stderr. The error includes stderr, as kubectl prints Status
// messages there.
func (e *Env) RunKubectl(ctx context.Context, kubeconfig string, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	// The cache dir keeps kubectl's discovery cache out of $HOME.
	global := []string{"--kubeconfig=" + kubeconfig, "--cache-dir=" + filepath.Join(e.workDir, "kubectl-cache")}
	cmd := exec.CommandContext(ctx, e.Kubectl(), append(global, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), errOut.String(), nil
}
