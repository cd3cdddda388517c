package streamfollow

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/spdystream/spdy"
)

// Heartbeats. client-go (kubectl, every executor built on it) sends a
// heartbeat on an exec or attach every 5 s: a WebSocket ping, a SPDY PING.
// Relayed, a heartbeat that reaches a proxy after it closed its side of the
// tunnel makes Linux abort that connection: data for a closed socket is
// answered with a reset, and what the socket still had to send is
// dropped. kube-apiserver, the aggregator and Karmada's cluster proxy all
// close as soon as the member side ended, while the output a slow reader
// has not yet taken still waits in their sockets: its last megabytes were
// lost (kubernetes/kubernetes#124571; measured here: 12-15 of 16 MB
// reached a 2 MB/s reader, directly against a member too).
//
// So the gateway answers a client's heartbeats itself, at the next boundary
// between the server's frames, and never relays them. Upstream gets a
// heartbeat of the gateway's own only once it sent nothing for a period
// while the gateway waited to read (nothing of the server's waits in its
// sockets then, so nothing can be dropped): that keeps an idle tunnel alive
// through proxies with idle timeouts, and finds an upstream that stopped
// answering, which the client's heartbeats no longer can: after
// HeartbeatDeadline without a byte from upstream the stream is cut and
// the client told.

// Defaults of Options.HeartbeatPeriod and Options.HeartbeatDeadline:
// client-go's period, and its deadline less a second, so the gateway ends
// a silent upstream before a client's own deadline could.
const (
	defaultHeartbeatPeriod   = 5 * time.Second
	defaultHeartbeatDeadline = 60 * time.Second
)

// heartbeatProtocol is how one protocol frames the client's direction.
type heartbeatProtocol interface {
	// headerLen is the length of the frame header hdr starts, 0 while
	// more of it is needed to tell; ok is false if hdr cannot start a
	// client frame of the protocol.
	headerLen(hdr []byte) (n int, ok bool)
	// frame reads a whole header: the payload's length, and whether the
	// frame may be a heartbeat (held whole until answer decides).
	frame(hdr []byte) (length uint64, candidate bool)
	// answer is the reply to the client for a candidate frame (hdr, its
	// payload as sent), or nil if it is no heartbeat of the client's and
	// passes upstream after all.
	answer(hdr, body []byte) []byte
	// ping is a heartbeat of the gateway's own, framed as the client's.
	ping() []byte
}

// WebSocket control opcodes the client sends (RFC 6455 section 5.5).
const (
	wsPing = 0x9
	wsPong = 0xa
)

// wsHeartbeats: a client's heartbeat is a ping (FIN, no extension bits;
// control payloads are at most 125 bytes); its answer a pong with the
// same payload, unmasked as the server's frames are.
type wsHeartbeats struct{}

func (wsHeartbeats) headerLen(h []byte) (int, bool) {
	if len(h) < 2 {
		return 0, true
	}
	if h[1]&0x80 == 0 {
		return 0, false // a client's frames are masked
	}
	return wsHeaderLen(h[1]), true
}

func (wsHeartbeats) frame(h []byte) (uint64, bool) {
	n := wsPayloadLen(h)
	return n, h[0] == 0x80|wsPing && n <= 125
}

func (wsHeartbeats) answer(h, body []byte) []byte {
	key := h[len(h)-4:]
	pong := appendWebSocketHeader(make([]byte, 0, 2+len(body)), true, wsPong, len(body))
	for i, b := range body {
		pong = append(pong, b^key[i&3])
	}
	return pong
}

func (wsHeartbeats) ping() []byte {
	// An empty payload: the mask key is all that is masked.
	p := []byte{0x80 | wsPing, 0x80, 0, 0, 0, 0}
	_, _ = rand.Read(p[2:])
	return p
}

// spdyHeartbeats: a client's heartbeat is a PING with an odd ID (client
// initiated; an even one answers the server's and passes on); its answer
// the same frame, as a server echoes it. The gateway's own PINGs count
// down from the largest odd ID, which no client reaches: the server's
// echo of one reaches the client, whose spdystream ignores a PING of its
// own parity it did not send.
type spdyHeartbeats struct{ next atomic.Uint32 }

const spdyPingLen = frameHeaderLen + 4

func (*spdyHeartbeats) headerLen([]byte) (int, bool) { return frameHeaderLen, true }

func (*spdyHeartbeats) frame(h []byte) (uint64, bool) {
	var fh frameHeader
	copy(fh.raw[:], h)
	fh.parse()
	return uint64(fh.length), fh.control && fh.version == spdy.Version && fh.typ == spdy.TypePing && fh.length == 4 && fh.flags == 0
}

