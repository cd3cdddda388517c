package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
	"k8s.io/client-go/util/flowcontrol"
)

// fakeKarmada answers /readyz as told and counts the calls.
type fakeKarmada struct {
	ready atomic.Bool
	hang  chan struct{} // when non-nil, /readyz blocks until it is closed
	calls atomic.Int32
	auth  atomic.Value // the last Authorization header
}

func (f *fakeKarmada) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/readyz" {
		http.NotFound(w, r)
		return
	}
	f.calls.Add(1)
	f.auth.Store(r.Header.Get("Authorization"))
	if f.hang != nil {
		select {
		case <-f.hang:
		case <-r.Context().Done():
		}
		return
	}
	if !f.ready.Load() {
		http.Error(w, "[-]etcd failed: reason withheld\nreadyz check failed", http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

func restClientFor(t *testing.T, host string) rest.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: host, BearerToken: "gateway-token"})
	if err != nil {
		t.Fatal(err)
	}
	return cs.Discovery().RESTClient()
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.String()
}

func TestReadyzFollowsKarmadaAPIServer(t *testing.T) {
	karmada := &fakeKarmada{}
	karmada.ready.Store(true)
	srv := httptest.NewServer(karmada)
	defer srv.Close()
	clock := &fakeClock{t: time.Unix(1000, 0)}
	check := newUpstreamCheck(restClientFor(t, srv.URL))
	check.now = clock.now
	synced := atomic.Bool{}
	synced.Store(true)
	h := newHealth(synced.Load, check)
	mux := h.mux(http.NotFoundHandler(), false)

	if code, body := get(t, mux, "/readyz"); code != 200 || body != "ok" {
		t.Fatalf("ready upstream: %d %q", code, body)
	}
	if got := karmada.auth.Load(); got != "Bearer gateway-token" {
		t.Errorf("upstream check sent Authorization %q, want the gateway's identity", got)
	}

	// Within the TTL the answer is reused: probes do not hammer karmada-apiserver.
	karmada.ready.Store(false)
	for range 5 {
		if code, _ := get(t, mux, "/readyz"); code != 200 {
			t.Fatalf("cached answer not used: %d", code)
		}
	}
	if n := karmada.calls.Load(); n != 1 {
		t.Fatalf("%d upstream checks within the TTL, want 1", n)
	}

	clock.advance(upstreamCheckTTL)
	code, body := get(t, mux, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "karmada-apiserver not ready: ") {
		t.Fatalf("unready upstream: %d %q", code, body)
	}
	if code, _ := get(t, mux, "/healthz"); code != 200 {
		t.Errorf("liveness followed karmada-apiserver: %d", code)
	}

	// It recovers by itself, at the first probe after the TTL.
	karmada.ready.Store(true)
	clock.advance(upstreamCheckTTL)
	if code, body := get(t, mux, "/readyz"); code != 200 {
		t.Fatalf("did not recover: %d %q", code, body)
	}

	// Shutting down and unsynced caches win without asking upstream.
	before := karmada.calls.Load()
	clock.advance(upstreamCheckTTL)
	synced.Store(false)
	if code, body := get(t, mux, "/readyz"); code != 503 || !strings.Contains(body, "caches not synced") {
		t.Errorf("unsynced: %d %q", code, body)
	}
	h.shuttingDown()
	if code, body := get(t, mux, "/readyz"); code != 503 || !strings.Contains(body, "shutting down") {
		t.Errorf("stopping: %d %q", code, body)
	}
	if karmada.calls.Load() != before {
		t.Error("asked karmada-apiserver when the answer was already known")
	}
}

func TestReadyzUnreachableAndHungUpstream(t *testing.T) {
	down := "http://" + proxytest.RefusedAddr(t)

	hung := &fakeKarmada{hang: make(chan struct{})}
	hungSrv := httptest.NewServer(hung)
	defer hungSrv.Close()
	defer close(hung.hang)

	for _, tc := range []struct{ name, host string }{{"unreachable", down}, {"hung", hungSrv.URL}} {
		t.Run(tc.name, func(t *testing.T) {
			check := newUpstreamCheck(restClientFor(t, tc.host))
			check.timeout = 100 * time.Millisecond
			mux := newHealth(func() bool { return true }, check).mux(http.NotFoundHandler(), false)
			start := time.Now()
			code, body := get(t, mux, "/readyz")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "karmada-apiserver not ready") {
				t.Fatalf("%d %q", code, body)
			}
			if elapsed := time.Since(start); elapsed > 10*time.Second {
				t.Errorf("probe took %v; the check timeout did not bound it", elapsed)
			}
		})
	}
}

