package auth

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
)

// fromSource is a request with the bearer token from the address source.
func fromSource(token, source string) *http.Request {
	r := newRequest(bearer(token), nil)
	r.RemoteAddr = source + ":5555"
	return r
}

// TestFailedAuthenticationsLimitedPerSource: a source sending random tokens
// gets a TokenReview for each until it failed twice DefaultFailedPerSource
// times, then 429 without any; its failures come back with time. A token
// known good from the same source, and any token from another source,
// are reviewed as before.
func TestFailedAuthenticationsLimitedPerSource(t *testing.T) {
	env := newTestEnv(t, nil)
	ctx := context.Background()
	env.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
	if _, err := env.authz.AuthorizeResource(ctx, fromSource("alice-token", "192.0.2.1"), execJob42); err != nil {
		t.Fatal(err) // alice's token is now known good
	}
	env.clock.Step(11 * time.Second) // and no longer cached
	reviewsBefore, _ := env.api.calls()
	codes := map[int32]int{}
	for i := range 100 {
		_, err := env.authz.AuthorizeResource(ctx, fromSource(fmt.Sprintf("random-%d", i), "192.0.2.1"), execJob42)
		code, _ := statusOf(t, err)
		codes[code]++
	}
	reviews, _ := env.api.calls()
	burst := 2 * int(DefaultFailedPerSource)
	if codes[http.StatusUnauthorized] != burst || codes[http.StatusTooManyRequests] != 100-burst || reviews-reviewsBefore != burst {
		t.Fatalf("100 random tokens from one source: %v with %d TokenReviews; want %d 401s with a review each, then 429s with none",
			codes, reviews-reviewsBefore, burst)
	}
	if _, err := env.authz.AuthorizeResource(ctx, fromSource("alice-token", "192.0.2.1"), execJob42); err != nil {
		t.Errorf("a token known good, from the flooding source: %v", err)
	}
	if _, err := env.authz.AuthorizeResource(ctx, fromSource("random-x", "192.0.2.2"), execJob42); err == nil || func() bool { c, _ := statusOf(t, err); return c != http.StatusUnauthorized }() {
		t.Errorf("a random token from another source: %v, want 401 after a review", err)
	}
	env.clock.Step(time.Second)
	if _, err := env.authz.AuthorizeResource(ctx, fromSource("random-later", "192.0.2.1"), execJob42); func() int32 { c, _ := statusOf(t, err); return c }() != http.StatusUnauthorized {
		t.Errorf("a second later, the source's next random token: %v, want a review and 401", err)
	}
	if got := env.decisions(t)["throttled/miss"]; got != float64(100-burst) {
		t.Errorf("throttled decisions counted %v, want %d", got, 100-burst)
	}
}

// TestNewCredentialsHaveTheirOwnBudget: the TokenReviews of credentials not
// known good go through NewCredentialClient; a known caller's review after
// its cache entry expired, and every SubjectAccessReview, go through
// Client, so they never wait behind a flood stuck on the other.
func TestNewCredentialsHaveTheirOwnBudget(t *testing.T) {
	newAPI, newClient := newFakeAPI()
	env := newTestEnv(t, func(o *Options) { o.NewCredentialClient = newClient })
	ctx := context.Background()
	env.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
	newAPI.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
	if _, err := env.authz.AuthorizeResource(ctx, fromSource("alice-token", "192.0.2.1"), execJob42); err != nil {
		t.Fatal(err)
	}
	if known, _ := env.api.calls(); known != 0 {
		t.Fatalf("a first-seen token was reviewed by the known callers' client")
	}
	// A flood holds the new-credential client.
	gate := make(chan struct{})
	newAPI.set(func(api *fakeAPI) { api.gate = gate })
	defer close(gate)
	for i := range 5 {
		go func() {
			_, _ = env.authz.AuthorizeResource(ctx, fromSource(fmt.Sprintf("flood-%d", i), "192.0.2.9"), execJob42)
		}()
	}
	env.clock.Step(11 * time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := env.authz.AuthorizeResource(ctx, fromSource("alice-token", "192.0.2.1"), execJob42)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a known caller's review waited behind the flood")
	}
	if reviews, sars := env.api.calls(); reviews != 1 || sars != 2 {
		t.Errorf("Client made %d TokenReviews and %d SubjectAccessReviews; want the known caller's second review and both requests' SubjectAccessReviews", reviews, sars)
	}
}

