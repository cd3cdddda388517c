package standin

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/transport"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

const frontProxyCN = "front-proxy-client"

// aggregatedFixture is the aggregated API on an httptest TLS server, with
// what a test needs to call it as kube-aggregator would.
type aggregatedFixture struct {
	srv        *httptest.Server
	store      *clusterStore
	servingCA  *testCA
	frontProxy tls.Certificate // signed by the front-proxy CA, CN front-proxy-client
	otherCN    tls.Certificate // same CA, CN not allowed
	foreign    tls.Certificate // another CA
	watchLists atomic.Int32    // watches that asked for sendInitialEvents
}

func newAggregatedFixture(t *testing.T, kube *k8sfake.Clientset, members map[string]*memberTransport) *aggregatedFixture {
	t.Helper()
	servingCA := newTestCA(t, "serving-ca")
	frontCA := newTestCA(t, "front-proxy-ca")
	foreignCA := newTestCA(t, "foreign-ca")
	f := &aggregatedFixture{
		store:      newClusterStore(),
		servingCA:  servingCA,
		frontProxy: frontCA.issue(t, frontProxyCN, true),
		otherCN:    frontCA.issue(t, "someone-else", true),
		foreign:    foreignCA.issue(t, frontProxyCN, true),
	}
	if kube == nil {
		kube = k8sfake.NewClientset()
	}
	h := newAggregatedHandler(aggregatedOptions{
		Store:                     f.store,
		Karmada:                   kube,
		Members:                   members,
		RequestHeaderCAs:          frontCA.pool(),
		RequestHeaderAllowedNames: []string{frontProxyCN},
	})
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			f.watchLists.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	f.srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{servingCA.issue(t, "karmada-aggregated-apiserver", false)},
		ClientAuth:   tls.RequestClientCert,
	}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

// client returns an HTTP client presenting cert (none when nil).
func (f *aggregatedFixture) client(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: f.servingCA.pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}

// restConfig is a client-go config that authenticates as kube-aggregator
// forwarding user.
func (f *aggregatedFixture) restConfig(t *testing.T, user string, groups []string) *rest.Config {
	certPEM, keyPEM := pemPair(t, f.frontProxy)
	return &rest.Config{
		Host: f.srv.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   f.servingCA.pem,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return transport.NewAuthProxyRoundTripper(user, "", groups, nil, rt)
		},
	}
}

func (f *aggregatedFixture) get(t *testing.T, cert *tls.Certificate, path string, headers http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := f.client(cert).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func asAggregator(user string, groups ...string) http.Header {
	h := http.Header{"X-Remote-User": {user}}
	for _, g := range groups {
		h.Add("X-Remote-Group", g)
	}
	return h
}

func decodeStatus(t *testing.T, body []byte) metav1.Status {
	t.Helper()
	var s metav1.Status
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("not a Status: %v: %s", err, body)
	}
	if s.Kind != "Status" || s.APIVersion != "v1" {
		t.Fatalf("kind/apiVersion = %s/%s, want Status/v1: %s", s.Kind, s.APIVersion, body)
	}
	return s
}

func TestDiscovery(t *testing.T) {
	f := newAggregatedFixture(t, nil, nil)
	hdr := asAggregator("system:kube-aggregator", "system:masters")

	resp, body := f.get(t, &f.frontProxy, "/apis", hdr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/apis: %d %s", resp.StatusCode, body)
	}
	var groups metav1.APIGroupList
	if err := json.Unmarshal(body, &groups); err != nil {
		t.Fatal(err)
	}
	if groups.Kind != "APIGroupList" || len(groups.Groups) != 1 || groups.Groups[0].Name != "cluster.karmada.io" ||
		groups.Groups[0].PreferredVersion.GroupVersion != "cluster.karmada.io/v1alpha1" {
		t.Errorf("/apis = %s", body)
	}

	_, body = f.get(t, &f.frontProxy, "/apis/cluster.karmada.io", hdr)
	var group metav1.APIGroup
	if err := json.Unmarshal(body, &group); err != nil {
		t.Fatal(err)
	}
	if group.Kind != "APIGroup" || group.Name != "cluster.karmada.io" || len(group.Versions) != 1 || group.Versions[0].Version != "v1alpha1" {
		t.Errorf("/apis/cluster.karmada.io = %s", body)
	}

	_, body = f.get(t, &f.frontProxy, "/apis/cluster.karmada.io/v1alpha1", hdr)
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "APIResourceList" || list.GroupVersion != "cluster.karmada.io/v1alpha1" {
		t.Errorf("resource list header = %s", body)
	}
	want := map[string]string{
		"clusters":        "get,list,watch,update,patch",
		"clusters/status": "get,patch,update",
		"clusters/proxy":  "create,delete,get,patch,update",
	}
	got := map[string]string{}
	for _, r := range list.APIResources {
		if r.Namespaced {
			t.Errorf("%s is namespaced; Clusters are cluster-scoped", r.Name)
		}
		got[r.Name] = strings.Join(r.Verbs, ",")
	}
	for name, verbs := range want {
		if got[name] != verbs {
			t.Errorf("%s verbs = %q, want %q", name, got[name], verbs)
		}
	}
	if len(got) != len(want) {
		t.Errorf("resources = %v, want %v", got, want)
	}
}

