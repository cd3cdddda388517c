package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// TestDemoStopsWithItsParent runs the demo (cmd/e2e-env) as `make demo`
// does, below a parent process, and sends SIGTERM to the parent once the
// demo waits for Ctrl-C: the demo tears the environment down (it learns of
// its parent's death) and nothing naming its work directory is left.
func TestDemoStopsWithItsParent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "e2e-env")
	if err := env.GoBuild(t.Context(), ".", "./cmd/e2e-env", bin, "e2e-env", "-ldflags=-w"); err != nil {
		t.Fatal(err)
	}
	workDir := filepath.Join(dir, "work")
	// bash waits for the demo as make does, and dies of SIGTERM.
	parent := exec.Command("bash", "-c", `"$0" --work-dir "$1" & wait`, bin, workDir)
	// E2E_KEEP=1, set for the suite's own work dirs, would keep the demo's,
	// which this test checks is removed.
	parent.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "E2E_KEEP=") })
	stdout, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	parent.Stderr = parent.Stdout
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = parent.Process.Kill(); _ = parent.Wait() }()
	// The demo's output, for the failure: a demo that cannot start says why
	// and exits, which ends the output.
	var (
		mu     sync.Mutex
		output []string
	)
	tail := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(output[max(0, len(output)-30):], "\n")
	}
	up, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(stdout)
		closed := false
		for sc.Scan() {
			mu.Lock()
			output = append(output, sc.Text())
			mu.Unlock()
			if !closed && strings.Contains(sc.Text(), "Press Ctrl-C") {
				close(up)
				closed = true
			}
		}
	}()
	select {
	case <-up:
	case <-ended:
		t.Fatalf("the demo exited before it came up:\n%s", tail())
	case <-time.After(4 * time.Minute):
		t.Fatalf("the demo did not come up within 4 minutes:\n%s", tail())
	}
	if err := parent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var left []string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = processesNaming(t, workDir)
		_, statErr := os.Stat(workDir)
		return len(left) == 0 && os.IsNotExist(statErr) && !mountedUnder(t, workDir), nil
	}); err != nil {
		t.Fatalf("after SIGTERM to the demo's parent: processes %q, work dir or mounts left: %v", left, err)
	}
}
