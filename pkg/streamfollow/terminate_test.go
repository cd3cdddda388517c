package streamfollow

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/spdystream/spdy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

func shutdownStatus() metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Message: "the gateway is shutting down"}
}

// pipeStream is a Stream over one end of a pipe whose other end is the
// member, which writes server and then waits.
func pipeStream(t *testing.T, proto Protocol, server []byte, opts Options) (*Stream, net.Conn) {
	t.Helper()
	gw, member := net.Pipe()
	t.Cleanup(func() { gw.Close(); member.Close() })
	opts.Protocol = proto
	s := NewStream(gw, opts)
	go func() { _, _ = io.Copy(io.Discard, member) }()
	go func() { _, _ = member.Write(server) }()
	return s, member
}

// TestTerminateTellsTheClient: a stream the gateway ends (a shutdown past
// its grace period, a recording that fails closed) ends with the
// gateway's Status on the error channel, after the whole frames the
// member sent, and the Summary says the gateway ended it; it is not
// counted as a member's cut. A stream whose exit status had come ends
// completed.
func TestTerminateTellsTheClient(t *testing.T) {
	const errStream, stdout = 1, 3
	opened := spdyBytes(t, synStream(errStream, "error"), synStream(stdout, "stdout"))
	replied := spdyBytes(t, synReply(errStream), synReply(stdout), data(stdout, false, "hello"))
	withStatus := spdyBytes(t, synReply(errStream), synReply(stdout), data(stdout, false, "hello"), data(errStream, false, `{"status":"Success"}`))
	wsOut := wsMessage(1, "hello")
	cases := []struct {
		name     string
		proto    Protocol
		client   []byte
		server   []byte
		held     int // bytes of server at its end the client must not get
		wantEnd  End
		wantTell bool
	}{
		{name: "spdy", proto: spdyV4, client: opened, server: replied, wantEnd: EndGatewayShutdown, wantTell: true},
		{name: "spdy, a frame half sent", proto: spdyV4, client: opened, server: replied[:len(replied)-3], held: len(replied) - 3 - len(spdyBytes(t, synReply(errStream), synReply(stdout))), wantEnd: EndGatewayShutdown, wantTell: true},
		{name: "spdy, status came", proto: spdyV4, client: opened, server: withStatus, wantEnd: EndCompleted},
		{name: "websocket v5", proto: webSocketV5, server: wsOut, wantEnd: EndGatewayShutdown, wantTell: true},
		{name: "port-forward", proto: ProtocolOf(http.Header{"Upgrade": {"SPDY/3.1"}}, "portforward"), server: []byte("raw"), wantEnd: EndGatewayShutdown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cuts []End
			var sum Summary
			s, _ := pipeStream(t, tc.proto, tc.server, Options{
				Cut:   func(err error) metav1.Status { return CutStatus("member", "karmada-apiserver", err) },
				OnCut: func(e End) { cuts = append(cuts, e) },
				OnEnd: func(x Summary) { sum = x },
			})
			got := terminateAfter(t, s, tc.client, len(tc.server))
			delivered := tc.server[:len(tc.server)-tc.held]
			if !bytes.HasPrefix(got, delivered) {
				t.Fatalf("the client got %q, want %q first", got, delivered)
			}
			injected := got[len(delivered):]
			switch {
			case tc.wantTell && tc.proto == spdyV4:
				checkInjected(t, injected, errStream, "the gateway is shutting down")
			case tc.wantTell:
				checkWebSocketInjected(t, injected, "the gateway is shutting down")
			case len(injected) > 0:
				t.Errorf("injected %q, want nothing", injected)
			}
			if sum.End != tc.wantEnd {
				t.Errorf("summary says %s, want %s", sum.End, tc.wantEnd)
			}
			if len(cuts) > 0 {
				t.Errorf("the gateway's end was counted as a member's cut: %v", cuts)
			}
		})
	}
}

// terminateAfter writes client to s, reads s as the client does, and once
// the member sent n bytes has the gateway end the stream (a shutdown); it
// returns what the client got, and closes s.
func terminateAfter(t *testing.T, s *Stream, client []byte, n int) []byte {
	t.Helper()
	if _, err := s.Write(client); err != nil {
		t.Fatal(err)
	}
	readDone := make(chan []byte)
	go func() {
		got, _ := readAllSmall(s, 32<<10)
		readDone <- got
	}()
	waitFor(t, func() bool { return s.fromServer.Load() == int64(n) })
	s.Terminate(EndGatewayShutdown, shutdownStatus())
	got := <-readDone
	_ = s.Close()
	return got
}

