package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/upstream"
)

// upstreamIdentity is whose credentials a request the gateway sends on a
// client's behalf carries.
type upstreamIdentity struct {
	// gateway sends the gateway's own credentials; otherwise the client's
	// headers go as they came.
	gateway bool
	// editHeader, when set, edits the headers copied from the client.
	editHeader func(http.Header)
	// authorize, when set, must allow each request before it is sent.
	authorize func(context.Context) error
	// certVerified: the Authorizer accepted the client's certificate.
	certVerified bool
}

// passthroughIdentity is how servePassthrough sends r: the client's own
// headers, except in authorize mode for a caller who presented only a
// client certificate, which cannot be forwarded: the gateway authenticates
// it and impersonates the caller with its own identity.
func (p *Proxy) passthroughIdentity(ctx context.Context, r *http.Request) (upstreamIdentity, error) {
	if p.authMode != AuthAuthorize || identity.HasBearerToken(r) || !identity.HasClientCertificate(r) {
		return upstreamIdentity{}, nil
	}
	caller, err := p.authorizer.Authenticate(ctx, r)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Client certificate not authenticated", "err", err)
		return upstreamIdentity{}, err
	}
	return upstreamIdentity{
		gateway:      true,
		certVerified: true,
		editHeader: func(h http.Header) {
			identity.StripHeaders(h)
			identity.SetImpersonation(h, caller)
		},
	}, nil
}

// getAccepting sends a GET for pathAndQuery below the upstream on r's
// behalf, as as says, asking for accept. The client's headers are copied
// but for hop-by-hop ones and Accept-Encoding (the gateway reads the body
// itself).
func (p *Proxy) getAccepting(ctx context.Context, r *http.Request, as upstreamIdentity, pathAndQuery, accept string) (*http.Response, error) {
	return p.sendAccepting(ctx, r, as, http.MethodGet, pathAndQuery, accept, nil)
}

// sendAccepting is getAccepting for any method, with body (the client's
// Content-Type is kept).
func (p *Proxy) sendAccepting(ctx context.Context, r *http.Request, as upstreamIdentity, method, pathAndQuery, accept string, body []byte) (*http.Response, error) {
	if as.authorize != nil {
		if err := as.authorize(ctx); err != nil {
			return nil, err
		}
	}
	target := p.upstream.Base.String() + pathAndQuery
	req, err := http.NewRequestWithContext(ctx, method, target, bodyReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = checkHeader(r, as, accept)
	p.setForwarded(r, req.Header)
	res, err := upstream.RoundTripWithin(p.upstream.For(as.gateway, false), req, p.headerTimeout, upstream.NameOf(pathAndQuery))
	if err == nil && !as.gateway {
		p.credentialAccepted(r, res.StatusCode)
	}
	return res, err
}

// bodyReader is body as a request body; nil for none.
func bodyReader(body []byte) io.Reader {
	if body == nil {
		return nil
	}
	return bytes.NewReader(body)
}

// checkHeader: r's headers as a GET on its behalf sends them as as.
func checkHeader(r *http.Request, as upstreamIdentity, accept string) http.Header {
	h := r.Header.Clone()
	for _, name := range []string{"Connection", "Upgrade", "Te", "Trailer", "Transfer-Encoding", "Keep-Alive", "Proxy-Connection", "Accept-Encoding", "Content-Length"} {
		h.Del(name)
	}
	h.Set("Accept", accept)
	if as.editHeader != nil {
		as.editHeader(h)
	}
	return h
}
