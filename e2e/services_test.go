package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// httpechoPort is where httpecho listens in its pod: on every address, so
// the member's kube-apiserver reaches it over the pod's IP.
const httpechoPort = 8080

// TestServiceProxy reaches a federated Service's pods through
// services/{scheme:name:port}/proxy as GitLab Runner's session server does:
// placed by its own ResourceBinding, by the one cluster of the pods it
// selects, and refused with a Status when those pods run on both members;
// then in authorize mode, for a user with services/proxy in
// karmada-apiserver only.
func TestServiceProxy(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	enableServiceProxy(t)

	karmadaCS, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	// A member Service selects the pod as in any cluster: the member's
	// endpoint-slice controller lists the pod's IP, and its kube-apiserver
	// proxies there.
	startEcho := func(t *testing.T, name, member string, labels map[string]string) {
		pod := env.ShellPod(env.Namespace, name, "")
		pod.Labels = labels
		pod.Spec.Containers[0] = env.LocalContainer("main", images.Echo, httpecho, "-name="+name, fmt.Sprintf("-listen=0.0.0.0:%d", httpechoPort))
		placePod(t, pod, []string{member}, member)
	}
	// memberEndpoints waits until the member's endpoint-slice controller
	// lists a ready endpoint of Service svc: the proxy needs one.
	memberEndpoints := func(t *testing.T, member, svc string) {
		cs, err := testEnv.MemberClient(member)
		if err != nil {
			t.Fatal(err)
		}
		sel := discoveryv1.LabelServiceName + "=" + svc
		var last string
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := cs.DiscoveryV1().EndpointSlices(env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			for _, es := range list.Items {
				for _, ep := range es.Endpoints {
					if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
						return true, nil
					}
				}
			}
			last = fmt.Sprintf("%d slices, no ready endpoint", len(list.Items))
			return false, nil
		}); err != nil {
			t.Fatalf("no ready endpoint of %s in %s (%s): %v", svc, member, last, err)
		}
	}
	// memberService creates Service svc selecting selector in member
	// directly (Karmada does not manage it; enough for passthrough mode).
	memberService := func(t *testing.T, member, svc string, selector map[string]string) {
		cs, err := testEnv.MemberClient(member)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: env.Namespace},
			Spec: corev1.ServiceSpec{
				Selector: selector,
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(httpechoPort)}},
			},
		}
		if _, err := cs.CoreV1().Services(env.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create service in %s: %v", member, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cs.CoreV1().Services(env.Namespace).Delete(ctx, svc, metav1.DeleteOptions{})
		})
		memberEndpoints(t, member, svc)
	}
	// karmadaService creates the Service template; targetPort 0 leaves it
	// to default to the port.
	karmadaService := func(t *testing.T, name string, selector map[string]string, targetPort int) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Namespace},
			Spec:       corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
		if targetPort != 0 {
			s.Spec.Ports[0].TargetPort = intstr.FromInt32(int32(targetPort))
		}
		created, err := karmadaCS.CoreV1().Services(env.Namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service in karmada-apiserver: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = karmadaCS.CoreV1().Services(env.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		})
		return created
	}
	// boundEcho serves httpecho as the Service name, placed on member by
	// the Service's own ResourceBinding.
	boundEcho := func(t *testing.T, name, member string) {
		labels := map[string]string{"echo": name}
		startEcho(t, name, member, labels)
		svc := karmadaService(t, name, nil, 0)
		memberService(t, member, name, labels)
		createServiceBinding(t, svc, member)
	}
	gw := gatewayClient(t, env.UserAdmin)
	get := func(ctx context.Context, seg, rest string) ([]byte, error) {
		return serviceProxy(ctx, gw, http.MethodGet, seg, rest)
	}
	getStatus := func(ctx context.Context, seg string) (metav1.Status, error) {
		return serviceProxyStatus(ctx, gw, http.MethodGet, seg)
	}
	// The gateway learns of a new Service by its watch: poll until it answers.
	waitAnswer := func(t *testing.T, seg, rest, want string) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			b, err := get(ctx, seg, rest)
			if err != nil {
				if ctx.Err() == nil {
					last = err.Error()
				}
				return false, nil
			}
			last = string(b)
			return last == want, nil
		})
		if err != nil {
			t.Fatalf("GET services/%s/proxy%s through the gateway: last answer %q, want %q: %v", seg, rest, last, want, err)
		}
	}

	t.Run("placed by its own binding", func(t *testing.T) {
		const name = "svcproxy-placed"
		boundEcho(t, name, "member2")
		// AbsPath escapes "%", so the pod must see a%252Fb: the escaped
		// form the client sent, unchanged by the gateway and the proxies.
		waitAnswer(t, "http:"+name+":http", "/session/a%2Fb", name+" GET /session/a%252Fb?q=a+b")
	})

	t.Run("fallback to the selected pods' cluster", func(t *testing.T) {
		const name = "svcproxy-fallback"
		labels := map[string]string{"app": name}
		startEcho(t, name, "member1", labels)
		karmadaService(t, name, labels, 0)
		memberService(t, "member1", name, labels)
		waitAnswer(t, name+":80", "/", name+" GET /?q=a+b")
	})

	// GitLab Runner's session server reaches a job service's web terminal
	// with a WebSocket through the same services/proxy path as its HTTP.
	t.Run("WebSocket", func(t *testing.T) {
		const name = "svcproxy-ws"
		boundEcho(t, name, "member1")
		seg := name + ":80"
		// Once plain HTTP answers, the gateway knows the Service.
		waitAnswer(t, seg, "/", name+" GET /?q=a+b")
		base := "/api/v1/namespaces/" + env.Namespace + "/services/" + seg + "/proxy"
		cfg, err := testEnv.GatewayConfig(env.UserAdmin)
		if err != nil {
			t.Fatal(err)
		}

		t.Run("echo", func(t *testing.T) {
			// The echo's protocol offered second: an offer narrowed to the
			// first protocol would get no subprotocol back.
			protocols := []string{"v9.unknown.e2e", httpechoWSProtocol}
			// No query: the member kube-apiserver's service proxy drops it on
			// upgrades (kubernetes/kubernetes#77142), past the gateway's reach.
			conn, resp, err := dialRawWS(t, cfg, base+httpechoWSPath, "", protocols)
			if err != nil {
				t.Fatalf("WebSocket through the gateway: %v (%s)", err, refusal(resp))
			}
			defer conn.Close()
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Errorf("handshake answered %s, want 101", resp.Status)
			}
			if got := conn.Subprotocol(); got != httpechoWSProtocol {
				t.Errorf("negotiated subprotocol %q, want %q", got, httpechoWSProtocol)
			}
			if got, want := resp.Header.Get("X-Httpecho"), name+" GET "+httpechoWSPath+"?"; got != want {
				t.Errorf("the pod saw %q, want %q", got, want)
			}
			wsEchoRoundTrips(t, conn)
			wsCloseCleanly(t, conn)
		})

		t.Run("refused upgrade relayed as-is", func(t *testing.T) {
			conn, resp, err := dialRawWS(t, cfg, base+"/no-such-ws", "", []string{httpechoWSProtocol})
			if err == nil {
				conn.Close()
				t.Fatal("upgraded, want the pod's 404")
			}
			got := refusal(resp)
			want := refusedUpgrade{code: http.StatusNotFound, body: []byte(name + ": no WebSocket endpoint at /no-such-ws")}
			if got.code != want.code || !bytes.Equal(got.body, want.body) {
				t.Fatalf("answer %s, want %s (%v)", got, want, err)
			}
		})
	})

	t.Run("selected pods on both members", func(t *testing.T) {
		const name = "svcproxy-both"
		labels := map[string]string{"app": name}
		for _, m := range []string{"member1", "member2"} {
			pod := sleepPod(name + "-" + m)
			pod.Labels = labels
			placePod(t, pod, []string{m}, m)
		}
		karmadaService(t, name, labels, 0)
		var st metav1.Status
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			st, last = getStatus(ctx, name)
			return last == nil && st.Code == http.StatusConflict, nil
		})
		if err != nil {
			t.Fatalf("want a 409 Conflict Status, last %+v, %v", st, last)
		}
		if msg := st.Message; st.Reason != metav1.StatusReasonConflict || !strings.Contains(msg, "member1") || !strings.Contains(msg, "member2") {
			t.Errorf("Status %q does not name both candidate clusters", msg)
		}
	})

	t.Run("no such service", func(t *testing.T) {
		st, err := getStatus(ctx, "svcproxy-missing")
		if err != nil || st.Code != http.StatusNotFound || st.Reason != metav1.StatusReasonNotFound ||
			st.Message != `services "svcproxy-missing" not found` {
			t.Fatalf("want the NotFound Status, got %+v, %v", st, err)
		}
	})

	// Last: it restarts the gateway in authorize mode. exec-karmada-only may
	// get services/proxy in karmada-apiserver but not use clusters/proxy,
	// so only the gateway acting as itself lets it through.
	t.Run("authorize mode", func(t *testing.T) {
		const name = "svcproxy-authz"
		seg := "http:" + name + ":http"
		// Acting as itself, the gateway reaches only Karmada's copy of the
		// Service (a member Service of that name Karmada does not manage
		// gets a 409), so Karmada creates the member Service from the
		// template here, selector and targetPort included, and the member's
		// endpoint-slice controller lists the pod.
		labels := map[string]string{"echo": name}
		startEcho(t, name, "member1", labels)
		svc := karmadaService(t, name, labels, httpechoPort)
		createServiceBinding(t, svc, "member1")
		memberEndpoints(t, "member1", name)
		want := name + " GET /?q=a+b"
		waitAnswer(t, seg, "/", want)
		// And one whose member1 Service was created there directly:
		// Karmada refuses to apply over it, and passthrough mode reaches
		// it (the member authorizes the caller), authorize mode must not.
		const local = "svcproxy-local"
		localSeg := "http:" + local + ":http"
		boundEcho(t, local, "member1")
		waitAnswer(t, localSeg, "/", local+" GET /?q=a+b")

		// Passthrough mode lets karmada-apiserver judge the caller's own
		// credentials on a GET of the Service before naming a member, so
		// exec-karmada-only, without get on services, gets that refusal.
		karmadaOnly := gatewayClient(t, env.UserExecKarmadaOnly)
		if st, err := serviceProxyStatus(ctx, karmadaOnly, http.MethodGet, seg); err != nil ||
			st.Code != http.StatusForbidden || !strings.Contains(st.Message, `User "exec-karmada-only" cannot get resource "services"`) {
			t.Fatalf("passthrough mode: want karmada-apiserver's 403 on services for %s, got %+v, %v", env.UserExecKarmadaOnly, st, err)
		}

		restartGatewayFor(t, []string{"--enable-service-proxy", "--auth-mode=authorize"}, "--enable-service-proxy")

		// /readyz waited for the caches, the Service's among them, but
		// Karmada may not have reported the copy applied yet (503).
		var (
			body    []byte
			lastErr error
		)
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			body, lastErr = serviceProxy(ctx, karmadaOnly, http.MethodGet, seg, "/")
			return lastErr == nil || !apierrors.IsServiceUnavailable(lastErr), nil
		})
		if lastErr != nil || string(body) != want {
			t.Fatalf("authorize mode: GET as %s answered %q, %v; want %q", env.UserExecKarmadaOnly, body, lastErr, want)
		}
		// The member-local Service: Karmada's refusal, quoted in a 409,
		// once Karmada has reported it (a 503 until then).
		var localSt metav1.Status
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			localSt, _ = serviceProxyStatus(ctx, karmadaOnly, http.MethodGet, localSeg)
			return localSt.Code != http.StatusServiceUnavailable, nil
		})
		if localSt.Code != http.StatusConflict || !strings.Contains(localSt.Message, "Karmada will not manage this resource") {
			t.Errorf("authorize mode: GET of the member-local Service as %s: %+v, want a 409 quoting Karmada's refusal", env.UserExecKarmadaOnly, localSt)
		}
		// GitLab's session server opens its WebSocket with a GET, which
		// stays get (pods/exec's create check does not apply): get is all
		// exec-karmada-only has.
		cfg, err := testEnv.GatewayConfig(env.UserExecKarmadaOnly)
		if err != nil {
			t.Fatal(err)
		}
		wsPath := "/api/v1/namespaces/" + env.Namespace + "/services/" + seg + "/proxy" + httpechoWSPath
		conn, resp, err := dialRawWS(t, cfg, wsPath, "", []string{httpechoWSProtocol})
		if err != nil {
			t.Fatalf("authorize mode: WebSocket as %s: %v (%s)", env.UserExecKarmadaOnly, err, refusal(resp))
		}
		defer conn.Close()
		wsEchoRoundTrips(t, conn)
		wsCloseCleanly(t, conn)

		// Only get is granted, and kube-apiserver authorizes a POST as create.
		wantMsg := fmt.Sprintf(`services %q is forbidden: User %q cannot create resource "services/proxy" in API group "" in the namespace %q`,
			seg, env.UserExecKarmadaOnly, env.Namespace)
		if st, err := serviceProxyStatus(ctx, karmadaOnly, http.MethodPost, seg); err != nil ||
			st.Code != http.StatusForbidden || st.Reason != metav1.StatusReasonForbidden || st.Message != wantMsg {
			t.Errorf("authorize mode: POST as %s: got %+v, %v; want 403 %q", env.UserExecKarmadaOnly, st, err, wantMsg)
		}

		// A user without services/proxy gets the very Status karmada-apiserver
		// itself answers the same request with.
		fromGateway, err := serviceProxyStatus(ctx, gatewayClient(t, env.UserNoExec), http.MethodGet, seg)
		if err != nil {
			t.Fatal(err)
		}
		karmadaCS, err := testEnv.KarmadaClient(env.UserNoExec)
		if err != nil {
			t.Fatal(err)
		}
		fromKarmada, err := serviceProxyStatus(ctx, karmadaCS, http.MethodGet, seg)
		if err != nil {
			t.Fatal(err)
		}
		if fromGateway.Code != http.StatusForbidden || !reflect.DeepEqual(fromGateway, fromKarmada) {
			t.Errorf("authorize mode: GET as %s through the gateway answered\n %+v\nkarmada-apiserver answers\n %+v", env.UserNoExec, fromGateway, fromKarmada)
		}
	})
}

