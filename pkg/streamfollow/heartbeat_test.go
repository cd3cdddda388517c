package streamfollow

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/moby/spdystream/spdy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// clientFrame is a client's (masked) WebSocket frame.
func clientFrame(opcode byte, payload []byte) []byte {
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b := appendWebSocketHeader(nil, true, opcode, len(payload))
	b[1] |= 0x80
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i&3])
	}
	return b
}

func spdyPing(t testing.TB, id uint32) []byte { return spdyBytes(t, &spdy.PingFrame{Id: id}) }

// TestFrameCutter: a client's heartbeats are taken out of its bytes and
// answered, everything else passes on byte for byte, wherever the bytes
// are split; once the bytes stop reading as the protocol, all of them
// pass on.
func TestFrameCutter(t *testing.T) {
	stdin := clientFrame(wsBinary, []byte("\x00stdin"))
	long := clientFrame(wsBinary, append([]byte{0}, bytes.Repeat([]byte("x"), 400)...)) // a 16-bit length
	ping, emptyPing := clientFrame(wsPing, []byte("heartbeat")), clientFrame(wsPing, nil)
	pong := clientFrame(wsPong, []byte("answer")) // answers the server's ping: passes on
	unmasked := []byte{0x82, 0x02, 0x00, 'x'}

	syn := spdyBytes(t, synStream(1, "error"))
	spdyData := spdyBytes(t, data(1, false, "stdin"))
	spdyOdd, spdyEven := spdyPing(t, 3), spdyPing(t, 2)

	cases := []struct {
		name          string
		proto         heartbeatProtocol
		in            []byte
		pass, answers []byte
		gaveUp        bool
	}{
		{
			name: "websocket", proto: wsHeartbeats{},
			in:      cat(stdin, ping, long, emptyPing, pong, stdin),
			pass:    cat(stdin, long, pong, stdin),
			answers: cat(wsFrame(true, wsPong, []byte("heartbeat")), wsFrame(true, wsPong, nil)),
		},
		{
			name: "websocket, not the protocol", proto: wsHeartbeats{},
			in: cat(stdin, ping, unmasked, ping), pass: cat(stdin, unmasked, ping),
			answers: wsFrame(true, wsPong, []byte("heartbeat")), gaveUp: true,
		},
		{
			name: "spdy", proto: &spdyHeartbeats{},
			in:      cat(syn, spdyOdd, spdyData, spdyEven, spdyData),
			pass:    cat(syn, spdyData, spdyEven, spdyData),
			answers: spdyOdd,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for size := 1; size <= len(tc.in); size++ {
				c := frameCutter{proto: tc.proto}
				var pass, answers []byte
				for _, p := range chunked(tc.in, size) {
					got, a := c.filter(p)
					pass = append(pass, got...)
					answers = append(answers, a...)
				}
				if !bytes.Equal(pass, tc.pass) {
					t.Fatalf("chunks of %d: passed on %x, want %x", size, pass, tc.pass)
				}
				if !bytes.Equal(answers, tc.answers) {
					t.Fatalf("chunks of %d: answered %x, want %x", size, answers, tc.answers)
				}
				if c.gaveUp != tc.gaveUp {
					t.Fatalf("chunks of %d: gave up %t, want %t", size, c.gaveUp, tc.gaveUp)
				}
			}
		})
	}
}

// heartbeatStream is a Stream over a pipe to a member the test plays.
func heartbeatStream(t *testing.T, proto Protocol, opts Options) (*Stream, net.Conn) {
	t.Helper()
	gw, member := net.Pipe()
	opts.Protocol = proto
	if opts.Cut == nil {
		opts.Cut = func(err error) metav1.Status { return CutStatus("member", "karmada-apiserver", err) }
	}
	s := NewStream(gw, opts)
	t.Cleanup(func() { _ = s.Close(); _ = member.Close() })
	return s, member
}

