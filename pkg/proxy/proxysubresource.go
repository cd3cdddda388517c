package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

var servicesResource = schema.GroupResource{Resource: "services"}

// ProxyRequest is a parsed pods/proxy or services/proxy request:
// /api/v1/namespaces/<Namespace>/<Resource>/<Segment>/proxy<Rest>.
type ProxyRequest struct {
	// Resource is "pods" or "services".
	Resource  string
	Namespace string
	// Segment is the {name} path segment as sent: name, name:port or
	// scheme:name:port. Forwarded unchanged.
	Segment string
	// Name is the pod or Service name inside Segment.
	Name string
	// Rest is the escaped remainder after .../proxy: "" or "/...",
	// forwarded byte for byte.
	Rest string
	// RestPath is Rest decoded (the matching url.URL Path part).
	RestPath string
}

// proxyKind is one of the two <resource>/{name}/proxy routes: what names it
// accepts and how its requests are counted. The two differ only there, so
// one parse and one handler serve both and cannot drift apart.
type proxyKind struct {
	resource string
	route    string
	// validName is what kube-apiserver validates the object's name as.
	validName func(string) bool
	nameRule  string // validName in words, for the 400 message
}

var (
	podProxy = proxyKind{
		resource: podsResource.Resource, route: metrics.RoutePodProxy,
		validName: func(s string) bool { return len(validation.IsDNS1123Subdomain(s)) == 0 },
		nameRule:  "a DNS-1123 subdomain pod name",
	}
	serviceProxy = proxyKind{
		resource: servicesResource.Resource, route: metrics.RouteServiceProxy,
		validName: func(s string) bool { return len(validation.IsDNS1035Label(s)) == 0 },
		nameRule:  "a DNS-1035 service name",
	}
)

// proxyPrefixSegs is the number of "/"-separated parts in
// /api/v1/namespaces/<ns>/<resource>/<seg>/proxy, leading "" included.
const proxyPrefixSegs = 8

// targets reports whether some plausible reading of u's path (see
// targetsPodSubresource) addresses <resource>/<x>/proxy; such a request
// must pass parse or is refused, so the gateway and karmada-apiserver never
// disagree about which object it is for.
func (k proxyKind) targets(u *url.URL) bool {
	return pathMayHold(u, k.resource, "proxy") && anyReading(u, func(s []string) bool {
		return len(s) >= 7 && s[0] == "api" && s[1] == "v1" && s[2] == "namespaces" &&
			s[4] == k.resource && s[6] == "proxy"
	})
}

// parse is the strict parse of the route. The escaped prefix
// /api/v1/namespaces/<ns>/<resource>/<seg>/proxy must carry no
// percent-encoding, a DNS-1123 label namespace and a segment of the forms
// kube-apiserver accepts (net.SplitSchemeNamePort) with a valid name, a
// valid port name or number and scheme http or https. The rest is kept as
// sent, but none of its segments may be or decode to a dot segment: a proxy
// that resolves them would address something else than the object.
func (k proxyKind) parse(u *url.URL) (ProxyRequest, bool) {
	if u.Opaque != "" {
		return ProxyRequest{}, false
	}
	esc := u.EscapedPath()
	segs := strings.SplitN(esc, "/", proxyPrefixSegs+1)
	if len(segs) < proxyPrefixSegs || segs[0] != "" || segs[1] != "api" || segs[2] != "v1" ||
		segs[3] != "namespaces" || segs[5] != k.resource || segs[7] != "proxy" {
		return ProxyRequest{}, false
	}
	prefix := strings.Join(segs[:proxyPrefixSegs], "/")
	if strings.IndexByte(prefix, '%') >= 0 || !strings.HasPrefix(u.Path, prefix) {
		return ProxyRequest{}, false
	}
	pr := ProxyRequest{Resource: k.resource, Namespace: segs[4], Segment: segs[6], Rest: esc[len(prefix):], RestPath: u.Path[len(prefix):]}
	if len(validation.IsDNS1123Label(pr.Namespace)) > 0 {
		return ProxyRequest{}, false
	}
	name, ok := parseProxySegment(pr.Segment)
	if !ok || !k.validName(name) {
		return ProxyRequest{}, false
	}
	pr.Name = name
	if pr.Rest != "" {
		for _, s := range strings.Split(pr.Rest[1:], "/") {
			d, err := url.PathUnescape(s)
			if err != nil || containsDotSegment(d) {
				return ProxyRequest{}, false
			}
		}
	}
	return pr, true
}

