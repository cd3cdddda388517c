// Package memberaccess owns how the gateway reaches a member cluster's
// kube-apiserver directly (--member-access=direct), from its Cluster object
// alone, exactly as karmada-aggregated-apiserver's cluster proxy and
// karmada-search reach it (Karmada's pkg/util/proxy: ConnectCluster,
// GetTLSConfigForCluster, createProxyTransport):
//
//   - the URL is spec.apiEndpoint;
//   - TLS 1.3 at least, trusting the caBundle of the Secret spec.secretRef
//     names and nothing else (no CA when it has none; the system roots only
//     for a Cluster without secretRef), or no verification when
//     spec.insecureSkipTLSVerification says so;
//   - every connection goes through spec.proxyURL when it is set (http,
//     https or socks5), with spec.proxyHeader on the CONNECT, each value
//     split at commas as Karmada splits it; without it, through the proxy
//     HTTPS_PROXY names unless NO_PROXY excludes the member, as Karmada's
//     transport;
//   - requests carry the token of the Secret spec.impersonatorSecretRef
//     names, and act as the caller with Impersonate-User and one
//     Impersonate-Group per group but system:authenticated and
//     system:unauthenticated (Karmada's SkipGroup), no UID, no extra. A
//     Cluster without impersonatorSecretRef is refused, as Karmada refuses
//     it.
//
// Unlike the cluster proxy it keeps connections: a keep-alive pool per
// member speaking HTTP/2 for plain requests, HTTP/1.1 for upgrades (dialed
// ahead for a Push member), TLS sessions resumed (upstream.Member).
//
// What it reads it reads from informers: the gateway's Cluster informer, and
// one informer on one Secret, Options.Published, by name: the copy of each
// Cluster's impersonator token and CA that pkg/membertrust publishes. The
// gateway never reads the Secrets Clusters name, whose secretRef one holds a
// member ServiceAccount's cluster-admin token beside the CA: its RBAC names
// the published Secret alone. A rotated token applies to the next request.
// A new endpoint, CA, proxy or TLS setting rebuilds the member's pools and
// closes every connection of the old ones, open streams included: they were
// trusted on what no longer holds. A deleted Cluster, or one left unusable,
// closes its connections likewise.
//
// This package decides nothing about callers: the proxy authenticates and
// authorizes them before it asks for a Member, and says whom the request
// acts as (Member.SetIdentity). Where Karmada's cluster proxy would act as
// the gateway itself (authorize mode, and the gateway's own reads of member
// objects: Reader), a member acts as Self, the gateway's identity learned
// from karmada-apiserver.
package memberaccess

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/membertrust"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/upstream"
)

// DefaultSecretSyncTimeout is Options.SecretSyncTimeout's default.
const DefaultSecretSyncTimeout = 10 * time.Second

// Options configures Members.
type Options struct {
	// Clusters is the gateway's Cluster informer (pkg/karmada), holding
	// *karmada.Cluster.
	Clusters cache.SharedIndexInformer
	// Client reads Published, with the gateway's own identity.
	Client kubernetes.Interface
	// Published is the Secret pkg/membertrust publishes the members'
	// tokens and CAs in.
	Published types.NamespacedName
	// Resync is the published Secret's informer's resync period.
	Resync time.Duration
	// Dial makes the connections to members and their proxies; nil is a
	// net.Dialer with a 30 s timeout and keep-alives.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Metrics receives the member connection metrics; nil records into a
	// private registry.
	Metrics *metrics.Metrics
	// SecretSyncTimeout bounds how long a request waits for the Published
	// informer that has not listed it yet (just started, or refused); 0 is
	// DefaultSecretSyncTimeout.
	SecretSyncTimeout time.Duration
}

// Members reaches member clusters directly.
type Members struct {
	opts Options
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu        sync.Mutex
	published cache.SharedIndexInformer // nil before Start
	members   map[string]*entry
	// listErr is the Published informer's last list or watch error, which
	// a request waiting for it is told (a Secret the gateway may not read
	// is a 503 saying so, not a bare timeout).
	listErr error
}

