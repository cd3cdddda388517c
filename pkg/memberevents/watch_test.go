package memberevents

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// Lines a test feeds into a fake watch that are not events.
const (
	cutStream = "CUT" // abort the response mid-stream
	endWatch  = "END" // end this watch cleanly
	goneWatch = "GONE"
)

// fakeWatchAPI is karmada-apiserver with the cluster proxies of member1
// and member2 behind it, serving the pod template "build" and events lists
// and watches whose streams the test feeds line by line.
type fakeWatchAPI struct {
	karmadaWatch chan string

	mu           sync.Mutex
	reqs         []*http.Request
	karmadaItems []corev1.Event
	karmadaCode  map[string]int // "list" or "watch" -> refusal code
	members      map[string]*fakeMember
}

type fakeMember struct {
	items  []corev1.Event
	listRV string
	code   int // refuse lists and watches with it; 0 serves them
	watch  chan string
	// holdWatch, when set, holds a watch's response headers until it is
	// closed or the request ends: a watch still being opened.
	holdWatch chan struct{}
}

func newFakeWatchAPI() *fakeWatchAPI {
	return &fakeWatchAPI{
		karmadaWatch: make(chan string, 16),
		karmadaItems: []corev1.Event{testEvent("build.karmada", "4700", templateUID, "Scheduled")},
		karmadaCode:  map[string]int{},
		members: map[string]*fakeMember{
			"member1": {items: []corev1.Event{testEvent("build.1", "98", memberUID, "Pulling")}, listRV: "99", watch: make(chan string, 16)},
			"member2": {items: []corev1.Event{testEvent("build.9", "7", "member2-uid", "Started")}, listRV: "8", watch: make(chan string, 16)},
		},
	}
}

func testEvent(name, rv, uid, reason string) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "ci", ResourceVersion: rv, UID: types.UID("uid-" + name)},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "build", Namespace: "ci", UID: types.UID(uid)},
		Reason:         reason, Type: corev1.EventTypeNormal,
	}
}

// line is one JSON watch event as an apiserver writes it.
func line(typ string, obj runtime.Object) string {
	raw, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}})
	return string(b)
}

func eventLine(typ string, ev corev1.Event) string {
	ev.TypeMeta = metav1.TypeMeta{Kind: "Event", APIVersion: "v1"}
	return line(typ, &ev)
}

func (a *fakeWatchAPI) member(name string) *fakeMember {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.members[name]
}

func (a *fakeWatchAPI) set(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f()
}

// requests returns the upstream requests to path so far.
func (a *fakeWatchAPI) requests(path string) []*http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*http.Request
	for _, r := range a.reqs {
		if r.URL.Path == path {
			out = append(out, r)
		}
	}
	return out
}

func (a *fakeWatchAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.reqs = append(a.reqs, r.Clone(context.Background()))
	a.mu.Unlock()
	isWatch := r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
	if r.URL.Path == "/api/v1/namespaces/ci/pods/build" {
		proxytest.WriteJSON(w, http.StatusOK, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "ci", UID: templateUID, ResourceVersion: "4600"}})
		return
	}
	if r.URL.Path == "/api/v1/namespaces/ci/events" {
		a.mu.Lock()
		code, items := a.karmadaCode[map[bool]string{false: "list", true: "watch"}[isWatch]], a.karmadaItems
		a.mu.Unlock()
		serveFakeEvents(w, r, isWatch, code, &corev1.EventList{ListMeta: metav1.ListMeta{ResourceVersion: karmadaRV}, Items: items}, a.karmadaWatch)
		return
	}
	for name, m := range a.members {
		if r.URL.Path == karmada.ClusterProxyPath(name, "/api/v1/namespaces/ci/events") {
			a.mu.Lock()
			code, list, hold := m.code, &corev1.EventList{ListMeta: metav1.ListMeta{ResourceVersion: m.listRV}, Items: m.items}, m.holdWatch
			a.mu.Unlock()
			if isWatch && hold != nil {
				select {
				case <-hold:
				case <-r.Context().Done():
					return
				}
			}
			serveFakeEvents(w, r, isWatch, code, list, m.watch)
			return
		}
	}
	http.NotFound(w, r)
}

