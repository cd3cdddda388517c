package proxy

import (
	"context"
	"net/http"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// EventsMerger answers the events requests it claims in place of
// karmada-apiserver alone. *memberevents.Merger implements it; it reaches
// upstream only through the Proxy it was built with (PassThrough, Get,
// GetMember, HoldStream, Fail, CountAs), so routing, identities, stream
// limits and errors stay the proxy's.
type EventsMerger interface {
	// Claims reports whether the merger answers r.
	Claims(r *http.Request) bool
	// ServeHTTP answers a request Claims accepted.
	http.Handler
}

// routeClaimed sends the requests claims accepts to serve and everything
// else on.
func routeClaimed(claims func(*http.Request) bool, serve http.HandlerFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if claims(r) {
				serve(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// serveEvents hands a request the EventsMerger claimed to it, once the
// identity passthrough would send it with is known: the merger's reads
// from karmada-apiserver carry that identity (Get).
func (p *Proxy) serveEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := p.passthroughIdentity(ctx, r)
	if err != nil {
		apiresponse.WriteStatus(w, err)
		return
	}
	state := stateFrom(ctx)
	state.certVerified = id.certVerified
	state.caller = id
	p.events.ServeHTTP(w, r)
}

// The methods below are what a handler the proxy hands a request to
// (EventsMerger) may do for it. r must be that request: they find what the
// proxy decided about it in its context.

// PassThrough sends r to karmada-apiserver unchanged, as the proxy does
// without the handler.
func (p *Proxy) PassThrough(w http.ResponseWriter, r *http.Request) {
	p.forwardAs(w, r, stateFrom(r.Context()).caller)
}

// Get GETs pathAndQuery below karmada-apiserver on r's behalf, asking for
// accept, with the identity PassThrough sends r with.
func (p *Proxy) Get(ctx context.Context, r *http.Request, pathAndQuery, accept string) (*http.Response, error) {
	return p.getAccepting(ctx, r, stateFrom(r.Context()).caller, pathAndQuery, accept)
}

// GetMember GETs pathAndQuery below cluster's kube-apiserver, as the proxy
// reaches it (its cluster proxy, or directly), for a read the caller's own
// RBAC in karmada-apiserver may not reach: in passthrough mode as the
// caller, so the member's RBAC for the caller applies (through the cluster
// proxy its headers go as they came); in authorize mode as the gateway, each
// read allowed first by the Authorizer as rr, so callers keep the RBAC they
// have in karmada-apiserver and need nothing in members.
func (p *Proxy) GetMember(ctx context.Context, r *http.Request, rr identity.ResourceRequest, cluster, pathAndQuery, accept string) (*http.Response, error) {
	var authorize func(context.Context) error
	if p.authMode == AuthAuthorize {
		authorize = func(ctx context.Context) error {
			_, err := p.authorizer.AuthorizeResource(ctx, r, rr)
			return err
		}
	}
	if p.members != nil {
		return p.getFromMember(ctx, r, cluster, pathAndQuery, accept, authorize)
	}
	as := upstreamIdentity{}
	if authorize != nil {
		as = upstreamIdentity{gateway: true, editHeader: identity.StripHeaders, authorize: authorize}
	}
	return p.getAccepting(ctx, r, as, karmada.ClusterProxyPath(cluster, pathAndQuery), accept)
}

// HoldStream takes r's stream slot; over a limit it answers 429 and
// reports false.
func (p *Proxy) HoldStream(w http.ResponseWriter, r *http.Request) bool {
	return p.holdStream(w, r, stateFrom(r.Context()))
}

// Fail answers an upstream failure for r as the proxy answers its own.
func (p *Proxy) Fail(w http.ResponseWriter, r *http.Request, err error) {
	p.handleError(w, r, err)
}

// CountAs records r in the request metrics under route.
func (p *Proxy) CountAs(r *http.Request, route string) {
	stateFrom(r.Context()).route = route
}