// entry is one member's pools, built for one configuration (key).
type entry struct {
	key    string // what the pools were built on: endpoint, TLS, proxy
	member *upstream.Member
	conns  *connSet
	token  string
	// secrets are the proxy URL's credentials, scrubbed from errors.
	secrets []string
}

// New is Members reading opts.Clusters; Start starts its Secret informer.
func New(opts Options) (*Members, error) {
	if opts.Clusters == nil || opts.Client == nil || opts.Published.Namespace == "" || opts.Published.Name == "" {
		return nil, errors.New("memberaccess: a Cluster informer, a client and the published Secret's namespace and name are required")
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(prometheus.NewRegistry())
	}
	if opts.SecretSyncTimeout <= 0 {
		opts.SecretSyncTimeout = DefaultSecretSyncTimeout
	}
	m := &Members{opts: opts, dial: opts.Dial, members: map[string]*entry{}}
	if m.dial == nil {
		m.dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	_, err := opts.Clusters.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.clusterChanged(obj) },
		UpdateFunc: func(_, obj any) { m.clusterChanged(obj) },
		DeleteFunc: m.clusterDeleted,
	})
	if err != nil {
		return nil, fmt.Errorf("memberaccess: %w", err)
	}
	return m, nil
}

// Start reads the published Secret until ctx ends.
func (m *Members) Start(ctx context.Context) {
	name := m.opts.Published.Name
	factory := informers.NewSharedInformerFactoryWithOptions(m.opts.Client, m.opts.Resync, informers.WithNamespace(m.opts.Published.Namespace),
		// RBAC's resourceNames allow a list and watch of one name only.
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := factory.Core().V1().Secrets().Informer()
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		m.mu.Lock()
		m.listErr = err
		m.mu.Unlock()
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.publishedChanged() },
		UpdateFunc: func(_, _ any) { m.publishedChanged() },
		DeleteFunc: func(any) { m.publishedChanged() },
	})
	m.mu.Lock()
	m.published = inf
	m.mu.Unlock()
	go inf.Run(ctx.Done())
}

// Started reports whether Start ran: before it, no Secret is read and
// every Member is refused.
func (m *Members) Started() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.published != nil
}

// clusterChanged rebuilds a Cluster's member if it was built.
func (m *Members) clusterChanged(obj any) {
	if c, ok := obj.(*karmada.Cluster); ok {
		m.refresh(c.Name)
	}
}

func (m *Members) clusterDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	c, ok := obj.(*karmada.Cluster)
	if !ok {
		return
	}
	m.drop(c.Name, "cluster_deleted", "Cluster deleted: closing its direct connections")
}

// drop forgets cluster's member and closes its connections, open streams
// included, counting why.
func (m *Members) drop(cluster, reason, msg string, kv ...any) {
	m.mu.Lock()
	e := m.members[cluster]
	delete(m.members, cluster)
	m.mu.Unlock()
	if e != nil {
		klog.Background().Info(msg, append([]any{"cluster", cluster, "connections", e.conns.len()}, kv...)...)
		m.opts.Metrics.MemberTransportRebuildsTotal.WithLabelValues(cluster, reason).Inc()
		e.close()
	}
}

// publishedChanged rebuilds every member built whose token, CA or
// absence from the published Secret changed.
func (m *Members) publishedChanged() {
	m.mu.Lock()
	built := slices.Collect(maps.Keys(m.members))
	m.mu.Unlock()
	for _, cluster := range built {
		m.refresh(cluster)
	}
}

// refresh rebuilds cluster's member if one was built and what it was built
// on changed; a member not built yet is built at its first request. A
// change that leaves the Cluster unusable (no impersonatorSecretRef, no
// token or CA published, an endpoint or proxy URL that does not parse)
// closes what was built: it was trusted on what no longer holds.
func (m *Members) refresh(cluster string) {
	m.mu.Lock()
	_, built := m.members[cluster]
	m.mu.Unlock()
	if built {
		if _, err := m.member(context.Background(), cluster, false); err != nil {
			m.drop(cluster, "cluster_unusable", "Cluster no longer reachable directly: closing its direct connections", "err", err)
		}
	}
}

