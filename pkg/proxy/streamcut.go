package proxy

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/moby/spdystream/spdy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// maxClientControlFrame bounds a client control frame the watch buffers to
// read its headers; remotecommand's are well under 1 KiB. A longer one ends
// the watch (the stream is relayed as before, only unwatched).
const maxClientControlFrame = 64 << 10

// statusWatch is the upstream side of an upgraded exec or attach stream
// as ReverseProxy copies it, for a protocol whose server always sends an
// exit status before it ends the stream (remotecommand v4 and v5). Its
// follower reads the frames of both directions without holding any back.
// When upstream ends the tunnel (a member's kubelet died: kube-apiserver
// just closes it) while the client is still there and no status came, it
// appends to what the client reads, at a frame boundary, the follower's
// Failure status naming the member, which the client's executor returns as
// an error where it would have read the silence as success (SPDY) or as an
// anonymous abnormal closure (WebSocket).
//
// Read runs on ReverseProxy's upstream-to-client goroutine only, Write on
// the client-to-upstream one, Close on either or the request's.
type statusWatch struct {
	io.ReadWriteCloser
	follow statusFollower
	// clientLeft: the gateway closed the stream (the client left, or the
	// request was cancelled): nothing is reported to a client that is gone.
	clientLeft atomic.Bool

	// Read side.
	pending  []byte // the frames telling the client, until delivered
	injected bool
	readErr  error // upstream's end, returned after pending

	onCut func(result string)
}

// statusFollower follows one protocol's frames for a statusWatch.
type statusFollower interface {
	// fromClient and fromServer see every byte of their direction, in
	// order, before it is passed on.
	fromClient(p []byte)
	fromServer(p []byte)
	// cut is asked once, when upstream ended and the client is there: the
	// bytes that tell the client its stream was cut, or nil; found is set
	// when a cut was found that cannot be told.
	cut() (tell []byte, found bool)
}

func newStatusWatch(upstream io.ReadWriteCloser, follow statusFollower, onCut func(result string)) *statusWatch {
	return &statusWatch{ReadWriteCloser: upstream, follow: follow, onCut: onCut}
}

// Write follows the client's frames before they go upstream, so what they
// open is known before the server can answer on it.
func (w *statusWatch) Write(p []byte) (int, error) {
	w.follow.fromClient(p)
	return w.ReadWriteCloser.Write(p)
}

func (w *statusWatch) Read(p []byte) (int, error) {
	if w.injected {
		return w.drain(p)
	}
	n, err := w.ReadWriteCloser.Read(p)
	if n > 0 {
		w.follow.fromServer(p[:n])
	}
	if err == nil || w.clientLeft.Load() {
		return n, err
	}
	tell, found := w.follow.cut()
	if tell == nil {
		if found {
			w.onCut(metrics.CutUnreported)
		}
		return n, err
	}
	w.onCut(metrics.CutReported)
	w.pending, w.injected, w.readErr = tell, true, err
	if n > 0 {
		return n, nil
	}
	return w.drain(p)
}

func (w *statusWatch) drain(p []byte) (int, error) {
	if len(w.pending) == 0 {
		return 0, w.readErr
	}
	n := copy(p, w.pending)
	w.pending = w.pending[n:]
	return n, nil
}

func (w *statusWatch) Close() error {
	w.clientLeft.Store(true)
	return w.ReadWriteCloser.Close()
}

// spdyFollower follows SPDY/3.1 with remotecommand v4: the client's
// SYN_STREAM headers name the error stream, the server's DATA frames show
// whether a Status came on it. Its cut is a DATA frame with FIN on the
// error stream carrying the Failure.
type spdyFollower struct {
	// Written on the client side, read on the server side.
	errorStream atomic.Uint32 // 0 until the client opened it
	clientEnded atomic.Bool   // client GOAWAY or RST_STREAM of the error stream
	// gaveUp: a direction did not read as SPDY/3 (or a client frame could
	// not be read); the stream is relayed unwatched from then on.
	gaveUp atomic.Bool

	clientScan frameScanner
	client     clientFrames
	serverScan frameScanner
	server     serverFrames

	cutFrame func(stream uint32) []byte
}

func newSPDYFollower(cutFrame func(stream uint32) []byte) *spdyFollower {
	f := &spdyFollower{cutFrame: cutFrame}
	f.client.watch = f
	f.server.watch = f
	return f
}

func (f *spdyFollower) fromClient(p []byte) {
	if !f.gaveUp.Load() {
		f.clientScan.scan(p, &f.client)
	}
}

func (f *spdyFollower) fromServer(p []byte) {
	if !f.gaveUp.Load() {
		f.serverScan.scan(p, &f.server)
	}
}

