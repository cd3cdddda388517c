// Package identity owns the caller's identity as it travels on the wire, for
// the proxy, authorize mode (pkg/auth) and the stream limiter alike: the
// bearer token in Authorization (BearerToken, HasBearerToken), the WebSocket
// bearer subprotocol browsers use instead (WebSocketBearerToken, read as
// kube-apiserver reads it, and WebSocketBearerEntry, a key for it), client
// certificates (HasClientCertificate), the impersonation headers the gateway
// sets to act as a caller (SetImpersonation), and every header through which
// a client could claim an identity upstream (StripHeaders).
//
// It also holds the two values authorize mode passes between the proxy and
// pkg/auth: Caller, who a request was authenticated as, and ResourceRequest,
// what the caller is authorized for. Defining them here, below both, keeps
// pkg/auth and pkg/proxy from importing each other.
package identity
