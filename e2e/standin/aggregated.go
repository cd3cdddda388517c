package standin

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

const (
	clusterGroup   = "cluster.karmada.io"
	clusterVersion = "v1alpha1"
	clustersPrefix = "/apis/" + clusterGroup + "/" + clusterVersion + "/clusters"
)

var clusterGR = schema.GroupResource{Group: clusterGroup, Resource: "clusters"}

// aggregatedOptions configures newAggregatedHandler.
type aggregatedOptions struct {
	Store *clusterStore
	// Karmada reads the impersonator Secrets.
	Karmada kubernetes.Interface
	// Members are the transports to each member, by cluster name.
	Members map[string]*memberTransport
	// RequestHeaderCAs verify the aggregator's front-proxy client
	// certificate; RequestHeaderAllowedNames, when set, restrict its CN.
	RequestHeaderCAs          *x509.CertPool
	RequestHeaderAllowedNames []string
}

// aggregatedHandler is the HTTP side of the stand-in's
// karmada-aggregated-apiserver.
type aggregatedHandler struct {
	store   *clusterStore
	karmada kubernetes.Interface
	members map[string]*memberTransport
	authn   authenticator.Request
}

func newAggregatedHandler(opts aggregatedOptions) *aggregatedHandler {
	roots := opts.RequestHeaderCAs
	verify := func() (x509.VerifyOptions, bool) {
		if roots == nil {
			// No front-proxy CA: nobody can authenticate, as in a generic
			// apiserver without --requestheader-client-ca-file.
			return x509.VerifyOptions{}, false
		}
		o := x509request.DefaultVerifyOptions()
		o.Roots = roots
		return o, true
	}
	// The same authenticator generic apiservers (and so
	// karmada-aggregated-apiserver) build from --requestheader-* flags.
	authn := headerrequest.NewDynamicVerifyOptionsSecure(
		verify,
		headerrequest.StaticStringSlice(opts.RequestHeaderAllowedNames),
		headerrequest.StaticStringSlice{"X-Remote-User"},
		headerrequest.StaticStringSlice{"X-Remote-Uid"},
		headerrequest.StaticStringSlice{"X-Remote-Group"},
		headerrequest.StaticStringSlice{"X-Remote-Extra-"},
	)
	return &aggregatedHandler{store: opts.Store, karmada: opts.Karmada, members: opts.Members, authn: authn}
}

func (h *aggregatedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/livez":
		// Health is public, as system:public-info-viewer makes it on a
		// generic apiserver.
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok"))
		return
	}
	resp, ok, err := h.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		logger := klog.FromContext(r.Context())
		logger.V(2).Info("Rejected request without a valid front-proxy identity", "path", r.URL.Path, "err", err)
		writeStatus(w, apierrors.NewUnauthorized("Unauthorized"))
		return
	}
	h.serveAuthenticated(w, r, resp.User)
}

func (h *aggregatedHandler) serveAuthenticated(w http.ResponseWriter, r *http.Request, caller user.Info) {
	path := r.URL.Path
	switch {
	case path == "/apis" || path == "/apis/":
		writeJSON(w, http.StatusOK, apiGroupList())
	case path == "/apis/"+clusterGroup || path == "/apis/"+clusterGroup+"/":
		writeJSON(w, http.StatusOK, apiGroup())
	case path == "/apis/"+clusterGroup+"/"+clusterVersion || path == "/apis/"+clusterGroup+"/"+clusterVersion+"/":
		writeJSON(w, http.StatusOK, apiResourceList())
	case path == clustersPrefix:
		if r.Method != http.MethodGet {
			writeStatus(w, apierrors.NewMethodNotSupported(clusterGR, strings.ToLower(r.Method)))
			return
		}
		if isWatch(r) {
			h.watchClusters(w, r)
			return
		}
		h.listClusters(w, r)
	case strings.HasPrefix(path, clustersPrefix+"/"):
		rest := strings.TrimPrefix(path, clustersPrefix+"/")
		name, sub, _ := strings.Cut(rest, "/")
		switch {
		case sub == "proxy" || strings.HasPrefix(sub, "proxy/"):
			h.proxy(w, r, name, strings.TrimPrefix(sub, "proxy"), caller)
		case sub == "" || sub == "status":
			if r.Method != http.MethodGet {
				writeStatus(w, apierrors.NewMethodNotSupported(clusterGR, strings.ToLower(r.Method)))
				return
			}
			c, ok := h.store.get(name)
			if !ok {
				writeStatus(w, apierrors.NewNotFound(clusterGR, name))
				return
			}
			writeJSON(w, http.StatusOK, c)
		default:
			writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: clusterGroup, Resource: "clusters/" + sub}, name))
		}
	default:
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, path))
	}
}

func isWatch(r *http.Request) bool {
	v := r.URL.Query().Get("watch")
	return v == "true" || v == "1"
}

// clusterSelector applies labelSelector and the metadata.name field
// selector (the only field kubectl and single-object informers use).
type clusterSelector struct {
	labels labels.Selector
	fields fields.Selector
}

