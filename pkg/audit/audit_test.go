package audit

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

func execRequest(t *testing.T, header http.Header) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "https://gw/api/v1/namespaces/ci/pods/job-42/exec?container=build&command=sh&command=-c&command=echo+hi&stdin=true&tty=1", nil)
	r.RemoteAddr = "198.18.0.7:5555"
	r.Header = header
	return r
}

func TestNewEvent(t *testing.T) {
	received := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	status := []byte(`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"2"}]}}`)
	cases := []struct {
		name  string
		req   Request
		check func(t *testing.T, ev *Event)
	}{{
		name: "passthrough exec with impersonation",
		req: Request{HTTP: execRequest(t, http.Header{
			"Authorization": {"Bearer secret-token"}, "User-Agent": {"kubectl/v1.37"}, "X-Forwarded-For": {"198.18.0.9"},
			"Impersonate-User": {"bob"}, "Impersonate-Group": {"devs", "admins"}, "Impersonate-Extra-Scopes%2fx": {"a"},
		}), Route: "exec", Cluster: "m1", AuthMode: "passthrough", Code: 101, Protocol: "v5.channel.k8s.io",
			Stream: &streamfollow.Summary{End: streamfollow.EndCompleted, FromClient: 10, FromServer: 20, Status: status}, Recording: "rec.cast"},
		check: func(t *testing.T, ev *Event) {
			if ev.User.Username != "" || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != "bob" ||
				strings.Join(ev.ImpersonatedUser.Groups, ",") != "admins,devs" || ev.ImpersonatedUser.Extra["scopes/x"][0] != "a" {
				t.Errorf("user %+v impersonated %+v", ev.User, ev.ImpersonatedUser)
			}
			if strings.Join(ev.SourceIPs, ",") != "198.18.0.9,198.18.0.7" || ev.UserAgent != "kubectl/v1.37" || ev.Verb != "create" {
				t.Errorf("source %v agent %q verb %q", ev.SourceIPs, ev.UserAgent, ev.Verb)
			}
			want := map[string]string{
				AnnotationCommand: `["sh","-c","echo hi"]`, AnnotationTTY: "true", AnnotationStdin: "true", AnnotationContainer: "build",
				AnnotationExitCode: "2", AnnotationStreamEnd: "completed", AnnotationBytesIn: "10", AnnotationBytesOut: "20",
				AnnotationCluster: "m1", AnnotationRecording: "rec.cast", AnnotationProtocol: "v5.channel.k8s.io", AnnotationDuration: "1.500000",
			}
			for k, v := range want {
				if ev.Annotations[k] != v {
					t.Errorf("%s = %q, want %q", k, ev.Annotations[k], v)
				}
			}
			if c := ev.Annotations[AnnotationCredential]; !strings.HasPrefix(c, "token-sha256:") || len(c) != len("token-sha256:")+16 {
				t.Errorf("credential %q", c)
			}
		},
	}, {
		name: "authorize mode allowed",
		req: Request{HTTP: execRequest(t, http.Header{"Authorization": {"Bearer t"}}), Route: "exec", AuthMode: "authorize", Code: 101,
			Caller: &identity.Caller{Name: "system:serviceaccount:ci:runner", UID: "u1", Groups: []string{"system:serviceaccounts"}}, Decision: "allow"},
		check: func(t *testing.T, ev *Event) {
			if ev.User.Username != "system:serviceaccount:ci:runner" || ev.User.UID != "u1" || ev.ImpersonatedUser != nil || ev.Annotations[AnnotationDecision] != "allow" {
				t.Errorf("user %+v impersonated %+v annotations %v", ev.User, ev.ImpersonatedUser, ev.Annotations)
			}
		},
	}, {
		// kube-apiserver writes who authenticated as user, also on a
		// refusal, and whom it asked to be as impersonatedUser.
		name: "authorize mode refused an impersonation",
		req: Request{HTTP: execRequest(t, http.Header{"Authorization": {"Bearer t"}, "Impersonate-User": {"bob"}}), Route: "exec", AuthMode: "authorize", Code: 403,
			User:         &identity.Caller{Name: "alice", Groups: []string{"devs", "system:authenticated"}},
			Impersonated: identity.Impersonated(http.Header{"Impersonate-User": {"bob"}}), Decision: "forbid", Reason: "no"},
		check: func(t *testing.T, ev *Event) {
			if ev.User.Username != "alice" || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != "bob" ||
				strings.Join(ev.ImpersonatedUser.Groups, ",") != "system:authenticated" || ev.Annotations[AnnotationDecision] != "forbid" {
				t.Errorf("user %+v impersonated %+v annotations %v", ev.User, ev.ImpersonatedUser, ev.Annotations)
			}
		},
	}, {
		name: "passthrough, the caller could not be learnt",
		req:  Request{HTTP: execRequest(t, http.Header{"Authorization": {"Bearer t"}}), Route: "exec", AuthMode: "passthrough", Code: 101, UserUnknown: "timed out"},
		check: func(t *testing.T, ev *Event) {
			if ev.User.Username != "" || ev.Annotations[AnnotationUserUnknown] != "timed out" {
				t.Errorf("user %+v annotations %v", ev.User, ev.Annotations)
			}
		},
	}, {
		name: "client certificate, events watch",
		req: func() Request {
			r := httptest.NewRequest(http.MethodGet, "https://gw/api/v1/namespaces/ci/events?watch=1&fieldSelector=involvedObject.name%3Djob-42", nil)
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "carol"}}}}
			return Request{HTTP: r, Route: "events", Code: 200, BytesOut: 5}
		}(),
		check: func(t *testing.T, ev *Event) {
			if ev.Verb != "watch" || ev.ObjectRef.Resource != "events" || ev.ObjectRef.Name != "" || ev.Annotations[AnnotationCredential] != "x509:CN=carol" ||
				ev.Annotations[AnnotationBytesOut] != "5" || ev.Annotations[AnnotationCommand] != "" {
				t.Errorf("%+v %+v", ev.ObjectRef, ev.Annotations)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Received = received
			ev := NewEvent(StageResponseComplete, "id-1", &tc.req, received.Add(1500*time.Millisecond), DefaultMaxEventSize)
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte("secret-token")) {
				t.Fatalf("event holds the token: %s", b)
			}
			if ev.Kind != "Event" || ev.APIVersion != "audit.k8s.io/v1" || ev.Level != "Metadata" || ev.ResponseStatus.Code != int32(tc.req.Code) {
				t.Errorf("%s", b)
			}
			tc.check(t, ev)
		})
	}
}