// serviceProxy sends method to services/<seg>/proxy<rest> (with ?q=a+b)
// through client.
func serviceProxy(ctx context.Context, client kubernetes.Interface, method, seg, rest string) ([]byte, error) {
	return client.CoreV1().RESTClient().Verb(method).
		AbsPath("/api/v1/namespaces/"+env.Namespace+"/services/"+seg+"/proxy"+rest).
		Param("q", "a b").DoRaw(ctx)
}

// serviceProxyStatus is serviceProxy to seg's root for an answer that must
// be a Status: client-go keeps the body of an error but does not decode it
// for a proxy request.
func serviceProxyStatus(ctx context.Context, client kubernetes.Interface, method, seg string) (metav1.Status, error) {
	var st metav1.Status
	body, err := serviceProxy(ctx, client, method, seg, "/")
	if err == nil {
		return st, fmt.Errorf("got %q, want a Status", body)
	}
	if jerr := json.Unmarshal(body, &st); jerr != nil || st.Kind != "Status" {
		return st, fmt.Errorf("answer %q (%v) is not a Status", body, err)
	}
	return st, nil
}

// httpecho's WebSocket echo (see cmd/httpecho).
const (
	httpechoWSPath     = "/ws"
	httpechoWSProtocol = "echo.httpecho.e2e"
)

