package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

// Stages, as audit.k8s.io/v1 names them.
const (
	StageResponseStarted  = "ResponseStarted"
	StageResponseComplete = "ResponseComplete"
)

// LevelMetadata: events carry request metadata, no bodies.
const LevelMetadata = "Metadata"

// Event is an audit.k8s.io/v1 Event: the same JSON field for field.
type Event struct {
	Kind                     string            `json:"kind"`
	APIVersion               string            `json:"apiVersion"`
	Level                    string            `json:"level"`
	AuditID                  types.UID         `json:"auditID"`
	Stage                    string            `json:"stage"`
	RequestURI               string            `json:"requestURI"`
	Verb                     string            `json:"verb"`
	User                     authnv1.UserInfo  `json:"user"`
	ImpersonatedUser         *authnv1.UserInfo `json:"impersonatedUser,omitempty"`
	SourceIPs                []string          `json:"sourceIPs,omitempty"`
	UserAgent                string            `json:"userAgent,omitempty"`
	ObjectRef                *ObjectReference  `json:"objectRef,omitempty"`
	ResponseStatus           *metav1.Status    `json:"responseStatus,omitempty"`
	RequestReceivedTimestamp metav1.MicroTime  `json:"requestReceivedTimestamp"`
	StageTimestamp           metav1.MicroTime  `json:"stageTimestamp"`
	Annotations              map[string]string `json:"annotations,omitempty"`
}

// ObjectReference is audit.k8s.io/v1's.
type ObjectReference struct {
	Resource    string    `json:"resource,omitempty"`
	Namespace   string    `json:"namespace,omitempty"`
	Name        string    `json:"name,omitempty"`
	UID         types.UID `json:"uid,omitempty"`
	APIGroup    string    `json:"apiGroup,omitempty"`
	APIVersion  string    `json:"apiVersion,omitempty"`
	Subresource string    `json:"subresource,omitempty"`
}

// EventList is audit.k8s.io/v1's, as the audit webhook posts it.
type EventList struct {
	Kind       string            `json:"kind"`
	APIVersion string            `json:"apiVersion"`
	Metadata   metav1.ListMeta   `json:"metadata"`
	Items      []json.RawMessage `json:"items"`
}

// Annotation keys. The decision keys are kube-apiserver's own.
const (
	prefix            = "gateway.karmada.io/"
	AnnotationCluster = prefix + "member-cluster"
	// AnnotationPinnedCluster: the request came under a server URL that
	// pins a member cluster (/clusters/<name>/); objectRef is read from
	// the path below it.
	AnnotationPinnedCluster = prefix + "pinned-cluster"
	AnnotationMemberUID     = prefix + "member-pod-uid"
	AnnotationRoute         = prefix + "route"
	AnnotationAuthMode      = prefix + "auth-mode"
	AnnotationCredential    = prefix + "credential"
	AnnotationContainer     = prefix + "container"
	AnnotationCommand       = prefix + "command"
	AnnotationTTY           = prefix + "tty"
	AnnotationStdin         = prefix + "stdin"
	AnnotationProtocol      = prefix + "protocol"
	AnnotationStreamEnd     = prefix + "stream-end"
	AnnotationExitCode      = prefix + "exit-code"
	AnnotationBytesIn       = prefix + "bytes-from-client"
	AnnotationBytesOut      = prefix + "bytes-to-client"
	AnnotationDuration      = prefix + "duration-seconds"
	AnnotationRecording     = prefix + "recording"
	// AnnotationEphemeralContainers lists the debug containers a
	// pods/ephemeralcontainers write adds (kubectl debug): name, image,
	// command, args, target, stdin, tty and security context, as JSON.
	AnnotationEphemeralContainers = prefix + "ephemeral-containers"
	// AnnotationUserUnknown says why user is empty, when the gateway
	// tried to learn it.
	AnnotationUserUnknown = prefix + "user-unknown"
	// AnnotationRecordingIncomplete says why the recording named (or
	// none) does not hold the whole session.
	AnnotationRecordingIncomplete = prefix + "recording-incomplete"
	AnnotationDecision            = "authorization.k8s.io/decision"
	AnnotationReason              = "authorization.k8s.io/reason"
)

