package memberevents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

const (
	templateUID = "template-uid"
	memberUID   = "member-uid"
	karmadaRV   = "4711"
)

// eventsUpstream is karmada-apiserver with the cluster proxy of proxytest.Cluster
// behind it: events lists, the pod template, and the member's events.
type eventsUpstream struct {
	memberCode int // 0 = 200
	// memberJSONOnly answers the member's events in JSON even when
	// protobuf is asked for first, as a member without protobuf would.
	memberJSONOnly bool

	mu   sync.Mutex
	reqs []*http.Request
}

func (u *eventsUpstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.reqs...)
}

func (u *eventsUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.reqs = append(u.reqs, r.Clone(r.Context()))
	u.mu.Unlock()
	memberEvents := karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/events")
	switch r.URL.Path {
	case "/api/v1/namespaces/ci/events", "/api/v1/watch/namespaces/ci/events":
		if r.URL.Path != "/api/v1/namespaces/ci/events" || strings.Contains(r.Header.Get("Accept"), "protobuf") || strings.Contains(r.Header.Get("Accept"), "as=") {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("raw"))
			return
		}
		proxytest.WriteJSON(w, http.StatusOK, &corev1.EventList{
			TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: karmadaRV},
			Items: []corev1.Event{{
				ObjectMeta:     metav1.ObjectMeta{Name: "build.karmada", Namespace: "ci", ResourceVersion: "4700"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "build", Namespace: "ci", UID: templateUID},
				Reason:         "ScheduleBindingSucceed",
			}},
		})
	case "/api/v1/namespaces/ci/pods/build":
		proxytest.WriteJSON(w, http.StatusOK, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "ci", UID: templateUID, ResourceVersion: "4600"}})
	case memberEvents:
		if u.memberCode != 0 {
			if strings.HasPrefix(r.Header.Get("Accept"), runtime.ContentTypeProtobuf) && !u.memberJSONOnly {
				// as kube-apiserver answers a client that asked for protobuf first
				w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
				w.WriteHeader(u.memberCode)
				_, _ = w.Write(protobufStatus(forbiddenStatus()))
				return
			}
			proxytest.WriteJSON(w, u.memberCode, forbiddenStatus())
			return
		}
		list := &corev1.EventList{
			ListMeta: metav1.ListMeta{ResourceVersion: "99"},
			Items: []corev1.Event{{
				ObjectMeta:     metav1.ObjectMeta{Name: "build.1", Namespace: "ci", ResourceVersion: "98"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "build", Namespace: "ci", UID: memberUID},
				Reason:         "Failed", Message: "ErrImagePull",
			}},
		}
		if strings.HasPrefix(r.Header.Get("Accept"), runtime.ContentTypeProtobuf) && !u.memberJSONOnly {
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			_ = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(list, w)
			return
		}
		proxytest.WriteJSON(w, http.StatusOK, list)
	default:
		http.NotFound(w, r)
	}
}