func (*spdyHeartbeats) answer(h, body []byte) []byte {
	if binary.BigEndian.Uint32(body)&1 == 0 {
		return nil
	}
	return append(append(make([]byte, 0, spdyPingLen), h...), body...)
}

func (s *spdyHeartbeats) ping() []byte {
	id := 0x7fffffff - 2*(s.next.Add(1)-1)
	p := make([]byte, spdyPingLen)
	binary.BigEndian.PutUint32(p[0:4], 0x80000000|uint32(spdy.Version)<<16|uint32(spdy.TypePing))
	binary.BigEndian.PutUint32(p[4:8], 4)
	binary.BigEndian.PutUint32(p[8:12], id)
	return p
}

// frameCutter takes a client's heartbeats out of its bytes, fed in order
// in chunks of any size. The bytes of a header not yet whole are held
// until it is (a header is at most 14 bytes); a candidate frame is held
// whole, then answered or passed on where it stood.
type frameCutter struct {
	proto heartbeatProtocol
	hdr   [14]byte
	hdrN  int // bytes of the header being read
	need  int // its length, 0 until known
	held  int // hdr bytes that came in earlier chunks, not passed on yet
	// The current frame, once its header is whole.
	hdrLen int
	left   uint64
	cand   bool   // a candidate: held, not passed on
	body   []byte // a candidate's payload so far
	gaveUp bool

	out []byte // what passes, when it is not a part of the chunk
}

// filter returns what of p passes upstream (a part of p, or the cutter's
// buffer, valid until the next call) and the answers to the heartbeats it
// took out.
func (c *frameCutter) filter(p []byte) (pass, answers []byte) {
	if c.gaveUp {
		return p, nil
	}
	c.out = c.out[:0]
	copied := false // c.out holds what passes before p[seg:]
	seg := 0        // p[seg:i] passes, not yet in c.out
	hdrStart := 0   // where the header being read began in p (0: in an earlier chunk)
	flush := func(to int) {
		c.out = append(c.out, p[seg:to]...)
		copied = true
	}
	i := 0
	for i < len(p) && !c.gaveUp {
		if c.left > 0 {
			n := int(min(uint64(len(p)-i), c.left))
			i += n
			c.left -= uint64(n)
			if !c.cand {
				continue
			}
			c.body = append(c.body, p[i-n:i]...)
			seg = i
			if c.left == 0 {
				answers = c.decide(answers)
				copied = copied || len(c.out) > 0
			}
			continue
		}
		if c.hdrN == 0 {
			hdrStart = i
		}
		c.hdr[c.hdrN] = p[i]
		c.hdrN++
		i++
		if c.need == 0 {
			n, ok := c.proto.headerLen(c.hdr[:c.hdrN])
			if !ok {
				// Not the protocol: everything passes on from here.
				c.gaveUp = true
				if c.held > 0 {
					flush(hdrStart)
					c.out = append(c.out, c.hdr[:c.held]...)
					seg = hdrStart
				}
				break
			}
			c.need = n
		}
		if c.need == 0 || c.hdrN < c.need {
			continue
		}
		length, cand := c.proto.frame(c.hdr[:c.hdrN])
		switch {
		case cand:
			flush(hdrStart)
			seg = i
			c.body = c.body[:0]
		case c.held > 0:
			flush(hdrStart)
			c.out = append(c.out, c.hdr[:c.held]...)
			seg = hdrStart
		}
		c.hdrLen, c.left, c.cand = c.hdrN, length, cand
		c.hdrN, c.need, c.held = 0, 0, 0
		if cand && length == 0 {
			answers = c.decide(answers)
		}
	}
	end := len(p)
	if !c.gaveUp && c.hdrN > 0 {
		// A header not yet whole is held until it is.
		end, c.held = hdrStart, c.hdrN
	}
	if !copied {
		return p[seg:max(seg, end)], answers
	}
	c.out = append(c.out, p[seg:max(seg, end)]...)
	return c.out, answers
}

// decide reads a candidate frame now whole: its answer goes to the
// client or, no heartbeat after all, it passes on.
func (c *frameCutter) decide(answers []byte) []byte {
	c.cand = false
	hdr := c.hdr[:c.hdrLen]
	if a := c.proto.answer(hdr, c.body); a != nil {
		return append(answers, a...)
	}
	c.out = append(append(c.out, hdr...), c.body...)
	return answers
}