// serveFakeEvents answers an events list with list, a watch with lines, or
// either with a refusal when code is not 0.
func serveFakeEvents(w http.ResponseWriter, r *http.Request, isWatch bool, code int, list *corev1.EventList, lines <-chan string) {
	switch {
	case code != 0:
		proxytest.WriteJSON(w, code, forbiddenStatus())
	case isWatch:
		streamLines(w, r, lines)
	default:
		proxytest.WriteJSON(w, http.StatusOK, list)
	}
}

// streamLines writes each line fed to lines as it comes, until endWatch,
// cutStream or the request ends.
func streamLines(w http.ResponseWriter, r *http.Request, lines <-chan string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Audit-Id", "watch-1")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case l := <-lines:
			switch l {
			case endWatch:
				return
			case cutStream:
				panic(http.ErrAbortHandler)
			case goneWatch:
				st := apierrors.NewResourceExpired("too old resource version").ErrStatus
				l = line("ERROR", &st)
			}
			_, _ = io.WriteString(w, l+"\n")
			w.(http.Flusher).Flush()
		}
	}
}

// movingResolver places "build" wherever the test says, or nowhere.
type movingResolver struct {
	mu      sync.Mutex
	cluster string
}

func (m *movingResolver) Resolve(context.Context, string, string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cluster == "" {
		return "", apierrors.NewServiceUnavailable("pod ci/build is not placed on any member cluster yet")
	}
	return m.cluster, nil
}

func (m *movingResolver) place(cluster string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cluster = cluster
}

// watchGateway serves a proxy with fast event-watch timing in front of api.
func watchGateway(t *testing.T, api *fakeWatchAPI, res Resolver, opts proxy.Options) (*httptest.Server, *Merger) {
	t.Helper()
	up := httptest.NewServer(api)
	t.Cleanup(up.Close)
	if opts.Upstream == nil {
		opts.Upstream = &rest.Config{}
	}
	opts.Upstream.Host = up.URL
	opts.Resolver = res
	p, mg := newTestProxy(t, opts, true)
	mg.eventWatchTiming = eventWatchTiming{resolvePoll: 10 * time.Millisecond, placementCheck: 10 * time.Millisecond, retryBase: 10 * time.Millisecond, retryCap: 50 * time.Millisecond}
	gw := httptest.NewServer(p)
	t.Cleanup(gw.Close)
	return gw, mg
}

// watchClient reads a merged watch as client-go would.
type watchClient struct {
	res    *http.Response
	events chan watchResult
}

type watchResult struct {
	typ   string
	event corev1.Event
	meta  metav1.ObjectMeta // of non-events (bookmarks)
	err   error
}

func openWatch(t *testing.T, gw *httptest.Server, query string) *watchClient {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, gw.URL+"/api/v1/namespaces/ci/events?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer caller-token")
	req.Header.Set("Accept", "application/json")
	res, err := gw.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	c := &watchClient{res: res, events: make(chan watchResult, 64)}
	if res.StatusCode != http.StatusOK {
		return c
	}
	go func() {
		defer close(c.events)
		dec := json.NewDecoder(res.Body)
		for {
			var we metav1.WatchEvent
			if err := dec.Decode(&we); err != nil {
				if !errors.Is(err, io.EOF) {
					c.events <- watchResult{err: err}
				}
				return
			}
			var r watchResult
			r.typ = we.Type
			var tm metav1.TypeMeta
			_ = json.Unmarshal(we.Object.Raw, &tm)
			if tm.Kind != "Event" || tm.APIVersion != "v1" {
				r.err = errors.New("watch object without kind Event, apiVersion v1: " + string(we.Object.Raw))
			}
			_ = json.Unmarshal(we.Object.Raw, &r.event)
			r.meta = r.event.ObjectMeta
			c.events <- r
		}
	}()
	return c
}

