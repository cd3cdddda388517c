package memberaccess

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada/karmadatest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/membertrust"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

const secretNS = "karmada-cluster"

// memberServer is a member's kube-apiserver as far as the transport sees
// it: TLS 1.3 with its own CA, HTTP/2 offered, upgrades answered with a
// 101 whose connection stays open until either side closes it.
type memberServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
	upgraded chan net.Conn
}

func newMemberServer(t *testing.T) *memberServer {
	t.Helper()
	ms := &memberServer{upgraded: make(chan net.Conn, 4)}
	ms.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ms.mu.Lock()
		ms.requests = append(ms.requests, r)
		ms.mu.Unlock()
		if r.Header.Get("Upgrade") != "" {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\n\r\n")
			_ = buf.Flush()
			ms.upgraded <- conn
			return
		}
		_, _ = io.WriteString(w, r.Proto)
	}))
	ms.EnableHTTP2 = true
	ms.StartTLS()
	t.Cleanup(ms.Close)
	return ms
}

func (ms *memberServer) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ms.Certificate().Raw})
}

func (ms *memberServer) last(t *testing.T) *http.Request {
	t.Helper()
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if len(ms.requests) == 0 {
		t.Fatal("the member got no request")
	}
	return ms.requests[len(ms.requests)-1]
}

type harness struct {
	dyn *dynamicfake.FakeDynamicClient
	// kube holds the Secrets Clusters name, which the member-trust
	// controller reads; gatewayKube is what Members reads, where only the
	// published Secret is (a copy of what the controller writes in kube).
	kube, gatewayKube *kubefake.Clientset
	inf               *karmada.Informers
	m                 *Members
	met               *metrics.Metrics
}

// published is where the harness's member-trust controller publishes.
var published = types.NamespacedName{Namespace: secretNS, Name: "karmada-exec-gateway-member-trust"}

func cluster(name, endpoint string) *karmada.Cluster {
	return &karmada.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karmada.ClusterSpec{
			APIEndpoint:           endpoint,
			SecretRef:             &karmada.LocalSecretRef{Namespace: secretNS, Name: name},
			ImpersonatorSecretRef: &karmada.LocalSecretRef{Namespace: secretNS, Name: name + "-impersonator"},
		},
	}
}

func secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secretNS, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

var clusterGVK = karmada.ClusterGVR.GroupVersion().WithKind("Cluster")

// newHarness runs Members as cmd/gateway builds it (on karmada.NewInformers'
// Cluster informer and a clientset reading the published Secret), and
// pkg/membertrust's controller as gateway member-trust does, publishing
// from the Secrets the Clusters name.
func newHarness(t *testing.T, clusters []*karmada.Cluster, secrets ...*corev1.Secret) *harness {
	t.Helper()
	return newHarnessWith(t, nil, clusters, secrets...)
}

