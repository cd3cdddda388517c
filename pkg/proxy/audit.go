package proxy

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// Auditor writes down the requests the gateway routes to member clusters
// and its refusals of them (pkg/audit: *audit.Auditor).
type Auditor = audit.Recorder

// decided fills in what the handlers decided about the request, for its
// audit events.
func (s *requestState) decided(req *audit.Request) {
	req.Route, req.Cluster, req.PinnedCluster = s.route, s.cluster, s.pinned
	req.Impersonated = identity.Impersonated(req.HTTP.Header)
	req.SourceIPs = s.sourceIPs
	req.TemplateUID, req.MemberUID = s.placement.TemplateUID, s.placement.MemberUID
	req.EphemeralContainers = s.ephemeral
	switch {
	case s.authorized != nil:
		req.Caller, req.Decision = s.authorized, "allow"
	case apierrors.IsForbidden(s.refusedBy):
		req.Decision, req.Reason = "forbid", s.refusedBy.Error()
	}
}

// resolvePod resolves namespace/pod with the Resolver and keeps what it
// learnt of the template and the member pod for the audit events.
func (p *Proxy) resolvePod(ctx context.Context, namespace, pod string) (string, error) {
	placer, ok := p.resolver.(PodPlacer)
	if !ok {
		return p.resolver.Resolve(ctx, namespace, pod)
	}
	placed, err := placer.ResolvePod(ctx, namespace, pod)
	if s := stateFrom(ctx); s != nil {
		s.placement = placed
	}
	return placed.Cluster, err
}

// authorizedBy notes authorize mode's decision for the audit event.
func (s *requestState) authorizedBy(caller identity.Caller, err error) {
	if err != nil {
		s.refusedBy = err
		return
	}
	s.authorized = &caller
}
