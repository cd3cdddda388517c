package identity

import (
	"context"
	"sync"
	"time"
)

// Attribution is who a request's caller is, for its audit events, as the
// gateway learns it: authorize mode's authentication sets it as soon as
// the credential is known good, also for requests it then refuses
// (Set); passthrough looks it up beside the request, never before it
// (Lookup). It is the audit's record of the caller, not an authorization:
// nothing is decided by it.
type Attribution struct {
	mu      sync.Mutex
	user    *Caller
	reason  string // why the caller is not known, once given up
	started bool
	done    chan struct{} // closed once the caller is known or given up
}

// NewAttribution is an Attribution whose caller is not known yet.
func NewAttribution() *Attribution { return &Attribution{done: make(chan struct{})} }

type attributionKey struct{}

// WithAttribution carries a in ctx, for the packages that learn the caller
// (pkg/auth).
func WithAttribution(ctx context.Context, a *Attribution) context.Context {
	return context.WithValue(ctx, attributionKey{}, a)
}

// AttributionFrom is the Attribution ctx carries, or nil.
func AttributionFrom(ctx context.Context) *Attribution {
	a, _ := ctx.Value(attributionKey{}).(*Attribution)
	return a
}

// Set records that the caller is user. The first answer counts. A nil
// Attribution does nothing.
func (a *Attribution) Set(user Caller) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.user != nil || a.reason != "" {
		return
	}
	a.user = &user
	a.started = true
	close(a.done)
}

// Lookup finds the caller with find in the background, once: the caller is
// what find returns, or unknown, for the reason its error gives.
func (a *Attribution) Lookup(find func() (Caller, error)) {
	if a == nil {
		return
	}
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return
	}
	a.started = true
	a.mu.Unlock()
	go func() {
		user, err := find()
		if err != nil {
			a.giveUp(err.Error())
			return
		}
		a.Set(user)
	}()
}

func (a *Attribution) giveUp(reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.user != nil || a.reason != "" {
		return
	}
	a.reason = reason
	close(a.done)
}

// Pending reports whether a Lookup is still finding the caller.
func (a *Attribution) Pending() bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.started && a.user == nil && a.reason == ""
}

// Wait returns the caller once a Lookup in flight ended, waiting at most
// d; ok is false when it is not known, and reason then says why, if a
// lookup said.
func (a *Attribution) Wait(d time.Duration) (user Caller, ok bool, reason string) {
	if a == nil {
		return Caller{}, false, ""
	}
	if a.Pending() {
		t := time.NewTimer(d)
		select {
		case <-a.done:
		case <-t.C:
			a.giveUp("the caller's identity was not learnt within " + d.String())
		}
		t.Stop()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.user == nil {
		return Caller{}, false, a.reason
	}
	return *a.user, true, ""
}
