package auth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"net/http"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	asn1util "k8s.io/apimachinery/pkg/apis/asn1"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

func credentialID(c *x509.Certificate) map[string][]string {
	sum := sha256.Sum256(c.Raw)
	return map[string][]string{credentialIDKey: {"X509SHA256=" + hex.EncodeToString(sum[:])}}
}

func TestClientCertificate(t *testing.T) {
	type tcase struct {
		name       string
		noCAs      bool
		header     http.Header
		state      func(p *testPKI) *tls.ConnectionState
		wantCaller func(state *tls.ConnectionState) *identity.Caller // nil = 401
	}
	callerFor := func(name, uid string, groups ...string) func(*tls.ConnectionState) *identity.Caller {
		return func(s *tls.ConnectionState) *identity.Caller {
			return &identity.Caller{Name: name, UID: uid, Groups: groups, Extra: credentialID(s.PeerCertificates[0])}
		}
	}
	tests := []tcase{
		{
			name: "valid: user CN, groups O",
			state: func(p *testPKI) *tls.ConnectionState {
				return p.client(t, pkix.Name{CommonName: "alice", Organization: []string{"dev", "ops"}})
			},
			wantCaller: callerFor("alice", "", "dev", "ops", "system:authenticated"),
		},
		{
			name: "UID attribute becomes the user's UID",
			state: func(p *testPKI) *tls.ConnectionState {
				return p.client(t, pkix.Name{CommonName: "alice", ExtraNames: []pkix.AttributeTypeAndValue{
					{Type: asn1util.X509UID(), Value: "alice-uid"},
				}})
			},
			wantCaller: callerFor("alice", "alice-uid", "system:authenticated"),
		},
		{
			name: "two UID attributes",
			state: func(p *testPKI) *tls.ConnectionState {
				return p.client(t, pkix.Name{CommonName: "alice", ExtraNames: []pkix.AttributeTypeAndValue{
					{Type: asn1util.X509UID(), Value: "a"}, {Type: asn1util.X509UID(), Value: "b"},
				}})
			},
		},
		{
			name: "chain through an intermediate the client sends",
			state: func(p *testPKI) *tls.ConnectionState {
				leaf, _ := p.issue(t, p.intermediate, p.interKey, &x509.Certificate{Subject: pkix.Name{CommonName: "bob"}})
				return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf, p.intermediate}}
			},
			wantCaller: callerFor("bob", "", "system:authenticated"),
		},
		{
			name: "intermediate not sent",
			state: func(p *testPKI) *tls.ConnectionState {
				leaf, _ := p.issue(t, p.intermediate, p.interKey, &x509.Certificate{Subject: pkix.Name{CommonName: "bob"}})
				return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
			},
		},
		{
			name: "issued by another CA",
			state: func(p *testPKI) *tls.ConnectionState {
				leaf, _ := p.issue(t, p.otherCA, p.otherKey, &x509.Certificate{Subject: pkix.Name{CommonName: "mallory"}})
				return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
			},
		},
		{
			name: "another CA cannot pose as an intermediate",
			state: func(p *testPKI) *tls.ConnectionState {
				leaf, _ := p.issue(t, p.otherCA, p.otherKey, &x509.Certificate{Subject: pkix.Name{CommonName: "mallory"}})
				return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf, p.otherCA}}
			},
		},
		{
			name: "server-auth-only certificate",
			state: func(p *testPKI) *tls.ConnectionState {
				leaf, _ := p.issue(t, p.ca, p.caKey, &x509.Certificate{
					Subject:     pkix.Name{CommonName: "web"},
					ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				})
				return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
			},
		},
		{
			name: "expired",
			state: func(p *testPKI) *tls.ConnectionState {
				leaf, _ := p.issue(t, p.ca, p.caKey, &x509.Certificate{
					Subject: pkix.Name{CommonName: "alice"}, NotBefore: p.now.Add(-2 * time.Hour), NotAfter: p.now.Add(-time.Minute),
				})
				return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
			},
		},
		{
			name: "no common name",
			state: func(p *testPKI) *tls.ConnectionState {
				return p.client(t, pkix.Name{Organization: []string{"dev"}})
			},
		},
		{
			name:  "x509 authentication off",
			noCAs: true,
			state: func(p *testPKI) *tls.ConnectionState {
				return p.client(t, pkix.Name{CommonName: "alice"})
			},
		},
		{
			name:   "a bearer token wins over the certificate",
			header: bearer("alice-token"),
			state: func(p *testPKI) *tls.ConnectionState {
				return p.client(t, pkix.Name{CommonName: "bob"})
			},
			wantCaller: func(*tls.ConnectionState) *identity.Caller {
				return &identity.Caller{Name: "alice", UID: "alice-uid", Groups: []string{"dev", "system:authenticated"}}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, func(o *Options) {
				if tc.noCAs {
					o.ClientCAPool = nil
				}
			})
			state := tc.state(env.pki)
			var want *identity.Caller
			if tc.wantCaller != nil {
				want = tc.wantCaller(state)
				env.api.grant(rule(want.Name, "create", "", "pods/exec", "ci", "job-42"))
			}
			for _, op := range []struct {
				name string
				do   func() (identity.Caller, error)
			}{
				{"Authenticate", func() (identity.Caller, error) {
					return env.authz.Authenticate(context.Background(), newRequest(tc.header, state))
				}},
				{"AuthorizeResource", func() (identity.Caller, error) {
					return env.authz.AuthorizeResource(context.Background(), newRequest(tc.header, state), execJob42)
				}},
			} {
				caller, err := op.do()
				if want == nil {
					if code, _ := statusOf(t, err); code != http.StatusUnauthorized {
						t.Errorf("%s: code %d (%v), want 401", op.name, code, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", op.name, err)
				}
				if !reflect.DeepEqual(caller, *want) {
					t.Errorf("%s: caller = %#v, want %#v", op.name, caller, *want)
				}
			}
			if want != nil && tc.header == nil {
				sars := env.api.seenSARs()
				if len(sars) != 1 || sars[0].User != want.Name || !reflect.DeepEqual(sars[0].Groups, want.Groups) ||
					len(sars[0].Extra[credentialIDKey]) != 1 {
					t.Errorf("SARs = %#v, want one for %#v", sars, want)
				}
			}
			if tr, _ := env.api.calls(); tc.header == nil && tr != 0 {
				t.Errorf("a certificate caused %d TokenReviews", tr)
			}
		})
	}
}