// abandon stops the cutting: everything passes on from here, starting with
// what it holds (a header not yet whole, a candidate frame's start).
func (c *frameCutter) abandon() []byte {
	c.gaveUp = true
	switch {
	case c.cand:
		c.cand = false
		return append(append([]byte(nil), c.hdr[:c.hdrLen]...), c.body...)
	case c.hdrN > 0:
		return append([]byte(nil), c.hdr[:c.hdrN]...)
	}
	return nil
}

// atBoundary reports whether what passed upstream ends with a whole frame,
// so that a frame of the gateway's own may follow.
func (c *frameCutter) atBoundary() bool { return !c.gaveUp && (c.left == 0 || c.cand) }

// heartbeats answers a Stream's client heartbeats and keeps its upstream
// alive. Upstream is read by a pump goroutine, so that an answer reaches
// the client while upstream is silent.
type heartbeats struct {
	period, deadline time.Duration
	linger           time.Duration // see lingered
	proto            heartbeatProtocol
	on               func(Heartbeat)

	// mu orders what goes upstream: the client's bytes through the
	// cutter, and the gateway's own heartbeats between its frames.
	mu  sync.Mutex
	cut frameCutter

	answersMu  sync.Mutex
	answers    []byte // for the client, at the next server frame boundary
	hasAnswers atomic.Bool
	wake       chan struct{} // answers came (capacity 1)

	// The pump: one read of upstream at a time, handed to Read.
	chunks   chan chunk
	consumed chan struct{}
	stop     chan struct{} // closed when the Stream closes
	stopOnce sync.Once
	pumped   chan struct{} // closed when the pump returned
	cur      chunk         // Read side: the chunk being handed out
	buf      [pumpBufferSize]byte

	// readingSince is when the pump's pending read of upstream began
	// (UnixNano), 0 while it hands a chunk to a client not reading.
	readingSince atomic.Int64
	// pingedAt is when the gateway's first heartbeat upstream has not
	// been followed by a byte from upstream (UnixNano), or 0.
	pingedAt atomic.Int64
	pinging  atomic.Bool
	silent   atomic.Bool // upstream let the deadline pass; the stream was cut
	timer    *time.Timer
}

// pumpBufferSize: a TLS record carries at most 16 KiB, so one read of a
// TLS upstream returns no more.
const pumpBufferSize = 16 << 10

type chunk struct {
	b     []byte
	err   error
	taken bool // a chunk of the pump's buffer, to give back once read
}

// errUpstreamSilent ends the read of an upstream that let the heartbeat
// deadline pass: it reads as a timeout (CutStatus: "timed out").
type errUpstreamSilent struct{ after time.Duration }

func (e errUpstreamSilent) Error() string {
	return "upstream sent nothing for " + e.after.String() + " after the gateway's heartbeat"
}
func (errUpstreamSilent) Timeout() bool   { return true }
func (errUpstreamSilent) Temporary() bool { return true }

func newHeartbeats(kind protocolKind, opts Options) *heartbeats {
	h := &heartbeats{
		period: opts.HeartbeatPeriod, deadline: opts.HeartbeatDeadline, on: opts.OnHeartbeat, linger: writeFailureWait,
		wake: make(chan struct{}, 1), chunks: make(chan chunk, 1), consumed: make(chan struct{}, 1),
		stop: make(chan struct{}), pumped: make(chan struct{}),
	}
	if h.period <= 0 {
		h.period = defaultHeartbeatPeriod
	}
	if h.deadline <= 0 {
		h.deadline = defaultHeartbeatDeadline
	}
	switch kind {
	case spdyChannels:
		h.proto = &spdyHeartbeats{}
	default:
		h.proto = wsHeartbeats{}
	}
	h.cut.proto = h.proto
	return h
}

// start runs the pump and the keepalive for s.
func (h *heartbeats) start(s *Stream) {
	go h.pump(s)
	// Armed once assigned: keepalive resets it.
	h.timer = time.AfterFunc(time.Duration(math.MaxInt64), func() { h.keepalive(s) })
	h.timer.Reset(h.period)
}

// close stops the pump and the keepalive; upstream is closed by then.
func (h *heartbeats) close() {
	h.stopOnce.Do(func() {
		close(h.stop)
		if h.timer != nil {
			h.timer.Stop()
		}
	})
}