// newHarnessWith is newHarness whose gateway's clientset first runs react,
// and whose requests wait at most a second for the published Secret.
func newHarnessWith(t *testing.T, react k8stesting.ReactionFunc, clusters []*karmada.Cluster, secrets ...*corev1.Secret) *harness {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{}
	for _, c := range clusters {
		objs = append(objs, karmadatest.Unstructured(t, c, clusterGVK))
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		karmada.ResourceBindingGVR: "ResourceBindingList",
		karmada.ClusterGVR:         "ClusterList",
	}, objs...)
	secretObjs := []runtime.Object{}
	for _, s := range secrets {
		secretObjs = append(secretObjs, s)
	}
	kube := kubefake.NewClientset(secretObjs...)
	gatewayKube := kubefake.NewClientset()
	if react != nil {
		gatewayKube.PrependReactor("*", "secrets", react)
	}
	// What the controller writes of the published Secret, the gateway's
	// clientset holds too.
	kube.PrependReactor("*", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != published.Namespace {
			return false, nil, nil
		}
		// An update is a CreateAction too (the same methods): the verb
		// tells them apart.
		w, ok := a.(k8stesting.CreateAction)
		if !ok {
			return false, nil, nil
		}
		s, ok := w.GetObject().(*corev1.Secret)
		if !ok || s.Name != published.Name {
			return false, nil, nil
		}
		switch a.GetVerb() {
		case "create":
			_ = gatewayKube.Tracker().Add(s.DeepCopy())
		case "update":
			_ = gatewayKube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("secrets"), s.DeepCopy(), s.Namespace)
		}
		return false, nil, nil
	})
	inf, err := karmada.NewInformers(karmada.InformersOptions{Metadata: metadatafake.NewSimpleMetadataClient(scheme), Dynamic: dyn})
	if err != nil {
		t.Fatal(err)
	}
	met := metrics.New(prometheus.NewRegistry())
	m, err := New(Options{Clusters: inf.Clusters, Client: gatewayKube, Published: published, Metrics: met, SecretSyncTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	trustClusters := karmada.NewClusterInformer(dyn, 0)
	trust, err := membertrust.New(membertrust.Options{Clusters: trustClusters, Client: kube, Published: published, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf.Start(ctx)
	if !inf.WaitForCacheSync(ctx) {
		t.Fatal("informers did not sync")
	}
	go trustClusters.Run(ctx.Done())
	go func() { _ = trust.Run(ctx) }()
	// The first publication holds what the Secrets held at the start.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := gatewayKube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("secrets"), published.Namespace, published.Name)
		return err == nil, nil
	}); err != nil {
		t.Fatal("the member-trust controller published nothing")
	}
	m.Start(ctx)
	return &harness{dyn: dyn, kube: kube, gatewayKube: gatewayKube, inf: inf, m: m, met: met}
}

// pushMember is a Push member: its Secret holds the CA, the
// impersonator's its token.
func pushMember(t *testing.T, name string) (*memberServer, *harness) {
	t.Helper()
	ms := newMemberServer(t)
	h := newHarness(t, []*karmada.Cluster{cluster(name, ms.URL)},
		secret(name, map[string]string{"caBundle": string(ms.caPEM()), "token": "karmada-agent-token", "unread": "x"}),
		secret(name+"-impersonator", map[string]string{"token": "impersonator-token"}))
	return ms, h
}

// updateCluster writes c in karmada-apiserver, as Karmada updates a Cluster.
func (h *harness) updateCluster(t *testing.T, c *karmada.Cluster) {
	t.Helper()
	if _, err := h.dyn.Resource(karmada.ClusterGVR).Update(context.Background(), karmadatest.Unstructured(t, c, clusterGVK), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) member(t *testing.T, name string) *Member {
	t.Helper()
	m, err := h.m.Member(context.Background(), name)
	if err != nil {
		t.Fatalf("Member(%s): %v", name, err)
	}
	return m
}

func get(t *testing.T, m *Member, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, m.Base.String()+"/api/v1/namespaces/ci/pods/p/log", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	m.SetIdentity(req.Header, identity.Caller{Name: "alice", UID: "u-1", Groups: []string{"ci", identity.GroupAuthenticated, "dev"}, Extra: map[string][]string{"scopes": {"x"}}})
	res, err := m.For(false).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func TestMemberSendsKarmadasIdentityHeaders(t *testing.T) {
	ms, h := pushMember(t, "member1")
	m := h.member(t, "member1")
	res := get(t, m, http.Header{
		"Authorization":            {"Bearer caller-token"},
		"Impersonate-Extra-Scopes": {"admin"},
		"Impersonate-Uid":          {"root"},
		"X-Remote-User":            {"admin"},
		"Sec-Websocket-Protocol":   {"v5.channel.k8s.io"},
	})
	body, _ := io.ReadAll(res.Body)
	got := ms.last(t)
	want := http.Header{
		"Authorization":     {"Bearer impersonator-token"},
		"Impersonate-User":  {"alice"},
		"Impersonate-Group": {"ci", "dev"}, // system:authenticated is the member's to add (Karmada's SkipGroup)
	}
	for k, v := range want {
		if g := got.Header.Values(k); strings.Join(g, ",") != strings.Join(v, ",") {
			t.Errorf("%s = %q, want %q", k, g, v)
		}
	}
	for k := range got.Header {
		if strings.HasPrefix(k, "Impersonate-") && want[k] == nil || strings.HasPrefix(k, "X-Remote-") {
			t.Errorf("the member got the client's %s: %q", k, got.Header.Values(k))
		}
	}
	// Plain requests speak HTTP/2 where the member offers it; TLS 1.3 at
	// least, as Karmada dials.
	if string(body) != "HTTP/2.0" {
		t.Errorf("plain request went as %s, want HTTP/2.0", body)
	}
	if res.TLS == nil || res.TLS.Version != tls.VersionTLS13 {
		t.Errorf("TLS = %+v, want TLS 1.3", res.TLS)
	}
}

func TestMemberPoolsConnections(t *testing.T) {
	_, h := pushMember(t, "member1")
	for range 5 {
		res := get(t, h.member(t, "member1"), nil)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	// Karmada's cluster proxy would have dialed five times.
	if got := testutil.ToFloat64(h.met.MemberDialsTotal.WithLabelValues("member1", "success")); got != 1 {
		t.Errorf("dials = %v, want 1 for five requests", got)
	}
	if got := testutil.ToFloat64(h.met.MemberConnections.WithLabelValues("member1")); got != 1 {
		t.Errorf("open connections = %v, want 1", got)
	}
}

func TestMemberUpgradesOverHTTP1ResumingTLS(t *testing.T) {
	ms, h := pushMember(t, "member1")
	for i := range 2 {
		res := upgrade(t, h.member(t, "member1"))
		res.Body.Close()
		got := ms.last(t)
		if got.ProtoMajor != 1 {
			t.Errorf("upgrade went as %s, want HTTP/1.1", got.Proto)
		}
		// Every upgrade takes a connection of its own: the second resumes
		// the first one's TLS session, without the certificate exchange.
		if i == 1 && (got.TLS == nil || !got.TLS.DidResume) {
			t.Error("the second upgrade's TLS session was not resumed")
		}
	}
}

func upgrade(t *testing.T, m *Member) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, m.Base.String()+"/api/v1/namespaces/ci/pods/p/exec", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "SPDY/3.1")
	m.SetIdentity(req.Header, identity.Caller{Name: "alice"})
	res, err := m.For(true).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", res.Status)
	}
	return res
}

func TestMemberRefusals(t *testing.T) {
	ms := newMemberServer(t)
	noImpersonator := cluster("noimp", ms.URL)
	noImpersonator.Spec.ImpersonatorSecretRef = nil
	missingSecret := cluster("nosecret", ms.URL)
	badProxy := cluster("badproxy", ms.URL)
	badProxy.Spec.ProxyURL = "http://user:hunter2@[::1"
	emptyToken := cluster("emptytoken", ms.URL)
	h := newHarness(t, []*karmada.Cluster{noImpersonator, missingSecret, badProxy, emptyToken},
		secret("badproxy", nil), secret("badproxy-impersonator", map[string]string{"token": "t"}),
		secret("emptytoken", nil), secret("emptytoken-impersonator", map[string]string{"token": ""}),
		secret("nosecret", nil))
	for _, tt := range []struct {
		cluster string
		code    int32
		msg     string
	}{
		{"absent", 404, `clusters.cluster.karmada.io "absent" not found`},
		// Karmada's own words.
		{"noimp", 503, "the impersonatorSecretRef of cluster noimp is nil"},
		{"nosecret", 503, "no impersonator token of cluster nosecret is published in Secret karmada-cluster/karmada-exec-gateway-member-trust (gateway member-trust publishes the token of the Secret karmada-cluster/nosecret-impersonator"},
		{"badproxy", 503, "the proxyURL of cluster badproxy does not parse"},
		{"emptytoken", 503, "no impersonator token of cluster emptytoken is published"},
	} {
		t.Run(tt.cluster, func(t *testing.T) {
			_, err := h.m.Member(context.Background(), tt.cluster)
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				t.Fatalf("err = %v, want a Status", err)
			}
			if s := status.Status(); s.Code != tt.code || !strings.Contains(s.Message, tt.msg) {
				t.Errorf("Status = %d %q, want %d containing %q", s.Code, s.Message, tt.code, tt.msg)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error quotes the proxy's password: %v", err)
			}
		})
	}
}

