package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	uexec "k8s.io/client-go/util/exec"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// Member access modes, as --member-access names them.
const (
	accessClusterProxy = "cluster-proxy"
	accessDirect       = "direct"
)

// accessGateways are extra gateways by auth mode, then member access.
type accessGateways map[string]map[string]*env.ExtraGateway

// startAccessGateways starts one gateway per auth mode and member access,
// the service proxy on, stopped when t ends.
func startAccessGateways(t *testing.T) accessGateways {
	t.Helper()
	gws := accessGateways{}
	for _, mode := range []string{"passthrough", "authorize"} {
		gws[mode] = map[string]*env.ExtraGateway{}
		for _, access := range []string{accessClusterProxy, accessDirect} {
			gw, err := testEnv.StartExtraGateway(t.Context(), "gateway-"+mode+"-"+access,
				"--auth-mode="+mode, "--member-access="+access, "--enable-service-proxy")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(gw.Stop)
			gws[mode][access] = gw
		}
	}
	return gws
}

// verdict is what a caller got for a request: its status code (101 for an
// upgrade), the Status reason, and for a merged events list whether the
// member's events were missing (the merge's Warning).
type verdict struct {
	Code    int
	Reason  metav1.StatusReason
	Warning bool
}

// probeRoute is one request of the differential test.
type probeRoute struct {
	name, method, target string
	header               http.Header
}

func spdyHeader(protocol string) http.Header {
	return http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}, "X-Stream-Protocol-Version": {protocol}}
}

func websocketHeader() http.Header {
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	return http.Header{
		"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key":      {base64.StdEncoding.EncodeToString(key)},
		"Sec-Websocket-Protocol": {"v5.channel.k8s.io, v4.channel.k8s.io"},
	}
}

// probeCaller is whom a probe authenticates as.
type probeCaller struct {
	name, token string
	header      http.Header // Impersonate-*
}

