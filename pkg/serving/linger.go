package serving

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// UpgradeLinger bounds how long an upgraded client connection is kept after
// upstream ended the stream, for the client to read the rest and close.
const UpgradeLinger = 10 * time.Second

// CloseLinger bounds how long Close waits for a client to close its side
// of a connection whose write side was still open.
const CloseLinger = 2 * time.Second

// Lingering wraps the client side of an upgraded connection. ReverseProxy
// calls CloseWrite on it when upstream ends the stream and then waits for
// the client to close its side; the read deadline bounds that wait, so a
// client that never closes cannot pin the connection.
//
// ReverseProxy closes the connection at once when a copy failed (a stream
// the gateway ended, or cut, ends so after its Failure was written). Close
// then closes by halves: a socket closed with the client's bytes unread in
// it is reset, and a reset discards what was written but not yet sent, and
// at the client what it has not read yet, the Failure among it. So Close
// ends the write side, and in the background reads and drops what the
// client still sends until it closes (at most CloseLinger), and only then
// closes.
func Lingering(c net.Conn) net.Conn { return &upgradedConn{Conn: c} }

type upgradedConn struct {
	net.Conn
	closedWrite atomic.Bool
}

func (c *upgradedConn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return c.Conn.Close()
	}
	c.closedWrite.Store(true)
	err := cw.CloseWrite()
	_ = c.Conn.SetReadDeadline(time.Now().Add(UpgradeLinger))
	return err
}

func (c *upgradedConn) Close() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || c.closedWrite.Swap(true) || cw.CloseWrite() != nil || c.Conn.SetReadDeadline(time.Now().Add(CloseLinger)) != nil {
		return c.Conn.Close()
	}
	// In the background: the handler returns, and its audit event is
	// written, without waiting on a client that may never be seen to close
	// (behind a port-forward); at shutdown the gateway waits for its
	// handlers only 3 s (the proxy's StreamEndWait).
	go func() {
		_, _ = io.Copy(io.Discard, c.Conn)
		_ = c.Conn.Close()
	}()
	return nil
}
