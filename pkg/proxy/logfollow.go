package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
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

// errLogFollowCut ends a follow the member cut: ReverseProxy aborts the
// response (HTTP/1.1: no last chunk, HTTP/2: RST_STREAM), so the client
// reads an unexpected EOF instead of a clean end.
var errLogFollowCut = errors.New("log follow cut by the member cluster while the container runs")

// queryBool reads key as kube-apiserver's bool conversion does: present
// with anything but 0 or false.
func queryBool(q url.Values, key string) bool {
	var on bool
	v, ok := q[key]
	return ok && runtime.Convert_Slice_string_To_bool(&v, &on, nil) == nil && on
}

// watchLogFollow has a rewritten pods/log follow judged when it ends.
// kube-apiserver ends a proxied log body with a clean last chunk also when
// the kubelet died, so a clean end from upstream is checked against the
// member's pod: a follow of the current container (not previous=true) ends
// for real only when that container does (or the pod goes); limitBytes
// ends it early by design and is left alone.
func (p *Proxy) watchLogFollow(res *http.Response) {
	out := res.Request
	state := stateFrom(out.Context())
	if state == nil || state.route != metrics.RouteLog || state.cluster == "" || out.Method != http.MethodGet {
		return
	}
	q := out.URL.Query()
	if !queryBool(q, "follow") || queryBool(q, "previous") || q.Has("limitBytes") {
		return
	}
	since := time.Now()
	res.Body = &streamfollow.FollowedLog{ReadCloser: res.Body, Check: func() error {
		return p.judgeLogEnd(out, state, q.Get("container"), since)
	}}
}

// judgeLogEnd returns errLogFollowCut when the member's pod shows the
// followed container still running for the whole window after upstream
// ended its log follow, or cannot be read at all (the member is not
// answering). A pod the caller may not read, or that does not name the
// container, leaves the end as upstream gave it.
func (p *Proxy) judgeLogEnd(out *http.Request, state *requestState, container string, since time.Time) error {
	parent := out.Context()
	logger := klog.FromContext(parent).WithValues("route", state.route, "cluster", state.cluster,
		"namespace", state.pod.Namespace, "pod", state.pod.Name, "container", container)
	path := karmada.ClusterProxyPath(state.cluster, "/api/v1/namespaces/"+state.pod.Namespace+"/pods/"+state.pod.Name) + "?resourceVersion=0"
	verdict, lastErr := streamfollow.JudgeLogEnd(parent, p.logEndWindow, logEndPollInterval, func(ctx context.Context) (*http.Response, error) {
		// With the identity the log request went with.
		return p.getAccepting(ctx, out, upstreamIdentity{gateway: state.gatewayIdentity}, path, "application/json")
	}, container, since)
	switch {
	case parent.Err() != nil:
		return nil // the client left: nobody to tell
	case verdict == streamfollow.LogEndReal:
		return nil
	case verdict == streamfollow.LogEndUnverified:
		p.metrics.StreamCutsTotal.WithLabelValues(state.route, metrics.CutUnreported).Inc()
		logger.Info("Log follow ended; could not tell a cut from the container's end", "err", lastErr)
		return nil
	}
	p.metrics.StreamCutsTotal.WithLabelValues(state.route, metrics.CutReported).Inc()
	logger.Info("Log follow ended while its container runs; aborting the response", "window", p.logEndWindow, "lastErr", lastErr)
	return errLogFollowCut
}