// readN reads exactly n bytes of r, failing the test otherwise, or if
// they do not come within 10 s.
func readN(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	done := make(chan error, 1)
	go func() { _, err := io.ReadFull(r, b); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("read %d bytes: %v", n, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%d bytes did not come within 10 s", n)
	}
	return b
}

// TestClientHeartbeatsAreAnsweredByTheGateway: a client's heartbeat is
// answered while upstream sends nothing, and never reaches upstream: the
// member reads the client's next frame first.
func TestClientHeartbeatsAreAnsweredByTheGateway(t *testing.T) {
	cases := []struct {
		name         string
		proto        Protocol
		ping, answer []byte
		next         []byte
	}{
		{"websocket", webSocketV5, clientFrame(wsPing, []byte("hb")), wsFrame(true, wsPong, []byte("hb")), clientFrame(wsBinary, []byte("\x00in"))},
		{"spdy", spdyV4, spdyPing(t, 1), spdyPing(t, 1), spdyBytes(t, synStream(1, "error"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, member := heartbeatStream(t, tc.proto, Options{HeartbeatPeriod: time.Hour})
			go func() { _, _ = s.Write(tc.ping) }() // relayed, it would wait for the member

			if got := readN(t, s, len(tc.answer)); !bytes.Equal(got, tc.answer) {
				t.Fatalf("the client got %x, want the answer %x", got, tc.answer)
			}
			go func() { _, _ = s.Write(tc.next) }()
			if got := readN(t, member, len(tc.next)); !bytes.Equal(got, tc.next) {
				t.Fatalf("the member got %x, want the client's next frame %x and no heartbeat", got, tc.next)
			}
		})
	}
}

// TestHeartbeatAnswersWaitForAWholeFrame: an answer reaches the client
// between the server's frames, never inside one, even inside a frame too
// long to be held back.
func TestHeartbeatAnswersWaitForAWholeFrame(t *testing.T) {
	s, member := heartbeatStream(t, webSocketV5, Options{HeartbeatPeriod: time.Hour})
	frame := wsMessage(1, strings.Repeat("o", 100<<10))
	const first = 40 << 10
	go func() { _, _ = member.Write(frame[:first]) }()
	got := readN(t, s, first)
	go func() { _, _ = io.Copy(io.Discard, member) }()
	if _, err := s.Write(clientFrame(wsPing, nil)); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = member.Write(frame[first:]) }()
	pong := wsFrame(true, wsPong, nil)
	got = append(got, readN(t, s, len(frame)-first+len(pong))...)
	if want := append(append([]byte(nil), frame...), pong...); !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("the client's bytes differ from the frame then the answer at byte %d of %d", i, len(want))
	}
}