func TestFrontProxyAuthentication(t *testing.T) {
	f := newAggregatedFixture(t, nil, nil)
	for _, tc := range []struct {
		name    string
		cert    *tls.Certificate
		headers http.Header
		path    string
		want    int
	}{
		{"front-proxy cert and user", &f.frontProxy, asAggregator("alice"), "/apis", http.StatusOK},
		{"front-proxy cert without user", &f.frontProxy, nil, "/apis", http.StatusUnauthorized},
		{"CN not allowed", &f.otherCN, asAggregator("alice"), "/apis", http.StatusUnauthorized},
		{"cert from another CA", &f.foreign, asAggregator("alice"), "/apis", http.StatusUnauthorized},
		{"no cert, forged headers", nil, asAggregator("alice", "system:masters"), "/apis/cluster.karmada.io/v1alpha1/clusters", http.StatusUnauthorized},
		{"health needs no identity", nil, nil, "/healthz", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.get(t, tc.cert, tc.path, tc.headers)
			if resp.StatusCode != tc.want {
				t.Fatalf("code = %d, want %d: %s", resp.StatusCode, tc.want, body)
			}
			if tc.want == http.StatusUnauthorized {
				if s := decodeStatus(t, body); s.Code != http.StatusUnauthorized || s.Reason != metav1.StatusReasonUnauthorized {
					t.Errorf("status = %+v", s)
				}
			}
		})
	}
}

func testSpec(name string) karmada.ClusterSpec {
	return clusterSpecFor(Member{Name: name, Config: &rest.Config{Host: "https://127.0.0.1:1"}})
}

func clusterReady(u *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m["status"].(string)
		}
	}
	return ""
}

