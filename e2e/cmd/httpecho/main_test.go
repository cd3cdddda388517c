package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The e2e test drives the echo through the gateway; this pins down what it
// relies on without the environment, so a broken echo fails here first.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(handler("pod"))
	t.Cleanup(srv.Close)
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http")

	t.Run("http", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/a%2Fb?q=1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if want := "pod GET /a%2Fb?q=1"; string(body) != want {
			t.Errorf("answer %q, want %q", body, want)
		}
	})

	t.Run("websocket echo", func(t *testing.T) {
		d := websocket.Dialer{Subprotocols: []string{"other", wsProtocol}}
		conn, resp, err := d.Dial(wsURL+wsPath+"?q=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if got := conn.Subprotocol(); got != wsProtocol {
			t.Errorf("subprotocol %q, want %q", got, wsProtocol)
		}
		if got, want := resp.Header.Get("X-Httpecho"), "pod GET /ws?q=1"; got != want {
			t.Errorf("X-Httpecho %q, want %q", got, want)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		for _, m := range []struct {
			typ  int
			data []byte
		}{{websocket.TextMessage, []byte("hello")}, {websocket.BinaryMessage, bytes.Repeat([]byte{0, 255}, 1<<19)}} {
			if err := conn.WriteMessage(m.typ, m.data); err != nil {
				t.Fatal(err)
			}
			typ, data, err := conn.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			if typ != m.typ || !bytes.Equal(data, m.data) {
				t.Errorf("echo of a %d-byte message of type %d: %d bytes of type %d", len(m.data), m.typ, len(data), typ)
			}
		}
		if err := conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
			t.Errorf("after our close: %v, want the echo's close 1000", err)
		}
	})

	t.Run("websocket elsewhere", func(t *testing.T) {
		conn, resp, err := websocket.DefaultDialer.Dial(wsURL+"/nope", nil)
		if err == nil {
			conn.Close()
			t.Fatal("upgraded, want a 404")
		}
		if resp == nil {
			t.Fatalf("no answer: %v", err)
		}
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("answer %s, want 404", resp.Status)
		}
		body, _ := io.ReadAll(resp.Body)
		if want := "pod: no WebSocket endpoint at /nope"; string(body) != want {
			t.Errorf("body %q, want %q", body, want)
		}
	})
}
