package proxytest

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

func TestRefusedAddrRefusesAndHoldsItsPort(t *testing.T) {
	addr := RefusedAddr(t)
	if c, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	// What closing a listener did not do: no other listener takes the port.
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Errorf("listened on %s while it is held", addr)
	}
}
