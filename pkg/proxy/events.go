package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

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
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// MemberClusterAnnotation is set on every event merged in from a member
// cluster; its value is the cluster name.
const MemberClusterAnnotation = "karmada-exec-gateway.io/member-cluster"

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

// routeEvents sends pod-scoped core/v1 events lists and watches to merge
// and everything else on.
func routeEvents(merge http.HandlerFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := parseEventsRequest(r); ok {
				merge(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// eventsMerge is one merged events request: what it asks, and whose
// credentials the gateway's reads for it carry.
type eventsMerge struct {
	eventsRequest
	r *http.Request
	// karmada reads karmada-apiserver's events and the pod template, as
	// passthrough would send the request.
	karmada upstreamIdentity
}

// serveEvents merges the member cluster's events for a federated pod into
// karmada-apiserver's events list or watch.
func (p *Proxy) serveEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	er, ok := parseEventsRequest(r)
	if !ok {
		p.servePassthrough(w, r)
		return
	}
	id, err := p.passthroughIdentity(ctx, r)
	if err != nil {
		apiresponse.WriteStatus(w, err)
		return
	}
	stateFrom(ctx).certVerified = id.certVerified
	em := &eventsMerge{eventsRequest: er, r: r, karmada: id}
	if er.Watch {
		stateFrom(ctx).route = metrics.RouteEvents
		p.serveEventsWatch(w, em)
		return
	}
	p.serveEventsList(w, em)
}

// memberIdentity is how the member's events are read: with the caller's
// headers in passthrough mode, so the member's RBAC for the caller
// applies; in authorize mode with the gateway's identity, each read
// allowed first by the Authorizer as verb (list or watch) on events in the
// namespace in karmada-apiserver, so callers keep the RBAC they have there
// and need nothing in members.
func (p *Proxy) memberIdentity(em *eventsMerge, verb string) upstreamIdentity {
	if p.authMode != AuthAuthorize {
		return upstreamIdentity{}
	}
	return upstreamIdentity{
		gateway:    true,
		editHeader: identity.StripHeaders,
		authorize: func(ctx context.Context) error {
			_, err := p.authorizer.AuthorizeResource(ctx, em.r, identity.ResourceRequest{
				Namespace: em.Namespace, Verb: verb, Resource: "events",
			})
			return err
		},
	}
}

// serveEventsList answers a list. Every step that cannot merge falls back to
// karmada-apiserver's answer (pod not placed, or a non-200 from
// karmada-apiserver, relayed as is); a member that cannot be read is
// reported in a Warning header while karmada's events are still returned.
func (p *Proxy) serveEventsList(w http.ResponseWriter, em *eventsMerge) {
	r, er := em.r, em.eventsRequest
	ctx := r.Context()
	logger := klog.FromContext(ctx).WithValues("namespace", er.Namespace, "pod", er.Pod)
	cluster, err := p.resolver.Resolve(ctx, er.Namespace, er.Pod)
	if err != nil || len(validation.IsDNS1123Label(cluster)) > 0 {
		// Events of pods that are not placed are Karmada's own. The caller
		// was authenticated already (authorize mode, certificate callers).
		p.forwardAs(w, r, em.karmada)
		return
	}
	stateFrom(ctx).route = metrics.RouteEvents

	// The member's side (the template and the member's list, through two
	// hops) is read while karmada-apiserver answers, not after: it is most
	// of the merge's latency. A first page of several discards it.
	members := make(chan memberEvents, 1)
	go func() { members <- p.listMemberEvents(ctx, em, cluster) }()

	list, res := p.listKarmadaEvents(w, em, r.URL.RawQuery)
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
			p.metrics.MemberEventsUnavailableTotal.WithLabelValues(cluster).Inc()
			warning = memberUnavailableMessage(cluster, m.err)
		}
		for i := range m.items {
			m.items[i].ResourceVersion = list.ResourceVersion
		}
		list.Items = append(list.Items, m.items...)
		p.eventCursors.remember(er, list.ResourceVersion, m.cursor)
	}
	out, err := json.Marshal(list)
	if err != nil {
		p.handleError(w, r, err)
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
func (p *Proxy) listKarmadaEvents(w http.ResponseWriter, em *eventsMerge, rawQuery string) (*corev1.EventList, *http.Response) {
	res, err := p.get(em.r.Context(), em.r, em.karmada, em.r.URL.EscapedPath()+"?"+rawQuery)
	if err != nil {
		p.handleError(w, em.r, err)
		return nil, nil
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxEventListBytes))
	if err != nil {
		p.handleError(w, em.r, err)
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
func (p *Proxy) listMemberEvents(ctx context.Context, em *eventsMerge, cluster string) memberEvents {
	type template struct {
		pod *corev1.Pod
		err error
	}
	templates := make(chan template, 1)
	go func() {
		pod, err := p.readTemplate(ctx, em)
		templates <- template{pod, err}
	}()
	list, listErr := p.readMemberEvents(ctx, em, cluster)
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
// cluster proxy, as memberIdentity says.
//
// It asks for protobuf first: decoding a member's events from JSON was most
// of a merged list's cost, and kube-apiserver serves core types in protobuf
// through the cluster proxy, which passes Accept on. A member that answers
// JSON all the same is decoded from JSON.
func (p *Proxy) readMemberEvents(ctx context.Context, em *eventsMerge, cluster string) (*corev1.EventList, error) {
	body, err := p.read(ctx, em.r, p.memberIdentity(em, "list"), memberEventsPath(cluster, em.eventsRequest, nil), protobufOrJSON)
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
func (p *Proxy) readTemplate(ctx context.Context, em *eventsMerge) (*corev1.Pod, error) {
	// Only the metadata is read (rewriteMemberEvent needs the UID and the
	// resourceVersion); decoding a CI pod's spec and status is wasted.
	var pod struct {
		metav1.ObjectMeta `json:"metadata"`
	}
	if err := p.getJSON(ctx, em.r, em.karmada, "/api/v1/namespaces/"+em.Namespace+"/pods/"+em.Pod, &pod); err != nil {
		return nil, fmt.Errorf("reading the pod template: %w", err)
	}
	if em.UID != "" && types.UID(em.UID) != pod.UID {
		return nil, nil
	}
	return &corev1.Pod{ObjectMeta: pod.ObjectMeta}, nil
}

// memberEventsPath is the cluster proxy path of the pod's events in cluster,
// with extra query parameters.
func memberEventsPath(cluster string, er eventsRequest, extra url.Values) string {
	q := url.Values{"fieldSelector": {er.MemberSelector}}
	for k, v := range extra {
		q[k] = v
	}
	return karmada.ClusterProxyPath(cluster, "/api/v1/namespaces/"+er.Namespace+"/events") + "?" + q.Encode()
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

// upstreamIdentity is whose credentials a request the gateway sends on a
// client's behalf carries.
type upstreamIdentity struct {
	// gateway sends the gateway's own credentials; otherwise the client's
	// headers go as they came.
	gateway bool
	// editHeader, when set, edits the headers copied from the client.
	editHeader func(http.Header)
	// authorize, when set, must allow each request before it is sent.
	authorize func(context.Context) error
	// certVerified: the Authorizer accepted the client's certificate.
	certVerified bool
}

// passthroughIdentity is how servePassthrough sends r: the client's own
// headers, except in authorize mode for a caller who presented only a
// client certificate, which cannot be forwarded: the gateway authenticates
// it and impersonates the caller with its own identity.
func (p *Proxy) passthroughIdentity(ctx context.Context, r *http.Request) (upstreamIdentity, error) {
	if p.authMode != AuthAuthorize || identity.HasBearerToken(r) || !identity.HasClientCertificate(r) {
		return upstreamIdentity{}, nil
	}
	caller, err := p.authorizer.Authenticate(ctx, r)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Client certificate not authenticated", "err", err)
		return upstreamIdentity{}, err
	}
	return upstreamIdentity{
		gateway:      true,
		certVerified: true,
		editHeader: func(h http.Header) {
			identity.StripHeaders(h)
			identity.SetImpersonation(h, caller)
		},
	}, nil
}

func (p *Proxy) getJSON(ctx context.Context, r *http.Request, as upstreamIdentity, pathAndQuery string, into any) error {
	body, err := p.read(ctx, r, as, pathAndQuery, "application/json")
	if err != nil {
		return err
	}
	return json.Unmarshal(body, into)
}

// read GETs pathAndQuery as get does, asking for accept, and returns the
// body of a 200 answer; any other answer is an error with its message.
func (p *Proxy) read(ctx context.Context, r *http.Request, as upstreamIdentity, pathAndQuery, accept string) ([]byte, error) {
	res, err := p.getAccepting(ctx, r, as, pathAndQuery, accept)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxEventListBytes))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", res.StatusCode, statusMessage(body))
	}
	return body, nil
}

// get sends a GET for pathAndQuery below the upstream on r's behalf, as as
// says, asking for JSON. The client's headers are copied but for hop-by-hop
// ones and Accept-Encoding (the gateway reads the body itself).
func (p *Proxy) get(ctx context.Context, r *http.Request, as upstreamIdentity, pathAndQuery string) (*http.Response, error) {
	return p.getAccepting(ctx, r, as, pathAndQuery, "application/json")
}

// getAccepting is get asking for accept.
func (p *Proxy) getAccepting(ctx context.Context, r *http.Request, as upstreamIdentity, pathAndQuery, accept string) (*http.Response, error) {
	if as.authorize != nil {
		if err := as.authorize(ctx); err != nil {
			return nil, err
		}
	}
	target := p.upstream.base.String() + pathAndQuery
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	for _, h := range []string{"Connection", "Upgrade", "Te", "Trailer", "Transfer-Encoding", "Keep-Alive", "Proxy-Connection", "Accept-Encoding", "Content-Length"} {
		req.Header.Del(h)
	}
	req.Header.Set("Accept", accept)
	if as.editHeader != nil {
		as.editHeader(req.Header)
	}
	return p.upstream.transport(as.gateway, false).RoundTrip(req)
}

// maxMessageBytes bounds an upstream's message the gateway repeats: it may
// end up in a header, where a long one would cost every client its header
// budget.
const maxMessageBytes = 1024

// statusMessage is the message of the Status an upstream answered with,
// protobuf or JSON as its Content-Type says (the cluster proxy relays the
// member's protobuf as such when asked for it), else the start of the body.
// Either way it is readable text: invalid UTF-8 and control characters are
// replaced, and bytes that are not text are described, not repeated.
func statusMessage(body []byte) string {
	var st metav1.Status
	if obj, _, err := apiDecoder.Decode(body, nil, &st); err == nil {
		if st, ok := obj.(*metav1.Status); ok && st.Message != "" {
			return printable(st.Message)
		}
	}
	var s struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &s) == nil && s.Message != "" {
		return printable(s.Message) // a Status without kind, or another error object
	}
	if !utf8.Valid(body) || bytes.ContainsFunc(body, func(r rune) bool { return unicode.IsControl(r) && !unicode.IsSpace(r) }) {
		return fmt.Sprintf("a %d-byte body that is not text", len(body))
	}
	return printable(string(body))
}

// printable makes s fit for a log line, an event message or a quoted header
// text: at most maxMessageBytes, valid UTF-8, control characters (newlines
// included) as spaces, no space at either end.
func printable(s string) string {
	if len(s) > maxMessageBytes {
		s = s[:maxMessageBytes]
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	return strings.TrimSpace(s)
}

// warningHeader is a Warning header value (RFC 9111, as kube-apiserver
// sends warnings: code 299, agent "-") carrying text, which printable made
// fit for its quoted string.
func warningHeader(text string) string {
	h, err := utilnet.NewWarningHeader(299, "-", printable(text))
	if err != nil { // printable leaves nothing NewWarningHeader refuses
		return `299 - "warning text not representable"`
	}
	return h
}