// next returns the next event, failing the test if none comes in time.
func (c *watchClient) next(t *testing.T) watchResult {
	t.Helper()
	select {
	case r, ok := <-c.events:
		if !ok {
			t.Fatal("the watch ended; want another event")
		}
		if r.err != nil {
			t.Fatalf("reading the watch: %v", r.err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return watchResult{}
}

// ended reports how the watch ended: nil for a clean end.
func (c *watchClient) ended(t *testing.T) error {
	t.Helper()
	select {
	case r, ok := <-c.events:
		if !ok {
			return nil
		}
		if r.err == nil {
			t.Fatalf("got %s %s, want the end of the watch", r.typ, r.event.Name)
		}
		return r.err
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end within 10s")
	}
	return nil
}

func wantEvent(t *testing.T, got watchResult, typ, name, rv string) {
	t.Helper()
	if got.typ != typ || got.event.Name != name || got.event.ResourceVersion != rv {
		t.Fatalf("got %s %s rv %s, want %s %s rv %s", got.typ, got.event.Name, got.event.ResourceVersion, typ, name, rv)
	}
}

// wantMemberEvent checks a merged member event reads as the template's.
func wantMemberEvent(t *testing.T, got watchResult, typ, cluster, name, rv string) {
	t.Helper()
	wantEvent(t, got, typ, cluster+"."+name, rv)
	if got.event.InvolvedObject.UID != templateUID || got.event.Annotations[MemberClusterAnnotation] != cluster {
		t.Fatalf("member event %s: involvedObject.uid %s, annotations %v", got.event.Name, got.event.InvolvedObject.UID, got.event.Annotations)
	}
}

func TestEventsWatchMergesMemberEvents(t *testing.T) {
	api := newFakeWatchAPI()
	m := metrics.New(prometheus.NewRegistry())
	gw, _ := watchGateway(t, api, &movingResolver{cluster: "member1"}, proxy.Options{Metrics: m})
	// GitLab Runner's pod events watch: no resourceVersion.
	w := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true")
	if w.res.StatusCode != http.StatusOK || w.res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", w.res.StatusCode, w.res.Header.Get("Content-Type"))
	}

	// The state as of karmada's list: its events, then the member's, stamped
	// with the list's resourceVersion.
	wantEvent(t, w.next(t), "ADDED", "build.karmada", "4700")
	wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.1", karmadaRV)

	api.karmadaWatch <- eventLine("ADDED", testEvent("build.karmada2", "4720", templateUID, "Bound"))
	wantEvent(t, w.next(t), "ADDED", "build.karmada2", "4720")
	api.member("member1").watch <- eventLine("MODIFIED", testEvent("build.1", "120", memberUID, "Pulling"))
	wantMemberEvent(t, w.next(t), "MODIFIED", "member1", "build.1", "4720")

	api.karmadaWatch <- endWatch
	if err := w.ended(t); err != nil {
		t.Fatalf("karmada's watch ended cleanly, the merged one with %v", err)
	}

	kw := api.requests("/api/v1/namespaces/ci/events")
	if len(kw) != 2 || kw[0].URL.Query().Get("watch") != "" || kw[1].URL.Query().Get("resourceVersion") != karmadaRV || kw[1].URL.Query().Get("watch") != "true" {
		t.Errorf("karmada-apiserver requests: want a list, then a watch from its resourceVersion; got %v", urls(kw))
	}
	mw := api.requests(karmada.ClusterProxyPath("member1", "/api/v1/namespaces/ci/events"))
	if len(mw) < 2 || mw[1].URL.Query().Get("resourceVersion") != "99" || mw[1].URL.Query().Get("fieldSelector") != "involvedObject.kind=Pod,involvedObject.name=build" {
		t.Errorf("member requests: want a list, then a watch from its resourceVersion; got %v", urls(mw))
	}
	for _, r := range append(kw, mw...) {
		if r.Header.Get("Authorization") != "Bearer caller-token" {
			t.Errorf("%s sent without the caller's credentials", r.URL)
		}
	}
	if got := testutil.ToFloat64(m.RequestsTotal.WithLabelValues(metrics.RouteEvents, "200")); got != 1 {
		t.Errorf("requests_total{route=events,code=200} = %v, want 1", got)
	}
}

// listEvents lists build's events through gw with header and decodes the
// answer, which must be 200.
func listEvents(t *testing.T, gw *httptest.Server, header http.Header) (*corev1.EventList, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, gw.URL+proxytest.EventsTarget("involvedObject.name=build", ""), nil)
	req.Header = header
	res, err := gw.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var list corev1.EventList
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("list events: status %d, %v", res.StatusCode, err)
	}
	return &list, res
}

func urls(reqs []*http.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.URL.String())
	}
	return out
}

