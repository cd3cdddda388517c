package nodeagent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

const (
	testNode = "member1-node"
	testNS   = "ci"
	// Generous for a loaded CI machine; polls return as soon as true.
	testTimeout = 15 * time.Second
)

// testPKI is a CA with a serving cert for 127.0.0.1 and a client cert, as the
// e2e environment gives the agent and the member apiserver.
type testPKI struct {
	caPEM      []byte
	caPool     *x509.CertPool
	serving    tls.Certificate
	clientCert []byte
	clientKey  []byte
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nodeagent-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	p := &testPKI{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), caPool: x509.NewCertPool()}
	p.caPool.AddCert(caCert)
	certPEM, keyPEM := issue(2, testNode, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	if p.serving, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	p.clientCert, p.clientKey = issue(3, "kube-apiserver-kubelet-client", x509.ExtKeyUsageClientAuth, nil)
	return p
}

// testAgent is a running agent on a fake member apiserver.
type testAgent struct {
	t       *testing.T
	ctx     context.Context
	client  *fake.Clientset
	agent   *Agent
	root    string
	baseURL string
	config  *rest.Config // client-cert access to the agent, as the apiserver has
	stop    func()       // cancels Run and waits for it
}

func startAgent(t *testing.T, objects ...runtime.Object) *testAgent {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	// Whatever a test waits on fails by this deadline instead of hanging.
	ctx, cancelAll := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(cancelAll)
	pki := newTestPKI(t)
	client := fake.NewClientset(objects...)
	// The fake tracker cannot create the binding subresource; do what the
	// apiserver's binding REST does.
	client.PrependReactor("create", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		create := action.(clienttesting.CreateAction)
		if create.GetSubresource() != "binding" {
			return false, nil, nil
		}
		binding := create.GetObject().(*v1.Binding)
		obj, err := client.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), binding.Namespace, binding.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*v1.Pod).DeepCopy()
		if pod.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(v1.Resource("pods/binding"), pod.Name, fmt.Errorf("pod %s is already assigned to node %q", pod.Name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = binding.Target.Name
		return true, nil, client.Tracker().Update(v1.SchemeGroupVersion.WithResource("pods"), pod, pod.Namespace)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	agent, err := New(Options{
		Client:      client,
		NodeName:    testNode,
		Listener:    ln,
		ServingCert: pki.serving,
		ClientCAs:   pki.caPool,
		RootDir:     root,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- agent.Run(runCtx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-runErr:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(testTimeout):
			t.Errorf("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	ta := &testAgent{
		t:       t,
		ctx:     ctx,
		client:  client,
		agent:   agent,
		root:    root,
		baseURL: "https://" + ln.Addr().String(),
		config: &rest.Config{
			Host: "https://" + ln.Addr().String(),
			TLSClientConfig: rest.TLSClientConfig{
				CAData: pki.caPEM, CertData: pki.clientCert, KeyData: pki.clientKey,
			},
		},
		stop: stop,
	}
	ta.waitFor("agent healthy", func() (bool, error) {
		resp, err := ta.httpClient().Get(ta.baseURL + "/healthz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return ta
}

func (ta *testAgent) httpClient() *http.Client {
	cert, err := tls.X509KeyPair(ta.config.CertData, ta.config.KeyData)
	if err != nil {
		ta.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ta.config.CAData)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert},
	}}}
}

func (ta *testAgent) waitFor(what string, cond func() (bool, error)) {
	ta.t.Helper()
	err := wait.PollUntilContextTimeout(ta.ctx, 20*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		ta.t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (ta *testAgent) createPod(pod *v1.Pod) *v1.Pod {
	ta.t.Helper()
	if pod.Namespace == "" {
		pod.Namespace = testNS
	}
	if pod.UID == "" {
		pod.UID = types.UID(pod.Name + "-uid")
	}
	created, err := ta.client.CoreV1().Pods(pod.Namespace).Create(ta.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		ta.t.Fatal(err)
	}
	return created
}

func (ta *testAgent) getPod(name string) (*v1.Pod, error) {
	return ta.client.CoreV1().Pods(testNS).Get(ta.ctx, name, metav1.GetOptions{})
}

// waitPod polls the pod until cond holds and returns it.
func (ta *testAgent) waitPod(name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	ta.t.Helper()
	var last *v1.Pod
	err := wait.PollUntilContextTimeout(ta.ctx, 20*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
		pod, err := ta.getPod(name)
		if err != nil {
			return false, nil
		}
		last = pod
		return cond(pod), nil
	})
	if err != nil {
		ta.t.Fatalf("waiting for pod %s to be %s: %v; last status: %+v", name, what, err, statusOf(last))
	}
	return last
}

func statusOf(p *v1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}

func (ta *testAgent) waitRunning(name string) *v1.Pod {
	ta.t.Helper()
	return ta.waitPod(name, "Running and Ready", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && podReady(p)
	})
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func (ta *testAgent) url(path string, query url.Values) *url.URL {
	u, err := url.Parse(ta.baseURL + path)
	if err != nil {
		ta.t.Fatal(err)
	}
	u.RawQuery = query.Encode()
	return u
}

// pod builds a bound pod with one container running argv.
func pod(name string, policy v1.RestartPolicy, argv ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: v1.PodSpec{
			NodeName:      testNode,
			RestartPolicy: policy,
			Containers:    []v1.Container{{Name: "main", Image: "busybox:1.36", Command: argv}},
		},
	}
}
