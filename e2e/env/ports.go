package env

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The environment picks a port for each child and the child binds it later,
// after its start: the port must stay the child's in between. A port the
// kernel hands out for 127.0.0.1:0 does not: once the picker's listener is
// closed, the kernel may hand the same port to the next :0 bind (another
// environment starting at the same time, in this process or another) or use
// it as the source port of an outgoing connection, and the child then fails
// to bind, or worse, a readiness check reaches someone else's server
// ("http: server gave HTTP response to HTTPS client" from a neighbour's
// etcd, #26).
//
// So ports come from outside the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), which the kernel never picks by itself,
// and each is claimed with a lock before it is handed out:
//
//   - within this process, a port is handed out at most once;
//   - across processes (parallel test binaries, other checkouts, a demo
//     environment), each port is a one-byte record lock at its offset in one
//     lock file. The lock is an open file description lock, held for as long
//     as this process lives and released by the kernel when it dies, however
//     it dies, as the network slots are;
//   - a port something else listens on already (a process outside the
//     suite) is skipped.
//
// Ports are never given back before the process exits: a stopped child may
// be started again on its port (Env restarts the gateway and apiservers), and
// a process starts a few hundred ports' worth of environments at most.

// portLow is the lowest port handed out: well above the well-known and
// registered ports of services a machine may run.
const portLow = 20000

// portLockFile holds one lock per port, in the same fixed directory as the
// network slots' locks.
var portLockFile = filepath.Join(netLockDir, "ports.lock")

// portAllocator hands out ports as described above.
type portAllocator struct {
	mu     sync.Mutex
	lock   *os.File // never closed: closing it would drop every port's lock
	ranges [][2]int // inclusive ranges outside the ephemeral range
	next   int      // index into the ranges' ports of the next candidate
	given  map[int]bool
}

var ports portAllocator

// freePort claims a loopback port that no other caller in this process, and
// no other process using this allocator, gets, and that nothing listens on.
func freePort() (int, error) { return ports.get() }

func (a *portAllocator) get() (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lock == nil {
		if err := a.init(); err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
	}
	total := 0
	for _, r := range a.ranges {
		total += r[1] - r[0] + 1
	}
	for range total {
		port := a.nth(a.next % total)
		a.next++
		if a.given[port] {
			continue
		}
		ok, err := a.claim(port)
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		if ok {
			a.given[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free port: every port in %v is taken", a.ranges)
}

func (a *portAllocator) init() error {
	low, high, err := ephemeralPortRange()
	if err != nil {
		return err
	}
	a.ranges = nil
	if low-1 >= portLow {
		a.ranges = append(a.ranges, [2]int{portLow, low - 1})
	}
	if high+1 <= 65535 {
		a.ranges = append(a.ranges, [2]int{max(high+1, portLow), 65535})
	}
	if len(a.ranges) == 0 {
		return fmt.Errorf("no ports from %d up lie outside the ephemeral range %d-%d", portLow, low, high)
	}
	if err := os.MkdirAll(netLockDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(portLockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	a.lock, a.given = f, map[int]bool{}
	return nil
}

// nth is the i-th port of the ranges.
func (a *portAllocator) nth(i int) int {
	for _, r := range a.ranges {
		if n := r[1] - r[0] + 1; i >= n {
			i -= n
			continue
		}
		return r[0] + i
	}
	panic("port index out of range")
}

// claim takes port's lock, without waiting, and checks that nothing listens
// on it; ok is false if another process holds the lock or the port is bound.
func (a *portAllocator) claim(port int) (ok bool, err error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(port), Len: 1}
	if err := unix.FcntlFlock(a.lock.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return false, nil
		}
		return false, fmt.Errorf("lock port %d in %s: %w", port, portLockFile, err)
	}
	l, err := net.Listen("tcp", hostPort(port))
	if err != nil {
		// Someone outside the suite has it: leave the lock for a later try.
		lk.Type = unix.F_UNLCK
		_ = unix.FcntlFlock(a.lock.Fd(), unix.F_OFD_SETLK, &lk)
		return false, nil
	}
	l.Close()
	return true, nil
}

// ephemeralPortRange reads the range the kernel picks local ports from.
func ephemeralPortRange() (low, high int, err error) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, err
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("ip_local_port_range %q: want two ports", data)
	}
	if low, err = strconv.Atoi(fields[0]); err != nil {
		return 0, 0, fmt.Errorf("ip_local_port_range: %w", err)
	}
	if high, err = strconv.Atoi(fields[1]); err != nil {
		return 0, 0, fmt.Errorf("ip_local_port_range: %w", err)
	}
	return low, high, nil
}
