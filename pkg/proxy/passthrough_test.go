package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

func TestPassthroughWatchIsFlushedPerEvent(t *testing.T) {
	next := make(chan struct{})
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan" {
			t.Errorf("query = %q", r.URL.RawQuery)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Transfer-Encoding", "chunked")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p%d"}}}`+"\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}))
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	defer upstream.Close()
	p := newTestProxy(t, Options{Upstream: tlsUpstreamConfig(upstream)})
	gw := httptest.NewServer(p)
	defer gw.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", gw.URL+"/api/v1/namespaces/ci/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ {
		// The upstream writes the next event only after this one arrived, so
		// any buffering in the gateway blocks here until the deadline.
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf(`"name":"p%d"`, i); !strings.Contains(line, want) {
			t.Fatalf("event %d = %q", i, line)
		}
		next <- struct{}{}
	}
}

func TestPassthroughIsByteForByte(t *testing.T) {
	up := &proxytest.RecordingUpstream{}
	upstream := httptest.NewTLSServer(up)
	defer upstream.Close()
	cfg := tlsUpstreamConfig(upstream)
	cfg.BearerToken = "gateway-token" // passthrough mode never uses it
	p := newTestProxy(t, Options{Upstream: cfg})

	body := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {a: \"\\u00e9\"}\n\x00\xff trailing bytes \r\n"
	header := http.Header{
		"Content-Type":                   {"application/apply-patch+yaml"},
		"Authorization":                  {"Bearer caller-token"},
		"Impersonate-User":               {"someone"},
		"Impersonate-Group":              {"g1", "g2"},
		"Accept":                         {"application/json;as=Table;v=v1;g=meta.k8s.io,application/json"},
		"User-Agent":                     {"kubectl/v1.37.2 (linux/amd64) kubernetes/abc"},
		"X-Custom":                       {"one", "two"},
		"X-Forwarded-For":                {"10.1.2.3"},
		"Kubectl-Command":                {"kubectl apply"},
		"Accept-Encoding":                {"identity"},
		"X-Kubernetes-Pf-Flowschema-Uid": {"abc"},
	}
	target := "/api/v1/namespaces/ci/pods/p?fieldManager=kubectl&force=true&fieldValidation=Strict"
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, proxytest.RawRequest(t, "PATCH", target, header, body))
	if rec.Code != 200 {
		t.Fatalf("code %d: %s", rec.Code, rec.Body)
	}
	reqs := up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	got := reqs[0]
	if got.RequestURI != target || got.Method != "PATCH" {
		t.Errorf("request line %s %s", got.Method, got.RequestURI)
	}
	if !bytes.Equal(got.Body, []byte(body)) {
		t.Errorf("body changed:\n got %q\nwant %q", got.Body, body)
	}
	for k, v := range header {
		if !reflect.DeepEqual(got.Header[k], v) {
			t.Errorf("header %s = %q, want %q", k, got.Header[k], v)
		}
	}
	for k := range got.Header {
		if _, sent := header[k]; !sent && k != "Content-Length" {
			t.Errorf("gateway added header %s: %q", k, got.Header[k])
		}
	}
	if want := strings.TrimPrefix(upstream.URL, "https://"); got.Host != want {
		t.Errorf("Host %q, want %q", got.Host, want)
	}

	// Without client forwarding headers, none are added.
	rec = httptest.NewRecorder()
	p.ServeHTTP(rec, proxytest.RawRequest(t, "GET", "/apis", http.Header{"Accept": {"application/json"}}, ""))
	reqs = up.Requests()
	if last := reqs[len(reqs)-1]; last.RequestURI != "/apis" || len(last.Header.Values("X-Forwarded-For")) != 0 ||
		last.Header.Get("Forwarded") != "" || last.Header.Get("X-Forwarded-Host") != "" || last.Header.Get("Authorization") != "" {
		t.Errorf("discovery request changed: %+v", last)
	}
}

// TestCutStreamAborts: an upstream that dies in the middle of a
// chunked body must not look like a clean end to the client.
func TestCutStreamAborts(t *testing.T) {
	upstream := httptest.NewServer(proxytest.Admitting(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "first line\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close() // no terminating chunk
	})))
	defer upstream.Close()
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: upstream.URL}})
	gw := httptest.NewServer(p)
	defer gw.Close()

	resp, err := http.Get(gw.URL + "/api/v1/namespaces/ci/pods/p/log?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read %q, err %v; want an unexpected EOF", got, err)
	}
	if string(got) != "first line\n" {
		t.Errorf("got %q before the cut", got)
	}
}
