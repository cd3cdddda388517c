package audit

import "sync/atomic"

// queue is a sink's buffer of encoded events, bounded in events and in
// bytes: an event that would pass either bound is refused (dropped and
// counted by the Auditor), never waited for. A sink gives an event's bytes
// back (done) only once it wrote or dropped it, so the bytes bound covers
// what is being written or sent too.
type queue struct {
	ch       chan []byte
	maxBytes int64
	bytes    atomic.Int64
}

func newQueue(events int, maxBytes int64) *queue {
	return &queue{ch: make(chan []byte, events), maxBytes: maxBytes}
}

func (q *queue) push(ev []byte) bool {
	n := int64(len(ev))
	if q.bytes.Add(n) > q.maxBytes {
		q.bytes.Add(-n)
		return false
	}
	select {
	case q.ch <- ev:
		return true
	default:
		q.bytes.Add(-n)
		return false
	}
}

// done gives back the bytes of events the sink is through with.
func (q *queue) done(n int) { q.bytes.Add(-int64(n)) }
