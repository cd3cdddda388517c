package streamfollow

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// webSocketV5 is WebSocket exec with v5.channel.k8s.io.
var webSocketV5 = ProtocolOf(http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}, "exec")

// wsFrame is a server's (unmasked) WebSocket frame.
func wsFrame(fin bool, opcode byte, payload []byte) []byte {
	return append(appendWebSocketHeader(nil, fin, opcode, len(payload)), payload...)
}

// wsMessage is a whole binary message on channel.
func wsMessage(channel byte, data string) []byte {
	return wsFrame(true, wsBinary, append([]byte{channel}, data...))
}

func TestWebSocketStreamCut(t *testing.T) {
	status := `{"metadata":{},"status":"Success"}`
	stdout := wsMessage(1, "hello")
	cases := []struct {
		name       string
		server     []byte
		clientLeft bool
		wantInject bool
		wantEnd    End
		// delivered is how much of server the client gets before what is
		// injected (0: all of it, -1: none); padding, the zeros that
		// complete a frame too long to hold; endMessage, an empty final
		// frame ending the message the client has the start of.
		delivered, padding int
		endMessage         bool
	}{
		{name: "cut before a status", server: stdout, wantInject: true, wantEnd: EndCutReported},
		{name: "cut after a long message", server: wsMessage(1, strings.Repeat("x", 300)), wantInject: true, wantEnd: EndCutReported},
		{name: "cut after a ping inside a fragmented message", wantInject: true, wantEnd: EndCutReported,
			server: slices.Concat(wsFrame(false, wsBinary, []byte{1, 'a'}), wsFrame(true, 0x9, nil), wsFrame(true, wsContinuation, []byte("b")))},
		{name: "cut with nothing sent", server: nil, wantInject: true, wantEnd: EndCutReported},
		{name: "status came", server: slices.Concat(stdout, wsMessage(byte(Error), status)), wantEnd: EndCompleted},
		{name: "status came in fragments", wantEnd: EndCompleted,
			server: slices.Concat(wsFrame(false, wsBinary, []byte{byte(Error)}), wsFrame(true, wsContinuation, []byte(status)))},
		{name: "server closed", server: slices.Concat(stdout, wsFrame(true, wsClose, []byte{0x03, 0xe8})), wantEnd: EndCompleted},
		// The frame's start is held back: the client gets whole frames,
		// then the Failure.
		{name: "cut inside a frame", server: stdout[:len(stdout)-2], delivered: -1, wantInject: true, wantEnd: EndCutReported},
		{name: "cut inside the status", server: slices.Concat(stdout, wsMessage(byte(Error), status)[:10]), delivered: len(stdout), wantInject: true, wantEnd: EndCutReported},
		// An empty final frame ends the message the client has the start of.
		{name: "cut inside a message", server: wsFrame(false, wsBinary, []byte{1, 'a'}), endMessage: true, wantInject: true, wantEnd: EndCutReported},
		{name: "cut inside a message's second frame", server: slices.Concat(wsFrame(false, wsBinary, []byte{1, 'a'}), wsFrame(true, wsContinuation, []byte("bcd"))[:3]),
			delivered: 4, endMessage: true, wantInject: true, wantEnd: EndCutReported},
		// Too long to hold: passed on as it came, then completed.
		{name: "cut inside a frame too long to hold", server: wsMessage(1, strings.Repeat("x", maxHeldFrame))[:40000], padding: maxHeldFrame + 1 + 10 - 40000,
			wantInject: true, wantEnd: EndCutReported},
		{name: "masked server frame", server: []byte{0x82, 0x81, 1, 2, 3, 4, 5}, wantEnd: EndCompleted},
		// Not WebSocket as RFC 6455 has it, without an extension: relayed
		// as it came, never held.
		{name: "reserved bits set", server: []byte{0x62, 0x79, 'x'}, wantEnd: EndCompleted},
		{name: "control frame not final", server: []byte{0x09, 0x05, 'p'}, wantEnd: EndCompleted},
		{name: "control frame too long", server: []byte{0x89, 126, 0, 200, 'p'}, wantEnd: EndCompleted},
		{name: "client went away", server: stdout, clientLeft: true, wantEnd: EndClientClosed},
	}
	for _, tc := range cases {
		for _, size := range []int{0, 1, 5} {
			t.Run(tc.name+"/chunk="+strconv.Itoa(size), func(t *testing.T) {
				up := &scriptedUpstream{chunks: chunked(tc.server, size), end: io.EOF}
				var cuts []End
				var sum Summary
				w := NewStream(up, Options{
					Protocol: webSocketV5,
					Cut:      func(err error) metav1.Status { return CutStatus(`member cluster "m1"`, "karmada-apiserver", err) },
					OnCut:    func(e End) { cuts = append(cuts, e) },
					OnEnd:    func(s Summary) { sum = s },
				})
				if tc.clientLeft {
					_ = w.Close()
				}
				got, err := readAllSmall(w, max(size, 7))
				if err != io.EOF {
					t.Errorf("read ended with %v, want upstream's EOF", err)
				}
				delivered := tc.server
				switch {
				case tc.delivered < 0:
					delivered = nil
				case tc.delivered > 0:
					delivered = tc.server[:tc.delivered]
				}
				if !bytes.HasPrefix(got, delivered) {
					t.Fatal("server bytes changed on their way to the client")
				}
				injected := got[len(delivered):]
				if tc.padding > 0 {
					if len(injected) < tc.padding || !bytes.Equal(injected[:tc.padding], make([]byte, tc.padding)) {
						t.Fatalf("the cut frame was not completed with %d zeros", tc.padding)
					}
					injected = injected[tc.padding:]
				}
				if end := []byte{0x80 | wsContinuation, 0}; tc.endMessage {
					if !bytes.HasPrefix(injected, end) {
						t.Fatalf("injected %q, want an empty final frame first", injected)
					}
					injected = injected[len(end):]
				}
				if tc.wantInject {
					checkWebSocketInjected(t, injected, `member cluster "m1"`)
					checkGorillaReadsFailure(t, got)
				} else if len(injected) > 0 {
					t.Errorf("injected %q, want nothing", injected)
				}
				cut := tc.wantEnd == EndCutReported || tc.wantEnd == EndCutUnreported
				if cut && !slices.Equal(cuts, []End{tc.wantEnd}) || !cut && len(cuts) > 0 {
					t.Errorf("cuts %q, want %q", cuts, tc.wantEnd)
				}
				_ = w.Close()
				if want := len(tc.server); sum.End != tc.wantEnd || !tc.clientLeft && sum.FromServer != int64(want) {
					t.Errorf("summary %+v, want %s after %d bytes", sum, tc.wantEnd, len(tc.server))
				}
			})
		}
	}
}