func TestEventsMerge(t *testing.T) {
	tests := []struct {
		name       string
		target     string
		accept     string
		memberCode int
		// memberJSONOnly: the member answers JSON, its failures included.
		memberJSONOnly bool
		merge          bool
		resolveErr     error
		// wantMember: the member event is in the merged list; wantRaw: the
		// request was passed through unchanged.
		wantMember, wantRaw bool
		wantWarning         string
		// answeredByMerge: the merge answered though it added nothing.
		answeredByMerge bool
		// wantMemberSelector is the fieldSelector sent to the member; "" is
		// the plain pod selector.
		wantMemberSelector string
	}{
		{name: "scoped list merges", target: proxytest.EventsTarget("involvedObject.name=build", ""), merge: true, wantMember: true},
		{name: "kubectl describe selector", target: proxytest.EventsTarget("involvedObject.name=build,involvedObject.namespace=ci,involvedObject.kind=Pod,involvedObject.uid="+templateUID, "&limit=500"), accept: "application/json", merge: true, wantMember: true},
		{name: "other uid gets no member events", target: proxytest.EventsTarget("involvedObject.name=build,involvedObject.uid=old", ""), merge: true, answeredByMerge: true},
		{name: "member failure warns", target: proxytest.EventsTarget("involvedObject.name=build", ""), memberCode: 403, merge: true, wantWarning: `299 - "member events from member1 unavailable: HTTP 403: pods \"build\" is forbidden: <nil>"`},
		{name: "member failure in JSON warns", target: proxytest.EventsTarget("involvedObject.name=build", ""), memberCode: 403, memberJSONOnly: true, merge: true, wantWarning: `299 - "member events from member1 unavailable: HTTP 403: pods \"build\" is forbidden: <nil>"`},
		{name: "flag off passes through", target: proxytest.EventsTarget("involvedObject.name=build", ""), merge: false},
		{name: "unplaced pod passes through", target: proxytest.EventsTarget("involvedObject.name=build", ""), merge: true, resolveErr: apierrors.NewNotFound(podsResource, "build")},
		{name: "unscoped list untouched", target: "/api/v1/namespaces/ci/events", merge: true},
		{name: "other kind untouched", target: proxytest.EventsTarget("involvedObject.name=build,involvedObject.kind=Service", ""), merge: true},
		{name: "inequality untouched", target: proxytest.EventsTarget("involvedObject.name!=build", ""), merge: true},
		{name: "label selector untouched", target: proxytest.EventsTarget("involvedObject.name=build", "&labelSelector=a%3Db"), merge: true},
		{name: "legacy watch path passes through", target: "/api/v1/watch/namespaces/ci/events?fieldSelector=involvedObject.name%3Dbuild", merge: true, wantRaw: true},
		{name: "gitlab warning events list", target: proxytest.EventsTarget("involvedObject.name=build,type=Warning", "&limit=200"), merge: true, wantMember: true, wantMemberSelector: "involvedObject.kind=Pod,involvedObject.name=build,type=Warning"},
		{name: "other fields are forwarded with their operator", target: proxytest.EventsTarget("involvedObject.name=build,reason!=Pulled,involvedObject.apiVersion=v1", ""), merge: true, wantMember: true, wantMemberSelector: "involvedObject.kind=Pod,involvedObject.name=build,reason!=Pulled"},
		{name: "escaped values stay escaped for the member", target: proxytest.EventsTarget(`involvedObject.name=build,reason=a\,involvedObject.name\=other`, ""), merge: true, wantMember: true, wantMemberSelector: `involvedObject.kind=Pod,involvedObject.name=build,reason=a\,involvedObject.name\=other`},
		{name: "informer list from any version", target: proxytest.EventsTarget("involvedObject.name=build", "&resourceVersion=0"), merge: true, wantMember: true},
		{name: "not older than", target: proxytest.EventsTarget("involvedObject.name=build", "&resourceVersion=4000&resourceVersionMatch=NotOlderThan"), merge: true, wantMember: true},
		{name: "exact version untouched", target: proxytest.EventsTarget("involvedObject.name=build", "&resourceVersion=4000&resourceVersionMatch=Exact"), merge: true},
		{name: "event name field untouched", target: proxytest.EventsTarget("involvedObject.name=build,metadata.name=x", ""), merge: true},
		{name: "involvedObject.resourceVersion untouched", target: proxytest.EventsTarget("involvedObject.name=build,involvedObject.resourceVersion=1", ""), merge: true},
		{name: "repeated parameter untouched", target: proxytest.EventsTarget("involvedObject.name=build", "&limit=1&limit=2"), merge: true},
		{name: "table passes through", target: proxytest.EventsTarget("involvedObject.name=build", ""), accept: "application/json;as=Table;v=v1;g=meta.k8s.io,application/json", merge: true, wantRaw: true},
		{name: "protobuf only passes through", target: proxytest.EventsTarget("involvedObject.name=build", ""), accept: "application/vnd.kubernetes.protobuf", merge: true, wantRaw: true},
		{name: "client-go protobuf-or-json gets merged JSON", target: proxytest.EventsTarget("involvedObject.name=build", ""), accept: "application/vnd.kubernetes.protobuf,application/json", merge: true, wantMember: true},
		{name: "partial object metadata passes through", target: proxytest.EventsTarget("involvedObject.name=build", ""), accept: "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", merge: true, wantRaw: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &eventsUpstream{memberCode: tt.memberCode, memberJSONOnly: tt.memberJSONOnly}
			srv := httptest.NewServer(up)
			defer srv.Close()
			res := &proxytest.Resolver{Cluster: proxytest.Cluster, Err: tt.resolveErr}
			m := metrics.New(prometheus.NewRegistry())
			p, _ := newTestProxy(t, proxy.Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: res, Metrics: m}, tt.merge)
			h := http.Header{"Authorization": {"Bearer caller-token"}}
			if tt.accept != "" {
				h.Set("Accept", tt.accept)
			}
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, http.MethodGet, tt.target, h, ""))
			if rec.Code != http.StatusOK {
				t.Fatalf("code = %d, body %s", rec.Code, rec.Body)
			}
			if got := rec.Header().Get("Warning"); got != tt.wantWarning {
				t.Errorf("Warning = %q, want %q", got, tt.wantWarning)
			}
			wantRoute := metrics.RoutePassthrough
			if tt.wantMember || tt.wantWarning != "" || tt.answeredByMerge {
				wantRoute = metrics.RouteEvents
			}
			if got := testutil.ToFloat64(m.RequestsTotal.WithLabelValues(wantRoute, "200")); got != 1 {
				t.Errorf("requests_total{route=%q,code=200} = %v, want 1", wantRoute, got)
			}
			if got, want := testutil.ToFloat64(m.MemberEventsUnavailableTotal.WithLabelValues(proxytest.Cluster)), map[bool]float64{true: 1}[tt.wantWarning != ""]; got != want {
				t.Errorf("member_events_unavailable_total = %v, want %v", got, want)
			}
			reqs := up.requests()
			for _, r := range reqs {
				if r.Header.Get("Authorization") != "Bearer caller-token" {
					t.Errorf("%s sent without the caller's credentials", r.URL.Path)
				}
			}
			if tt.wantRaw {
				if rec.Body.String() != "raw" || len(reqs) != 1 || reqs[0].URL.RawQuery != strings.SplitN(tt.target, "?", 2)[1] {
					t.Fatalf("not passed through unchanged: body %q, %d upstream requests", rec.Body, len(reqs))
				}
				return
			}
			var list corev1.EventList
			if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
				t.Fatalf("decoding %s: %v", rec.Body, err)
			}
			if list.ResourceVersion != karmadaRV {
				t.Errorf("list resourceVersion = %q, want karmada's %q", list.ResourceVersion, karmadaRV)
			}
			if rec.Header().Get("Audit-Id") != "a1" {
				t.Errorf("karmada-apiserver's headers not kept: %v", rec.Header())
			}
			var member *corev1.Event
			for i := range list.Items {
				if list.Items[i].Annotations[MemberClusterAnnotation] != "" {
					member = &list.Items[i]
				}
			}
			if len(list.Items) == 0 || list.Items[0].Name != "build.karmada" {
				t.Fatalf("karmada's events missing: %+v", list.Items)
			}
			if !tt.wantMember {
				if member != nil || len(list.Items) != 1 {
					t.Fatalf("unexpected member events: %+v", list.Items)
				}
				return
			}
			if member == nil || len(list.Items) != 2 {
				t.Fatalf("member event missing: %+v", list.Items)
			}
			if member.InvolvedObject.UID != templateUID {
				t.Errorf("involvedObject.uid = %q, want the template's %q", member.InvolvedObject.UID, templateUID)
			}
			if member.Name != proxytest.Cluster+".build.1" || member.ResourceVersion != karmadaRV || member.Annotations[MemberClusterAnnotation] != proxytest.Cluster {
				t.Errorf("member event metadata = %+v", member.ObjectMeta)
			}
			var sawMember bool
			for _, r := range reqs {
				if r.URL.Path == karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/events") {
					sawMember = true
					want := tt.wantMemberSelector
					if want == "" {
						want = "involvedObject.kind=Pod,involvedObject.name=build"
					}
					if got := r.URL.Query().Get("fieldSelector"); got != want {
						t.Errorf("member fieldSelector = %q, want %q", got, want)
					}
				}
			}
			if !sawMember {
				t.Error("member events were not read through the cluster proxy")
			}
		})
	}
}

