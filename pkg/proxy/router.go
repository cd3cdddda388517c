package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// podSubresources are the pod subresources rewritten to the cluster proxy.
var podSubresources = []string{"exec", "attach", "log", "portforward"}

func isPodSubresource(s string) bool {
	for _, sub := range podSubresources {
		if s == sub {
			return true
		}
	}
	return false
}

// routes are the handlers newRouter routes to; services, ephemeral and
// events are optional.
type routes struct {
	// rewrite serves the four pod stream subresources, pods the pods/proxy
	// ones, services services/proxy, ephemeral the writes of
	// pods/ephemeralcontainers, passthrough everything else.
	rewrite, passthrough, pods, services, ephemeral http.HandlerFunc
	// events claims the pod-scoped events lists and watches it merges.
	events func(http.Handler) http.Handler
	// clusterKnown, when set, tells pinned paths' member clusters from
	// names Karmada does not have.
	clusterKnown func(string) bool
}

// newRouter routes as routes says. pinClusterPath and guardPodRequests run
// first, so a request reaching chi that addresses a pod stream is already
// known to be canonical and below any /clusters/<member>/ prefix.
func newRouter(rt routes) http.Handler {
	mux := chi.NewRouter()
	mux.Use(pinClusterPath(rt.clusterKnown), guardPodRequests)
	mux.Use(routeProxySubresource(podProxy, rt.pods))
	if rt.services != nil {
		mux.Use(routeProxySubresource(serviceProxy, rt.services))
	}
	if rt.ephemeral != nil {
		mux.Use(routeEphemeralContainers(rt.ephemeral))
	}
	if rt.events != nil {
		mux.Use(rt.events)
	}
	for _, sub := range podSubresources {
		pattern := "/api/v1/namespaces/{namespace}/pods/{name}/" + sub
		mux.MethodFunc(http.MethodGet, pattern, rt.rewrite)
		mux.MethodFunc(http.MethodPost, pattern, rt.rewrite)
	}
	mux.MethodNotAllowed(methodNotAllowed)
	mux.NotFound(rt.passthrough)
	return mux
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "GET, POST")
	refuse(w, r, apierrors.NewMethodNotSupported(podsResource, r.Method))
}

// refuse answers a request the path guards will not send anywhere. It is
// counted under its own route: as passthrough it would hide among
// karmada-apiserver's own 400s, and as the route it tried it would look
// like a failed stream.
func refuse(w http.ResponseWriter, r *http.Request, err error) {
	if state := stateFrom(r.Context()); state != nil {
		state.route = metrics.RouteRefused
	}
	apiresponse.WriteStatus(w, err)
}