// waitFor polls cond until it holds: the informers apply changes
// asynchronously.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestRotatedTokenAppliesToTheNextRequestAndKeepsConnections(t *testing.T) {
	ms, h := pushMember(t, "member1")
	stream := upgrade(t, h.member(t, "member1"))
	defer stream.Body.Close()
	serverSide := <-ms.upgraded
	defer serverSide.Close()

	_, err := h.kube.CoreV1().Secrets(secretNS).Update(context.Background(),
		secret("member1-impersonator", map[string]string{"token": "rotated"}), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rotated token", func() bool { return h.member(t, "member1").token == "rotated" })
	get(t, h.member(t, "member1"), nil)
	if got := ms.last(t).Header.Get("Authorization"); got != "Bearer rotated" {
		t.Errorf("Authorization = %q after rotation", got)
	}
	// A token is a header of each request: the open stream goes on.
	if _, err := serverSide.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("still here"))
	if _, err := io.ReadFull(stream.Body, buf); err != nil {
		t.Errorf("open stream after a token rotation: %v", err)
	}
	if got := testutil.ToFloat64(h.met.MemberTransportRebuildsTotal.WithLabelValues("member1", "config_changed")); got != 0 {
		t.Errorf("rebuilds = %v after a token rotation, want 0", got)
	}
}

