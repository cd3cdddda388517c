// Package upstream is how the gateway reaches karmada-apiserver, through
// it each member's cluster proxy, and a member itself in direct mode: the
// transports requests go out on, the deadline on their answer, what an answer means when the cluster
// proxy could not reach its member, and where an upgrade's setup spends
// its time.
//
//   - Transports (transports.go): "caller" carries the client's own
//     credentials (TLS built from the upstream config with every credential
//     removed); "gateway" adds the gateway's identity. Each has an
//     HTTP/1.1-only twin with its own tls.Config for upgrades: Go's HTTP/2
//     transport rejects Upgrade, and a tls.Config shared with an HTTP/2
//     transport gets h2 added to its ALPN list.
//   - A member reached directly (member.go, --member-access=direct): a
//     keep-alive pool speaking HTTP/2 for plain requests and an HTTP/1.1
//     pool for upgrades, through the member's proxy when its Cluster names
//     one; pkg/memberaccess builds one per member from its Cluster.
//   - Deadline (deadline.go): RoundTripWithin gives an upstream a bounded
//     time, counted from when the request was sent, to answer with response
//     headers (a 101 for an upgrade), per request, so that a log follow of a
//     silent container can go without one. A hung upstream yields a
//     *TimeoutError naming what hung (NameOf, ClusterProxyName), which
//     pkg/proxy answers with a 504 Status.
//   - Connections dialed ahead (warmconn.go): an upgrade cannot reuse a
//     connection, so WarmUp dials one (TCP and TLS, no request) while the
//     upgrade is checked; every transport resumes TLS sessions.
//   - Members out of reach (memberunreachable.go): the cluster proxy's own
//     failure to reach a member (a Pull member's spec.proxyURL proxy down)
//     comes as a bare Go error in a 500 naming no cluster;
//     ReportMemberUnreachable turns it into a 503 naming the member.
//   - Requests sent again (replay.go): Replayable keeps a small body in
//     memory so that the transport can resend a request that a GOAWAY or
//     a closed idle connection proves karmada-apiserver never processed.
//   - Phases (phases.go): one V(4) line per upgrade with the time of its
//     check, resolve, connection, TLS handshake and upstream answer.
//
// pkg/proxy decides which transport and deadline each request gets; this
// package knows nothing of routes or identities.
package upstream
