//go:build !unix

package upstream

import "net"

// socketHasInput cannot look at the socket here; the watching read's
// answer stands alone.
func socketHasInput(net.Conn) bool { return false }