// TestClusterInformer runs a real client-go dynamic informer against the
// aggregated API: it must sync and then see Ready flip.
func TestClusterInformer(t *testing.T) {
	f := newAggregatedFixture(t, nil, nil)
	f.store.add("member1", testSpec("member1"))
	f.store.setHealth("member1", "v1.37.2", true, clusterReadyReason, clusterReadyMessage)

	dyn, err := dynamic.NewForConfig(f.restConfig(t, "admin", []string{"system:masters"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := factory.ForResource(karmada.ClusterGVR).Informer()
	events := make(chan string, 16)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			u := obj.(*unstructured.Unstructured)
			events <- "add " + u.GetName() + " " + clusterReady(u)
		},
		UpdateFunc: func(_, obj any) {
			u := obj.(*unstructured.Unstructured)
			events <- "update " + u.GetName() + " " + clusterReady(u)
		},
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer never synced")
	}
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-events:
			if got != want {
				t.Fatalf("event %q, want %q", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("no event %q", want)
		}
	}
	expect("add member1 True")

	f.store.setHealth("member1", "", false, clusterNotReachableReason, clusterNotReachableMessage+": connection refused")
	expect("update member1 False")
	f.store.add("member2", testSpec("member2"))
	expect("add member2 ")
	f.store.setHealth("member1", "", true, clusterReadyReason, clusterReadyMessage)
	expect("update member1 True")

	obj, _, err := inf.GetStore().GetByKey("member1")
	if err != nil || obj == nil {
		t.Fatalf("member1 not cached: %v", err)
	}
	u := obj.(*unstructured.Unstructured)
	if ep, _, _ := unstructured.NestedString(u.Object, "spec", "apiEndpoint"); ep != "https://127.0.0.1:1" {
		t.Errorf("apiEndpoint = %q", ep)
	}
	if ref, _, _ := unstructured.NestedString(u.Object, "spec", "impersonatorSecretRef", "name"); ref != "member1-impersonator" {
		t.Errorf("impersonatorSecretRef.name = %q", ref)
	}
	if v, _, _ := unstructured.NestedString(u.Object, "status", "kubernetesVersion"); v != "v1.37.2" {
		t.Errorf("kubernetesVersion = %q", v)
	}
	// client-go 0.37 streams the initial list with WatchList; the server
	// must have been asked for it at least once.
	if f.watchLists.Load() == 0 {
		t.Error("informer never used sendInitialEvents (WatchList)")
	}
}

// TestClusterListThenWatch is the classic list, then watch from the list's
// resourceVersion, that informers without WatchList and kubectl -w use.
func TestClusterListThenWatch(t *testing.T) {
	f := newAggregatedFixture(t, nil, nil)
	f.store.add("member1", testSpec("member1"))
	dyn, err := dynamic.NewForConfig(f.restConfig(t, "admin", nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clusters := dyn.Resource(karmada.ClusterGVR)
	list, err := clusters.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.GetResourceVersion() == "" {
		t.Fatalf("list = %d items, rv %q", len(list.Items), list.GetResourceVersion())
	}
	f.store.setHealth("member1", "", false, clusterNotReadyReason, "not ready")
	w, err := clusters.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Modified || clusterReady(ev.Object.(*unstructured.Unstructured)) != "False" {
			t.Fatalf("event = %s %v", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no event after the list's resourceVersion")
	}

	got, err := clusters.Get(ctx, "member1", metav1.GetOptions{})
	if err != nil || got.GetName() != "member1" {
		t.Fatalf("get = %v, %v", got, err)
	}
	if _, err := clusters.Get(ctx, "nope", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("get unknown = %v, want not found", err)
	}
}

// memberEcho is a fake member apiserver that records what reached it.
type memberEcho struct {
	srv  *httptest.Server
	reqs chan *http.Request
}

func newMemberEcho(t *testing.T, handler http.HandlerFunc) (*memberEcho, *memberTransport) {
	t.Helper()
	m := &memberEcho{reqs: make(chan *http.Request, 8)}
	m.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.reqs <- r.Clone(context.Background())
		handler(w, r)
	}))
	t.Cleanup(m.srv.Close)
	caPEM := pemCert(m.srv.Certificate().Raw)
	mt, err := newMemberTransport(&rest.Config{Host: m.srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
	if err != nil {
		t.Fatal(err)
	}
	return m, mt
}

func impersonatorSecret(name, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: karmadaClusterNamespace, Name: name + "-impersonator"},
		Data:       map[string][]byte{"token": []byte(token)},
	}
}

func TestClusterProxyForwardsAsCaller(t *testing.T) {
	member, mt := newMemberEcho(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "log line\n")
	})
	f := newAggregatedFixture(t, k8sfake.NewClientset(impersonatorSecret("member1", "imp-token")), map[string]*memberTransport{"member1": mt})
	f.store.add("member1", clusterSpecFor(Member{Name: "member1", Config: &rest.Config{Host: member.srv.URL}}))

	const query = "container=build&container=build&follow=true"
	hdr := asAggregator("alice", "dev", "system:authenticated")
	hdr.Set("X-Remote-Extra-Scopes", "read")
	// Identity a client might try to smuggle through the aggregator.
	hdr.Set("Authorization", "Bearer evil")
	hdr.Set("Impersonate-User", "root")
	hdr.Add("Impersonate-Group", "system:masters")
	hdr.Set("Impersonate-Extra-Foo", "bar")
	resp, body := f.get(t, &f.frontProxy, "/apis/cluster.karmada.io/v1alpha1/clusters/member1/proxy/api/v1/namespaces/ci/pods/job-42/log?"+query, hdr)
	if resp.StatusCode != http.StatusOK || string(body) != "log line\n" {
		t.Fatalf("proxy = %d %q", resp.StatusCode, body)
	}
	var got *http.Request
	select {
	case got = <-member.reqs:
	default:
		t.Fatal("member saw no request")
	}
	if got.URL.Path != "/api/v1/namespaces/ci/pods/job-42/log" || got.URL.RawQuery != query {
		t.Errorf("member got %s?%s", got.URL.Path, got.URL.RawQuery)
	}
	checks := map[string][]string{
		"Authorization":            {"Bearer imp-token"},
		"Impersonate-User":         {"alice"},
		"Impersonate-Group":        {"dev"},
		"Impersonate-Extra-Scopes": {"read"},
		"Impersonate-Extra-Foo":    nil,
		"X-Remote-User":            nil,
		"X-Remote-Group":           nil,
		"X-Remote-Extra-Scopes":    nil,
	}
	for k, want := range checks {
		if g := got.Header.Values(k); strings.Join(g, ",") != strings.Join(want, ",") {
			t.Errorf("member header %s = %q, want %q", k, g, want)
		}
	}
}

