package streamfollow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

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
	// EndCutUnreported: the same, but the cut could not be told (upstream
	// ended inside a frame or a message) or there was nothing to tell it
	// with.
	EndCutUnreported End = "cut_unreported"
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

// PromisesExitStatus reports whether p's server always ends with a Status,
// so that a cut can be told from an end.
func (p Protocol) PromisesExitStatus() bool { return p.exitStatus }

// Options configures a Stream.
type Options struct {
	Protocol Protocol
	// Observer, when set, is told the channels' data and resizes.
	Observer Observer
	// Cut, when set, is the Status told to a client whose stream the
	// member cut (only for protocols that promise an exit status).
	Cut func() metav1.Status
	// OnCut, when set, is called when a cut is found (EndCutReported or
	// EndCutUnreported), on the copy goroutine, before the client is told.
	OnCut func(End)
	// OnEnd is called once, when the stream is closed (ReverseProxy closes
	// it, possibly after its handler returned).
	OnEnd func(Summary)
}

// follower follows one protocol's frames for a Stream.
type follower interface {
	// fromClient and fromServer see every byte of their direction, in
	// order, before it is passed on.
	fromClient(p []byte)
	fromServer(p []byte)
	// cut is asked once, when upstream ended and the client is there:
	// the bytes that tell the client its stream was cut (nil without a
	// cut), or found when a cut was found that cannot be told.
	cut(status *metav1.Status) (tell []byte, found bool)
	// status is the exit status the server sent, or nil.
	status() []byte
}

// Stream is the upstream side of an upgraded tunnel as ReverseProxy copies
// it, followed. Read runs on ReverseProxy's upstream-to-client goroutine
// only, Write on the client-to-upstream one, Close on either or another.
type Stream struct {
	io.ReadWriteCloser
	opts   Options
	follow follower // nil when the protocol is not followed

	fromClient, fromServer atomic.Int64
	// clientLeft: the gateway closed the stream: nothing is reported to
	// a client that is gone.
	clientLeft atomic.Bool
	// ended is upstream's end as the Read side judged it ("" until then).
	ended   atomic.Pointer[End]
	endOnce sync.Once

	// Read side.
	pending  []byte // the frames telling the client, until delivered
	injected bool
	readErr  error // upstream's end, returned after pending
}

// NewStream follows upstream as opts say.
func NewStream(upstream io.ReadWriteCloser, opts Options) *Stream {
	s := &Stream{ReadWriteCloser: upstream, opts: opts}
	switch opts.Protocol.kind {
	case spdyChannels:
		s.follow = newSPDYFollower(opts.Observer)
	case webSocketChannels:
		s.follow = newWebSocketFollower(opts.Observer)
	}
	return s
}

// Write follows the client's frames before they go upstream, so what they
// open is known before the server can answer on it.
func (s *Stream) Write(p []byte) (int, error) {
	if s.follow != nil {
		s.follow.fromClient(p)
	}
	n, err := s.ReadWriteCloser.Write(p)
	s.fromClient.Add(int64(n))
	return n, err
}

func (s *Stream) Read(p []byte) (int, error) {
	if s.injected {
		return s.drain(p)
	}
	n, err := s.ReadWriteCloser.Read(p)
	if n > 0 {
		s.fromServer.Add(int64(n))
		if s.follow != nil {
			s.follow.fromServer(p[:n])
		}
	}
	if err == nil || s.clientLeft.Load() || s.ended.Load() != nil {
		return n, err
	}
	end := s.judgeEnd()
	s.ended.Store(&end)
	if end != EndCompleted && s.opts.OnCut != nil {
		s.opts.OnCut(end)
	}
	if end != EndCutReported {
		return n, err
	}
	s.injected, s.readErr = true, err
	if n > 0 {
		return n, nil
	}
	return s.drain(p)
}

// judgeEnd tells how upstream ended the stream and, for a cut it can tell,
// prepares the frames that tell it.
func (s *Stream) judgeEnd() End {
	if s.follow == nil || !s.opts.Protocol.exitStatus {
		return EndCompleted
	}
	var st *metav1.Status
	if s.opts.Cut != nil {
		v := s.opts.Cut()
		st = &v
	}
	tell, found := s.follow.cut(st)
	switch {
	case tell != nil:
		s.pending = tell
		return EndCutReported
	case found:
		return EndCutUnreported
	}
	return EndCompleted
}

func (s *Stream) drain(p []byte) (int, error) {
	if len(s.pending) == 0 {
		return 0, s.readErr
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// Close closes upstream and reports the Summary.
func (s *Stream) Close() error {
	s.clientLeft.Store(true)
	err := s.ReadWriteCloser.Close()
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
	if e := s.ended.Load(); e != nil {
		sum.End = *e
	}
	if s.follow != nil {
		sum.Status = s.follow.status()
	}
	if sum.End == EndClientClosed && sum.Status != nil {
		// The exit status came: the client closing after it is the end.
		sum.End = EndCompleted
	}
	return sum
}

// CutStatus is the Status a client gets for a stream the member cut;
// where names it ("member cluster \"m1\"").
func CutStatus(where string) metav1.Status {
	return metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     http.StatusServiceUnavailable,
		Reason:   metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("the stream from %s was cut before the command's exit status arrived "+
			"(the pod's node, its kubelet or its container runtime stopped answering); the command's outcome is unknown", where),
	}
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
