package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// Issue #43's target for clients whose sockets leave TCP_NODELAY off: the
// gateway's time to 101 at most this ratio to the cluster proxy's, the same
// client on both.
const nagleCeiling = 1.15

// nagleTarget is one way to the shell pod's exec, for a raw client.
type nagleTarget struct {
	name string
	cfg  *rest.Config
	// clusterProxy is the reference; ceiling the path's target (0: none).
	clusterProxy bool
	ceiling      float64
}

// Nagle measures what a client whose socket leaves TCP_NODELAY off (Java
// and Node stacks may) pays to open a stream: time to 101 of a SPDY exec
// upgrade on a new connection (TCP, TLS, the request), by a raw client
// with Nagle's algorithm on and off, through the gateway in both modes,
// Karmada's cluster proxy and the member, interleaved.
func (r *Runner) Nagle(ctx context.Context) (*Table, error) {
	p, err := r.rewrittenPaths(env.UserExecOnly)
	if err != nil {
		return nil, err
	}
	var gws extraGateways
	defer gws.stop()
	authorize, err := gws.start(ctx, r.Env, "gateway-authorize-nagle", "--auth-mode=authorize")
	if err != nil {
		return nil, err
	}
	targets := []nagleTarget{
		{name: "cluster proxy", cfg: p.direct, clusterProxy: true},
		{name: "gateway passthrough", cfg: p.gateway, ceiling: nagleCeiling},
		{name: "gateway authorize", cfg: unlimited(authorize.Config(env.UserExecOnly)), ceiling: nagleCeiling},
		{name: "member", cfg: unlimited(r.Env.MemberConfig(r.member))},
	}
	t := &Table{
		Title:   "Clients without TCP_NODELAY: time to 101 of a SPDY exec on a new connection",
		Columns: []string{"client", "path", "p50", "p90", "p50 ratio", "p90 ratio", "target", "verdict"},
		Note: fmt.Sprintf("%d upgrades per path and client, in %d interleaved rounds, after one warm-up each; a raw client dials TCP (Nagle's algorithm on "+
			"for `TCP_NODELAY off`, Go's default off for `TCP_NODELAY on`), does a full TLS handshake offering resumption with an empty session cache (as JSSE, OkHttp and Node do: servers send it tickets), writes the exec upgrade "+
			"(`POST`, SPDY/3.1, v4.channel.k8s.io) and reads the response headers; timed from the dial to the `101`. Ratios are to the cluster proxy with "+
			"the same client in the same run. The member's kube-apiserver as user admin.", r.Sizes.StreamSamples, r.Sizes.Rounds) + r.proxyNote("Cluster proxy"),
	}
	for _, nodelay := range []bool{false, true} {
		client := map[bool]string{false: "TCP_NODELAY off", true: "TCP_NODELAY on"}[nodelay]
		samples := make([][]time.Duration, len(targets))
		var mu sync.Mutex
		var firstErr error
		fns := make([]func() Load, len(targets))
		for i, tg := range targets {
			u, err := podURL(tg.cfg, shellPod, "exec", &corev1.PodExecOptions{Container: containerName, Command: []string{"true"}, Stdout: true})
			if err != nil {
				return nil, err
			}
			if _, err := upgradeTime(ctx, tg.cfg, u, nodelay); err != nil { // warm-up
				return nil, fmt.Errorf("%s, %s: %w", tg.name, client, err)
			}
			per := max(1, r.Sizes.StreamSamples/r.Sizes.Rounds)
			fns[i] = func() Load {
				for range per {
					d, err := upgradeTime(ctx, tg.cfg, u, nodelay)
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = fmt.Errorf("%s, %s: %w", tg.name, client, err)
					}
					if err == nil {
						samples[i] = append(samples[i], d)
					}
					mu.Unlock()
				}
				return Load{}
			}
		}
		r.logf("nagle: %s", client)
		InterleaveAll(r.Sizes.Rounds, fns...)
		if firstErr != nil {
			return nil, firstErr
		}
		ref := 0
		ref50, ref90 := Percentile(samples[ref], 50), Percentile(samples[ref], 90)
		for i, tg := range targets {
			p50, p90 := Percentile(samples[i], 50), Percentile(samples[i], 90)
			r50 := Ratio(float64(p50), float64(ref50))
			target, verdict := "", NoTarget
			if tg.ceiling > 0 && !nodelay {
				target, verdict = fmt.Sprintf("≤ %.2f×", tg.ceiling), AtMost(r50, tg.ceiling)
			}
			t.Add(client, tg.name, FormatDuration(p50), FormatDuration(p90), FormatRatio(r50), FormatRatio(Ratio(float64(p90), float64(ref90))), target, string(verdict))
		}
	}
	return t, nil
}

// upgradeTime dials u's host anew with TCP_NODELAY as nodelay says, does
// the TLS handshake as cfg trusts and authenticates, sends a SPDY exec
// upgrade for u and returns the time from the dial to the 101's headers.
func upgradeTime(ctx context.Context, cfg *rest.Config, u *url.URL, nodelay bool) (time.Duration, error) {
	tlsCfg, err := rawTLS(cfg, u.Hostname())
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return 0, err
	}
	defer raw.Close()
	if tcp, ok := raw.(*net.TCPConn); ok {
		if err := tcp.SetNoDelay(nodelay); err != nil {
			return 0, err
		}
	}
	if d, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(d)
	}
	conn := tls.Client(raw, tlsCfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return 0, err
	}
	var req strings.Builder
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n", u.RequestURI(), u.Host)
	if cfg.BearerToken != "" {
		fmt.Fprintf(&req, "Authorization: Bearer %s\r\n", cfg.BearerToken)
	}
	req.WriteString("\r\n")
	if _, err := conn.Write([]byte(req.String())); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	if res.StatusCode != http.StatusSwitchingProtocols {
		return 0, fmt.Errorf("answered %s, want 101", res.Status)
	}
	return took, nil
}

// rawTLS is cfg's TLS for a raw client: its CA, its client certificate if
// any, and an empty session cache of its own. With a cache the client
// offers resumption (psk_dhe_ke), as JSSE, OkHttp and Node's OpenSSL do, so
// a server sends it session tickets; empty, every connection is a full
// handshake, as a new client process makes. Go clients without a cache
// (client-go's) are offered no tickets, and their Nagle wait does not
// depend on the server (it shows on every path alike).
func rawTLS(cfg *rest.Config, serverName string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CAData) {
		return nil, fmt.Errorf("no CA in the config for %s", cfg.Host)
	}
	c := &tls.Config{
		RootCAs: pool, ServerName: serverName, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
		ClientSessionCache: tls.NewLRUClientSessionCache(1),
	}
	if len(cfg.CertData) > 0 {
		cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
