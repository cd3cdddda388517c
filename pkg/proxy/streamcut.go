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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/moby/spdystream/spdy"
)

// remotecommandV4 is the stream protocol whose server always writes a
// Status on the error stream when a command ends, Success included
// (cri-streaming's v4WriteStatusFunc). v1 to v3 signal success by an empty
// error stream, so a cut looks like success there by design.
const remotecommandV4 = "v4.channel.k8s.io"

// maxClientControlFrame bounds a client control frame the watch buffers to
// read its headers; remotecommand's are well under 1 KiB. A longer one ends
// the watch (the stream is relayed as before, only unwatched).
const maxClientControlFrame = 64 << 10

// Stream cut results: the gateway reported the cut to the client, or found
// it but could not (SPDY: the upstream ended inside a frame; logs: the
// member's pod could not be read to tell a cut from an end).
const (
	cutReported   = "reported"
	cutUnreported = "unreported"
)

// spdyStatusWatch is the upstream side of an upgraded SPDY/3.1 remotecommand
// v4 stream (exec, attach) as ReverseProxy copies it. It follows the frames
// of both directions without holding any back: the client's SYN_STREAM
// headers name the error stream, the server's DATA frames show whether a
// Status came on it. When upstream ends the tunnel (a member's kubelet or
// container runtime died: kube-apiserver just closes it) while the client is
// still there and no Status came, it appends to what the client reads, at a
// frame boundary, a DATA frame with FIN on the error stream carrying a
// Failure Status naming the member. client-go's SPDY executor reads an empty
// error stream as success and returns this Status as an error instead.
//
// Read runs on ReverseProxy's upstream-to-client goroutine only, Write on
// the client-to-upstream one, Close on either or the request's.
type spdyStatusWatch struct {
	io.ReadWriteCloser

	// Written by Write, read by Read.
	errorStream atomic.Uint32 // 0 until the client opened it
	clientEnded atomic.Bool   // client GOAWAY, RST_STREAM of the error stream, or Close
	// gaveUp: a direction did not read as SPDY/3 (or a client frame could
	// not be read); the stream is relayed unwatched from then on.
	gaveUp atomic.Bool

	// Write side.
	toServer frameScanner
	client   clientFrames

	// Read side.
	fromServer frameScanner
	server     serverFrames
	pending    []byte // the injected frame, until delivered
	injected   bool
	readErr    error // upstream's end, returned after pending

	cutFrame func(stream uint32) []byte
	onCut    func(result string)
}

func newSPDYStatusWatch(upstream io.ReadWriteCloser, cutFrame func(stream uint32) []byte, onCut func(result string)) *spdyStatusWatch {
	w := &spdyStatusWatch{ReadWriteCloser: upstream, cutFrame: cutFrame, onCut: onCut}
	w.client.watch = w
	w.server.watch = w
	return w
}

// Write follows the client's frames before they go upstream, so the error
// stream is known before the server can answer on it.
func (w *spdyStatusWatch) Write(p []byte) (int, error) {
	if !w.gaveUp.Load() {
		w.toServer.scan(p, &w.client)
	}
	return w.ReadWriteCloser.Write(p)
}

func (w *spdyStatusWatch) Read(p []byte) (int, error) {
	if w.injected {
		return w.drain(p)
	}
	n, err := w.ReadWriteCloser.Read(p)
	if n > 0 && !w.gaveUp.Load() {
		w.fromServer.scan(p[:n], &w.server)
	}
	if err == nil || !w.reportCut() {
		return n, err
	}
	w.injected, w.readErr = true, err
	if n > 0 {
		return n, nil
	}
	return w.drain(p)
}

func (w *spdyStatusWatch) drain(p []byte) (int, error) {
	if len(w.pending) == 0 {
		return 0, w.readErr
	}
	n := copy(p, w.pending)
	w.pending = w.pending[n:]
	return n, nil
}

// reportCut decides, once upstream ended, whether the client must be told
// of a cut, and prepares the frame that tells it.
func (w *spdyStatusWatch) reportCut() bool {
	stream := w.errorStream.Load()
	if w.clientEnded.Load() || w.gaveUp.Load() || stream == 0 || w.server.statusSeen || w.server.errorFin {
		return false
	}
	if !w.fromServer.atBoundary() {
		// A frame the client has only part of cannot be followed by
		// another; the node died writing it.
		w.onCut(cutUnreported)
		return false
	}
	w.pending = w.cutFrame(stream)
	w.onCut(cutReported)
	return true
}

// Close marks the end as the gateway's (the client left, or the request
// was cancelled): nothing is reported to a client that is gone.
func (w *spdyStatusWatch) Close() error {
	w.clientEnded.Store(true)
	return w.ReadWriteCloser.Close()
}

// serverFrames notes what the server sent on the error stream.
type serverFrames struct {
	watch                *spdyStatusWatch
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
	watch  *spdyStatusWatch
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
	body, err := json.Marshal(status)
	if err != nil { // a Status always marshals
		panic(err)
	}
	frame := make([]byte, frameHeaderLen, frameHeaderLen+len(body))
	binary.BigEndian.PutUint32(frame[0:4], stream&0x7fffffff)
	binary.BigEndian.PutUint32(frame[4:8], uint32(spdy.DataFlagFin)<<24|uint32(len(body)))
	return append(frame, body...)
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

// watchesExitStatus reports whether res switches to SPDY with the v4
// remotecommand protocol, the one whose cuts spdyStatusWatch can tell.
func watchesExitStatus(res *http.Response) bool {
	return strings.EqualFold(upgradeType(res.Header), "SPDY/3.1") &&
		strings.TrimSpace(res.Header.Get("X-Stream-Protocol-Version")) == remotecommandV4
}

// watchExitStatus has the SPDY v4 stream of out watched for a cut.
func (p *Proxy) watchExitStatus(out *http.Request, body io.ReadWriteCloser) io.ReadWriteCloser {
	state := stateFrom(out.Context())
	route, where := state.route, state.upstreamName
	logger := klog.FromContext(out.Context()).WithValues("route", route, "upstream", state.upstreamName)
	if state.cluster != "" {
		where = fmt.Sprintf("member cluster %q", state.cluster)
		logger = logger.WithValues("cluster", state.cluster, "namespace", state.pod.Namespace, "pod", state.pod.Name)
	}
	return newSPDYStatusWatch(body,
		func(stream uint32) []byte { return errorStreamFrame(stream, cutStatus(where)) },
		func(result string) {
			p.metrics.StreamCutsTotal.WithLabelValues(route, result).Inc()
			logger.Info("Upstream ended an exec stream without its exit status", "result", result)
		})
}
