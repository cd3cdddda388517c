// Package upstream is how the gateway reaches karmada-apiserver, and
// through it each member's cluster proxy: the transports requests go out
// on and the deadline on their answer.
//
//   - Transports (transports.go): "caller" carries the client's own
//     credentials (TLS built from the upstream config with every credential
//     removed); "gateway" adds the gateway's identity. Each has an
//     HTTP/1.1-only twin with its own tls.Config for upgrades: Go's HTTP/2
//     transport rejects Upgrade, and a tls.Config shared with an HTTP/2
//     transport gets h2 added to its ALPN list.
//   - Deadline (deadline.go): RoundTripWithin gives an upstream a bounded
//     time, counted from when the request was sent, to answer with response
//     headers (a 101 for an upgrade), per request, so that a log follow of a
//     silent container can go without one. A hung upstream yields a
//     *TimeoutError naming what hung (NameOf, ClusterProxyName), which
//     pkg/proxy answers with a 504 Status.
//
// pkg/proxy decides which transport and deadline each request gets; this
// package knows nothing of routes or identities.
package upstream
