package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// MemberClusterAnnotation is set on every event merged in from a member
// cluster; its value is the cluster name.
const MemberClusterAnnotation = "karmada-exec-gateway.io/member-cluster"

// maxEventListBytes bounds each event list read for a merge.
const maxEventListBytes = 32 << 20

// eventsListRequest is a core/v1 events list scoped to one pod.
type eventsListRequest struct {
	Namespace string
	Pod       string
	// UID is the involvedObject.uid the caller pinned, or "".
	UID string
}

// parseEventsListRequest accepts GET /api/v1/namespaces/<ns>/events lists
// (not watches) whose fieldSelector pins involvedObject.name with equality,
// allowing besides only involvedObject.kind=Pod, involvedObject.namespace=<ns>
// and involvedObject.uid. Anything else (label selectors, other fields,
// resourceVersion semantics other than the default) is not merged.
func parseEventsListRequest(r *http.Request) (eventsListRequest, bool) {
	u := r.URL
	if r.Method != http.MethodGet || u.Opaque != "" || u.RawPath != "" {
		return eventsListRequest{}, false
	}
	segs := strings.Split(u.Path, "/")
	if len(segs) != 6 || segs[0] != "" || segs[1] != "api" || segs[2] != "v1" ||
		segs[3] != "namespaces" || segs[5] != "events" || len(validation.IsDNS1123Label(segs[4])) > 0 {
		return eventsListRequest{}, false
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return eventsListRequest{}, false
	}
	for key, vals := range q {
		switch key {
		case "fieldSelector", "limit", "continue", "timeoutSeconds":
		case "watch", "allowWatchBookmarks":
			if len(vals) != 1 || vals[0] == "" || vals[0] == "0" || vals[0] == "false" {
				continue // an explicit watch=false is a list
			}
			return eventsListRequest{}, false
		default:
			return eventsListRequest{}, false
		}
		if len(vals) != 1 {
			return eventsListRequest{}, false
		}
	}
	sel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return eventsListRequest{}, false
	}
	er := eventsListRequest{Namespace: segs[4]}
	for _, req := range sel.Requirements() {
		if req.Operator != "=" && req.Operator != "==" {
			return eventsListRequest{}, false
		}
		switch req.Field {
		case "involvedObject.name":
			er.Pod = req.Value
		case "involvedObject.kind":
			if req.Value != "Pod" {
				return eventsListRequest{}, false
			}
		case "involvedObject.namespace":
			if req.Value != er.Namespace {
				return eventsListRequest{}, false
			}
		case "involvedObject.uid":
			er.UID = req.Value
		default:
			return eventsListRequest{}, false
		}
	}
	if er.Pod == "" || len(validation.IsDNS1123Subdomain(er.Pod)) > 0 {
		return eventsListRequest{}, false
	}
	return er, acceptsPlainJSON(r.Header.Values("Accept"))
}

// acceptsPlainJSON reports whether the client takes a plain JSON EventList.
// Any media range asking for a conversion (as=Table, PartialObjectMetadata)
// passes the request through unmerged; otherwise one range that admits
// application/json suffices, so client-go's default
// "application/vnd.kubernetes.protobuf,application/json" gets JSON (it
// decodes by the response's Content-Type). Protobuf or YAML alone passes
// through.
func acceptsPlainJSON(accept []string) bool {
	json, ranges := false, 0
	for _, v := range accept {
		for _, part := range strings.Split(v, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			ranges++
			mt, params, err := mime.ParseMediaType(part)
			if err != nil {
				return false
			}
			for k := range params {
				if k != "q" && k != "charset" {
					return false
				}
			}
			if mt == "application/json" || mt == "*/*" || mt == "application/*" {
				json = true
			}
		}
	}
	return json || ranges == 0
}

