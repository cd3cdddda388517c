//go:build unix

package upstream

import (
	"net"
	"syscall"
)

// socketHasInput reports whether c's socket has anything to read, its
// end included, without reading it or waiting: a connection that waits
// for its first request has nothing to read unless the server closed it.
func socketHasInput(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	input := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// n == 0 without an error is the peer's end; EAGAIN is nothing.
		input = n > 0 || (err == nil && n == 0) || (err != nil && err != syscall.EAGAIN && err != syscall.EWOULDBLOCK)
		return true
	})
	return input || err != nil
}
