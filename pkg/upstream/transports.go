package upstream

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
)

// Transports is karmada-apiserver as the proxy reaches it.
type Transports struct {
	// Base is the server URL; its path, if any, prefixes every request.
	Base *url.URL

	// Caller carries the client's own credentials: TLS trusts the upstream
	// CA and presents nothing. Gateway adds the gateway's identity. The
	// *Upgrade variants are HTTP/1.1 only, for requests carrying Upgrade.
	// They are fields so that tests can stand in for all four.
	Caller, CallerUpgrade   http.RoundTripper
	Gateway, GatewayUpgrade http.RoundTripper

	transports []*http.Transport
	// callerWarm and gatewayWarm dial ahead for the upgrade transports
	// (nil where they cannot apply; see warmDialer).
	callerWarm, gatewayWarm *warmDialer
}

// WarmUp has the upgrade transport of the identity dial a connection ahead
// for an upgrade request that just arrived, so that its dial and handshake
// run while the request is checked.
func (u *Transports) WarmUp(gatewayIdentity bool) {
	if gatewayIdentity {
		u.gatewayWarm.warmUp()
	} else {
		u.callerWarm.warmUp()
	}
}

// For is the transport for a request sent with the gateway's identity or
// the caller's, asking for an Upgrade or not.
func (u *Transports) For(gatewayIdentity, upgrade bool) http.RoundTripper {
	switch {
	case gatewayIdentity && upgrade:
		return u.GatewayUpgrade
	case gatewayIdentity:
		return u.Gateway
	case upgrade:
		return u.CallerUpgrade
	default:
		return u.Caller
	}
}

// ReadyAhead is how many connections dialed ahead for the identity's
// upgrade transport wait to be taken.
func (u *Transports) ReadyAhead(gatewayIdentity bool) int {
	if gatewayIdentity {
		return u.gatewayWarm.readyCount()
	}
	return u.callerWarm.readyCount()
}

// CloseIdleConnections closes the idle connections of all four.
func (u *Transports) CloseIdleConnections() {
	for _, t := range u.transports {
		t.CloseIdleConnections()
	}
	u.callerWarm.close()
	u.gatewayWarm.close()
}

// New builds the four transports to the server cfg names; cfg's
// credentials are the gateway's identity.
func New(cfg *rest.Config) (*Transports, error) {
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

	u := &Transports{Base: base}
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
	u.Caller = newTransport(callerTLS, true)
	u.CallerUpgrade, u.callerWarm = newUpgradeTransport(callerTLS)
	if u.Gateway, err = rest.HTTPWrappersForConfig(cfg, newTransport(gatewayTLS, true)); err != nil {
		return nil, fmt.Errorf("gateway transport: %w", err)
	}
	gatewayUpgrade, gatewayWarm := newUpgradeTransport(gatewayTLS)
	u.gatewayWarm = gatewayWarm
	if u.GatewayUpgrade, err = rest.HTTPWrappersForConfig(cfg, gatewayUpgrade); err != nil {
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
