package memberevents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
)

// eventWatchTiming tunes merged event watches; tests shorten it.
type eventWatchTiming struct {
	// resolvePoll is how often a watch of a pod that is not placed yet asks
	// the (in-memory) resolver again. Executors start their events watch
	// right after creating the pod, before Karmada schedules it.
	resolvePoll time.Duration
	// placementCheck is how often a running member watch checks that the
	// pod still resolves to its cluster (failover).
	placementCheck time.Duration
	// retryBase and retryCap bound the backoff between attempts to reach a
	// member.
	retryBase, retryCap time.Duration
}

var defaultEventWatchTiming = eventWatchTiming{
	resolvePoll:    2 * time.Second,
	placementCheck: 30 * time.Second,
	retryBase:      time.Second,
	retryCap:       30 * time.Second,
}

const (
	// cursorTTL and maxCursors bound eventCursors.
	cursorTTL  = 10 * time.Minute
	maxCursors = 10000
	// initialEventsEndAnnotation marks the bookmark that ends a WatchList's
	// initial state.
	initialEventsEndAnnotation = "k8s.io/initial-events-end"
	// memberUnavailableReason is the reason of the Warning event a merged
	// watch carries while the member's events cannot be read.
	memberUnavailableReason = "MemberEventsUnavailable"
)

// memberCursor is where a member's events stood: a resourceVersion of that
// member, from which its watch continues.
type memberCursor struct {
	cluster         string
	resourceVersion string
}

// eventCursors remembers, for each karmada-apiserver resourceVersion a
// merged list or watch handed out for a pod, where that pod's member events
// stood just before the first member event stamped with it, so a watch
// resumed from that resourceVersion on this replica continues the member's
// events without losing any (it may repeat some). A resourceVersion it does
// not know (another replica, expired) resumes by replaying the member's
// current events as ADDED: repeats, never losses.
type eventCursors struct {
	cache *cache.LRUExpireCache
}

func newEventCursors() *eventCursors {
	return &eventCursors{cache: cache.NewLRUExpireCache(maxCursors)}
}

func cursorKey(er eventsRequest, karmadaRV string) string {
	return er.Namespace + "/" + er.Pod + "@" + karmadaRV
}

// remember records c for karmadaRV unless a cursor is already known for it:
// the earliest is the one that loses nothing.
func (e *eventCursors) remember(er eventsRequest, karmadaRV string, c memberCursor) {
	if karmadaRV == "" || c.resourceVersion == "" {
		return
	}
	key := cursorKey(er, karmadaRV)
	if _, ok := e.cache.Get(key); !ok {
		e.cache.Add(key, c, cursorTTL)
	}
}

func (e *eventCursors) lookup(er eventsRequest, karmadaRV string) (memberCursor, bool) {
	v, ok := e.cache.Get(cursorKey(er, karmadaRV))
	if !ok {
		return memberCursor{}, false
	}
	return v.(memberCursor), true
}

