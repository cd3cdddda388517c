package nodeagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// echoServer accepts on 127.0.0.1 and echoes every connection: the "pod"
// shares the host loopback.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestPortForward(t *testing.T) {
	ta := startAgent(t)
	ta.createPod(pod("pf", v1.RestartPolicyNever, "sleep", "600"))
	ta.waitRunning("pf")
	port := echoServer(t)
	u := ta.url("/portForward/ci/pf", nil)

	// What kubectl does: SPDY, or SPDY tunnelled through WebSocket.
	dialers := map[string]func() httpstream.Dialer{
		"spdy": func() httpstream.Dialer {
			transport, upgrader, err := spdy.RoundTripperFor(ta.config)
			if err != nil {
				t.Fatal(err)
			}
			return spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
		},
		"spdy over websocket": func() httpstream.Dialer {
			d, err := portforward.NewSPDYOverWebsocketDialer(u, ta.config)
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	}
	for name, dialer := range dialers {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ta.ctx)
			defer cancel()
			ready := make(chan struct{})
			fw, err := portforward.NewOnAddressesWithContext(ctx, dialer(), []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, ready, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- fw.ForwardPorts() }()
			select {
			case <-ready:
			case err := <-done:
				t.Fatalf("port-forward ended before ready: %v", err)
			}
			ports, err := fw.GetPorts()
			if err != nil || len(ports) != 1 {
				t.Fatalf("ports %v, %v", ports, err)
			}
			// Two connections through one forward, each a full round trip.
			for i := range 2 {
				conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))))
				if err != nil {
					t.Fatal(err)
				}
				msg := make([]byte, 256<<10)
				_, _ = rand.Read(msg)
				go func() { _, _ = conn.Write(msg) }()
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(conn, got); err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				if !bytes.Equal(got, msg) {
					t.Fatalf("connection %d: echo differs", i)
				}
				conn.Close()
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, portforward.ErrLostConnectionToPod) {
				t.Fatalf("ForwardPorts: %v", err)
			}
		})
	}

	t.Run("unknown pod is refused", func(t *testing.T) {
		transport, upgrader, err := spdy.RoundTripperFor(ta.config)
		if err != nil {
			t.Fatal(err)
		}
		d := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, ta.url("/portForward/ci/nope", nil))
		if conn, _, err := d.Dial(portforward.PortForwardProtocolV1Name); err == nil {
			conn.Close()
			t.Fatal("dial to an unknown pod succeeded")
		}
	})
}