// Member is how a request reaches one member directly, now.
type Member struct {
	Cluster string
	// Base is the member's kube-apiserver, spec.apiEndpoint.
	Base    *url.URL
	pools   *upstream.Member
	token   string
	secrets []string
}

// Scrub is msg without the credentials of the member's proxy URL, which
// some dialers' errors quote: an error the gateway logs or answers with
// goes through it.
func (m *Member) Scrub(msg string) string {
	for _, s := range m.secrets {
		msg = strings.ReplaceAll(msg, s, "[redacted]")
	}
	return msg
}

// For is the transport for a request asking for an Upgrade or not.
func (m *Member) For(upgrade bool) http.RoundTripper { return m.pools.For(upgrade) }

// WarmUp dials an upgrade's connection ahead while the request is
// checked (a member without a proxy in between).
func (m *Member) WarmUp() { m.pools.WarmUp() }

// SetIdentity has h, a request to the member, act as user with the
// impersonator's token, as Karmada's cluster proxy sends it: every client
// identity header is removed first, then Authorization, Impersonate-User
// and one Impersonate-Group per group Karmada passes.
func (m *Member) SetIdentity(h http.Header, user identity.Caller) {
	identity.StripHeaders(h)
	h.Set("Authorization", "Bearer "+m.token)
	h.Set(authnv1.ImpersonateUserHeader, user.Name)
	for _, g := range user.Groups {
		if !SkipGroup(g) {
			h.Add(authnv1.ImpersonateGroupHeader, g)
		}
	}
}

// SkipGroup reports the groups Karmada's cluster proxy does not pass on
// (pkg/util/proxy SkipGroup): the member adds them itself.
func SkipGroup(group string) bool {
	return group == identity.GroupAuthenticated || group == identity.GroupUnauthenticated
}

var clusterResource = schema.GroupResource{Group: karmada.ClusterGVR.Group, Resource: karmada.ClusterGVR.Resource}

// Member returns how to reach cluster now, building (or rebuilding) its
// pools from its Cluster and Secrets. An error is a Status for the client:
// 404 for a Cluster that does not exist, 503 naming what is missing or
// wrong in it.
func (m *Members) Member(ctx context.Context, cluster string) (*Member, error) {
	return m.member(ctx, cluster, true)
}

// WarmUp has an upgrade's connection to cluster dialed ahead (Member.WarmUp)
// if its member can be had without waiting (the published Secret read), and
// reports whether it did: it runs before the request's caller is judged,
// which must not be held for it.
func (m *Members) WarmUp(cluster string) bool {
	mem, err := m.member(context.Background(), cluster, false)
	if err != nil {
		return false
	}
	mem.WarmUp()
	return true
}

