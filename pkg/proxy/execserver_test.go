package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	streamprotocol "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
)

// execServer is a minimal kubelet-style exec endpoint speaking SPDY
// (v4.channel.k8s.io) and WebSocket (v5, v4, v1 channel protocols): it
// echoes stdin to stdout, reports resizes, and ends with a v4 Success status.
type execServer struct {
	t        testing.TB
	wantPath string
	hellos   *helloRecorder

	// rejectWebSocket answers WebSocket upgrades 400 with a Status, as an
	// upstream without WebSocket support does; clients fall back to SPDY.
	rejectWebSocket bool
	// cutAfter > 0 closes the raw connection after echoing that many bytes.
	cutAfter int
	// endedByGateway: the gateway ends the sessions (a shutdown), so an
	// echo may fail on its closed connection; it then just returns.
	endedByGateway bool

	resizes  chan remotecommand.TerminalSize
	stdinEOF chan string // the protocol, when stdin reached EOF
	cut      chan struct{}

	mu       sync.Mutex
	requests []string // "METHOD protocol-kind"
}

func newExecServer(t testing.TB, wantPath string, hellos *helloRecorder) *execServer {
	return &execServer{
		t: t, wantPath: wantPath, hellos: hellos,
		resizes:  make(chan remotecommand.TerminalSize, 16),
		stdinEOF: make(chan string, 4),
		cut:      make(chan struct{}, 4),
	}
}

func (s *execServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

func (s *execServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.EscapedPath() != s.wantPath {
		s.t.Errorf("upstream path %q, want the cluster proxy path %q", r.URL.EscapedPath(), s.wantPath)
	}
	if r.ProtoMajor != 1 {
		s.t.Errorf("upgrade arrived over HTTP/%d", r.ProtoMajor)
	}
	if s.hellos != nil {
		offered, ok := s.hellos.offered(r.RemoteAddr)
		if !ok || slices.Contains(offered, "h2") {
			s.t.Errorf("upgrade connection ALPN offered %q (recorded %v), want no h2", offered, ok)
		}
	}
	ws := wsstream.IsWebSocketRequest(r)
	s.mu.Lock()
	kind := "spdy"
	if ws {
		kind = "websocket"
	}
	s.requests = append(s.requests, r.Method+" "+kind)
	s.mu.Unlock()

	hw := &hijackRecorder{ResponseWriter: w}
	if ws {
		if s.rejectWebSocket {
			apiresponse.WriteStatus(w, apierrors.NewBadRequest("websocket upgrades are not supported here"))
			return
		}
		s.serveWebSocket(hw, r)
		return
	}
	s.serveSPDY(hw, r)
}

func (s *execServer) serveSPDY(w *hijackRecorder, r *http.Request) {
	protocol, err := httpstream.Handshake(r, w, []string{streamprotocol.StreamProtocolV4Name})
	if err != nil {
		return
	}
	type streamAndReply struct {
		httpstream.Stream
		replySent <-chan struct{}
	}
	streamCh := make(chan streamAndReply, 8)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(st httpstream.Stream, replySent <-chan struct{}) error {
		streamCh <- streamAndReply{st, replySent}
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	q := r.URL.Query()
	expected := 1
	for _, k := range []string{"stdin", "stdout", "stderr", "tty"} {
		if truthyParam(q.Get(k)) {
			expected++
		}
	}
	if truthyParam(q.Get("tty")) && truthyParam(q.Get("stderr")) {
		expected--
	}
	streams := map[string]io.ReadWriteCloser{}
	for len(streams) < expected {
		select {
		case st := <-streamCh:
			<-st.replySent
			streams[st.Headers().Get("streamType")] = st
		case <-conn.CloseChan():
			return
		}
	}
	s.run(protocol, w, streams["stdin"], streams["stdout"], streams["error"], streams["resize"])
}

func (s *execServer) serveWebSocket(w *hijackRecorder, r *http.Request) {
	channels := []wsstream.ChannelType{wsstream.ReadChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.WriteChannel, wsstream.ReadChannel}
	cfg := wsstream.ChannelProtocolConfig{Binary: true, Channels: channels}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		"v5.channel.k8s.io": cfg,
		"v4.channel.k8s.io": cfg,
		"channel.k8s.io":    cfg,
	})
	protocol, streams, err := conn.Open(w, r)
	if err != nil {
		s.t.Errorf("websocket open: %v", err)
		return
	}
	defer conn.Close()
	s.run(protocol, w, streams[0], streams[1], streams[3], streams[4])
}

func (s *execServer) run(protocol string, w *hijackRecorder, stdin io.Reader, stdout, errStream io.Writer, resize io.Reader) {
	if resize != nil {
		go func() {
			dec := json.NewDecoder(resize)
			for {
				var size remotecommand.TerminalSize
				if dec.Decode(&size) != nil {
					return
				}
				s.resizes <- size
			}
		}()
	}
	if stdin == nil || stdout == nil {
		s.t.Errorf("exec without stdin or stdout (protocol %q)", protocol)
		return
	}
	if s.cutAfter > 0 {
		if _, err := io.CopyN(stdout, stdin, int64(s.cutAfter)); err != nil {
			s.t.Errorf("echo before cut: %v", err)
		}
		if c := w.conn(); c != nil {
			c.Close()
		}
		s.cut <- struct{}{}
		return
	}
	if _, err := io.Copy(stdout, stdin); err != nil {
		if s.endedByGateway {
			return
		}
		s.t.Errorf("echo: %v", err)
	}
	s.stdinEOF <- protocol
	_, _ = io.WriteString(errStream, `{"metadata":{},"status":"Success"}`)
}

func truthyParam(v string) bool { return v == "true" || v == "1" }

// hijackRecorder keeps the raw connection an upgrader hijacks, so a test
// server can cut it.
type hijackRecorder struct {
	http.ResponseWriter
	mu  sync.Mutex
	raw net.Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.mu.Lock()
	h.raw = c
	h.mu.Unlock()
	return c, brw, err
}

func (h *hijackRecorder) conn() net.Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.raw
}