// lines reads path's JSON lines.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestFileSinkRotates covers the log's size cap: files rotate at MaxSize,
// MaxBackups are kept, the oldest are dropped, every file is 0600.
func TestFileSinkRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	m := NewMetrics(prometheus.NewRegistry())
	s, err := NewFileSink(FileOptions{Path: path, MaxSize: 100, MaxBackups: 2, Buffer: 100, BufferBytes: 64 << 20}, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Second); close(done) }()
	for i := range 20 { // 20 events of 40 bytes: 800 bytes, 2 per file
		if !s.Enqueue([]byte(fmt.Sprintf(`{"n":%02d,"pad":"%s"}`, i, strings.Repeat("x", 21)))) {
			t.Fatal("buffer full")
		}
	}
	cancel()
	<-done
	var all []string
	for _, name := range []string{path + ".2", path + ".1", path} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 || st.Size() > 100 {
			t.Errorf("%s: mode %v size %d, want 0600 and at most 100 bytes", name, st.Mode().Perm(), st.Size())
		}
		all = append(all, lines(t, name)...)
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("a third backup exists (%v)", err)
	}
	if len(all) != 6 || !strings.Contains(all[5], `"n":19`) || !strings.Contains(all[0], `"n":14`) {
		t.Errorf("kept %q, want the newest 6 events in order", all)
	}
}

// TestFileSinkDropsWhenFull: Enqueue never blocks; what a full buffer
// cannot take is refused, and the Auditor counts it.
func TestFileSinkDropsWhenFull(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	s, err := NewFileSink(FileOptions{Path: filepath.Join(t.TempDir(), "a.log"), MaxSize: 1 << 20, Buffer: 2, BufferBytes: 64 << 20}, m)
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{Metrics: m, Sinks: []Sink{s}}) // not started: nothing drains the buffer
	req := &Request{HTTP: execRequest(t, http.Header{}), Route: "exec", Received: time.Now()}
	for range 5 {
		a.Record(StageResponseComplete, NewID(), req, time.Now())
	}
	if got, dropped := testutil.ToFloat64(m.Events.WithLabelValues("log")), testutil.ToFloat64(m.Dropped.WithLabelValues("log")); got != 2 || dropped != 3 {
		t.Errorf("events %v dropped %v, want 2 and 3", got, dropped)
	}
}

// TestFileSinkNarrowsAnExistingLog: a log that existed readable by others
// (0644) is 0600 from the moment the sink opens it, not from its next
// rotation.
func TestFileSinkNarrowsAnExistingLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.log")
	if err := os.WriteFile(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFileSink(FileOptions{Path: path, MaxSize: 1 << 20, Buffer: 1, BufferBytes: 1 << 20}, NewMetrics(prometheus.NewRegistry())); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the existing log is %v (%v), want 0600", st.Mode().Perm(), err)
	}
}

