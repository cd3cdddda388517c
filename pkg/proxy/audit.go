package proxy

import (
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
	req.Route, req.Cluster = s.route, s.cluster
	switch {
	case s.authorized != nil:
		req.Caller, req.Decision = s.authorized, "allow"
	case apierrors.IsForbidden(s.refusedBy):
		req.Decision, req.Reason = "forbid", s.refusedBy.Error()
	}
}

// authorizedBy notes authorize mode's decision for the audit event.
func (s *requestState) authorizedBy(caller identity.Caller, err error) {
	if err != nil {
		s.refusedBy = err
		return
	}
	s.authorized = &caller
}
