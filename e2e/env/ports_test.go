package env

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFreePortsConcurrent takes ports from many goroutines at once, as
// environments starting together do: no port is handed out twice, and none
// lies in the kernel's ephemeral range, where a :0 bind or an outgoing
// connection could take it between the pick and the child's bind. The
// kernel-picked ports freePort used before fail the range check.
func TestFreePortsConcurrent(t *testing.T) {
	low, high, err := ephemeralPortRange()
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 16, 16
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				p, err := freePort()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[p] {
					t.Errorf("port %d handed out twice", p)
				}
				seen[p] = true
				mu.Unlock()
				if p >= low && p <= high {
					t.Errorf("port %d lies in the ephemeral range %d-%d", p, low, high)
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != workers*each {
		t.Errorf("got %d distinct ports, want %d", len(seen), workers*each)
	}
}

// portsChildEnv makes TestFreePortsAcrossProcesses the second process.
const portsChildEnv = "E2E_PORTS_CHILD"

// TestFreePortsAcrossProcesses runs this test binary again as a second
// process, as parallel test binaries and a demo environment do on one
// machine: the ports it takes while this process holds its own are none of
// this process's, and the ports this process takes while it runs are none
// of its. Without the lock file each process would walk the same ports from
// the same start and both would get the first ones.
func TestFreePortsAcrossProcesses(t *testing.T) {
	if os.Getenv(portsChildEnv) != "" {
		portsChild(t)
		return
	}
	const n = 20
	for range n {
		if _, err := freePort(); err != nil {
			t.Fatal(err)
		}
	}
	ports.mu.Lock()
	held := map[int]bool{}
	for p := range ports.given {
		held[p] = true
	}
	ports.mu.Unlock()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFreePortsAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), portsChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close() // the child holds its ports until then
		if err := cmd.Wait(); err != nil {
			t.Errorf("child process: %v\n%s", err, stderr.String())
		}
	}()
	var child []int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "e2e-ports:"); ok {
			for _, f := range strings.Fields(rest) {
				p, err := strconv.Atoi(f)
				if err != nil {
					t.Fatal(err)
				}
				child = append(child, p)
			}
			break
		}
	}
	if len(child) != n {
		t.Fatalf("the child process reported %d ports, want %d (stderr: %s)", len(child), n, stderr.String())
	}
	for _, p := range child {
		if held[p] {
			t.Errorf("the child process got port %d, which this process holds", p)
		}
	}
	// Taken while the child holds its ports.
	for range n {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range child {
			if p == c {
				t.Errorf("this process got port %d, which the child process holds", p)
			}
		}
	}
}

// portsChild takes ports, prints them, and holds them until stdin closes.
func portsChild(t *testing.T) {
	var got []string
	for range 20 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strconv.Itoa(p))
	}
	fmt.Printf("e2e-ports: %s\n", strings.Join(got, " "))
	_, _ = bufio.NewReader(os.Stdin).ReadString(0)
}
