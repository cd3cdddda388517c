package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/spdystream/spdy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
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

func TestSPDYStatusWatch(t *testing.T) {
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
		wantResult string // "" when nothing is counted
		rawClient  []byte // sent after client's frames
	}{
		{name: "cut before a status", client: opened, server: spdyBytes(t, replied...), end: io.EOF, wantInject: true, wantResult: metrics.CutReported},
		{name: "cut by a reset", client: opened, server: spdyBytes(t, replied...), end: syscall.ECONNRESET, wantInject: true, wantResult: metrics.CutReported},
		{
			name: "status came", client: opened, end: io.EOF,
			server: spdyBytes(t, append(slices.Clone(replied), data(errStream, false, `{"status":"Success"}`), data(errStream, true, ""))...),
		},
		{
			name: "status came, no FIN", client: opened, end: io.EOF,
			server: spdyBytes(t, append(slices.Clone(replied), data(errStream, false, `{"status":"Failure"}`))...),
		},
		{
			// Nothing can follow a FIN on the stream; not a kubelet's end.
			name: "error stream finished empty", client: opened, end: io.EOF,
			server: spdyBytes(t, append(slices.Clone(replied), data(errStream, true, ""))...),
		},
		{
			name: "cut inside a frame", client: opened, end: io.EOF, wantResult: metrics.CutUnreported,
			server: func() []byte { b := spdyBytes(t, replied...); return b[:len(b)-2] }(),
		},
		{name: "client went away", client: opened, server: spdyBytes(t, replied...), end: io.EOF, clientLeft: true},
		{
			name: "client sent GOAWAY", end: io.EOF, server: spdyBytes(t, replied...),
			client: append(slices.Clone(opened), &spdy.GoAwayFrame{LastGoodStreamId: stdout}),
		},
		{
			name: "client reset the error stream", end: io.EOF, server: spdyBytes(t, replied...),
			client: append(slices.Clone(opened), &spdy.RstStreamFrame{StreamId: errStream, Status: spdy.Cancel}),
		},
		{
			name: "client reset another stream", end: io.EOF, server: spdyBytes(t, replied...), wantInject: true, wantResult: metrics.CutReported,
			client: append(slices.Clone(opened), &spdy.RstStreamFrame{StreamId: stdout, Status: spdy.Cancel}),
		},
		{name: "server not speaking SPDY/3", client: opened, server: make([]byte, 16), end: io.EOF},
		{
			name: "client header block unreadable", server: spdyBytes(t, synReply(errStream)), end: io.EOF,
			client: nil, rawClient: []byte{0x80, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x0e, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 'n', 'o', 't', 'z', 'l', 'b'},
		},
		{name: "no error stream", client: []spdy.Frame{synStream(stdout, "stdout")}, server: spdyBytes(t, synReply(stdout)), end: io.EOF},
	}
	for _, tc := range cases {
		clientBytes := append(spdyBytes(t, tc.client...), tc.rawClient...)
		// Whole writes and reads, and every byte apart: frame headers and
		// header blocks split anywhere.
		for _, size := range []int{0, 1, 5} {
			t.Run(tc.name+"/chunk="+string(rune('0'+size)), func(t *testing.T) {
				up := &scriptedUpstream{chunks: chunked(tc.server, size), end: tc.end}
				var results []string
				w := newStatusWatch(up, newSPDYFollower(func(stream uint32) []byte { return errorStreamFrame(stream, cutStatus(`member cluster "m1"`)) }),
					func(result string) { results = append(results, result) })
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
				if !bytes.HasPrefix(got, tc.server) {
					t.Fatal("server bytes changed on their way to the client")
				}
				injected := got[len(tc.server):]
				if tc.wantInject {
					checkInjected(t, injected, errStream, `member cluster "m1"`)
				} else if len(injected) > 0 {
					t.Errorf("injected %q, want nothing", injected)
				}
				if want := []string{tc.wantResult}; tc.wantResult == "" && len(results) > 0 || tc.wantResult != "" && !slices.Equal(results, want) {
					t.Errorf("cut results %q, want %q", results, tc.wantResult)
				}
			})
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

func TestWatchesSPDYExitStatus(t *testing.T) {
	cases := []struct {
		upgrade, protocol string
		want              bool
	}{
		{"SPDY/3.1", "v4.channel.k8s.io", true},
		{"spdy/3.1", "v4.channel.k8s.io", true},
		// v1-v3 signal success by an empty error stream.
		{"SPDY/3.1", "v3.channel.k8s.io", false},
		{"SPDY/3.1", "v2.channel.k8s.io", false},
		{"SPDY/3.1", "channel.k8s.io", false},
		{"SPDY/3.1", "portforward.k8s.io", false},
		{"SPDY/3.1", "", false},
		{"websocket", "v4.channel.k8s.io", false},
	}
	for _, tc := range cases {
		h := http.Header{"Connection": {"Upgrade"}, "Upgrade": {tc.upgrade}}
		if tc.protocol != "" {
			h.Set("X-Stream-Protocol-Version", tc.protocol)
		}
		if got := watchesSPDYExitStatus(&http.Response{Header: h}); got != tc.want {
			t.Errorf("%s %q: %v, want %v", tc.upgrade, tc.protocol, got, tc.want)
		}
	}
}

// FuzzFrameScanner: any bytes, split anywhere, give the same SPDY frames
// and WebSocket follower state as whole, and no follower panics.
func FuzzFrameScanner(f *testing.F) {
	f.Add(spdyBytes(f, synStream(1, "error"), synStream(3, "stdout"), data(3, false, "hi")), 3)
	f.Add(spdyBytes(f, synReply(1), data(1, true, `{"status":"Success"}`)), 1)
	f.Add([]byte{0x80, 0x03, 0x00, 0x01, 0x00, 0xff, 0xff, 0xff}, 2)
	f.Add(slices.Concat(wsFrame(false, wsBinary, []byte{3}), wsFrame(true, 0x9, nil), wsFrame(true, wsContinuation, []byte("{}"))), 4)
	f.Fuzz(func(t *testing.T, b []byte, split int) {
		if split <= 0 || split > len(b) {
			split = len(b) / 2
		}
		whole, parts := &frameLog{}, &frameLog{}
		var s1, s2 frameScanner
		s1.scan(b, whole)
		s2.scan(b[:split], parts)
		s2.scan(b[split:], parts)
		if !slices.Equal(whole.ends, parts.ends) || s1.atBoundary() != s2.atBoundary() {
			t.Fatalf("split at %d: frames %v, whole %v", split, parts.ends, whole.ends)
		}
		w := newStatusWatch(&scriptedUpstream{end: io.EOF}, newSPDYFollower(func(uint32) []byte { return nil }), func(string) {})
		_, _ = w.Write(b[:split])
		_, _ = w.Write(b[split:])
		var ws1, ws2 wsFollower
		ws1.fromServer(b)
		ws2.fromServer(b[:split])
		ws2.fromServer(b[split:])
		if !reflect.DeepEqual(ws1, ws2) { // cutFrames is nil in both
			t.Fatalf("split at %d: WebSocket follower %+v, whole %+v", split, ws2, ws1)
		}
	})
}

type frameLog struct{ ends []frameHeader }

func (*frameLog) header(frameHeader)  {}
func (*frameLog) payload([]byte)      {}
func (l *frameLog) end(h frameHeader) { l.ends = append(l.ends, h) }

// BenchmarkSPDYStatusWatch is the cost the watch adds to the stdout
// direction of an exec, per DATA frame size.
func BenchmarkSPDYStatusWatch(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 32 << 10} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			frames := make([]spdy.Frame, 64)
			for i := range frames {
				frames[i] = data(3, false, strings.Repeat("x", size))
			}
			stdout := spdyBytes(b, frames...)
			w := newStatusWatch(&scriptedUpstream{}, newSPDYFollower(func(uint32) []byte { return nil }), func(string) {})
			if _, err := w.Write(spdyBytes(b, synStream(1, "error"), synStream(3, "stdout"))); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, copyBufferSize)
			b.SetBytes(int64(len(stdout)))
			b.ReportAllocs()
			for b.Loop() {
				w.ReadWriteCloser.(*scriptedUpstream).chunks = [][]byte{stdout}
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