func TestClusterProxyErrors(t *testing.T) {
	_, mt := newMemberEcho(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("member must not be reached, got %s", r.URL.Path)
	})
	f := newAggregatedFixture(t, k8sfake.NewClientset(), map[string]*memberTransport{"nosecret": mt, "noref": mt})
	f.store.add("nosecret", testSpec("nosecret"))
	spec := testSpec("noref")
	spec.ImpersonatorSecretRef = nil
	f.store.add("noref", spec)
	for _, tc := range []struct {
		cluster string
		code    int32
		message string
	}{
		{"unknown", http.StatusNotFound, `clusters.cluster.karmada.io "unknown" not found`},
		{"noref", http.StatusInternalServerError, "impersonatorSecretRef of cluster noref is nil"},
		{"nosecret", http.StatusInternalServerError, "nosecret-impersonator"},
	} {
		t.Run(tc.cluster, func(t *testing.T) {
			resp, body := f.get(t, &f.frontProxy, "/apis/cluster.karmada.io/v1alpha1/clusters/"+tc.cluster+"/proxy/api/v1/namespaces/ci/pods/p/exec", asAggregator("alice"))
			s := decodeStatus(t, body)
			if resp.StatusCode != int(tc.code) || s.Code != tc.code || !strings.Contains(s.Message, tc.message) {
				t.Fatalf("got %d %+v, want %d containing %q", resp.StatusCode, s, tc.code, tc.message)
			}
		})
	}
}

// TestClusterProxyUpgrade sends an SPDY-style upgrade through the proxy to
// a member that answers 101 and echoes, as the kubelet's exec does.
func TestClusterProxyUpgrade(t *testing.T) {
	member, mt := newMemberEcho(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "SPDY/3.1" || r.Header.Get("Authorization") != "Bearer imp-token" || r.Header.Get("Impersonate-User") != "alice" {
			http.Error(w, "bad upgrade request", http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
		_ = rw.Flush()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(rw, buf); err != nil {
			return
		}
		_, _ = rw.Write(append([]byte("echo:"), buf...))
		_ = rw.Flush()
	})
	f := newAggregatedFixture(t, k8sfake.NewClientset(impersonatorSecret("member1", "imp-token")), map[string]*memberTransport{"member1": mt})
	f.store.add("member1", clusterSpecFor(Member{Name: "member1", Config: &rest.Config{Host: member.srv.URL}}))

	conn, err := tls.Dial("tcp", f.srv.Listener.Addr().String(), &tls.Config{
		RootCAs:      f.servingCA.pool(),
		Certificates: []tls.Certificate{f.frontProxy},
		NextProtos:   []string{"http/1.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	req := "POST /apis/cluster.karmada.io/v1alpha1/clusters/member1/proxy/api/v1/namespaces/ci/pods/job-42/exec?command=sh&stdin=true HTTP/1.1\r\n" +
		"Host: localhost\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n" +
		"X-Remote-User: alice\r\nX-Remote-Group: dev\r\nContent-Length: 0\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Stream-Protocol-Version") != "v4.channel.k8s.io" {
		t.Fatalf("upgrade answer = %d %v", resp.StatusCode, resp.Header)
	}
	if _, err := io.WriteString(conn, "ping"); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, len("echo:ping"))
	if _, err := io.ReadFull(br, echo); err != nil {
		t.Fatal(err)
	}
	if string(echo) != "echo:ping" {
		t.Fatalf("echo = %q", echo)
	}
	got := <-member.reqs
	if got.URL.RawQuery != "command=sh&stdin=true" || got.Header.Get("X-Remote-User") != "" {
		t.Errorf("member got query %q, X-Remote-User %q", got.URL.RawQuery, got.Header.Get("X-Remote-User"))
	}
}