// wsEchoRoundTrips sends text and binary messages, one of 1 MiB (many
// frames, since the dialer's write buffer is smaller), one at a time, and
// checks that each comes back whole, with its type.
func wsEchoRoundTrips(t *testing.T, conn *websocket.Conn) {
	t.Helper()
	big := make([]byte, 1<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	msgs := []struct {
		typ  int
		data []byte
	}{
		{websocket.TextMessage, []byte("hello through services/proxy")},
		{websocket.BinaryMessage, []byte{0, 1, 2, 0xff, '\r', '\n'}},
		{websocket.BinaryMessage, big},
		{websocket.TextMessage, []byte("après le gros")},
	}
	// A deadline, so a lost echo fails the test instead of hanging it.
	if err := conn.SetReadDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		if err := conn.WriteMessage(m.typ, m.data); err != nil {
			t.Fatalf("send message %d: %v", i, err)
		}
		typ, data, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("read the echo of message %d: %v", i, err)
		}
		if sent, got := sha256.Sum256(m.data), sha256.Sum256(data); typ != m.typ || sent != got {
			t.Errorf("message %d: sent %d bytes of type %d (sha256 %x), got %d bytes of type %d (sha256 %x)",
				i, len(m.data), m.typ, sent[:8], len(data), typ, got[:8])
		}
	}
}