func TestFileSinkRefusesUnwritablePath(t *testing.T) {
	_, err := NewFileSink(FileOptions{Path: filepath.Join(t.TempDir(), "missing", "a.log"), MaxSize: 1, Buffer: 1, BufferBytes: 64 << 20}, NewMetrics(prometheus.NewRegistry()))
	if err == nil {
		t.Fatal("an audit log in a missing directory was accepted")
	}
}

// webhookServer answers EventList POSTs, failing the first fail ones.
type webhookServer struct {
	fail    atomic.Int32
	mu      sync.Mutex
	batches [][]string // the events' "n" of each batch received
	posts   atomic.Int32
}

func (w *webhookServer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.posts.Add(1)
	if w.fail.Add(-1) >= 0 {
		http.Error(rw, "busy", http.StatusServiceUnavailable)
		return
	}
	var list struct {
		Kind, APIVersion string
		Items            []struct{ N string }
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &list); err != nil || list.Kind != "EventList" || list.APIVersion != "audit.k8s.io/v1" || r.Header.Get("Content-Type") != "application/json" {
		http.Error(rw, "bad list", http.StatusBadRequest)
		return
	}
	var ns []string
	for _, it := range list.Items {
		ns = append(ns, it.N)
	}
	w.mu.Lock()
	w.batches = append(w.batches, ns)
	w.mu.Unlock()
}

func (w *webhookServer) received() [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]string(nil), w.batches...)
}