// serveEventsWatch answers a watch of one pod's events with
// karmada-apiserver's watch and the member cluster's events merged into one
// JSON watch stream.
//
// resourceVersion semantics: every event carries a karmada-apiserver
// resourceVersion (member events the latest one the stream has passed), so
// a client may hand any of them back to karmada-apiserver. Without a
// resourceVersion (or "0") the gateway lists karmada-apiserver first and
// sends the list as ADDED events, then watches from the list's version:
// what kube-apiserver does for such a watch. Member events start with the
// member's current events as ADDED. With a resourceVersion, karmada's
// events continue from it and member events from eventCursors. A WatchList
// (sendInitialEvents) gets the member's initial events before the
// initial-events-end bookmark. The merged watch ends when karmada's does
// (timeoutSeconds included); member watches are re-established behind it,
// and a member that cannot be read is reported in the stream as a Warning
// event with reason MemberEventsUnavailable.
func (mg *Merger) serveEventsWatch(w http.ResponseWriter, em *eventsMerge) {
	r, er := em.r, em.eventsRequest
	ctx := r.Context()
	if !mg.gw.HoldStream(w, r) {
		return
	}

	// The watch goes to karmada-apiserver as sent unless the gateway has to
	// pin the resourceVersion of the list it starts from.
	rawQuery := r.URL.RawQuery
	var initial []corev1.Event
	startRV := er.ResourceVersion
	if !er.SendInitialEvents && (startRV == "" || startRV == "0") {
		watchQuery := r.URL.Query()
		list, _ := mg.listKarmadaEvents(w, em, url.Values{"fieldSelector": watchQuery["fieldSelector"]}.Encode())
		if list == nil {
			return
		}
		initial, startRV = list.Items, list.ResourceVersion
		watchQuery.Set("resourceVersion", startRV)
		rawQuery = watchQuery.Encode()
	}
	res, err := mg.gw.Get(ctx, r, r.URL.EscapedPath()+"?"+rawQuery, "application/json")
	if err != nil {
		mg.gw.Fail(w, r, err)
		return
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, maxEventListBytes))
		apiresponse.Relay(w, res, body)
		return
	}

	m := &mergedWatch{mg: mg, w: w, er: er, karmadaRV: startRV}
	var start memberCursor
	if !er.SendInitialEvents && er.ResourceVersion != "" && er.ResourceVersion != "0" {
		if c, ok := mg.eventCursors.lookup(er, er.ResourceVersion); ok {
			start = c
			m.memberCursor = c
		}
	}
	apiresponse.CopyHeader(w.Header(), res.Header)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if !m.flush() { // the client learns the watch is open even with nothing to send
		return
	}
	for i := range initial {
		if !m.write(watch.Added, &initial[i]) {
			return
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	karmadaEvents := make(chan karmadaWatchEvent)
	go readKarmadaWatch(ctx, res.Body, karmadaEvents)
	memberMsgs := make(chan memberMsg, 16)
	mw := &memberEventWatch{mg: mg, em: em, out: memberMsgs, seen: map[string]string{}}
	go mw.run(ctx, start)
	m.serve(ctx, karmadaEvents, memberMsgs)
}

// karmadaWatchEvent is one event of karmada-apiserver's watch, kept as sent,
// or the error that ended the stream.
type karmadaWatchEvent struct {
	event metav1.WatchEvent
	err   error
}

// readKarmadaWatch decodes karmada-apiserver's JSON watch stream into out
// and closes out when the stream ends cleanly.
func readKarmadaWatch(ctx context.Context, body io.Reader, out chan<- karmadaWatchEvent) {
	dec := json.NewDecoder(body)
	for {
		var ev karmadaWatchEvent
		if err := dec.Decode(&ev.event); err != nil {
			if errors.Is(err, io.EOF) {
				close(out)
				return
			}
			ev.err = err
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return
		}
		if ev.err != nil {
			return
		}
	}
}

// mergedWatch writes the merged stream. Only its goroutine writes, so the
// resourceVersion stamped on member events and the cursors it remembers
// follow the order the client reads.
type mergedWatch struct {
	mg *Merger
	w  http.ResponseWriter
	er eventsRequest
	// karmadaRV is the resourceVersion of the latest karmada event written
	// (or of the list the watch started from).
	karmadaRV string
	// memberCursor is where the member events written so far stood.
	memberCursor memberCursor
}

func (m *mergedWatch) serve(ctx context.Context, karmadaEvents <-chan karmadaWatchEvent, memberMsgs <-chan memberMsg) {
	// A WatchList's member events wait for the end of karmada's initial
	// state, and are written just before its bookmark.
	members := memberMsgs
	if m.er.SendInitialEvents {
		members = nil
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-karmadaEvents:
			if !ok {
				return // karmada-apiserver ended the watch; the client starts the next one
			}
			if ev.err != nil {
				// A cut upstream stream must not look like a clean end.
				klog.FromContext(ctx).V(2).Info("karmada-apiserver events watch cut", "err", ev.err)
				panic(http.ErrAbortHandler)
			}
			rv, initialEnd := watchEventMeta(ev.event)
			if initialEnd && members == nil {
				members = memberMsgs
				if !m.writeMemberUntilSynced(ctx, memberMsgs, rv) {
					return
				}
			}
			if !m.writeRaw(ev.event) {
				return
			}
			if rv != "" && rv != m.karmadaRV {
				m.karmadaRV = rv
				m.mg.eventCursors.remember(m.er, rv, m.memberCursor)
			}
		case msg := <-members:
			if !m.writeMember(msg) {
				return
			}
		}
	}
}