func containsDotSegment(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

// parseProxySegment returns the name of name, name:port or
// scheme:name:port (the port may be empty in the three-part form, as in
// https:dashboard:/proxy/).
func parseProxySegment(seg string) (string, bool) {
	parts := strings.Split(seg, ":")
	var name, port string
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		name, port = parts[0], parts[1]
		if port == "" {
			return "", false
		}
	case 3:
		if parts[0] != "http" && parts[0] != "https" {
			return "", false
		}
		name, port = parts[1], parts[2]
	default:
		return "", false
	}
	if port != "" && !validPort(port) {
		return "", false
	}
	return name, true
}

func validPort(port string) bool {
	if port[0] >= '0' && port[0] <= '9' {
		n, err := strconv.Atoi(port)
		return err == nil && strconv.Itoa(n) == port && len(validation.IsValidPortNum(n)) == 0
	}
	return len(validation.IsValidPortName(port)) == 0
}

func (k proxyKind) invalidPath(u *url.URL) error {
	return apierrors.NewBadRequest(fmt.Sprintf(
		"invalid %s proxy path %q: want /api/v1/namespaces/<namespace>/%s/<[scheme:]name[:port]>/proxy[/<path>] with a DNS-1123 label namespace, %s, a valid port, scheme http or https, no percent-encoding before the path and no dot segments",
		strings.TrimSuffix(k.resource, "s"), u.EscapedPath(), k.resource, k.nameRule))
}

// routeProxySubresource sends every request that plausibly addresses
// <resource>/<x>/proxy to serve (any method: the proxied application
// decides), or answers 400 when it is not in canonical form. It bypasses
// chi: the proxied path's rest is arbitrary and must reach the handler
// unparsed.
func routeProxySubresource(k proxyKind, serve http.HandlerFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !k.targets(r.URL) {
				next.ServeHTTP(w, r)
				return
			}
			if _, ok := k.parse(r.URL); !ok {
				refuse(w, r, k.invalidPath(r.URL))
				return
			}
			serve(w, r)
		})
	}
}

func (p *Proxy) serveServiceProxy(w http.ResponseWriter, r *http.Request) {
	p.serveProxySubresource(w, r, serviceProxy, p.services.ResolveService)
}

func (p *Proxy) servePodProxy(w http.ResponseWriter, r *http.Request) {
	p.serveProxySubresource(w, r, podProxy, p.resolvePod)
}

// serveProxySubresource rewrites pods/proxy or services/proxy to the
// cluster proxy of the member cluster resolve names for the object.
func (p *Proxy) serveProxySubresource(w http.ResponseWriter, r *http.Request, k proxyKind, resolve func(ctx context.Context, namespace, name string) (string, error)) {
	ctx := r.Context()
	state := stateFrom(ctx)
	state.route = k.route
	pr, ok := k.parse(r.URL)
	if !ok {
		refuse(w, r, k.invalidPath(r.URL))
		return
	}
	logger := klog.FromContext(ctx).WithValues("namespace", pr.Namespace, "resource", pr.Resource, "name", pr.Name)
	// Authorize (or, in passthrough mode, have karmada-apiserver judge the
	// caller) before resolving, so placement is not disclosed to callers
	// who may not use the object.
	if p.authMode == AuthAuthorize {
		rr, ok := identity.ProxySubresourceRequest(r.Method, pr.Namespace, pr.Resource, pr.Segment)
		if !ok {
			w.Header().Set("Allow", identity.ProxyMethods)
			apiresponse.WriteStatus(w, proxyMethodNotAllowed(pr, r.Method))
			return
		}
		if logger, ok = p.authorizeAsGateway(w, r, rr, logger); !ok {
			return
		}
	} else if !p.admittedByKarmada(w, r, pr.Resource, pr.Namespace, pr.Name) {
		return
	}
	cluster, err := resolve(ctx, pr.Namespace, pr.Name)
	if err != nil {
		logger.V(2).Info("Not resolved to a member cluster", "err", err)
		apiresponse.WriteStatus(w, err)
		return
	}
	prefix := "/api/v1/namespaces/" + pr.Namespace + "/" + pr.Resource + "/" + pr.Segment + "/proxy"
	if !p.routeToCluster(w, r, logger, cluster, strings.TrimSuffix(pr.Resource, "s")+" "+pr.Namespace+"/"+pr.Name, prefix, pr.Rest, pr.RestPath) {
		return
	}
	logger.V(4).Info("Rewriting proxy subresource to the member cluster", "cluster", cluster, "upstream", stateFrom(ctx).upstreamName)
	p.forward(w, r)
}

func proxyMethodNotAllowed(pr ProxyRequest, method string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
		Details: &metav1.StatusDetails{Name: pr.Name, Kind: pr.Resource},
		Message: fmt.Sprintf("method %q is not supported on %s/proxy in authorize mode (allowed: %s)", method, pr.Resource, identity.ProxyMethods),
	}}
}