// TestEventsWatchResumes: a watch from the resourceVersion of a merged list
// continues the member's events from where that list stood; one from a
// resourceVersion this gateway never handed out replays them.
func TestEventsWatchResumes(t *testing.T) {
	api := newFakeWatchAPI()
	gw, _ := watchGateway(t, api, &movingResolver{cluster: "member1"}, proxy.Options{})
	list, _ := listEvents(t, gw, http.Header{})
	if len(list.Items) != 2 || list.ResourceVersion != karmadaRV {
		t.Fatalf("merged list: %+v", list)
	}
	memberPath := karmada.ClusterProxyPath("member1", "/api/v1/namespaces/ci/events")
	listsBefore := len(api.requests(memberPath))

	w := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true&resourceVersion="+karmadaRV)
	api.member("member1").watch <- eventLine("ADDED", testEvent("build.2", "150", memberUID, "Pulled"))
	wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.2", karmadaRV)
	reqs := api.requests(memberPath)[listsBefore:]
	if len(reqs) != 1 || reqs[0].URL.Query().Get("watch") != "true" || reqs[0].URL.Query().Get("resourceVersion") != "99" {
		t.Fatalf("member requests after the list: want one watch from the list's member resourceVersion 99, got %v", urls(reqs))
	}
	if kw := api.requests("/api/v1/namespaces/ci/events"); kw[len(kw)-1].URL.Query().Get("resourceVersion") != karmadaRV {
		t.Fatalf("karmada watch not resumed from %s: %v", karmadaRV, urls(kw))
	}

	// Unknown to this gateway: the member's events are replayed, not lost.
	w2 := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true&resourceVersion=4000")
	wantMemberEvent(t, w2.next(t), "ADDED", "member1", "build.1", "4000")
}

// TestEventsWatchFollowsPlacement: executors open the events watch right
// after creating the pod, before Karmada places it; member events join when
// it is placed, and follow it to another cluster. Also when the pod moves
// while the merge is still opening its watch on the old member (its
// response headers held): that watch is given up for the new member's
// events without a Warning that the old member's events are unavailable,
// since a move is not an outage. (CI's load once made the move's check
// cancel such a request, and its "context canceled" was reported.)
func TestEventsWatchFollowsPlacement(t *testing.T) {
	for _, opening := range []bool{false, true} {
		t.Run(map[bool]string{false: "member watch open", true: "member watch still opening"}[opening], func(t *testing.T) {
			api := newFakeWatchAPI()
			if opening {
				api.members["member1"].holdWatch = make(chan struct{}) // never answered
			}
			res := &movingResolver{}
			gw, _ := watchGateway(t, api, res, proxy.Options{})
			w := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true")
			wantEvent(t, w.next(t), "ADDED", "build.karmada", "4700")

			res.place("member1")
			wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.1", karmadaRV)
			if opening {
				if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
					return memberWatches(api, "member1") > 0, nil
				}); err != nil {
					t.Fatalf("the merge never opened member1's watch: %v", err)
				}
			}

			res.place("member2")
			wantMemberEvent(t, w.next(t), "ADDED", "member2", "build.9", karmadaRV)
			api.member("member2").watch <- eventLine("ADDED", testEvent("build.10", "9", "member2-uid", "Started"))
			wantMemberEvent(t, w.next(t), "ADDED", "member2", "build.10", karmadaRV)
		})
	}
}

// memberWatches counts the watches of namespace ci's events the gateway
// opened in cluster through the cluster proxy.
func memberWatches(api *fakeWatchAPI, cluster string) int {
	n := 0
	for _, r := range api.requests(karmada.ClusterProxyPath(cluster, "/api/v1/namespaces/ci/events")) {
		if r.URL.Query().Get("watch") == "true" {
			n++
		}
	}
	return n
}

