package proxy

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

// Defaults of how a log follow's clean end is judged (Options.LogEndWindow):
// a real end shows in the member's pod status within seconds (the kubelet
// ends a follow only once it found the container not running, and reports
// that state at its next sync), a cut never does. Only cuts wait the whole
// window.
const (
	defaultLogEndWindow = 10 * time.Second
	logEndPollInterval  = 500 * time.Millisecond
)

// queryBool reads key as kube-apiserver's bool conversion does: present
// with anything but 0 or false.
func queryBool(q url.Values, key string) bool {
	var on bool
	v, ok := q[key]
	return ok && runtime.Convert_Slice_string_To_bool(&v, &on, nil) == nil && on
}

// watchLogFollow has a rewritten pods/log follow judged when it ends
// (streamfollow.FollowLog): a clean end from upstream while the member's
// pod shows the container running is a cut, and the response is aborted.
func (p *Proxy) watchLogFollow(res *http.Response) {
	out := res.Request
	state := stateFrom(out.Context())
	if state == nil || state.route != metrics.RouteLog || state.cluster == "" {
		return
	}
	logger := klog.FromContext(out.Context()).WithValues("route", state.route, "cluster", state.cluster,
		"namespace", state.pod.Namespace, "pod", state.pod.Name, "container", out.URL.Query().Get("container"))
	path := p.memberPath(state.cluster, "/api/v1/namespaces/"+state.pod.Namespace+"/pods/"+state.pod.Name) + "?resourceVersion=0"
	streamfollow.FollowLog(res, streamfollow.LogFollowOptions{
		Window: p.logEndWindow, Interval: logEndPollInterval,
		Get: func(ctx context.Context) (*http.Response, error) {
			// With the identity the log request went with.
			if m := state.member; m != nil {
				return p.getMemberAs(ctx, out, m, nil, path, "application/json")
			}
			return p.getAccepting(ctx, out, upstreamIdentity{gateway: state.gatewayIdentity}, path, "application/json")
		},
		OnVerdict: func(verdict streamfollow.LogEnd, err error) {
			if verdict == streamfollow.LogEndUnverified {
				p.metrics.StreamCutsTotal.WithLabelValues(state.route, metrics.CutUnreported).Inc()
				logger.Info("Log follow ended; could not tell a cut from the container's end", "err", err)
				return
			}
			p.metrics.StreamCutsTotal.WithLabelValues(state.route, metrics.CutReported).Inc()
			logger.Info("Log follow ended while its container runs; aborting the response", "window", p.logEndWindow, "lastErr", err)
		},
	})
}
