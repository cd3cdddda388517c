// Package proxy is the gateway's reverse proxy in front of karmada-apiserver.
//
// It owns routing, the rewrite of pods/{exec,attach,log,portforward},
// pods/proxy and services/proxy to Karmada's cluster proxy, the upstream
// transports, upgrades, the stream limits, authorize mode's decisions (the
// Authorizer interface it consumes; pkg/auth implements it, pkg/identity
// reads and writes identities on the wire), Status errors (written by
// pkg/apiresponse) and graceful drain. Everything else is passed through
// byte for byte. Member events are pkg/memberevents', handed requests
// through EventsMerger.
//
// Design:
//   - Routing (router.go, chi) parses the escaped path strictly. Any request
//     that under some decoding or normalisation (percent-decoding, dot
//     segments, empty segments, trailing slash) would address one of the four
//     subresources, with or without segments after it, but is not canonical
//     is answered 400 and never sent upstream, so the gateway and karmada-apiserver can never disagree about
//     which pod a request is for.
//   - Pinned member (pinned.go): a request under /clusters/<name>/ is
//     served as the request below the prefix, its context pinned to member
//     cluster <name> (resolver.WithPinnedCluster), so the rewritten routes
//     and the events merge reach that member's copy and everything else
//     goes to karmada-apiserver without the prefix. The prefix is parsed as
//     strictly as the pod paths: a path some reading puts under /clusters/
//     that is not exactly /clusters/<DNS-1123 label>, unescaped, with no
//     second prefix below, is answered 400.
//   - Pod and service proxy (proxysubresource.go):
//     /api/v1/namespaces/<ns>/pods/<[scheme:]name[:port]>/proxy[/<rest>],
//     and with Options.ServiceResolver set the same path for services, goes,
//     any method, upgrades included, to the cluster proxy of the member the
//     pod (Service) resolves to, <rest> and the query byte for byte. The
//     same strict parse applies to the prefix; <rest> may carry escapes but
//     no segment that is or decodes to a dot segment. Authorize mode
//     authorizes the verb kube-apiserver derives from the method on
//     pods/proxy (services/proxy), named by the whole segment
//     (identity.ProxySubresourceRequest).
//   - Hand-off (handoff.go): requests an EventsMerger (Options.Events,
//     pkg/memberevents) claims go to it once their passthrough identity is
//     known; it reaches upstream only through the Proxy's exported methods,
//     so identities, stream limits, metrics and errors stay here.
//   - Proxying is httputil.ReverseProxy with the Rewrite hook. Rewrite restores
//     what ReverseProxy changes for safety in generic proxies but that would
//     break byte-for-byte passthrough here: the raw query (cleanQueryParams
//     re-encodes `;` and bad escapes) and client-sent Forwarded/X-Forwarded-*
//     headers. Nothing is added. Every response without a Content-Length
//     (watches, log follows) is flushed per write, so streams go unbuffered;
//     one of known length is written whole. A body cut mid-way panics http.ErrAbortHandler,
//     which nothing here recovers, so the client sees an aborted response.
//   - Upgrades (SPDY/3.1, WebSocket with any channel.k8s.io or port-forward
//     subprotocol) also go through ReverseProxy, not apimachinery's
//     UpgradeAwareHandler: it re-sends Connection: Upgrade and the original
//     Upgrade, forwards every other header (all X-Stream-Protocol-Version and
//     Sec-WebSocket-* lines) both ways unchanged, relays a non-101 answer as
//     is, and writes 101 only after upstream did. Three gaps are closed here:
//     ModifyResponse refuses a 101 of another Upgrade type (502, upstream
//     connection closed; ReverseProxy would leak it); a non-101 answer to an
//     upgrade gets Connection: close so the client connection can never
//     become a tunnel afterwards (the idea of apimachinery's
//     TestProxyUpgradeErrorResponseTerminates); and when upstream ends an
//     upgraded stream, the client connection is half-closed and then closed
//     after a short linger instead of waiting on the client forever.
//   - Stream cuts (streams.go, logfollow.go): a member whose kubelet or
//     container runtime dies ends streams the way they end when complete,
//     so the gateway tells the client instead of relaying the silence.
//     Upgraded exec and attach streams whose protocol promises an exit
//     status are followed by pkg/streamfollow, which appends a Failure
//     naming the member when upstream ends one without a status; a
//     rewritten pods/log follow that upstream ends cleanly is checked
//     against the member's pod for Options.LogEndWindow, and aborted when
//     the container still runs.
//   - Members out of reach (pkg/upstream): Karmada's cluster proxy
//     answers its own failure to reach a member (a Pull member's
//     spec.proxyURL proxy down) with the bare Go error as a 500 Status
//     naming no cluster; the gateway answers 503 naming the cluster proxy
//     and the member, the message kept. The member's own errors pass.
//   - Transports and deadlines (pkg/upstream): each request goes out on
//     the caller's or the gateway's transport, HTTP/2 or HTTP/1.1 for
//     upgrades, within Options.UpstreamHeaderTimeout to its response
//     headers but for log follows; upstream.go here picks the identity.
//   - Passthrough admission (proxy.go, admittedByKarmada): the Resolver
//     answers from caches, so before a rewritten route resolves anything in
//     passthrough mode, karmada-apiserver judges the caller: a GET of the
//     pod or Service from its watch cache with the caller's own credentials
//     and identity headers (a WebSocket subprotocol token as Authorization,
//     identity.PlainRequestHeader).
//     Any answer but 200 is relayed as it came, so a caller it refuses learns
//     nothing about placement. A 200 is reused only with Options.Admissions.
//   - Authorize mode (pkg/identity on the wire): rewritten routes are authorized by the
//     Authorizer with the verbs kube-apiserver checks for the method
//     (identity.PodStreamRequests: GET of exec, attach and portforward needs
//     get and create) and sent with the gateway's identity after every client
//     identity header is removed; passthrough routes keep bearer callers'
//     headers, and x509 callers are impersonated by the gateway.
//   - Limits (limit.go): streams (isStreamRequest, decided for every request
//     before routing: any Upgrade, watch or follow on any path, /watch/
//     paths, pods/services/nodes proxy, below cluster proxies too) hold a
//     slot of pkg/streamlimit for the client's identity.ClientKey for as
//     long as they stream; over a limit the client gets 429 before
//     anything goes upstream.
//   - Audit (audit.go): with Options.Auditor, the request's audit.Trail is
//     told its response and its stream's end (pkg/audit).
//   - Drain: Shutdown refuses new requests with 503 and waits for in-flight
//     ones, hijacked streams included (pkg/inflight), then cuts them.
package proxy