// writeMemberUntilSynced writes the member's initial events, stamped with
// the initial-events-end bookmark's resourceVersion.
func (m *mergedWatch) writeMemberUntilSynced(ctx context.Context, memberMsgs <-chan memberMsg, rv string) bool {
	if rv != "" {
		m.karmadaRV = rv
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case msg := <-memberMsgs:
			if !m.writeMember(msg) {
				return false
			}
			if msg.synced {
				return true
			}
		}
	}
}

func (m *mergedWatch) writeMember(msg memberMsg) bool {
	if msg.cursor.resourceVersion != "" {
		m.memberCursor = msg.cursor
	}
	if msg.event == nil {
		return true
	}
	msg.event.ResourceVersion = m.karmadaRV
	return m.write(msg.typ, msg.event)
}

func (m *mergedWatch) write(typ watch.EventType, ev *corev1.Event) bool {
	ev.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}
	raw, err := json.Marshal(ev)
	if err != nil {
		return false
	}
	return m.writeRaw(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}})
}

// writeRaw writes one event and flushes it: a watch delivers each event as
// it happens.
func (m *mergedWatch) writeRaw(ev metav1.WatchEvent) bool {
	b, err := json.Marshal(&ev)
	if err != nil {
		return false
	}
	if _, err := m.w.Write(append(b, '\n')); err != nil {
		return false
	}
	return m.flush()
}

func (m *mergedWatch) flush() bool {
	return http.NewResponseController(m.w).Flush() == nil
}

// watchEventMeta reads an event object's resourceVersion and whether it is
// the bookmark ending a WatchList's initial state.
func watchEventMeta(ev metav1.WatchEvent) (rv string, initialEnd bool) {
	if ev.Type == string(watch.Error) {
		return "", false
	}
	var obj struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if json.Unmarshal(ev.Object.Raw, &obj) != nil {
		return "", false
	}
	initialEnd = ev.Type == string(watch.Bookmark) && obj.Metadata.Annotations[initialEventsEndAnnotation] == "true"
	return obj.Metadata.ResourceVersion, initialEnd
}

// memberMsg is what the member side sends the writer: an event (rewritten
// but for its resourceVersion), where the member stood after it, and
// whether the member's initial state is complete.
type memberMsg struct {
	typ    watch.EventType
	event  *corev1.Event
	cursor memberCursor
	synced bool
}

// errMemberGone is a member watch refused as too old: list again.
var errMemberGone = errors.New("member resourceVersion too old")

// memberEventWatch follows the pod's events in the member cluster it
// resolves to, through the cluster proxy (GetMember): it
// waits for the pod to be placed, lists what it has not sent yet, watches,
// re-establishes the watch when it ends, lists again when the member
// forgot its resourceVersion, and moves along when the pod moves to
// another cluster.
type memberEventWatch struct {
	mg  *Merger
	em  *eventsMerge
	out chan<- memberMsg
	// seen is what was sent, by cluster/uid: its resourceVersion.
	seen map[string]string

	synced bool
	// outage is true while a failure has been reported and the member not
	// read since; unavailable is the Warning event that reports them.
	outage      bool
	unavailable *corev1.Event
}

