package serving

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// testCert is a certificate with its PEM files' contents.
type testCert struct {
	cert    *x509.Certificate
	certPEM []byte
	keyPEM  []byte
	key     *ecdsa.PrivateKey
}

// newTestCert issues a certificate for 127.0.0.1 named cn, signed by parent
// or, when parent is nil, by itself as a CA (so it is its own trust root).
func newTestCert(t *testing.T, cn string, parent *testCert) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testCert{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// secretVolume lays files out as the kubelet projects a Secret: each name a
// symlink into `..data`, itself a symlink to a timestamped directory that an
// update replaces by renaming a new `..data` over the old one.
type secretVolume struct {
	t   *testing.T
	dir string
	gen int
}

func newSecretVolume(t *testing.T, files map[string][]byte) *secretVolume {
	v := &secretVolume{t: t, dir: t.TempDir()}
	v.update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *secretVolume) path(name string) string { return filepath.Join(v.dir, name) }

// update writes files into a new timestamped directory and swaps `..data`
// to it atomically, then removes the old directory, as the kubelet does.
func (v *secretVolume) update(files map[string][]byte) {
	t := v.t
	t.Helper()
	v.gen++
	ts := "..2026_12_03_00_00_0" + string(rune('0'+v.gen))
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, ts, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(v.dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// writeFiles replaces files in place, as a writer without the symlink dance
// (a ConfigMap-less host path, a sidecar) does.
func writeFiles(t *testing.T, files map[string][]byte) {
	t.Helper()
	for p, b := range files {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// startServer serves handler with NewServer(o) on loopback and returns its address.
func startServer(t *testing.T, o ServerOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.ErrorLog == nil {
		// Handshakes cut by the test's own clients are not worth a line.
		o.ErrorLog = log.New(io.Discard, "", 0)
	}
	srv := NewServer(o)
	done := make(chan error, 1)
	go func() { done <- Serve(srv, ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// testLogger returns a context whose logger keeps what is logged, and a
// function that returns it so far.
func testLogger(t *testing.T) (context.Context, func() string) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	return ctx, func() string {
		return logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	}
}

func newMetrics() *metrics.Metrics { return metrics.New(prometheus.NewRegistry()) }

func reloads(m *metrics.Metrics, name, result string) float64 {
	return testutil.ToFloat64(m.CertificateReloadsTotal.WithLabelValues(name, result))
}

// servedName dials addr trusting roots and returns the common name of the
// certificate the server presented on this new connection.
func servedName(t *testing.T, addr string, roots ...testCert) string {
	t.Helper()
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r.cert)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// okHandler answers every request, for servers whose handler does not matter.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })

// mustNotContain fails if s holds any base64 line of the PEM keys.
func mustNotContain(t *testing.T, what, s string, keys ...[]byte) {
	t.Helper()
	for _, k := range keys {
		for _, line := range strings.Split(string(k), "\n") {
			if len(line) > 16 && !strings.HasPrefix(line, "-----") && strings.Contains(s, line) {
				t.Errorf("%s contains key material", what)
			}
		}
	}
}

// writeTemp writes b to a new file and returns its path.
func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "pem-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}
