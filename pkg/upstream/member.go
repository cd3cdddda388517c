package upstream

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Member is a member cluster's kube-apiserver as the gateway reaches it
// directly (--member-access=direct; pkg/memberaccess builds one per
// Cluster): a keep-alive pool that speaks HTTP/2 where the member does, for
// plain requests, and an HTTP/1.1 pool for upgrades, which dials a
// connection ahead when one is asked for (WarmUp) where no proxy stands in
// between. Both resume TLS sessions. Karmada's cluster proxy dials every
// request anew (DisableKeepAlives), a TCP and TLS handshake per exec and
// per log read; these do not.
type Member struct {
	// Base is the member's kube-apiserver (Cluster spec.apiEndpoint); its
	// path, if any, prefixes every request.
	Base           *url.URL
	Plain, Upgrade http.RoundTripper

	transports []*http.Transport
	warm       *warmDialer
}

// MemberOptions says how to reach a member.
type MemberOptions struct {
	Base *url.URL
	TLS  *tls.Config
	// Proxy, when set, is the proxy every connection goes through (Cluster
	// spec.proxyURL: http, https or socks5), ProxyHeader what the CONNECT
	// carries (spec.proxyHeader).
	Proxy       *url.URL
	ProxyHeader http.Header
	// Environment, used when Proxy is nil, picks a proxy per request as
	// Karmada's transport does for a Cluster without spec.proxyURL
	// (HTTPS_PROXY, NO_PROXY); nil dials the member directly.
	Environment func(*http.Request) (*url.URL, error)
	// Dial makes the connections, to the member or its proxy.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewMember builds a member's transports.
func NewMember(opts MemberOptions) *Member {
	base := *opts.Base
	base.Path = strings.TrimRight(base.Path, "/")
	base.RawPath = ""
	proxy := opts.Environment
	if opts.Proxy != nil {
		proxy = http.ProxyURL(opts.Proxy)
	}
	m := &Member{Base: &base}
	plain := newHTTPTransport(opts.TLS, proxy, opts.Dial, true)
	upgrade := newHTTPTransport(opts.TLS, proxy, opts.Dial, false)
	for _, t := range []*http.Transport{plain, upgrade} {
		t.ProxyConnectHeader = opts.ProxyHeader
	}
	if m.warm = newWarmDialer(&base, upgrade.TLSClientConfig, proxy, opts.Dial); m.warm != nil {
		upgrade.DialTLSContext = m.warm.DialTLSContext
	}
	m.Plain, m.Upgrade = plain, upgrade
	m.transports = []*http.Transport{plain, upgrade}
	return m
}

// For is the transport for a request asking for an Upgrade or not.
func (m *Member) For(upgrade bool) http.RoundTripper {
	if upgrade {
		return m.Upgrade
	}
	return m.Plain
}

// WarmUp dials an upgrade's connection ahead, while the request is
// checked.
func (m *Member) WarmUp() { m.warm.warmUp() }

// CloseIdleConnections closes the pools' idle connections and those dialed
// ahead.
func (m *Member) CloseIdleConnections() {
	for _, t := range m.transports {
		t.CloseIdleConnections()
	}
	m.warm.close()
}
