package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

// TestStreamLimitEveryRoute: with --max-streams-per-client=2, one token
// opens two streams on each route a long-lived response can take through
// the real gateway, karmada-apiserver, Karmada's cluster proxy and a member,
// and a third: the third gets the 429 Status. The cluster-proxy log follow
// is the request that once went through uncounted. pods/proxy stays open as
// a WebSocket to the pod's echo server, over its pod IP. (services/proxy,
// which needs a federated Service, is pkg/proxy's TestStreamLimitEveryRoute.)
func TestStreamLimitEveryRoute(t *testing.T) {
	dumpLogsOnFailure(t)
	const perClient = 2
	const name, member = "stream-limit", "member2"
	pod := env.ShellPod(env.Namespace, name, "")
	pod.Spec.Containers[0] = env.LocalContainer("main", images.Echo, httpecho, "-name="+name, fmt.Sprintf("-listen=0.0.0.0:%d", httpechoPort))
	placePod(t, pod, []string{member}, member)
	restartGatewayFor(t, []string{"--max-streams-per-client=" + strconv.Itoa(perClient)}, "--max-streams-per-client=200")

	clusterProxy := "/apis/cluster.karmada.io/v1alpha1/clusters/" + member + "/proxy"
	podPath := "/api/v1/namespaces/" + env.Namespace + "/pods/" + name
	exec := podPath + "/exec?command=sleep&command=60&stdout=true"
	spdy := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}, "X-Stream-Protocol-Version": {"v4.channel.k8s.io"}}
	ws := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key": {"ZTJlLWxpbWl0cy1rZXkxMg=="}, "Sec-Websocket-Protocol": {httpechoWSProtocol}}
	routes := []struct {
		name, method, target string
		header               http.Header
	}{
		{"pod log follow", http.MethodGet, podPath + "/log?follow=true", nil},
		{"pod exec", http.MethodPost, exec, spdy},
		{"watch", http.MethodGet, "/api/v1/namespaces/" + env.Namespace + "/pods?watch=true", nil},
		{"cluster proxy log follow", http.MethodGet, clusterProxy + podPath + "/log?follow=true", nil},
		{"cluster proxy watch", http.MethodGet, clusterProxy + "/api/v1/namespaces/" + env.Namespace + "/pods?watch=1", nil},
		{"cluster proxy exec", http.MethodPost, clusterProxy + exec, spdy},
		{"pod proxy WebSocket", http.MethodGet, fmt.Sprintf("%s:%d/proxy%s", podPath, httpechoPort, httpechoWSPath), ws},
	}
	token := testEnv.Token(env.UserAdmin)
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			// The previous route's streams free their slots once the gateway
			// sees their connections closed, so the first opens may wait.
			for i := range perClient {
				var code int
				err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
					conn, c := openStream(t, rt.method, rt.target, token, rt.header)
					code = c
					if c == http.StatusTooManyRequests {
						conn.Close()
						return false, nil
					}
					t.Cleanup(func() { conn.Close() })
					return true, nil
				})
				if err != nil || (code != http.StatusOK && code != http.StatusSwitchingProtocols) {
					t.Fatalf("stream %d: HTTP %d, %v", i+1, code, err)
				}
			}
			u := testEnv.GatewayURL() + rt.target
			st := rawStatusWithHeader(t, rt.method, u, token, rt.header)
			if st.Code != http.StatusTooManyRequests || st.Details == nil || st.Details.RetryAfterSeconds != 1 {
				t.Errorf("stream %d of %d: %+v, want the 429 Status", perClient+1, perClient, st)
			}
		})
	}
}

// openStream sends one request to the gateway on its own connection and
// reads the response head, leaving the connection (and the stream) open.
func openStream(t *testing.T, method, target, token string, header http.Header) (net.Conn, int) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(testEnv.CAPEM()) {
		t.Fatal("environment CA is not PEM")
	}
	gw, err := url.Parse(testEnv.GatewayURL())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", gw.Host, &tls.Config{RootCAs: pool, ServerName: gw.Hostname(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(time.Minute)) // a failing test must not hang
	req, err := http.NewRequest(method, testEnv.GatewayURL()+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusTooManyRequests {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		t.Fatalf("%s %s: HTTP %d %s", method, target, resp.StatusCode, body)
	}
	return conn, resp.StatusCode
}
