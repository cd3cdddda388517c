package proxy

import (
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

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

var servicesResource = schema.GroupResource{Resource: "services"}

// ServiceProxyRequest is a parsed services/proxy request.
type ServiceProxyRequest struct {
	Namespace string
	// Segment is the {name} path segment as sent: name, name:port or
	// scheme:name:port. Forwarded unchanged.
	Segment string
	// Name is the Service name inside Segment.
	Name string
	// Rest is the escaped remainder after .../proxy: "" or "/...",
	// forwarded byte for byte.
	Rest string
	// RestPath is Rest decoded (the matching url.URL Path part).
	RestPath string
}

// servicePrefixSegs is the number of "/"-separated parts in
// /api/v1/namespaces/<ns>/services/<seg>/proxy, leading "" included.
const servicePrefixSegs = 8

// targetsServiceProxy reports whether some plausible reading of u's path
// (see targetsPodSubresource) addresses services/<x>/proxy; such a request
// must pass parseServiceProxyRequest or is refused, so the gateway and
// karmada-apiserver never disagree about which Service it is for.
func targetsServiceProxy(u *url.URL) bool {
	return pathMayHold(u, "services", "proxy") && anyReading(u, func(s []string) bool {
		return len(s) >= 7 && s[0] == "api" && s[1] == "v1" && s[2] == "namespaces" &&
			s[4] == "services" && s[6] == "proxy"
	})
}

// parseServiceProxyRequest is the strict parse of the services/proxy route.
// The escaped prefix /api/v1/namespaces/<ns>/services/<seg>/proxy must carry
// no percent-encoding, a DNS-1123 label namespace and a segment of the forms
// kube-apiserver accepts (net.SplitSchemeNamePort) with a DNS-1035 Service
// name, a valid port name or number and scheme http or https. The rest is
// kept as sent, but none of its segments may be or decode to a dot segment:
// a proxy that resolves them would address something else than the Service.
func parseServiceProxyRequest(u *url.URL) (ServiceProxyRequest, bool) {
	if u.Opaque != "" {
		return ServiceProxyRequest{}, false
	}
	esc := u.EscapedPath()
	segs := strings.SplitN(esc, "/", servicePrefixSegs+1)
	if len(segs) < servicePrefixSegs || segs[0] != "" || segs[1] != "api" || segs[2] != "v1" ||
		segs[3] != "namespaces" || segs[5] != "services" || segs[7] != "proxy" {
		return ServiceProxyRequest{}, false
	}
	prefix := strings.Join(segs[:servicePrefixSegs], "/")
	if strings.IndexByte(prefix, '%') >= 0 || !strings.HasPrefix(u.Path, prefix) {
		return ServiceProxyRequest{}, false
	}
	sr := ServiceProxyRequest{Namespace: segs[4], Segment: segs[6], Rest: esc[len(prefix):], RestPath: u.Path[len(prefix):]}
	if len(validation.IsDNS1123Label(sr.Namespace)) > 0 {
		return ServiceProxyRequest{}, false
	}
	name, ok := parseServiceSegment(sr.Segment)
	if !ok {
		return ServiceProxyRequest{}, false
	}
	sr.Name = name
	if sr.Rest != "" {
		for _, s := range strings.Split(sr.Rest[1:], "/") {
			d, err := url.PathUnescape(s)
			if err != nil || containsDotSegment(d) {
				return ServiceProxyRequest{}, false
			}
		}
	}
	return sr, true
}

func containsDotSegment(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

// parseServiceSegment returns the Service name of name, name:port or
// scheme:name:port (the port may be empty in the three-part form, as in
// https:dashboard:/proxy/).
func parseServiceSegment(seg string) (string, bool) {
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
	if len(validation.IsDNS1035Label(name)) > 0 {
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

func invalidServiceProxyPath(u *url.URL) error {
	return apierrors.NewBadRequest(fmt.Sprintf(
		"invalid service proxy path %q: want /api/v1/namespaces/<namespace>/services/<[scheme:]name[:port]>/proxy[/<path>] with a DNS-1123 label namespace, a DNS-1035 service name, a valid port, scheme http or https, no percent-encoding before the path and no dot segments",
		u.EscapedPath()))
}

// serveServiceProxy rewrites services/proxy to the cluster proxy of the
// member cluster the Service resolves to.
func (p *Proxy) serveServiceProxy(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	state := stateFrom(ctx)
	state.route = metrics.RouteServiceProxy
	sr, ok := parseServiceProxyRequest(r.URL)
	if !ok {
		writeStatus(w, invalidServiceProxyPath(r.URL))
		return
	}
	logger := klog.FromContext(ctx).WithValues("namespace", sr.Namespace, "service", sr.Name)
	// Authorize before resolving, so placement is not disclosed to callers
	// who may not use the Service.
	if p.authMode == AuthAuthorize {
		rr, ok := sr.ResourceRequest(r.Method)
		if !ok {
			w.Header().Set("Allow", serviceProxyAllow)
			writeStatus(w, serviceProxyMethodNotAllowed(sr, r.Method))
			return
		}
		if logger, ok = p.authorizeAsGateway(w, r, rr, logger); !ok {
			return
		}
	}
	cluster, err := p.services.ResolveService(ctx, sr.Namespace, sr.Name)
	if err != nil {
		logger.V(2).Info("Service not resolved to a member cluster", "err", err)
		writeStatus(w, err)
		return
	}
	prefix := "/api/v1/namespaces/" + sr.Namespace + "/services/" + sr.Segment + "/proxy"
	if !routeToCluster(w, state, logger, cluster, "service "+sr.Namespace+"/"+sr.Name, prefix, sr.Rest, sr.RestPath) {
		return
	}
	logger.V(4).Info("Rewriting service proxy to cluster proxy", "cluster", cluster)
	p.forward(w, r)
}

// serviceProxyVerbs is the verb kube-apiserver's RequestInfoFactory derives
// from the method of a request that names its object, as services/{name}/proxy
// always does (so never list, watch or deletecollection). kube-apiserver also
// proxies OPTIONS, with an empty verb that only a "*" rule allows; the
// gateway's own member RBAC grants no such rule, so authorize mode refuses it.
var serviceProxyVerbs = map[string]string{
	http.MethodGet:    "get",
	http.MethodHead:   "get",
	http.MethodPost:   "create",
	http.MethodPut:    "update",
	http.MethodPatch:  "patch",
	http.MethodDelete: "delete",
}

// serviceProxyAllow lists the methods of serviceProxyVerbs for Allow.
const serviceProxyAllow = "GET, HEAD, POST, PUT, PATCH, DELETE"

// ResourceRequest is what kube-apiserver authorizes a method request on sr
// as: the subresource proxy of services, named by the whole path segment
// (RequestInfo takes it as it is, so RBAC resourceNames must say
// "https:web:443" to match that form, exactly as with kube-apiserver).
// It reports false for a method with no RBAC verb.
func (sr ServiceProxyRequest) ResourceRequest(method string) (ResourceRequest, bool) {
	verb, ok := serviceProxyVerbs[method]
	if !ok {
		return ResourceRequest{}, false
	}
	return ResourceRequest{
		Namespace: sr.Namespace, Verb: verb, Resource: servicesResource.Resource,
		Subresource: "proxy", Name: sr.Segment,
	}, true
}

func serviceProxyMethodNotAllowed(sr ServiceProxyRequest, method string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
		Details: &metav1.StatusDetails{Name: sr.Name, Kind: servicesResource.Resource},
		Message: fmt.Sprintf("method %q is not supported on services/proxy in authorize mode (allowed: %s)", method, serviceProxyAllow),
	}}
}
