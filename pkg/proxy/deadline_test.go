package proxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

// hangingUpstream answers admission checks at once and hangs every request
// hang selects until the test ends; other requests get what serve writes.
func hangingUpstream(t *testing.T, hang func(*http.Request) bool, serve http.HandlerFunc) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang(r) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		if proxytest.IsAdmissionCheck(r) {
			proxytest.Admitting(http.NotFoundHandler()).ServeHTTP(w, r)
			return
		}
		serve(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv
}

// TestHungUpstreamIs504: an upstream that accepts a request and never
// answers costs the client --upstream-header-timeout and a 504 Status
// naming what hung, for every kind of request the gateway sends upstream.
// Without upstream.RoundTripWithin (in roundTrip and getAccepting) each case waits
// until the client gives up.
func TestHungUpstreamIs504(t *testing.T) {
	const timeout = 200 * time.Millisecond
	all := func(*http.Request) bool { return true }
	notAdmission := func(r *http.Request) bool { return !proxytest.IsAdmissionCheck(r) }
	tests := []struct {
		name, method, target string
		header               http.Header
		hang                 func(*http.Request) bool
		want                 string
	}{
		{"passthrough GET", "GET", "/api/v1/namespaces/ci/configmaps", nil, all, "karmada-apiserver"},
		{"passthrough watch", "GET", "/api/v1/namespaces/ci/configmaps?watch=true", nil, all, "karmada-apiserver"},
		{"admission check of an exec", "POST", "/api/v1/namespaces/ci/pods/job-1/exec?command=ls",
			http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}, all, "karmada-apiserver"},
		{"member's 101 of an exec", "POST", "/api/v1/namespaces/ci/pods/job-1/exec?command=ls",
			http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}, notAdmission, `cluster "` + proxytest.Cluster + `"`},
		{"member's log", "GET", "/api/v1/namespaces/ci/pods/job-1/log", nil, notAdmission, `cluster "` + proxytest.Cluster + `"`},
		// A kubelet answers a follow's headers at once: one that does not
		// hangs, as any request.
		{"member's log follow", "GET", "/api/v1/namespaces/ci/pods/job-1/log?follow=true", nil, notAdmission, `cluster "` + proxytest.Cluster + `"`},
		{"an exec that says follow=true", "POST", "/api/v1/namespaces/ci/pods/job-1/exec?command=ls&follow=true",
			http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}, notAdmission, `cluster "` + proxytest.Cluster + `"`},
		{"passthrough with follow=true", "GET", "/api/v1/namespaces/ci/configmaps?follow=true", nil, all, "karmada-apiserver"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := hangingUpstream(t, tt.hang, func(w http.ResponseWriter, r *http.Request) {})
			p := newTestProxy(t, Options{Upstream: &rest.Config{Host: up.URL}, UpstreamHeaderTimeout: timeout})
			gw := httptest.NewServer(p)
			defer gw.Close()
			req, _ := http.NewRequest(tt.method, gw.URL+tt.target, nil)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			client := &http.Client{Timeout: 20 * time.Second}
			start := time.Now()
			res, err := client.Do(req)
			if err != nil {
				t.Fatalf("client gave up: %v", err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("answered after %s with a %s timeout", took, timeout)
			}
			st := proxytest.DecodeStatus(t, res.Header.Get("Content-Type"), body)
			if res.StatusCode != http.StatusGatewayTimeout || st.Code != http.StatusGatewayTimeout || st.Reason != "Timeout" ||
				!strings.Contains(st.Message, tt.want) || !strings.Contains(st.Message, "--upstream-header-timeout") {
				t.Errorf("got %d %+v, want a 504 Timeout Status naming %s", res.StatusCode, st, tt.want)
			}
		})
	}
}

// TestHeaderTimeoutSparesStreams: the deadline is on the response headers
// only. A watch, and a log follow of a silent container (its headers come
// at once, as a kubelet sends them, then nothing for a while), that run
// past it are not cut.
func TestHeaderTimeoutSparesStreams(t *testing.T) {
	const timeout = 200 * time.Millisecond
	// Each stream outlives the timeout by a wide margin, observed by the
	// upstream holding its answer until the client has waited that long.
	const outlive = 5 * timeout
	up := hangingUpstream(t, func(*http.Request) bool { return false }, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if !proxytest.StaySilent(r, outlive) { // no event, no line for a while
			return
		}
		io.WriteString(w, "line\n")
	})
	p := newTestProxy(t, Options{Upstream: &rest.Config{Host: up.URL}, UpstreamHeaderTimeout: timeout})
	gw := httptest.NewServer(p)
	defer gw.Close()
	for _, target := range []string{
		"/api/v1/namespaces/ci/configmaps?watch=true",
		"/api/v1/namespaces/ci/pods/job-1/log?follow=true",
	} {
		start := time.Now()
		res, err := http.Get(gw.URL + target)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		res.Body.Close()
		if res.StatusCode != http.StatusOK || line != "line\n" || err != nil {
			t.Errorf("%s: %d %q %v, want 200 and the line sent after %s", target, res.StatusCode, line, err, outlive)
		}
		if took := time.Since(start); took < outlive {
			t.Errorf("%s: answered after %s, before the upstream sent its line", target, took)
		}
	}
}
