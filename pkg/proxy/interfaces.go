package proxy

import (
	"context"
	"net/http"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/resolver"
)

// Resolver maps a pod template to the member cluster that runs it.
// *resolver.Resolver implements it.
type Resolver interface {
	// Resolve returns the member cluster of namespace/pod. An error that
	// implements apierrors.APIStatus (404 pod not found, 404/409 not placed,
	// 503 cluster not ready) is written to the client as that Status.
	Resolve(ctx context.Context, namespace, pod string) (cluster string, err error)
}

// PodPlacer is a Resolver that also says what it learnt of the objects on
// the way: the template's UID and, when it read it, the member pod's. The
// proxy uses it, when its Resolver has it, for the audit events (objectRef.uid
// and audit.AnnotationMemberPodUID). *resolver.Resolver implements it.
type PodPlacer interface {
	ResolvePod(ctx context.Context, namespace, pod string) (resolver.Placement, error)
}

// ClusterHinter is a Resolver that can guess a pod's cluster from its
// label without resolving it, so that direct member access dials the
// member ahead while the caller is checked. *resolver.Resolver implements
// it.
type ClusterHinter interface {
	ClusterHint(namespace, pod string) string
}

// ClusterKnower is a Resolver that knows Karmada's member clusters, so a
// server URL pinning one Karmada does not have (/clusters/<name>, a typo in
// a kubeconfig) is refused on every route, not only on those it rewrites.
// *resolver.Resolver implements it.
type ClusterKnower interface {
	ClusterKnown(name string) bool
}

// ServiceResolver maps a federated Service to the member cluster that
// serves it. *resolver.Resolver implements it.
type ServiceResolver interface {
	// ResolveService returns the member cluster of namespace/name. Errors
	// implementing apierrors.APIStatus are written to the client as is.
	ResolveService(ctx context.Context, namespace, name string) (cluster string, err error)
}

// PodRequest is a parsed request for a pod subresource the gateway rewrites.
type PodRequest struct {
	Namespace   string
	Name        string
	Subresource string // exec, attach, log or portforward
}

// Authorizer decides requests in authorize mode. *auth.Authorizer implements it.
type Authorizer interface {
	// AuthorizeResource authenticates the caller of r (bearer token by
	// TokenReview, or a verified client certificate), honours Impersonate-*
	// headers only when the caller may impersonate, and checks with a
	// SubjectAccessReview that the effective user may perform rr. Errors
	// implementing apierrors.APIStatus (400, 401, 403, 503) are written to
	// the client as is.
	AuthorizeResource(ctx context.Context, r *http.Request, rr identity.ResourceRequest) (identity.Caller, error)
	// Authenticate authenticates the caller of r without authorizing
	// anything; passthrough routes in authorize mode use it for callers who
	// presented a client certificate, which cannot be forwarded upstream.
	Authenticate(ctx context.Context, r *http.Request) (identity.Caller, error)
}
