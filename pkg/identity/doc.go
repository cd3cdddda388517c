// Package identity owns the caller's identity as it travels on the wire, for
// the proxy, authorize mode (pkg/auth) and the stream limiter alike: the
// bearer token in Authorization (BearerToken, HasBearerToken), the WebSocket
// bearer subprotocol browsers use instead (WebSocketBearerToken, read as
// kube-apiserver reads it, and WebSocketBearerEntry, a key for it), client
// certificates (HasClientCertificate), the key the stream limiter counts a
// client under, derived from its credential and never holding it
// (ClientKey), the impersonation headers the gateway sets to act as a caller
// (SetImpersonation), every header through which a client could claim an
// identity upstream (StripHeaders), and a caller's credentials carried on a
// plain request made on its behalf (PlainRequestHeader).
//
// It also holds the two values authorize mode passes between the proxy and
// pkg/auth: Caller, who a request was authenticated as, and ResourceRequest,
// what the caller is authorized for. Defining them here, below both, keeps
// pkg/auth and pkg/proxy from importing each other. What kube-apiserver would
// authorize a request as is derived here too (attributes.go), as its
// RequestInfo derives it: the verb from the method, and create as well for a
// GET of exec, attach or portforward (PodStreamRequests), or the verb on
// pods/proxy and services/proxy named by the whole {name} segment
// (ProxySubresourceRequest). The proxy parses the path; this package says
// what a parsed request is to RBAC.
package identity
