package streamfollow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/remotecommand"
)

// Channel is a remotecommand stream: the WebSocket channel number, and
// the SPDY streamType header names it.
type Channel uint8

// The remotecommand channels.
const (
	Stdin  Channel = 0
	Stdout Channel = 1
	Stderr Channel = 2
	Error  Channel = 3
	Resize Channel = 4
	// channels counts them.
	channels = 5
)

var channelNames = [channels]string{"stdin", "stdout", "stderr", "error", "resize"}

func (c Channel) String() string {
	if c < channels {
		return channelNames[c]
	}
	return "channel" + strconv.Itoa(int(c))
}

// TerminalSize is a resize the client sent, as remotecommand encodes it.
type TerminalSize struct {
	Width  uint16
	Height uint16
}

// Observer is told what a followed exec or attach carries. Stdin and
// resizes come from the client's copy goroutine, stdout and stderr from
// the server's: each side's calls come in order, the two sides
// concurrently. p is valid during the call only. Calls run on the copy
// path: they must not block.
type Observer interface {
	Data(ch Channel, p []byte)
	Resize(size TerminalSize)
}

// End is how a followed stream ended.
type End string

const (
	// EndCompleted: upstream ended the stream as its protocol ends it (an
	// exit status came, or the protocol promises none).
	EndCompleted End = "completed"
	// EndClientClosed: the gateway closed the stream before upstream
	// ended it and before any exit status: the client left or the request
	// was cancelled.
	EndClientClosed End = "client_closed"
	// EndCutReported: upstream ended it without the exit status its
	// protocol promises; the client was told (Options.Cut).
	EndCutReported End = "cut_reported"
	// EndCutUnreported: the same, but the cut could not be told (the
	// follower lost track of the protocol's frames) or there was nothing
	// to tell it with.
	EndCutUnreported End = "cut_unreported"
	// EndGatewayShutdown: the gateway ended the stream because it was
	// shutting down and the stream outlived the grace period (Terminate).
	EndGatewayShutdown End = "gateway_shutdown"
	// EndRecordingFailed: the gateway ended the stream because its
	// recording failed and recording fails closed (Terminate).
	EndRecordingFailed End = "recording_failed"
)

// Summary is what a Stream saw, reported once when it closes.
type Summary struct {
	End End
	// FromClient and FromServer are the tunnel's bytes each way as they
	// passed (frames included; what the gateway injected is not counted).
	FromClient, FromServer int64
	// Status is the exit Status the server sent on the error channel, as
	// sent (the first maxStatusBytes); nil when none came.
	Status []byte
}

