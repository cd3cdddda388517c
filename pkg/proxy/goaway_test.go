package proxy

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestRequestResentAfterGoAway: karmada-apiserver takes the whole of a pod
// create on one connection, then sends a GOAWAY saying it processed no
// stream (kube-apiserver's --goaway-chance does this on purpose). The
// gateway sends the create again on a new connection, and the client gets
// karmada-apiserver's answer. Without upstream.Replayable in roundTrip the
// client got a 503 "cannot retry ... after Request.Body was written", as an
// e2e pod create did under load.
func TestRequestResentAfterGoAway(t *testing.T) {
	var conns atomic.Int32
	var goneAway atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	h2 := &http2.Server{}
	srv.TLS = &tls.Config{NextProtos: []string{"h2"}}
	srv.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		"h2": func(hs *http.Server, c *tls.Conn, h http.Handler) {
			if conns.Add(1) == 1 {
				goAwayAfterFirstRequest(t, c, &goneAway)
				return
			}
			h2.ServeConn(c, &http2.ServeConnOpts{BaseConfig: hs, Handler: h})
		},
	}
	srv.StartTLS()
	defer srv.Close()

	p := newTestProxy(t, Options{Upstream: tlsUpstreamConfig(srv)})
	gw := httptest.NewServer(p)
	defer gw.Close()
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"job-42"},"spec":{"containers":[{"name":"build","image":"busybox","command":["sh","-c","` + strings.Repeat("echo step; ", 200) + `"]}]}}`
	res, err := http.Post(gw.URL+"/api/v1/namespaces/ci/pods", "application/json", strings.NewReader(pod))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusCreated || !bytes.Equal(got, []byte(pod)) {
		t.Fatalf("create after a GOAWAY: %s %.200q, want 201 with the pod sent again whole", res.Status, got)
	}
	if !goneAway.Load() {
		t.Fatal("the first connection did not take the create and answer GOAWAY: the test proved nothing")
	}
	// The retry needs a connection of its own; the transport may have
	// dialed one more meanwhile, which proves nothing either way.
	if n := conns.Load(); n < 2 {
		t.Errorf("karmada-apiserver saw %d connection(s), want the GOAWAY'd one and another for the retry", n)
	}
}

// goAwayAfterFirstRequest speaks just enough HTTP/2 on c to read a request
// to its end (headers and the whole body), then says it processed no
// stream: GOAWAY with last stream ID 0, which it records in sent.
func goAwayAfterFirstRequest(t *testing.T, c *tls.Conn, sent *atomic.Bool) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Errorf("HTTP/2 preface: %q, %v", preface, err)
		return
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Error(err)
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Errorf("reading the request: %v", err)
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				t.Error("the create came without its body")
				return
			}
		case *http2.DataFrame:
			if !f.StreamEnded() {
				continue
			}
			sent.Store(true) // before the client can read it and retry
			if err := fr.WriteGoAway(0, http2.ErrCodeNo, nil); err != nil {
				t.Error(err)
				return
			}
			// Until the client, told its stream was not processed, closes.
			_, _ = io.Copy(io.Discard, c)
			return
		}
	}
}