// TestEventsPaginatedMergesOnLastPageOnly: the member's events, read while
// karmada-apiserver answers, are left out of a page that is not the last.
func TestEventsPaginatedMergesOnLastPageOnly(t *testing.T) {
	member := &eventsUpstream{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/ci/events" {
			member.ServeHTTP(w, r)
			return
		}
		proxytest.WriteJSON(w, http.StatusOK, &corev1.EventList{ListMeta: metav1.ListMeta{ResourceVersion: karmadaRV, Continue: "next"}})
	}))
	defer srv.Close()
	p, _ := newTestProxy(t, proxy.Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: &proxytest.Resolver{Cluster: proxytest.Cluster}}, true)
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, proxytest.RawRequest(t, http.MethodGet, proxytest.EventsTarget("involvedObject.name=build", "&limit=1"), nil, ""))
	var list corev1.EventList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || list.Continue != "next" || len(list.Items) != 0 || rec.Header().Get("Warning") != "" {
		t.Fatalf("code %d, list %+v, Warning %q, err %v", rec.Code, list, rec.Header().Get("Warning"), err)
	}
}

func TestEventsKarmadaErrorRelayed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxytest.WriteJSON(w, http.StatusForbidden, forbiddenStatus())
	}))
	defer srv.Close()
	p, _ := newTestProxy(t, proxy.Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: &proxytest.Resolver{Cluster: proxytest.Cluster}}, true)
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, proxytest.RawRequest(t, http.MethodGet, proxytest.EventsTarget("involvedObject.name=build", ""), nil, ""))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("code = %d, want 403", rec.Code)
	}
	if st := proxytest.DecodeStatus(t, rec.Header().Get("Content-Type"), rec.Body.Bytes()); st.Code != http.StatusForbidden {
		t.Fatalf("Status = %+v", st)
	}
}

