package standin

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// impersonatorTokenKey is the key of the token in the impersonator Secret,
// as karmadactl join / karmada-agent write it.
const impersonatorTokenKey = "token"

// memberTransport reaches one member apiserver. It carries only the
// member's CA: the caller's identity comes from the impersonator token and
// Impersonate-* headers, never from the admin credentials in the rest.Config.
type memberTransport struct {
	endpoint *url.URL
	// transport serves plain requests; upgrade dials for upgrades. Both
	// speak HTTP/1.1 only: Go's HTTP/2 transport rejects Upgrade.
	transport http.RoundTripper
	upgrade   proxy.UpgradeRequestRoundTripper
}

// newMemberTransport builds the transports from the member's rest.Config,
// keeping its CA, server name and insecure flag but none of its credentials.
func newMemberTransport(cfg *rest.Config) (*memberTransport, error) {
	endpoint, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("member endpoint %q: %w", cfg.Host, err)
	}
	if endpoint.Scheme == "" {
		endpoint.Scheme = "https"
	}
	tlsOnly := &rest.Config{Host: cfg.Host, TLSClientConfig: rest.TLSClientConfig{
		Insecure:   cfg.Insecure,
		ServerName: cfg.ServerName,
		CAFile:     cfg.CAFile,
		CAData:     cfg.CAData,
	}}
	tlsConfig, err := rest.TLSConfigFor(tlsOnly)
	if err != nil {
		return nil, fmt.Errorf("member TLS config: %w", err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	plain := tlsConfig.Clone()
	plain.NextProtos = []string{"http/1.1"}
	up := tlsConfig.Clone()
	up.NextProtos = []string{"http/1.1"}
	upgradeRT := &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: up}
	return &memberTransport{
		endpoint:  endpoint,
		transport: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: plain},
		upgrade:   proxy.NewUpgradeRequestRoundTripper(upgradeRT, proxy.MirrorRequest),
	}, nil
}

// proxy forwards rest (the path after clusters/{name}/proxy) to the member,
// as karmada-aggregated-apiserver's cluster proxy does: the member sees the
// impersonator's token and the caller as Impersonate-User/Group/Extra.
func (h *aggregatedHandler) proxy(w http.ResponseWriter, r *http.Request, name, rest string, caller user.Info) {
	logger := klog.FromContext(r.Context()).WithValues("cluster", name, "user", caller.GetName())
	cluster, ok := h.store.get(name)
	if !ok {
		writeStatus(w, apierrors.NewNotFound(clusterGR, name))
		return
	}
	member, ok := h.members[name]
	if !ok {
		writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %q has no reachable endpoint", name)))
		return
	}
	ref := cluster.Spec.ImpersonatorSecretRef
	if ref == nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("the impersonatorSecretRef of cluster %s is nil", name)))
		return
	}
	// Read on each request: the env may rotate or create the Secret after
	// the stand-in starts, and a few GETs per stream cost nothing here.
	secret, err := h.karmada.CoreV1().Secrets(ref.Namespace).Get(r.Context(), ref.Name, metav1.GetOptions{})
	if err != nil {
		logger.Info("Impersonator secret unavailable", "secret", ref.Namespace+"/"+ref.Name, "err", err)
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("get impersonator secret %s/%s of cluster %s: %w", ref.Namespace, ref.Name, name, err)))
		return
	}
	token := string(secret.Data[impersonatorTokenKey])
	if token == "" {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("the impersonator secret %s/%s of cluster %s has no %q", ref.Namespace, ref.Name, name, impersonatorTokenKey)))
		return
	}

	location := *member.endpoint
	location.Path = path.Join("/", member.endpoint.Path, rest)
	if strings.HasSuffix(rest, "/") && !strings.HasSuffix(location.Path, "/") {
		location.Path += "/"
	}
	location.RawPath = ""
	// The upgrade path dials Location as is, so it must carry the query.
	location.RawQuery = r.URL.RawQuery

	req := r.Clone(r.Context())
	setImpersonation(req.Header, token, caller)

	handler := proxy.NewUpgradeAwareHandler(&location, member.transport, false, false, proxyResponder{})
	handler.UpgradeTransport = member.upgrade
	handler.UseLocationHost = true
	logger.V(4).Info("Proxying to member", "path", location.Path, "upgrade", req.Header.Get("Upgrade"))
	handler.ServeHTTP(w, req)
}

// setImpersonation replaces every identity header the request arrived with
// by the impersonator's token and the caller's identity.
func setImpersonation(h http.Header, token string, caller user.Info) {
	for k := range h {
		lk := strings.ToLower(k)
		if lk == "authorization" || strings.HasPrefix(lk, "impersonate-") || strings.HasPrefix(lk, "x-remote-") {
			delete(h, k)
		}
	}
	h.Set("Authorization", "Bearer "+token)
	h.Set("Impersonate-User", caller.GetName())
	for _, g := range caller.GetGroups() {
		// The member adds system:authenticated itself; Karmada skips it.
		if g == user.AllAuthenticated {
			continue
		}
		h.Add("Impersonate-Group", g)
	}
	for k, vs := range caller.GetExtra() {
		key := "Impersonate-Extra-" + url.PathEscape(k)
		for _, v := range vs {
			h.Add(key, v)
		}
	}
}

// proxyResponder reports proxy failures as Status objects.
type proxyResponder struct{}

func (proxyResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	klog.FromContext(r.Context()).Info("Cluster proxy error", "err", err)
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		writeStatus(w, err)
		return
	}
	writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("error trying to reach member: %v", err)))
}
