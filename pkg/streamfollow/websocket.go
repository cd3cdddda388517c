package streamfollow

import (
	"encoding/binary"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WebSocket opcodes (RFC 6455 section 5.2).
const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
)

// wsCloseChannel is the v5 protocol's client message closing a channel.
const wsCloseChannel = 255

// webSocketFollower follows a WebSocket exec or attach with the channel
// protocols (binary messages whose first byte is the channel). Server
// frames are never masked, client frames always are. Its cut is a message
// on the error channel carrying the Failure and a normal close frame:
// client-go's WebSocket executor returns the Failure where it would have
// reported an anonymous abnormal closure.
type webSocketFollower struct {
	server, client wsReader
	obs            Observer
	resize         resizeReader
	errStatus      statusBuf
	statusSeen     bool // server side
	lost           atomic.Bool
}

func newWebSocketFollower(obs Observer) *webSocketFollower {
	f := &webSocketFollower{obs: obs}
	f.server.payload = f.serverPayload
	f.server.messageEnd = f.serverMessageEnd
	f.client.masked = true
	if obs != nil {
		f.client.payload = f.clientPayload
		f.client.messageEnd = f.clientMessageEnd
	}
	return f
}

func (f *webSocketFollower) fromClient(p []byte) {
	if f.obs != nil {
		f.client.read(p)
	}
}

func (f *webSocketFollower) fromServer(p []byte) {
	f.server.read(p)
	if f.server.gaveUp {
		f.lost.Store(true)
	}
}

func (f *webSocketFollower) serverAtBoundary() bool {
	return !f.server.gaveUp && f.server.hdrN == 0 && f.server.left == 0
}

func (f *webSocketFollower) serverLost() bool { return f.lost.Load() }

func (f *webSocketFollower) status() []byte { return f.errStatus.get() }

func (f *webSocketFollower) serverPayload(ch byte, b []byte) {
	switch Channel(ch) {
	case Error:
		f.errStatus.add(b)
	case Stdout, Stderr:
		if f.obs != nil {
			f.obs.Data(Channel(ch), b)
		}
	}
}

func (f *webSocketFollower) clientPayload(ch byte, b []byte) {
	switch Channel(ch) {
	case Stdin:
		f.obs.Data(Stdin, b)
	case Resize:
		f.resize.feed(b, f.obs)
	}
}

func (f *webSocketFollower) clientMessageEnd(ch byte) {
	if Channel(ch) == Resize {
		f.resize.flush(f.obs)
	}
}

func (f *webSocketFollower) serverMessageEnd(ch byte) {
	if Channel(ch) == Error {
		f.statusSeen = true
	}
}

func (f *webSocketFollower) partial() int { return f.server.partial() }

func (f *webSocketFollower) cut(status *metav1.Status, dropped bool) ([]byte, bool) {
	s := &f.server
	if s.closed || s.gaveUp || f.statusSeen {
		return nil, false
	}
	if status == nil {
		return nil, true
	}
	// inMessage: the client has the start of a data message whose end
	// must come before the Failure's message.
	var tell []byte
	inMessage := s.inMessage
	switch {
	case dropped && s.hdrN == 0:
		inMessage = s.inMessageBefore // the frame whose start was held back never reached the client
	case dropped:
	case s.hdrN > 0:
		return nil, true // a header is always held: not a frame this follower read
	case s.left > 0:
		// A frame too long to hold was cut: zeros complete it (server
		// frames are not masked).
		tell = make([]byte, s.left)
		if s.data && s.fin {
			inMessage = false
		}
	}
	if inMessage {
		tell = appendWebSocketHeader(tell, true, wsContinuation, 0)
	}
	return append(tell, webSocketCutFrames(*status)...), false
}

// wsReader reads the frames of one direction of a WebSocket connection,
// fed its bytes in order in chunks of any size, and hands the payload of
// each data message, less its first byte (the channel), to payload,
// unmasked. It copies nothing but headers, and payload it unmasks.
type wsReader struct {
	masked     bool // the direction's frames must be masked (client to server)
	payload    func(channel byte, b []byte)
	messageEnd func(channel byte)

	hdr  [14]byte
	hdrN int
	need int    // the header's length once its first two bytes are in
	left uint64 // payload bytes of the current frame still to come
	key  [4]byte
	keyN int // payload bytes of the current frame unmasked so far, mod 4

	data, fin bool // the current frame is a data frame; it ends its message
	inMessage bool // a data message's frames are coming
	// inMessageBefore is inMessage before the current frame started.
	inMessageBefore bool
	opcode          byte
	hdrLen          int    // of the current frame
	frameLen        uint64 // of the current frame's payload
	first           bool   // the next payload byte is a message's first: its channel
	channel         byte   // of the current message
	scratch         []byte

	closed, gaveUp bool
}