// TestGatewayHeartbeatsKeepUpstream: while upstream sends nothing, the
// gateway sends heartbeats of its own, as the client frames them; an
// upstream that answers them keeps the stream, one silent past the
// deadline gets it cut, and the client is told it timed out.
func TestGatewayHeartbeatsKeepUpstream(t *testing.T) {
	const period, deadline = 5 * time.Millisecond, 30 * time.Millisecond
	cases := []struct {
		name   string
		proto  Protocol
		isPing func([]byte) bool
		size   int
		answer func([]byte) []byte
	}{
		{
			name: "websocket", proto: webSocketV5, size: 6,
			isPing: func(b []byte) bool { return b[0] == 0x80|wsPing && b[1] == 0x80 },
			answer: func([]byte) []byte { return wsFrame(true, wsPong, nil) },
		},
		{
			name: "spdy", proto: spdyV4, size: spdyPingLen,
			isPing: func(b []byte) bool {
				return bytes.Equal(b[:8], spdyPing(t, 1)[:8]) && binary.BigEndian.Uint32(b[8:])&1 == 1
			},
			answer: func(b []byte) []byte { return b },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name+", answered", func(t *testing.T) {
			s, member := heartbeatStream(t, tc.proto, Options{HeartbeatPeriod: period, HeartbeatDeadline: deadline})
			ended := make(chan error, 1)
			go func() { _, err := io.Copy(io.Discard, s); ended <- err }()
			// Twice the deadline's worth of heartbeats, each answered.
			for range 2 * deadline / period {
				b := readN(t, member, tc.size)
				if !tc.isPing(b) {
					t.Fatalf("upstream got %x, want the gateway's heartbeat", b)
				}
				if _, err := member.Write(tc.answer(b)); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-ended:
				t.Fatalf("an upstream answering every heartbeat was cut: %v", err)
			default:
			}
		})
		t.Run(tc.name+", silent", func(t *testing.T) {
			var sum Summary
			// A deadline long enough for the error stream's SYN_STREAM to
			// reach upstream first on a loaded machine; the gateway's own
			// heartbeats may come before it.
			const deadline = time.Second
			s, member := heartbeatStream(t, tc.proto, Options{HeartbeatPeriod: period, HeartbeatDeadline: deadline, OnEnd: func(x Summary) { sum = x }})
			if tc.proto.kind == spdyChannels {
				// The error stream must be known for a Failure on it.
				syn := spdyBytes(t, synStream(1, "error"))
				go func() { _, _ = s.Write(syn) }()
				var upstream []byte
				for !bytes.Contains(upstream, syn) {
					b := make([]byte, 256)
					n, err := member.Read(b)
					if err != nil {
						t.Fatalf("upstream read %x, then %v; want the client's SYN_STREAM", upstream, err)
					}
					upstream = append(upstream, b[:n]...)
				}
			}
			go func() { _, _ = io.Copy(io.Discard, member) }()
			got, err := io.ReadAll(s)
			var silent errUpstreamSilent
			if !errors.As(err, &silent) {
				t.Fatalf("the read ended with %v, want upstream's silence", err)
			}
			if !bytes.Contains(got, []byte("timed out")) {
				t.Fatalf("the client got %q, want a Failure saying the connection timed out", got)
			}
			_ = s.Close()
			if sum.End != EndCutReported {
				t.Errorf("the stream ended %q, want %q", sum.End, EndCutReported)
			}
		})
	}
}

// TestFrameCutterAbandoned: a cutter stopped mid-frame (the server's frames
// were lost track of, so no answer could be placed) hands back what it
// held, and everything after passes on as it comes.
func TestFrameCutterAbandoned(t *testing.T) {
	ping := clientFrame(wsPing, []byte("heartbeat"))
	for at := 1; at < len(ping); at++ {
		c := frameCutter{proto: wsHeartbeats{}}
		pass, answers := c.filter(ping[:at])
		held := c.abandon()
		rest, more := c.filter(ping[at:])
		if got := cat(pass, held, rest); !bytes.Equal(got, ping) || len(answers)+len(more) > 0 {
			t.Fatalf("stopped after %d bytes: passed on %x and answered %x, want the heartbeat %x passed on", at, got, append(answers, more...), ping)
		}
	}
}

func cat(b ...[]byte) []byte { return bytes.Join(b, nil) }

// TestClientLingeringAfterTheEnd: once the read side handed the client
// the stream's end, the client's heartbeats are still taken (answered to
// nobody) within the linger, and past it its write fails, so ReverseProxy
// lets the connection go.
func TestClientLingeringAfterTheEnd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		linger  time.Duration
		wantErr error
	}{
		{"within the linger", time.Hour, nil},
		{"past the linger", 0, errClientLingered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, member := heartbeatStream(t, webSocketV5, Options{HeartbeatPeriod: time.Hour})
			s.hb.linger = tc.linger
			go func() {
				_, _ = member.Write(wsMessage(byte(Error), `{"metadata":{},"status":"Success"}`))
				_ = member.Close()
			}()
			if _, err := io.ReadAll(s); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Write(clientFrame(wsPing, nil)); !errors.Is(err, tc.wantErr) {
				t.Fatalf("a heartbeat after the end: %v, want %v", err, tc.wantErr)
			}
		})
	}
}
