package env

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// procState is the state letter of pid in /proc/<pid>/stat ("T": stopped).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return fields[0]
}

func waitState(t *testing.T, pid int, want string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		last = procState(t, pid)
		return last == want, nil
	})
	if err != nil {
		t.Fatalf("process %d in state %q, want %q", pid, last, want)
	}
}

// TestFreezeStopsAndThawsTheProcessGroup: Freeze stops the named process
// and what it forked (its process group) and thaw continues them; Stop
// ends a frozen process without waiting out its grace period.
func TestFreezeStopsAndThawsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	e := &Env{logDir: dir}
	// sh forks a sleep into its process group and waits for it.
	e.etcd = &process{name: ProcEtcd, path: "/bin/sh", args: []string{"-c", "sleep 600 & echo $! > " + filepath.Join(dir, "child") + "; wait"}, logPath: filepath.Join(dir, "etcd.log")}
	if err := e.etcd.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.etcd.kill)
	var child int
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, "child"))
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return false, nil
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, nil
	}); err != nil {
		t.Fatal("the shell did not start its child")
	}
	parent := e.etcd.cmd.Process.Pid

	if _, err := e.Freeze("no-such-process"); err == nil || !strings.Contains(err.Error(), ProcEtcd) {
		t.Errorf("Freeze of an unknown name: %v, want an error listing %s", err, ProcEtcd)
	}
	thaw, err := e.Freeze(ProcEtcd)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, parent, "T")
	waitState(t, child, "T")
	thaw()
	thaw() // safe twice
	if s := procState(t, parent); s == "T" {
		t.Errorf("parent still stopped after thaw")
	}
	if s := procState(t, child); s == "T" {
		t.Errorf("child still stopped after thaw")
	}

	// Frozen again, Stop must not need its SIGKILL fallback: SIGTERM
	// reaches a stopped process only once it is continued.
	if _, err := e.Freeze(ProcEtcd); err != nil {
		t.Fatal(err)
	}
	waitState(t, parent, "T")
	start := time.Now()
	e.etcd.stop(20 * time.Second)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("stopping a frozen process took %s: it waited for the SIGKILL fallback", took)
	}
}