// protobufStatus is st as kube-apiserver sends it to a client that asked
// for protobuf: the "k8s\x00" envelope, then the Unknown wrapper.
func protobufStatus(st *metav1.Status) []byte {
	var b bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(st, &b); err != nil {
		panic(err) // a Status always encodes
	}
	return b.Bytes()
}

func forbiddenStatus() *metav1.Status {
	st := apierrors.NewForbidden(podsResource, "build", nil).ErrStatus
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	return &st
}

// TestEventsNotMerged covers requests on the events path that must reach
// karmada-apiserver exactly as sent: writes, in either mode.
func TestEventsNotMerged(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		mode         proxy.AuthMode
	}{
		{"create event", http.MethodPost, proxy.AuthPassthrough},
		{"authorize mode create", http.MethodPost, proxy.AuthAuthorize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &proxytest.RecordingUpstream{}
			srv := httptest.NewServer(up)
			defer srv.Close()
			opts := proxy.Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: &proxytest.Resolver{Cluster: proxytest.Cluster}, AuthMode: tc.mode}
			if tc.mode == proxy.AuthAuthorize {
				opts.Authorizer = &proxytest.Authorizer{}
			}
			p, _ := newTestProxy(t, opts, true)
			target := proxytest.EventsTarget("involvedObject.name=build", "")
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, tc.method, target, http.Header{"Authorization": {"Bearer caller-token"}}, ""))
			reqs := up.Requests()
			if rec.Code != http.StatusOK || rec.Body.String() != "ok" || len(reqs) != 1 || reqs[0].RequestURI != target || reqs[0].Method != tc.method {
				t.Fatalf("not passed through: code %d body %q requests %+v", rec.Code, rec.Body, reqs)
			}
		})
	}
}

// TestMemberEventsReadAsProtobuf: the member's side of a merged list is
// asked for in protobuf first (decoding JSON was most of a merge's cost),
// and a member that answers JSON all the same is merged just as well.
func TestMemberEventsReadAsProtobuf(t *testing.T) {
	for _, jsonOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("member answers JSON only: %v", jsonOnly), func(t *testing.T) {
			up := &eventsUpstream{memberJSONOnly: jsonOnly}
			srv := httptest.NewServer(up)
			defer srv.Close()
			p, _ := newTestProxy(t, proxy.Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: &proxytest.Resolver{Cluster: proxytest.Cluster}}, true)
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, proxytest.RawRequest(t, http.MethodGet, proxytest.EventsTarget("involvedObject.name=build", ""), http.Header{"Authorization": {"Bearer caller-token"}}, ""))
			var list corev1.EventList
			if err := json.Unmarshal(rec.Body.Bytes(), &list); rec.Code != http.StatusOK || err != nil {
				t.Fatalf("merged list: %d %s (%v)", rec.Code, rec.Body, err)
			}
			if rec.Header().Get("Warning") != "" || len(list.Items) != 2 || list.Items[1].Name != proxytest.Cluster+".build.1" || list.Items[1].InvolvedObject.UID != templateUID {
				t.Fatalf("merged list lacks the member's event, rewritten: %+v (Warning %q)", list.Items, rec.Header().Get("Warning"))
			}
			memberPath := karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/events")
			for _, r := range up.requests() {
				if r.URL.Path == memberPath && r.Header.Get("Accept") != protobufOrJSON {
					t.Errorf("member's events asked for with Accept %q, want %q", r.Header.Get("Accept"), protobufOrJSON)
				}
			}
		})
	}
}

