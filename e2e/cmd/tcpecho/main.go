// Command tcpecho is the server an e2e pod runs to be port-forwarded to:
// pods are local processes sharing the host loopback, so it listens on
// 127.0.0.1 (an ephemeral port unless -listen says otherwise), prints the
// address it got as its first log line, and echoes every connection back
// byte for byte until the peer closes it.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "loopback address to listen on")
	flag.Parse()
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpecho:", err)
		os.Exit(1)
	}
	// Tests read the port from this line of the container log.
	fmt.Printf("listening on %s\n", l.Addr())
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "tcpecho: accept:", err)
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}