func newWebhook(t *testing.T, srv *webhookServer, opts WebhookOptions) (*WebhookSink, *Metrics) {
	t.Helper()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	opts.Client, opts.URL = hs.Client(), hs.URL
	m := NewMetrics(prometheus.NewRegistry())
	s, err := NewWebhookSink(opts, m)
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestWebhookBatchesAndRetries covers batching by size and by wait, and a
// batch retried after failures.
func TestWebhookBatchesAndRetries(t *testing.T) {
	srv := &webhookServer{}
	srv.fail.Store(2)
	s, m := newWebhook(t, srv, WebhookOptions{BatchMaxSize: 3, BatchMaxWait: 50 * time.Millisecond, Buffer: 10, BufferBytes: 1 << 20, InitialBackoff: time.Millisecond, Retries: 3, Timeout: 5 * time.Second})
	for i := range 4 {
		s.Enqueue([]byte(fmt.Sprintf(`{"n":"%d"}`, i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, time.Second)
	waitFor(t, "two batches", func() bool { return len(srv.received()) == 2 })
	if got := fmt.Sprint(srv.received()); got != "[[0 1 2] [3]]" {
		t.Errorf("batches %s, want [[0 1 2] [3]]", got)
	}
	if errs, dropped := testutil.ToFloat64(m.Errors.WithLabelValues("webhook")), testutil.ToFloat64(m.Dropped.WithLabelValues("webhook")); errs != 2 || dropped != 0 {
		t.Errorf("errors %v dropped %v, want 2 failed attempts and nothing dropped", errs, dropped)
	}
}

// TestWebhookDropsAfterRetries: a batch that fails every attempt is
// dropped and counted, and the sink goes on with the next.
func TestWebhookDropsAfterRetries(t *testing.T) {
	srv := &webhookServer{}
	srv.fail.Store(3)
	s, m := newWebhook(t, srv, WebhookOptions{BatchMaxSize: 2, BatchMaxWait: time.Hour, Buffer: 10, BufferBytes: 1 << 20, InitialBackoff: time.Millisecond, Retries: 2, Timeout: 5 * time.Second})
	for i := range 4 {
		s.Enqueue([]byte(fmt.Sprintf(`{"n":"%d"}`, i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, time.Second)
	waitFor(t, "the second batch", func() bool { return len(srv.received()) == 1 })
	if got := fmt.Sprint(srv.received()); got != "[[2 3]]" || testutil.ToFloat64(m.Dropped.WithLabelValues("webhook")) != 2 || srv.posts.Load() != 4 {
		t.Errorf("batches %s, dropped %v after %d posts; want [[2 3]], 2 dropped after 4", got, testutil.ToFloat64(m.Dropped.WithLabelValues("webhook")), srv.posts.Load())
	}
}

// TestWebhookDrainsOnStop: events enqueued when the gateway stops are
// sent within the drain time.
func TestWebhookDrainsOnStop(t *testing.T) {
	srv := &webhookServer{}
	s, _ := newWebhook(t, srv, WebhookOptions{BatchMaxSize: 100, BatchMaxWait: time.Hour, Buffer: 10, BufferBytes: 1 << 20, InitialBackoff: time.Millisecond, Retries: 0, Timeout: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, 5*time.Second); close(done) }()
	s.Enqueue([]byte(`{"n":"a"}`))
	s.Enqueue([]byte(`{"n":"b"}`))
	cancel()
	<-done
	if got := fmt.Sprint(srv.received()); got != "[[a b]]" {
		t.Errorf("batches %s, want [[a b]]", got)
	}
}

// TestOneCredentialHash: a token names the same credential whether it came
// in Authorization or in a WebSocket bearer subprotocol (decoded first), so
// a search by credential finds WebSocket sessions too.
func TestOneCredentialHash(t *testing.T) {
	header := execRequest(t, http.Header{"Authorization": {"Bearer my-token"}})
	ws := execRequest(t, http.Header{
		"Connection": {"Upgrade"}, "Upgrade": {"websocket"},
		"Sec-Websocket-Protocol": {"v5.channel.k8s.io, " + identity.WebSocketBearerPrefix + base64.RawURLEncoding.EncodeToString([]byte("my-token"))},
	})
	if a, b := credential(header), credential(ws); a != b || !strings.HasPrefix(a, "token-sha256:") {
		t.Fatalf("header %q, WebSocket %q: want one hash", a, b)
	}
}

// heldRecorder is a Recorder that keeps events and counts holds.
type heldRecorder struct {
	mu     sync.Mutex
	stages []string
	users  []string
	at     []time.Time
	held   atomic.Int32
}

func (h *heldRecorder) Record(stage string, _ types.UID, req *Request, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stages = append(h.stages, stage)
	user := ""
	if req.User != nil {
		user = req.User.Name
	}
	h.users = append(h.users, user)
	h.at = append(h.at, at)
}

func (h *heldRecorder) Hold() func() {
	h.held.Add(1)
	return func() { h.held.Add(-1) }
}

// TestTrailWaitsForTheCaller: events written while the caller is being
// looked up are written once it is known, in order, stamped with when
// they happened, the Recorder held until then; with the lookup done, they
// are written at once.
func TestTrailWaitsForTheCaller(t *testing.T) {
	rec := &heldRecorder{}
	who := identity.NewAttribution()
	found := make(chan struct{})
	who.Lookup(func() (identity.Caller, error) { <-found; return identity.Caller{Name: "alice"}, nil })
	r := execRequest(t, http.Header{})
	tr := NewTrail(rec, r, "passthrough", func(req *Request) { req.Route = "exec" }, who)
	startedAt := time.Now()
	tr.Header(101, true)
	tr.StreamFollowed("v5.channel.k8s.io")
	tr.StreamEnded(streamfollow.Summary{End: streamfollow.EndCompleted})
	tr.Finish(101, 0)
	rec.mu.Lock()
	early := len(rec.stages)
	rec.mu.Unlock()
	if early != 0 || rec.held.Load() != 1 {
		t.Fatalf("%d events written and %d holds before the caller was known; want none and one", early, rec.held.Load())
	}
	close(found)
	waitFor(t, "the deferred events", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.stages) == 2 })
	if strings.Join(rec.stages, ",") != "ResponseStarted,ResponseComplete" || strings.Join(rec.users, ",") != "alice,alice" ||
		rec.at[0].Before(startedAt) || rec.at[0].After(rec.at[1]) {
		t.Fatalf("wrote %v for %v at %v", rec.stages, rec.users, rec.at)
	}
	waitFor(t, "the hold released", func() bool { return rec.held.Load() == 0 })
}

// TestAuditorDrainsHeldEvents: stopping the Auditor waits for the events
// held back for their caller before its sinks stop, so they are written.
func TestAuditorDrainsHeldEvents(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	path := filepath.Join(t.TempDir(), "a.log")
	s, err := NewFileSink(FileOptions{Path: path, MaxSize: 1 << 20, Buffer: 10, BufferBytes: 1 << 20}, m)
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{Metrics: m, Sinks: []Sink{s}})
	ctx, stop := context.WithCancel(context.Background())
	a.Start(ctx, time.Second)
	who := identity.NewAttribution()
	found := make(chan struct{})
	who.Lookup(func() (identity.Caller, error) { <-found; return identity.Caller{Name: "alice"}, nil })
	tr := NewTrail(a, execRequest(t, http.Header{}), "passthrough", func(req *Request) { req.Route = "exec" }, who)
	tr.Finish(403, 0)
	stop() // the gateway stops while the event waits for its caller
	close(found)
	a.Wait()
	b, err := os.ReadFile(path)
	if got := strings.Split(strings.TrimSpace(string(b)), "\n"); err != nil || len(got) != 1 || !strings.Contains(got[0], `"username":"alice"`) {
		t.Fatalf("audit log %q (%v), want the held event with its caller", got, err)
	}
}
