package proxy

import (
	"fmt"
	"io"
	"net/http"
	"sync"

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
// (a recording that fails closed cannot record its protocol).
func (p *Proxy) followStream(res *http.Response) error {
	body, ok := res.Body.(io.ReadWriteCloser)
	state := stateFrom(res.Request.Context())
	if !ok || state == nil {
		return nil
	}
	proto := streamfollow.ProtocolOf(res.Header, state.route)
	if !proto.PromisesExitStatus() && state.audit == nil && state.recording == nil {
		return nil
	}
	route, where, via := state.route, state.upstreamName, upstream.Karmada
	if state.member != nil {
		via = state.upstreamName
	}
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
		HeartbeatPeriod: p.heartbeatPeriod, HeartbeatDeadline: p.heartbeatDeadline,
		OnHeartbeat: func(h streamfollow.Heartbeat) { p.metrics.StreamHeartbeatsTotal.WithLabelValues(string(h)).Inc() },
	}
	a := state.audit
	if a != nil {
		opts.OnEnd = a.StreamEnded
	}
	var stream *streamfollow.Stream
	if rec := state.recording; rec != nil {
		if err := rec.Attach(&opts, func(end streamfollow.End, st metav1.Status) { stream.Terminate(end, st) }); err != nil {
			return err
		}
		if a != nil {
			if rec.Recorded() {
				a.SetRecording(rec.Name())
			}
			a.RecordingFollowed(func() (string, string) {
				res := rec.Result()
				return res.File, res.Incomplete
			})
		}
	}
	if a != nil {
		a.StreamFollowed(negotiated(res.Header))
	}
	stream = streamfollow.NewStream(body, opts)
	state.followed = stream
	p.streams.add(stream)
	res.Body = stream
	return nil
}

// openStreams are the followed streams open, which a shutdown past its
// grace period ends.
type openStreams struct {
	mu sync.Mutex
	m  map[*streamfollow.Stream]struct{}
}

func (o *openStreams) add(s *streamfollow.Stream) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[*streamfollow.Stream]struct{}{}
	}
	o.m[s] = struct{}{}
}

func (o *openStreams) remove(s *streamfollow.Stream) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, s)
}

// terminateAll ends every open stream with st, and says how many.
func (o *openStreams) terminateAll(end streamfollow.End, st metav1.Status) int {
	o.mu.Lock()
	streams := make([]*streamfollow.Stream, 0, len(o.m))
	for s := range o.m {
		streams = append(streams, s)
	}
	o.mu.Unlock()
	for _, s := range streams {
		s.Terminate(end, st)
	}
	return len(streams)
}

// negotiated is the subprotocol a 101 names.
func negotiated(h http.Header) string {
	if v := h.Get("X-Stream-Protocol-Version"); v != "" {
		return v
	}
	return h.Get("Sec-Websocket-Protocol")
}
