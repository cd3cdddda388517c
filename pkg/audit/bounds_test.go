package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEventsAreTruncated: an event of a request whose URI, command, user
// agent and impersonation a client made huge is encoded within
// MaxEventSize, with those fields cut (their start kept) and marked as
// kube-apiserver marks a truncated event; an ordinary event is unchanged.
func TestEventsAreTruncated(t *testing.T) {
	const max = DefaultMaxEventSize
	huge := strings.Repeat("a", 900<<10)
	r := httptest.NewRequest(http.MethodPost, "https://gw/api/v1/namespaces/ci/pods/job-42/exec?command=sh&command="+huge+"&stdin=true", nil)
	r.Header.Set("User-Agent", strings.Repeat("u", 200<<10))
	r.Header.Set("Impersonate-User", "bob")
	for i := range 20000 {
		r.Header.Add("Impersonate-Group", fmt.Sprintf("group-%05d", i))
	}
	ev := NewEvent(StageResponseComplete, "id", &Request{HTTP: r, Route: "exec", Code: 403}, time.Now(), max)
	b, err := encodeWithin(ev, max)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > max {
		t.Fatalf("encoded in %d bytes, over %d", len(b), max)
	}
	var got Event
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[AnnotationTruncated] != "true" || !strings.HasPrefix(got.RequestURI, "/api/v1/namespaces/ci/pods/job-42/exec?command=sh&command=aaa") {
		t.Fatalf("truncated %q, URI %.80q", got.Annotations[AnnotationTruncated], got.RequestURI)
	}
	for _, f := range []string{"requestURI", "userAgent", "impersonatedUser", "annotations." + AnnotationCommand} {
		if !strings.Contains(got.Annotations[AnnotationTruncatedFields], f) {
			t.Errorf("truncated fields %q do not name %s", got.Annotations[AnnotationTruncatedFields], f)
		}
	}
	if got.ImpersonatedUser.Username != "bob" || len(got.ImpersonatedUser.Groups) == 0 || got.Verb != "create" || got.ObjectRef.Name != "job-42" {
		t.Errorf("what identifies the request was lost: %+v %+v %s", got.ImpersonatedUser.Username, got.ObjectRef, got.Verb)
	}

	plain := NewEvent(StageResponseComplete, "id", &Request{HTTP: execRequest(t, http.Header{}), Route: "exec", Code: 101}, time.Now(), max)
	b, err = encodeWithin(plain, max)
	if err != nil || strings.Contains(string(b), "truncated") {
		t.Fatalf("an ordinary event was cut: %s, %v", b, err)
	}
}

// TestQueuesAreBoundedInBytes: a sink's queue refuses an event that would
// take it past its bytes, however few events it holds, and takes events
// again once the writer gave their bytes back; the Auditor counts what was
// refused.
func TestQueuesAreBoundedInBytes(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	s, err := NewFileSink(FileOptions{Path: t.TempDir() + "/a.log", MaxSize: 1 << 30, Buffer: 10000, BufferBytes: 1 << 20}, m)
	if err != nil {
		t.Fatal(err)
	}
	ev := make([]byte, 100<<10)
	took := 0
	for range 50 {
		if s.Enqueue(ev) {
			took++
		}
	}
	if took != 10 {
		t.Fatalf("a 1 MiB queue took %d events of 100 KiB", took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Second); close(done) }()
	waitFor(t, "the writer to give the bytes back", func() bool { return s.q.bytes.Load() == 0 })
	if !s.Enqueue(ev) {
		t.Fatal("the queue refused an event once it was written")
	}
	cancel()
	<-done
}

// TestHungWebhookHoldsBoundedBytes: a webhook that accepts connections
// and never answers holds, at most, the queue's bytes, the batch being
// sent included; every event past them is dropped and counted, and a batch
// never holds more than BatchMaxBytes.
func TestHungWebhookHoldsBoundedBytes(t *testing.T) {
	hung := make(chan struct{})
	var mu sync.Mutex
	var largest int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		largest = max(largest, r.ContentLength)
		mu.Unlock()
		select {
		case <-hung:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hung)
	m := NewMetrics(prometheus.NewRegistry())
	const budget, batchBytes = 2 << 20, 512 << 10
	s, err := NewWebhookSink(WebhookOptions{
		Client: srv.Client(), URL: srv.URL, BatchMaxSize: 400, BatchMaxBytes: batchBytes, BatchMaxWait: time.Millisecond,
		Buffer: 10000, BufferBytes: budget, InitialBackoff: time.Hour, Retries: 1, Timeout: time.Hour,
	}, m)
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{Metrics: m, Sinks: []Sink{s}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, time.Millisecond)
	uri := "https://gw/api/v1/namespaces/ci/pods/job-42/exec?command=" + strings.Repeat("x", 900<<10)
	const n = 150
	for range n {
		a.Record(StageResponseComplete, NewID(), &Request{HTTP: httptest.NewRequest(http.MethodPost, uri, nil), Route: "refused", Code: 400}, time.Now())
		if got := s.q.bytes.Load(); got > budget {
			t.Fatalf("the webhook holds %d bytes, over its %d", got, budget)
		}
	}
	waitFor(t, "a batch to be posted", func() bool { mu.Lock(); defer mu.Unlock(); return largest > 0 })
	taken, dropped := testutil.ToFloat64(m.Events.WithLabelValues("webhook")), testutil.ToFloat64(m.Dropped.WithLabelValues("webhook"))
	if taken+dropped != n || taken == 0 || dropped < n/3 {
		t.Errorf("took %v and dropped %v of %d events", taken, dropped, n)
	}
	// Nothing completes against a hung webhook: every event taken is still
	// held, queued or in the batch being posted.
	one, err := encodeWithin(NewEvent(StageResponseComplete, NewID(), &Request{HTTP: httptest.NewRequest(http.MethodPost, uri, nil), Route: "refused", Code: 400}, time.Now(), DefaultMaxEventSize), DefaultMaxEventSize)
	if err != nil {
		t.Fatal(err)
	}
	if held := int(taken) * len(one); held > budget {
		t.Errorf("the webhook took %v events of %d bytes: %d bytes held, over its %d", taken, len(one), held, budget)
	}
	mu.Lock()
	defer mu.Unlock()
	if largest > batchBytes+64<<10 { // the EventList's own bytes around the events
		t.Errorf("a batch of %d bytes was posted, over %d", largest, batchBytes)
	}
}