// Request is what the gateway knows of one request it routed to a member
// cluster, or refused. pkg/proxy fills it in as the request goes.
type Request struct {
	HTTP     *http.Request
	Received time.Time
	// Route is the gateway's (exec, attach, log, portforward, podproxy,
	// serviceproxy, events, refused).
	Route    string
	Cluster  string
	AuthMode string
	// PinnedCluster is the member cluster the request's path prefix
	// pinned (/clusters/<name>/), if any.
	PinnedCluster string
	// TemplateUID is the pod template's UID (objectRef.uid); MemberUID its
	// copy's in Cluster, known in authorize mode only (docs/security.md).
	TemplateUID, MemberUID types.UID
	// Caller is the identity authorize mode authenticated and allowed.
	Caller *identity.Caller
	// User is who authenticated, when the gateway learnt it (authorize
	// mode's authentication, passthrough's review of the credential);
	// UserUnknown says why it is not known, when a lookup said.
	User        *identity.Caller
	UserUnknown string
	// Impersonated is the identity the request's Impersonate-* headers ask
	// for, as kube-apiserver builds it; nil: read from the headers as sent.
	Impersonated *identity.Caller
	// SourceIPs are the addresses the gateway sent upstream in
	// X-Forwarded-For; nil: X-Forwarded-For as sent, then the peer.
	SourceIPs []string
	// Decision is authorize mode's: "allow" or "forbid" ("" when
	// karmada-apiserver decided: passthrough), Reason why.
	Decision, Reason string
	// Code is the HTTP status answered (101 for an upgrade); Status the
	// Status the gateway answered with, for refusals.
	Code   int
	Status *metav1.Status
	// BytesOut is what a non-upgraded response wrote to the client.
	BytesOut int64
	// Stream is what the upgraded stream carried, once it ended.
	Stream   *streamfollow.Summary
	Protocol string
	// Recording names the session's recording file, if any;
	// RecordingIncomplete says why it does not hold the whole session, or
	// why none was kept.
	Recording, RecordingIncomplete string
	// EphemeralContainers is AnnotationEphemeralContainers' value.
	EphemeralContainers string
}

// NewEvent is the Event for stage of req at now. The fields a client
// chooses the length of (the request URI, the command, the user agent,
// impersonation) are cut to a share of maxSize as the event is built,
// marked audit.k8s.io/truncated; 0 cuts nothing.
func NewEvent(stage string, id types.UID, req *Request, now time.Time, maxSize int) *Event {
	ev := newEvent(stage, id, req, now)
	if maxSize > 0 {
		c := cutter{ev: ev, limit: maxSize / fieldShare}
		c.cutFields()
	}
	return ev
}

func newEvent(stage string, id types.UID, req *Request, now time.Time) *Event {
	r := req.HTTP
	ev := &Event{
		Kind: "Event", APIVersion: "audit.k8s.io/v1", Level: LevelMetadata,
		AuditID: id, Stage: stage,
		RequestURI:               r.URL.RequestURI(),
		UserAgent:                r.UserAgent(),
		SourceIPs:                req.SourceIPs,
		RequestReceivedTimestamp: metav1.NewMicroTime(req.Received),
		StageTimestamp:           metav1.NewMicroTime(now),
		Annotations:              map[string]string{AnnotationRoute: req.Route, AnnotationAuthMode: req.AuthMode},
	}
	if ev.SourceIPs == nil {
		ev.SourceIPs = sourceIPs(r)
	}
	ev.ObjectRef, ev.Verb = objectRef(r, req.PinnedCluster)
	if ev.ObjectRef != nil && ev.ObjectRef.Resource == "pods" {
		ev.ObjectRef.UID = req.TemplateUID
	}
	a := ev.Annotations
	set := func(k, v string) {
		if v != "" {
			a[k] = v
		}
	}
	set(AnnotationCluster, req.Cluster)
	set(AnnotationPinnedCluster, req.PinnedCluster)
	set(AnnotationMemberUID, string(req.MemberUID))
	set(AnnotationCredential, credential(r))
	set(AnnotationDecision, req.Decision)
	set(AnnotationReason, req.Reason)
	set(AnnotationProtocol, req.Protocol)
	set(AnnotationRecording, req.Recording)
	set(AnnotationRecordingIncomplete, req.RecordingIncomplete)
	set(AnnotationEphemeralContainers, req.EphemeralContainers)
	// user is who authenticated, impersonatedUser whom the request asked
	// to act as, as kube-apiserver writes them.
	imp := impersonated(r.Header)
	if req.Impersonated != nil {
		imp = userInfo(req.Impersonated)
	}
	ev.ImpersonatedUser = imp
	switch {
	case req.User != nil:
		ev.User = *userInfo(req.User)
	case req.Caller != nil && imp == nil:
		ev.User = *userInfo(req.Caller)
	}
	set(AnnotationUserUnknown, req.UserUnknown)
	if ev.ObjectRef != nil && (ev.ObjectRef.Subresource == "exec" || ev.ObjectRef.Subresource == "attach") {
		q := r.URL.Query()
		set(AnnotationContainer, q.Get("container"))
		if cmd := q["command"]; len(cmd) > 0 {
			b, _ := json.Marshal(cmd)
			a[AnnotationCommand] = string(b)
		}
		a[AnnotationTTY] = strconv.FormatBool(queryBool(q, "tty"))
		a[AnnotationStdin] = strconv.FormatBool(queryBool(q, "stdin"))
	} else if ev.ObjectRef != nil && ev.ObjectRef.Subresource == "log" {
		set(AnnotationContainer, r.URL.Query().Get("container"))
	}
	if stage != StageResponseComplete {
		if req.Code > 0 {
			ev.ResponseStatus = &metav1.Status{Code: int32(req.Code)}
		}
		return ev
	}
	ev.ResponseStatus = &metav1.Status{Code: int32(req.Code)}
	if req.Status != nil {
		ev.ResponseStatus.Status = req.Status.Status
		ev.ResponseStatus.Reason = req.Status.Reason
		ev.ResponseStatus.Message = req.Status.Message
	}
	a[AnnotationDuration] = strconv.FormatFloat(now.Sub(req.Received).Seconds(), 'f', 6, 64)
	out := req.BytesOut
	if s := req.Stream; s != nil {
		out = s.FromServer
		a[AnnotationStreamEnd] = string(s.End)
		a[AnnotationBytesIn] = strconv.FormatInt(s.FromClient, 10)
		if code, ok := streamfollow.ExitCode(s.Status); ok {
			a[AnnotationExitCode] = strconv.Itoa(code)
		}
	}
	a[AnnotationBytesOut] = strconv.FormatInt(out, 10)
	return ev
}

