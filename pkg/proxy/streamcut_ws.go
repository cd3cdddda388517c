package proxy

import (
	"encoding/binary"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// wsErrorChannel is the channel remotecommand's WebSocket protocols carry
// the exit Status on.
const wsErrorChannel = 3

// WebSocket opcodes (RFC 6455 section 5.2).
const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
)

// wsFollower follows the server's frames of a WebSocket exec or attach
// with the v4 or v5 channel protocol (binary messages whose first byte is
// the channel; the server always ends with a Status on channel 3). Server
// frames are never masked. Its cut is a message on channel 3 carrying the
// Failure and a normal close frame: client-go's WebSocket executor returns
// the Failure where it would have reported an anonymous abnormal closure.
// Everything runs on the Read side: the client's frames say nothing it
// needs (a client that leaves closes the connection).
type wsFollower struct {
	hdr  [14]byte
	hdrN int
	need int    // the header's length once its first two bytes are in
	left uint64 // payload bytes of the current frame still to come

	data, fin bool // the current frame is a data frame; it ends its message
	inMessage bool // a data message's frames are coming
	first     bool // the next payload byte is a message's first: its channel
	status    bool // the current message is on the error channel

	statusSeen, closed, gaveUp bool

	cutFrames func() []byte
}

func (*wsFollower) fromClient([]byte) {}

func (f *wsFollower) fromServer(b []byte) {
	for len(b) > 0 && !f.gaveUp {
		if f.left > 0 {
			n := min(uint64(len(b)), f.left)
			f.payload(b[:n])
			b = b[n:]
			if f.left -= n; f.left == 0 {
				f.endFrame()
			}
			continue
		}
		f.hdr[f.hdrN] = b[0]
		f.hdrN++
		b = b[1:]
		if f.hdrN == 2 {
			f.need = 2
			switch f.hdr[1] & 0x7f {
			case 126:
				f.need += 2
			case 127:
				f.need += 8
			}
			if f.hdr[1]&0x80 != 0 { // a masked server frame: not WebSocket as followed here
				f.gaveUp = true
				return
			}
		}
		if f.hdrN >= 2 && f.hdrN == f.need {
			f.startFrame()
		}
	}
}

func (f *wsFollower) startFrame() {
	f.hdrN = 0
	opcode := f.hdr[0] & 0x0f
	f.fin = f.hdr[0]&0x80 != 0
	switch n := f.hdr[1] & 0x7f; n {
	case 126:
		f.left = uint64(binary.BigEndian.Uint16(f.hdr[2:4]))
	case 127:
		f.left = binary.BigEndian.Uint64(f.hdr[2:10])
	default:
		f.left = uint64(n)
	}
	f.data = opcode < wsClose
	switch {
	case opcode == wsClose:
		f.closed = true
	case opcode > wsClose: // ping, pong
	case opcode == wsContinuation && f.inMessage:
	case (opcode == wsText || opcode == wsBinary) && !f.inMessage:
		f.inMessage, f.first, f.status = true, true, false
	default:
		f.gaveUp = true
		return
	}
	if f.left == 0 {
		f.endFrame()
	}
}

func (f *wsFollower) payload(b []byte) {
	if !f.data {
		return
	}
	if f.first {
		f.first = false
		f.status = b[0] == wsErrorChannel
		b = b[1:]
	}
	if f.status && len(b) > 0 {
		f.statusSeen = true
	}
}

func (f *wsFollower) endFrame() {
	if f.data && f.fin {
		f.inMessage = false
	}
}

func (f *wsFollower) cut() ([]byte, bool) {
	if f.closed || f.gaveUp || f.statusSeen {
		return nil, false
	}
	if f.hdrN != 0 || f.left != 0 || f.inMessage {
		return nil, true // the node died writing a frame or a message
	}
	return f.cutFrames(), false
}

// webSocketCutFrames is a binary message on the error channel carrying
// status, then a close frame with status 1000 (normal closure), so the
// client reads the status rather than an abnormal closure.
func webSocketCutFrames(status metav1.Status) []byte {
	body := statusJSON(status)
	frame := appendWebSocketHeader(nil, true, wsBinary, 1+len(body))
	frame = append(frame, wsErrorChannel)
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

// watchesWebSocketExitStatus reports whether res switches an exec or
// attach to WebSocket with a channel protocol whose server always sends a
// Status (v4, v5; not channel.k8s.io, whose success is an empty channel,
// nor the base64 ones).
func watchesWebSocketExitStatus(res *http.Response, route string) bool {
	if !strings.EqualFold(upgradeType(res.Header), "websocket") || (route != metrics.RouteExec && route != metrics.RouteAttach) {
		return false
	}
	switch strings.TrimSpace(res.Header.Get("Sec-WebSocket-Protocol")) {
	case remotecommand.StreamProtocolV4Name, remotecommand.StreamProtocolV5Name:
		return true
	}
	return false
}