// member is Member; without wait it does not wait for the published
// Secret's informer to sync (the informers' own handlers call it so).
func (m *Members) member(ctx context.Context, cluster string, wait bool) (*Member, error) {
	obj, exists, err := m.opts.Clusters.GetStore().GetByKey(cluster)
	if err != nil || !exists {
		return nil, apierrors.NewNotFound(clusterResource, cluster)
	}
	c, ok := obj.(*karmada.Cluster)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("cluster %q: unexpected object %T", cluster, obj))
	}
	if c.Spec.ImpersonatorSecretRef == nil {
		// Karmada's own words (ConnectCluster).
		return nil, unavailable(cluster, fmt.Sprintf("the impersonatorSecretRef of cluster %s is nil", cluster))
	}
	base, err := url.Parse(c.Spec.APIEndpoint)
	if c.Spec.APIEndpoint == "" || err != nil || base.Host == "" {
		return nil, unavailable(cluster, fmt.Sprintf("API endpoint of cluster %s is missing or not a URL", cluster))
	}
	published, err := m.publishedData(ctx, wait)
	if err != nil {
		return nil, unavailable(cluster, err.Error())
	}
	token := string(published[membertrust.TokenOf(cluster)])
	if token == "" {
		return nil, unavailable(cluster, fmt.Sprintf("no impersonator token of cluster %s is published in Secret %s "+
			"(gateway member-trust publishes the token of the Secret %s/%s, the Cluster's impersonatorSecretRef)",
			cluster, m.opts.Published, c.Spec.ImpersonatorSecretRef.Namespace, c.Spec.ImpersonatorSecretRef.Name))
	}
	// nil trusts the system roots, as Karmada does for a Cluster without
	// secretRef; with one, only its caBundle, none when it has none
	// (GetTLSConfigForCluster).
	var caBundle []byte
	if c.Spec.SecretRef != nil {
		v, ok := published[membertrust.CABundleOf(cluster)]
		if !ok {
			return nil, unavailable(cluster, fmt.Sprintf("no CA of cluster %s is published in Secret %s "+
				"(gateway member-trust publishes the caBundle of the Secret %s/%s, the Cluster's secretRef)",
				cluster, m.opts.Published, c.Spec.SecretRef.Namespace, c.Spec.SecretRef.Name))
		}
		caBundle = append([]byte{}, v...)
	}
	var proxy *url.URL
	if c.Spec.ProxyURL != "" {
		if proxy, err = url.Parse(c.Spec.ProxyURL); err != nil || proxy.Host == "" {
			// Never the URL itself: it may hold the proxy's credentials.
			return nil, unavailable(cluster, fmt.Sprintf("the proxyURL of cluster %s does not parse", cluster))
		}
	}
	key := configKey(c, caBundle)

	m.mu.Lock()
	old := m.members[cluster]
	e := old
	if e == nil || e.key != key {
		e = m.build(c, base, caBundle, proxy, key)
		m.members[cluster] = e
	}
	e.token = token
	out := &Member{Cluster: cluster, Base: e.member.Base, pools: e.member, token: token, secrets: e.secrets}
	m.mu.Unlock()
	if old != nil && old != e {
		klog.Background().Info("Cluster's endpoint, TLS or proxy changed: closing its direct connections built on the old ones",
			"cluster", cluster, "connections", old.conns.len())
		m.opts.Metrics.MemberTransportRebuildsTotal.WithLabelValues(cluster, "config_changed").Inc()
		old.close()
	}
	return out, nil
}

// build makes a member's pools; m.mu is held.
func (m *Members) build(c *karmada.Cluster, base *url.URL, caBundle []byte, proxy *url.URL, key string) *entry {
	tc := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// As Karmada: the Cluster says whether the member's certificate is
		// verified.
		InsecureSkipVerify: c.Spec.InsecureSkipTLSVerification, //nolint:gosec
	}
	if caBundle != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caBundle)
		tc.RootCAs = pool
	}
	conns := &connSet{conns: map[net.Conn]struct{}{}, open: m.opts.Metrics.MemberConnections.WithLabelValues(c.Name)}
	dials := m.opts.Metrics.MemberDialsTotal
	// Every series of the member starts at 0: one born at its first
	// failure or rebuild shows Prometheus no increase, and its alert no
	// rate.
	for _, result := range []string{"success", "error"} {
		dials.WithLabelValues(c.Name, result)
	}
	for _, reason := range []string{"config_changed", "cluster_deleted", "cluster_unusable"} {
		m.opts.Metrics.MemberTransportRebuildsTotal.WithLabelValues(c.Name, reason)
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := m.dial(ctx, network, addr)
		if err != nil {
			dials.WithLabelValues(c.Name, "error").Inc()
			return nil, err
		}
		dials.WithLabelValues(c.Name, "success").Inc()
		return conns.add(conn)
	}
	e := &entry{key: key, conns: conns, member: upstream.NewMember(upstream.MemberOptions{
		Base: base, TLS: tc, Proxy: proxy, ProxyHeader: ProxyHeader(c.Spec.ProxyHeader), Dial: dial,
		// Karmada's transport (utilnet.SetTransportDefaults) honours
		// HTTPS_PROXY and NO_PROXY, CIDRs included, without proxyURL.
		Environment: utilnet.NewProxierWithNoProxyCIDR(http.ProxyFromEnvironment),
	})}
	if proxy != nil && proxy.User != nil {
		e.secrets = append(e.secrets, proxy.User.String())
		if pw, ok := proxy.User.Password(); ok && pw != "" {
			e.secrets = append(e.secrets, pw)
		}
	}
	return e
}

