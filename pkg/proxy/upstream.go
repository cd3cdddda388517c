package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// upstream is karmada-apiserver as the proxy reaches it.
type upstream struct {
	// base is the server URL; its path, if any, prefixes every request.
	base *url.URL

	// caller carries the client's own credentials: TLS trusts the upstream CA
	// and presents nothing. gateway adds the gateway's identity. The
	// *Upgrade variants are HTTP/1.1 only, for requests carrying Upgrade.
	caller, callerUpgrade   http.RoundTripper
	gateway, gatewayUpgrade http.RoundTripper

	transports []*http.Transport
	// callerWarm and gatewayWarm dial ahead for the upgrade transports
	// (nil where they cannot apply; see warmDialer).
	callerWarm, gatewayWarm *warmDialer
}

// warmUp has the upgrade transport of the identity dial a connection ahead
// for an upgrade request that just arrived.
func (u *upstream) warmUp(gatewayIdentity bool) {
	if gatewayIdentity {
		u.gatewayWarm.warmUp()
	} else {
		u.callerWarm.warmUp()
	}
}

func (u *upstream) transport(gatewayIdentity, upgrade bool) http.RoundTripper {
	switch {
	case gatewayIdentity && upgrade:
		return u.gatewayUpgrade
	case gatewayIdentity:
		return u.gateway
	case upgrade:
		return u.callerUpgrade
	default:
		return u.caller
	}
}

func (u *upstream) closeIdleConnections() {
	for _, t := range u.transports {
		t.CloseIdleConnections()
	}
	u.callerWarm.close()
	u.gatewayWarm.close()
}

func newUpstream(cfg *rest.Config) (*upstream, error) {
	if cfg == nil {
		return nil, errors.New("upstream config is required")
	}
	if cfg.Transport != nil {
		// The proxy needs four transports with distinct TLS and HTTP/2 settings;
		// a ready-made transport cannot provide them.
		return nil, errors.New("upstream config with a custom Transport is not supported")
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("upstream server URL: %w", err)
	}
	base.Path = strings.TrimRight(base.Path, "/")
	base.RawPath = ""

	callerTLS, err := rest.TLSConfigFor(withoutCredentials(cfg))
	if err != nil {
		return nil, fmt.Errorf("caller TLS config: %w", err)
	}
	gatewayTLS, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("gateway TLS config: %w", err)
	}

	proxy := cfg.Proxy
	if proxy == nil {
		proxy = utilnet.NewProxierWithNoProxyCIDR(http.ProxyFromEnvironment)
	}
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}

	u := &upstream{base: base}
	newTransport := func(tlsConfig *tls.Config, allowHTTP2 bool) *http.Transport {
		t := newHTTPTransport(tlsConfig, proxy, dial, allowHTTP2)
		u.transports = append(u.transports, t)
		return t
	}
	// Upgrade transports take connections dialed ahead (warmDialer).
	newUpgradeTransport := func(tlsConfig *tls.Config) (*http.Transport, *warmDialer) {
		t := newTransport(tlsConfig, false)
		w := newWarmDialer(base, t.TLSClientConfig, proxy, dial)
		if w != nil {
			t.DialTLSContext = w.DialTLSContext
		}
		return t, w
	}
	u.caller = newTransport(callerTLS, true)
	u.callerUpgrade, u.callerWarm = newUpgradeTransport(callerTLS)
	if u.gateway, err = rest.HTTPWrappersForConfig(cfg, newTransport(gatewayTLS, true)); err != nil {
		return nil, fmt.Errorf("gateway transport: %w", err)
	}
	gatewayUpgrade, gatewayWarm := newUpgradeTransport(gatewayTLS)
	u.gatewayWarm = gatewayWarm
	if u.gatewayUpgrade, err = rest.HTTPWrappersForConfig(cfg, gatewayUpgrade); err != nil {
		return nil, fmt.Errorf("gateway upgrade transport: %w", err)
	}
	return u, nil
}

// withoutCredentials copies cfg keeping only how to reach and trust the
// server: no bearer token, basic auth, client certificate, exec or auth
// provider, impersonation or transport wrappers.
func withoutCredentials(cfg *rest.Config) *rest.Config {
	anon := rest.AnonymousClientConfig(cfg)
	anon.Transport = nil
	anon.WrapTransport = nil
	return anon
}

// newHTTPTransport builds a transport like client-go's, with its own copy of
// tlsConfig. Without allowHTTP2 it only speaks HTTP/1.1: ALPN offers
// http/1.1 alone and no TLSNextProto upgrade exists, as Upgrade requires.
// Compression is left to the client so the upstream sees its Accept-Encoding
// and the client gets the upstream's bytes.
func newHTTPTransport(tlsConfig *tls.Config, proxy func(*http.Request) (*url.URL, error), dial func(ctx context.Context, network, addr string) (net.Conn, error), allowHTTP2 bool) *http.Transport {
	var tc *tls.Config
	if tlsConfig != nil {
		tc = tlsConfig.Clone()
		if tc.ClientSessionCache == nil {
			// Resumed handshakes skip the certificate exchange: new
			// connections, and every upgrade needs one, cost less (#27). A
			// resumed session is the identity of its first handshake, which
			// is this transport's own (none, or the gateway's); Go's server
			// does not resume past that certificate's expiry.
			tc.ClientSessionCache = tls.NewLRUClientSessionCache(tlsSessionCacheSize)
		}
	}
	t := &http.Transport{
		Proxy:               proxy,
		DialContext:         dial,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	if allowHTTP2 {
		t.ForceAttemptHTTP2 = true
		// Health-check idle HTTP/2 connections as client-go does, so a dead
		// upstream connection does not hang every request multiplexed on it.
		t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
		return t
	}
	if tc == nil {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tc.NextProtos = []string{"http/1.1"}
	t.TLSClientConfig = tc
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	return t
}

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
	if as.authorize != nil {
		if err := as.authorize(ctx); err != nil {
			return nil, err
		}
	}
	target := p.upstream.base.String() + pathAndQuery
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	for _, h := range []string{"Connection", "Upgrade", "Te", "Trailer", "Transfer-Encoding", "Keep-Alive", "Proxy-Connection", "Accept-Encoding", "Content-Length"} {
		req.Header.Del(h)
	}
	req.Header.Set("Accept", accept)
	if as.editHeader != nil {
		as.editHeader(req.Header)
	}
	return roundTripWithin(p.upstream.transport(as.gateway, false), req, p.headerTimeout, upstreamNameOf(pathAndQuery))
}