// TestUpstreamCheckIgnoresProberCancellation: a prober that gives up must
// not cache its own cancellation as karmada-apiserver's answer.
func TestUpstreamCheckIgnoresProberCancellation(t *testing.T) {
	check := &upstreamCheck{
		probe:   func(ctx context.Context) error { return ctx.Err() },
		ttl:     time.Hour,
		timeout: time.Minute,
		now:     time.Now,
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = check.check(ctx) // the prober left: whatever it is told, nobody reads it
	// The probe it started runs on and its answer is the one cached.
	if err := check.check(context.Background()); err != nil {
		t.Fatalf("a cancelled prober's context reached the probe: %v", err)
	}
}

// TestUpstreamCheckSharesOneProbe: probes that arrive while karmada-apiserver
// hangs share the one probe in flight, and every one of them reads not
// ready within the check timeout. A probe holding the lock (the former
// design) would have them queue, each waiting a timeout per probe ahead of
// it; one probe each would make calls equal the probers.
func TestUpstreamCheckSharesOneProbe(t *testing.T) {
	const probers = 20
	var calls atomic.Int32
	entered := make(chan struct{})
	release := make(chan struct{})
	check := &upstreamCheck{
		probe: func(ctx context.Context) error {
			if calls.Add(1) == 1 {
				close(entered)
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		ttl:     time.Hour,
		timeout: 300 * time.Millisecond,
		now:     time.Now,
	}
	defer close(release)
	start := time.Now()
	errs := make(chan error, probers)
	go func() { errs <- check.check(context.Background()) }()
	<-entered
	for range probers - 1 {
		go func() { errs <- check.check(context.Background()) }()
	}
	for range probers {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("prober during a hung karmada-apiserver got %v, want the probe's deadline", err)
		}
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("%d probers took %v with a 300ms check timeout", probers, elapsed)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d probers asked karmada-apiserver %d times, want once", probers, n)
	}

	// A prober that gives up returns at once, whatever the probe does.
	check.ttl = 0
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	check.timeout = time.Hour
	if err := check.check(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("abandoned probe: %v", err)
	}
}

func TestDrainRunsStepsTogether(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	started := make(chan string, 3)
	release := make(chan struct{})
	block := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			started <- name
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	done := make(chan error, 1)
	labeler := make(chan struct{})
	go func() {
		done <- drain(ctx,
			drainStep{"server", block("server")},
			drainStep{"streams", block("streams")},
			drainStep{"labeler lease release", waitClosed(labeler)},
			drainStep{"failing", func(context.Context) error { return errors.New("boom") }},
		)
	}()
	// Both blocking steps run at once: neither waits for the other.
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("drain ran its steps one after the other")
		}
	}
	close(release)
	close(labeler)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "failing: boom") || strings.Contains(err.Error(), "server") {
			t.Errorf("drain error %v", err)
		}
	case <-ctx.Done():
		t.Fatal("drain did not return")
	}

	// A labeler that never stops is reported at the deadline.
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := drain(short, drainStep{"labeler lease release", waitClosed(make(chan struct{}))}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stuck labeler: %v", err)
	}
}

func TestProfilingOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		profiling bool
		want      int
	}{
		{false, http.StatusNotFound},
		{true, http.StatusOK},
	} {
		mux := newHealth(func() bool { return true }, nil).mux(http.NotFoundHandler(), tc.profiling)
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
			if code, _ := get(t, mux, path); code != tc.want {
				t.Errorf("--profiling=%v: GET %s answered %d, want %d", tc.profiling, path, code, tc.want)
			}
		}
	}
}

// TestReviewClientsHaveTheirOwnLimits: the clients authorize mode reviews
// known callers and new credentials with, and readiness probes with, each
// have a rate limiter of their own, as run builds them: a flood that
// spends one budget leaves the others whole.
func TestReviewClientsHaveTheirOwnLimits(t *testing.T) {
	c, err := newReviewClients(&rest.Config{Host: "https://karmada.test", QPS: 1, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	limiters := map[flowcontrol.RateLimiter]bool{}
	for _, client := range []kubernetes.Interface{c.knownCallers, c.newCredentials, c.readiness} {
		l := client.Discovery().RESTClient().GetRateLimiter()
		if l == nil {
			t.Fatal("a review client has no rate limiter")
		}
		limiters[l] = true
	}
	if len(limiters) != 3 {
		t.Fatalf("%d rate limiters for three clients", len(limiters))
	}
}
