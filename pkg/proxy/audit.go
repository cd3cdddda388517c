package proxy

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

// Auditor writes down the requests the gateway routes to member clusters
// and its refusals of them. *audit.Auditor implements it.
type Auditor interface {
	// Record must not block: it runs on the request's goroutine.
	Record(stage string, id types.UID, req *audit.Request)
}

// auditedRoutes are the routes whose requests go to a member (or would
// have, had the gateway not refused them).
var auditedRoutes = map[string]bool{
	metrics.RouteExec: true, metrics.RouteAttach: true, metrics.RouteLog: true, metrics.RoutePortForward: true,
	metrics.RoutePodProxy: true, metrics.RouteServiceProxy: true, metrics.RouteEvents: true, metrics.RouteRefused: true,
}

// maxAuditedBody bounds what is kept of a refusal's body to read its
// Status.
const maxAuditedBody = 4 << 10

// auditRecord is one request's audit trail. Its ResponseComplete waits for
// the request's end and, for an upgraded stream, the stream's (ReverseProxy
// closes it after the handler returns).
type auditRecord struct {
	auditor Auditor
	id      types.UID
	state   *requestState

	mu      sync.Mutex
	req     audit.Request
	pending int
	body    []byte // a refusal's, to read its Status
	started bool
}

func (p *Proxy) newAuditRecord(r *http.Request, state *requestState) *auditRecord {
	return &auditRecord{
		auditor: p.auditor, id: audit.NewID(), state: state, pending: 1,
		req: audit.Request{HTTP: r, Received: time.Now(), AuthMode: string(p.authMode)},
	}
}

// header runs when the response's status is known (101 at the upgrade):
// a stream's ResponseStarted.
func (a *auditRecord) header(code int, stream bool) {
	if a == nil || !auditedRoutes[a.state.route] {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fill(code)
	if stream {
		a.started = true
		a.auditor.Record(audit.StageResponseStarted, a.id, &a.req)
	}
}

// wrote keeps the start of a refusal's body.
func (a *auditRecord) wrote(code int, b []byte) {
	if a != nil && code >= 400 && len(a.body) < maxAuditedBody {
		a.body = append(a.body, b[:min(len(b), maxAuditedBody-len(a.body))]...)
	}
}

func (a *auditRecord) fill(code int) {
	s := a.state
	a.req.Route, a.req.Cluster, a.req.Code = s.route, s.cluster, code
	if s.authorized != nil {
		a.req.Caller, a.req.Decision = s.authorized, "allow"
	} else if apierrors.IsForbidden(s.refusedBy) {
		a.req.Decision, a.req.Reason = "forbid", s.refusedBy.Error()
	}
}

// finish runs when the request ends; written is what a non-upgraded
// response wrote.
func (a *auditRecord) finish(code int, written int64) {
	if a == nil || !auditedRoutes[a.state.route] {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fill(code)
	a.req.BytesOut = written
	if code >= 400 && len(a.body) > 0 {
		var st metav1.Status
		if json.Unmarshal(a.body, &st) == nil && st.Kind == "Status" {
			a.req.Status = &st
		}
	}
	a.done()
}

// streamFollowed has ResponseComplete wait for the stream's Summary.
func (a *auditRecord) streamFollowed(protocol string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending++
	a.req.Protocol = protocol
}

func (a *auditRecord) streamEnded(sum streamfollow.Summary) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.req.Stream = &sum
	a.done()
}

// done records ResponseComplete once nothing is pending; a.mu is held.
func (a *auditRecord) done() {
	if a.pending--; a.pending == 0 {
		a.auditor.Record(audit.StageResponseComplete, a.id, &a.req)
	}
}

// authorizedBy notes authorize mode's decision for the audit event.
func (s *requestState) authorizedBy(caller identity.Caller, err error) {
	if err != nil {
		s.refusedBy = err
		return
	}
	s.authorized = &caller
}