func (f *spdyFollower) cut() ([]byte, bool) {
	stream := f.errorStream.Load()
	if f.clientEnded.Load() || f.gaveUp.Load() || stream == 0 || f.server.statusSeen || f.server.errorFin {
		return nil, false
	}
	if !f.serverScan.atBoundary() {
		// A frame the client has only part of cannot be followed by
		// another; the node died writing it.
		return nil, true
	}
	return f.cutFrame(stream), false
}

// serverFrames notes what the server sent on the error stream.
type serverFrames struct {
	watch                *spdyFollower
	statusSeen, errorFin bool
}

func (s *serverFrames) header(h frameHeader) {
	if !h.valid() {
		s.watch.gaveUp.Store(true)
		return
	}
	if h.control || h.stream != s.watch.errorStream.Load() {
		return
	}
	if h.length > 0 {
		s.statusSeen = true
	}
	if h.flags&byte(spdy.DataFlagFin) != 0 {
		s.errorFin = true
	}
}

func (*serverFrames) payload([]byte)  {}
func (*serverFrames) end(frameHeader) {}

// clientFrames reads the client's control frames: SYN_STREAM header blocks
// through spdystream's Framer (their zlib context spans the connection, so
// it reads every one until the error stream is known), and RST_STREAM and
// GOAWAY by hand.
type clientFrames struct {
	watch  *spdyFollower
	framer *spdy.Framer
	feed   frameFeed
	buf    []byte // the control frame being read, header included
	keep   bool   // buf collects the current frame
}

func (c *clientFrames) header(h frameHeader) {
	c.keep = false
	if !h.valid() {
		c.watch.gaveUp.Store(true)
		return
	}
	if !h.control || c.watch.gaveUp.Load() {
		return
	}
	switch h.typ {
	case spdy.TypeSynStream, spdy.TypeSynReply, spdy.TypeHeaders:
		// Header blocks share one zlib context: until the error stream is
		// known every one must be read, in order.
		c.keep = c.watch.errorStream.Load() == 0
	case spdy.TypeRstStream, spdy.TypeGoAway:
		c.keep = true
	}
	if !c.keep {
		return
	}
	if h.length > maxClientControlFrame {
		c.watch.gaveUp.Store(true)
		c.keep = false
		return
	}
	c.buf = append(c.buf[:0], h.raw[:]...)
}

func (c *clientFrames) payload(b []byte) {
	if c.keep {
		c.buf = append(c.buf, b...)
	}
}

func (c *clientFrames) end(h frameHeader) {
	if !c.keep {
		return
	}
	c.keep = false
	payload := c.buf[frameHeaderLen:]
	switch h.typ {
	case spdy.TypeGoAway:
		c.watch.clientEnded.Store(true)
		return
	case spdy.TypeRstStream:
		if len(payload) >= 4 && binary.BigEndian.Uint32(payload)&0x7fffffff == c.watch.errorStream.Load() {
			c.watch.clientEnded.Store(true)
		}
		return
	}
	if err := c.readHeaders(); err != nil {
		klog.Background().V(2).Info("SPDY exec stream not followed", "err", err)
		c.watch.gaveUp.Store(true)
	}
}

// readHeaders reads the header block of the frame in buf, learning the
// error stream from a SYN_STREAM of streamType "error". Once it is known,
// the Framer is dropped: nothing else is read from header blocks.
func (c *clientFrames) readHeaders() error {
	if c.framer == nil {
		f, err := spdy.NewFramer(io.Discard, &c.feed)
		if err != nil {
			return err
		}
		c.framer = f
	}
	c.feed.b = c.buf
	frame, err := c.framer.ReadFrame()
	if err != nil {
		return fmt.Errorf("reading a client frame: %w", err)
	}
	if len(c.feed.b) != 0 {
		return errors.New("client frame longer than its header block")
	}
	if syn, ok := frame.(*spdy.SynStreamFrame); ok && syn.Headers.Get("streamType") == "error" {
		c.watch.errorStream.Store(uint32(syn.StreamId))
		c.framer, c.buf = nil, nil
	}
	return nil
}

// frameFeed hands the Framer one whole frame at a time.
type frameFeed struct{ b []byte }

func (f *frameFeed) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

// frameHeaderLen is the length of every SPDY/3 frame header: control frames
// (control bit, version, type, flags, length) and data frames (stream ID,
// flags, length) alike.
const frameHeaderLen = 8

type frameHeader struct {
	raw     [frameHeaderLen]byte
	control bool
	version uint16                // control frames
	typ     spdy.ControlFrameType // control frames
	stream  uint32                // data frames
	flags   byte
	length  int
}

// valid reports whether h can be a SPDY/3 frame: no data on stream 0, no
// other version.
func (h *frameHeader) valid() bool {
	if h.control {
		return h.version == spdy.Version
	}
	return h.stream != 0
}

// frameHandler is told of each frame of a direction in order.
type frameHandler interface {
	header(frameHeader)
	payload([]byte)
	end(frameHeader)
}

