package upload

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

// memStore keeps what is put, in order; fail, when set, decides whether a
// put fails (before anything is stored).
type memStore struct {
	mu      sync.Mutex
	objects map[string][]byte
	meta    map[string]map[string]string
	order   []string
	fail    func(key string) error
	stored  chan string
}

func newMemStore() *memStore {
	return &memStore{objects: map[string][]byte{}, meta: map[string]map[string]string{}, stored: make(chan string, 100)}
}

func (m *memStore) Put(ctx context.Context, obj Object) error {
	m.mu.Lock()
	fail := m.fail
	m.mu.Unlock()
	if fail != nil {
		if err := fail(obj.Key); err != nil {
			return err
		}
	}
	body, err := io.ReadAll(obj.Body)
	if err != nil {
		return err
	}
	if int64(len(body)) != obj.Size {
		return errors.New("body is not Size bytes")
	}
	if sum := md5.Sum(body); !bytes.Equal(sum[:], obj.MD5) {
		return errors.New("BadDigest")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[obj.Key] = body
	m.meta[obj.Key] = obj.Metadata
	m.order = append(m.order, obj.Key)
	m.stored <- obj.Key
	return nil
}

func (m *memStore) setFail(f func(string) error) {
	m.mu.Lock()
	m.fail = f
	m.mu.Unlock()
}

const header = `{"version":2,"width":80,"height":24,"timestamp":1,"title":"p"}` + "\n"

// spoolFile writes a finished recording finished age ago.
func spoolFile(t *testing.T, dir, name, content string, age time.Duration) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-age)
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