// probe sends r to base as c over HTTP/1.1 and reads the verdict; an
// upgrade's connection, a follow's body, is closed once its headers came.
func probe(ctx context.Context, t *testing.T, rt http.RoundTripper, base string, c probeCaller, r probeRoute) (verdict, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.method, base+r.target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	if k := req.Header.Get("Sec-Websocket-Key"); k != "" {
		req.Header = websocketHeader() // a fresh key per request
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := rt.RoundTrip(req)
	if err != nil {
		return verdict{Code: -1}, err.Error()
	}
	defer res.Body.Close()
	v := verdict{Code: res.StatusCode, Warning: res.Header.Get("Warning") != ""}
	if res.StatusCode == http.StatusSwitchingProtocols || res.StatusCode == http.StatusOK && strings.Contains(r.target, "follow=true") {
		return v, ""
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		v.Reason = st.Reason
		return v, st.Message
	}
	return v, fmt.Sprintf("%.200q", body)
}

// http1Transport trusts the environment's CA and speaks HTTP/1.1 only, as
// the upgrades need.
func http1Transport(t *testing.T) *http.Transport {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: caPool(t, testEnv), MinVersion: tls.VersionTLS12},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// serviceAccountCaller is a TokenRequest token of a new ServiceAccount
// name in Namespace of karmada-apiserver with the executors' pod rules
// there and clusters/proxy bound to it and its namespace's group (as
// passthrough callers need: Karmada's unified-auth controller lets the
// cluster proxy impersonate only what such bindings list); with
// memberRBAC, the same pod rules in every member for its user.
func serviceAccountCaller(t *testing.T, name string, memberRBAC bool) probeCaller {
	t.Helper()
	ctx := t.Context()
	client, err := kubernetes.NewForConfig(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace
	user := "system:serviceaccount:" + ns + ":" + name
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "e2e:executor"},
		Subjects:   []rbacv1.Subject{sa},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e:" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e:cluster-proxy"},
		Subjects: []rbacv1.Subject{sa,
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"},
			{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var memberClients []kubernetes.Interface
	for _, m := range testEnv.Members() {
		if !memberRBAC {
			break
		}
		cs, err := testEnv.MemberClient(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "e2e:executor"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		memberClients = append(memberClients, cs)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.RbacV1().ClusterRoleBindings().Delete(ctx, "e2e:"+name, metav1.DeleteOptions{})
		_ = client.RbacV1().RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = client.CoreV1().ServiceAccounts(ns).Delete(ctx, name, metav1.DeleteOptions{})
		for _, cs := range memberClients {
			_ = cs.RbacV1().RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
	})
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return probeCaller{name: name, token: tr.Status.Token}
}

// echoService serves httpecho from a pod on member behind a Service of the
// same name in karmada-apiserver and in member (Karmada does not manage the
// member's: the gateway places the Service by the pods it selects).
func echoService(t *testing.T, name, member string) {
	t.Helper()
	ctx := t.Context()
	labels := map[string]string{"echo": name}
	pod := env.ShellPod(env.Namespace, name, "")
	pod.Labels = labels
	pod.Spec.Containers[0] = env.LocalContainer("main", images.Echo, httpecho, "-name="+name, fmt.Sprintf("-listen=0.0.0.0:%d", httpechoPort))
	placePod(t, pod, []string{member}, member)
	svc := func() *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Namespace},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(httpechoPort)},
			}},
		}
	}
	karmadaCS, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	memberCS, err := testEnv.MemberClient(member)
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range []kubernetes.Interface{karmadaCS, memberCS} {
		if _, err := cs.CoreV1().Services(env.Namespace).Create(ctx, svc(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cs.CoreV1().Services(env.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
}

// TestDirectMemberAccess runs gateways reaching members directly
// (--member-access=direct) beside gateways reaching them through Karmada's
// cluster proxy, in both auth modes. It is not parallel: its restarts kill
// karmada-apiserver and the aggregated apiserver, which nothing else may
// see.
func TestDirectMemberAccess(t *testing.T) {
	dumpLogsOnFailure(t)
	gws := startAccessGateways(t)
	t.Run("the gateway holds no member credential", testGatewayHoldsNoMemberCredential)
	t.Run("same decisions as the cluster proxy", func(t *testing.T) { testDirectDifferential(t, gws) })
	t.Run("20 MB TTY arrives whole", func(t *testing.T) { testLargeTTYWhole(t, gws) })
	t.Run("streams outlive the control plane", func(t *testing.T) { testStreamsOutliveControlPlane(t, gws) })
}

// testGatewayHoldsNoMemberCredential: with the chart's RBAC on the real
// karmada-apiserver, the gateway's identity may not read a Secret a
// Cluster names (the secretRef one holds a member ServiceAccount bound to
// */*/* beside the CA) nor list Secrets there; it reads the Secret
// member-trust publishes, by name, and that holds each member's
// impersonator token and CA, nothing else: no value of it is a secretRef
// Secret's token. (The direct gateways' requests in the other subtests
// show direct access works on these members with that RBAC.)
func testGatewayHoldsNoMemberCredential(t *testing.T) {
	ctx := t.Context()
	gw, err := testEnv.KarmadaClient(env.UserGateway)
	if err != nil {
		t.Fatal(err)
	}
	admin := karmadaClient(t)
	clusters, err := dynamic.NewForConfig(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	list, err := clusters.Resource(karmada.ClusterGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	var secretRefTokens [][]byte
	for _, u := range list.Items {
		var c karmada.Cluster
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
			t.Fatal(err)
		}
		for _, ref := range []*karmada.LocalSecretRef{c.Spec.SecretRef, c.Spec.ImpersonatorSecretRef} {
			if ref == nil {
				continue
			}
			if _, err := gw.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("the gateway's identity reading Secret %s/%s of Cluster %s: %v; want it forbidden", ref.Namespace, ref.Name, c.Name, err)
			}
			if _, err := gw.CoreV1().Secrets(ref.Namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("the gateway's identity listing Secrets in %s: %v; want it forbidden", ref.Namespace, err)
			}
		}
		want[c.Name+".token"] = true
		if c.Spec.SecretRef != nil {
			want[c.Name+".caBundle"] = true
			s, err := admin.CoreV1().Secrets(c.Spec.SecretRef.Namespace).Get(ctx, c.Spec.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tok := s.Data["token"]; len(tok) > 0 {
				secretRefTokens = append(secretRefTokens, tok)
			}
		}
	}
	if len(secretRefTokens) == 0 {
		t.Fatal("no Cluster's secretRef Secret holds a token: the check below would prove nothing")
	}
	published, err := gw.CoreV1().Secrets(env.KarmadaCluster).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + env.MemberTrustSecret})
	if err != nil || len(published.Items) != 1 {
		t.Fatalf("the gateway's identity listing its one Secret by name: %v, %v", published, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := gw.CoreV1().Secrets(env.KarmadaCluster).Get(ctx, env.MemberTrustSecret, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for k, v := range s.Data {
			if !want[k] {
				t.Errorf("the published Secret holds %s", k)
			}
			for _, tok := range secretRefTokens {
				if bytes.Equal(v, tok) {
					t.Errorf("the published Secret's %s is a secretRef Secret's token", k)
				}
			}
		}
		return len(s.Data) == len(want), nil
	})
	if err != nil {
		t.Errorf("the published Secret does not hold every Cluster's token and CA (%v): %v", slices.Collect(maps.Keys(want)), err)
	}
}

// testDirectDifferential: every caller gets, for every route to a pod on
// each member, the same status code, reason and Status message from a
// direct gateway as from a cluster-proxy one of the same auth mode (and a
// merged events list the same Warning or none).
func testDirectDifferential(t *testing.T, gws accessGateways) {
	token := testEnv.Token
	callers := []probeCaller{
		{name: "admin", token: token(env.UserAdmin)},
		{name: "exec-only", token: token(env.UserExecOnly)},
		{name: "exec-only without clusters/proxy", token: token(env.UserExecKarmadaOnly)},
		{name: "group not bound", token: token(env.UserExecGroupUnbound)},
		{name: "no exec", token: token(env.UserNoExec)},
		{name: "--as exec-only", token: token(env.UserAdmin), header: http.Header{
			"Impersonate-User": {env.UserExecOnly}, "Impersonate-Group": {env.GroupExecutors}}},
		{name: "bad token", token: "not-a-token"},
	}
	sa := serviceAccountCaller(t, "direct-diff-sa", true)
	sa.name = "ServiceAccount"
	saNoMember := serviceAccountCaller(t, "direct-diff-sa-nomember", false)
	saNoMember.name = "ServiceAccount, member RBAC missing"
	callers = append(callers, sa, saNoMember)
	for _, member := range testEnv.Members() {
		t.Run(member, func(t *testing.T) { testDirectDifferentialOn(t, gws, member, callers) })
	}
}

func testDirectDifferentialOn(t *testing.T, gws accessGateways, member string, callers []probeCaller) {
	pod, echo := "direct-diff-"+member, "direct-diff-echo-"+member
	placePod(t, env.ShellPod(env.Namespace, pod, tickerScript), []string{member}, member)
	echoService(t, echo, member)
	ctx := t.Context()

	podPath := "/api/v1/namespaces/" + env.Namespace + "/pods/" + pod
	routes := []probeRoute{
		{"exec SPDY", http.MethodPost, podPath + "/exec?command=true&stdout=true", spdyHeader("v4.channel.k8s.io")},
		{"exec WebSocket", http.MethodGet, podPath + "/exec?command=true&stdout=true", websocketHeader()},
		{"attach", http.MethodPost, podPath + "/attach?stdout=true&container=main", spdyHeader("v4.channel.k8s.io")},
		{"log", http.MethodGet, podPath + "/log?tailLines=1", nil},
		{"logs -f", http.MethodGet, podPath + "/log?follow=true&tailLines=1", nil},
		{"port-forward", http.MethodPost, podPath + "/portforward", spdyHeader("portforward.k8s.io")},
		{"pods/proxy", http.MethodGet, "/api/v1/namespaces/" + env.Namespace + "/pods/" + echo + fmt.Sprintf(":%d", httpechoPort) + "/proxy/", nil},
		{"services/proxy", http.MethodGet, "/api/v1/namespaces/" + env.Namespace + "/services/" + echo + ":80/proxy/", nil},
		{"merged events", http.MethodGet, "/api/v1/namespaces/" + env.Namespace + "/events?fieldSelector=" + url.QueryEscape("involvedObject.name="+pod), nil},
	}
	rt := http1Transport(t)
	// Karmada's unified-auth controller lets the members' impersonator
	// impersonate a new ServiceAccount asynchronously; the echo's Service
	// and endpoints come up asynchronously too.
	cpPass := gws["passthrough"][accessClusterProxy].URL()
	for _, w := range []struct {
		caller probeCaller
		route  probeRoute
		want   int
	}{{callers[7], routes[0], http.StatusSwitchingProtocols}, {callers[0], routes[7], http.StatusOK}} {
		var last string
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			v, msg := probe(ctx, t, rt, cpPass, w.caller, w.route)
			last = fmt.Sprintf("%d %s", v.Code, msg)
			return v.Code == w.want, nil
		}); err != nil {
			t.Fatalf("%s %s through the cluster proxy never answered %d (last: %s)", w.caller.name, w.route.name, w.want, last)
		}
	}

	// A few anchors, so that the comparison cannot pass on two gateways
	// that both fail the same way.
	anchors := map[string]map[string]int{
		"passthrough": {"admin|exec SPDY": 101, "exec-only|exec WebSocket": 101, "ServiceAccount|logs -f": 200,
			"exec-only without clusters/proxy|exec SPDY": 403, "bad token|exec SPDY": 401, "admin|services/proxy": 200},
		"authorize": {"exec-only without clusters/proxy|exec SPDY": 101, "bad token|attach": 401, "no exec|exec SPDY": 403},
	}
	var table []string
	for _, mode := range []string{"passthrough", "authorize"} {
		t.Run(mode, func(t *testing.T) {
			cp, direct := gws[mode][accessClusterProxy].URL(), gws[mode][accessDirect].URL()
			for _, c := range callers {
				for _, r := range routes {
					want, wantMsg := probe(ctx, t, rt, cp, c, r)
					got, gotMsg := probe(ctx, t, rt, direct, c, r)
					table = append(table, fmt.Sprintf("%s | %s | %s | %d %s | %d %s", mode, c.name, r.name, want.Code, want.Reason, got.Code, got.Reason))
					// A Status's message too: a 403 of the member where
					// karmada-apiserver's belongs has the same code and
					// reason, and says another thing.
					if got != want || want.Reason != "" && gotMsg != wantMsg {
						t.Errorf("%s, %s: direct %+v (%s), cluster proxy %+v (%s)", c.name, r.name, got, gotMsg, want, wantMsg)
					}
					if code, ok := anchors[mode][c.name+"|"+r.name]; ok && want.Code != code {
						t.Errorf("%s, %s through the cluster proxy: %d (%s), want %d", c.name, r.name, want.Code, wantMsg, code)
					}
				}
			}
		})
	}
	sort.Strings(table)
	t.Logf("%s: mode | caller | route | cluster proxy | direct\n%s", member, strings.Join(table, "\n"))
}

// liveExec is an exec or attach whose command echoes each stdin line back
// as "echo:<line>".
type liveExec struct {
	stdin *io.PipeWriter
	out   syncBuffer
	done  chan error
	seq   int
}

func startLiveExec(ctx context.Context, t *testing.T, exe remotecommand.Executor) *liveExec {
	t.Helper()
	r, w := io.Pipe()
	x := &liveExec{stdin: w, done: make(chan error, 1)}
	go func() { x.done <- exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: r, Stdout: &x.out}) }()
	return x
}

