package auth

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// reviewQueue paces the TokenReviews of credentials not known good at the
// new credentials' budget, and serves first the requests from sources that
// have had no credential rejected lately. A flood spread over many
// addresses, each within its failure limit, fills that budget; the
// client's own rate limiter queued a new credential from any other address
// behind all of it (4.55 s at 200 flooding addresses, 2026-12-08). A
// source is known by its failures only, never by what it claims, so a
// flooder's first requests are served as anyone's: its later ones, once
// rejected, wait behind every source with a clean record.
type reviewQueue struct {
	limiter *rate.Limiter

	mu        sync.Mutex
	clean     []*reviewWaiter // from sources with no recent rejection
	suspected []*reviewWaiter
}

type reviewWaiter struct {
	turn chan struct{} // told when the waiter becomes the head
}

// newReviewQueue paces at qps, burst at once, on the wall clock its timers
// run on; nil (no pacing) when qps is not positive.
func newReviewQueue(qps float64, burst int) *reviewQueue {
	if qps <= 0 {
		return nil
	}
	return &reviewQueue{limiter: rate.NewLimiter(rate.Limit(qps), max(burst, 1))}
}

// wait returns once a review may be sent for a request from a clean
// source or not, or with ctx's error.
func (q *reviewQueue) wait(ctx context.Context, clean bool) error {
	if q == nil {
		return nil
	}
	w := &reviewWaiter{turn: make(chan struct{}, 1)}
	q.mu.Lock()
	if clean {
		q.clean = append(q.clean, w)
	} else {
		q.suspected = append(q.suspected, w)
	}
	q.signalHeadLocked()
	q.mu.Unlock()
	defer q.leave(w)
	for {
		select {
		case <-w.turn:
		case <-ctx.Done():
			return ctx.Err()
		}
		// The head: go when the budget has a review now, else sleep until
		// it will. Another request that became the head meanwhile (a clean
		// source's, ahead of this one) is told its turn.
		for {
			q.mu.Lock()
			if q.headLocked() != w {
				q.mu.Unlock()
				break
			}
			now := time.Now()
			r := q.limiter.ReserveN(now, 1)
			delay := r.DelayFrom(now)
			if delay == 0 {
				q.removeLocked(w)
				q.signalHeadLocked()
				q.mu.Unlock()
				return nil
			}
			r.CancelAt(now)
			q.mu.Unlock()
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-w.turn: // a change at the head: look again
				t.Stop()
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	}
}

// leave removes w if it is still queued (its context ended) and tells the
// new head.
func (q *reviewQueue) leave(w *reviewWaiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.removeLocked(w) {
		q.signalHeadLocked()
	}
}

func (q *reviewQueue) headLocked() *reviewWaiter {
	switch {
	case len(q.clean) > 0:
		return q.clean[0]
	case len(q.suspected) > 0:
		return q.suspected[0]
	}
	return nil
}

// signalHeadLocked tells the head, which may be new, to look at the budget.
func (q *reviewQueue) signalHeadLocked() {
	if h := q.headLocked(); h != nil {
		select {
		case h.turn <- struct{}{}:
		default:
		}
	}
}

func (q *reviewQueue) removeLocked(w *reviewWaiter) bool {
	for _, l := range []*[]*reviewWaiter{&q.clean, &q.suspected} {
		for i, x := range *l {
			if x == w {
				*l = append((*l)[:i], (*l)[i+1:]...)
				return true
			}
		}
	}
	return false
}