// NewID is a fresh audit ID.
func NewID() types.UID { return uuid.NewUUID() }

func userInfo(c *identity.Caller) *authnv1.UserInfo {
	u := &authnv1.UserInfo{Username: c.Name, UID: c.UID, Groups: append([]string(nil), c.Groups...)}
	if len(c.Extra) > 0 {
		u.Extra = map[string]authnv1.ExtraValue{}
		for k, v := range c.Extra {
			u.Extra[k] = append(authnv1.ExtraValue(nil), v...)
		}
	}
	return u
}

// impersonated is whom the client asked to act as, from its Impersonate-*
// headers, or nil.
func impersonated(h http.Header) *authnv1.UserInfo {
	var u authnv1.UserInfo
	var any bool
	for k, v := range h {
		switch {
		case k == "Impersonate-User":
			u.Username, any = v[0], true
		case k == "Impersonate-Uid":
			u.UID, any = v[0], true
		case k == "Impersonate-Group":
			u.Groups, any = append(u.Groups, v...), true
		case strings.HasPrefix(k, "Impersonate-Extra-"):
			key, err := url.PathUnescape(strings.ToLower(strings.TrimPrefix(k, "Impersonate-Extra-")))
			if err != nil {
				key = k
			}
			if u.Extra == nil {
				u.Extra = map[string]authnv1.ExtraValue{}
			}
			u.Extra[key], any = append(u.Extra[key], v...), true
		}
	}
	if !any {
		return nil
	}
	sort.Strings(u.Groups)
	return &u
}

// credential names what the client authenticated with, never the secret:
// a bearer token by the first 16 hex digits of its SHA-256, the same
// whether it came in Authorization or, decoded, in a WebSocket
// subprotocol (a malformed subprotocol entry is hashed as sent), a client
// certificate by its subject.
func credential(r *http.Request) string {
	token, ok := identity.CallerToken(r.Header)
	if !ok {
		token, ok = identity.WebSocketBearerEntry(r.Header)
	}
	switch {
	case ok:
		sum := sha256.Sum256([]byte(token))
		return "token-sha256:" + hex.EncodeToString(sum[:8])
	case identity.HasClientCertificate(r):
		return "x509:" + r.TLS.PeerCertificates[0].Subject.String()
	}
	return "anonymous"
}

// sourceIPs are X-Forwarded-For's then the peer's, as kube-apiserver lists
// them.
func sourceIPs(r *http.Request) []string {
	var ips []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		for _, ip := range strings.Split(v, ",") {
			if ip = strings.TrimSpace(ip); net.ParseIP(ip) != nil {
				ips = append(ips, ip)
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if host != "" && (len(ips) == 0 || ips[len(ips)-1] != host) {
		ips = append(ips, host)
	}
	return ips
}

// objectRef reads the object and verb from a core/v1 namespaced path, as
// kube-apiserver's RequestInfo does for the routes the gateway rewrites:
// /api/v1/namespaces/{ns}/{resource}[/{name}[/{subresource}...]], below
// /clusters/<pinned>/ when a member cluster is pinned.
func objectRef(r *http.Request, pinned string) (*ObjectReference, string) {
	path := r.URL.Path
	if pinned != "" {
		path = strings.TrimPrefix(path, "/clusters/"+pinned)
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	verb := methodVerb(r.Method)
	if len(segs) < 5 || segs[0] != "api" || segs[2] != "namespaces" {
		return nil, verb
	}
	ref := &ObjectReference{APIVersion: segs[1], Namespace: segs[3], Resource: segs[4]}
	if len(segs) > 5 {
		ref.Name = segs[5]
	}
	if len(segs) > 6 {
		ref.Subresource = segs[6]
	}
	if ref.Name == "" && r.Method == http.MethodGet {
		verb = "list"
		if queryBool(r.URL.Query(), "watch") {
			verb = "watch"
		}
	}
	return ref, verb
}

func methodVerb(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(method)
}

// queryBool reads key as kube-apiserver's bool conversion does: present
// with anything but 0 or false.
func queryBool(q url.Values, key string) bool {
	var on bool
	v, ok := q[key]
	return ok && runtime.Convert_Slice_string_To_bool(&v, &on, nil) == nil && on
}