// TestTerminateIgnoresTheAnswerToItsClose: what upstream sends after the
// gateway ended the stream is its answer to the gateway's close (over TLS
// the close_notify reaches the member before the socket closes, and a
// server whose stdin ends reports the command's Success); the client
// still gets the gateway's Failure, and the Summary says the gateway
// ended the stream, not that it completed. Seen in CI: a WebSocket
// session open past the shutdown grace period ended with exit 0.
func TestTerminateIgnoresTheAnswerToItsClose(t *testing.T) {
	const errStream, stdout = 1, 3
	success := `{"metadata":{},"status":"Success"}`
	cases := []struct {
		name           string
		proto          Protocol
		client         []byte
		before, answer []byte
	}{
		{
			name: "spdy", proto: spdyV4,
			client: spdyBytes(t, synStream(errStream, "error"), synStream(stdout, "stdout")),
			before: spdyBytes(t, synReply(errStream), synReply(stdout), data(stdout, false, "hello")),
			answer: spdyBytes(t, data(errStream, true, success)),
		},
		{
			name: "websocket v5", proto: webSocketV5,
			before: wsMessage(1, "hello"),
			answer: append(wsMessage(3, success), wsFrame(true, wsClose, []byte{0x03, 0xe8})...),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := &answeringUpstream{reads: make(chan []byte, 2), answer: tc.answer}
			up.reads <- tc.before
			var sum Summary
			s := NewStream(up, Options{Protocol: tc.proto, OnEnd: func(x Summary) { sum = x }})
			got := terminateAfter(t, s, tc.client, len(tc.before))
			if !bytes.HasPrefix(got, tc.before) {
				t.Fatalf("the client got %q, want %q first", got, tc.before)
			}
			if tc.proto == spdyV4 {
				checkInjected(t, got[len(tc.before):], errStream, "the gateway is shutting down")
			} else {
				checkWebSocketInjected(t, got[len(tc.before):], "the gateway is shutting down")
			}
			if sum.End != EndGatewayShutdown || sum.Status != nil {
				t.Errorf("summary says %s with status %q, want %s and none", sum.End, sum.Status, EndGatewayShutdown)
			}
		})
	}
}

// answeringUpstream returns its reads, one per Read, and on Close the
// answer a member gives to the close, then EOF.
type answeringUpstream struct {
	reads  chan []byte
	answer []byte
	once   sync.Once
}

func (u *answeringUpstream) Read(p []byte) (int, error) {
	b, ok := <-u.reads
	if !ok {
		return 0, io.EOF
	}
	return copy(p, b), nil
}

func (u *answeringUpstream) Write(p []byte) (int, error) { return len(p), nil }

func (u *answeringUpstream) Close() error {
	u.once.Do(func() {
		u.reads <- u.answer
		close(u.reads)
	})
	return nil
}

// TestTerminateThenCancelled: a shutdown terminates its streams, then
// cancels the requests, and ReverseProxy closes each stream on its
// context's end, maybe before the read side saw the termination: the
// client is still told.
func TestTerminateThenCancelled(t *testing.T) {
	var sum Summary
	s, _ := pipeStream(t, webSocketV5, wsMessage(1, "hello"), Options{OnEnd: func(x Summary) { sum = x }})
	readDone := make(chan []byte)
	go func() {
		got, _ := readAllSmall(s, 1024)
		readDone <- got
	}()
	waitFor(t, func() bool { return s.fromServer.Load() > 0 })
	s.Terminate(EndGatewayShutdown, shutdownStatus())
	_ = s.Close()
	got := <-readDone
	checkWebSocketInjected(t, got[len(wsMessage(1, "hello")):], "the gateway is shutting down")
	if sum.End != EndGatewayShutdown {
		t.Fatalf("summary says %s", sum.End)
	}
}

// TestTerminateOnceTheClientLeft: the Summary of a stream the gateway
// ended while nothing read it (ReverseProxy closed it) still says so.
func TestTerminateOnceTheClientLeft(t *testing.T) {
	var sum Summary
	s, _ := pipeStream(t, webSocketV5, nil, Options{OnEnd: func(x Summary) { sum = x }})
	s.Terminate(EndRecordingFailed, shutdownStatus())
	s.Terminate(EndGatewayShutdown, shutdownStatus()) // only the first counts
	_ = s.Close()
	if sum.End != EndRecordingFailed {
		t.Fatalf("summary says %s, want %s", sum.End, EndRecordingFailed)
	}
}

