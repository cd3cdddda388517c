package env

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestIssueServingCertVerifiesForLoopbackAndServiceNames(t *testing.T) {
	dir := t.TempDir()
	ca, err := newAuthority(dir, "ca", "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	hosts := append(slices.Clone(loopbackHosts), aggregatedService+"."+KarmadaSystem+".svc")
	kp, err := ca.issue(dir, "serving", "serving", nil, hosts)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(kp.TLS.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("verify for %q: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.pool, DNSName: "example.com"}); err == nil {
		t.Error("serving certificate verified for example.com, a name it was not issued for")
	}
	other, err := newAuthority(dir, "other", "other-ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: other.pool, DNSName: "127.0.0.1"}); err == nil {
		t.Error("serving certificate verified against an unrelated CA")
	}
	fi, err := os.Stat(kp.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file %s has mode %v, want 0600", kp.KeyFile, fi.Mode().Perm())
	}
}

func TestIssueClientCert(t *testing.T) {
	dir := t.TempDir()
	ca, err := newAuthority(dir, "ca", "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.issue(dir, "client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(kp.TLS.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "kube-apiserver-kubelet-client" || !slices.Equal(leaf.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("subject = %v", leaf.Subject)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify as client: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verified for server auth")
	}
}

func TestWriteTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.csv")
	tokens := map[string]string{"admin": "t1", "exec-only": "t2", "unused": "t3"}
	users := map[string]string{"admin": "system:masters", "exec-only": ""}
	if err := writeTokenFile(path, tokens, users); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	slices.Sort(lines)
	want := []string{`t1,admin,uid-admin,"system:masters"`, `t2,exec-only,uid-exec-only`}
	if !slices.Equal(lines, want) {
		t.Errorf("token file =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
