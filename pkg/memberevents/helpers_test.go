package memberevents

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// The hand-off both ways, checked where both packages are in reach.
var (
	_ Gateway            = (*proxy.Proxy)(nil)
	_ proxy.EventsMerger = (*Merger)(nil)
)

var podsResource = schema.GroupResource{Resource: "pods"}

// newTestProxy builds a Proxy with opts (a stub resolver and private
// metrics by default). With merge its events requests go to a Merger with
// the same resolver and metrics, as cmd/gateway wires them with
// --merge-member-events; the Merger is returned for tests that tune it.
func newTestProxy(t testing.TB, opts proxy.Options, merge bool) (*proxy.Proxy, *Merger) {
	t.Helper()
	if opts.Resolver == nil {
		opts.Resolver = &proxytest.Resolver{Cluster: proxytest.Cluster}
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(prometheus.NewRegistry())
	}
	var mg *Merger
	if merge {
		opts.Events = func(gw *proxy.Proxy) (proxy.EventsMerger, error) {
			var err error
			mg, err = New(Options{Gateway: gw, Resolver: opts.Resolver, Metrics: opts.Metrics})
			return mg, err
		}
	}
	p, err := proxy.New(opts)
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	return p, mg
}