// streamClosed reports whether the member's side of an upgraded stream
// saw it closed.
func streamClosed(t *testing.T, serverSide net.Conn) {
	t.Helper()
	_ = serverSide.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, serverSide)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the open stream was not closed")
	}
}

func TestChangedTrustClosesWhatWasBuiltOnIt(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, h *harness, ms *memberServer)
		reason string
	}{
		{"new CA", func(t *testing.T, h *harness, ms *memberServer) {
			_, err := h.kube.CoreV1().Secrets(secretNS).Update(context.Background(),
				secret("member1", map[string]string{"caBundle": string(ms.caPEM()) + "\n", "token": "t"}), metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}, "config_changed"},
		{"new endpoint", func(t *testing.T, h *harness, ms *memberServer) {
			c := cluster("member1", strings.Replace(ms.URL, "127.0.0.1", "localhost", 1))
			h.updateCluster(t, c)
		}, "config_changed"},
		{"insecureSkipTLSVerification", func(t *testing.T, h *harness, ms *memberServer) {
			c := cluster("member1", ms.URL)
			c.Spec.InsecureSkipTLSVerification = true
			h.updateCluster(t, c)
		}, "config_changed"},
		{"cluster deleted", func(t *testing.T, h *harness, ms *memberServer) {
			if err := h.dyn.Resource(karmada.ClusterGVR).Delete(context.Background(), "member1", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, "cluster_deleted"},
		// Changes that leave the Cluster unusable close what was built on
		// it too: they used to leave its pools and open streams up.
		{"impersonatorSecretRef removed", func(t *testing.T, h *harness, ms *memberServer) {
			c := cluster("member1", ms.URL)
			c.Spec.ImpersonatorSecretRef = nil
			h.updateCluster(t, c)
		}, "cluster_unusable"},
		{"impersonator Secret deleted", func(t *testing.T, h *harness, ms *memberServer) {
			if err := h.kube.CoreV1().Secrets(secretNS).Delete(context.Background(), "member1-impersonator", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, "cluster_unusable"},
		{"impersonator token emptied", func(t *testing.T, h *harness, ms *memberServer) {
			_, err := h.kube.CoreV1().Secrets(secretNS).Update(context.Background(),
				secret("member1-impersonator", map[string]string{"token": ""}), metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}, "cluster_unusable"},
		{"endpoint unparsable", func(t *testing.T, h *harness, ms *memberServer) {
			c := cluster("member1", "https://[::1")
			h.updateCluster(t, c)
		}, "cluster_unusable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ms, h := pushMember(t, "member1")
			stream := upgrade(t, h.member(t, "member1"))
			defer stream.Body.Close()
			serverSide := <-ms.upgraded
			defer serverSide.Close()

			tt.change(t, h, ms)
			streamClosed(t, serverSide)
			if got := testutil.ToFloat64(h.met.MemberTransportRebuildsTotal.WithLabelValues("member1", tt.reason)); got != 1 {
				t.Errorf("rebuilds{%s} = %v, want 1", tt.reason, got)
			}
			waitFor(t, "the open connections gauge", func() bool {
				return testutil.ToFloat64(h.met.MemberConnections.WithLabelValues("member1")) == 0
			})
		})
	}
}

// TestMemberTakenBeforeARebuildDialsNothing: a request that took its
// Member before the pools were rebuilt (the SubjectAccessReview sits
// between the lookup and the dial) cannot open a connection on the old
// endpoint, CA or proxy, which nothing would ever close.
func TestMemberTakenBeforeARebuildDialsNothing(t *testing.T) {
	ms, h := pushMember(t, "member1")
	before := h.member(t, "member1")
	c := cluster("member1", strings.Replace(ms.URL, "127.0.0.1", "localhost", 1))
	h.updateCluster(t, c)
	waitFor(t, "the rebuild", func() bool {
		return testutil.ToFloat64(h.met.MemberTransportRebuildsTotal.WithLabelValues("member1", "config_changed")) == 1
	})
	req, err := http.NewRequest(http.MethodGet, before.Base.String()+"/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, upgrade := range []bool{false, true} {
		if res, err := before.For(upgrade).RoundTrip(req); err == nil || !strings.Contains(err.Error(), "changed while the request was checked") {
			if err == nil {
				res.Body.Close()
			}
			t.Errorf("upgrade %v on the old pools: %v; want the dial refused", upgrade, err)
		}
	}
	if got := testutil.ToFloat64(h.met.MemberConnections.WithLabelValues("member1")); got != 0 {
		t.Errorf("%v connections open on the old pools", got)
	}
}

func TestClusterStatusUpdatesKeepConnections(t *testing.T) {
	ms, h := pushMember(t, "member1")
	stream := upgrade(t, h.member(t, "member1"))
	defer stream.Body.Close()
	serverSide := <-ms.upgraded
	defer serverSide.Close()
	// Karmada updates every Cluster's status every 10 s.
	c := cluster("member1", ms.URL)
	c.Status.KubernetesVersion = "v1.37.0"
	c.Labels = map[string]string{"heartbeat": "1"}
	h.updateCluster(t, c)
	waitFor(t, "the update", func() bool {
		obj, ok, _ := h.inf.Clusters.GetStore().GetByKey("member1")
		return ok && obj.(*karmada.Cluster).Labels["heartbeat"] == "1"
	})
	h.member(t, "member1")
	if got := testutil.ToFloat64(h.met.MemberTransportRebuildsTotal.WithLabelValues("member1", "config_changed")); got != 0 {
		t.Errorf("a status update rebuilt the member's pools (%v)", got)
	}
	if _, err := serverSide.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(stream.Body, make([]byte, 1)); err != nil {
		t.Errorf("open stream after a status update: %v", err)
	}
}

// connectProxy is an HTTP CONNECT proxy that records the CONNECTs' headers.
type connectProxy struct {
	*httptest.Server
	// redirect, when set, is the address every CONNECT is dialed at,
	// whatever host it names.
	redirect string
	mu       sync.Mutex
	connect  []http.Header
}

func newConnectProxy(t *testing.T) *connectProxy {
	t.Helper()
	p := &connectProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		p.mu.Lock()
		p.connect = append(p.connect, r.Header.Clone())
		addr := r.Host
		if p.redirect != "" {
			addr = p.redirect
		}
		p.mu.Unlock()
		dst, err := net.Dial("tcp", addr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			dst.Close()
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		go func() {
			_, _ = io.Copy(dst, buf)
			dst.Close()
		}()
		go func() {
			_, _ = io.Copy(conn, dst)
			conn.Close()
		}()
	}))
	t.Cleanup(p.Close)
	return p
}

func TestMemberBehindAProxy(t *testing.T) {
	ms := newMemberServer(t)
	px := newConnectProxy(t)
	c := cluster("pull1", ms.URL)
	c.Spec.SecretRef = nil // a Pull member may report none
	c.Spec.InsecureSkipTLSVerification = true
	c.Spec.ProxyURL = px.URL
	c.Spec.ProxyHeader = map[string]string{"X-Tenant": "a,b", "Proxy-Authorization": "Basic dTpw"}
	h := newHarness(t, []*karmada.Cluster{c}, secret("pull1-impersonator", map[string]string{"token": "t"}))
	res := get(t, h.member(t, "pull1"), nil)
	_, _ = io.Copy(io.Discard, res.Body)
	stream := upgrade(t, h.member(t, "pull1"))
	stream.Body.Close()
	px.mu.Lock()
	defer px.mu.Unlock()
	if len(px.connect) != 2 {
		t.Fatalf("the proxy got %d CONNECTs, want 2 (plain and upgrade pools)", len(px.connect))
	}
	for _, hdr := range px.connect {
		// Karmada splits each value at commas (ParseProxyHeaders).
		if got := hdr.Values("X-Tenant"); strings.Join(got, "|") != "a|b" {
			t.Errorf("CONNECT X-Tenant = %q, want [a b]", got)
		}
		if got := hdr.Get("Proxy-Authorization"); got != "Basic dTpw" {
			t.Errorf("CONNECT Proxy-Authorization = %q", got)
		}
	}
}

func TestProxyCredentialsNeverInErrors(t *testing.T) {
	ms := newMemberServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, proxyURL := range []string{"http://gw:hunter2@" + dead, "socks5://gw:hunter2@" + dead, "https://gw:hunter2@" + dead} {
		t.Run(proxyURL[:strings.Index(proxyURL, ":")], func(t *testing.T) {
			c := cluster("pull1", ms.URL)
			c.Spec.ProxyURL = proxyURL
			h := newHarness(t, []*karmada.Cluster{c}, secret("pull1", map[string]string{"caBundle": string(ms.caPEM())}),
				secret("pull1-impersonator", map[string]string{"token": "t"}))
			m := h.member(t, "pull1")
			req, _ := http.NewRequest(http.MethodGet, m.Base.String()+"/version", nil)
			_, err := m.For(false).RoundTrip(req)
			if err == nil {
				t.Fatal("a request through a dead proxy succeeded")
			}
			if got := m.Scrub(err.Error()); strings.Contains(got, "hunter2") {
				t.Errorf("scrubbed error quotes the password: %s", got)
			}
			// Go's dialers do not quote the proxy URL today; a dialer that
			// did (a url.Error of the proxy) would be scrubbed.
			if got := m.Scrub(`proxyconnect "` + proxyURL + `": refused`); strings.Contains(got, "hunter2") || strings.Contains(got, "gw:") {
				t.Errorf("Scrub left the proxy's credentials: %s", got)
			}
		})
	}
}

// TestGatewayReadsOnlyThePublishedSecret: Members reads one Secret, the
// published one, by name (a list and watch with a metadata.name field
// selector, which RBAC resourceNames allow), never a Secret the Clusters
// name; what it holds is each Cluster's impersonator token and CA, and not
// the token of a Push member's secretRef Secret (a member ServiceAccount
// bound to */*/*) nor any other key.
func TestGatewayReadsOnlyThePublishedSecret(t *testing.T) {
	_, h := pushMember(t, "member1")
	h.member(t, "member1")
	for _, a := range h.gatewayKube.Actions() {
		if a.GetResource().Resource != "secrets" {
			t.Errorf("the gateway read %s", a.GetResource())
			continue
		}
		l, ok := a.(k8stesting.ListAction)
		fieldSel := ""
		if ok {
			fieldSel = l.GetListRestrictions().Fields.String()
		} else if w, ok := a.(k8stesting.WatchAction); ok {
			fieldSel = w.GetWatchRestrictions().Fields.String()
		}
		if a.GetNamespace() != published.Namespace || (a.GetVerb() != "list" && a.GetVerb() != "watch") || fieldSel != "metadata.name="+published.Name {
			t.Errorf("the gateway %s secrets in %q with field selector %q; want only a list and watch of %s by name", a.GetVerb(), a.GetNamespace(), fieldSel, published)
		}
	}
	data, err := h.m.publishedData(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"member1.token": "impersonator-token", "member1.caBundle": "-----BEGIN CERTIFICATE-----"}
	for k, v := range data {
		if w, ok := want[k]; !ok || !strings.HasPrefix(string(v), w) {
			t.Errorf("the gateway holds %s = %.30q", k, v)
		}
		if strings.Contains(string(v), "karmada-agent-token") {
			t.Errorf("the gateway holds the secretRef Secret's token in %s", k)
		}
	}
	if len(data) != len(want) {
		t.Errorf("the gateway holds %d keys, want %v", len(data), want)
	}
}

// TestProxyHeaderParsing pins Karmada's ParseProxyHeaders: values split
// at commas, nothing trimmed.
func TestProxyHeaderParsing(t *testing.T) {
	got := ProxyHeader(map[string]string{"A": "1,2", "B": " x"})
	if strings.Join(got["A"], "|") != "1|2" || strings.Join(got["B"], "|") != " x" {
		t.Errorf("ProxyHeader = %v", got)
	}
	if ProxyHeader(nil) != nil {
		t.Error("no proxyHeader must send none")
	}
}

// TestUnreadablePublishedSecret: a published Secret the gateway may not
// read gets a 503 that says so, once the wait for it is over.
func TestUnreadablePublishedSecret(t *testing.T) {
	ms := newMemberServer(t)
	forbidden := func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "",
			errors.New(`User "gateway" cannot list resource "secrets" in the namespace "karmada-cluster"`))
	}
	h := newHarnessWith(t, forbidden, []*karmada.Cluster{cluster("member1", ms.URL)})
	_, err := h.m.Member(context.Background(), "member1")
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 503 ||
		!strings.Contains(status.Status().Message, "Secret karmada-cluster/karmada-exec-gateway-member-trust could not be read") ||
		!strings.Contains(status.Status().Message, "forbidden") {
		t.Errorf("err = %v, want a 503 naming the refused Secret", err)
	}
}

