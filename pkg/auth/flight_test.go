package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// missCounter counts cache misses per kind ("resource", "token", ...) and
// closes reached once want misses of kind were seen.
type missCounter struct {
	kind    string
	want    int64
	n       atomic.Int64
	reached chan struct{}
	once    sync.Once
}

func newMissCounter(kind string, want int64) *missCounter {
	return &missCounter{kind: kind, want: want, reached: make(chan struct{})}
}

func (m *missCounter) missed(key string) {
	if strings.HasPrefix(key, m.kind+":") && m.n.Add(1) == m.want {
		m.once.Do(func() { close(m.reached) })
	}
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestConcurrentMissesShareOneReview: 100 first requests at once with one
// token cost one TokenReview and one SubjectAccessReview. The reviews are
// held until all 100 requests have missed the cache, so each of them would
// make its own without the Authorizer's flights (replacing a.flights.DoChan
// in cached by a direct compute makes this test see 100 of each).
func TestConcurrentMissesShareOneReview(t *testing.T) {
	const callers = 100
	e := newTestEnv(t, nil)
	e.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
	gate := make(chan struct{})
	e.api.set(func(api *fakeAPI) { api.gate = gate })
	misses := newMissCounter("resource", callers)
	e.authz.missed = misses.missed

	errs := make(chan error, callers)
	for range callers {
		go func() {
			caller, err := e.authz.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), execJob42)
			if err == nil && caller.Name != "alice" {
				err = errors.New("caller " + caller.Name)
			}
			errs <- err
		}()
	}
	waitFor(t, misses.reached, "every request to miss the cache")
	close(gate)
	for range callers {
		if err := <-errs; err != nil {
			t.Errorf("AuthorizeResource: %v", err)
		}
	}
	if trs, sars := e.api.calls(); trs != 1 || sars != 1 {
		t.Errorf("%d concurrent first requests made %d TokenReviews and %d SubjectAccessReviews, want 1 and 1", callers, trs, sars)
	}
}

// TestCancelledCallerDoesNotFailOthers: the request that started the shared
// review goes away; the one waiting on the same review still gets its
// answer, and the cancelled one alone fails. The reviews go to an HTTP
// server, so a shared call that ran under the first caller's context (not
// detached, in cached) would be cancelled with it and fail the second.
func TestCancelledCallerDoesNotFailOthers(t *testing.T) {
	gate := make(chan struct{})
	var trs, sars atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
			trs.Add(1)
			w.Write([]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","status":{"authenticated":true,"user":{"username":"alice"}}}`))
			return
		}
		sars.Add(1)
		w.Write([]byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","status":{"allowed":true}}`))
	}))
	defer api.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	firstMissed := newMissCounter("resource", 1)
	bothMissed := newMissCounter("resource", 2)
	a.missed = func(key string) { firstMissed.missed(key); bothMissed.missed(key) }

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := a.AuthorizeResource(ctx, newRequest(bearer("alice-token"), nil), execJob42)
		first <- err
	}()
	waitFor(t, firstMissed.reached, "the first request to start the review")
	second := make(chan error, 1)
	go func() {
		_, err := a.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), execJob42)
		second <- err
	}()
	waitFor(t, bothMissed.reached, "the second request to join it")
	cancel()
	if err := <-first; err == nil {
		t.Errorf("cancelled request was allowed")
	}
	close(gate)
	if err := <-second; err != nil {
		t.Errorf("request sharing a review with a cancelled one: %v", err)
	}
	if trs.Load() != 1 || sars.Load() != 1 {
		t.Errorf("made %d TokenReviews and %d SubjectAccessReviews, want 1 and 1", trs.Load(), sars.Load())
	}
}

// TestReviewTimeout: a karmada-apiserver that accepts a review and never
// answers costs the client Options.Timeout and a 504 naming it and the
// review, not a hang. Without the deadline in call this test waits for the
// hung server until the test binary's own timeout.
func TestReviewTimeout(t *testing.T) {
	for _, hangOn := range []string{"TokenReview", "SubjectAccessReview"} {
		t.Run(hangOn, func(t *testing.T) {
			release := make(chan struct{})
			hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/tokenreviews") && hangOn != "TokenReview" {
					w.Header().Set("Content-Type", "application/json")
					w.Write([]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","status":{"authenticated":true,"user":{"username":"alice"}}}`))
					return
				}
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			defer hung.Close()
			defer close(release)
			client, err := kubernetes.NewForConfig(&rest.Config{Host: hung.URL})
			if err != nil {
				t.Fatal(err)
			}
			a, err := New(Options{Client: client, Timeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = a.AuthorizeResource(context.Background(), newRequest(bearer("alice-token"), nil), execJob42)
			took := time.Since(start)
			code, msg := statusOf(t, err)
			if code != http.StatusGatewayTimeout || !strings.Contains(msg, "karmada-apiserver") || !strings.Contains(msg, hangOn) {
				t.Errorf("got %d %q, want 504 naming karmada-apiserver and the %s", code, msg, hangOn)
			}
			if took > 5*time.Second {
				t.Errorf("took %s with a 200ms timeout", took)
			}
			if strings.Contains(err.Error(), "alice-token") {
				t.Errorf("error names the token: %v", err)
			}
		})
	}
}