// TestEventsWatchReportsMemberFailure: a member that cannot be read is
// reported in the stream as a Warning event about the pod, once per outage,
// and its events follow when it recovers.
func TestEventsWatchReportsMemberFailure(t *testing.T) {
	api := newFakeWatchAPI()
	api.member("member1").code = http.StatusForbidden
	m := metrics.New(prometheus.NewRegistry())
	gw, _ := watchGateway(t, api, &movingResolver{cluster: "member1"}, proxy.Options{Metrics: m})
	w := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true")
	wantEvent(t, w.next(t), "ADDED", "build.karmada", "4700")

	got := w.next(t)
	ev := got.event
	if got.typ != "ADDED" || ev.Type != corev1.EventTypeWarning || ev.Reason != memberUnavailableReason ||
		!strings.Contains(ev.Message, "member events from member1 unavailable: HTTP 403") ||
		ev.InvolvedObject.Name != "build" || ev.InvolvedObject.UID != templateUID || ev.ResourceVersion != karmadaRV {
		t.Fatalf("want a Warning event reporting member1, got %s %+v", got.typ, ev)
	}

	api.set(func() { api.members["member1"].code = 0 })
	wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.1", karmadaRV)

	// A second outage updates the same Warning event.
	api.set(func() { api.members["member1"].code = http.StatusServiceUnavailable })
	api.member("member1").watch <- endWatch
	got = w.next(t)
	if got.typ != "MODIFIED" || got.event.Reason != memberUnavailableReason || got.event.Count != 2 || got.event.UID != ev.UID {
		t.Fatalf("want the Warning event MODIFIED with count 2, got %s %+v", got.typ, got.event)
	}
	// Retries of the refused watch are the same outage: no other count,
	// and so no other Warning (reportFailure sends one per count).
	seen := memberWatches(api, "member1")
	if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return memberWatches(api, "member1") >= seen+2, nil
	}); err != nil {
		t.Fatalf("the member watch was not retried: %v", err)
	}
	if n := testutil.ToFloat64(m.MemberEventsUnavailableTotal.WithLabelValues("member1")); n != 2 {
		t.Errorf("member_events_unavailable_total{cluster=member1} = %v after two refused retries, want 2 (one per outage)", n)
	}
}

// TestEventsWatchRelistsWhenMemberForgets: a member watch answered 410 is
// followed by a list that sends only what changed.
func TestEventsWatchRelistsWhenMemberForgets(t *testing.T) {
	api := newFakeWatchAPI()
	gw, _ := watchGateway(t, api, &movingResolver{cluster: "member1"}, proxy.Options{})
	w := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true")
	wantEvent(t, w.next(t), "ADDED", "build.karmada", "4700")
	wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.1", karmadaRV)

	api.set(func() {
		m := api.members["member1"]
		m.items = []corev1.Event{m.items[0], testEvent("build.3", "300", memberUID, "Killing")}
		m.listRV = "301"
	})
	api.member("member1").watch <- goneWatch
	wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.3", karmadaRV)
	api.member("member1").watch <- eventLine("ADDED", testEvent("build.4", "302", memberUID, "Killing"))
	wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.4", karmadaRV)
	mw := api.requests(karmada.ClusterProxyPath("member1", "/api/v1/namespaces/ci/events"))
	if last := mw[len(mw)-1].URL.Query(); last.Get("resourceVersion") != "301" {
		t.Errorf("member watch after the relist from %q, want 301", last.Get("resourceVersion"))
	}
}

// TestEventsWatchListInitialEvents: a WatchList (client-go informers) gets
// the member's initial events before the bookmark that ends the initial
// state, stamped with its resourceVersion.
func TestEventsWatchListInitialEvents(t *testing.T) {
	api := newFakeWatchAPI()
	gw, _ := watchGateway(t, api, &movingResolver{cluster: "member1"}, proxy.Options{})
	const q = "fieldSelector=involvedObject.name%3Dbuild&watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
	w := openWatch(t, gw, q)
	api.karmadaWatch <- eventLine("ADDED", testEvent("build.karmada", "4700", templateUID, "Scheduled"))
	bookmark := &corev1.Event{
		TypeMeta:   metav1.TypeMeta{Kind: "Event", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: "4800", Annotations: map[string]string{initialEventsEndAnnotation: "true"}},
	}
	api.karmadaWatch <- line("BOOKMARK", bookmark)

	wantEvent(t, w.next(t), "ADDED", "build.karmada", "4700")
	wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.1", "4800")
	if got := w.next(t); got.typ != "BOOKMARK" || got.meta.ResourceVersion != "4800" {
		t.Fatalf("want the initial-events-end bookmark after the member's initial events, got %s %+v", got.typ, got.meta)
	}
	kw := api.requests("/api/v1/namespaces/ci/events")
	if len(kw) != 1 || kw[0].URL.RawQuery != q {
		t.Errorf("karmada-apiserver requests: want the WatchList as sent, got %v", urls(kw))
	}
}