// guardPodRequests answers 400 for every request that targets a pod stream
// subresource in a form that is not canonical, and 405 for canonical ones
// with a method other than GET or POST, before anything is sent upstream.
func guardPodRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			refuse(w, r, apierrors.NewMethodNotSupported(podsResource, r.Method))
			return
		}
		if r.URL.Opaque != "" {
			refuse(w, r, apierrors.NewBadRequest("the request target must be an absolute path"))
			return
		}
		if !targetsPodSubresource(r.URL) {
			next.ServeHTTP(w, r)
			return
		}
		if _, ok := parsePodRequest(r.URL); !ok {
			refuse(w, r, apierrors.NewBadRequest(fmt.Sprintf(
				"invalid pod subresource path %q: want /api/v1/namespaces/<namespace>/pods/<name>/<exec|attach|log|portforward> with a DNS-1123 label namespace, a DNS-1123 subdomain name and no percent-encoding",
				r.URL.EscapedPath())))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			methodNotAllowed(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// parsePodRequest is the strict parse of a rewritten route. The escaped path
// must be exactly /api/v1/namespaces/<ns>/pods/<name>/<sub>: no
// percent-encoding anywhere, no empty or dot segments, no trailing slash, a
// DNS-1123 label namespace and a DNS-1123 subdomain pod name (what
// kube-apiserver validates pod names as; it excludes "." and "..").
func parsePodRequest(u *url.URL) (PodRequest, bool) {
	return parsePodPath(u, isPodSubresource)
}

// parsePodPath is parsePodRequest for the subresources subresource
// accepts.
func parsePodPath(u *url.URL, subresource func(string) bool) (PodRequest, bool) {
	if u.Opaque != "" {
		return PodRequest{}, false
	}
	p := u.EscapedPath()
	if p != u.Path || strings.IndexByte(p, '%') >= 0 {
		return PodRequest{}, false
	}
	segs := strings.Split(p, "/")
	if len(segs) != 8 || segs[0] != "" || segs[1] != "api" || segs[2] != "v1" ||
		segs[3] != "namespaces" || segs[5] != "pods" {
		return PodRequest{}, false
	}
	pr := PodRequest{Namespace: segs[4], Name: segs[6], Subresource: segs[7]}
	if !subresource(pr.Subresource) ||
		len(validation.IsDNS1123Label(pr.Namespace)) > 0 ||
		len(validation.IsDNS1123Subdomain(pr.Name)) > 0 {
		return PodRequest{}, false
	}
	return pr, true
}

// targetsPodSubresource reports whether some plausible reading of u's path
// addresses /api/v1/namespaces/*/pods/*/<sub>[/...] for one of the
// rewritten subresources: fully decoded or decoded per segment, with or without dot
// segments resolved, with empty segments kept or dropped. It is deliberately
// loose; a request it matches must pass parsePodRequest or is refused.
func targetsPodSubresource(u *url.URL) bool {
	return pathMayHold(u, "pods", podSubresources...) && anyReading(u, podSubresourceShape)
}

// pathMayHold is anyReading's cheap precondition: every segment of every
// reading is a substring of u.Path (or, where a segment does not decode,
// contains '%' and equals no word), so a path lacking word or all of
// oneOf cannot match, and most requests skip the readings' allocations.
func pathMayHold(u *url.URL, word string, oneOf ...string) bool {
	if !strings.Contains(u.Path, word) {
		return false
	}
	for _, w := range oneOf {
		if strings.Contains(u.Path, w) {
			return true
		}
	}
	return false
}

// anyReading reports whether shape holds for some plausible reading of u's
// path segments (leading and trailing empty segments dropped): fully
// decoded or decoded per segment, with or without dot segments resolved,
// with empty segments kept or dropped.
func anyReading(u *url.URL, shape func(segs []string) bool) bool {
	readings := [][]string{
		strings.Split(u.Path, "/"),
		unescapeSegments(strings.Split(u.EscapedPath(), "/")),
	}
	for _, segs := range readings {
		for _, resolveDots := range []bool{false, true} {
			for _, dropEmpty := range []bool{false, true} {
				if shape(normalizeSegments(segs, resolveDots, dropEmpty)) {
					return true
				}
			}
		}
	}
	return false
}

func unescapeSegments(segs []string) []string {
	out := make([]string, len(segs))
	for i, s := range segs {
		if d, err := url.PathUnescape(s); err == nil {
			out[i] = d
		} else {
			out[i] = s
		}
	}
	return out
}

func normalizeSegments(segs []string, resolveDots, dropEmpty bool) []string {
	for len(segs) > 0 && segs[0] == "" {
		segs = segs[1:]
	}
	for len(segs) > 0 && segs[len(segs)-1] == "" {
		segs = segs[:len(segs)-1]
	}
	out := make([]string, 0, len(segs))
	for _, s := range segs {
		switch {
		case dropEmpty && s == "":
		case resolveDots && s == ".":
		case resolveDots && s == "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	return out
}

// podSubresourceShape matches any number of segments after the
// subresource too: kube-apiserver would 404 them, but a proxy in between
// may resolve or drop them, so they are refused rather than passed on.
func podSubresourceShape(segs []string) bool {
	return len(segs) >= 7 && segs[0] == "api" && segs[1] == "v1" && segs[2] == "namespaces" &&
		segs[4] == "pods" && isPodSubresource(segs[6])
}