func (m *memberEventWatch) run(ctx context.Context, cursor memberCursor) {
	logger := klog.FromContext(ctx).WithValues("namespace", m.em.Namespace, "pod", m.em.Pod)
	timing := m.mg.eventWatchTiming
	newBackoff := func() wait.Backoff {
		return wait.Backoff{Duration: timing.retryBase, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: timing.retryCap}
	}
	backoff := newBackoff()
	var template *corev1.Pod
	for ctx.Err() == nil {
		cluster, err := m.mg.resolver.Resolve(ctx, m.em.Namespace, m.em.Pod)
		if err != nil || len(validation.IsDNS1123Label(cluster)) > 0 {
			// Not placed (yet): the member part of the initial state is empty.
			m.markSynced(ctx)
			if !sleepCtx(ctx, timing.resolvePoll) {
				return
			}
			continue
		}
		if template == nil || cursor.cluster != cluster {
			template, err = m.mg.readTemplate(ctx, m.em)
			if err != nil {
				m.reportFailure(ctx, logger, cluster, template, err)
				if !sleepCtx(ctx, backoff.Step()) {
					return
				}
				continue
			}
			if template == nil {
				m.markSynced(ctx) // the caller pinned another incarnation: nothing to merge
				return
			}
		}
		if cursor.cluster != cluster || cursor.resourceVersion == "" {
			rv, err := m.list(ctx, cluster, template)
			if err != nil {
				m.reportFailure(ctx, logger, cluster, template, err)
				m.markSynced(ctx)
				if !sleepCtx(ctx, backoff.Step()) {
					return
				}
				continue
			}
			m.outage = false
			cursor = memberCursor{cluster: cluster, resourceVersion: rv}
			if !m.send(ctx, memberMsg{cursor: cursor}) {
				return
			}
		}
		m.markSynced(ctx)

		started := time.Now()
		next, err := m.watch(ctx, cursor, template)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errMemberGone):
			cursor.resourceVersion = ""
		case err != nil:
			m.reportFailure(ctx, logger, cluster, template, err)
			cursor = next
		default:
			cursor = next
		}
		if time.Since(started) < timing.retryBase || err != nil {
			if !sleepCtx(ctx, backoff.Step()) {
				return
			}
		} else {
			backoff = newBackoff()
		}
	}
}

// list sends the member's events for the pod that were not sent yet, or
// changed since, and returns the list's resourceVersion.
func (m *memberEventWatch) list(ctx context.Context, cluster string, template *corev1.Pod) (string, error) {
	list, err := m.mg.readMemberEvents(ctx, m.em, cluster)
	if err != nil {
		return "", err
	}
	for i := range list.Items {
		ev := &list.Items[i]
		key := cluster + "/" + string(ev.UID)
		rv, sent := m.seen[key]
		if sent && rv == ev.ResourceVersion {
			continue
		}
		m.seen[key] = ev.ResourceVersion
		typ := watch.Added
		if sent {
			typ = watch.Modified
		}
		rewriteMemberEvent(ev, cluster, template)
		if !m.send(ctx, memberMsg{typ: typ, event: ev}) {
			return "", ctx.Err()
		}
	}
	return list.ResourceVersion, nil
}