// TestEventsWatchCutIsReported: karmada's stream cut mid-way reaches the
// client as an aborted response, never as a clean end.
func TestEventsWatchCutIsReported(t *testing.T) {
	api := newFakeWatchAPI()
	gw, _ := watchGateway(t, api, &movingResolver{cluster: "member1"}, proxy.Options{})
	w := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true")
	wantEvent(t, w.next(t), "ADDED", "build.karmada", "4700")
	api.karmadaWatch <- cutStream
	var err error
	for err == nil {
		select {
		case r, ok := <-w.events:
			if !ok {
				t.Fatal("the merged watch ended cleanly after karmada's stream was cut")
			}
			err = r.err
		case <-time.After(10 * time.Second):
			t.Fatal("the merged watch did not end within 10s")
		}
	}
}

// TestEventsWatchRefusalsRelayed: karmada-apiserver's refusal of the list
// that starts a watch, or of the watch, reaches the client as it came.
func TestEventsWatchRefusalsRelayed(t *testing.T) {
	for _, tc := range []struct{ refuse, query string }{
		{"list", "fieldSelector=involvedObject.name%3Dbuild&watch=true"},
		{"watch", "fieldSelector=involvedObject.name%3Dbuild&watch=true&resourceVersion=4000"},
	} {
		t.Run(tc.refuse, func(t *testing.T) {
			api := newFakeWatchAPI()
			api.karmadaCode[tc.refuse] = http.StatusForbidden
			gw, _ := watchGateway(t, api, &movingResolver{cluster: "member1"}, proxy.Options{})
			w := openWatch(t, gw, tc.query)
			body, _ := io.ReadAll(w.res.Body)
			if w.res.StatusCode != http.StatusForbidden {
				t.Fatalf("status %d, want 403; body %s", w.res.StatusCode, body)
			}
			if st := proxytest.DecodeStatus(t, w.res.Header.Get("Content-Type"), body); st.Reason != metav1.StatusReasonForbidden {
				t.Fatalf("Status = %+v", st)
			}
			if n := len(api.requests(karmada.ClusterProxyPath("member1", "/api/v1/namespaces/ci/events"))); n != 0 {
				t.Errorf("%d member requests for a refused watch", n)
			}
		})
	}
}

// TestEventsWatchHoldsAStreamSlot: merged watches count against the stream
// limits like any watch.
func TestEventsWatchHoldsAStreamSlot(t *testing.T) {
	api := newFakeWatchAPI()
	gw, _ := watchGateway(t, api, &movingResolver{cluster: "member1"}, proxy.Options{MaxStreamsPerClient: 1})
	w := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true")
	wantEvent(t, w.next(t), "ADDED", "build.karmada", "4700")
	second := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true")
	if second.res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second watch: status %d, want 429", second.res.StatusCode)
	}
}

