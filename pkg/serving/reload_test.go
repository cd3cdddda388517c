package serving

import (
	"context"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// servingFiles names the Secret keys a kubernetes.io/tls Secret projects.
func servingFiles(c testCert) map[string][]byte {
	return map[string][]byte{"tls.crt": c.certPEM, "tls.key": c.keyPEM}
}

func TestServingCertificateRotation(t *testing.T) {
	a, b := newTestCert(t, "cert-a", nil), newTestCert(t, "cert-b", nil)
	for _, tc := range []struct {
		name string
		// layout writes A and returns the cert and key paths and a
		// function that rotates them to the given contents.
		layout func(t *testing.T) (certFile, keyFile string, rotate func(map[string][]byte))
	}{
		{"Secret volume: ..data symlink swap", func(t *testing.T) (string, string, func(map[string][]byte)) {
			v := newSecretVolume(t, servingFiles(a))
			return v.path("tls.crt"), v.path("tls.key"), v.update
		}},
		{"files rewritten in place", func(t *testing.T) (string, string, func(map[string][]byte)) {
			dir := t.TempDir()
			cf, kf := dir+"/tls.crt", dir+"/tls.key"
			writeFiles(t, map[string][]byte{cf: a.certPEM, kf: a.keyPEM})
			return cf, kf, func(files map[string][]byte) {
				writeFiles(t, map[string][]byte{cf: files["tls.crt"], kf: files["tls.key"]})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, logs := testLogger(t)
			m := newMetrics()
			certFile, keyFile, rotate := tc.layout(t)
			cert, err := NewCertificate(CertificateOptions{CertFile: certFile, KeyFile: keyFile, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			addr := startServer(t, ServerOptions{Handler: okHandler, TLSConfig: TLSConfig(cert)})
			if got := servedName(t, addr, a, b); got != "cert-a" {
				t.Fatalf("before rotation served %q, want cert-a", got)
			}

			rotate(servingFiles(b))
			if err := cert.r.check(ctx); err != nil {
				t.Fatalf("reload after rotation: %v", err)
			}
			if got := servedName(t, addr, a, b); got != "cert-b" {
				t.Fatalf("new connection after rotation served %q, want cert-b", got)
			}
			if n := reloads(m, NameServing, resultSuccess); n != 1 {
				t.Errorf("successful reloads = %v, want 1", n)
			}
			if err := cert.r.check(ctx); err != nil || reloads(m, NameServing, resultSuccess) != 1 {
				t.Errorf("a check with unchanged files reloaded again (err %v)", err)
			}
			mustNotContain(t, "log", logs(), a.keyPEM, b.keyPEM)
		})
	}
}

func TestBadServingCertificateKeepsThePreviousOne(t *testing.T) {
	a, b := newTestCert(t, "cert-a", nil), newTestCert(t, "cert-b", nil)
	for _, tc := range []struct {
		name    string
		files   map[string][]byte // nil value: the file is removed
		wantErr string
	}{
		{"key of another certificate", map[string][]byte{"tls.crt": b.certPEM, "tls.key": a.keyPEM}, "private key does not match public key"},
		{"certificate not PEM", map[string][]byte{"tls.crt": []byte("not a certificate"), "tls.key": b.keyPEM}, "failed to find any PEM data in certificate input"},
		{"empty key", map[string][]byte{"tls.crt": b.certPEM, "tls.key": {}}, "failed to find any PEM data in key input"},
		{"key missing", map[string][]byte{"tls.crt": b.certPEM, "tls.key": nil}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, logs := testLogger(t)
			m := newMetrics()
			dir := t.TempDir()
			path := func(name string) string { return dir + "/" + name }
			writeFiles(t, map[string][]byte{path("tls.crt"): a.certPEM, path("tls.key"): a.keyPEM})
			cert, err := NewCertificate(CertificateOptions{CertFile: path("tls.crt"), KeyFile: path("tls.key"), Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			addr := startServer(t, ServerOptions{Handler: okHandler, TLSConfig: TLSConfig(cert)})

			for name, b := range tc.files {
				if b == nil {
					if err := os.Remove(path(name)); err != nil {
						t.Fatal(err)
					}
					continue
				}
				writeFiles(t, map[string][]byte{path(name): b})
			}
			for range 2 { // reported once, however often it is checked
				if err := cert.r.check(ctx); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("check = %v, want an error containing %q", err, tc.wantErr)
				}
			}
			if got := servedName(t, addr, a, b); got != "cert-a" {
				t.Errorf("after a bad rotation served %q, want the previous cert-a", got)
			}
			if n := reloads(m, NameServing, resultError); n != 1 {
				t.Errorf("failed reloads = %v, want 1", n)
			}
			out := logs()
			if strings.Count(out, "still serving the previous ones") != 1 || !strings.Contains(out, tc.wantErr) {
				t.Errorf("want one log line naming the error %q, got:\n%s", tc.wantErr, out)
			}
			mustNotContain(t, "log", out, a.keyPEM, b.keyPEM)

			// Fixed files are picked up.
			writeFiles(t, map[string][]byte{path("tls.crt"): b.certPEM, path("tls.key"): b.keyPEM})
			if err := cert.r.check(ctx); err != nil {
				t.Fatal(err)
			}
			if got := servedName(t, addr, a, b); got != "cert-b" {
				t.Errorf("after fixing the files served %q, want cert-b", got)
			}
		})
	}
}

func TestNewCertificateRefusesABadPair(t *testing.T) {
	a, b := newTestCert(t, "cert-a", nil), newTestCert(t, "cert-b", nil)
	if _, err := NewCertificate(CertificateOptions{CertFile: writeTemp(t, a.certPEM), KeyFile: writeTemp(t, b.keyPEM)}); err == nil {
		t.Fatal("NewCertificate accepted a key that does not match the certificate")
	}
}

// TestReloadSeriesStartAtZero: every name's success and error series are
// exported at 0 before any reload, so Prometheus sees the first failure as
// an increase.
func TestReloadSeriesStartAtZero(t *testing.T) {
	a := newTestCert(t, "cert-a", nil)
	m := newMetrics()
	if _, err := NewCertificate(CertificateOptions{CertFile: writeTemp(t, a.certPEM), KeyFile: writeTemp(t, a.keyPEM), Metrics: m}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewClientCA(ClientCAOptions{File: writeTemp(t, a.certPEM), Metrics: m}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.CertificateReloadsTotal); n != 4 {
		t.Fatalf("exported %d reload series, want 4 (serving and client-ca, success and error)", n)
	}
	for _, name := range []string{NameServing, NameClientCA} {
		for _, res := range []string{resultSuccess, resultError} {
			if n := reloads(m, name, res); n != 0 {
				t.Errorf("%s %s reloads = %v before any reload, want 0", name, res, n)
			}
		}
	}
}

// TestRunPicksUpRotation checks the periodic loop, not just check.
func TestRunPicksUpRotation(t *testing.T) {
	a, b := newTestCert(t, "cert-a", nil), newTestCert(t, "cert-b", nil)
	v := newSecretVolume(t, servingFiles(a))
	cert, err := NewCertificate(CertificateOptions{CertFile: v.path("tls.crt"), KeyFile: v.path("tls.key"), Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	checked := make(chan struct{})
	cert.r.afterCheck = func() {
		select {
		case checked <- struct{}{}:
		case <-ctx.Done():
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); cert.Run(ctx) }()
	defer func() { cancel(); <-done }()

	v.update(servingFiles(b))
	// The first check received may have started before the update; the
	// second started after it.
	for range 2 {
		select {
		case <-checked:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not check the files")
		}
	}
	got, _ := cert.GetCertificate(nil)
	if got.Leaf.Subject.CommonName != "cert-b" {
		t.Errorf("after Run saw the update: %q, want cert-b", got.Leaf.Subject.CommonName)
	}
}

func TestClientCARotation(t *testing.T) {
	ca1, ca2 := newTestCert(t, "ca-1", nil), newTestCert(t, "ca-2", nil)
	client1, client2 := newTestCert(t, "alice", &ca1), newTestCert(t, "bob", &ca2)
	verifies := func(pool *x509.CertPool, c testCert) bool {
		_, err := c.cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	}
	truncated := ca2.certPEM[:len(ca2.certPEM)/2]
	for _, tc := range []struct {
		name    string
		bundle  []byte
		wantErr string // empty: the new bundle is used
		trusted testCert
	}{
		{"new CA", ca2.certPEM, "", client2},
		{"both CAs while clients move over", append(append([]byte{}, ca1.certPEM...), ca2.certPEM...), "", client2},
		{"no PEM", []byte("garbage"), "holds no PEM certificate", client1},
		{"truncated mid-certificate", append(append([]byte{}, ca1.certPEM...), truncated...), "trailing data", client1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, logs := testLogger(t)
			m := newMetrics()
			v := newSecretVolume(t, map[string][]byte{"ca.crt": ca1.certPEM})
			ca, err := NewClientCA(ClientCAOptions{File: v.path("ca.crt"), Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			if !verifies(ca.Pool(), client1) || verifies(ca.Pool(), client2) {
				t.Fatal("initial pool does not trust exactly ca-1")
			}
			v.update(map[string][]byte{"ca.crt": tc.bundle})
			err = ca.r.check(ctx)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("check = %v, want %q", err, tc.wantErr)
			}
			if !verifies(ca.Pool(), tc.trusted) {
				t.Errorf("pool after rotation does not trust %s", tc.trusted.cert.Subject.CommonName)
			}
			result := resultSuccess
			if tc.wantErr != "" {
				result = resultError
				if !strings.Contains(logs(), "still serving the previous ones") {
					t.Errorf("bad bundle not logged:\n%s", logs())
				}
			}
			if n := reloads(m, NameClientCA, result); n != 1 {
				t.Errorf("%s reloads = %v, want 1", result, n)
			}
		})
	}
}
