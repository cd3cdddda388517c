package audit

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

// Recorder takes a request's events. *Auditor implements it.
type Recorder interface {
	// Record writes req's event for stage, which happened at at. It must
	// not block: it runs on the request's goroutine.
	Record(stage string, id types.UID, req *Request, at time.Time)
	// Hold keeps the Recorder's sinks running, once it is told to stop,
	// until release is called: for events written late, once their
	// caller is known.
	Hold() (release func())
}

// callerWait bounds how long a Trail's events wait for their caller to be
// learnt (identity.Attribution) before they are written without it.
const callerWait = 2 * time.Second

// Audited reports whether a request of the gateway's route goes to a
// member (or would have, had the gateway not refused it): exec, attach,
// log, portforward, pod and service proxy, merged events, and requests
// its path guards refused.
func Audited(route string) bool {
	switch route {
	case "exec", "attach", "log", "portforward", "podproxy", "serviceproxy", "events", "ephemeralcontainers", "refused":
		return true
	}
	return false
}

// maxRefusalBody bounds what is kept of a refusal's body to read its
// Status.
const maxRefusalBody = 4 << 10

// Decided is what the gateway decided about a request so far, read when
// an event is written.
type Decided func(req *Request)

// Trail is one request's audit trail, fed by the proxy as the request
// goes. Its ResponseComplete waits for the request's end and, for a
// followed stream, the stream's (ReverseProxy closes an upgraded stream
// after the handler returned).
type Trail struct {
	rec     Recorder
	id      types.UID
	decided Decided
	caller  *identity.Attribution

	mu        sync.Mutex
	req       Request
	pending   int
	body      []byte
	recording func() (file, incomplete string)
	// deferred are events written once the caller is known, in order.
	deferred []deferredEvent
}

type deferredEvent struct {
	stage string
	req   Request
	at    time.Time
}

// NewTrail starts r's trail; decided fills in, at each event, what the
// gateway decided (route, member cluster, decision); caller is who the
// request's caller is, as the gateway learns it: an event written while it
// is still being looked up waits for it (in the background, at most
// callerWait) so that every event names the caller.
func NewTrail(rec Recorder, r *http.Request, authMode string, decided Decided, caller *identity.Attribution) *Trail {
	return &Trail{rec: rec, id: NewID(), decided: decided, caller: caller, pending: 1,
		req: Request{HTTP: r, Received: time.Now(), AuthMode: authMode}}
}

// record writes t.req's event for stage, or has it written once the caller
// is known; t.mu is held.
func (t *Trail) record(stage string) {
	ev := deferredEvent{stage: stage, req: t.req, at: time.Now()}
	if t.deferred != nil || t.caller.Pending() {
		if t.deferred == nil {
			go t.writeDeferred(t.rec.Hold())
		}
		t.deferred = append(t.deferred, ev)
		return
	}
	t.write(ev)
}

func (t *Trail) write(ev deferredEvent) {
	if user, ok, reason := t.caller.Wait(callerWait); ok {
		ev.req.User = &user
	} else {
		ev.req.UserUnknown = reason
	}
	t.rec.Record(ev.stage, t.id, &ev.req, ev.at)
}

// writeDeferred writes the deferred events once the caller is known.
func (t *Trail) writeDeferred(release func()) {
	defer release()
	t.caller.Wait(callerWait)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ev := range t.deferred {
		t.write(ev)
	}
	t.deferred = nil
}

// Header runs when the response's status is known (101 at the upgrade);
// a stream gets its ResponseStarted. A nil Trail does nothing.
func (t *Trail) Header(code int, stream bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.decided(&t.req); !Audited(t.req.Route) {
		return
	}
	t.req.Code = code
	if stream {
		t.record(StageResponseStarted)
	}
}

// Wrote keeps the start of a refusal's body (code >= 400).
func (t *Trail) Wrote(code int, b []byte) {
	if t != nil && code >= 400 && len(t.body) < maxRefusalBody {
		t.body = append(t.body, b[:min(len(b), maxRefusalBody-len(t.body))]...)
	}
}

// Finish runs when the request ends; written is what a response that was
// not upgraded wrote.
func (t *Trail) Finish(code int, written int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.decided(&t.req); !Audited(t.req.Route) {
		return
	}
	t.req.Code, t.req.BytesOut = code, written
	if code >= 400 && len(t.body) > 0 {
		var st metav1.Status
		if json.Unmarshal(t.body, &st) == nil && st.Kind == "Status" {
			t.req.Status = &st
		}
	}
	t.done()
}

// StreamFollowed has ResponseComplete wait for StreamEnded.
func (t *Trail) StreamFollowed(protocol string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending++
	t.req.Protocol = protocol
}

// StreamEnded is the followed stream's Summary.
func (t *Trail) StreamEnded(sum streamfollow.Summary) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.req.Stream = &sum
	if t.recording != nil {
		t.req.Recording, t.req.RecordingIncomplete = t.recording()
	}
	t.done()
}

// SetRecording names the session's recording, from its start on.
func (t *Trail) SetRecording(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.req.Recording = name
}

// RecordingFollowed has ResponseComplete name what the recording kept,
// which result says once the stream ended (before StreamEnded): its file
// ("" when nothing was kept) and why it is incomplete ("" when whole).
func (t *Trail) RecordingFollowed(result func() (file, incomplete string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.recording = result
}

// done writes ResponseComplete once nothing is pending; t.mu is held.
func (t *Trail) done() {
	if t.pending--; t.pending == 0 && Audited(t.req.Route) {
		t.record(StageResponseComplete)
	}
}
