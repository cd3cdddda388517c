package proxy

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// ForwardedFor is what the gateway does with the X-Forwarded-For a client
// sent, which karmada-apiserver's audit log takes as the request's first
// source IPs.
type ForwardedFor string

const (
	// ForwardedForAppend keeps the client's list and appends the peer's
	// address, as httputil.ReverseProxy's SetXForwarded does: right for a
	// gateway behind a load balancer or ingress that sets the header, and
	// the peer is always in the list, last before the gateway.
	ForwardedForAppend ForwardedFor = "append"
	// ForwardedForReplace drops what the client sent and sends the peer's
	// address alone: right where the gateway is the first hop, so that
	// whatever a client claims is never recorded.
	ForwardedForReplace ForwardedFor = "replace"
)

// forwardedHeaders are the headers through which a client says where it
// comes from; ForwardedForReplace drops them all.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", realIPHeader}

// realIPHeader is the address kube-apiserver's audit log takes as a source
// IP after X-Forwarded-For's (utilnet.SourceIPs). It never goes upstream:
// appending, it is folded into X-Forwarded-For where kube-apiserver would
// have read it, so both audit logs name the same addresses.
const realIPHeader = "X-Real-Ip"

// ParseForwardedFor reads a --forwarded-for value.
func ParseForwardedFor(s string) (ForwardedFor, error) {
	switch f := ForwardedFor(s); f {
	case ForwardedForAppend, ForwardedForReplace:
		return f, nil
	}
	return "", fmt.Errorf("%q is not append or replace", s)
}

// sourceIPs are the addresses the gateway sends upstream in
// X-Forwarded-For for r, and writes in its audit events' sourceIPs: the
// client's list, unless replaced (or listed in Connection, which asks a
// proxy to drop it), then the peer.
func (p *Proxy) sourceIPs(r *http.Request) []string {
	var ips []string
	connectionTokens := headerTokens(r.Header["Connection"])
	if p.forwardedFor != ForwardedForReplace && !containsFold(connectionTokens, "X-Forwarded-For") {
		for _, v := range r.Header.Values("X-Forwarded-For") {
			for _, ip := range strings.Split(v, ",") {
				if ip = strings.TrimSpace(ip); ip != "" {
					ips = append(ips, ip)
				}
			}
		}
	}
	// As kube-apiserver reads it: one address, taken when it parses and is
	// not in the list already.
	if real := strings.TrimSpace(r.Header.Get(realIPHeader)); p.forwardedFor != ForwardedForReplace &&
		!containsFold(connectionTokens, realIPHeader) && net.ParseIP(real) != nil && !slices.Contains(ips, real) {
		ips = append(ips, real)
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		ips = append(ips, host)
	}
	return ips
}

// setForwarded gives h, a request sent on r's behalf, r's forwarded
// headers as the gateway passes them on.
func (p *Proxy) setForwarded(r *http.Request, h http.Header) {
	connectionTokens := headerTokens(r.Header["Connection"])
	for _, key := range forwardedHeaders {
		delete(h, key)
		if key == realIPHeader {
			continue
		}
		if v, ok := r.Header[key]; ok && p.forwardedFor != ForwardedForReplace && !containsFold(connectionTokens, key) {
			h[key] = append([]string(nil), v...)
		}
	}
	if ips := p.sourceIPs(r); len(ips) > 0 {
		h.Set("X-Forwarded-For", strings.Join(ips, ", "))
	}
}
