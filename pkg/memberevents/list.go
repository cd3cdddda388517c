package memberevents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// MemberClusterAnnotation is set on every event merged in from a member
// cluster; its value is the cluster name.
const MemberClusterAnnotation = "karmada-exec-gateway.io/member-cluster"

// Gateway is what the merge needs of the proxy that hands it requests;
// *proxy.Proxy implements it. Every method takes the request being served:
// the proxy finds what it decided about it (identity, stream slot, metrics
// route) in its context.
type Gateway interface {
	// PassThrough sends r to karmada-apiserver unchanged.
	PassThrough(w http.ResponseWriter, r *http.Request)
	// Get GETs pathAndQuery below karmada-apiserver on r's behalf, asking
	// for accept, with the credentials PassThrough sends r with.
	Get(ctx context.Context, r *http.Request, pathAndQuery, accept string) (*http.Response, error)
	// GetMember is Get for pathAndQuery below a member cluster's
	// kube-apiserver, reached as the proxy reaches members (its cluster
	// proxy, or directly): with the caller's identity in passthrough mode;
	// in authorize mode the gateway's, once the caller is allowed rr.
	GetMember(ctx context.Context, r *http.Request, rr identity.ResourceRequest, cluster, pathAndQuery, accept string) (*http.Response, error)
	// HoldStream takes r's stream slot, or answers 429 and reports false.
	HoldStream(w http.ResponseWriter, r *http.Request) bool
	// Fail answers an upstream failure as the proxy answers its own.
	Fail(w http.ResponseWriter, r *http.Request, err error)
	// CountAs records r under route in the request metrics.
	CountAs(r *http.Request, route string)
}

// Resolver maps a pod template to the member cluster that runs it.
// *resolver.Resolver implements it.
type Resolver interface {
	Resolve(ctx context.Context, namespace, pod string) (cluster string, err error)
}

// Options configures a Merger.
type Options struct {
	// Gateway is the proxy the merge reads through. Required.
	Gateway Gateway
	// Resolver places pods. Required.
	Resolver Resolver
	// Metrics receives member_events_unavailable_total; nil records into a
	// private registry.
	Metrics *metrics.Metrics
	// MemberTimeout bounds the member's side of a merged list (the
	// template and the member's events, read at once); past it the list
	// carries karmada-apiserver's events and a Warning naming the member.
	// 0 is DefaultMemberTimeout.
	MemberTimeout time.Duration
}

// DefaultMemberTimeout is Options.MemberTimeout's default.
const DefaultMemberTimeout = 10 * time.Second

// Merger answers pod-scoped core/v1 events lists and watches with
// karmada-apiserver's events and the member cluster's merged. It implements
// the proxy's EventsMerger.
type Merger struct {
	gw            Gateway
	resolver      Resolver
	metrics       *metrics.Metrics
	memberTimeout time.Duration
	// eventCursors lets merged event watches resume exactly (watch.go).
	eventCursors     *eventCursors
	eventWatchTiming eventWatchTiming
}

// New builds a Merger from opts.
func New(opts Options) (*Merger, error) {
	if opts.Gateway == nil || opts.Resolver == nil {
		return nil, errors.New("memberevents: a Gateway and a Resolver are required")
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New(prometheus.NewRegistry())
	}
	if opts.MemberTimeout <= 0 {
		opts.MemberTimeout = DefaultMemberTimeout
	}
	return &Merger{
		gw: opts.Gateway, resolver: opts.Resolver, metrics: opts.Metrics, memberTimeout: opts.MemberTimeout,
		eventCursors: newEventCursors(), eventWatchTiming: defaultEventWatchTiming,
	}, nil
}

// Claims reports whether r is a request the merge answers (see
// parseEventsRequest); the proxy passes every other one through.
func (mg *Merger) Claims(r *http.Request) bool {
	_, ok := parseEventsRequest(r)
	return ok
}

// ServeHTTP merges the member cluster's events for a federated pod into
// karmada-apiserver's events list or watch.
func (mg *Merger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	er, ok := parseEventsRequest(r)
	if !ok {
		mg.gw.PassThrough(w, r)
		return
	}
	em := &eventsMerge{eventsRequest: er, r: r}
	if er.Watch {
		mg.gw.CountAs(r, metrics.RouteEvents)
		mg.serveEventsWatch(w, em)
		return
	}
	mg.serveEventsList(w, em)
}

// maxEventListBytes bounds each event list read for a merge.
const maxEventListBytes = 32 << 20

