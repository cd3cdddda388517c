package proxy

import (
	"net/http"
	"net/url"
	"strings"

	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// holdStream takes a stream slot for r if isStreamRequest said it is a
// stream and it holds none yet; ServeHTTP gives it back when the request
// ends. Over a limit it answers 429 and reports false. It runs as late as
// the client's identity is known (in authorize mode a certificate is
// verified first) and before the request or, in passthrough mode, its
// admission check goes upstream.
func (p *Proxy) holdStream(w http.ResponseWriter, r *http.Request, state *requestState) bool {
	if !state.stream || state.releaseStream != nil {
		return true
	}
	release, limitedBy := p.limiter.Acquire(identity.ClientKey(r, state.certVerified))
	if release != nil {
		state.releaseStream = release
		return true
	}
	p.metrics.StreamLimitRejectionsTotal.WithLabelValues(limitedBy).Inc()
	klog.FromContext(r.Context()).V(2).Info("Stream limit reached", "scope", limitedBy, "route", state.route)
	refuseUpgrade(w, r)
	apiresponse.WriteStatus(w, p.limiter.TooMany(limitedBy))
	return false
}

// isStreamRequest reports whether r may hold its connection open for as
// long as either side wants, so that it takes a stream slot. ServeHTTP asks
// it of every request before routing, so the answer does not depend on
// which route serves the request or whether the path is rewritten, passed
// through, or nested below Karmada's cluster proxy, which forwards the rest
// of the path and the query to the member's kube-apiserver unchanged:
//
//   - any Upgrade (exec, attach, portforward, WebSocket watches, or an
//     upgrade through a proxy subresource);
//   - watch or follow true by kube-apiserver's bool query conversion, on
//     any path: follow is pods/log's, but a member answers it below the
//     cluster proxy as well, and counting a query that means nothing is
//     cheaper than missing one that does;
//   - a /watch/ path;
//   - pods/proxy, services/proxy and nodes/proxy: their responses are the
//     proxied application's or the kubelet's (server-sent events,
//     long polls, downloads, kubelet logs), whose length no query of the
//     API's reveals, so every one is counted for as long as it is open.
//
// Readings are taken as loosely as targetsPodSubresource takes them, since
// whatever upstream reads the path may resolve dots or decode it.
func isStreamRequest(r *http.Request) bool {
	if upgradeType(r.Header) != "" {
		return true
	}
	if r.URL.RawQuery != "" {
		q, _ := url.ParseQuery(r.URL.RawQuery) // kube-apiserver also keeps the pairs that parse
		if queryBool(q, "watch") || queryBool(q, "follow") {
			return true
		}
	}
	if !strings.Contains(r.URL.Path, "watch") && !strings.Contains(r.URL.Path, "proxy") {
		return false // most requests; spares the readings (see pathMayHold)
	}
	return anyReading(r.URL, streamPathShape)
}

// streamPathShape matches a /watch/ path or a pods, services or nodes proxy
// subresource, below any number of cluster proxies.
func streamPathShape(segs []string) bool {
	for len(segs) >= 6 && segs[0] == "apis" && segs[1] == karmada.ClusterGVR.Group && segs[3] == "clusters" && segs[5] == "proxy" {
		segs = segs[6:]
	}
	n := len(segs)
	switch {
	case n >= 3 && segs[0] == "api" && segs[2] == "watch", // /api/v1/watch/...
		n >= 4 && segs[0] == "apis" && segs[3] == "watch": // /apis/<group>/<version>/watch/...
		return true
	case n >= 7 && segs[0] == "api" && segs[2] == "namespaces" && (segs[4] == "pods" || segs[4] == "services") && segs[6] == "proxy",
		n >= 5 && segs[0] == "api" && segs[2] == "nodes" && segs[4] == "proxy":
		return true
	}
	return false
}
