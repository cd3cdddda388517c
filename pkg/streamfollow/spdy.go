package streamfollow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/moby/spdystream/spdy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// maxClientControlFrame bounds a client control frame the follower buffers
// to read its headers; remotecommand's are well under 1 KiB. A longer one
// ends the following (the stream is relayed as before, only unwatched).
const maxClientControlFrame = 64 << 10

// spdyFollower follows SPDY/3.1 with remotecommand: the client's
// SYN_STREAM headers name each channel's stream, the server's DATA frames
// carry stdout, stderr and the exit status, the client's stdin and
// resizes. Its cut is a DATA frame with FIN on the error stream carrying
// the Failure.
type spdyFollower struct {
	// Written on the client side, read on the server side.
	streams     [channels]atomic.Uint32 // each channel's stream, 0 until the client opened it
	clientEnded atomic.Bool             // client GOAWAY or RST_STREAM of the error stream
	// gaveUp: a direction did not read as SPDY/3 (or a client frame could
	// not be read); the stream is relayed unwatched from then on.
	gaveUp atomic.Bool

	obs Observer

	clientScan frameScanner
	client     clientFrames
	serverScan frameScanner
	server     serverFrames
}

func newSPDYFollower(obs Observer) *spdyFollower {
	f := &spdyFollower{obs: obs}
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

func (f *spdyFollower) status() []byte { return f.server.status.get() }

// channelOf is the channel stream carries, if the client opened it as one.
func (f *spdyFollower) channelOf(stream uint32) (Channel, bool) {
	for ch := range f.streams {
		if f.streams[ch].Load() == stream {
			return Channel(ch), true
		}
	}
	return 0, false
}

func (f *spdyFollower) serverAtBoundary() bool {
	return !f.gaveUp.Load() && f.serverScan.atBoundary()
}

func (f *spdyFollower) serverLost() bool { return f.gaveUp.Load() }

func (f *spdyFollower) partial() int {
	if f.gaveUp.Load() {
		return 0
	}
	return f.serverScan.partial()
}

func (f *spdyFollower) cut(status *metav1.Status, dropped bool) ([]byte, bool) {
	stream := f.streams[Error].Load()
	if f.clientEnded.Load() || f.gaveUp.Load() || stream == 0 || f.server.statusSeen || f.server.errorFin {
		return nil, false
	}
	if status == nil {
		return nil, true
	}
	var tell []byte
	switch s := &f.serverScan; {
	case dropped || s.atBoundary():
	case s.hdrN < frameHeaderLen:
		return nil, true // a header is always held: not a frame this follower read
	default:
		// A frame too long to hold was cut: zeros complete it, so that
		// the client's framer reads the Failure after it.
		tell = make([]byte, s.left)
	}
	return append(tell, errorStreamFrame(stream, *status)...), false
}

// serverFrames notes what the server sent: stdout and stderr for the
// Observer, the error stream's Status.
type serverFrames struct {
	watch                *spdyFollower
	statusSeen, errorFin bool
	cur                  Channel
	curKnown             bool
	status               statusBuf
}

func (s *serverFrames) header(h frameHeader) {
	s.curKnown = false
	if !h.valid() {
		s.watch.gaveUp.Store(true)
		return
	}
	if h.control {
		return
	}
	s.cur, s.curKnown = s.watch.channelOf(h.stream)
}

func (s *serverFrames) payload(b []byte) {
	if !s.curKnown {
		return
	}
	switch s.cur {
	case Error:
		s.status.add(b)
	case Stdout, Stderr:
		if s.watch.obs != nil {
			s.watch.obs.Data(s.cur, b)
		}
	}
}

// end notes the error stream's status and FIN once their frame is whole:
// a frame cut short never reached the client.
func (s *serverFrames) end(h frameHeader) {
	if h.control || !s.curKnown || s.cur != Error {
		return
	}
	if h.length > 0 {
		s.statusSeen = true
	}
	if h.flags&byte(spdy.DataFlagFin) != 0 {
		s.errorFin = true
	}
}

// clientFrames reads the client's frames: SYN_STREAM header blocks through
// spdystream's Framer (their zlib context spans the connection, so it reads
// every one until each channel's stream is known), RST_STREAM and GOAWAY by
// hand, stdin and resize DATA for the Observer.
type clientFrames struct {
	watch  *spdyFollower
	framer *spdy.Framer
	feed   frameFeed
	buf    []byte // the control frame being read, header included
	keep   bool   // buf collects the current frame
	done   bool   // every channel is known: header blocks are no longer read

	cur      Channel // of the current DATA frame
	curKnown bool
	resize   resizeReader
}

func (c *clientFrames) header(h frameHeader) {
	c.keep, c.curKnown = false, false
	if !h.valid() {
		c.watch.gaveUp.Store(true)
		return
	}
	if c.watch.gaveUp.Load() {
		return
	}
	if !h.control {
		if c.watch.obs != nil {
			c.cur, c.curKnown = c.watch.channelOf(h.stream)
		}
		return
	}
	switch h.typ {
	case spdy.TypeSynStream, spdy.TypeSynReply, spdy.TypeHeaders:
		// Header blocks share one zlib context: until every channel is
		// known each one must be read, in order.
		c.keep = !c.done
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
	switch {
	case c.keep:
		c.buf = append(c.buf, b...)
	case !c.curKnown:
	case c.cur == Stdin:
		c.watch.obs.Data(Stdin, b)
	case c.cur == Resize:
		c.resize.feed(b, c.watch.obs)
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
		if len(payload) >= 4 && binary.BigEndian.Uint32(payload)&0x7fffffff == c.watch.streams[Error].Load() {
			c.watch.clientEnded.Store(true)
		}
		return
	}
	if err := c.readHeaders(); err != nil {
		klog.Background().V(2).Info("SPDY exec stream not followed", "err", err)
		c.watch.gaveUp.Store(true)
	}
}

// readHeaders reads the header block of the frame in buf, learning a
// channel's stream from a SYN_STREAM's streamType. Once the error stream
// is known and, with an Observer, every other channel too, the Framer is
// dropped: nothing else is read from header blocks (client-go opens every
// stream before it copies anything).
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
	syn, ok := frame.(*spdy.SynStreamFrame)
	if !ok {
		return nil
	}
	typ := syn.Headers.Get("streamType")
	for ch, name := range channelNames {
		if typ == name && c.watch.streams[ch].Load() == 0 {
			c.watch.streams[ch].Store(uint32(syn.StreamId))
		}
	}
	known := c.watch.streams[Error].Load() != 0
	if c.watch.obs != nil {
		for ch := range c.watch.streams {
			known = known && c.watch.streams[ch].Load() != 0
		}
	}
	if known {
		c.framer, c.buf, c.done = nil, nil, true
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

// partial is how many of the bytes seen belong to the frame not yet
// whole, if it is at most maxHeldFrame long (its header not yet whole
// always is).
func (s *frameScanner) partial() int {
	switch {
	case s.hdrN == 0:
		return 0
	case s.hdrN < frameHeaderLen:
		return s.hdrN
	case frameHeaderLen+s.cur.length > maxHeldFrame:
		return 0
	}
	return frameHeaderLen + s.cur.length - s.left
}

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
