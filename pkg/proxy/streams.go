package proxy

import (
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/upstream"
)

// followStream has the upgraded stream of res followed
// (pkg/streamfollow): a cut of a protocol that promises an exit status is
// told to the client and counted; an audited stream's Summary completes
// its audit event; a recorded one is recorded. An error refuses the stream
// (a recording that fails closed).
func (p *Proxy) followStream(res *http.Response) error {
	body, ok := res.Body.(io.ReadWriteCloser)
	state := stateFrom(res.Request.Context())
	if !ok || state == nil {
		return nil
	}
	proto := streamfollow.ProtocolOf(res.Header, state.route)
	if !proto.PromisesExitStatus() && state.audit == nil && p.recorder == nil {
		return nil
	}
	route, where, via := state.route, state.upstreamName, upstream.Karmada
	logger := klog.FromContext(res.Request.Context()).WithValues("route", route, "upstream", state.upstreamName)
	if state.cluster != "" {
		where = fmt.Sprintf("member cluster %q", state.cluster)
		logger = logger.WithValues("cluster", state.cluster, "namespace", state.pod.Namespace, "pod", state.pod.Name)
	}
	opts := streamfollow.Options{
		Protocol: proto,
		Cut:      func(err error) metav1.Status { return streamfollow.CutStatus(where, via, err) },
		OnCut: func(end streamfollow.End) {
			result := metrics.CutReported
			if end == streamfollow.EndCutUnreported {
				result = metrics.CutUnreported
			}
			p.metrics.StreamCutsTotal.WithLabelValues(route, result).Inc()
			logger.Info("Upstream ended an exec stream without its exit status", "result", result)
		},
	}
	if a := state.audit; a != nil {
		a.StreamFollowed(negotiated(res.Header))
		opts.OnEnd = a.StreamEnded
	}
	if p.recorder != nil {
		name, err := p.recorder.Follow(res.Request, state.pod.Namespace, state.pod.Name, state.route, &opts, func() { _ = body.Close() })
		if err != nil {
			return err
		}
		if name != "" && state.audit != nil {
			state.audit.SetRecording(name)
		}
	}
	res.Body = streamfollow.NewStream(body, opts)
	return nil
}

// negotiated is the subprotocol a 101 names.
func negotiated(h http.Header) string {
	if v := h.Get("X-Stream-Protocol-Version"); v != "" {
		return v
	}
	return h.Get("Sec-Websocket-Protocol")
}