// TestConcurrentFailuresStayWithinTheLimit: random tokens arriving all at
// once from one source, their reviews all in flight together, cost no more
// TokenReviews than the source's burst: each takes its failure before the
// review, not after it. A good credential gives its failure back.
func TestConcurrentFailuresStayWithinTheLimit(t *testing.T) {
	env := newTestEnv(t, nil)
	ctx := context.Background()
	gate := make(chan struct{})
	env.api.set(func(api *fakeAPI) { api.gate = gate })
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			_, _ = env.authz.AuthorizeResource(ctx, fromSource(fmt.Sprintf("random-%d", i), "192.0.2.1"), execJob42)
		})
	}
	close(gate)
	wg.Wait()
	burst := 2 * int(DefaultFailedPerSource)
	if reviews, _ := env.api.calls(); reviews != burst {
		t.Fatalf("100 concurrent random tokens from one source cost %d TokenReviews, want the burst of %d", reviews, burst)
	}
	// A source that brings good credentials keeps its failures: the same
	// instant, the caches emptied each time, three bursts' worth of new
	// good tokens are each reviewed.
	env2 := newTestEnv(t, nil)
	for i := range 3 * burst {
		if _, err := env2.authz.Authenticate(ctx, fromSource("alice-token", "192.0.2.7")); err != nil {
			t.Fatalf("good credential %d from one source: %v", i, err)
		}
		env2.authz.cache = cache.NewLRUExpireCacheWithClock(10, clockFunc(env2.clock.Now))
		env2.authz.known = cache.NewLRUExpireCacheWithClock(10, clockFunc(env2.clock.Now))
	}
}

// TestCleanSourcesAreReviewedFirst: the new credentials' budget (paced as
// cmd/gateway paces it) serves first the sources that have had no
// credential rejected lately. A flood spread over 40 addresses, each within
// its failure limit but each already caught with bad tokens, queues 80
// reviews, four seconds of the budget; a new good token from another
// address is then reviewed next, not after them. First come first served,
// it waited behind the whole flood (4.55 s at 200 addresses, live).
func TestCleanSourcesAreReviewedFirst(t *testing.T) {
	newAPI, newClient := newFakeAPI()
	var mu sync.Mutex
	var order []string
	newClient.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		order = append(order, a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).Spec.Token)
		mu.Unlock()
		return false, nil, nil
	})
	env := newTestEnv(t, func(o *Options) {
		o.NewCredentialClient, o.NewCredentialQPS, o.NewCredentialBurst = newClient, 20, 1
	})
	newAPI.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
	env.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const sources = 40
	for i := range sources { // each source is caught with bad tokens once
		_, _ = env.authz.AuthorizeResource(ctx, fromSource(fmt.Sprintf("caught-%d", i), fmt.Sprintf("192.0.2.%d", i+1)), execJob42)
	}
	var wg sync.WaitGroup
	for i := range 2 * sources {
		wg.Go(func() {
			_, _ = env.authz.AuthorizeResource(ctx, fromSource(fmt.Sprintf("flood-%d", i), fmt.Sprintf("192.0.2.%d", i%sources+1)), execJob42)
		})
	}
	defer wg.Wait()
	defer cancel()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		env.authz.newReviews.mu.Lock()
		defer env.authz.newReviews.mu.Unlock()
		return len(env.authz.newReviews.suspected) >= 2*sources-5, nil
	}); err != nil {
		t.Fatal("the flood did not queue")
	}
	mu.Lock()
	before := len(order)
	mu.Unlock()
	if _, err := env.authz.AuthorizeResource(ctx, fromSource("alice-token", "198.51.100.7"), execJob42); err != nil {
		t.Fatalf("the good token: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	at := slices.Index(order, "alice-token")
	if at < 0 || at-before > 1 {
		t.Errorf("the good token was reviewed after %d of the flood's queued reviews; want next (at most the one in hand)", at-before)
	}
}
