package serving

import (
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"time"
)

// DefaultIdleTimeout is kube-apiserver's (k8s.io/apiserver secure_serving.go),
// which matches http.DefaultTransport's IdleConnTimeout: a client-go client
// closes its own idle connections first and never races the server's close.
const DefaultIdleTimeout = 90 * time.Second

// ServerOptions configures NewServer.
type ServerOptions struct {
	// Handler serves every request.
	Handler http.Handler
	// ReadHeaderTimeout bounds the TLS handshake and the request headers
	// (slowloris). Zero: none (there is no ReadTimeout to fall back to).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection (HTTP/1.1) or an HTTP/2
	// connection with no open stream after this long without a request.
	// It never applies while a request is being served or after an upgrade.
	// Zero: none.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request header block; zero is net/http's 1 MiB.
	MaxHeaderBytes int
	// TLSConfig, when set, is served with Serve(..., tls=true); see TLSConfig.
	TLSConfig *tls.Config
	// ErrorLog receives net/http's own errors; nil is the standard logger.
	ErrorLog *log.Logger
}

// NewServer returns the http.Server the gateway's listeners use.
//
// There is no ReadTimeout or WriteTimeout: exec, attach, port-forward, watch
// and log -f requests last as long as the job, and either timeout would cut
// them. The idle timeout is safe for them: net/http arms it only between
// requests on a keep-alive connection, never on a hijacked (upgraded)
// connection or while a handler runs, and HTTP/2 (which copies it from here)
// only while a connection has no open stream.
func NewServer(o ServerOptions) *http.Server {
	return &http.Server{
		Handler:           o.Handler,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		TLSConfig:         o.TLSConfig,
		ErrorLog:          o.ErrorLog,
	}
}

// TLSConfig is the proxy's TLS: 1.2 and newer, HTTP/2 offered, the serving
// certificate taken from cert on every handshake so a rotated one is used by
// the next connection. It asks for (never requires) a client certificate,
// in every auth mode: pkg/auth verifies one when --client-ca-file is set,
// and a client that presents an unrelated certificate still connects.
//
// Asking also spares clients whose sockets leave TCP_NODELAY off (Java and
// Node stacks may) a delayed ACK per connection: without a certificate
// request a Go server sends its TLS 1.3 session tickets before the
// client's Finished and then has nothing to send, so the client's request,
// written right behind its Finished, waits in Nagle's algorithm for the
// server's delayed ACK (about 40 ms on Linux). With the request, the
// tickets follow the client's Finished and carry the ACK at once, as with
// kube-apiserver, which asks for certificates too.
func TLSConfig(cert *Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: cert.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
		ClientAuth:     tls.RequestClientCert,
	}
}

// Serve serves srv on ln, with TLS when srv has a TLSConfig, and returns
// nil once srv is shut down.
func Serve(srv *http.Server, ln net.Listener) error {
	var err error
	if srv.TLSConfig != nil {
		err = srv.ServeTLS(ln, "", "")
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
