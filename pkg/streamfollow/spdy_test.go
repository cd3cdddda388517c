package streamfollow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/moby/spdystream/spdy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// spdyBytes is what a spdystream Framer writes for frames, in order: one
// Framer per direction, as on a connection, so header blocks share their
// zlib context as the real ones do.
func spdyBytes(t testing.TB, frames ...spdy.Frame) []byte {
	t.Helper()
	var b bytes.Buffer
	f, err := spdy.NewFramer(&b, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range frames {
		if err := f.WriteFrame(fr); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func synStream(id spdy.StreamId, streamType string) *spdy.SynStreamFrame {
	h := http.Header{}
	h.Set("streamType", streamType)
	return &spdy.SynStreamFrame{StreamId: id, Headers: h}
}

func synReply(id spdy.StreamId) *spdy.SynReplyFrame {
	return &spdy.SynReplyFrame{StreamId: id, Headers: http.Header{}}
}

func data(id spdy.StreamId, fin bool, b string) *spdy.DataFrame {
	f := &spdy.DataFrame{StreamId: id, Data: []byte(b)}
	if fin {
		f.Flags = spdy.DataFlagFin
	}
	return f
}

// scriptedUpstream is the upstream side of a tunnel: reads return its
// chunks, then end.
type scriptedUpstream struct {
	chunks  [][]byte
	end     error
	written bytes.Buffer
	closed  bool
}

func (u *scriptedUpstream) Read(p []byte) (int, error) {
	if len(u.chunks) == 0 {
		return 0, u.end
	}
	n := copy(p, u.chunks[0])
	if u.chunks[0] = u.chunks[0][n:]; len(u.chunks[0]) == 0 {
		u.chunks = u.chunks[1:]
	}
	return n, nil
}

func (u *scriptedUpstream) Write(p []byte) (int, error) { return u.written.Write(p) }
func (u *scriptedUpstream) Close() error                { u.closed = true; return nil }

// chunked splits b into pieces of size n (all of b when n is 0).
func chunked(b []byte, n int) [][]byte {
	if n == 0 {
		return [][]byte{slices.Clone(b)}
	}
	var out [][]byte
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, slices.Clone(b[:k]))
		b = b[k:]
	}
	return out
}

// spdyV4 is SPDY with remotecommand v4, whose server always ends with an
// exit status.
var spdyV4 = ProtocolOf(http.Header{"Upgrade": {"SPDY/3.1"}, "X-Stream-Protocol-Version": {"v4.channel.k8s.io"}}, "exec")

func TestSPDYStreamCut(t *testing.T) {
	const errStream, stdout = 1, 3
	opened := []spdy.Frame{synStream(errStream, "error"), synStream(stdout, "stdout")}
	replied := []spdy.Frame{synReply(errStream), synReply(stdout), data(stdout, false, "hello")}
	cases := []struct {
		name   string
		client []spdy.Frame
		server []byte
		// clientLeft: the proxy closed the upstream side before it ended.
		clientLeft bool
		end        error
		wantInject bool
		wantEnd    End
		rawClient  []byte // sent after client's frames
		// delivered is how much of server the client gets before what is
		// injected (0: all of it); padding, the zeros that complete a
		// frame too long to hold.
		delivered, padding int
	}{
		{name: "cut before a status", client: opened, server: spdyBytes(t, replied...), end: io.EOF, wantInject: true, wantEnd: EndCutReported},
		{name: "cut by a reset", client: opened, server: spdyBytes(t, replied...), end: syscall.ECONNRESET, wantInject: true, wantEnd: EndCutReported},
		{
			name: "status came", client: opened, end: io.EOF, wantEnd: EndCompleted,
			server: spdyBytes(t, append(slices.Clone(replied), data(errStream, false, `{"status":"Success"}`), data(errStream, true, ""))...),
		},
		{
			name: "status came, no FIN", client: opened, end: io.EOF, wantEnd: EndCompleted,
			server: spdyBytes(t, append(slices.Clone(replied), data(errStream, false, `{"status":"Failure"}`))...),
		},
		{
			// Nothing can follow a FIN on the stream; not a kubelet's end.
			name: "error stream finished empty", client: opened, end: io.EOF, wantEnd: EndCompleted,
			server: spdyBytes(t, append(slices.Clone(replied), data(errStream, true, ""))...),
		},
		{
			// The frame's start is held back: the client gets whole frames,
			// then the Failure.
			name: "cut inside a frame", client: opened, end: io.EOF, wantInject: true, wantEnd: EndCutReported,
			server:    func() []byte { b := spdyBytes(t, replied...); return b[:len(b)-2] }(),
			delivered: len(spdyBytes(t, synReply(errStream), synReply(stdout))),
		},
		{
			// A status frame cut short never reached the client: a cut.
			name: "cut inside the status frame", client: opened, end: io.EOF, wantInject: true, wantEnd: EndCutReported,
			server: func() []byte {
				b := spdyBytes(t, append(slices.Clone(replied), data(errStream, false, `{"status":"Success"}`))...)
				return b[:len(b)-3]
			}(),
			delivered: len(spdyBytes(t, replied...)),
		},
		{
			// Too long to hold: passed on as it came, then completed.
			name: "cut inside a frame too long to hold", client: opened, end: io.EOF, wantInject: true, wantEnd: EndCutReported,
			server: func() []byte {
				b := spdyBytes(t, append(slices.Clone(replied), data(stdout, false, strings.Repeat("x", maxHeldFrame)))...)
				return b[:len(b)-1000]
			}(),
			padding: 1000,
		},
		{name: "client went away", client: opened, server: spdyBytes(t, replied...), end: io.EOF, clientLeft: true, wantEnd: EndClientClosed},
		{
			name: "client sent GOAWAY", end: io.EOF, server: spdyBytes(t, replied...), wantEnd: EndCompleted,
			client: append(slices.Clone(opened), &spdy.GoAwayFrame{LastGoodStreamId: stdout}),
		},
		{
			name: "client reset the error stream", end: io.EOF, server: spdyBytes(t, replied...), wantEnd: EndCompleted,
			client: append(slices.Clone(opened), &spdy.RstStreamFrame{StreamId: errStream, Status: spdy.Cancel}),
		},
		{
			name: "client reset another stream", end: io.EOF, server: spdyBytes(t, replied...), wantInject: true, wantEnd: EndCutReported,
			client: append(slices.Clone(opened), &spdy.RstStreamFrame{StreamId: stdout, Status: spdy.Cancel}),
		},
		{name: "server not speaking SPDY/3", client: opened, server: make([]byte, 16), end: io.EOF, wantEnd: EndCompleted},
		{
			name: "client header block unreadable", server: spdyBytes(t, synReply(errStream)), end: io.EOF, wantEnd: EndCompleted,
			client: nil, rawClient: []byte{0x80, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x0e, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 'n', 'o', 't', 'z', 'l', 'b'},
		},
		{name: "no error stream", client: []spdy.Frame{synStream(stdout, "stdout")}, server: spdyBytes(t, synReply(stdout)), end: io.EOF, wantEnd: EndCompleted},
	}
	for _, tc := range cases {
		clientBytes := append(spdyBytes(t, tc.client...), tc.rawClient...)
		// Whole writes and reads, and every byte apart: frame headers and
		// header blocks split anywhere.
		for _, size := range []int{0, 1, 5} {
			t.Run(tc.name+"/chunk="+strconv.Itoa(size), func(t *testing.T) {
				up := &scriptedUpstream{chunks: chunked(tc.server, size), end: tc.end}
				var cuts []End
				var sums []Summary
				w := NewStream(up, Options{
					Protocol: spdyV4,
					Cut:      func(err error) metav1.Status { return CutStatus(`member cluster "m1"`, "karmada-apiserver", err) },
					OnCut:    func(e End) { cuts = append(cuts, e) },
					OnEnd:    func(s Summary) { sums = append(sums, s) },
				})
				for _, c := range chunked(clientBytes, size) {
					if _, err := w.Write(c); err != nil {
						t.Fatal(err)
					}
				}
				if !bytes.Equal(up.written.Bytes(), clientBytes) {
					t.Fatal("client bytes changed on their way upstream")
				}
				if tc.clientLeft {
					_ = w.Close()
				}
				got, err := readAllSmall(w, max(size, 7))
				if !errors.Is(err, tc.end) {
					t.Errorf("read ended with %v, want upstream's %v", err, tc.end)
				}
				delivered := tc.server
				if tc.delivered > 0 {
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
				if tc.wantInject {
					checkInjected(t, injected, errStream, `member cluster "m1"`)
					checkFrames(t, got)
				} else if len(injected) > 0 {
					t.Errorf("injected %q, want nothing", injected)
				}
				cut := tc.wantEnd == EndCutReported || tc.wantEnd == EndCutUnreported
				if cut && !slices.Equal(cuts, []End{tc.wantEnd}) || !cut && len(cuts) > 0 {
					t.Errorf("cuts %q, want %q", cuts, tc.wantEnd)
				}
				_ = w.Close()
				_ = w.Close()
				want := Summary{End: tc.wantEnd, FromClient: int64(len(clientBytes)), FromServer: int64(len(tc.server))}
				if tc.clientLeft { // summed up when the gateway closed it, before anything came
					want.FromServer = 0
				}
				if len(sums) != 1 || sums[0].End != want.End || sums[0].FromClient != want.FromClient || sums[0].FromServer != want.FromServer {
					t.Errorf("summaries %+v, want one %+v", sums, want)
				}
			})
		}
	}
}

// recorder is an Observer keeping what it is told.
type recorder struct {
	mu      sync.Mutex
	data    [channels][]byte
	resizes []TerminalSize
}

func (r *recorder) Data(ch Channel, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data[ch] = append(r.data[ch], p...)
}

func (r *recorder) Resize(s TerminalSize) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resizes = append(r.resizes, s)
}

// TestSPDYChannels: what client-go's SPDY executor and the kubelet send,
// written by spdystream's Framer, is decoded per channel, split anywhere,
// and the exit code is read from the status.
func TestSPDYChannels(t *testing.T) {
	const errS, stdinS, stdoutS, stderrS, resizeS = 1, 3, 5, 7, 9
	client := spdyBytes(t,
		synStream(errS, "error"), synStream(stdinS, "stdin"), synStream(stdoutS, "stdout"), synStream(stderrS, "stderr"), synStream(resizeS, "resize"),
		data(resizeS, false, `{"Width":80,"Height":24}`+"\n"), data(stdinS, false, "ls\n"), data(resizeS, false, `{"Width":100,`),
		data(resizeS, false, `"Height":40}`+"\n"+`{"Width":1`), &spdy.PingFrame{Id: 1}, data(stdinS, true, "exit 3\n"),
		data(resizeS, false, `0,"Height":2}`+"\n"), &spdy.RstStreamFrame{StreamId: stdoutS, Status: spdy.Cancel})
	status := `{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}`
	server := spdyBytes(t,
		synReply(errS), synReply(stdinS), synReply(stdoutS), synReply(stderrS), synReply(resizeS),
		data(stdoutS, false, "a.txt\n"), data(stderrS, false, "warn\n"), data(stdoutS, false, strings.Repeat("x", 70000)),
		&spdy.WindowUpdateFrame{StreamId: stdinS, DeltaWindowSize: 10}, data(errS, false, status), data(errS, true, ""))
	for _, size := range []int{0, 1, 3, 1000} {
		t.Run("chunk="+strconv.Itoa(size), func(t *testing.T) {
			var rec recorder
			var sum Summary
			w := NewStream(&scriptedUpstream{chunks: chunked(server, size), end: io.EOF}, Options{Protocol: spdyV4, Observer: &rec, OnEnd: func(s Summary) { sum = s }})
			for _, c := range chunked(client, size) {
				if _, err := w.Write(c); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := readAllSmall(w, max(size, 7)); err != io.EOF {
				t.Fatal(err)
			}
			_ = w.Close()
			if got := string(rec.data[Stdin]); got != "ls\nexit 3\n" {
				t.Errorf("stdin %q", got)
			}
			if got := string(rec.data[Stdout]); got != "a.txt\n"+strings.Repeat("x", 70000) {
				t.Errorf("stdout %d bytes", len(got))
			}
			if got := string(rec.data[Stderr]); got != "warn\n" {
				t.Errorf("stderr %q", got)
			}
			if want := []TerminalSize{{80, 24}, {100, 40}, {10, 2}}; !slices.Equal(rec.resizes, want) {
				t.Errorf("resizes %v, want %v", rec.resizes, want)
			}
			if string(sum.Status) != status || sum.End != EndCompleted {
				t.Errorf("summary %+v", sum)
			}
			if code, ok := ExitCode(sum.Status); !ok || code != 3 {
				t.Errorf("exit code %d, %v; want 3", code, ok)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	cases := []struct {
		status string
		code   int
		ok     bool
	}{
		{`{"status":"Success"}`, 0, true},
		{`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"137"}]}}`, 137, true},
		{`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"x"}]}}`, 0, false},
		{`{"status":"Failure","reason":"InternalError","message":"no such container"}`, 0, false},
		{`not json`, 0, false},
		{``, 0, false},
	}
	for _, tc := range cases {
		if code, ok := ExitCode([]byte(tc.status)); code != tc.code || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.status, code, ok, tc.code, tc.ok)
		}
	}
}

// readAllSmall reads r to its end with reads of n bytes, as a copy with a
// small buffer would.
func readAllSmall(r io.Reader, n int) ([]byte, error) {
	var out []byte
	buf := make([]byte, n)
	for {
		k, err := r.Read(buf)
		out = append(out, buf[:k]...)
		if err != nil {
			return out, err
		}
	}
}

// checkFrames reads b to its end as the client's framer would: whole
// frames, the last one the error stream's DATA with FIN.
func checkFrames(t *testing.T, b []byte) {
	t.Helper()
	f, err := spdy.NewFramer(io.Discard, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var last spdy.Frame
	for {
		frame, err := f.ReadFrame()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the client's bytes do not read as whole SPDY frames: %v", err)
		}
		last = frame
	}
	if d, ok := last.(*spdy.DataFrame); !ok || d.Flags&spdy.DataFlagFin == 0 {
		t.Fatalf("last frame %#v, want the Failure's DATA with FIN", last)
	}
}

// checkInjected reads b as the client's framer would: one DATA frame with
// FIN on stream carrying a Failure Status naming where.
func checkInjected(t *testing.T, b []byte, stream spdy.StreamId, where string) {
	t.Helper()
	f, err := spdy.NewFramer(io.Discard, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	frame, err := f.ReadFrame()
	if err != nil {
		t.Fatalf("injected bytes %q are not a frame: %v", b, err)
	}
	d, ok := frame.(*spdy.DataFrame)
	if !ok || d.StreamId != stream || d.Flags&spdy.DataFlagFin == 0 {
		t.Fatalf("injected %#v, want a DATA frame with FIN on stream %d", frame, stream)
	}
	var st metav1.Status
	if err := json.Unmarshal(d.Data, &st); err != nil {
		t.Fatal(err)
	}
	if st.Status != metav1.StatusFailure || !bytes.Contains([]byte(st.Message), []byte(where)) {
		t.Errorf("injected Status %+v, want a Failure naming %s", st, where)
	}
	if _, err := f.ReadFrame(); err != io.EOF {
		t.Errorf("more than one frame injected (%v)", err)
	}
}

func TestProtocolOf(t *testing.T) {
	cases := []struct {
		upgrade, header, protocol, subresource string
		decodes, exitStatus                    bool
	}{
		{"SPDY/3.1", "X-Stream-Protocol-Version", "v4.channel.k8s.io", "exec", true, true},
		{"spdy/3.1", "X-Stream-Protocol-Version", "v4.channel.k8s.io", "attach", true, true},
		// v1-v3 signal success by an empty error stream.
		{"SPDY/3.1", "X-Stream-Protocol-Version", "v3.channel.k8s.io", "exec", true, false},
		{"SPDY/3.1", "X-Stream-Protocol-Version", "v2.channel.k8s.io", "exec", true, false},
		{"SPDY/3.1", "X-Stream-Protocol-Version", "channel.k8s.io", "exec", true, false},
		{"SPDY/3.1", "X-Stream-Protocol-Version", "portforward.k8s.io", "portforward", false, false},
		{"SPDY/3.1", "X-Stream-Protocol-Version", "", "exec", false, false},
		{"websocket", "X-Stream-Protocol-Version", "v4.channel.k8s.io", "exec", false, false},
		{"websocket", "Sec-WebSocket-Protocol", "v5.channel.k8s.io", "exec", true, true},
		{"WebSocket", "Sec-WebSocket-Protocol", "v4.channel.k8s.io", "attach", true, true},
		// An empty error channel is success there.
		{"websocket", "Sec-WebSocket-Protocol", "channel.k8s.io", "exec", true, false},
		{"websocket", "Sec-WebSocket-Protocol", "base64.channel.k8s.io", "exec", false, false},
		{"websocket", "Sec-WebSocket-Protocol", "v4.base64.channel.k8s.io", "exec", false, false},
		// Channel 3 is a port's data there.
		{"websocket", "Sec-WebSocket-Protocol", "v4.channel.k8s.io", "portforward", false, false},
		{"websocket", "Sec-WebSocket-Protocol", "v4.channel.k8s.io", "log", false, false},
		{"SPDY/3.1", "Sec-WebSocket-Protocol", "v4.channel.k8s.io", "exec", false, false},
		// An extension changes the payloads: relayed, not followed.
		{"websocket", "Sec-WebSocket-Protocol", "v5.channel.k8s.io", "exec+extension", false, false},
	}
	for _, tc := range cases {
		h := http.Header{"Connection": {"Upgrade"}, "Upgrade": {tc.upgrade}}
		if tc.protocol != "" {
			h.Set(tc.header, tc.protocol)
		}
		sub, ext := strings.CutSuffix(tc.subresource, "+extension")
		if ext {
			h.Set("Sec-WebSocket-Extensions", "permessage-deflate")
		}
		p := ProtocolOf(h, sub)
		if p.Decodes() != tc.decodes || p.PromisesExitStatus() != tc.exitStatus {
			t.Errorf("%s %s %q on %s: decodes %v, exit status %v; want %v, %v", tc.upgrade, tc.header, tc.protocol, tc.subresource,
				p.Decodes(), p.PromisesExitStatus(), tc.decodes, tc.exitStatus)
		}
	}
}

// FuzzSPDYScanner is differential: any bytes, split anywhere, are cut into
// the frames spdystream's Framer reads from them (as far as it reads any),
// with the same stream, flags and data, and no follower panics.
func FuzzSPDYScanner(f *testing.F) {
	f.Add(spdyBytes(f, synStream(1, "error"), synStream(3, "stdout"), data(3, false, "hi")), 3)
	f.Add(spdyBytes(f, synReply(1), data(1, true, `{"status":"Success"}`), &spdy.PingFrame{Id: 3}), 1)
	f.Add(spdyBytes(f, &spdy.RstStreamFrame{StreamId: 5, Status: spdy.Cancel}, &spdy.GoAwayFrame{}, data(9, false, strings.Repeat("y", 300))), 20)
	f.Add([]byte{0x80, 0x03, 0x00, 0x01, 0x00, 0xff, 0xff, 0xff}, 2)
	f.Fuzz(func(t *testing.T, b []byte, split int) {
		if split <= 0 || split > len(b) {
			split = len(b) / 2
		}
		var parts frameLog
		var s frameScanner
		s.scan(b[:split], &parts)
		s.scan(b[split:], &parts)

		in := &countingReader{r: bytes.NewReader(b)}
		framer, err := spdy.NewFramer(io.Discard, in)
		if err != nil {
			t.Fatal(err)
		}
		scanned := 0
		for i := 0; ; i++ {
			frame, err := framer.ReadFrame()
			if err != nil {
				break
			}
			if i >= len(parts.frames) {
				if !s.atBoundary() && s.cur.control {
					break // a lax read of a control frame, as below
				}
				t.Fatalf("the Framer read frame %d (%#v), the scanner %d frames", i, frame, len(parts.frames))
			}
			got := parts.frames[i]
			if scanned += frameHeaderLen + got.h.length; in.n != scanned {
				// The Framer reads fixed-size control frames (RST_STREAM,
				// PING, ...) and any version without checking the declared
				// length: past such a frame the two frame the bytes apart.
				// No SPDY/3 peer writes one (spdystream writes what it
				// reads); the scanner keeps to the declared length.
				if !got.h.control {
					t.Fatalf("frame %d: the Framer read to %d, the scanner's DATA frame %+v ends at %d", i, in.n, got.h, scanned)
				}
				break
			}
			switch fr := frame.(type) {
			case *spdy.DataFrame:
				if got.h.control || got.h.stream != uint32(fr.StreamId) || got.h.flags != byte(fr.Flags) || !bytes.Equal(got.payload, fr.Data) {
					t.Fatalf("frame %d: scanner %+v %q, Framer %#v", i, got.h, got.payload, fr)
				}
			default:
				if !got.h.control {
					t.Fatalf("frame %d: scanner %+v, Framer %#v", i, got.h, fr)
				}
			}
		}
		w := NewStream(&scriptedUpstream{chunks: [][]byte{b}, end: io.EOF}, Options{Protocol: spdyV4, Observer: &recorder{},
			Cut: func(err error) metav1.Status { return CutStatus("m", "karmada-apiserver", err) }})
		_, _ = w.Write(b[:split])
		_, _ = w.Write(b[split:])
		_, _ = readAllSmall(w, 7)
		_ = w.Close()
	})
}

// FuzzSPDYChannels is differential: stdin and resizes a client sends and
// stdout and stderr a server sends, written by spdystream's Framer in frames
// the fuzzer sizes, reach the Observer as they were written, however the
// bytes are split.
func FuzzSPDYChannels(f *testing.F) {
	f.Add([]byte("hello world, this is stdin"), []byte{3, 0, 7, 1, 200}, 5)
	f.Add([]byte{}, []byte{}, 1)
	f.Add(bytes.Repeat([]byte{0xff}, 5000), []byte{255, 255, 255, 4}, 1000)
	f.Fuzz(func(t *testing.T, payload, sizes []byte, split int) {
		if split <= 0 {
			split = 1
		}
		const errS, stdinS, stdoutS, stderrS, resizeS = 1, 3, 5, 7, 9
		clientFrames := []spdy.Frame{synStream(errS, "error"), synStream(stdinS, "stdin"), synStream(stdoutS, "stdout"), synStream(stderrS, "stderr"), synStream(resizeS, "resize")}
		var serverFrames []spdy.Frame
		var want recorder
		rest := payload
		for i := 0; len(rest) > 0; i++ {
			n := 1
			if len(sizes) > 0 {
				n = int(sizes[i%len(sizes)])*int(sizes[i%len(sizes)]) + 1
			}
			n = min(n, len(rest))
			chunk := rest[:n]
			rest = rest[n:]
			switch i % 4 {
			case 0:
				clientFrames = append(clientFrames, data(stdinS, false, string(chunk)))
				want.Data(Stdin, chunk)
			case 1:
				serverFrames = append(serverFrames, data(stdoutS, false, string(chunk)))
				want.Data(Stdout, chunk)
			case 2:
				serverFrames = append(serverFrames, data(stderrS, false, string(chunk)))
				want.Data(Stderr, chunk)
			case 3:
				size := TerminalSize{Width: uint16(n), Height: uint16(len(rest))}
				line, _ := json.Marshal(size)
				clientFrames = append(clientFrames, data(resizeS, false, string(line)+"\n"))
				want.Resize(size)
			}
		}
		client, server := spdyBytes(t, clientFrames...), spdyBytes(t, serverFrames...)
		var got recorder
		w := NewStream(&scriptedUpstream{chunks: chunked(server, split), end: io.EOF}, Options{Protocol: spdyV4, Observer: &got})
		for _, c := range chunked(client, split) {
			_, _ = w.Write(c)
		}
		_, _ = readAllSmall(w, split)
		for ch := range channels {
			if !bytes.Equal(got.data[ch], want.data[ch]) {
				t.Fatalf("%v: got %d bytes, want %d", Channel(ch), len(got.data[ch]), len(want.data[ch]))
			}
		}
		if !slices.Equal(got.resizes, want.resizes) {
			t.Fatalf("resizes %v, want %v", got.resizes, want.resizes)
		}
		// The Framer reads the same frames back: the input is SPDY indeed.
		for _, b := range [][]byte{client, server} {
			fr, _ := spdy.NewFramer(io.Discard, bytes.NewReader(b))
			for {
				if _, err := fr.ReadFrame(); err != nil {
					if err != io.EOF {
						t.Fatal(err)
					}
					break
				}
			}
		}
	})
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

type scannedFrame struct {
	h       frameHeader
	payload []byte
}

type frameLog struct {
	frames []scannedFrame
	cur    []byte
}

func (l *frameLog) header(frameHeader) { l.cur = nil }
func (l *frameLog) payload(b []byte)   { l.cur = append(l.cur, b...) }
func (l *frameLog) end(h frameHeader) {
	l.frames = append(l.frames, scannedFrame{h: h, payload: append([]byte{}, l.cur...)})
}

// BenchmarkSPDYStream is the cost following adds to the stdout direction
// of an exec, per DATA frame size, with and without an Observer.
func BenchmarkSPDYStream(b *testing.B) {
	for _, observe := range []bool{false, true} {
		for _, size := range []int{64, 1 << 10, 32 << 10} {
			b.Run(fmt.Sprintf("observer=%v/%d", observe, size), func(b *testing.B) {
				frames := make([]spdy.Frame, 64)
				for i := range frames {
					frames[i] = data(3, false, strings.Repeat("x", size))
				}
				stdout := spdyBytes(b, frames...)
				opts := Options{Protocol: spdyV4}
				if observe {
					opts.Observer = discard{}
				}
				up := &scriptedUpstream{}
				w := NewStream(up, opts)
				if _, err := w.Write(spdyBytes(b, synStream(1, "error"), synStream(3, "stdout"))); err != nil {
					b.Fatal(err)
				}
				buf := make([]byte, 32<<10)
				b.SetBytes(int64(len(stdout)))
				b.ReportAllocs()
				for b.Loop() {
					up.chunks = [][]byte{stdout}
					for read := 0; read < len(stdout); {
						n, err := w.Read(buf)
						if err != nil {
							b.Fatal(err)
						}
						read += n
					}
				}
			})
		}
	}
}

type discard struct{}

func (discard) Data(Channel, []byte) {}
func (discard) Resize(TerminalSize)  {}