// checkGorillaReadsFailure reads b as gorilla/websocket's client does:
// whole messages, the last one the Failure on the error channel, then a
// normal closure.
func checkGorillaReadsFailure(t *testing.T, b []byte) {
	t.Helper()
	c := gorillaClient(t, b)
	var last []byte
	for {
		_, msg, err := c.ReadMessage()
		if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
			break
		}
		if err != nil {
			t.Fatalf("the client's bytes do not read as whole messages: %v", err)
		}
		last = msg
	}
	if len(last) == 0 || last[0] != byte(Error) || !bytes.Contains(last, []byte(metav1.StatusFailure)) {
		t.Fatalf("last message %q, want the Failure on the error channel", last)
	}
}

// checkWebSocketInjected reads b as a message on the error channel with a
// Failure naming where, then a normal close frame.
func checkWebSocketInjected(t *testing.T, b []byte, where string) {
	t.Helper()
	if len(b) < 4 || b[0] != 0x80|wsBinary {
		t.Fatalf("injected %q, want a final binary frame", b)
	}
	n, off := int(b[1]), 2
	if n == 126 {
		n, off = int(binary.BigEndian.Uint16(b[2:4])), 4
	}
	if len(b) < off+n || b[off] != byte(Error) {
		t.Fatalf("injected %q, want a message on channel 3", b)
	}
	var st metav1.Status
	if err := json.Unmarshal(b[off+1:off+n], &st); err != nil {
		t.Fatal(err)
	}
	if st.Status != metav1.StatusFailure || !strings.Contains(st.Message, where) {
		t.Errorf("injected Status %+v, want a Failure naming %s", st, where)
	}
	if rest := b[off+n:]; !bytes.Equal(rest, []byte{0x80 | wsClose, 2, 0x03, 0xe8}) {
		t.Errorf("after the status: %q, want a close frame with 1000", rest)
	}
}

