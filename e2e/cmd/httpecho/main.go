// Command httpecho is the HTTP server an e2e pod runs to be reached through
// services/proxy: pods are local processes sharing the host loopback, so it
// listens on 127.0.0.1 (an ephemeral port unless -listen says otherwise),
// prints the address it got as its first log line, and answers every
// request with "<name> <method> <escaped path>?<raw query>", name being -name.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
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
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "%s %s %s?%s", *name, r.Method, r.URL.EscapedPath(), r.URL.RawQuery)
		}),
	}
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "httpecho:", err)
		os.Exit(1)
	}
}