func TestStatusMessage(t *testing.T) {
	statusWith := func(msg string) *metav1.Status {
		return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 403, Message: msg}
	}
	jsonOf := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var eventList bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(&corev1.EventList{Items: []corev1.Event{{Message: "not a status"}}}, &eventList); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body []byte
		want string
	}{
		{"protobuf Status", protobufStatus(forbiddenStatus()), `pods "build" is forbidden: <nil>`},
		{"JSON Status", jsonOf(forbiddenStatus()), `pods "build" is forbidden: <nil>`},
		{"JSON error without kind", []byte(`{"message":"no kind here"}`), "no kind here"},
		{"protobuf of another kind", eventList.Bytes(), fmt.Sprintf("a %d-byte body that is not text", eventList.Len())},
		{"text", []byte("  <html>502 Bad Gateway</html>\n"), "<html>502 Bad Gateway</html>"},
		{"text with control bytes", []byte("bad\x00gateway"), "a 11-byte body that is not text"},
		{"control characters in the message", protobufStatus(statusWith("line one\nline\ttwo\x07\x1b[31m")), "line one line two  [31m"},
		{"invalid UTF-8 in the message", jsonOf(statusWith("caf\xe9")), "caf\uFFFD"},
		{"long message", jsonOf(statusWith(strings.Repeat("x", 3*apiresponse.MaxMessageBytes))), strings.Repeat("x", apiresponse.MaxMessageBytes)},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := apiresponse.Message(tt.body); got != tt.want {
				t.Errorf("Message = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestWarningHeader: whatever the text, the header is one RFC 9111 warning
// that a client's parser (client-go's) reads back as the printable text.
func TestWarningHeader(t *testing.T) {
	for _, text := range []string{
		`member events from m unavailable: HTTP 403: pods "build" is forbidden`,
		`back\slash and "quotes"`,
		"new\nline, NUL \x00, escape \x1b, DEL \x7f",
		"invalid \xff UTF-8",
		"",
	} {
		h := warningHeader(text)
		got, rest, err := utilnet.ParseWarningHeader(h)
		if err != nil || rest != "" {
			t.Fatalf("warningHeader(%q) = %q: %v, left %q", text, h, err, rest)
		}
		if got.Code != 299 || got.Agent != "-" || got.Text != apiresponse.Printable(text) || strings.ContainsFunc(got.Text, unicode.IsControl) {
			t.Errorf("warningHeader(%q) = %q parses as %+v, want text %q", text, h, got, apiresponse.Printable(text))
		}
	}
}

// TestEventsMemberHangs: a member that sends its list's headers and then
// hangs (the header deadline is past by then) costs the merged list
// MemberTimeout, not the client's patience: karmada-apiserver's events come
// back with a Warning naming the member. Without the deadline in
// listMemberEvents the list waits for the member until the client gives up.
func TestEventsMemberHangs(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	karmadaSide := &eventsUpstream{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/events") {
			karmadaSide.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	p, mg := newTestProxy(t, proxy.Options{Upstream: &rest.Config{Host: srv.URL}, Resolver: &proxytest.Resolver{Cluster: proxytest.Cluster}}, true)
	mg.memberTimeout = 200 * time.Millisecond
	rec := httptest.NewRecorder()
	start := time.Now()
	p.ServeHTTP(rec, proxytest.RawRequest(t, http.MethodGet, proxytest.EventsTarget("involvedObject.name=build", ""), nil, ""))
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("merged list took %s with a 200ms member timeout", took)
	}
	var list corev1.EventList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || rec.Code != http.StatusOK || len(list.Items) != 1 {
		t.Fatalf("code %d, list %+v, err %v: want karmada-apiserver's one event", rec.Code, list, err)
	}
	if w := rec.Header().Get("Warning"); !strings.Contains(w, proxytest.Cluster) {
		t.Errorf("Warning %q does not name the member %q", w, proxytest.Cluster)
	}
}
