// Command httpecho is the HTTP server an e2e pod runs to be reached through
// services/proxy: pods are local processes sharing the host loopback, so it
// listens on 127.0.0.1 (an ephemeral port unless -listen says otherwise),
// prints the address it got as its first log line, and answers every
// request with "<name> <method> <escaped path>?<raw query>", name being -name.
//
// A WebSocket handshake to wsPath is accepted with the subprotocol
// wsProtocol (when the client offers it, wherever in its list) and every
// message is echoed back with its type; the 101 carries the usual answer in
// an X-Httpecho header so a test knows which pod and path it reached. A
// WebSocket handshake to any other path gets a 404 with a body naming the
// path, for tests of a refused upgrade.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gorilla/websocket"
)

const (
	wsPath     = "/ws"
	wsProtocol = "echo.httpecho.e2e"
	// maxWSMessage bounds a message the echo reads; tests send 1 MiB.
	maxWSMessage = 16 << 20
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "loopback address to listen on")
	name := flag.String("name", "httpecho", "name to answer with")
	flag.Parse()
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpecho:", err)
		os.Exit(1)
	}
	// Tests read the port from this line of the container log.
	fmt.Printf("listening on %s\n", l.Addr())
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: handler(*name)}
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "httpecho:", err)
		os.Exit(1)
	}
}

func handler(name string) http.Handler {
	upgrader := websocket.Upgrader{
		Subprotocols: []string{wsProtocol},
		// Behind the apiserver's proxy the Origin is the client's, not ours.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer := fmt.Sprintf("%s %s %s?%s", name, r.Method, r.URL.EscapedPath(), r.URL.RawQuery)
		if websocket.IsWebSocketUpgrade(r) {
			if r.URL.Path != wsPath {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprintf(w, "%s: no WebSocket endpoint at %s", name, r.URL.EscapedPath())
				return
			}
			conn, err := upgrader.Upgrade(w, r, http.Header{"X-Httpecho": {answer}})
			if err != nil {
				// Upgrade has answered the client already.
				fmt.Fprintln(os.Stderr, "httpecho: upgrade:", err)
				return
			}
			if err := echo(conn); err != nil {
				fmt.Fprintln(os.Stderr, "httpecho: websocket:", err)
			}
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, answer)
	})
}

// echo sends every message back with its type until the peer closes; a
// close frame is answered by gorilla's default close handler, so a client
// closing with 1000 gets 1000 back.
func echo(conn *websocket.Conn) error {
	defer conn.Close()
	conn.SetReadLimit(maxWSMessage)
	for {
		typ, data, err := conn.ReadMessage()
		if err != nil {
			if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return nil
			}
			return fmt.Errorf("read: %w", err)
		}
		if err := conn.WriteMessage(typ, data); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
}
