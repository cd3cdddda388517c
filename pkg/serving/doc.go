// Package serving owns how the gateway's listeners serve: the http.Server
// timeouts that bound idle and slow clients without ever cutting a
// long-running stream (exec, attach, port-forward, watches, log -f), the TLS
// configuration, and the files behind it (the serving certificate and key,
// the client CA bundle) re-read from disk while the gateway runs, so a
// certificate rotated by cert-manager or a Secret update is served without a
// restart.
//
// It knows nothing of routes or authentication: cmd/gateway hands it a
// handler, and pkg/auth reads the client CA pool through ClientCA.Pool.
package serving