// eventsRequest is a core/v1 events list or watch scoped to one pod.
type eventsRequest struct {
	Namespace string
	Pod       string
	// UID is the involvedObject.uid the caller pinned, or "".
	UID string
	// MemberSelector selects the pod's events in the member: kind=Pod,
	// name=<pod> and the caller's other requirements, but not the uid (the
	// member pod's UID is not the template's; UID is checked against the
	// template instead).
	MemberSelector string
	Watch          bool
	// ResourceVersion is the caller's resourceVersion parameter.
	ResourceVersion string
	// SendInitialEvents marks a WatchList request (client-go 1.35+
	// informers): initial state as ADDED events, then a bookmark carrying
	// the k8s.io/initial-events-end annotation.
	SendInitialEvents bool
}

// memberForwardedEventFields are the event field selectors passed on to the
// member as the caller wrote them: they mean the same on both sides.
var memberForwardedEventFields = map[string]bool{
	"type": true, "reason": true, "source": true, "reportingComponent": true,
	"involvedObject.fieldPath": true,
}

// parseEventsRequest accepts GET /api/v1/namespaces/<ns>/events lists and
// watches whose fieldSelector pins involvedObject.name with equality. Besides
// it, the selector may pin involvedObject.kind=Pod, involvedObject.namespace
// =<ns>, involvedObject.apiVersion=v1 and involvedObject.uid, and filter on
// the fields in memberForwardedEventFields with any operator. Anything else
// (label selectors, other fields, unknown parameters, exact resourceVersion
// matches) is not merged: the gateway merges only what it can answer with
// the same meaning karmada-apiserver gives it.
func parseEventsRequest(r *http.Request) (eventsRequest, bool) {
	u := r.URL
	if r.Method != http.MethodGet || u.Opaque != "" || u.RawPath != "" || !strings.HasSuffix(u.Path, "/events") {
		return eventsRequest{}, false
	}
	segs := strings.Split(u.Path, "/")
	if len(segs) != 6 || segs[0] != "" || segs[1] != "api" || segs[2] != "v1" ||
		segs[3] != "namespaces" || segs[5] != "events" || len(validation.IsDNS1123Label(segs[4])) > 0 {
		return eventsRequest{}, false
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return eventsRequest{}, false
	}
	er := eventsRequest{Namespace: segs[4]}
	for key, vals := range q {
		if len(vals) != 1 {
			return eventsRequest{}, false
		}
		switch v := vals[0]; key {
		case "fieldSelector", "limit", "continue", "timeoutSeconds", "allowWatchBookmarks":
		case "resourceVersion":
			er.ResourceVersion = v
		case "resourceVersionMatch":
			if v != "" && v != string(metav1.ResourceVersionMatchNotOlderThan) {
				return eventsRequest{}, false
			}
		case "watch":
			er.Watch = queryTrue(v)
		case "sendInitialEvents":
			er.SendInitialEvents = queryTrue(v)
		default:
			return eventsRequest{}, false
		}
	}
	if er.SendInitialEvents && !er.Watch {
		return eventsRequest{}, false // karmada-apiserver refuses it; let it say so
	}
	sel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return eventsRequest{}, false
	}
	var forwarded []fields.Selector
	for _, req := range sel.Requirements() {
		equal := req.Operator == selection.Equals || req.Operator == selection.DoubleEquals
		switch {
		case memberForwardedEventFields[req.Field]:
			if req.Operator == selection.NotEquals {
				forwarded = append(forwarded, fields.OneTermNotEqualSelector(req.Field, req.Value))
			} else {
				forwarded = append(forwarded, fields.OneTermEqualSelector(req.Field, req.Value))
			}
		case !equal:
			return eventsRequest{}, false
		case req.Field == "involvedObject.name":
			er.Pod = req.Value
		case req.Field == "involvedObject.uid":
			er.UID = req.Value
		case req.Field == "involvedObject.kind" && req.Value == "Pod",
			req.Field == "involvedObject.namespace" && req.Value == er.Namespace,
			req.Field == "involvedObject.apiVersion" && req.Value == "v1":
		default:
			return eventsRequest{}, false
		}
	}
	if er.Pod == "" || len(validation.IsDNS1123Subdomain(er.Pod)) > 0 {
		return eventsRequest{}, false
	}
	er.MemberSelector = fields.AndSelectors(append([]fields.Selector{
		fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
		fields.OneTermEqualSelector("involvedObject.name", er.Pod),
	}, forwarded...)...).String()
	return er, acceptsPlainJSON(r.Header.Values("Accept"))
}

// queryTrue converts a boolean query value as kube-apiserver does
// (runtime.Convert_Slice_string_To_bool): anything but "0" and "false" in
// any case is true, the empty value included.
func queryTrue(v string) bool { return v != "0" && !strings.EqualFold(v, "false") }

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

// eventsMerge is one merged events request: what it asks, and the request
// itself, on whose behalf the Gateway reads.
type eventsMerge struct {
	eventsRequest
	r *http.Request
}

