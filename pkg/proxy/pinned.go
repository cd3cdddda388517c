package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/resolver"
)

// pinnedPrefix starts the path of a server URL that pins a member cluster:
// https://gateway/clusters/<name> is a plain server URL to kubectl,
// client-go and every executor, so a kubeconfig context per member reaches
// each copy of a workload Karmada runs in several clusters (a Duplicated
// pod), which the resolver alone would always send to the first.
const pinnedPrefix = "/clusters/"

// pinClusterPath serves a request under /clusters/<name>/ as the request
// below it, pinned to member cluster <name>: passthrough routes go to
// karmada-apiserver unchanged (without the prefix), and the rewritten
// ones resolve only to <name> (resolver.WithPinnedCluster), answering 404
// when Karmada did not place the object there. A path that some reading
// puts under /clusters/ but that is not exactly /clusters/<DNS-1123
// label>[/...] without percent-encoding in the prefix, or that nests a
// second prefix, is refused with 400: a proxy in between could read it
// otherwise than the gateway does. A cluster that is not one of Karmada's
// member clusters (when known is set) gets 404 on every route: passthrough
// requests under a mistyped prefix would otherwise work, and only streams
// fail.
func pinClusterPath(known func(string) bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return pinClusterPathTo(next, known) }
}

func pinClusterPathTo(next http.Handler, known func(string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !underPinnedPrefix(r.URL) {
			next.ServeHTTP(w, r)
			return
		}
		cluster, below, ok := splitPinnedPath(r.URL)
		if !ok || underPinnedPrefix(below) {
			refuse(w, r, apierrors.NewBadRequest(fmt.Sprintf(
				"invalid member cluster path %q: want /clusters/<cluster>/<Kubernetes API path> with a DNS-1123 label cluster name and no percent-encoding in the prefix",
				r.URL.EscapedPath())))
			return
		}
		if known != nil && !known(cluster) {
			refuse(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
				Details: &metav1.StatusDetails{Group: karmada.ClusterGVR.Group, Kind: karmada.ClusterGVR.Resource, Name: cluster},
				Message: fmt.Sprintf("member cluster %q not found: the server URL's path %s%s names a cluster Karmada does not have", cluster, pinnedPrefix, cluster),
			}})
			return
		}
		ctx := resolver.WithPinnedCluster(r.Context(), cluster)
		if state := stateFrom(ctx); state != nil {
			state.pinned = cluster
		}
		r = r.WithContext(ctx)
		r.URL = below
		next.ServeHTTP(w, r)
	})
}

// underPinnedPrefix reports whether some plausible reading of u's path
// starts with the clusters segment (see anyReading).
func underPinnedPrefix(u *url.URL) bool {
	return strings.Contains(u.Path, "clusters") && anyReading(u, func(segs []string) bool {
		return len(segs) > 0 && segs[0] == "clusters"
	})
}

// splitPinnedPath is the strict parse of a pinned path: the cluster, and a
// copy of u addressing what is below the prefix ("/" for the prefix
// alone).
func splitPinnedPath(u *url.URL) (cluster string, below *url.URL, ok bool) {
	esc := u.EscapedPath()
	if u.Opaque != "" || !strings.HasPrefix(esc, pinnedPrefix) {
		return "", nil, false
	}
	cluster, _, _ = strings.Cut(esc[len(pinnedPrefix):], "/")
	if strings.IndexByte(cluster, '%') >= 0 || len(validation.IsDNS1123Label(cluster)) > 0 {
		return "", nil, false
	}
	prefix := pinnedPrefix + cluster
	if !strings.HasPrefix(u.Path, prefix) { // the prefix is not escaped, so Path starts with it too
		return "", nil, false
	}
	below = new(url.URL)
	*below = *u
	below.Path = strings.TrimPrefix(u.Path, prefix)
	if below.RawPath != "" {
		below.RawPath = strings.TrimPrefix(u.RawPath, prefix)
	}
	if below.Path == "" {
		below.Path, below.RawPath = "/", ""
	}
	return cluster, below, true
}