func TestClientCertificateExpiresWhileCached(t *testing.T) {
	env := newTestEnv(t, nil)
	leaf, _ := env.pki.issue(t, env.pki.ca, env.pki.caKey, &x509.Certificate{
		Subject: pkix.Name{CommonName: "alice"}, NotAfter: env.pki.now.Add(5 * time.Second),
	})
	state := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	env.api.grant(rule("alice", "create", "", "pods/exec", "ci", "job-42"))
	if _, err := env.authz.AuthorizeResource(context.Background(), newRequest(nil, state), execJob42); err != nil {
		t.Fatal(err)
	}
	env.clock.Step(6 * time.Second) // within CacheTTL, past NotAfter
	_, err := env.authz.AuthorizeResource(context.Background(), newRequest(nil, state), execJob42)
	if code, _ := statusOf(t, err); code != http.StatusUnauthorized {
		t.Errorf("expired certificate: code %d, want 401", code)
	}
}

// TestClientCAPoolIsAskedPerRequest: a CA bundle rotated on disk (the
// gateway reloads it into ClientCAPool) decides the very next request.
func TestClientCAPoolIsAskedPerRequest(t *testing.T) {
	var pool atomic.Pointer[x509.CertPool]
	env := newTestEnv(t, func(o *Options) {
		o.ClientCAPool = pool.Load
	})
	pool.Store(env.pki.roots)
	other := x509.NewCertPool()
	other.AddCert(env.pki.otherCA)
	leaf, _ := env.pki.issue(t, env.pki.otherCA, env.pki.otherKey, &x509.Certificate{Subject: pkix.Name{CommonName: "carol"}})
	state := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	for _, step := range []struct {
		name    string
		pool    *x509.CertPool
		trusted bool
	}{
		{"client-ca only", env.pki.roots, false},
		{"rotated to other-ca", other, true},
		{"rotated back", env.pki.roots, false},
	} {
		pool.Store(step.pool)
		caller, err := env.authz.Authenticate(context.Background(), newRequest(nil, state))
		switch {
		case step.trusted && (err != nil || caller.Name != "carol"):
			t.Errorf("%s: caller %q, %v; want carol", step.name, caller.Name, err)
		case !step.trusted && err == nil:
			t.Errorf("%s: authenticated %q, want 401", step.name, caller.Name)
		case !step.trusted:
			if code, _ := statusOf(t, err); code != http.StatusUnauthorized {
				t.Errorf("%s: code %d, want 401", step.name, code)
			}
		}
	}
}