// TestWebSocketCutFramesAgainstGorilla: gorilla/websocket, as a client,
// reads the cut frames as one binary message on the error channel carrying
// the Failure, then a normal closure, at every length encoding.
func TestWebSocketCutFramesAgainstGorilla(t *testing.T) {
	for _, n := range []int{10, 200, 70000} {
		b := webSocketCutFrames(metav1.Status{Status: metav1.StatusFailure, Message: strings.Repeat("m", n)})
		c := gorillaClient(t, b)
		typ, msg, err := c.ReadMessage()
		if err != nil || typ != websocket.BinaryMessage || msg[0] != byte(Error) {
			t.Fatalf("message of %d: %v %q %v", n, typ, msg[:min(len(msg), 10)], err)
		}
		var st metav1.Status
		if err := json.Unmarshal(msg[1:], &st); err != nil || len(st.Message) != n {
			t.Fatalf("message of %d: status %v", n, err)
		}
		if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
			t.Fatalf("message of %d: then %v, want a normal closure", n, err)
		}
		f := newWebSocketFollower(nil)
		f.fromServer(b)
		if !f.statusSeen || !f.server.closed || f.server.hdrN != 0 || f.server.left != 0 || f.server.inMessage || f.server.gaveUp {
			t.Errorf("message of %d bytes: followed as %+v, want one status message and a close", n, f.server)
		}
	}
}

// TestWebSocketChannels: what gorilla/websocket writes as a client (masked
// stdin and resize messages) and as a server (stdout, stderr, the status;
// fragmented by a small write buffer, pings between) is decoded per
// channel, split anywhere.
func TestWebSocketChannels(t *testing.T) {
	status := `{"metadata":{},"status":"Success"}`
	client := gorillaWrites(t, false, func(c *websocket.Conn) {
		writeChannel(t, c, Resize, `{"Width":80,"Height":24}`)
		writeChannel(t, c, Stdin, "ls -l\n")
		if err := c.WriteControl(websocket.PingMessage, []byte("p"), time.Time{}); err != nil {
			t.Fatal(err)
		}
		writeChannel(t, c, Stdin, strings.Repeat("s", 5000))
		writeChannel(t, c, Resize, `{"Width":120,"Height":50}`)
		writeChannel(t, c, wsCloseChannel, string([]byte{byte(Stdin)}))
	})
	server := gorillaWrites(t, true, func(c *websocket.Conn) {
		writeChannel(t, c, Stdout, strings.Repeat("o", 3000))
		if err := c.WriteControl(websocket.PongMessage, nil, time.Time{}); err != nil {
			t.Fatal(err)
		}
		writeChannel(t, c, Stderr, "err\n")
		writeChannel(t, c, Error, status)
		if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Time{}); err != nil {
			t.Fatal(err)
		}
	})
	for _, size := range []int{0, 1, 7, 100} {
		t.Run("chunk="+strconv.Itoa(size), func(t *testing.T) {
			var rec recorder
			var sum Summary
			w := NewStream(&scriptedUpstream{chunks: chunked(server, size), end: io.EOF}, Options{Protocol: webSocketV5, Observer: &rec, OnEnd: func(s Summary) { sum = s }})
			for _, c := range chunked(client, size) {
				if _, err := w.Write(c); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := readAllSmall(w, max(size, 7)); err != io.EOF {
				t.Fatal(err)
			}
			_ = w.Close()
			if got := string(rec.data[Stdin]); got != "ls -l\n"+strings.Repeat("s", 5000) {
				t.Errorf("stdin %d bytes %q...", len(got), got[:min(len(got), 10)])
			}
			if got := string(rec.data[Stdout]); got != strings.Repeat("o", 3000) {
				t.Errorf("stdout %d bytes", len(got))
			}
			if got := string(rec.data[Stderr]); got != "err\n" {
				t.Errorf("stderr %q", got)
			}
			if want := []TerminalSize{{80, 24}, {120, 50}}; !slices.Equal(rec.resizes, want) {
				t.Errorf("resizes %v, want %v", rec.resizes, want)
			}
			if string(sum.Status) != status || sum.End != EndCompleted {
				t.Errorf("summary %+v", sum)
			}
		})
	}
}

