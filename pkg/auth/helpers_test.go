package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// fakeAPI stands in for karmada-apiserver's TokenReview and
// SubjectAccessReview endpoints, recording what it was asked.
type fakeAPI struct {
	mu sync.Mutex
	// tokens are the valid tokens and who they are.
	tokens map[string]authenticationv1.UserInfo
	// rejectText is TokenReview's status.error for unknown tokens.
	rejectText string
	tokenErr   error
	// allow holds rule() strings the authorizer allows; all else is denied.
	allow      map[string]bool
	denyReason string
	sarErr     error

	tokenReviews int
	sars         []authorizationv1.SubjectAccessReviewSpec
	// gate, when set, holds every review until it is closed.
	gate chan struct{}
}

// wait blocks on the gate, if one is set.
func (api *fakeAPI) wait() {
	api.mu.Lock()
	gate := api.gate
	api.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func newFakeAPI() (*fakeAPI, *fake.Clientset) {
	api := &fakeAPI{
		tokens: map[string]authenticationv1.UserInfo{
			"alice-token": {Username: "alice", UID: "alice-uid", Groups: []string{"dev"}},
			"admin-token": {Username: "admin", Groups: []string{"system:masters", "system:authenticated"}},
		},
		allow: map[string]bool{},
	}
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tr := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		api.wait()
		api.mu.Lock()
		defer api.mu.Unlock()
		api.tokenReviews++
		if api.tokenErr != nil {
			return true, nil, api.tokenErr
		}
		out := tr.DeepCopy()
		if u, ok := api.tokens[tr.Spec.Token]; ok {
			out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u}
		} else {
			out.Status = authenticationv1.TokenReviewStatus{Error: api.rejectText}
		}
		return true, out, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		api.wait()
		api.mu.Lock()
		defer api.mu.Unlock()
		api.sars = append(api.sars, *sar.Spec.DeepCopy())
		if api.sarErr != nil {
			return true, nil, api.sarErr
		}
		out := sar.DeepCopy()
		ra := sar.Spec.ResourceAttributes
		resource := ra.Resource
		if ra.Subresource != "" {
			resource += "/" + ra.Subresource
		}
		if api.allow[rule(sar.Spec.User, ra.Verb, ra.Group, resource, ra.Namespace, ra.Name)] {
			out.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true}
		} else {
			out.Status = authorizationv1.SubjectAccessReviewStatus{Reason: api.denyReason}
		}
		return true, out, nil
	})
	return api, client
}

func userInfo(name string, groups ...string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: name, Groups: groups}
}

func rule(user, verb, group, resource, namespace, name string) string {
	return strings.Join([]string{user, verb, group, resource, namespace, name}, "|")
}

func (api *fakeAPI) grant(rules ...string) {
	api.mu.Lock()
	defer api.mu.Unlock()
	for _, r := range rules {
		api.allow[r] = true
	}
}

func (api *fakeAPI) set(f func(api *fakeAPI)) {
	api.mu.Lock()
	defer api.mu.Unlock()
	f(api)
}

// calls returns how many TokenReviews and SubjectAccessReviews were made.
func (api *fakeAPI) calls() (tokenReviews, sars int) {
	api.mu.Lock()
	defer api.mu.Unlock()
	return api.tokenReviews, len(api.sars)
}

func (api *fakeAPI) seenSARs() []authorizationv1.SubjectAccessReviewSpec {
	api.mu.Lock()
	defer api.mu.Unlock()
	return append([]authorizationv1.SubjectAccessReviewSpec(nil), api.sars...)
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type testEnv struct {
	api   *fakeAPI
	clock *fakeClock
	reg   *prometheus.Registry
	authz *Authorizer
	pki   *testPKI
}

func newTestEnv(t *testing.T, mutate func(*Options)) *testEnv {
	t.Helper()
	api, client := newFakeAPI()
	clock := newFakeClock()
	reg := prometheus.NewRegistry()
	pki := newTestPKI(t, clock.Now())
	opts := Options{
		Client:           client,
		ClientCAPool:     func() *x509.CertPool { return pki.roots },
		CacheTTL:         10 * time.Second,
		NegativeCacheTTL: 2 * time.Second,
		Metrics:          metrics.New(reg),
		Now:              clock.Now,
	}
	if mutate != nil {
		mutate(&opts)
	}
	a, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &testEnv{api: api, clock: clock, reg: reg, authz: a, pki: pki}
}

// decisions reads AuthDecisionsTotal as "result/cache" -> count.
func (e *testEnv) decisions(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != "karmada_gateway_auth_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["result"]+"/"+labels["cache"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

func newRequest(header http.Header, state *tls.ConnectionState) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "https://gateway.test/api/v1/namespaces/ci/pods/job-42/exec", nil)
	for k, v := range header {
		r.Header[k] = v
	}
	r.TLS = state
	return r
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

var execJob42 = identity.PodStreamRequests(http.MethodPost, "ci", "job-42", "exec")[0]

// statusOf returns the HTTP code and message the proxy would write for err.
func statusOf(t *testing.T, err error) (int32, string) {
	t.Helper()
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		t.Fatalf("error %v (%T) is not an APIStatus", err, err)
	}
	st := s.Status()
	if st.Kind != "" && st.Kind != "Status" {
		t.Fatalf("status kind %q", st.Kind)
	}
	return st.Code, st.Message
}

// testPKI is a client CA, an intermediate under it, and an unrelated CA.
type testPKI struct {
	now          time.Time
	roots        *x509.CertPool
	ca           *x509.Certificate
	caKey        *ecdsa.PrivateKey
	intermediate *x509.Certificate
	interKey     *ecdsa.PrivateKey
	otherCA      *x509.Certificate
	otherKey     *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T, now time.Time) *testPKI {
	t.Helper()
	p := &testPKI{now: now}
	p.ca, p.caKey = p.issue(t, nil, nil, &x509.Certificate{
		Subject: pkix.Name{CommonName: "client-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	})
	p.intermediate, p.interKey = p.issue(t, p.ca, p.caKey, &x509.Certificate{
		Subject: pkix.Name{CommonName: "client-intermediate"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	})
	p.otherCA, p.otherKey = p.issue(t, nil, nil, &x509.Certificate{
		Subject: pkix.Name{CommonName: "other-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	})
	p.roots = x509.NewCertPool()
	p.roots.AddCert(p.ca)
	return p
}

var serial atomic.Int64

// issue signs tmpl with parent (self-signed when parent is nil), filling in
// validity around p.now and client-auth usage unless tmpl sets its own.
func (p *testPKI) issue(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = p.now.Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = p.now.Add(time.Hour)
	}
	if !tmpl.IsCA && tmpl.ExtKeyUsage == nil {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	}
	signer, signerKey := parent, parentKey
	if parent == nil {
		signer, signerKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// client returns the TLS state of a client presenting a leaf for subject
// issued by the client CA.
func (p *testPKI) client(t *testing.T, subject pkix.Name) *tls.ConnectionState {
	t.Helper()
	leaf, _ := p.issue(t, p.ca, p.caKey, &x509.Certificate{Subject: subject})
	return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
}
