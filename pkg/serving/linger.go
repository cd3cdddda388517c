package serving

import (
	"net"
	"time"
)

// UpgradeLinger bounds how long an upgraded client connection is kept after
// upstream ended the stream, for the client to read the rest and close.
const UpgradeLinger = 10 * time.Second

// Lingering wraps the client side of an upgraded connection. ReverseProxy
// calls CloseWrite on it when upstream ends the stream and then waits for
// the client to close its side; the read deadline bounds that wait, so a
// client that never closes cannot pin the connection.
func Lingering(c net.Conn) net.Conn { return &upgradedConn{Conn: c} }

type upgradedConn struct {
	net.Conn
}

func (c *upgradedConn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return c.Conn.Close()
	}
	err := cw.CloseWrite()
	_ = c.Conn.SetReadDeadline(time.Now().Add(UpgradeLinger))
	return err
}