// TestNotStartedRefuses: before Start (the gateway's Cluster informer has
// not synced), no Secret is read and a request gets a 503; the gateway is
// not ready until Started.
func TestNotStartedRefuses(t *testing.T) {
	ms := newMemberServer(t)
	h := newHarness(t, []*karmada.Cluster{cluster("member1", ms.URL)})
	m, err := New(Options{Clusters: h.inf.Clusters, Client: h.gatewayKube, Published: published})
	if err != nil {
		t.Fatal(err)
	}
	if m.Started() {
		t.Error("Started before Start")
	}
	var status apierrors.APIStatus
	if _, err := m.Member(context.Background(), "member1"); !errors.As(err, &status) || status.Status().Code != 503 {
		t.Errorf("Member before Start: %v, want a 503", err)
	}
	m.Start(t.Context())
	if !m.Started() {
		t.Error("not Started after Start")
	}
}

// TestSecretWithoutCATrustsNoRoots: a Cluster whose secretRef Secret has no
// caBundle trusts no CA, as Karmada's GetTLSConfigForCluster (an empty
// pool), never the system roots; only a Cluster without secretRef trusts
// those. The system roots are made the member's CA (SSL_CERT_FILE, read
// once per process: the checks run in a child test process), so a gateway
// that fell back to them would reach the member.
func TestSecretWithoutCATrustsNoRoots(t *testing.T) {
	if endpoint := os.Getenv("MEMBERACCESS_SYSTEM_ROOTS_MEMBER"); endpoint != "" {
		withoutCA := cluster("member1", endpoint)
		withoutSecretRef := cluster("member2", endpoint)
		withoutSecretRef.Spec.SecretRef = nil
		h := newHarness(t, []*karmada.Cluster{withoutCA, withoutSecretRef},
			secret("member1", map[string]string{"token": "karmada-agent-token"}),
			secret("member1-impersonator", map[string]string{"token": "t"}),
			secret("member2-impersonator", map[string]string{"token": "t"}))
		for name, trusted := range map[string]bool{"member1": false, "member2": true} {
			m := h.member(t, name)
			req, err := http.NewRequest(http.MethodGet, m.Base.String()+"/version", nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := m.For(false).RoundTrip(req)
			if err == nil {
				res.Body.Close()
			}
			var unknown x509.UnknownAuthorityError
			switch {
			case trusted && err != nil:
				t.Errorf("%s, without secretRef: %v; want the system roots trusted", name, err)
			case !trusted && !errors.As(err, &unknown):
				t.Errorf("%s, its Secret without caBundle: %v; want the member's certificate refused", name, err)
			}
		}
		return
	}
	ms := newMemberServer(t)
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, ms.caPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecretWithoutCATrustsNoRoots$", "-test.v")
	cmd.Env = append(os.Environ(), "MEMBERACCESS_SYSTEM_ROOTS_MEMBER="+ms.URL, "SSL_CERT_FILE="+roots, "SSL_CERT_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSecretWithoutCATrustsNoRoots") {
		t.Fatalf("the child test: %v\n%s", err, out)
	}
}

// TestWarmUpNeverWaits: WarmUp, which runs before a request's caller is
// judged, does not wait for a published Secret not read yet, where Member
// waits up to SecretSyncTimeout: an unauthenticated upgrade used to be
// held up to 10 s by it.
func TestWarmUpNeverWaits(t *testing.T) {
	ms := newMemberServer(t)
	forbidden := func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("no"))
	}
	h := newHarnessWith(t, forbidden, []*karmada.Cluster{cluster("member1", ms.URL)})
	m, err := New(Options{Clusters: h.inf.Clusters, Client: h.gatewayKube, Published: published, SecretSyncTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m.Start(t.Context())
	done := make(chan bool, 1)
	go func() { done <- m.WarmUp("member1") }()
	select {
	case warmed := <-done:
		if warmed {
			t.Error("WarmUp dialed a member whose token was never read")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WarmUp waited for the published Secret")
	}
}

// TestMemberWithoutProxyURLHonoursTheEnvironment: a Cluster without
// spec.proxyURL is reached through the proxy HTTPS_PROXY names, unless
// NO_PROXY excludes it, as Karmada's transport (SetTransportDefaults)
// reaches it; it used to be dialed directly. Go reads the environment once
// per process, so the checks run in child test processes. The member is
// named example.com (its certificate's name; loopback itself is never
// proxied), and every dial is mapped to loopback, so nothing is looked up.
func TestMemberWithoutProxyURLHonoursTheEnvironment(t *testing.T) {
	if member := os.Getenv("MEMBERACCESS_ENV_PROXY_MEMBER"); member != "" {
		var mu sync.Mutex
		var dialed []string
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dialed = append(dialed, addr)
			mu.Unlock()
			if host, port, _ := net.SplitHostPort(addr); host == "example.com" {
				addr = net.JoinHostPort("127.0.0.1", port)
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		h := newHarness(t, []*karmada.Cluster{cluster("member1", "https://"+member)},
			secret("member1", map[string]string{"caBundle": os.Getenv("MEMBERACCESS_ENV_PROXY_CA")}),
			secret("member1-impersonator", map[string]string{"token": "t"}))
		ms, err := New(Options{Clusters: h.inf.Clusters, Client: h.gatewayKube, Published: published, Dial: dial})
		if err != nil {
			t.Fatal(err)
		}
		ms.Start(t.Context())
		m, err := ms.Member(t.Context(), "member1")
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodGet, m.Base.String()+"/version", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.For(false).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		want := strings.TrimPrefix(os.Getenv("HTTPS_PROXY"), "http://") // the proxy, unless NO_PROXY names the member
		if os.Getenv("NO_PROXY") != "" {
			want = member
		}
		mu.Lock()
		defer mu.Unlock()
		if len(dialed) != 1 || dialed[0] != want {
			t.Errorf("HTTPS_PROXY=%s NO_PROXY=%s: dialed %q, want %s", os.Getenv("HTTPS_PROXY"), os.Getenv("NO_PROXY"), dialed, want)
		}
		return
	}
	ms := newMemberServer(t)
	px := newConnectProxy(t)
	px.mu.Lock()
	px.redirect = ms.Listener.Addr().String()
	px.mu.Unlock()
	_, port, _ := net.SplitHostPort(ms.Listener.Addr().String())
	for _, noProxy := range []string{"", "example.com"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemberWithoutProxyURLHonoursTheEnvironment$", "-test.v")
		cmd.Env = append(os.Environ(), "MEMBERACCESS_ENV_PROXY_MEMBER=example.com:"+port, "MEMBERACCESS_ENV_PROXY_CA="+string(ms.caPEM()),
			"HTTPS_PROXY="+px.URL, "NO_PROXY="+noProxy, "no_proxy="+noProxy, "https_proxy=")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestMemberWithoutProxyURLHonoursTheEnvironment") {
			t.Fatalf("NO_PROXY=%q, the child test: %v\n%s", noProxy, err, out)
		}
		px.mu.Lock()
		connects := len(px.connect)
		px.connect = nil
		px.mu.Unlock()
		switch {
		case noProxy == "" && connects != 1:
			t.Errorf("HTTPS_PROXY set: the proxy got %d CONNECTs, want the request's", connects)
		case noProxy != "" && connects != 0:
			t.Errorf("NO_PROXY=%s: the proxy got %d CONNECTs, want none", noProxy, connects)
		}
	}
}