func (e *entry) close() {
	e.member.CloseIdleConnections()
	e.conns.closeAll()
}

// ProxyHeader is spec.proxyHeader as Karmada sends it on the CONNECT
// (ParseProxyHeaders): each value split at commas into several.
func ProxyHeader(h map[string]string) http.Header {
	if len(h) == 0 {
		return nil
	}
	out := http.Header{}
	for k, v := range h {
		out[k] = strings.Split(v, ",")
	}
	return out
}

// configKey names what a member's pools are built on: its endpoint, TLS
// (CA, verification), proxy and CONNECT headers. Not the token, which is a
// header of each request.
func configKey(c *karmada.Cluster, caBundle []byte) string {
	h := sha256.New()
	field := func(s string) {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	field(c.Spec.APIEndpoint)
	field(c.Spec.ProxyURL)
	field(fmt.Sprint(c.Spec.InsecureSkipTLSVerification))
	field(fmt.Sprint(caBundle != nil))
	field(string(caBundle))
	keys := make([]string, 0, len(c.Spec.ProxyHeader))
	for k := range c.Spec.ProxyHeader {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field(k)
		field(c.Spec.ProxyHeader[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// publishedData is the published Secret's data, waiting (if wait) up to
// Options.SecretSyncTimeout, within ctx, for its informer to list it.
func (m *Members) publishedData(ctx context.Context, wait bool) (map[string][]byte, error) {
	m.mu.Lock()
	inf := m.published
	m.mu.Unlock()
	if inf == nil {
		return nil, errors.New("the published Secret is not read yet")
	}
	if !inf.HasSynced() {
		if !wait {
			return nil, errors.New("the published Secret is not read yet")
		}
		ctx, cancel := context.WithTimeout(ctx, m.opts.SecretSyncTimeout)
		defer cancel()
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			m.mu.Lock()
			lastErr := m.listErr
			m.mu.Unlock()
			if lastErr != nil {
				return nil, fmt.Errorf("Secret %s could not be read: %w", m.opts.Published, lastErr)
			}
			return nil, fmt.Errorf("Secret %s was not read within %s", m.opts.Published, m.opts.SecretSyncTimeout)
		}
	}
	obj, exists, err := inf.GetStore().GetByKey(m.opts.Published.String())
	if err != nil || !exists {
		return nil, fmt.Errorf("Secret %s, where gateway member-trust publishes the members' tokens and CAs, does not exist", m.opts.Published)
	}
	return obj.(*corev1.Secret).Data, nil
}

// unavailable is the 503 a request to cluster gets when the gateway cannot
// reach it from its Cluster object.
func unavailable(cluster, msg string) error {
	return apierrors.NewServiceUnavailable(fmt.Sprintf("cannot reach member cluster %q directly: %s", cluster, msg))
}

// connSet tracks a member's connections, so that they can all be closed
// when what they were trusted on changes.
type connSet struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// closed: the set was closed, and a connection dialed after (by a
	// request that took its Member before) is closed at once.
	closed bool
	open   prometheus.Gauge // the cluster's MemberConnections
}

// errRebuilt is a dial on pools closed since the request took them.
var errRebuilt = errors.New("the member's endpoint, TLS, proxy or credentials changed while the request was checked; try again")

func (s *connSet) add(c net.Conn) (net.Conn, error) {
	tc := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = c.Close()
		return nil, errRebuilt
	}
	s.conns[tc] = struct{}{}
	s.mu.Unlock()
	s.open.Inc()
	return tc, nil
}

func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	conns := slices.Collect(func(yield func(net.Conn) bool) {
		for c := range s.conns {
			if !yield(c) {
				return
			}
		}
	})
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
		c.set.open.Dec()
	})
	return c.Conn.Close()
}