// frameScanner finds frame boundaries in one direction of a SPDY/3
// connection, fed its bytes in order in chunks of any size. It copies
// nothing but frame headers.
type frameScanner struct {
	cur  frameHeader
	hdrN int // header bytes of cur read so far
	left int // payload bytes of cur still to come
}

func (s *frameScanner) scan(b []byte, h frameHandler) {
	for len(b) > 0 {
		if s.hdrN < frameHeaderLen {
			n := copy(s.cur.raw[s.hdrN:], b)
			s.hdrN += n
			b = b[n:]
			if s.hdrN < frameHeaderLen {
				return
			}
			s.cur.parse()
			s.left = s.cur.length
			h.header(s.cur)
			if s.left == 0 {
				s.hdrN = 0
				h.end(s.cur)
			}
			continue
		}
		n := min(len(b), s.left)
		h.payload(b[:n])
		s.left -= n
		b = b[n:]
		if s.left == 0 {
			s.hdrN = 0
			h.end(s.cur)
		}
	}
}

// atBoundary reports whether the bytes seen end with a whole frame.
func (s *frameScanner) atBoundary() bool { return s.hdrN == 0 }

func (h *frameHeader) parse() {
	first := binary.BigEndian.Uint32(h.raw[0:4])
	h.control = first&0x80000000 != 0
	h.typ, h.stream, h.version = 0, 0, 0
	if h.control {
		h.version = uint16(first>>16) & 0x7fff
		h.typ = spdy.ControlFrameType(first & 0xffff)
	} else {
		h.stream = first & 0x7fffffff
	}
	h.flags = h.raw[4]
	h.length = int(binary.BigEndian.Uint32(h.raw[4:8]) & 0xffffff)
}

// errorStreamFrame is a SPDY DATA frame with FIN on stream carrying status
// as the kubelet writes it on a v4 error stream.
func errorStreamFrame(stream uint32, status metav1.Status) []byte {
	body := statusJSON(status)
	frame := make([]byte, frameHeaderLen, frameHeaderLen+len(body))
	binary.BigEndian.PutUint32(frame[0:4], stream&0x7fffffff)
	binary.BigEndian.PutUint32(frame[4:8], uint32(spdy.DataFlagFin)<<24|uint32(len(body)))
	return append(frame, body...)
}

// statusJSON is status as the kubelet writes it on an error channel.
func statusJSON(status metav1.Status) []byte {
	body, err := json.Marshal(status)
	if err != nil { // a Status always marshals
		panic(err)
	}
	return body
}

// cutStatus is the Status a client gets for a stream upstream cut.
func cutStatus(where string) metav1.Status {
	return metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     http.StatusServiceUnavailable,
		Reason:   metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("the stream from %s was cut before the command's exit status arrived "+
			"(the pod's node, its kubelet or its container runtime stopped answering); the command's outcome is unknown", where),
	}
}

// watchesSPDYExitStatus reports whether res switches to SPDY with the v4
// remotecommand protocol, the one whose cuts spdyFollower can tell: its
// server always writes a Status on the error stream when a command ends,
// Success included (cri-streaming's v4WriteStatusFunc). v1 to v3 signal
// success by an empty error stream, so a cut looks like success there by
// design.
func watchesSPDYExitStatus(res *http.Response) bool {
	return strings.EqualFold(upgradeType(res.Header), "SPDY/3.1") &&
		strings.TrimSpace(res.Header.Get("X-Stream-Protocol-Version")) == remotecommand.StreamProtocolV4Name
}

// watchExitStatus has the upgraded exec or attach stream of res watched
// for a cut, if its protocol promises an exit status.
func (p *Proxy) watchExitStatus(res *http.Response) {
	body, ok := res.Body.(io.ReadWriteCloser)
	state := stateFrom(res.Request.Context())
	if !ok || state == nil {
		return
	}
	route, where := state.route, state.upstreamName
	logger := klog.FromContext(res.Request.Context()).WithValues("route", route, "upstream", state.upstreamName)
	if state.cluster != "" {
		where = fmt.Sprintf("member cluster %q", state.cluster)
		logger = logger.WithValues("cluster", state.cluster, "namespace", state.pod.Namespace, "pod", state.pod.Name)
	}
	var follow statusFollower
	switch {
	case watchesSPDYExitStatus(res):
		follow = newSPDYFollower(func(stream uint32) []byte { return errorStreamFrame(stream, cutStatus(where)) })
	case watchesWebSocketExitStatus(res, route):
		follow = &wsFollower{cutFrames: func() []byte { return webSocketCutFrames(cutStatus(where)) }}
	default:
		return
	}
	res.Body = newStatusWatch(body, follow, func(result string) {
		p.metrics.StreamCutsTotal.WithLabelValues(route, result).Inc()
		logger.Info("Upstream ended an exec stream without its exit status", "result", result)
	})
}