// TestFailedWriteWaitsForTheReadSide: when the client's write fails because
// upstream ended, the write returns only once the read side handed the
// client the Failure (ReverseProxy closes the client's connection as soon
// as either copy returns), or after writeFailureWait.
func TestFailedWriteWaitsForTheReadSide(t *testing.T) {
	gw, member := net.Pipe()
	defer member.Close()
	s := NewStream(gw, Options{Protocol: webSocketV5, Cut: func(err error) metav1.Status { return CutStatus("member", "karmada-apiserver", err) }})
	_ = member.Close() // the member is gone: writes and reads fail
	wrote := make(chan time.Time, 1)
	go func() {
		// A whole masked frame: a header not yet whole is held.
		_, err := s.Write([]byte{0x82, 0x81, 1, 2, 3, 4, 5})
		if err == nil {
			t.Error("write to a closed upstream succeeded")
		}
		wrote <- time.Now()
	}()
	select {
	case <-wrote:
		t.Fatal("the failed write returned before the read side told the client")
	case <-time.After(100 * time.Millisecond):
	}
	got, err := readAllSmall(s, 1024)
	readAt := time.Now()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("read ended with %v", err)
	}
	checkWebSocketInjected(t, got, "member")
	if w := <-wrote; w.Before(readAt.Add(-time.Millisecond)) {
		t.Fatalf("the write returned %s before the read side ended", readAt.Sub(w))
	}
}

// TestHeldFramesComeWhole: frames split across many reads of the member's
// side are passed on byte for byte, and no byte of a frame reaches the
// client before the member sent the whole frame, but for a frame longer
// than maxHeldFrame, which is passed on as it comes.
func TestHeldFramesComeWhole(t *testing.T) {
	const errStream, stdout = 1, 3
	frames := []spdy.Frame{synReply(errStream), synReply(stdout)}
	for _, n := range []int{1, 100, 32 << 10, maxHeldFrame - frameHeaderLen, maxHeldFrame, 5} {
		frames = append(frames, data(stdout, false, strings.Repeat("y", n)))
	}
	server := spdyBytes(t, frames...)
	longStart := len(server) - (frameHeaderLen + 5) - (frameHeaderLen + maxHeldFrame)
	longEnd := longStart + frameHeaderLen + maxHeldFrame
	for _, chunk := range []int{1, 4093, 70000} {
		up := &scriptedUpstream{chunks: chunked(server, chunk), end: io.EOF}
		s := NewStream(&countingUpstream{scriptedUpstream: up}, Options{Protocol: spdyV4})
		_, _ = s.Write(spdyBytes(t, synStream(errStream, "error"), synStream(stdout, "stdout")))
		var got []byte
		buf := make([]byte, 32<<10)
		var early bool
		for {
			n, err := s.Read(buf)
			got = append(got, buf[:n]...)
			sent := s.ReadWriteCloser.(*countingUpstream).n
			if whole := wholeFrames(server[:sent]); len(got) > whole {
				if len(got) <= longStart || len(got) > longEnd {
					t.Fatalf("chunks of %d: the client got %d bytes when the member had sent %d, whole frames up to %d", chunk, len(got), sent, whole)
				}
				early = true
			}
			if err != nil {
				break
			}
		}
		if !bytes.Equal(got, server) {
			t.Fatalf("chunks of %d: frames changed on their way through", chunk)
		}
		if !early && chunk < maxHeldFrame {
			t.Fatalf("chunks of %d: the frame too long to hold was held whole", chunk)
		}
	}
}

// countingUpstream counts the bytes the member sent so far.
type countingUpstream struct {
	*scriptedUpstream
	n int
}

func (c *countingUpstream) Read(p []byte) (int, error) {
	n, err := c.scriptedUpstream.Read(p)
	c.n += n
	return n, err
}

// wholeFrames is how many bytes of b are whole SPDY frames.
func wholeFrames(b []byte) int {
	whole := 0
	for len(b)-whole >= frameHeaderLen {
		n := frameHeaderLen + int(binary.BigEndian.Uint32(b[whole+4:whole+8])&0xffffff)
		if whole+n > len(b) {
			break
		}
		whole += n
	}
	return whole
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatal("condition not met in 10s")
	}
}