func newUploader(t *testing.T, dir string, store Store, reg prometheus.Registerer) *Uploader {
	t.Helper()
	u, err := New(Options{Dir: dir, Prefix: "rec/", Store: store, Timeout: time.Second,
		InitialBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Rescan: time.Hour, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestDrainStoresOldestFirstAndEmptiesTheSpool: each finished recording is
// put under the prefix with its bytes and MD5, oldest first, and removed
// once stored; a session still being written and other files stay.
func TestDrainStoresOldestFirstAndEmptiesTheSpool(t *testing.T) {
	dir := t.TempDir()
	spoolFile(t, dir, "ci_b_2.cast", header+`[0.1,"o","b"]`+"\n", time.Minute)
	spoolFile(t, dir, "ci_a_1.cast", header+`[0.1,"o","a"]`+"\n", time.Hour)
	spoolFile(t, dir, "ci_c_3.cast", header, time.Second)
	spoolFile(t, dir, ".ci_d_4.cast.tmp", header, time.Hour)
	spoolFile(t, dir, "notes.txt", "x", time.Hour)
	store := newMemStore()
	u := newUploader(t, dir, store, nil)
	if err := u.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"rec/ci_a_1.cast", "rec/ci_b_2.cast", "rec/ci_c_3.cast"}; strings.Join(store.order, " ") != strings.Join(want, " ") {
		t.Errorf("put %v, want %v", store.order, want)
	}
	if got := string(store.objects["rec/ci_b_2.cast"]); got != header+`[0.1,"o","b"]`+"\n" {
		t.Errorf("stored %q", got)
	}
	if left := listDir(t, dir); strings.Join(left, " ") != ".ci_d_4.cast.tmp notes.txt" {
		t.Errorf("left in the directory: %v, want the open session's file and the stranger", left)
	}
	if got := testutil.ToFloat64(u.uploads.WithLabelValues(resultUploaded)); got != 3 {
		t.Errorf("uploads counted %v, want 3", got)
	}
}

// spoolOfThree is a spool of three recordings, oldest first ci_a_1.cast,
// middle and ci_c_3.cast, and a store whose put of middle fails with err.
func spoolOfThree(t *testing.T, middle string, err error) (string, *memStore) {
	t.Helper()
	dir := t.TempDir()
	spoolFile(t, dir, "ci_a_1.cast", header, time.Hour)
	spoolFile(t, dir, middle, header, time.Minute)
	spoolFile(t, dir, "ci_c_3.cast", header, time.Second)
	store := newMemStore()
	store.setFail(func(key string) error {
		if key == "rec/"+middle {
			return err
		}
		return nil
	})
	return dir, store
}

// TestFailedPutKeepsTheRecording: a put that fails removes nothing and
// ends the pass; the next one starts with the same file.
func TestFailedPutKeepsTheRecording(t *testing.T) {
	dir, store := spoolOfThree(t, "ci_b_2.cast", errors.New("503 SlowDown"))
	u := newUploader(t, dir, store, nil)
	// Drain retries until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := u.Drain(ctx)
	if err == nil || !strings.Contains(err.Error(), "2 recordings left") || !strings.Contains(err.Error(), "SlowDown") {
		t.Fatalf("Drain: %v, want the store's error and what is left", err)
	}
	if left := listDir(t, dir); strings.Join(left, " ") != "ci_b_2.cast ci_c_3.cast" {
		t.Errorf("left %v", left)
	}
	if got := testutil.ToFloat64(u.uploads.WithLabelValues(resultFailed)); got < 2 {
		t.Errorf("failures counted %v, want a put and its retries", got)
	}
	store.setFail(nil)
	if err := u.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Join(store.order, " ") != "rec/ci_a_1.cast rec/ci_b_2.cast rec/ci_c_3.cast" || len(listDir(t, dir)) != 0 {
		t.Errorf("put %v, left %v", store.order, listDir(t, dir))
	}
}

// TestIncompleteRecordingsAreStoredMarked: a recording whose last event is
// an incompleteness marker carries its reason as metadata; a whole one
// carries none.
func TestIncompleteRecordingsAreStoredMarked(t *testing.T) {
	dir := t.TempDir()
	cut := `[0.2,"m","recording incomplete: the stream was cut before the command's exit status"]`
	spoolFile(t, dir, "ci_cut_1.cast", header+`[0.1,"o","a"]`+"\n"+cut+"\n", time.Minute)
	spoolFile(t, dir, "ci_whole_2.cast", header+`[0.1,"o","recording incomplete: typed by the user"]`+"\n", time.Second)
	store := newMemStore()
	if err := newUploader(t, dir, store, nil).Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := store.meta["rec/ci_cut_1.cast"][MetadataIncomplete]; !strings.Contains(got, "cut before the command's exit status") {
		t.Errorf("cut recording's metadata %v", store.meta["rec/ci_cut_1.cast"])
	}
	if got, ok := store.meta["rec/ci_whole_2.cast"][MetadataIncomplete]; ok {
		t.Errorf("whole recording marked incomplete: %q", got)
	}
}

// TestLockedRecordingIsLeftToItsHolder: another replica sharing the
// directory holds the file's lock while it uploads it; this one leaves it.
func TestLockedRecordingIsLeftToItsHolder(t *testing.T) {
	dir := t.TempDir()
	spoolFile(t, dir, "ci_a_1.cast", header, time.Minute)
	f, err := os.Open(filepath.Join(dir, "ci_a_1.cast"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	store := newMemStore()
	u := newUploader(t, dir, store, nil)
	if err := u.Drain(context.Background()); err != nil || len(store.order) != 0 {
		t.Fatalf("Drain: %v, put %v; want the locked file left alone", err, store.order)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := u.Drain(context.Background()); err != nil || len(store.order) != 1 {
		t.Fatalf("Drain once unlocked: %v, put %v", err, store.order)
	}
}

// TestRunRetriesAFailingStore: Run keeps the spool while the store fails
// and empties it once the store takes puts again; a recording announced
// with Notify is put without waiting for the rescan.
func TestRunRetriesAFailingStore(t *testing.T) {
	dir := t.TempDir()
	spoolFile(t, dir, "ci_a_1.cast", header, time.Minute)
	store := newMemStore()
	failures := make(chan struct{}, 100)
	store.setFail(func(string) error {
		failures <- struct{}{}
		return errors.New("connection refused")
	})
	u := newUploader(t, dir, store, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for range 3 { // the first try and two retries after their backoffs
		select {
		case <-failures:
		case <-time.After(10 * time.Second):
			t.Fatal("the failing store was not tried again")
		}
	}
	store.setFail(nil)
	waitStored(t, store, "rec/ci_a_1.cast")
	// The rescan is an hour away: only Notify brings this one.
	spoolFile(t, dir, "ci_b_2.cast", header, 0)
	u.Notify()
	waitStored(t, store, "rec/ci_b_2.cast")
	// Stored, it leaves the spool (the store answered before the removal).
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(listDir(t, dir)) == 0, nil
	}); err != nil {
		t.Errorf("left %v after both were stored", listDir(t, dir))
	}
}

func waitStored(t *testing.T, store *memStore, key string) {
	t.Helper()
	select {
	case got := <-store.stored:
		if got != key {
			t.Fatalf("stored %s, want %s", got, key)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not stored", key)
	}
}

// TestPutHasADeadline: a store that never answers fails the put at
// Timeout, and the recording stays.
func TestPutHasADeadline(t *testing.T) {
	dir := t.TempDir()
	spoolFile(t, dir, "ci_a_1.cast", header, time.Minute)
	var puts atomic.Int32
	hung := StoreFunc(func(ctx context.Context, _ Object) error {
		puts.Add(1)
		<-ctx.Done()
		return ctx.Err()
	})
	u := newUploader(t, dir, hung, nil)
	u.opts.Timeout = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	if err := u.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain: %v, want the put's deadline", err)
	}
	// Within the drain's time, the hung put was given up and tried again.
	if n := puts.Load(); n < 2 {
		t.Errorf("%d puts in %v with a put deadline of %v; the first one was never given up", n, 400*time.Millisecond, u.opts.Timeout)
	}
	if left := listDir(t, dir); len(left) != 1 {
		t.Errorf("left %v", left)
	}
}

// StoreFunc is a Store of one function.
type StoreFunc func(context.Context, Object) error

func (f StoreFunc) Put(ctx context.Context, obj Object) error { return f(ctx, obj) }

// TestS3PutHasADeadline: an endpoint that takes a request and never
// answers (a hung store, or a proxy in front of a dead one) fails the real
// client's put at the Uploader's deadline.
func TestS3PutHasADeadline(t *testing.T) {
	var puts atomic.Int32
	released := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		puts.Add(1)
		select {
		case <-released:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(released)
	creds := t.TempDir()
	for _, f := range []string{"id", "key"} {
		if err := os.WriteFile(filepath.Join(creds, f), []byte("secret-"+f+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	store, err := NewS3Store(S3Options{Endpoint: hung.URL, Region: "us-east-1", Bucket: "b", PathStyle: true,
		AccessKeyIDFile: filepath.Join(creds, "id"), SecretAccessKeyFile: filepath.Join(creds, "key"), DialTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	spoolFile(t, dir, "ci_a_1.cast", header, time.Minute)
	u := newUploader(t, dir, store, nil)
	u.opts.Timeout = 200 * time.Millisecond
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = u.Drain(ctx)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Drain against a hung endpoint: %v after %v, want a failure at the deadline", err, time.Since(start))
	}
	if n := puts.Load(); n < 2 {
		t.Errorf("%d puts in a second with a put deadline of %v; the first one was never given up", n, u.opts.Timeout)
	}
	if strings.Contains(err.Error(), "secret-") {
		t.Errorf("the error carries a credential: %v", err)
	}
	if left := listDir(t, dir); len(left) != 1 {
		t.Errorf("left %v", left)
	}
}

// TestSpoolMetrics: the spool's files, bytes and the oldest's age are read
// at each scrape; finished recordings only.
func TestSpoolMetrics(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewPedanticRegistry()
	u := newUploader(t, dir, newMemStore(), reg)
	now := time.Now()
	u.now = func() time.Time { return now }
	check := func(files, bytes int, minAge, maxAge float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge() != nil {
				got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		if got["karmada_gateway_recording_spool_files"] != float64(files) || got["karmada_gateway_recording_spool_bytes"] != float64(bytes) {
			t.Errorf("spool %v, want %d files of %d bytes", got, files, bytes)
		}
		if age := got["karmada_gateway_recording_spool_oldest_age_seconds"]; age < minAge || age > maxAge {
			t.Errorf("oldest age %v, want in [%v, %v]", age, minAge, maxAge)
		}
	}
	check(0, 0, 0, 0)
	spoolFile(t, dir, "ci_a_1.cast", "12345", time.Hour)
	spoolFile(t, dir, "ci_b_2.cast", "123", time.Minute)
	spoolFile(t, dir, ".ci_c_3.cast.tmp", "1234567", 2*time.Hour)
	check(2, 8, 3590, 3610)
	if err := u.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(0, 0, 0, 0)
}

// TestRejectedRecordingIsSetAside: a recording the store refuses on its own
// (413: too large) is set aside as <name>.rejected, kept, counted and
// exported, and never put again; the recordings before and after it are
// stored in the same pass, which ends without error, so no backoff holds
// the recordings that come next, and a drain is not spent on it. It used
// to stay in the spool, re-sent at every pass, the uploader in backoff.
func TestRejectedRecordingIsSetAside(t *testing.T) {
	dir, store := spoolOfThree(t, "ci_huge_2.cast", &RejectedError{Err: errors.New("413 EntityTooLarge")})
	reg := prometheus.NewRegistry()
	u := newUploader(t, dir, store, reg)
	if err := u.pass(context.Background()); err != nil {
		t.Fatalf("pass: %v, want none: a refusal is no failure of the store", err)
	}
	if strings.Join(store.order, " ") != "rec/ci_a_1.cast rec/ci_c_3.cast" {
		t.Errorf("put %v, want the recordings before and after the rejected one", store.order)
	}
	if left := listDir(t, dir); strings.Join(left, " ") != "ci_huge_2.cast"+RejectedSuffix {
		t.Errorf("left %v, want the rejected recording set aside", left)
	}
	if got := testutil.ToFloat64(u.uploads.WithLabelValues(resultRejected)); got != 1 {
		t.Errorf("rejections counted %v, want 1", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP karmada_gateway_recording_spool_rejected_files Recordings the store refused, kept in the recording directory as <name>.rejected and not sent again.
# TYPE karmada_gateway_recording_spool_rejected_files gauge
karmada_gateway_recording_spool_rejected_files 1
`), "karmada_gateway_recording_spool_rejected_files"); err != nil {
		t.Error(err)
	}
	// Never sent again: the next passes and a drain put nothing.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := u.Drain(ctx); err != nil || ctx.Err() != nil {
		t.Errorf("Drain: %v (its context: %v), want nothing left at once", err, ctx.Err())
	}
	if len(store.order) != 2 {
		t.Errorf("put %v after the pass; want the refused recording never sent again", store.order)
	}
}

// TestUploadedRecordingsLeaveTheCap: the recorder and the uploader wired as
// cmd/gateway wires them (OnFinished is Notify) on one spool whose cap
// holds one session: eight sessions of 5 KB, each uploaded when it ended,
// five times the cap in all, are each stored whole. An uploaded recording
// used to stay in the recorder's count, so later sessions were cut at a
// cap the empty spool was far from, and stored as a header and a marker.
func TestUploadedRecordingsLeaveTheCap(t *testing.T) {
	dir := t.TempDir()
	store := newMemStore()
	u := newUploader(t, dir, store, nil)
	rec, err := recording.New(recording.Options{Dir: dir, Mode: recording.ModeAll, MaxSessionBytes: 1 << 20, MaxTotalBytes: 8 << 10, OnFinished: u.Notify})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	line := strings.Repeat("x", 99) + "\n"
	for i := range 8 {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ci/pods/p/exec?command=sh&stdout=true", nil)
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
		s, err := rec.Start(req, "ci", "p", "exec")
		if err != nil || s == nil {
			t.Fatalf("session %d not started: %v", i, err)
		}
		opts := streamfollow.Options{Protocol: streamfollow.ProtocolOf(http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}, "exec")}
		if err := s.Attach(&opts, nil); err != nil {
			t.Fatal(err)
		}
		for range 40 {
			opts.Observer.Data(streamfollow.Stdout, []byte(line))
		}
		opts.OnEnd(streamfollow.Summary{End: streamfollow.EndCompleted})
		waitStored(t, store, "rec/"+s.Name())
		store.mu.Lock()
		body, meta := store.objects["rec/"+s.Name()], store.meta["rec/"+s.Name()]
		store.mu.Unlock()
		if n := bytes.Count(body, []byte("xxxx\\n")); n != 40 || meta[MetadataIncomplete] != "" {
			t.Fatalf("session %d stored with %d of its 40 lines, incomplete %q; want it whole", i, n, meta[MetadataIncomplete])
		}
		if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return len(listDir(t, dir)) == 0, nil
		}); err != nil {
			t.Fatalf("left %v after it was stored", listDir(t, dir))
		}
	}
}

// TestCleartextEndpointIsWarnedOf: an http:// endpoint is taken (a store
// on the pod's own network, in a test) with a warning that recordings go
// in cleartext; an https:// one without.
func TestCleartextEndpointIsWarnedOf(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"id", "secret"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for endpoint, warned := range map[string]bool{"http://s3.test:9000": true, "https://s3.test:9000": false} {
		logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
		if _, err := NewS3Store(S3Options{Endpoint: endpoint, Region: "r", Bucket: "b", AccessKeyIDFile: filepath.Join(dir, "id"),
			SecretAccessKeyFile: filepath.Join(dir, "secret"), DialTimeout: time.Second, Logger: logger}); err != nil {
			t.Fatal(err)
		}
		logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
		if strings.Contains(logs, "cleartext") != warned {
			t.Errorf("%s: logged %q; want a cleartext warning %v", endpoint, logs, warned)
		}
	}
}
