// Package proxytest holds the fakes and helpers that tests of the proxy and
// of the handlers it hands requests to (pkg/memberevents) share. It imports
// neither, so both packages' own tests can use it.
package proxytest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/resolver"
)

// Cluster is the member cluster a Resolver answers by default in tests.
const Cluster = "member1"

// Resolver resolves every pod (and, as a ServiceResolver, every Service) to
// Cluster, or fails with Err. As a proxy.PodPlacer it also names the UIDs
// TemplateUID and MemberUID.
type Resolver struct {
	Cluster                string
	Err                    error
	TemplateUID, MemberUID types.UID
	// Scheduled is the placement's scheduled clusters.
	Scheduled []karmada.TargetCluster
	CallLog
}

// ResolvePod implements proxy.PodPlacer.
func (s *Resolver) ResolvePod(ctx context.Context, namespace, name string) (resolver.Placement, error) {
	cluster, err := s.Resolve(ctx, namespace, name)
	return resolver.Placement{Cluster: cluster, TemplateUID: s.TemplateUID, MemberUID: s.MemberUID, Scheduled: s.Scheduled}, err
}

// Resolve implements proxy.Resolver. A request pinned to a member cluster
// (resolver.WithPinnedCluster) gets that cluster, as if every object were
// placed on every cluster.
func (s *Resolver) Resolve(ctx context.Context, namespace, name string) (string, error) {
	s.record(namespace + "/" + name)
	if pinned, ok := resolver.PinnedCluster(ctx); ok && s.Err == nil {
		return pinned, nil
	}
	return s.Cluster, s.Err
}

// ResolveService implements proxy.ServiceResolver.
func (s *Resolver) ResolveService(ctx context.Context, namespace, name string) (string, error) {
	return s.Resolve(ctx, namespace, name)
}

// CallLog records what a fake resolver was asked, as "namespace/name".
type CallLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *CallLog) record(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, call)
}

// Called is every call so far.
func (c *CallLog) Called() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// Authorizer allows everything as Caller, unless Deny (or DenyVerb for
// that verb) says otherwise; Authenticate fails with AuthErr when set.
type Authorizer struct {
	Caller  identity.Caller
	Deny    error
	AuthErr error
	// DenyVerb denies only requests with that verb, with its error.
	DenyVerb map[string]error

	mu         sync.Mutex
	authorized []identity.ResourceRequest
	authed     int
}

// AuthorizeResource implements proxy.Authorizer. Unless AuthErr is set,
// the caller authenticated as Caller, which it records for the audit as
// pkg/auth does, also when it then refuses.
func (f *Authorizer) AuthorizeResource(ctx context.Context, r *http.Request, rr identity.ResourceRequest) (identity.Caller, error) {
	f.mu.Lock()
	f.authorized = append(f.authorized, rr)
	f.mu.Unlock()
	if f.AuthErr != nil {
		return identity.Caller{}, f.AuthErr
	}
	identity.AttributionFrom(ctx).Set(f.Caller)
	if f.Deny != nil {
		return identity.Caller{}, f.Deny
	}
	if err := f.DenyVerb[rr.Verb]; err != nil {
		return identity.Caller{}, err
	}
	return f.Caller, nil
}

// Authenticate implements proxy.Authorizer.
func (f *Authorizer) Authenticate(_ context.Context, r *http.Request) (identity.Caller, error) {
	f.mu.Lock()
	f.authed++
	f.mu.Unlock()
	if f.AuthErr != nil {
		return identity.Caller{}, f.AuthErr
	}
	return f.Caller, nil
}

// Authorized is every request AuthorizeResource was asked about.
func (f *Authorizer) Authorized() []identity.ResourceRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]identity.ResourceRequest(nil), f.authorized...)
}

// Authed is how often Authenticate was called.
func (f *Authorizer) Authed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.authed
}

// RawRequest parses a request exactly as http.Server does, so the escaped
// target reaches the proxy byte for byte.
func RawRequest(t testing.TB, method, target string, header http.Header, body string) *http.Request {
	t.Helper()
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: gateway.test\r\n")
	for k, vs := range header {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	if body != "" {
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	b.WriteString("\r\n" + body)
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(b.String())))
	if err != nil {
		t.Fatalf("ReadRequest %q: %v", target, err)
	}
	return req
}

// DecodeStatus decodes a failure Status the gateway answered as JSON, and
// fails t for anything else.
func DecodeStatus(t testing.TB, contentType string, body []byte) metav1.Status {
	t.Helper()
	if contentType != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json; body %s", contentType, body)
	}
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("decode Status %s: %v", body, err)
	}
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure {
		t.Fatalf("not a failure Status: %s", body)
	}
	return st
}

