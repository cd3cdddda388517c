package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberaccess"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/resolver"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/upstream"
)

// Direct member access (Options.Members, --member-access=direct) sends what
// the gateway rewrites to the member's kube-apiserver itself, where the
// default sends it to Karmada's cluster proxy. The member must come to the
// same decisions either way, so the gateway does what karmada-apiserver
// and karmada-aggregated-apiserver do for a cluster proxy request:
//
//   - passthrough mode: authenticate the caller (TokenReview, with
//     Impersonate-* honoured as kube-apiserver honours it), authorize clusters/proxy on the Cluster for them with a
//     SubjectAccessReview (identity.ClusterProxyRequest), then impersonate
//     them on the member;
//   - authorize mode: the gateway authorized the caller already, and the
//     cluster proxy would impersonate the gateway, whose credentials it is
//     called with: the member sees the gateway's own identity
//     (Options.GatewayIdentity, learned from karmada-apiserver).
//
// The impersonation itself, and the connection, are pkg/memberaccess's.

// MemberAccess reaches member clusters' kube-apiservers directly.
// *memberaccess.Members implements it.
type MemberAccess interface {
	// Member is how to reach cluster now; an error is a Status for the
	// client (404 no such Cluster, 503 one that cannot be reached
	// directly).
	Member(ctx context.Context, cluster string) (*memberaccess.Member, error)
	// WarmUp dials an upgrade's connection to cluster ahead, if its
	// member can be built now without waiting for anything, and reports
	// whether it did.
	WarmUp(cluster string) bool
}

// memberName names a member's kube-apiserver in errors and logs.
func memberName(cluster string) string {
	return fmt.Sprintf("the kube-apiserver of member cluster %q", cluster)
}

// routeToMember points a rewritten request at path below cluster's
// kube-apiserver (rawPath, when set, is its escaped form), acting there as
// the cluster proxy would act for this caller. Otherwise it writes the
// Status and returns false.
func (p *Proxy) routeToMember(w http.ResponseWriter, r *http.Request, state *requestState, cluster, path, rawPath string) bool {
	ctx := r.Context()
	state.upstreamName = memberName(cluster)
	// The caller is judged first: one karmada-apiserver would refuse the
	// cluster's proxy learns nothing of how the gateway reaches it (a 503
	// naming a Secret), as through the cluster proxy.
	as, err := p.memberCaller(ctx, r, cluster)
	if err != nil {
		refuseUpgrade(w, r)
		apiresponse.WriteStatus(w, err)
		return false
	}
	m, err := p.members.Member(ctx, cluster)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Member cluster not reachable directly", "cluster", cluster, "err", err)
		refuseUpgrade(w, r)
		apiresponse.WriteStatus(w, err)
		return false
	}
	if state.upgrade && state.warmedMember != cluster {
		m.WarmUp()
	}
	state.member = m
	state.gatewayIdentity = true // never the caller's credentials: a member does not judge them
	state.editHeader = func(h http.Header) { m.SetIdentity(h, as) }
	state.path, state.rawPath = path, rawPath
	return true
}

// warmUpMember, in direct mode, has an upgrade's connection to the member
// that namespace/pod's label names dialed while the caller is checked and
// the pod resolved: nothing is sent on it before both are done, and a
// request resolved elsewhere leaves it for the next one (each member keeps
// a few dialed ahead at most).
func (p *Proxy) warmUpMember(ctx context.Context, namespace, pod string) {
	h, ok := p.resolver.(ClusterHinter)
	if p.members == nil || !ok {
		return
	}
	cluster, pinned := resolver.PinnedCluster(ctx)
	if !pinned {
		cluster = h.ClusterHint(namespace, pod)
	}
	if cluster == "" || len(validation.IsDNS1123Label(cluster)) > 0 {
		return
	}
	// Never waits: the caller is not authenticated yet.
	if p.members.WarmUp(cluster) {
		stateFrom(ctx).warmedMember = cluster
	}
}

// memberCaller is whom a request to cluster acts as on the member: in
// passthrough mode the caller, once karmada-apiserver says they may use
// cluster's proxy; in authorize mode the gateway itself.
func (p *Proxy) memberCaller(ctx context.Context, r *http.Request, cluster string) (identity.Caller, error) {
	if p.authMode == AuthAuthorize {
		// As karmada-apiserver judges the gateway's own call to the
		// cluster proxy.
		return p.gatewayIdentity(ctx, identity.ClusterProxyRequest(r.Method, cluster))
	}
	done := stateFrom(ctx).phases.TimeCheck("authorization")
	caller, err := p.authorizer.AuthorizeResource(ctx, r, identity.ClusterProxyRequest(r.Method, cluster))
	done()
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		klog.FromContext(ctx).V(2).Info("Caller may not use the cluster's proxy", "cluster", cluster, "err", err)
	case err != nil:
		// karmada-apiserver did not answer the review: nothing was decided.
		klog.FromContext(ctx).V(2).Info("Caller's use of the cluster's proxy could not be checked", "cluster", cluster, "err", err)
	}
	return caller, err
}

// getFromMember GETs path below cluster's kube-apiserver on r's behalf,
// asking for accept, acting as memberCaller says (authorize, when set,
// must allow it first). It is what getAccepting is for karmada-apiserver.
func (p *Proxy) getFromMember(ctx context.Context, r *http.Request, cluster, pathAndQuery, accept string, authorize func(context.Context) error) (*http.Response, error) {
	if authorize != nil {
		if err := authorize(ctx); err != nil {
			return nil, err
		}
	}
	m, edit, err := p.directMember(ctx, r, cluster)
	if err != nil {
		return nil, err
	}
	return p.getMemberAs(ctx, r, m, edit, pathAndQuery, accept)
}

// directMember is cluster's member for a request the gateway makes there
// on r's behalf, and the header edit that acts as memberCaller says.
func (p *Proxy) directMember(ctx context.Context, r *http.Request, cluster string) (*memberaccess.Member, func(http.Header), error) {
	m, err := p.members.Member(ctx, cluster)
	if err != nil {
		return nil, nil, err
	}
	as, err := p.memberCaller(ctx, r, cluster)
	if err != nil {
		return nil, nil, err
	}
	return m, func(h http.Header) { m.SetIdentity(h, as) }, nil
}

// getMemberAs GETs pathAndQuery below m with r's headers, edited by edit.
func (p *Proxy) getMemberAs(ctx context.Context, r *http.Request, m *memberaccess.Member, edit func(http.Header), pathAndQuery, accept string) (*http.Response, error) {
	return p.sendMemberAs(ctx, r, m, edit, http.MethodGet, pathAndQuery, accept, nil)
}

// sendMemberAs is getMemberAs for any method, with body.
func (p *Proxy) sendMemberAs(ctx context.Context, r *http.Request, m *memberaccess.Member, edit func(http.Header), method, pathAndQuery, accept string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, m.Base.String()+pathAndQuery, bodyReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = checkHeader(r, upstreamIdentity{editHeader: edit}, accept)
	p.setForwarded(r, req.Header)
	res, err := upstream.RoundTripWithin(m.For(false), req, p.headerTimeout, memberName(m.Cluster))
	if err != nil {
		return nil, errors.New(m.Scrub(err.Error()))
	}
	return res, nil
}

// memberPath is path below the cluster proxy of cluster, or below the
// member's own kube-apiserver in direct mode.
func (p *Proxy) memberPath(cluster, path string) string {
	if p.members != nil {
		return path
	}
	return karmada.ClusterProxyPath(cluster, path)
}