// TestCutStatusSaysWhatTheGatewaySaw: the Failure names the member and the
// connection the gateway read the stream on, and how that connection ended,
// and guesses no cause (a kubelet, a proxy, the cluster proxy all end it
// the same way); no address from a net.OpError reaches the client.
func TestCutStatusSaysWhatTheGatewaySaw(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 443}, Err: syscall.ECONNRESET}
	timeout := &net.OpError{Op: "read", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 443}, Err: os.ErrDeadlineExceeded}
	cases := []struct {
		err  error
		want string
	}{
		{io.EOF, "was closed"},
		{io.ErrUnexpectedEOF, "failed"},
		{reset, "was reset"},
		{timeout, "timed out"},
		{net.ErrClosed, "was closed by the gateway"},
	}
	for _, tc := range cases {
		st := CutStatus(`member cluster "m1"`, "karmada-apiserver", tc.err)
		want := `the stream from member cluster "m1" ended before the command's exit status arrived: the gateway's connection to karmada-apiserver that carried it ` + tc.want
		if !strings.HasPrefix(st.Message, want) || strings.Contains(st.Message, "10.9.8.7") || strings.Contains(st.Message, "kubelet") {
			t.Errorf("%v: %q, want it to start with %q", tc.err, st.Message, want)
		}
	}
}

// eofOnClose is an upstream whose pending read ends with io.EOF when it is
// closed, as a TLS connection's does when the peer's close_notify answers
// the gateway's own.
type eofOnClose struct {
	closed chan struct{}
	once   sync.Once
}

func (u *eofOnClose) Read([]byte) (int, error)    { <-u.closed; return 0, io.EOF }
func (u *eofOnClose) Write(p []byte) (int, error) { return len(p), nil }
func (u *eofOnClose) Close() error                { u.once.Do(func() { close(u.closed) }); return nil }

// TestTerminatedStreamNeverEndsClean: a stream the gateway ended reads
// as ended by the gateway even when upstream's side answers with a clean
// EOF: on io.EOF ReverseProxy would wait for the client to close its side
// too, and a gateway shutting down would exit before the audit event.
func TestTerminatedStreamNeverEndsClean(t *testing.T) {
	for _, proto := range []Protocol{webSocketV5, spdyV4} {
		t.Run(proto.String(), func(t *testing.T) {
			s := NewStream(&eofOnClose{closed: make(chan struct{})}, Options{Protocol: proto})
			defer s.Close()
			done := make(chan error, 1)
			go func() { _, err := io.ReadAll(s); done <- err }()
			s.Terminate(EndGatewayShutdown, shutdownStatus())
			if err := <-done; !errors.Is(err, errTerminated) {
				t.Fatalf("the read ended with %v, want %v", err, errTerminated)
			}
		})
	}
}

// closedOnWrite is an upstream the gateway closed: a write fails, and
// says so on writing; a read ends once it is closed.
type closedOnWrite struct {
	eofOnClose
	writing chan struct{}
}

func (u *closedOnWrite) Write([]byte) (int, error) {
	select {
	case u.writing <- struct{}{}:
	default:
	}
	return 0, io.ErrClosedPipe
}

// TestClientWriteAfterTerminateWaitsForTheFailure: Shutdown ends the
// streams and at once cancels their requests, which closes each stream.
// A client's bytes arriving then fail to reach upstream; that write must
// not return before the read side handed the client the gateway's
// Failure, or ReverseProxy closes the client's connection first.
func TestClientWriteAfterTerminateWaitsForTheFailure(t *testing.T) {
	up := &closedOnWrite{eofOnClose: eofOnClose{closed: make(chan struct{})}, writing: make(chan struct{}, 1)}
	s := NewStream(up, Options{Protocol: webSocketV5})
	s.Terminate(EndGatewayShutdown, shutdownStatus())
	_ = s.Close() // the request's cancellation
	// Whether the read side had handed out its end when the write
	// returned: readDone closes as the last Read returns.
	wrote := make(chan bool, 1)
	go func() {
		_, err := s.Write(clientFrame(wsBinary, []byte("\x00typed")))
		if err == nil {
			t.Error("a write to a closed upstream succeeded")
		}
		select {
		case <-s.readDone:
			wrote <- true
		default:
			wrote <- false
		}
	}()
	<-up.writing
	got, err := io.ReadAll(s)
	if !errors.Is(err, errTerminated) || !bytes.Contains(got, []byte("shutting down")) {
		t.Fatalf("the client read %q, %v; want the gateway's Failure", got, err)
	}
	if !<-wrote {
		t.Error("the client's write failed before the read side handed out the Failure")
	}
}