func (r *wsReader) read(b []byte) {
	for len(b) > 0 && !r.gaveUp {
		if r.left > 0 {
			n := min(uint64(len(b)), r.left)
			r.framePayload(b[:n])
			b = b[n:]
			if r.left -= n; r.left == 0 {
				r.endFrame()
			}
			continue
		}
		r.hdr[r.hdrN] = b[0]
		r.hdrN++
		b = b[1:]
		if r.hdrN == 2 {
			if masked := r.hdr[1]&0x80 != 0; masked != r.masked {
				r.gaveUp = true // not WebSocket as this direction speaks it
				return
			}
			r.need = wsHeaderLen(r.hdr[1])
		}
		if r.hdrN >= 2 && r.hdrN == r.need {
			r.startFrame()
		}
	}
}

// partial is how many of the bytes read belong to the frame not yet
// whole, if it is at most maxHeldFrame long (its header not yet whole
// always is).
func (r *wsReader) partial() int {
	switch {
	case r.gaveUp:
		return 0
	case r.hdrN > 0:
		return r.hdrN
	case r.left == 0 || uint64(r.hdrLen)+r.frameLen > maxHeldFrame:
		return 0
	}
	return r.hdrLen + int(r.frameLen-r.left)
}

func (r *wsReader) startFrame() {
	r.hdrLen, r.hdrN = r.hdrN, 0
	r.inMessageBefore = r.inMessage
	opcode := r.hdr[0] & 0x0f
	r.opcode = opcode
	r.fin = r.hdr[0]&0x80 != 0
	r.left = wsPayloadLen(r.hdr[:r.hdrLen])
	r.frameLen = r.left
	if r.masked {
		copy(r.key[:], r.hdr[r.hdrLen-4:r.hdrLen])
		r.keyN = 0
	}
	r.data = opcode < wsClose
	switch {
	case r.hdr[0]&0x70 != 0: // RSV bits: no extension is followed (ProtocolOf)
		r.gaveUp = true
		return
	case opcode >= wsClose && (!r.fin || r.left > 125): // RFC 6455 5.5
		r.gaveUp = true
		return
	case opcode >= wsClose: // close (noted once whole), ping, pong
	case opcode == wsContinuation && r.inMessage:
	case (opcode == wsText || opcode == wsBinary) && !r.inMessage:
		r.inMessage, r.first = true, true
	default:
		r.gaveUp = true
		return
	}
	if r.left == 0 {
		r.endFrame()
	}
}

func (r *wsReader) framePayload(b []byte) {
	if !r.data || r.payload == nil {
		return
	}
	if r.masked {
		r.scratch = append(r.scratch[:0], b...)
		for i := range r.scratch {
			r.scratch[i] ^= r.key[(r.keyN+i)&3]
		}
		r.keyN = (r.keyN + len(b)) & 3
		b = r.scratch
	}
	if r.first {
		r.first = false
		r.channel = b[0]
		b = b[1:]
	}
	if len(b) > 0 {
		r.payload(r.channel, b)
	}
}

func (r *wsReader) endFrame() {
	if r.opcode == wsClose {
		r.closed = true
	}
	if r.data && r.fin {
		r.inMessage = false
		if r.messageEnd != nil && !r.first {
			r.messageEnd(r.channel)
		}
	}
}

// wsHeaderLen is the length of a frame header whose second byte is b1:
// two bytes, the extended payload length, and the mask key of a masked
// frame.
func wsHeaderLen(b1 byte) int {
	n := 2
	switch b1 & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if b1&0x80 != 0 {
		n += 4
	}
	return n
}

// wsPayloadLen is the payload length the whole frame header h states.
func wsPayloadLen(h []byte) uint64 {
	switch n := h[1] & 0x7f; n {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		return binary.BigEndian.Uint64(h[2:10])
	default:
		return uint64(n)
	}
}

// webSocketCutFrames is a binary message on the error channel carrying
// status, then a close frame with status 1000 (normal closure), so the
// client reads the status rather than an abnormal closure.
func webSocketCutFrames(status metav1.Status) []byte {
	body := statusJSON(status)
	frame := appendWebSocketHeader(nil, true, wsBinary, 1+len(body))
	frame = append(frame, byte(Error))
	frame = append(frame, body...)
	return append(frame, 0x80|wsClose, 2, 0x03, 0xe8)
}

// appendWebSocketHeader appends the header of an unmasked frame with n
// bytes of payload.
func appendWebSocketHeader(b []byte, fin bool, opcode byte, n int) []byte {
	if fin {
		opcode |= 0x80
	}
	b = append(b, opcode)
	switch {
	case n < 126:
		return append(b, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, 126), uint16(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, 127), uint64(n))
	}
}