// WriteJSON answers code with v as JSON, as kube-apiserver does (with an
// Audit-Id).
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Audit-Id", "a1")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// EventsTarget is a core/v1 events list of namespace ci with the field
// selector and extra query (which starts with "&").
func EventsTarget(selector string, extra string) string {
	return "/api/v1/namespaces/ci/events?fieldSelector=" + url.QueryEscape(selector) + extra
}

// Recorded is what an upstream saw of one request.
type Recorded struct {
	Method     string
	RequestURI string
	Path       string
	RawPath    string
	RawQuery   string
	Host       string
	Header     http.Header
	Body       []byte
	ProtoMajor int
}

// IsAdmissionCheck reports whether r is passthrough mode's admission check
// (the proxy's admittedByKarmada): a GET from the watch cache of the pod or
// Service a rewritten route names.
func IsAdmissionCheck(r *http.Request) bool {
	segs := strings.Split(r.URL.Path, "/")
	segs = segs[max(0, len(segs)-6):] // below the upstream's base path
	return r.Method == http.MethodGet && r.URL.RawQuery == "resourceVersion=0" && len(segs) == 6 &&
		segs[0] == "api" && segs[1] == "v1" && segs[2] == "namespaces" && (segs[4] == "pods" || segs[4] == "services")
}

// Admitting answers admission checks as karmada-apiserver answers them for
// a caller it admits and hands every other request to next, so an upstream
// fake sees only the requests its test is about. The checks themselves are
// TestPassthroughAdmissionCheck's subject.
func Admitting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case IsAdmissionCheck(r):
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{}}`)
		case IsSelfSubjectReview(r):
			AnswerSelfSubjectReview(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// ReviewedUser is whom AnswerSelfSubjectReview says every bearer token
// authenticates as.
const ReviewedUser = "alice"

// IsSelfSubjectReview reports whether r asks who its credential is.
func IsSelfSubjectReview(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == "/apis/authentication.k8s.io/v1/selfsubjectreviews"
}

// AnswerSelfSubjectReview answers as kube-apiserver does: a bearer token
// is ReviewedUser in group devs (plus system:authenticated); without one,
// 401.
func AnswerSelfSubjectReview(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","metadata":{},"status":{"userInfo":`+
		`{"username":"`+ReviewedUser+`","uid":"uid-1","groups":["devs","system:authenticated"]}}}`)
}

// RecordingUpstream answers 200 "ok" and records every request but
// admission checks, which it admits.
type RecordingUpstream struct {
	mu   sync.Mutex
	reqs []Recorded
}

func (u *RecordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	Admitting(http.HandlerFunc(u.record)).ServeHTTP(w, r)
}

func (u *RecordingUpstream) record(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, Recorded{
		Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, RawPath: r.URL.RawPath,
		RawQuery: r.URL.RawQuery, Host: r.Host, Header: r.Header.Clone(), Body: body, ProtoMajor: r.ProtoMajor,
	})
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}

func (u *RecordingUpstream) Requests() []Recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Recorded(nil), u.reqs...)
}

// ConnCounter counts an httptest server's new connections and lets a test
// wait for the next one.
type ConnCounter struct {
	mu    sync.Mutex
	conns []net.Conn
	more  chan struct{}
}

func NewConnCounter(srv *httptest.Server) *ConnCounter {
	c := &ConnCounter{more: make(chan struct{})}
	srv.Config.ConnState = func(conn net.Conn, s http.ConnState) {
		if s != http.StateNew {
			return
		}
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		close(c.more)
		c.more = make(chan struct{})
		c.mu.Unlock()
	}
	return c
}

func (c *ConnCounter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

// WaitBeyond waits until more than n connections were accepted, or d passed.
func (c *ConnCounter) WaitBeyond(n int, d time.Duration) bool {
	deadline := time.After(d)
	for {
		c.mu.Lock()
		got, more := len(c.conns), c.more
		c.mu.Unlock()
		if got > n {
			return true
		}
		select {
		case <-more:
		case <-deadline:
			return false
		}
	}
}

// CloseLast closes the connection accepted last, as a server that drops
// it would.
func (c *ConnCounter) CloseLast() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conns[len(c.conns)-1].Close()
}

// RefusedAddr is a loopback host:port that refuses connections for the
// rest of the test: a TCP socket bound to it that never listens. Closing a
// listener to get such an address does not hold the port: under load
// another test's listener (one that never answers, say) took it, and a
// request meant to be refused timed out instead.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// StaySilent holds a fake upstream's next write back for d, as a quiet or
// hung server does, and reports whether d passed: false when the request
// ended first (the client or the gateway gave up), and the handler should
// return rather than outlive its test.
func StaySilent(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}