// TestEventsAuthorizeMode: in authorize mode karmada-apiserver's events are
// read as passthrough sends the request (the caller's token), and the
// member's with the gateway's identity once the Authorizer allows the caller
// to list or watch events in the namespace; a denial is reported like any
// member that cannot be read.
func TestEventsAuthorizeMode(t *testing.T) {
	memberPath := karmada.ClusterProxyPath("member1", "/api/v1/namespaces/ci/events")
	gatewayFor := func(t *testing.T, authz *proxytest.Authorizer) (*httptest.Server, *fakeWatchAPI) {
		api := newFakeWatchAPI()
		gw, _ := watchGateway(t, api, &movingResolver{cluster: "member1"}, proxy.Options{
			Upstream: &rest.Config{BearerToken: "gateway-token"}, AuthMode: proxy.AuthAuthorize, Authorizer: authz,
		})
		return gw, api
	}
	checkIdentities := func(t *testing.T, api *fakeWatchAPI) {
		t.Helper()
		for _, r := range api.requests("/api/v1/namespaces/ci/events") {
			if r.Header.Get("Authorization") != "Bearer caller-token" {
				t.Errorf("karmada-apiserver read %s with Authorization %q, want the caller's", r.URL, r.Header.Get("Authorization"))
			}
		}
		for _, r := range api.requests(memberPath) {
			if r.Header.Get("Authorization") != "Bearer gateway-token" || len(r.Header.Values("Impersonate-User")) != 0 {
				t.Errorf("member read %s with Authorization %q, Impersonate-User %v; want the gateway's identity alone", r.URL, r.Header.Get("Authorization"), r.Header.Values("Impersonate-User"))
			}
		}
	}

	t.Run("list allowed", func(t *testing.T) {
		authz := &proxytest.Authorizer{Caller: identity.Caller{Name: "runner"}}
		gw, api := gatewayFor(t, authz)
		list, _ := listEvents(t, gw, http.Header{"Authorization": {"Bearer caller-token"}, "Impersonate-User": {"someone-else"}})
		if len(list.Items) != 2 || list.Items[1].Annotations[MemberClusterAnnotation] != "member1" {
			t.Fatalf("want karmada's and the member's event: %+v", list.Items)
		}
		if len(api.requests(memberPath)) != 1 {
			t.Fatalf("member requests: %v", urls(api.requests(memberPath)))
		}
		checkIdentities(t, api)
		want := []identity.ResourceRequest{{Namespace: "ci", Verb: "list", Resource: "events"}}
		if got := authz.Authorized(); len(got) != 1 || got[0] != want[0] {
			t.Errorf("authorized %+v, want %+v", got, want)
		}
	})

	t.Run("list denied", func(t *testing.T) {
		deny := apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", errors.New(`User "runner" cannot list resource "events"`))
		gw, api := gatewayFor(t, &proxytest.Authorizer{Deny: deny})
		_, res := listEvents(t, gw, http.Header{"Authorization": {"Bearer caller-token"}})
		if w := res.Header.Get("Warning"); res.StatusCode != http.StatusOK || !strings.Contains(w, "member events from member1 unavailable") || !strings.Contains(w, "cannot list resource") {
			t.Fatalf("status %d, Warning %q", res.StatusCode, w)
		}
		if n := len(api.requests(memberPath)); n != 0 {
			t.Fatalf("%d member requests after a denial", n)
		}
	})

	t.Run("unplaced pod, certificate caller", func(t *testing.T) {
		// The caller is authenticated once: the karmada-only answer reuses it.
		authz := &proxytest.Authorizer{Caller: identity.Caller{Name: "alice"}}
		api := newFakeWatchAPI()
		up := httptest.NewServer(api)
		defer up.Close()
		p, _ := newTestProxy(t, proxy.Options{
			Upstream: &rest.Config{Host: up.URL, BearerToken: "gateway-token"}, Resolver: &movingResolver{},
			AuthMode: proxy.AuthAuthorize, Authorizer: authz,
		}, true)
		req := proxytest.RawRequest(t, http.MethodGet, proxytest.EventsTarget("involvedObject.name=build", ""), nil, "")
		req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "alice"}}}}
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		reqs := api.requests("/api/v1/namespaces/ci/events")
		if rec.Code != http.StatusOK || len(reqs) != 1 || reqs[0].Header.Get("Impersonate-User") != "alice" || reqs[0].Header.Get("Authorization") != "Bearer gateway-token" {
			t.Fatalf("code %d, karmada requests %v", rec.Code, reqs)
		}
		if authz.Authed() != 1 {
			t.Errorf("the caller was authenticated %d times, want once", authz.Authed())
		}
	})

	t.Run("watch allowed", func(t *testing.T) {
		authz := &proxytest.Authorizer{Caller: identity.Caller{Name: "runner"}}
		gw, api := gatewayFor(t, authz)
		w := openWatch(t, gw, "fieldSelector=involvedObject.name%3Dbuild&watch=true")
		wantEvent(t, w.next(t), "ADDED", "build.karmada", "4700")
		wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.1", karmadaRV)
		api.member("member1").watch <- eventLine("ADDED", testEvent("build.2", "150", memberUID, "Pulled"))
		wantMemberEvent(t, w.next(t), "ADDED", "member1", "build.2", karmadaRV)
		checkIdentities(t, api)
		var verbs []string
		for _, rr := range authz.Authorized() {
			verbs = append(verbs, rr.Verb)
		}
		if strings.Join(verbs, ",") != "list,watch" {
			t.Errorf("authorized verbs %v, want list then watch on events", verbs)
		}
	})
}
