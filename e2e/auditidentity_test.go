package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// TestAuditIdentitiesMatchKarmada: the gateway's audit events name the
// caller as karmada-apiserver's own audit log names it for the same
// credential and impersonation: user (who authenticated: a static-token
// user, an admin impersonating, a ServiceAccount's TokenRequest token with
// its groups and credential-id extra) and impersonatedUser, in passthrough
// mode (learnt from karmada-apiserver's SelfSubjectReview) and in authorize
// mode (its TokenReview), on a refusal as on a request let through. A token
// sent as a WebSocket bearer subprotocol is the same caller and the same
// credential hash as in Authorization.
func TestAuditIdentitiesMatchKarmada(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const pod = "identities"
	placePod(t, sleepPod(pod), []string{"member1"}, "member1")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	saToken := podReaderToken(ctx, t, "identity-runner")

	dir := t.TempDir()
	modes := []string{"passthrough", "authorize"}
	gateways := map[string]*env.ExtraGateway{}
	for _, mode := range modes {
		gw, err := testEnv.StartExtraGateway(ctx, "gateway-identity-"+mode, "--auth-mode="+mode,
			"--audit-log-path="+filepath.Join(dir, mode+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.Stop)
		gateways[mode] = gw
	}
	type caller struct {
		name      string
		token     string
		header    http.Header // besides the token
		websocket bool        // the gateway gets the token as a WebSocket subprotocol
	}
	callers := []caller{
		{name: "user", token: testEnv.Token(env.UserExecOnly)},
		{name: "impersonating", token: testEnv.Token(env.UserAdmin), header: http.Header{"Impersonate-User": {env.UserExecOnly}}},
		{name: "serviceaccount", token: saToken},
		{name: "websocket", token: testEnv.Token(env.UserExecOnly), websocket: true},
	}
	karmadaTLS, err := rest.TLSConfigFor(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	send := func(url, method, agent string, c caller, viaWebSocket bool) {
		t.Helper()
		h := c.header.Clone()
		if h == nil {
			h = http.Header{}
		}
		h.Set("User-Agent", agent)
		if viaWebSocket {
			d := websocket.Dialer{TLSClientConfig: karmadaTLS, HandshakeTimeout: 30 * time.Second,
				Subprotocols: []string{"v5.channel.k8s.io", identity.WebSocketBearerPrefix + base64.RawURLEncoding.EncodeToString([]byte(c.token))}}
			conn, res, err := d.DialContext(ctx, "wss"+url[len("https"):], h)
			if err != nil {
				t.Logf("%s: the WebSocket exec: %v (%v)", agent, err, res)
				return
			}
			_ = conn.Close()
			return
		}
		h.Set("Authorization", "Bearer "+c.token)
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h
		res, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: karmadaTLS}}).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	podPath := "/api/v1/namespaces/" + env.Namespace + "/pods/" + pod
	for _, mode := range modes {
		for _, c := range callers {
			agent := fmt.Sprintf("identity-%s-%s", mode, c.name)
			send(testEnv.KarmadaURL()+podPath, http.MethodGet, agent, c, false)
			send(gateways[mode].URL()+podPath+"/exec?command=true&stdout=true", map[bool]string{false: http.MethodPost, true: http.MethodGet}[c.websocket], agent, c, c.websocket)
		}
	}

	credentials := map[string]string{}
	for _, mode := range modes {
		logPath := filepath.Join(dir, mode+".log")
		for _, c := range callers {
			agent := fmt.Sprintf("identity-%s-%s", mode, c.name)
			var theirs, ours *auditv1.Event
			if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				theirs, ours = byAgent(readAuditLog(t, testEnv.KarmadaAuditLog()), agent, ""), byAgent(readAuditLog(t, logPath), agent, auditv1.StageResponseComplete)
				return theirs != nil && ours != nil, nil
			}); err != nil {
				t.Errorf("%s: karmada-apiserver's event %v, the gateway's %v", agent, theirs != nil, ours != nil)
				continue
			}
			if !sameUser(&theirs.User, &ours.User) || !sameUser(theirs.ImpersonatedUser, ours.ImpersonatedUser) {
				t.Errorf("%s: the gateway wrote user %+v impersonatedUser %+v; karmada-apiserver wrote user %+v impersonatedUser %+v",
					agent, ours.User, ours.ImpersonatedUser, theirs.User, theirs.ImpersonatedUser)
			}
			if ours.User.Username == "" {
				t.Errorf("%s: no user (%s)", agent, ours.Annotations["gateway.karmada.io/user-unknown"])
			}
			credentials[mode+"/"+c.name] = ours.Annotations["gateway.karmada.io/credential"]
		}
		if a, b := credentials[mode+"/user"], credentials[mode+"/websocket"]; a == "" || a != b {
			t.Errorf("%s: one token hashes to %q in Authorization and %q as a WebSocket subprotocol", mode, a, b)
		}
	}
}

// byAgent is the last event of stage ("" any) whose userAgent is agent.
func byAgent(events []auditv1.Event, agent string, stage auditv1.Stage) *auditv1.Event {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].UserAgent == agent && (stage == "" || events[i].Stage == stage) {
			return &events[i]
		}
	}
	return nil
}

// sameUser compares two audit UserInfos, groups in any order.
func sameUser(a, b *authnv1.UserInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ga, gb := slices.Sorted(slices.Values(a.Groups)), slices.Sorted(slices.Values(b.Groups))
	if a.Username != b.Username || a.UID != b.UID || !slices.Equal(ga, gb) || len(a.Extra) != len(b.Extra) {
		return false
	}
	for k, v := range a.Extra {
		if !slices.Equal(v, b.Extra[k]) {
			return false
		}
	}
	return true
}

// podReaderToken is a TokenRequest token of a new ServiceAccount name in
// Namespace of karmada-apiserver that may get pods there, and nothing else.
func podReaderToken(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	client, err := kubernetes.NewForConfig(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.RbacV1().RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = client.RbacV1().Roles(ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = client.CoreV1().ServiceAccounts(ns).Delete(ctx, name, metav1.DeleteOptions{})
	})
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
