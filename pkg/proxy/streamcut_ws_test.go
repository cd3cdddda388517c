package proxy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// wsFrame is a server's (unmasked) WebSocket frame.
func wsFrame(fin bool, opcode byte, payload []byte) []byte {
	return append(appendWebSocketHeader(nil, fin, opcode, len(payload)), payload...)
}

// wsMessage is a whole binary message on channel.
func wsMessage(channel byte, data string) []byte {
	return wsFrame(true, wsBinary, append([]byte{channel}, data...))
}

func TestWebSocketStatusWatch(t *testing.T) {
	status := `{"metadata":{},"status":"Success"}`
	stdout := wsMessage(1, "hello")
	cases := []struct {
		name       string
		server     []byte
		clientLeft bool
		wantInject bool
		wantResult string
	}{
		{name: "cut before a status", server: stdout, wantInject: true, wantResult: metrics.CutReported},
		{name: "cut after a long message", server: wsMessage(1, strings.Repeat("x", 300)), wantInject: true, wantResult: metrics.CutReported},
		{name: "cut after a ping inside a fragmented message", wantInject: true, wantResult: metrics.CutReported,
			server: slices.Concat(wsFrame(false, wsBinary, []byte{1, 'a'}), wsFrame(true, 0x9, nil), wsFrame(true, wsContinuation, []byte("b")))},
		{name: "cut with nothing sent", server: nil, wantInject: true, wantResult: metrics.CutReported},
		{name: "status came", server: slices.Concat(stdout, wsMessage(wsErrorChannel, status))},
		{name: "status came in fragments", server: slices.Concat(wsFrame(false, wsBinary, []byte{wsErrorChannel}), wsFrame(true, wsContinuation, []byte(status)))},
		{name: "server closed", server: slices.Concat(stdout, wsFrame(true, wsClose, []byte{0x03, 0xe8}))},
		{name: "cut inside a frame", server: stdout[:len(stdout)-2], wantResult: metrics.CutUnreported},
		{name: "cut inside a message", server: wsFrame(false, wsBinary, []byte{1, 'a'}), wantResult: metrics.CutUnreported},
		{name: "masked server frame", server: []byte{0x82, 0x81, 1, 2, 3, 4, 5}},
		{name: "client went away", server: stdout, clientLeft: true},
	}
	for _, tc := range cases {
		for _, size := range []int{0, 1, 5} {
			t.Run(tc.name+"/chunk="+strconv.Itoa(size), func(t *testing.T) {
				up := &scriptedUpstream{chunks: chunked(tc.server, size), end: io.EOF}
				var results []string
				w := newStatusWatch(up, &wsFollower{cutFrames: func() []byte { return webSocketCutFrames(cutStatus(`member cluster "m1"`)) }},
					func(result string) { results = append(results, result) })
				if tc.clientLeft {
					_ = w.Close()
				}
				got, err := readAllSmall(w, max(size, 7))
				if err != io.EOF {
					t.Errorf("read ended with %v, want upstream's EOF", err)
				}
				if !bytes.HasPrefix(got, tc.server) {
					t.Fatal("server bytes changed on their way to the client")
				}
				injected := got[len(tc.server):]
				if tc.wantInject {
					checkWebSocketInjected(t, injected, `member cluster "m1"`)
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
	if len(b) < off+n || b[off] != wsErrorChannel {
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

func TestWatchesWebSocketExitStatus(t *testing.T) {
	cases := []struct {
		upgrade, protocol, route string
		want                     bool
	}{
		{"websocket", "v5.channel.k8s.io", metrics.RouteExec, true},
		{"WebSocket", "v4.channel.k8s.io", metrics.RouteAttach, true},
		// An empty error channel is success there.
		{"websocket", "channel.k8s.io", metrics.RouteExec, false},
		{"websocket", "base64.channel.k8s.io", metrics.RouteExec, false},
		{"websocket", "v4.base64.channel.k8s.io", metrics.RouteExec, false},
		// Channel 3 is a port's data there.
		{"websocket", "v4.channel.k8s.io", metrics.RoutePortForward, false},
		{"websocket", "v4.channel.k8s.io", metrics.RoutePassthrough, false},
		{"SPDY/3.1", "v4.channel.k8s.io", metrics.RouteExec, false},
	}
	for _, tc := range cases {
		h := http.Header{"Connection": {"Upgrade"}, "Upgrade": {tc.upgrade}, "Sec-Websocket-Protocol": {tc.protocol}}
		if got := watchesWebSocketExitStatus(&http.Response{Header: h}, tc.route); got != tc.want {
			t.Errorf("%s %q on %s: %v, want %v", tc.upgrade, tc.protocol, tc.route, got, tc.want)
		}
	}
}

func TestWebSocketCutFramesLengths(t *testing.T) {
	for _, n := range []int{10, 200, 70000} {
		b := webSocketCutFrames(metav1.Status{Message: strings.Repeat("m", n)})
		var f wsFollower
		f.fromServer(b)
		if !f.statusSeen || !f.closed || f.hdrN != 0 || f.left != 0 || f.inMessage || f.gaveUp {
			t.Errorf("message of %d bytes: followed as %+v, want one status message and a close", n, f)
		}
	}
}
