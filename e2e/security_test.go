package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

// TestPassthroughRefusalsDiscloseNothing: in passthrough mode a caller
// karmada-apiserver refuses (no credentials, a token it does not know)
// learns from an exec through the gateway exactly what karmada-apiserver
// tells it for a GET of the pod, whether the pod runs in a member or does
// not exist: never which member, nor whether it is placed.
func TestPassthroughRefusalsDiscloseNothing(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const placed = "disclose-placed"
	placePod(t, sleepPod(placed), []string{"member2"}, "member2")

	for _, caller := range []struct{ name, token string }{
		{"anonymous", ""},
		{"unknown token", "not-a-token-karmada-apiserver-knows"},
	} {
		for _, pod := range []string{placed, "disclose-missing"} {
			t.Run(caller.name+"/"+pod, func(t *testing.T) {
				podPath := "/api/v1/namespaces/" + env.Namespace + "/pods/" + pod
				direct := rawStatus(t, http.MethodGet, testEnv.KarmadaURL()+podPath, caller.token)
				through := rawStatus(t, http.MethodPost, testEnv.GatewayURL()+podPath+"/exec?command=true&stdout=true", caller.token)
				if direct.Code < 400 || direct.Code >= 500 {
					t.Fatalf("karmada-apiserver answered a GET of the pod with %+v, want a refusal", direct)
				}
				if through.Code != direct.Code || through.Reason != direct.Reason || through.Message != direct.Message {
					t.Errorf("exec through the gateway answered %+v, want karmada-apiserver's own refusal %+v", through, direct)
				}
				for _, m := range testEnv.Members() {
					if strings.Contains(through.Message, m) {
						t.Errorf("refusal %q names member %s", through.Message, m)
					}
				}
			})
		}
	}
}

// rawStatus sends method to url with token (none when empty), once (no
// retry of a 503 as client-go would), and decodes the answer from the wire,
// which must be a v1 Status whose code is the HTTP code.
func rawStatus(t *testing.T, method, url, token string) metav1.Status {
	t.Helper()
	return rawStatusWithHeader(t, method, url, token, nil)
}

// rawStatusWithHeader is rawStatus sending header as well.
func rawStatusWithHeader(t *testing.T, method, url, token string, header http.Header) metav1.Status {
	t.Helper()
	code, body := rawAnswerWithHeader(t, method, url, token, header)
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" || st.APIVersion != "v1" {
		t.Fatalf("%s %s answered %d %q, want a v1 Status", method, url, code, body)
	}
	if int(st.Code) != code {
		t.Errorf("%s %s: HTTP %d but Status code %d", method, url, code, st.Code)
	}
	return st
}

// rawAnswer sends method to url with token (none when empty), once, and
// returns the HTTP code and the body as they came.
func rawAnswer(t *testing.T, method, url, token string) (int, []byte) {
	t.Helper()
	return rawAnswerWithHeader(t, method, url, token, nil)
}

// rawAnswerWithHeader is rawAnswer sending header as well.
func rawAnswerWithHeader(t *testing.T, method, url, token string, header http.Header) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	tlsCfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: testEnv.CAPEM()}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, body
}

// expectSubprotocolTokenExec execs through the gateway over a WebSocket
// whose only credential is the bearer token in the
// base64url.bearer.authorization.k8s.io subprotocol, as browser terminals
// (GitLab's web terminal) send it, with the v1 channel.k8s.io protocol.
func expectSubprotocolTokenExec(t *testing.T, mode, user, pod string) {
	t.Helper()
	cfg, err := testEnv.GatewayConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	tokenProtocol := "base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(cfg.BearerToken))
	cfg = rest.CopyConfig(cfg)
	cfg.BearerToken = ""
	q := "command=sh&command=-c&command=echo+subprotocol-token-42&stdout=true&stderr=true"
	s, refused, err := dialWS(t, cfg, "/api/v1/namespaces/"+env.Namespace+"/pods/"+pod+"/exec", q, []string{tokenProtocol, "channel.k8s.io"})
	if err != nil {
		t.Errorf("%s mode: WebSocket exec as %s with the token in a subprotocol: %v (%s)", mode, user, err, refused)
		return
	}
	if s.protocol != "channel.k8s.io" {
		t.Errorf("%s mode: negotiated subprotocol %q, want channel.k8s.io", mode, s.protocol)
	}
	if err := s.waitClosed(30 * time.Second); err != nil {
		t.Errorf("%s mode: %v", mode, err)
		return
	}
	if got, want := s.text(chStdout), "subprotocol-token-42\n"; got != want {
		t.Errorf("%s mode: exec printed %q (error channel %q), want %q", mode, got, s.text(chError), want)
	}
}

// TestPodProxy: pods/{name:port}/proxy and pods/{scheme:name:port}/proxy,
// which karmada-apiserver cannot serve for a pod template, go to the pod's
// member through Karmada's cluster proxy and on to the pod over its pod IP,
// as in any cluster: the gateway counts them as its podproxy route, and the
// HTTP server in the pod answers with the method, path and query it saw,
// the same through the gateway as through the cluster proxy by hand.
func TestPodProxy(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name, member = "podproxy", "member2"
	pod := env.ShellPod(env.Namespace, name, "")
	pod.Spec.Containers[0] = env.LocalContainer("main", images.Echo, httpecho, "-name="+name, fmt.Sprintf("-listen=0.0.0.0:%d", httpechoPort))
	placePod(t, pod, []string{member}, member)
	token := testEnv.Token(env.UserAdmin)
	// The server listens a moment after its container started: on loaded
	// cores the first request could find the port closed (503 "connection
	// refused" from the member's apiserver).
	ready := testEnv.KarmadaURL() + "/apis/cluster.karmada.io/v1alpha1/clusters/" + member + "/proxy/api/v1/namespaces/" + env.Namespace + "/pods/" + fmt.Sprintf("%s:%d", name, httpechoPort) + "/proxy/"
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _ := rawAnswer(t, http.MethodGet, ready, token)
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the pod's server did not answer through the cluster proxy within 30s: %v", err)
	}
	for _, seg := range []string{fmt.Sprintf("%s:%d", name, httpechoPort), fmt.Sprintf("http:%s:%d", name, httpechoPort)} {
		path := "/api/v1/namespaces/" + env.Namespace + "/pods/" + seg + "/proxy/session/a%2Fb?q=a+b"
		// kube-apiserver's pod proxy hands the pod the path decoded.
		want := name + " GET /session/a/b?q=a+b"
		byHand := rawGet(t, testEnv.KarmadaURL()+"/apis/cluster.karmada.io/v1alpha1/clusters/"+member+"/proxy"+path, token)
		if byHand != want {
			t.Fatalf("GET %s through the cluster proxy by hand answered %q, want the pod's %q", path, byHand, want)
		}
		routed := countRoute(t, "podproxy", "200")
		if through := rawGet(t, testEnv.GatewayURL()+path, token); through != byHand {
			t.Errorf("GET %s through the gateway answered %q, want what the pod answers by hand, %q", path, through, byHand)
		}
		routed.check(t, 1)
	}
}

// rawGet GETs url with token and returns the body of a 200 answer.
func rawGet(t *testing.T, url, token string) string {
	t.Helper()
	code, body := rawAnswer(t, http.MethodGet, url, token)
	if code != http.StatusOK {
		t.Fatalf("GET %s answered %d %q, want 200", url, code, body)
	}
	return string(body)
}