// routeEvents sends pod-scoped core/v1 events lists to merge and everything
// else on.
func routeEvents(merge http.HandlerFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := parseEventsListRequest(r); ok {
				merge(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// serveEvents merges the member cluster's events for a federated pod into
// karmada-apiserver's events list. Every step that cannot merge falls back
// to plain passthrough (pod not placed, authorize mode, or a non-200 from
// karmada-apiserver, relayed as is); a member that cannot be read is
// reported in a Warning header while karmada's events are still returned.
func (p *Proxy) serveEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	er, ok := parseEventsListRequest(r)
	// Authorize mode has no caller credential to send to the member and the
	// Authorizer decides pod subresources only, so it does not merge.
	if !ok || p.authMode == AuthAuthorize {
		p.servePassthrough(w, r)
		return
	}
	logger := klog.FromContext(ctx).WithValues("namespace", er.Namespace, "pod", er.Pod)
	cluster, err := p.resolver.Resolve(ctx, er.Namespace, er.Pod)
	if err != nil || len(validation.IsDNS1123Label(cluster)) > 0 {
		// Events of pods that are not placed are Karmada's own.
		p.servePassthrough(w, r)
		return
	}

	res, err := p.callerGet(ctx, r, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
	if err != nil {
		p.handleError(w, r, err)
		return
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxEventListBytes))
	var list corev1.EventList
	if err != nil || res.StatusCode != http.StatusOK || json.Unmarshal(body, &list) != nil {
		if err != nil {
			p.handleError(w, r, err)
			return
		}
		copyHeader(w.Header(), res.Header)
		w.Header().Del("Content-Length")
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(body)
		return
	}

	// Only the last page carries member events, so a paginated list
	// contains them exactly once.
	var warning string
	if list.Continue == "" {
		members, err := p.memberEvents(ctx, r, er, cluster, list.ResourceVersion)
		if err != nil {
			logger.V(2).Info("Member events unavailable", "cluster", cluster, "err", err)
			warning = fmt.Sprintf("member events from %s unavailable: %v", cluster, err)
		}
		list.Items = append(list.Items, members...)
	}
	out, err := json.Marshal(&list)
	if err != nil {
		p.handleError(w, r, err)
		return
	}
	copyHeader(w.Header(), res.Header)
	w.Header().Del("Content-Length")
	w.Header().Set("Content-Type", "application/json")
	if warning != "" {
		w.Header().Add("Warning", "299 - "+strconv.Quote(warning))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// memberEvents lists the member's events for the pod through the cluster
// proxy with the caller's credentials and rewrites them to read as events of
// the template: involvedObject.uid is the template's, the name is prefixed
// with the cluster (event names of two clusters may collide), and
// resourceVersion is karmada-apiserver's list resourceVersion, so no client
// ever hands karmada-apiserver a member's resourceVersion.
func (p *Proxy) memberEvents(ctx context.Context, r *http.Request, er eventsListRequest, cluster, karmadaRV string) ([]corev1.Event, error) {
	var pod corev1.Pod
	if err := p.callerGetJSON(ctx, r, "/api/v1/namespaces/"+er.Namespace+"/pods/"+er.Pod, &pod); err != nil {
		return nil, fmt.Errorf("reading the pod template: %w", err)
	}
	if er.UID != "" && types.UID(er.UID) != pod.UID {
		return nil, nil // the caller asked for another incarnation of the pod
	}
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": er.Pod}.AsSelector().String()
	path := karmada.ClusterProxyPath(cluster, "/api/v1/namespaces/"+er.Namespace+"/events") + "?" +
		url.Values{"fieldSelector": {sel}}.Encode()
	var list corev1.EventList
	if err := p.callerGetJSON(ctx, r, path, &list); err != nil {
		return nil, err
	}
	for i := range list.Items {
		ev := &list.Items[i]
		ev.Name = cluster + "." + ev.Name
		ev.ResourceVersion = karmadaRV
		ev.InvolvedObject.UID = pod.UID
		ev.InvolvedObject.ResourceVersion = pod.ResourceVersion
		if ev.Annotations == nil {
			ev.Annotations = map[string]string{}
		}
		ev.Annotations[MemberClusterAnnotation] = cluster
	}
	return list.Items, nil
}

func (p *Proxy) callerGetJSON(ctx context.Context, r *http.Request, pathAndQuery string, into any) error {
	res, err := p.callerGet(ctx, r, pathAndQuery)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxEventListBytes))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", res.StatusCode, statusMessage(body))
	}
	return json.Unmarshal(body, into)
}

// callerGet sends a GET with the client's own headers (its credentials and
// any Impersonate-* it sent) to pathAndQuery below the upstream, asking for
// JSON.
func (p *Proxy) callerGet(ctx context.Context, r *http.Request, pathAndQuery string) (*http.Response, error) {
	target := p.upstream.base.String() + pathAndQuery
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	for _, h := range []string{"Connection", "Upgrade", "Te", "Trailer", "Transfer-Encoding", "Keep-Alive", "Proxy-Connection", "Accept-Encoding", "Content-Length"} {
		req.Header.Del(h)
	}
	req.Header.Set("Accept", "application/json")
	return p.upstream.caller.RoundTrip(req)
}

func statusMessage(body []byte) string {
	var s struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &s) == nil && s.Message != "" {
		return s.Message
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return strings.TrimSpace(string(body))
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Keep-Alive", "Transfer-Encoding", "Trailer", "Upgrade", "Content-Length":
			continue
		}
		dst[k] = append([]string(nil), v...)
	}
}