func writeChannel(t *testing.T, c *websocket.Conn, ch Channel, data string) {
	t.Helper()
	w, err := c.NextWriter(websocket.BinaryMessage)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(append([]byte{byte(ch)}, data...)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// FuzzWebSocketReader is differential: the data messages gorilla/websocket
// reads from any bytes, as a client (unmasked frames) and as a server
// (masked frames), are the ones wsReader hands on, channel byte first, as
// far as gorilla reads any, however the bytes are split.
func FuzzWebSocketReader(f *testing.F) {
	f.Add(slices.Concat(wsMessage(1, "hello"), wsFrame(true, 0x9, []byte("p")), wsMessage(3, "{}")), 3, false)
	f.Add(slices.Concat(wsFrame(false, wsBinary, []byte{1, 'a'}), wsFrame(true, 0x9, nil), wsFrame(true, wsContinuation, []byte("bc"))), 1, false)
	f.Add(wsMessage(2, strings.Repeat("z", 300)), 100, false)
	f.Add(gorillaWrites(f, false, func(c *websocket.Conn) {
		_ = c.WriteMessage(websocket.BinaryMessage, []byte("\x00stdin"))
		_ = c.WriteMessage(websocket.BinaryMessage, []byte("\x04{\"Width\":1,\"Height\":2}"))
	}), 5, true)
	f.Fuzz(func(t *testing.T, b []byte, split int, masked bool) {
		if split <= 0 || split > len(b) {
			split = len(b) / 2
		}
		var ours [][]byte
		var cur []byte
		r := wsReader{
			masked:     masked,
			payload:    func(ch byte, p []byte) { cur = append(cur, p...) },
			messageEnd: func(ch byte) { ours = append(ours, append([]byte{ch}, cur...)); cur = nil },
		}
		r.read(b[:split])
		r.read(b[split:])

		var c *websocket.Conn
		if masked {
			c = gorillaServer(t, b)
		} else {
			c = gorillaClient(t, b)
		}
		for i := 0; ; {
			_, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if len(msg) == 0 {
				continue // no channel byte: nothing for wsReader to hand on
			}
			if i >= len(ours) {
				t.Fatalf("gorilla read message %d (%q), wsReader %d messages", i, msg, len(ours))
			}
			if !bytes.Equal(ours[i], msg) {
				t.Fatalf("message %d: wsReader %q, gorilla %q", i, ours[i], msg)
			}
			i++
		}
	})
}

// fakeConn is a net.Conn reading in and keeping what is written.
type fakeConn struct {
	in      io.Reader
	written bytes.Buffer
}

func (c *fakeConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return c.written.Write(p) }
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }
func (c *fakeConn) hijack() (net.Conn, *bufio.ReadWriter) {
	return c, bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
}

// handshakeReader answers a gorilla client's handshake, once it was
// written to conn, then reads frames.
type handshakeReader struct {
	conn   *fakeConn
	frames []byte
	r      io.Reader
}

func (h *handshakeReader) Read(p []byte) (int, error) {
	if h.r == nil {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(h.conn.written.Bytes())))
		if err != nil {
			return 0, err
		}
		sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		res := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n"
		h.r = io.MultiReader(strings.NewReader(res), bytes.NewReader(h.frames))
		h.conn.written.Reset()
	}
	return h.r.Read(p)
}

// gorillaClient is a gorilla/websocket client connection reading frames
// (a server's) after its handshake; what it writes is in its fakeConn.
func gorillaClient(t testing.TB, frames []byte) *websocket.Conn {
	c, _ := gorillaClientConn(t, frames)
	return c
}

func gorillaClientConn(t testing.TB, frames []byte) (*websocket.Conn, *fakeConn) {
	t.Helper()
	conn := &fakeConn{}
	conn.in = &handshakeReader{conn: conn, frames: frames}
	d := websocket.Dialer{
		NetDial:         func(string, string) (net.Conn, error) { return conn, nil },
		ReadBufferSize:  64,
		WriteBufferSize: 64, // fragments longer messages
	}
	c, _, err := d.Dial("ws://member.test/exec", nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, conn
}

// hijackable is the ResponseWriter a gorilla Upgrader hijacks conn from.
type hijackable struct {
	http.ResponseWriter
	conn *fakeConn
}

func (h hijackable) Header() http.Header { return http.Header{} }
func (h hijackable) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw := h.conn.hijack()
	return c, rw, nil
}

// gorillaServer is a gorilla/websocket server connection reading frames (a
// client's) after its handshake; what it writes is in its fakeConn.
func gorillaServer(t testing.TB, frames []byte) *websocket.Conn {
	c, _ := gorillaServerConn(t, frames)
	return c
}

func gorillaServerConn(t testing.TB, frames []byte) (*websocket.Conn, *fakeConn) {
	t.Helper()
	conn := &fakeConn{in: bytes.NewReader(frames)}
	req, _ := http.NewRequest(http.MethodGet, "http://gateway.test/exec", nil)
	req.Header = http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	u := websocket.Upgrader{ReadBufferSize: 64, WriteBufferSize: 64}
	c, err := u.Upgrade(hijackable{conn: conn}, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.written.Reset()
	return c, conn
}

// gorillaWrites is what write has gorilla/websocket write, as a server or
// a client, after the handshake.
func gorillaWrites(t testing.TB, server bool, write func(*websocket.Conn)) []byte {
	t.Helper()
	var c *websocket.Conn
	var conn *fakeConn
	if server {
		c, conn = gorillaServerConn(t, nil)
	} else {
		c, conn = gorillaClientConn(t, nil)
	}
	write(c)
	return slices.Clone(conn.written.Bytes())
}