// pump reads upstream one chunk at a time, each once the last one was
// read. A closed Stream stops it after its pending read; Read then reads
// upstream itself.
func (h *heartbeats) pump(s *Stream) {
	defer close(h.pumped)
	for {
		h.readingSince.Store(time.Now().UnixNano())
		n, err := s.ReadWriteCloser.Read(h.buf[:])
		h.readingSince.Store(0)
		if n > 0 {
			h.pingedAt.Store(0)
		}
		if err != nil && h.silent.Load() {
			err = errUpstreamSilent{after: h.deadline}
		}
		h.chunks <- chunk{b: h.buf[:n], err: err, taken: true} // never blocks: the last one was read
		if err != nil {
			return
		}
		select {
		case <-h.consumed:
		case <-h.stop:
			return
		}
	}
}

// read is upstream's Read for the Stream's Read side: what the pump read,
// or (0, nil) when answers came for the client.
func (h *heartbeats) read(s *Stream, p []byte) (int, error) {
	for {
		if len(h.cur.b) > 0 {
			n := copy(p, h.cur.b)
			h.cur.b = h.cur.b[n:]
			return n, nil
		}
		if h.cur.err != nil {
			return 0, h.cur.err
		}
		if h.cur.taken {
			h.cur.taken = false
			h.consumed <- struct{}{}
		}
		select {
		case h.cur = <-h.chunks:
		case <-h.wake:
			return 0, nil
		case <-h.pumped:
			select {
			case h.cur = <-h.chunks:
				continue
			default:
			}
			return s.ReadWriteCloser.Read(p)
		}
	}
}

// write passes the client's bytes upstream less its heartbeats, whose
// answers wait for the Read side. Once the server's frames are lost track
// of (serverLost), answers could not be placed: everything passes on from
// then on, what the cutter held first.
func (h *heartbeats) write(upstream io.Writer, p []byte, serverLost bool) (int, error) {
	h.mu.Lock()
	if serverLost && !h.cut.gaveUp {
		if held := h.cut.abandon(); len(held) > 0 {
			if _, err := upstream.Write(held); err != nil {
				h.mu.Unlock()
				return 0, err
			}
		}
	}
	pass, answers := h.cut.filter(p)
	var err error
	if len(pass) > 0 {
		_, err = upstream.Write(pass)
	}
	h.mu.Unlock()
	if len(answers) > 0 {
		if h.on != nil {
			h.on(HeartbeatAnswered)
		}
		h.answersMu.Lock()
		h.answers = append(h.answers, answers...)
		h.hasAnswers.Store(true)
		h.answersMu.Unlock()
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// errClientLingered ends the client's copy of a stream whose server side
// ended more than the linger before (writeFailureWait, the bound a write
// to an ended upstream had before heartbeats stopped reaching it): it
// sends heartbeats to nobody, and ReverseProxy holds the connection until
// that copy returns.
var errClientLingered = errors.New("the client still sent after its stream ended")

// lingered reports whether s's read side handed out its end more than
// h.linger ago.
func (h *heartbeats) lingered(s *Stream) bool {
	at := s.endedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) >= h.linger
}

// takeAnswers hands out answers for the client, as many as p holds.
func (h *heartbeats) takeAnswers(p []byte) int {
	h.answersMu.Lock()
	defer h.answersMu.Unlock()
	n := copy(p, h.answers)
	h.answers = h.answers[n:]
	if len(h.answers) == 0 {
		h.answers = nil
		h.hasAnswers.Store(false)
	}
	return n
}

// keepalive runs every period: a heartbeat upstream when upstream has sent
// nothing for a period while the pump waited for it, and the cut when it
// then stays silent past the deadline.
func (h *heartbeats) keepalive(s *Stream) {
	select {
	case <-h.stop:
		return
	default:
	}
	now := time.Now()
	since := h.readingSince.Load()
	switch pinged := h.pingedAt.Load(); {
	case since == 0:
	case pinged != 0 && now.Sub(time.Unix(0, pinged)) >= h.deadline:
		h.silent.Store(true)
		_ = s.ReadWriteCloser.Close()
		return
	case now.Sub(time.Unix(0, since)) >= h.period && h.pinging.CompareAndSwap(false, true):
		// Sent aside: a write upstream may block, and the deadline must
		// still be checked.
		go func() {
			defer h.pinging.Store(false)
			if !h.mu.TryLock() {
				return // the client is writing: upstream is not idle
			}
			defer h.mu.Unlock()
			if h.cut.atBoundary() {
				h.pingedAt.CompareAndSwap(0, time.Now().UnixNano())
				if _, err := s.ReadWriteCloser.Write(h.proto.ping()); err == nil && h.on != nil {
					h.on(HeartbeatSent)
				}
			}
		}()
	}
	h.timer.Reset(h.period)
}
