// Package inflight tracks a server's in-flight requests for a graceful
// drain that http.Server.Shutdown cannot do alone: it does not wait for
// hijacked (upgraded) connections, which are the gateway's longest
// requests.
package inflight

import (
	"context"
	"sync"
)

// Tracker counts requests between Enter and Leave.
type Tracker struct {
	// ctx parents every request's context; cancelling it cuts them all.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	draining bool
	inFlight int
	idle     chan struct{}
	idleOnce sync.Once
}

// New is a Tracker not draining.
func New() *Tracker {
	t := &Tracker{idle: make(chan struct{})}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t
}

// Context ends when a drain ran out of time: requests derive theirs from
// it, so that they are cut then.
func (t *Tracker) Context() context.Context { return t.ctx }

// Enter counts a request in; false once a drain started (the request is to
// be refused).
func (t *Tracker) Enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.draining {
		return false
	}
	t.inFlight++
	return true
}

// Leave counts a request out.
func (t *Tracker) Leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight--
	if t.draining && t.inFlight == 0 {
		t.idleOnce.Do(func() { close(t.idle) })
	}
}

// Drain refuses new requests and waits for in-flight ones to end; it
// returns ctx.Err() if ctx ends first, and then leaves the requests be:
// Cancel cuts them.
func (t *Tracker) Drain(ctx context.Context) error {
	t.mu.Lock()
	t.draining = true
	if t.inFlight == 0 {
		t.idleOnce.Do(func() { close(t.idle) })
	}
	t.mu.Unlock()
	return t.Wait(ctx)
}

// Cancel ends Context, which cuts every request, and says how many were
// in flight.
func (t *Tracker) Cancel() int {
	t.cancel()
	return t.Open()
}

// Wait waits, once Drain started, for the last request to end; it returns
// ctx.Err() if ctx ends first.
func (t *Tracker) Wait(ctx context.Context) error {
	select {
	case <-t.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Open is how many requests are in flight.
func (t *Tracker) Open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inFlight
}