// eventsAccess is what a read of the member's events for em is allowed as
// in authorize mode (Gateway.GetMember): verb (list or watch) on events
// in the namespace, in karmada-apiserver.
func eventsAccess(em *eventsMerge, verb string) identity.ResourceRequest {
	return identity.ResourceRequest{Namespace: em.Namespace, Verb: verb, Resource: "events"}
}

// serveEventsList answers a list. Every step that cannot merge falls back to
// karmada-apiserver's answer (pod not placed, or a non-200 from
// karmada-apiserver, relayed as is); a member that cannot be read is
// reported in a Warning header while karmada's events are still returned.
func (mg *Merger) serveEventsList(w http.ResponseWriter, em *eventsMerge) {
	r, er := em.r, em.eventsRequest
	ctx := r.Context()
	logger := klog.FromContext(ctx).WithValues("namespace", er.Namespace, "pod", er.Pod)
	cluster, err := mg.resolver.Resolve(ctx, er.Namespace, er.Pod)
	if err != nil || len(validation.IsDNS1123Label(cluster)) > 0 {
		// Events of pods that are not placed are Karmada's own. The caller
		// was authenticated already (authorize mode, certificate callers).
		mg.gw.PassThrough(w, r)
		return
	}
	mg.gw.CountAs(r, metrics.RouteEvents)

	// The member's side (the template and the member's list, through two
	// hops) is read while karmada-apiserver answers, not after: it is most
	// of the merge's latency. A first page of several discards it.
	members := make(chan memberEvents, 1)
	go func() { members <- mg.listMemberEvents(ctx, em, cluster) }()

	list, res := mg.listKarmadaEvents(w, em, r.URL.RawQuery)
	if list == nil {
		return
	}

	// Only the last page carries member events, so a paginated list
	// contains them exactly once.
	var warning string
	if list.Continue == "" {
		m := <-members
		if m.err != nil {
			logger.V(2).Info("Member events unavailable", "cluster", cluster, "err", m.err)
			mg.metrics.MemberEventsUnavailableTotal.WithLabelValues(cluster).Inc()
			warning = memberUnavailableMessage(cluster, m.err)
		}
		for i := range m.items {
			m.items[i].ResourceVersion = list.ResourceVersion
		}
		list.Items = append(list.Items, m.items...)
		mg.eventCursors.remember(er, list.ResourceVersion, m.cursor)
	}
	out, err := json.Marshal(list)
	if err != nil {
		mg.gw.Fail(w, r, err)
		return
	}
	apiresponse.CopyHeader(w.Header(), res.Header)
	w.Header().Del("Content-Length")
	w.Header().Set("Content-Type", "application/json")
	if warning != "" {
		w.Header().Add("Warning", warningHeader(warning))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// listKarmadaEvents lists karmada-apiserver's events with rawQuery. When it
// cannot, or karmada-apiserver answers what the gateway does not merge into
// (a refusal, a body that is not an EventList), it answers w itself, that
// answer relayed as is, and returns a nil list.
func (mg *Merger) listKarmadaEvents(w http.ResponseWriter, em *eventsMerge, rawQuery string) (*corev1.EventList, *http.Response) {
	res, err := mg.gw.Get(em.r.Context(), em.r, em.r.URL.EscapedPath()+"?"+rawQuery, "application/json")
	if err != nil {
		mg.gw.Fail(w, em.r, err)
		return nil, nil
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxEventListBytes))
	if err != nil {
		mg.gw.Fail(w, em.r, err)
		return nil, nil
	}
	var list corev1.EventList
	if res.StatusCode != http.StatusOK || json.Unmarshal(body, &list) != nil {
		apiresponse.Relay(w, res, body)
		return nil, nil
	}
	return &list, res
}

func memberUnavailableMessage(cluster string, err error) string {
	return fmt.Sprintf("member events from %s unavailable: %v", cluster, err)
}

// memberEvents is the member's side of a merged list.
type memberEvents struct {
	items  []corev1.Event
	cursor memberCursor
	err    error
}

// listMemberEvents lists the member's events for the pod through the
// cluster proxy, rewritten by rewriteMemberEvent but for their
// resourceVersion, with where the member stood: remembered for the
// karmada-apiserver resourceVersion they are given, a watch from it
// continues the member's events exactly (eventCursors).
func (mg *Merger) listMemberEvents(ctx context.Context, em *eventsMerge, cluster string) memberEvents {
	// Both reads are whole before this returns, so the deadline covers
	// their bodies too: a member that sends headers and then hangs is as
	// unavailable as one that does not answer.
	ctx, cancel := context.WithTimeout(ctx, mg.memberTimeout)
	defer cancel()
	type template struct {
		pod *corev1.Pod
		err error
	}
	templates := make(chan template, 1)
	go func() {
		pod, err := mg.readTemplate(ctx, em)
		templates <- template{pod, err}
	}()
	list, listErr := mg.readMemberEvents(ctx, em, cluster)
	t := <-templates
	switch {
	case t.err != nil:
		return memberEvents{err: t.err}
	case t.pod == nil:
		return memberEvents{} // the caller pinned another incarnation's UID
	case listErr != nil:
		return memberEvents{err: listErr}
	}
	pod := t.pod
	for i := range list.Items {
		rewriteMemberEvent(&list.Items[i], cluster, pod)
	}
	return memberEvents{items: list.Items, cursor: memberCursor{cluster: cluster, resourceVersion: list.ResourceVersion}}
}

// readMemberEvents lists the member's events for the pod through the
// cluster proxy, as eventsAccess says.
//
// It asks for protobuf first: decoding a member's events from JSON was most
// of a merged list's cost, and kube-apiserver serves core types in protobuf
// through the cluster proxy, which passes Accept on. A member that answers
// JSON all the same is decoded from JSON.
func (mg *Merger) readMemberEvents(ctx context.Context, em *eventsMerge, cluster string) (*corev1.EventList, error) {
	body, err := read(mg.gw.GetMember(ctx, em.r, eventsAccess(em, "list"), cluster, memberEventsPath(em.eventsRequest, nil), protobufOrJSON))
	if err != nil {
		return nil, err
	}
	var list corev1.EventList
	if _, _, err := apiDecoder.Decode(body, nil, &list); err != nil {
		return nil, fmt.Errorf("decoding the member's events: %w", err)
	}
	return &list, nil
}

// protobufOrJSON is client-go's own Accept for core types.
const protobufOrJSON = "application/vnd.kubernetes.protobuf,application/json"

// apiDecoder decodes core types and Status from protobuf or JSON,
// whichever the upstream answered, without conversion.
var apiDecoder = scheme.Codecs.UniversalDeserializer()

// readTemplate reads the pod template the request is about. A nil pod and
// no error mean the caller pinned another incarnation's UID: the member's
// events are not about it.
func (mg *Merger) readTemplate(ctx context.Context, em *eventsMerge) (*corev1.Pod, error) {
	// Only the metadata is read (rewriteMemberEvent needs the UID and the
	// resourceVersion); decoding a CI pod's spec and status is wasted.
	var pod struct {
		metav1.ObjectMeta `json:"metadata"`
	}
	body, err := read(mg.gw.Get(ctx, em.r, "/api/v1/namespaces/"+em.Namespace+"/pods/"+em.Pod, "application/json"))
	if err == nil {
		err = json.Unmarshal(body, &pod)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the pod template: %w", err)
	}
	if em.UID != "" && types.UID(em.UID) != pod.UID {
		return nil, nil
	}
	return &corev1.Pod{ObjectMeta: pod.ObjectMeta}, nil
}

// memberEventsPath is the path of the pod's events below a member's
// kube-apiserver, with extra query parameters.
func memberEventsPath(er eventsRequest, extra url.Values) string {
	q := url.Values{"fieldSelector": {er.MemberSelector}}
	for k, v := range extra {
		q[k] = v
	}
	return "/api/v1/namespaces/" + er.Namespace + "/events?" + q.Encode()
}

// rewriteMemberEvent makes a member's event read as an event of the
// template: involvedObject.uid is the template's (executors filter on it),
// the name is prefixed with the cluster (event names of two clusters may
// collide) and the annotation MemberClusterAnnotation names the cluster. The
// caller sets the resourceVersion to one of karmada-apiserver's, so no
// client ever hands karmada-apiserver a member's resourceVersion.
func rewriteMemberEvent(ev *corev1.Event, cluster string, pod *corev1.Pod) {
	ev.Name = cluster + "." + ev.Name
	ev.InvolvedObject.UID = pod.UID
	ev.InvolvedObject.ResourceVersion = pod.ResourceVersion
	if ev.Annotations == nil {
		ev.Annotations = map[string]string{}
	}
	ev.Annotations[MemberClusterAnnotation] = cluster
}

// read returns the body of a 200 answer to a GET; any other answer is an
// error with its message.
func read(res *http.Response, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxEventListBytes))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", res.StatusCode, apiresponse.Message(body))
	}
	return body, nil
}

// warningHeader is a Warning header value (RFC 9111, as kube-apiserver
// sends warnings: code 299, agent "-") carrying text, which apiresponse.Printable made
// fit for its quoted string.
func warningHeader(text string) string {
	h, err := utilnet.NewWarningHeader(299, "-", apiresponse.Printable(text))
	if err != nil { // printable leaves nothing NewWarningHeader refuses
		return `299 - "warning text not representable"`
	}
	return h
}