func parseSelector(r *http.Request) (clusterSelector, error) {
	q := r.URL.Query()
	ls, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		return clusterSelector{}, apierrors.NewBadRequest(fmt.Sprintf("invalid labelSelector: %v", err))
	}
	fs, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return clusterSelector{}, apierrors.NewBadRequest(fmt.Sprintf("invalid fieldSelector: %v", err))
	}
	for _, req := range fs.Requirements() {
		if req.Field != "metadata.name" {
			return clusterSelector{}, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	return clusterSelector{labels: ls, fields: fs}, nil
}

func (s clusterSelector) matches(c *karmada.Cluster) bool {
	return s.labels.Matches(labels.Set(c.Labels)) && s.fields.Matches(fields.Set{"metadata.name": c.Name})
}

func (h *aggregatedHandler) listClusters(w http.ResponseWriter, r *http.Request) {
	sel, err := parseSelector(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	items, rv := h.store.list()
	out := make([]*karmada.Cluster, 0, len(items))
	for _, c := range items {
		if sel.matches(c) {
			out = append(out, c)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"kind":       "ClusterList",
		"apiVersion": clusterAPIVersion,
		"metadata":   map[string]any{"resourceVersion": strconv.FormatUint(rv, 10)},
		"items":      out,
	})
}

// watchClusters streams JSON watch events. resourceVersion semantics follow
// the apiserver's: unset or "0" starts with an ADDED per object,
// sendInitialEvents=true (client-go's WatchList) does too and then sends the
// "k8s.io/initial-events-end" bookmark, any other value resumes after it.
func (h *aggregatedHandler) watchClusters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel, err := parseSelector(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	sendInitial := q.Get("sendInitialEvents") == "true"
	rvParam := q.Get("resourceVersion")
	var fromRV uint64
	if rvParam != "" && rvParam != "0" {
		fromRV, err = strconv.ParseUint(rvParam, 10, 64)
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", rvParam)))
			return
		}
	}
	initial := sendInitial || fromRV == 0
	if sendInitial && q.Get("allowWatchBookmarks") != "true" {
		writeStatus(w, apierrors.NewBadRequest("sendInitialEvents is forbidden for watch unless allowWatchBookmarks=true"))
		return
	}
	timeout := time.Duration(0)
	if ts := q.Get("timeoutSeconds"); ts != "" {
		n, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || n < 0 {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("invalid timeoutSeconds %q", ts)))
			return
		}
		timeout = time.Duration(n) * time.Second
	}

	first, rv, watcher, err := h.store.watchFrom(fromRV, initial)
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	if err != nil {
		var expired errExpired
		if errors.As(err, &expired) {
			_ = enc.Encode(watchEvent{Type: watch.Error, Object: apierrors.NewResourceExpired(err.Error()).ErrStatus})
		}
		return
	}
	defer h.store.stopWatch(watcher)

	send := func(ev clusterEvent) bool {
		if !sel.matches(ev.cluster) {
			return true
		}
		if err := enc.Encode(watchEvent{Type: ev.typ, Object: ev.cluster}); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	for _, ev := range first {
		if !send(ev) {
			return
		}
	}
	if sendInitial {
		bookmark := map[string]any{
			"kind":       clusterKind,
			"apiVersion": clusterAPIVersion,
			"metadata": map[string]any{
				"resourceVersion": strconv.FormatUint(rv, 10),
				"annotations":     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
			},
		}
		if err := enc.Encode(watchEvent{Type: watch.Bookmark, Object: bookmark}); err != nil {
			return
		}
	}
	if flusher != nil {
		flusher.Flush()
	}

	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-expire:
			return
		case ev, ok := <-watcher.ch:
			if !ok || !send(ev) {
				return
			}
		}
	}
}

type watchEvent struct {
	Type   watch.EventType `json:"type"`
	Object any             `json:"object"`
}

func groupVersion() metav1.GroupVersionForDiscovery {
	return metav1.GroupVersionForDiscovery{GroupVersion: clusterGroup + "/" + clusterVersion, Version: clusterVersion}
}

func apiGroup() *metav1.APIGroup {
	return &metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             clusterGroup,
		Versions:         []metav1.GroupVersionForDiscovery{groupVersion()},
		PreferredVersion: groupVersion(),
	}
}

func apiGroupList() *metav1.APIGroupList {
	g := apiGroup()
	g.TypeMeta = metav1.TypeMeta{}
	return &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{*g}}
}

// apiResourceList is the discovery document of karmada-aggregated-apiserver.
func apiResourceList() *metav1.APIResourceList {
	return &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: clusterGroup + "/" + clusterVersion,
		APIResources: []metav1.APIResource{
			{Name: "clusters", SingularName: "cluster", Namespaced: false, Kind: clusterKind,
				Verbs: metav1.Verbs{"get", "list", "watch", "update", "patch"}},
			{Name: "clusters/status", SingularName: "", Namespaced: false, Kind: clusterKind,
				Verbs: metav1.Verbs{"get", "patch", "update"}},
			{Name: "clusters/proxy", SingularName: "", Namespaced: false, Kind: "ClusterProxyOptions",
				Verbs: metav1.Verbs{"create", "delete", "get", "patch", "update"}},
		},
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeStatus answers err as a metav1.Status, the way apiservers do.
func writeStatus(w http.ResponseWriter, err error) {
	var status metav1.Status
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		status = se.Status()
	} else {
		status = apierrors.NewInternalError(err).ErrStatus
	}
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	code := int(status.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, status)
}