// roundTrip sends a line and waits for its echo.
func (x *liveExec) roundTrip(ctx context.Context, name string) error {
	x.seq++
	line := fmt.Sprintf("%s-%d", name, x.seq)
	if _, err := io.WriteString(x.stdin, line+"\n"); err != nil {
		return fmt.Errorf("write %q: %w", line, err)
	}
	return waitString(ctx, &x.out, "echo:"+line+"\n", 20*time.Second)
}

// liveFollow is a logs -f of a pod running tickerScript; every line must
// follow the one before (tick-N, tick-N+1): a byte lost or repeated shows.
type liveFollow struct {
	lines chan string
	done  chan error
	last  int
}

func startLiveFollow(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod string) *liveFollow {
	t.Helper()
	rc, err := cs.CoreV1().Pods(env.Namespace).GetLogs(pod, &corev1.PodLogOptions{Follow: true, TailLines: new(int64(1))}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	f := &liveFollow{lines: make(chan string, 1024), done: make(chan error, 1), last: -1}
	go func() {
		sc := bufio.NewScanner(rc)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
		f.done <- sc.Err()
	}()
	return f
}

// roundTrip reads three more lines, each the one after the last.
func (f *liveFollow) roundTrip(ctx context.Context, _ string) error {
	for range 3 {
		select {
		case l := <-f.lines:
			var n int
			if _, err := fmt.Sscanf(l, "tick-%d", &n); err != nil {
				return fmt.Errorf("followed line %q is no tick-N", l)
			}
			if f.last >= 0 && n != f.last+1 {
				return fmt.Errorf("followed tick-%d after tick-%d: lines lost or repeated", n, f.last)
			}
			f.last = n
		case err := <-f.done:
			return fmt.Errorf("follow ended: %v", err)
		case <-time.After(20 * time.Second):
			return errors.New("no followed line for 20s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// livePortForward forwards a local port to a tcpecho pod's port with
// client-go's SPDY port-forwarder, as kubectl does.
type livePortForward struct {
	addr string
	stop chan struct{}
	done chan error
	seq  uint64
}

func startLivePortForward(t *testing.T, cfg *rest.Config, pod, remote string) *livePortForward {
	t.Helper()
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host + "/api/v1/namespaces/" + env.Namespace + "/pods/" + pod + "/portforward")
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	pf := &livePortForward{stop: make(chan struct{}), done: make(chan error, 1)}
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + remote}, pf.stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	go func() { pf.done <- fw.ForwardPorts() }()
	t.Cleanup(pf.close)
	select {
	case <-ready:
	case err := <-pf.done:
		t.Fatalf("port-forward to %s: %v", pod, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("port-forward to %s not ready in 30s", pod)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("port-forward ports %v: %v", ports, err)
	}
	pf.addr = fmt.Sprintf("127.0.0.1:%d", ports[0].Local)
	return pf
}

func (pf *livePortForward) roundTrip(ctx context.Context, _ string) error {
	pf.seq++
	return echoRoundTrip(ctx, pf.addr, 256<<10, pf.seq)
}

func (pf *livePortForward) close() {
	select {
	case <-pf.stop:
	default:
		close(pf.stop)
	}
}

// liveSet is what one gateway holds open across the restarts: an exec
// over SPDY and one over WebSocket, an attach, a logs -f and a
// port-forward, as exec-only.
type liveSet struct {
	name    string
	execs   map[string]*liveExec
	attach  *liveExec
	follow  *liveFollow
	forward *livePortForward
}

// roundTrips has every stream of s carry something and checks it came
// back whole.
func (s *liveSet) roundTrips(ctx context.Context) error {
	var errs []error
	for kind, x := range s.execs {
		if err := x.roundTrip(ctx, s.name+"-"+kind); err != nil {
			errs = append(errs, fmt.Errorf("%s exec: %w", kind, err))
		}
	}
	if err := s.attach.roundTrip(ctx, s.name+"-attach"); err != nil {
		errs = append(errs, fmt.Errorf("attach: %w", err))
	}
	if err := s.follow.roundTrip(ctx, ""); err != nil {
		errs = append(errs, fmt.Errorf("logs -f: %w", err))
	}
	if err := s.forward.roundTrip(ctx, ""); err != nil {
		errs = append(errs, fmt.Errorf("port-forward: %w", err))
	}
	return errors.Join(errs...)
}

const echoLinesScript = `while read -r l; do echo "echo:$l"; done`

// openLiveSet opens s's streams through gw to the pods of the restarts
// test.
func openLiveSet(ctx context.Context, t *testing.T, name string, gw *env.ExtraGateway, attachPod, tickPod, echoPod, echoPort string) *liveSet {
	t.Helper()
	cfg := gw.Config(env.UserExecOnly)
	s := &liveSet{name: name, execs: map[string]*liveExec{}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc := cs.CoreV1().RESTClient()
	for _, kind := range []string{"spdy", "websocket"} {
		u := rc.Post().Resource("pods").Namespace(env.Namespace).Name(tickPod).SubResource("exec").
			Param("container", "main").Param("command", "sh").Param("command", "-c").Param("command", echoLinesScript).
			Param("stdin", "true").Param("stdout", "true").URL()
		s.execs[kind] = startLiveExec(ctx, t, execExecutor(t, kind, cfg, u))
	}
	u := rc.Post().Resource("pods").Namespace(env.Namespace).Name(attachPod).SubResource("attach").
		Param("container", "main").Param("stdin", "true").Param("stdout", "true").URL()
	s.attach = startLiveExec(ctx, t, execExecutor(t, "spdy", cfg, u))
	s.follow = startLiveFollow(ctx, t, cs, tickPod)
	s.forward = startLivePortForward(t, cfg, echoPod, echoPort)
	if err := s.roundTrips(ctx); err != nil {
		t.Fatalf("%s: streams before the restarts: %v", name, err)
	}
	return s
}

// livePods are the pods the restarts test streams to on one member.
type livePods struct{ attach, ticks, echo, echoPort string }

func placeLivePods(t *testing.T, member string) livePods {
	t.Helper()
	p := livePods{attach: "direct-live-attach-" + member, ticks: "direct-live-ticks-" + member, echo: "direct-live-echo-" + member}
	attach := env.ShellPod(env.Namespace, p.attach, echoLinesScript)
	attach.Spec.Containers[0].Stdin = true
	createPlacedPod(t, attach, []string{member})
	createPlacedPod(t, env.ShellPod(env.Namespace, p.ticks, tickerScript), []string{member})
	echo := env.ShellPod(env.Namespace, p.echo, "")
	echo.Spec.Containers[0] = env.LocalContainer("main", images.Echo, tcpecho)
	createPlacedPod(t, echo, []string{member})
	for _, name := range []string{p.attach, p.ticks, p.echo} {
		waitPlaced(t, name, member)
	}
	p.echoPort = tcpEchoPort(t, testEnv.GatewayKubeconfig(env.UserExecOnly), p.echo)
	return p
}

// ciJob is a CI job's script run as the executors run it, started before
// the restarts and ended after them: GitLab Runner's legacy strategy (a
// SPDY exec of sh with the script on stdin, closed after it) or Jenkins'
// kubernetes plugin (a WebSocket exec of sh, the script written to its
// stdin, which stays open). The script prints job-0, job-1, ... every
// 100 ms until the file its name says exists, then exits 3.
type ciJob struct {
	name  string
	out   syncBuffer
	done  chan error
	stdin *io.PipeWriter
}

func startCIJob(ctx context.Context, t *testing.T, cfg *rest.Config, kind, pod, name string) *ciJob {
	t.Helper()
	u := gatewayClientFor(t, cfg).CoreV1().RESTClient().Post().Resource("pods").Namespace(env.Namespace).Name(pod).SubResource("exec").
		Param("container", "main").Param("command", "sh").Param("stdin", "true").Param("stdout", "true").Param("stderr", "true").URL()
	j := &ciJob{name: name, done: make(chan error, 1)}
	script := fmt.Sprintf("i=0; while [ ! -e /tmp/%s ]; do echo job-$i; i=$((i+1)); sleep 0.1; done; exit 3\n", name)
	var stdin io.Reader
	if kind == "spdy" {
		stdin = strings.NewReader(script)
	} else {
		r, w := io.Pipe()
		j.stdin, stdin = w, r
		go func() { _, _ = io.WriteString(w, script) }()
	}
	exe := execExecutor(t, kind, cfg, u)
	go func() {
		j.done <- exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &j.out, Stderr: &j.out})
	}()
	if err := waitString(ctx, &j.out, "job-3\n", 30*time.Second); err != nil {
		t.Fatalf("job %s did not start: %v", name, err)
	}
	return j
}

// end has the job's script end, with a kubectl exec into pod through
// kubeconfig, and checks it ended with its exit code and every line, in
// order.
func (j *ciJob) end(ctx context.Context, t *testing.T, kubeconfig, pod string) {
	t.Helper()
	if _, _, err := testEnv.RunKubectl(ctx, kubeconfig, nil, "exec", pod, "-c", "main", "--", "touch", "/tmp/"+j.name); err != nil {
		t.Fatalf("end job %s: %v", j.name, err)
	}
	select {
	case err := <-j.done:
		var exit uexec.ExitError
		if !errors.As(err, &exit) || exit.ExitStatus() != 3 {
			t.Errorf("job %s ended with %v, want its exit code 3", j.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("job %s did not end 30s after its script was told to", j.name)
	}
	lines := strings.Split(strings.TrimSuffix(j.out.String(), "\n"), "\n")
	for i, l := range lines {
		if l != fmt.Sprintf("job-%d", i) {
			t.Errorf("job %s: line %d is %q, want job-%d: output lost or repeated", j.name, i, l, i)
			break
		}
	}
	t.Logf("job %s: %d lines, exit code 3", j.name, len(lines))
}

func gatewayClientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// testStreamsOutliveControlPlane: through a direct gateway, in both auth
// modes, streams to every member (exec over SPDY and WebSocket, attach,
// logs -f, port-forward) keep flowing, bytes intact, and CI jobs (GitLab
// Runner's legacy exec, Jenkins' WebSocket exec) run to their exit code,
// while karmada-apiserver and then karmada-aggregated-apiserver are killed
// and started again; new requests meanwhile get a Status at once. Through
// a cluster-proxy gateway the same streams and jobs end, which the README
// says.
func testStreamsOutliveControlPlane(t *testing.T, gws accessGateways) {
	pods := map[string]livePods{}
	for _, m := range testEnv.Members() {
		pods[m] = placeLivePods(t, m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	type opened struct {
		sets []*liveSet
		jobs map[*ciJob]string // job -> its pod
	}
	open := func(prefix, mode, access string) opened {
		gw := gws[mode][access]
		o := opened{jobs: map[*ciJob]string{}}
		for m, p := range pods {
			name := prefix + "-" + m
			o.sets = append(o.sets, openLiveSet(ctx, t, name, gw, p.attach, p.ticks, p.echo, p.echoPort))
			for _, kind := range []string{"spdy", "websocket"} {
				o.jobs[startCIJob(ctx, t, gw.Config(env.UserExecOnly), kind, p.ticks, name+"-job-"+kind)] = p.ticks
			}
		}
		return o
	}
	direct := []opened{open("direct-passthrough", "passthrough", accessDirect), open("direct-authorize", "authorize", accessDirect)}
	flowing := func(after string) {
		t.Helper()
		for _, o := range direct {
			for _, s := range o.sets {
				if err := s.roundTrips(ctx); err != nil {
					t.Errorf("%s, %s: %v", s.name, after, err)
				}
			}
		}
	}
	restarted := map[string]bool{}
	t.Cleanup(func() {
		// A failed step must not leave the environment without its
		// control plane.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for p, up := range restarted {
			if !up {
				if err := testEnv.StartControlPlane(ctx, p); err != nil {
					t.Errorf("start %s again: %v", p, err)
				}
			}
		}
	})
	rt := http1Transport(t)
	anyPod := pods[testEnv.Members()[0]].ticks
	for _, proc := range []string{env.ProcessKarmadaAPIServer, env.ProcessAggregatedAPIServer} {
		// Through the cluster proxy: what its streams and jobs do.
		viaProxy := open("cluster-proxy-"+strings.TrimPrefix(proc, "karmada-"), "passthrough", accessClusterProxy)
		restarted[proc] = false
		if err := testEnv.KillControlPlane(proc); err != nil {
			t.Fatal(err)
		}
		flowing(proc + " killed")
		if proc == env.ProcessKarmadaAPIServer {
			// A new request needs karmada-apiserver in passthrough mode
			// (the admission check): a Status at once, never a hang. In
			// authorize mode the gateway's own decisions are cached
			// (--auth-cache-ttl), so an exec the caller just made may be
			// served; any other answer is a Status.
			for _, mode := range []string{"passthrough", "authorize"} {
				start := time.Now()
				v, msg := probe(ctx, t, rt, gws[mode][accessDirect].URL(), probeCaller{name: "exec-only", token: testEnv.Token(env.UserExecOnly)},
					probeRoute{"exec SPDY", http.MethodPost, "/api/v1/namespaces/" + env.Namespace + "/pods/" + anyPod + "/exec?command=true&stdout=true", spdyHeader("v4.channel.k8s.io")})
				took := time.Since(start)
				t.Logf("%s: a new exec while %s is down: %d %s (%s) in %s", mode, proc, v.Code, v.Reason, msg, took)
				served := mode == "authorize" && v.Code == http.StatusSwitchingProtocols
				if !served && (v.Code < 500 || v.Reason == "") || took > 40*time.Second {
					t.Errorf("%s: a new exec while %s is down got %d %q (%s) after %s, want a 5xx Status within the deadlines", mode, proc, v.Code, v.Reason, msg, took)
				}
			}
		}
		if err := testEnv.StartControlPlane(ctx, proc); err != nil {
			t.Fatalf("start %s again: %v", proc, err)
		}
		restarted[proc] = true
		flowing(proc + " started again")
		// Through the cluster proxy, what was open ended: the README says so.
		for _, s := range viaProxy.sets {
			endedWithError(t, s.name+"'s SPDY exec", proc, s.execs["spdy"].done)
		}
		for j := range viaProxy.jobs {
			endedWithError(t, "job "+j.name, proc, j.done)
		}
	}
	for _, o := range direct {
		for j, pod := range o.jobs {
			j.end(ctx, t, testEnv.GatewayKubeconfig(env.UserExecOnly), pod)
		}
		// stdin closed: each exec's command ends and its exit status
		// arrives through the same stream.
		for _, s := range o.sets {
			for kind, x := range s.execs {
				_ = x.stdin.Close()
				select {
				case err := <-x.done:
					if err != nil {
						t.Errorf("%s %s exec after the restarts ended with %v, want its exit status 0", s.name, kind, err)
					}
				case <-time.After(30 * time.Second):
					t.Errorf("%s %s exec did not end 30s after its stdin closed", s.name, kind)
				}
			}
		}
	}
}

// endedWithError checks that what, open through the cluster proxy when
// proc was killed, ended with an error within 30 s.
func endedWithError(t *testing.T, what, proc string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Logf("through the cluster proxy, %s, open while %s was killed, ended with: %v", what, proc, err)
		if err == nil {
			t.Errorf("through the cluster proxy, %s ended as a success while %s was killed", what, proc)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("through the cluster proxy, %s outlived the kill of %s: the README says it does not", what, proc)
	}
}

// testLargeTTYWhole: a TTY exec printing 20 MB, over SPDY and WebSocket,
// arrives whole with its exit status through a direct gateway (through
// Karmada's cluster proxy it was seen to end after 11 to 17 MB:
// TestLargeTTYOutputIsWholeOrReported).
func testLargeTTYWhole(t *testing.T, gws accessGateways) {
	const size = 20_000_000
	member := testEnv.Members()[0]
	pod := "direct-large-tty"
	placePod(t, sleepPod(pod), []string{member}, member)
	cfg := gws["passthrough"][accessDirect].Config(env.UserExecOnly)
	script := "head -c 20000000 /dev/zero | tr '\\\\0' x"
	for _, kind := range []string{"spdy", "websocket"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			u := gatewayClientFor(t, cfg).CoreV1().RESTClient().Post().Resource("pods").Namespace(env.Namespace).Name(pod).
				SubResource("exec").Param("command", "sh").Param("command", "-c").Param("command", script).
				Param("stdout", "true").Param("tty", "true").URL()
			var out countingWriter
			err := execExecutor(t, kind, cfg, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Tty: true})
			if got := out.n.Load(); err != nil || got != size {
				t.Errorf("%s: %d of %d bytes, ended with %v; want all and exit status 0", kind, got, size, err)
			}
		})
	}
}
