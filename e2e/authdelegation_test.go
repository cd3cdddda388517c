package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericfilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/auth"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// decided is what one side made of a request: the status code, and the
// user the request would go on as when allowed.
type decided struct {
	Code   int                 `json:"code"`
	Name   string              `json:"name,omitempty"`
	UID    string              `json:"uid,omitempty"`
	Groups []string            `json:"groups,omitempty"`
	Extra  map[string][]string `json:"extra,omitempty"`
}

// TestAuthorizeModeDecidesAsKubernetesDelegation is the differential test
// behind pkg/auth's decision to keep its own code (see its package doc):
// pkg/auth, built as cmd/gateway builds it, against k8s.io/apiserver's
// delegating authenticator and authorizer behind its authentication,
// impersonation and authorization filters (as kube-rbac-proxy assembles
// them), both asking the same karmada-apiserver. For every caller and
// request of the table, through the same TLS client, the same decision
// (200, 401, 403) and, when allowed, the same user the request goes on as.
func TestAuthorizeModeDecidesAsKubernetesDelegation(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	client, err := kubernetes.NewForConfig(testEnv.KarmadaConfig(env.UserGateway))
	if err != nil {
		t.Fatal(err)
	}
	caPool := x509.NewCertPool()
	if !caPool.AppendCertsFromPEM(testEnv.CAPEM()) {
		t.Fatal("no CA in the environment's PEM")
	}

	// The candidate, as cmd/gateway builds it in authorize mode.
	ours, err := auth.New(auth.Options{Client: client, NewCredentialClient: client, ClientCAPool: func() *x509.CertPool { return caPool }})
	if err != nil {
		t.Fatal(err)
	}
	infos := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	candidate := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, err := infos.NewRequestInfo(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rr := identity.ResourceRequest{Namespace: info.Namespace, Verb: info.Verb, Group: info.APIGroup, Resource: info.Resource, Subresource: info.Subresource, Name: info.Name}
		caller, err := ours.AuthorizeResource(r.Context(), r, rr)
		var status apierrors.APIStatus
		switch {
		case err == nil:
			writeDecided(w, decided{Code: http.StatusOK, Name: caller.Name, UID: caller.UID, Groups: caller.Groups, Extra: caller.Extra})
		case errors.As(err, &status):
			writeDecided(w, decided{Code: int(status.Status().Code)})
		default:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})

	// The reference: k8s.io/apiserver's delegation.
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	caContent, err := dynamiccertificates.NewStaticCAContent("client-ca", testEnv.CAPEM())
	if err != nil {
		t.Fatal(err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient: client.AuthenticationV1(), TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff: backoff, CacheTTL: 2 * time.Minute, ClientCertificateCAContentProvider: caContent,
	}.New()
	if err != nil {
		t.Fatal(err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(), AllowCacheTTL: 5 * time.Minute, DenyCacheTTL: 30 * time.Second,
		WebhookRetryBackoff: backoff,
	}.New()
	if err != nil {
		t.Fatal(err)
	}
	var reference http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := request.UserFrom(r.Context())
		writeDecided(w, decided{Code: http.StatusOK, Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()})
	})
	reference = genericfilters.WithAuthorization(reference, authz, scheme.Codecs)
	reference = impersonation.WithImpersonation(reference, authz, scheme.Codecs)
	reference = genericfilters.WithAuthentication(reference, authn, genericfilters.Unauthorized(scheme.Codecs), nil, nil)
	reference = genericfilters.WithRequestInfo(reference, infos)

	servers := map[string]*httptest.Server{}
	for name, h := range map[string]http.Handler{"pkg/auth": candidate, "k8s.io/apiserver": reference} {
		s := httptest.NewUnstartedServer(h)
		s.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
		s.StartTLS()
		t.Cleanup(s.Close)
		servers[name] = s
	}

	certOf := func(user string, groups ...string) *tls.Certificate {
		certPEM, keyPEM, err := testEnv.ClientCertificate(user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	token := testEnv.Token
	callers := []struct {
		name   string
		token  string
		cert   *tls.Certificate
		header http.Header
	}{
		{name: "admin", token: token(env.UserAdmin)},
		{name: "exec-only", token: token(env.UserExecOnly)},
		{name: "no-exec", token: token(env.UserNoExec)},
		{name: "group not bound", token: token(env.UserExecGroupUnbound)},
		{name: "a token nobody issued", token: "not-a-token"},
		{name: "no credential"},
		{name: "client certificate, exec-only", cert: certOf(env.UserExecOnly, env.GroupExecutors)},
		{name: "client certificate, a group alone", cert: certOf("cert-user", env.GroupExecutors)},
		{name: "client certificate from another CA", cert: foreignCertificate(t, env.UserAdmin)},
		{name: "admin as exec-only", token: token(env.UserAdmin), header: http.Header{"Impersonate-User": {env.UserExecOnly}, "Impersonate-Group": {env.GroupExecutors}}},
		{name: "admin as exec-only with a UID and extra", token: token(env.UserAdmin), header: http.Header{
			"Impersonate-User": {env.UserExecOnly}, "Impersonate-Group": {env.GroupExecutors}, "Impersonate-Uid": {"uid-1"}, "Impersonate-Extra-Scopes": {"view", "exec"}}},
		{name: "admin as a user with extra", token: token(env.UserAdmin), header: http.Header{"Impersonate-User": {"someone"}, "Impersonate-Extra-Scopes": {"view", "exec"}}},
		{name: "admin as a service account", token: token(env.UserAdmin), header: http.Header{"Impersonate-User": {"system:serviceaccount:" + env.Namespace + ":default"}}},
		{name: "exec-only as admin", token: token(env.UserExecOnly), header: http.Header{"Impersonate-User": {env.UserAdmin}}},
		{name: "admin, group without user", token: token(env.UserAdmin), header: http.Header{"Impersonate-Group": {"system:masters"}}},
	}
	pods := "/api/v1/namespaces/" + env.Namespace + "/pods/"
	requests := []struct{ method, path string }{
		{http.MethodPost, pods + "p/exec?command=true&stdout=true"},
		{http.MethodPost, pods + "p/attach?stdout=true"},
		{http.MethodGet, pods + "p/log?follow=true"},
		{http.MethodPost, pods + "p/portforward?ports=80"},
		{http.MethodGet, "/api/v1/namespaces/" + env.Namespace + "/services/https:web:443/proxy/healthz"},
		{http.MethodPatch, pods + "p/ephemeralcontainers"},
		{http.MethodDelete, pods + "p"},
	}
	allowed := 0
	for _, c := range callers {
		for _, rq := range requests {
			got := map[string]decided{}
			for name, s := range servers {
				cfg := &tls.Config{RootCAs: x509.NewCertPool()}
				cfg.RootCAs.AddCert(s.Certificate())
				if c.cert != nil {
					cfg.Certificates = []tls.Certificate{*c.cert}
				}
				hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}
				req, err := http.NewRequestWithContext(t.Context(), rq.method, s.URL+rq.path, nil)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range c.header {
					req.Header[k] = v
				}
				if c.token != "" {
					req.Header.Set("Authorization", "Bearer "+c.token)
				}
				res, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var d decided
				if res.StatusCode == http.StatusOK {
					err = json.NewDecoder(res.Body).Decode(&d)
				} else {
					d.Code = res.StatusCode
				}
				res.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				d.Code = res.StatusCode
				slices.Sort(d.Groups)
				got[name] = d
			}
			ref, cand := got["k8s.io/apiserver"], got["pkg/auth"]
			if fmt.Sprint(ref) != fmt.Sprint(cand) {
				t.Errorf("%s, %s %s: k8s.io/apiserver decided %+v, pkg/auth %+v", c.name, rq.method, rq.path, ref, cand)
			}
			if ref.Code == http.StatusOK {
				allowed++
			}

		}
	}
	// A table where everything is refused proves little.
	if total := len(callers) * len(requests); allowed == 0 || allowed == total {
		t.Errorf("%d of %d requests allowed: the table must hold both outcomes", allowed, total)
	}
}

func writeDecided(w http.ResponseWriter, d decided) {
	w.Header().Set("Content-Type", "application/json")
	if d.Code != http.StatusOK {
		w.WriteHeader(d.Code)
	}
	_ = json.NewEncoder(w).Encode(d)
}

// foreignCertificate is a self-signed client certificate for user: no CA
// the environment trusts signed it.
func foreignCertificate(t *testing.T, user string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: user, Organization: []string{"system:masters"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return &c
}