// ExitCode reads a remotecommand v4 exit Status: 0 for Success, the
// ExitCode cause of a NonZeroExitCode Failure. ok is false for any other
// Status (the command did not run, the stream failed) or none.
func ExitCode(status []byte) (code int, ok bool) {
	var st metav1.Status
	if len(status) == 0 || json.Unmarshal(status, &st) != nil {
		return 0, false
	}
	switch {
	case st.Status == metav1.StatusSuccess:
		return 0, true
	case st.Reason == remotecommand.NonZeroExitCodeReason && st.Details != nil:
		for _, c := range st.Details.Causes {
			if c.Type == remotecommand.ExitCodeCauseType {
				n, err := strconv.Atoi(c.Message)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// Protocol is what a Stream can read of a tunnel.
type Protocol struct {
	kind protocolKind
	// exitStatus: the server always sends a Status on the error channel
	// before it ends the stream, Success included, so a stream ended
	// without one was cut.
	exitStatus bool
	name       string
}

type protocolKind uint8

const (
	unfollowed protocolKind = iota
	spdyChannels
	webSocketChannels
)

// String names the negotiated protocol, as the response named it.
func (p Protocol) String() string { return p.name }

// ProtocolOf is what a Stream can follow of the tunnel a 101 response
// with header h opened for a pod subresource (exec, attach, portforward).
// remotecommand's channels are decoded over SPDY (every version: they name
// streams by streamType) and WebSocket (the binary channel protocols, not
// base64); only v4 (SPDY, WebSocket) and v5 (WebSocket) promise an exit
// status: v1 to v3 signal success by an empty error stream, so a cut
// looks like success there by design. Port-forward is counted, not
// decoded (its channels are ports).
func ProtocolOf(h http.Header, subresource string) Protocol {
	upgrade := h.Get("Upgrade")
	if subresource != "exec" && subresource != "attach" {
		return Protocol{name: upgrade}
	}
	switch {
	case strings.EqualFold(upgrade, "SPDY/3.1"):
		v := strings.TrimSpace(h.Get("X-Stream-Protocol-Version"))
		switch v {
		case remotecommand.StreamProtocolV4Name:
			return Protocol{kind: spdyChannels, exitStatus: true, name: v}
		case remotecommand.StreamProtocolV3Name, remotecommand.StreamProtocolV2Name, remotecommand.StreamProtocolV1Name:
			return Protocol{kind: spdyChannels, name: v}
		}
	case strings.EqualFold(upgrade, "websocket") && h.Get("Sec-WebSocket-Extensions") != "":
		// An extension (permessage-deflate) changes the frames' payload;
		// no Kubernetes server negotiates one. Relayed, not followed.
	case strings.EqualFold(upgrade, "websocket"):
		v := strings.TrimSpace(h.Get("Sec-WebSocket-Protocol"))
		switch v {
		case remotecommand.StreamProtocolV4Name, remotecommand.StreamProtocolV5Name:
			return Protocol{kind: webSocketChannels, exitStatus: true, name: v}
		case "channel.k8s.io":
			return Protocol{kind: webSocketChannels, name: v}
		}
	}
	return Protocol{name: upgrade}
}

// Decodes reports whether a Stream decodes channels of p for an Observer.
func (p Protocol) Decodes() bool { return p.kind != unfollowed }

// DecodesOffer reports whether an exec or attach tunnel that negotiated
// offer, one protocol a client offers (an X-Stream-Protocol-Version line
// for SPDY/3.1, a Sec-WebSocket-Protocol token for WebSocket), is one
// whose channels a Stream decodes: what ProtocolOf would read of the 101.
func DecodesOffer(upgrade, offer string) bool {
	h := http.Header{"Upgrade": {upgrade}}
	if strings.EqualFold(upgrade, "websocket") {
		h.Set("Sec-WebSocket-Protocol", offer)
	} else {
		h.Set("X-Stream-Protocol-Version", offer)
	}
	return offer != "" && ProtocolOf(h, "exec").Decodes()
}

// PromisesExitStatus reports whether p's server always ends with a Status,
// so that a cut can be told from an end.
func (p Protocol) PromisesExitStatus() bool { return p.exitStatus }

// Options configures a Stream.
type Options struct {
	Protocol Protocol
	// Observer, when set, is told the channels' data and resizes.
	Observer Observer
	// Cut, when set, is the Status told to a client whose stream
	// upstream cut (only for protocols that promise an exit status), given
	// upstream's read error.
	Cut func(readErr error) metav1.Status
	// OnCut, when set, is called when a cut is found (EndCutReported or
	// EndCutUnreported), on the copy goroutine, before the client is told.
	OnCut func(End)
	// OnEnd is called once, when the stream is closed (ReverseProxy closes
	// it, possibly after its handler returned).
	OnEnd func(Summary)
	// HeartbeatPeriod and HeartbeatDeadline time the gateway's own
	// heartbeats upstream (see heartbeat.go); zero: 5 s and 60 s.
	HeartbeatPeriod, HeartbeatDeadline time.Duration
	// OnHeartbeat, when set, is told of each client heartbeat the gateway
	// answered and each heartbeat of its own it sent upstream.
	OnHeartbeat func(Heartbeat)
}

// Heartbeat is what OnHeartbeat is told of.
type Heartbeat string

const (
	// HeartbeatAnswered: the gateway answered a client's heartbeat.
	HeartbeatAnswered Heartbeat = "answered"
	// HeartbeatSent: the gateway sent upstream a heartbeat of its own.
	HeartbeatSent Heartbeat = "sent"
)

// follower follows one protocol's frames for a Stream.
type follower interface {
	// fromClient and fromServer see every byte of their direction, in
	// order, before it is passed on.
	fromClient(p []byte)
	fromServer(p []byte)
	// partial is how many of the last bytes fromServer saw belong to a
	// server frame not yet whole, if that frame is short enough to be held
	// back (maxHeldFrame); 0 at a frame boundary, for a longer frame, or
	// once the follower lost track of the frames.
	partial() int
	// cut is asked once, when upstream ended and the client is there:
	// the bytes that tell the client its stream ended with status, or
	// found when a cut was found that cannot be told (status nil, or the
	// frames were lost track of). dropped says the bytes of a frame not
	// yet whole were held back and will never reach the client: the
	// client's bytes end at the boundary before that frame. Nothing is
	// returned when the protocol's own end came (an exit status, a close).
	cut(status *metav1.Status, dropped bool) (tell []byte, found bool)
	// status is the exit status the server sent, or nil.
	status() []byte
	// serverAtBoundary reports whether the server's bytes seen end with a
	// whole frame of a direction still followed, so that a frame of the
	// gateway's own may follow. Read side only.
	serverAtBoundary() bool
	// serverLost reports whether the server's frames were lost track of;
	// safe from either side.
	serverLost() bool
}

// maxHeldFrame bounds the server frame a Stream holds back until it is
// whole: a kubelet's frames carry at most 32 KiB of a container's output.
// A longer frame is passed on as it comes, and completed with zero bytes
// if upstream cuts it, so the client's framer still reaches the Failure.
const maxHeldFrame = 64<<10 + 16

// minHeldRead is the room a read behind held bytes is given at least.
const minHeldRead = 16 << 10

// writeFailureWait bounds how long a write that failed because upstream
// ended waits for the read side to tell the client why: ReverseProxy
// closes the client's connection as soon as either direction ends.
const writeFailureWait = 2 * time.Second

// termination is why the gateway ended a stream (Terminate).
type termination struct {
	end    End
	status metav1.Status
}

// Stream is the upstream side of an upgraded tunnel as ReverseProxy copies
// it, followed. Read runs on ReverseProxy's upstream-to-client goroutine
// only, Write on the client-to-upstream one, Close and Terminate on either
// or another.
//
// For a protocol that promises an exit status, Read passes on whole server
// frames only: the start of a frame is held back until the frame is whole
// (up to maxHeldFrame), so wherever upstream cuts the tunnel the client's
// bytes end at a frame boundary, where the Failure can follow.
type Stream struct {
	io.ReadWriteCloser
	opts   Options
	follow follower // nil when the protocol is not followed
	hold   bool     // whole frames only (see Stream)
	// hb answers the client's heartbeats (heartbeat.go); nil unless the
	// stream holds whole frames.
	hb *heartbeats

	fromClient, fromServer atomic.Int64
	// clientLeft: the gateway closed the stream: nothing is reported to
	// a client that is gone.
	clientLeft atomic.Bool
	// terminated: the gateway ended the stream, and why (Terminate).
	terminated atomic.Pointer[termination]
	// ended is upstream's end as the Read side judged it ("" until then).
	ended   atomic.Pointer[End]
	endOnce sync.Once
	// readDone closes when Read returned upstream's end to ReverseProxy.
	readDone     chan struct{}
	readDoneOnce sync.Once
	endedAt      atomic.Int64 // when readDone closed (UnixNano)

	// Read side. held[r:ready] are whole frames not yet read by the
	// client, held[ready:] the start of a frame still coming.
	heldBuf  *[heldBufferSize]byte
	held     []byte
	r, ready int
	judged   bool
	pending  []byte // the frames telling the client, until delivered
	readErr  error  // upstream's end, returned after pending
}

// NewStream follows upstream as opts say.
func NewStream(upstream io.ReadWriteCloser, opts Options) *Stream {
	s := &Stream{ReadWriteCloser: upstream, opts: opts, readDone: make(chan struct{})}
	switch opts.Protocol.kind {
	case spdyChannels:
		s.follow = newSPDYFollower(opts.Observer)
	case webSocketChannels:
		s.follow = newWebSocketFollower(opts.Observer)
	}
	s.hold = s.follow != nil && opts.Protocol.exitStatus
	if s.hold {
		s.hb = newHeartbeats(opts.Protocol.kind, opts)
		s.hb.start(s)
	}
	return s
}

// Write follows the client's frames before they go upstream, so what they
// open is known before the server can answer on it. A write that fails
// because upstream ended waits, briefly, for the read side to tell the
// client how the stream ended: ReverseProxy closes the client's
// connection as soon as this copy returns.
func (s *Stream) Write(p []byte) (int, error) {
	if s.follow != nil {
		s.follow.fromClient(p)
	}
	var n int
	var err error
	if s.hb != nil {
		n, err = s.hb.write(s.ReadWriteCloser, p, s.follow.serverLost())
		if err == nil && s.hb.lingered(s) {
			// The read side ended long ago and the client, told so,
			// still sends (heartbeats only reach nobody): end its copy.
			err = errClientLingered
		}
	} else {
		n, err = s.ReadWriteCloser.Write(p)
	}
	s.fromClient.Add(int64(n))
	// A stream the gateway ended waits for its Failure to be handed out
	// even once closed: Shutdown cancels the requests right after it ends
	// their streams, and a copy failing here then would have ReverseProxy
	// close the client's connection before the Failure reached it.
	if err != nil && (!s.clientLeft.Load() || s.terminated.Load() != nil) {
		t := time.NewTimer(writeFailureWait)
		select {
		case <-s.readDone:
		case <-t.C:
		}
		t.Stop()
	}
	return n, err
}

func (s *Stream) Read(p []byte) (int, error) {
	for {
		switch {
		case s.ready > s.r:
			n := copy(p, s.held[s.r:s.ready])
			if s.r += n; s.r == len(s.held) {
				s.releaseHeld()
			}
			return n, nil
		case s.readErr != nil:
			return s.end(p)
		case len(s.held) == 0 && s.hb != nil && s.hb.hasAnswers.Load() && s.follow.serverAtBoundary():
			// Between the server's frames: the answers to the client's
			// heartbeats.
			return s.hb.takeAnswers(p), nil
		case len(s.held) == 0:
			// Nothing held: read straight into the client's buffer.
			n, err := s.readUpstream(p)
			n, err = s.unlessTerminated(n, err)
			s.saw(p[:n])
			if k := min(s.partial(), n); k > 0 {
				s.takeHeld()
				s.held = append(s.held, p[n-k:n]...)
				n -= k
			}
			s.readErr = err
			if n > 0 {
				return n, nil
			}
		default:
			// The start of a frame is held: read the rest behind it.
			s.compact()
			w := len(s.held)
			if w == cap(s.held) { // not a frame this follower holds: pass it on
				s.ready = w
				continue
			}
			n, err := s.readUpstream(s.held[w:cap(s.held)])
			n, err = s.unlessTerminated(n, err)
			s.held = s.held[:w+n]
			s.saw(s.held[w:])
			s.ready = len(s.held) - min(s.partial(), len(s.held))
			s.readErr = err
		}
	}
}

// readUpstream reads upstream, through the heartbeats' pump if there is
// one; (0, nil) then says answers came for the client.
func (s *Stream) readUpstream(p []byte) (int, error) {
	if s.hb != nil {
		return s.hb.read(s, p)
	}
	return s.ReadWriteCloser.Read(p)
}

// errTerminated ends the read side of a stream the gateway ended.
var errTerminated = errors.New("the gateway ended the stream")

// unlessTerminated drops what upstream sent once the gateway ended the
// stream: it may be upstream's answer to the gateway's own close (TLS
// sends close_notify before the socket closes, and a server whose stdin
// ends that way reports the command's Success), which would tell the
// client its command completed when the gateway ended it. The client's
// bytes end at the frame boundary before, where the gateway's Status
// follows.
func (s *Stream) unlessTerminated(n int, err error) (int, error) {
	if s.terminated.Load() == nil {
		return n, err
	}
	if err == nil || errors.Is(err, io.EOF) {
		// Never a clean end: on io.EOF ReverseProxy would wait for the
		// client to close its side too, which a client behind a
		// port-forward may never be seen to do, and a gateway shutting
		// down would exit before the stream's audit event was written.
		err = errTerminated
	}
	return 0, err
}

// heldBufferSize fits the longest frame held and a read behind it.
const heldBufferSize = maxHeldFrame + minHeldRead

// heldBuffers lend Streams the buffer a frame is held in while it comes:
// an interactive session holds nothing between frames, and should not
// keep 80 KiB for its hours of idleness.
var heldBuffers = sync.Pool{New: func() any { return new([heldBufferSize]byte) }}

func (s *Stream) takeHeld() {
	if s.heldBuf == nil {
		s.heldBuf = heldBuffers.Get().(*[heldBufferSize]byte)
		s.held, s.r, s.ready = s.heldBuf[:0], 0, 0
	}
}

func (s *Stream) releaseHeld() {
	if s.heldBuf != nil {
		heldBuffers.Put(s.heldBuf)
	}
	s.heldBuf, s.held, s.r, s.ready = nil, nil, 0, 0
}

// compact drops what the client read of held.
func (s *Stream) compact() {
	if s.r == 0 {
		return
	}
	s.held = s.held[:copy(s.held, s.held[s.r:])]
	s.ready -= s.r
	s.r = 0
}

// saw counts and follows bytes that came from upstream.
func (s *Stream) saw(b []byte) {
	if len(b) == 0 {
		return
	}
	s.fromServer.Add(int64(len(b)))
	if s.follow != nil {
		s.follow.fromServer(b)
	}
}

func (s *Stream) partial() int {
	if !s.hold {
		return 0
	}
	return s.follow.partial()
}

// end runs once upstream ended and every whole frame was read: it judges
// the end once, then hands out what tells the client, then upstream's
// error.
func (s *Stream) end(p []byte) (int, error) {
	if !s.judged {
		s.judged = true
		dropped := len(s.held) > s.ready
		s.releaseHeld()
		if term := s.terminated.Load(); term != nil || !s.clientLeft.Load() {
			end := s.judgeEnd(term, dropped)
			s.ended.Store(&end)
			if term == nil && end != EndCompleted && s.opts.OnCut != nil {
				s.opts.OnCut(end)
			}
		}
	}
	if len(s.pending) > 0 {
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		return n, nil
	}
	s.readDoneOnce.Do(func() {
		s.endedAt.Store(time.Now().UnixNano())
		close(s.readDone)
	})
	return 0, s.readErr
}

// judgeEnd tells how the stream ended: by the gateway's Terminate, by
// upstream as its protocol ends, or by a cut; for a cut it can tell, or a
// termination, it prepares the frames that tell the client.
func (s *Stream) judgeEnd(term *termination, dropped bool) End {
	cutEnd, unreported := EndCutReported, EndCutUnreported
	if term != nil {
		cutEnd, unreported = term.end, term.end
	}
	if s.follow == nil || !s.opts.Protocol.exitStatus {
		if term != nil {
			return term.end
		}
		return EndCompleted
	}
	var st *metav1.Status
	switch {
	case term != nil:
		st = &term.status
	case s.opts.Cut != nil:
		v := s.opts.Cut(s.readErr)
		st = &v
	}
	tell, found := s.follow.cut(st, dropped)
	switch {
	case tell != nil:
		s.pending = tell
		return cutEnd
	case found:
		return unreported
	}
	return EndCompleted
}

// Terminate ends the stream for the gateway's own reason: it closes
// upstream, and the Read side, once the client read every whole frame,
// tells the client status on the error channel (for a protocol that
// promises an exit status) before the tunnel ends. The Summary says end,
// unless the exit status had come. Only the first call counts.
func (s *Stream) Terminate(end End, status metav1.Status) {
	if s.terminated.CompareAndSwap(nil, &termination{end: end, status: status}) {
		_ = s.ReadWriteCloser.Close()
	}
}

// Close closes upstream and reports the Summary, once; a second Close
// waits for the first one's report.
func (s *Stream) Close() error {
	s.clientLeft.Store(true)
	err := s.ReadWriteCloser.Close()
	if s.hb != nil {
		s.hb.close()
	}
	s.endOnce.Do(func() {
		if s.opts.OnEnd != nil {
			s.opts.OnEnd(s.Summary())
		}
	})
	return err
}

// Summary is what the Stream saw so far.
func (s *Stream) Summary() Summary {
	sum := Summary{End: EndClientClosed, FromClient: s.fromClient.Load(), FromServer: s.fromServer.Load()}
	closedByGateway := false
	if e := s.ended.Load(); e != nil {
		sum.End = *e
	} else if t := s.terminated.Load(); t != nil {
		sum.End, closedByGateway = t.end, true
	}
	if s.follow != nil {
		sum.Status = s.follow.status()
	}
	if (sum.End == EndClientClosed || closedByGateway) && sum.Status != nil {
		// The exit status came: closing after it is the end.
		sum.End = EndCompleted
	}
	return sum
}

// CutStatus is the Status a client gets for a stream cut before its exit
// status: where names what the stream came from ("member cluster
// \"m1\""), via the connection the gateway read it on
// ("karmada-apiserver"), and how that connection ended (readErr, upstream's
// read error). It says what the gateway saw and nothing it cannot know:
// that connection ends the same way whether a kubelet, a member's
// apiserver, Karmada's cluster proxy or a proxy in front of a member
// stopped, and the command may still run.
func CutStatus(where, via string, readErr error) metav1.Status {
	return metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     http.StatusServiceUnavailable,
		Reason:   metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("the stream from %s ended before the command's exit status arrived: "+
			"the gateway's connection to %s that carried it %s; the command's outcome is unknown", where, via, howEnded(readErr)),
	}
}

// howEnded says how a connection's read ended, without the addresses a
// net.OpError carries.
func howEnded(err error) string {
	var timeout interface{ Timeout() bool }
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return "was closed"
	case errors.Is(err, syscall.ECONNRESET):
		return "was reset"
	case errors.As(err, &timeout) && timeout.Timeout():
		return "timed out"
	case errors.Is(err, net.ErrClosed):
		return "was closed by the gateway"
	}
	return "failed"
}

// statusJSON is status as the kubelet writes it on an error channel.
func statusJSON(status metav1.Status) []byte {
	body, err := json.Marshal(status)
	if err != nil { // a Status always marshals
		panic(err)
	}
	return body
}

// maxStatusBytes bounds the exit status a follower keeps; the kubelet's
// are well under 1 KiB.
const maxStatusBytes = 16 << 10

// statusBuf keeps the first maxStatusBytes of the error channel. It is
// written by the server side and read at Close, possibly from another
// goroutine.
type statusBuf struct {
	mu  sync.Mutex
	b   []byte
	any bool
}

func (s *statusBuf) add(p []byte) {
	if len(p) == 0 {
		return
	}
	s.mu.Lock()
	s.any = true
	if room := maxStatusBytes - len(s.b); room > 0 {
		s.b = append(s.b, p[:min(room, len(p))]...)
	}
	s.mu.Unlock()
}

func (s *statusBuf) get() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.any {
		return nil
	}
	return append([]byte(nil), s.b...)
}

// maxResizeBytes bounds a resize message; remotecommand's are ~30 bytes.
const maxResizeBytes = 1 << 10

// resizeReader reads the JSON TerminalSize objects the client sends on the
// resize channel, one per line (SPDY: json.Encoder) or per message
// (WebSocket).
type resizeReader struct {
	buf  []byte
	over bool
}

func (r *resizeReader) feed(p []byte, obs Observer) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			r.keep(p)
			return
		}
		r.keep(p[:i])
		r.flush(obs)
		p = p[i+1:]
	}
}

func (r *resizeReader) keep(p []byte) {
	if len(r.buf)+len(p) > maxResizeBytes {
		r.over = true
		return
	}
	r.buf = append(r.buf, p...)
}

// flush reads what was kept as one TerminalSize.
func (r *resizeReader) flush(obs Observer) {
	b, over := r.buf, r.over
	r.buf, r.over = r.buf[:0], false
	if over || len(bytes.TrimSpace(b)) == 0 {
		return
	}
	var size TerminalSize
	if json.Unmarshal(b, &size) == nil {
		obs.Resize(size)
	}
}