// watch follows the member's events from cursor until the watch ends,
// returning where it got to. Its context ends early when the pod no longer
// resolves to the cursor's cluster.
func (m *memberEventWatch) watch(ctx context.Context, cursor memberCursor, template *corev1.Pod) (memberCursor, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go m.cancelOnMove(ctx, cancel, cursor.cluster)

	path := memberEventsPath(m.em.eventsRequest, url.Values{
		"watch": {"true"}, "allowWatchBookmarks": {"true"}, "resourceVersion": {cursor.resourceVersion},
	})
	res, err := m.mg.gw.GetMember(ctx, m.em.r, eventsAccess(m.em, "watch"), cursor.cluster, path, "application/json")
	if err != nil {
		if ctx.Err() != nil {
			return cursor, nil // the pod moved (or the client left) while the watch opened: not an outage
		}
		return cursor, err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusGone {
		return cursor, errMemberGone
	}
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		return cursor, fmt.Errorf("HTTP %d: %s", res.StatusCode, apiresponse.Message(body))
	}
	// The outage ends when the member answers, not when a retry starts:
	// retrying a watch from its cursor lists nothing first, and each
	// refused retry was reported as an outage of its own.
	m.outage = false
	dec := json.NewDecoder(res.Body)
	for {
		var we metav1.WatchEvent
		if err := dec.Decode(&we); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return cursor, nil
			}
			return cursor, fmt.Errorf("reading the member's events watch: %w", err)
		}
		switch watch.EventType(we.Type) {
		case watch.Error:
			var st metav1.Status
			if json.Unmarshal(we.Object.Raw, &st) == nil && st.Code == http.StatusGone {
				return cursor, errMemberGone
			}
			return cursor, fmt.Errorf("member watch error: %s", apiresponse.Message(we.Object.Raw))
		case watch.Bookmark:
			var ev corev1.Event
			if json.Unmarshal(we.Object.Raw, &ev) == nil && ev.ResourceVersion != "" {
				cursor.resourceVersion = ev.ResourceVersion
			}
		case watch.Added, watch.Modified, watch.Deleted:
			var ev corev1.Event
			if err := json.Unmarshal(we.Object.Raw, &ev); err != nil {
				return cursor, fmt.Errorf("decoding a member event: %w", err)
			}
			cursor.resourceVersion = ev.ResourceVersion
			key := cursor.cluster + "/" + string(ev.UID)
			if we.Type == string(watch.Deleted) {
				delete(m.seen, key)
			} else {
				m.seen[key] = ev.ResourceVersion
			}
			rewriteMemberEvent(&ev, cursor.cluster, template)
			if !m.send(ctx, memberMsg{typ: watch.EventType(we.Type), event: &ev, cursor: cursor}) {
				return cursor, nil
			}
		}
	}
}

// cancelOnMove cancels a member watch when the pod stops resolving to
// cluster, so failover is followed without waiting for the member to end
// the watch.
func (m *memberEventWatch) cancelOnMove(ctx context.Context, cancel context.CancelFunc, cluster string) {
	t := time.NewTicker(m.mg.eventWatchTiming.placementCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c, err := m.mg.resolver.Resolve(ctx, m.em.Namespace, m.em.Pod); err != nil || c != cluster {
				cancel()
				return
			}
		}
	}
}

func (m *memberEventWatch) markSynced(ctx context.Context) {
	if !m.synced {
		m.synced = m.send(ctx, memberMsg{synced: true})
	}
}

// reportFailure tells the client once per outage, as a Warning event about
// the pod, that the member's events cannot be read: a merged watch has no
// other way to say it once its headers are sent.
func (m *memberEventWatch) reportFailure(ctx context.Context, logger klog.Logger, cluster string, template *corev1.Pod, err error) {
	logger.V(2).Info("Member events unavailable", "cluster", cluster, "err", err)
	if m.outage {
		return
	}
	m.outage = true
	m.mg.metrics.MemberEventsUnavailableTotal.WithLabelValues(cluster).Inc()
	now := metav1.Now()
	typ := watch.Modified
	if m.unavailable == nil {
		typ = watch.Added
		m.unavailable = &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{
				Name: m.em.Pod + ".member-events-unavailable", Namespace: m.em.Namespace, UID: uuid.NewUUID(),
				CreationTimestamp: now,
			},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: m.em.Namespace, Name: m.em.Pod},
			Reason:         memberUnavailableReason,
			Type:           corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "karmada-exec-gateway"},
			FirstTimestamp: now,
		}
	}
	ev := m.unavailable
	if template != nil {
		ev.InvolvedObject.UID = template.UID
	}
	ev.Annotations = map[string]string{MemberClusterAnnotation: cluster}
	ev.Message = memberUnavailableMessage(cluster, err)
	ev.LastTimestamp = now
	ev.Count++
	out := ev.DeepCopy()
	m.send(ctx, memberMsg{typ: typ, event: out})
}

func (m *memberEventWatch) send(ctx context.Context, msg memberMsg) bool {
	select {
	case m.out <- msg:
		return true
	case <-ctx.Done():
		return false
	}
}

// sleepCtx waits d unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