// wsCloseCleanly closes with 1000, expects the peer's 1000 back, then the
// end of the connection: a tunnel left open after the close handshake
// would be the gateway's leak.
func wsCloseCleanly(t *testing.T, conn *websocket.Conn) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	if err := conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "done"), deadline); err != nil {
		t.Fatalf("send close: %v", err)
	}
	if err := conn.SetReadDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after our close: %v, want the peer's close 1000", err)
	}
	if _, err := conn.NetConn().Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) || err == nil {
		t.Errorf("the connection stayed open after the close handshake (read: %v)", err)
	}
}

// enableServiceProxy grants the gateway list/watch on services and restarts
// it with --enable-service-proxy, both undone when t ends.
func enableServiceProxy(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	cs, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	const rbacName = "e2e:gateway-services"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rbacName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: env.UserGateway}},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, rbacName, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(ctx, rbacName, metav1.DeleteOptions{})
	})
	// RestartGateway keeps the previous arguments when given none, so the
	// restore names the flag.
	restartGatewayFor(t, []string{"--enable-service-proxy"}, "--enable-service-proxy=false")
}

// restartGatewayFor restarts the gateway with args for the rest of t, and
// with restore when t ends.
func restartGatewayFor(t *testing.T, args []string, restore ...string) {
	t.Helper()
	if err := testEnv.RestartGateway(t.Context(), args...); err != nil {
		t.Fatalf("restart gateway with %q: %v", args, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testEnv.RestartGateway(ctx, restore...); err != nil {
			t.Errorf("restore gateway with %q: %v", restore, err)
		}
	})
}

// createServiceBinding places svc on cluster the way Karmada records it: a
// ResourceBinding in the Service's namespace whose spec.resource is it.
func createServiceBinding(t *testing.T, svc *corev1.Service, cluster string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	b := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": karmada.ResourceBindingGVR.GroupVersion().String(),
		"kind":       "ResourceBinding",
		"metadata":   map[string]any{"name": karmada.BindingName(svc.Name, "Service"), "namespace": svc.Namespace},
		"spec": map[string]any{
			"resource": map[string]any{
				"apiVersion": "v1", "kind": "Service", "namespace": svc.Namespace, "name": svc.Name, "uid": string(svc.UID),
			},
			"clusters": []any{map[string]any{"name": cluster}},
		},
	}}
	client := dyn.Resource(karmada.ResourceBindingGVR).Namespace(svc.Namespace)
	if _, err := client.Create(t.Context(), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ResourceBinding: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Delete(ctx, b.GetName(), metav1.DeleteOptions{})
	})
}
