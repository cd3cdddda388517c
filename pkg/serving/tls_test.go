package serving

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// TestTLSAsksForAClientCertificate: the proxy's TLS asks every client for
// a certificate, at TLS 1.3 and 1.2, and serves one that sends none. The
// request is what makes a Go server send its TLS 1.3 session tickets
// after the client's Finished, whose ACK a client without TCP_NODELAY
// otherwise waits for (TLSConfig); without it GetClientCertificate is
// never called.
func TestTLSAsksForAClientCertificate(t *testing.T) {
	a := newTestCert(t, "cert-a", nil)
	cf, kf := t.TempDir()+"/tls.crt", t.TempDir()+"/tls.key"
	writeFiles(t, map[string][]byte{cf: a.certPEM, kf: a.keyPEM})
	cert, err := NewCertificate(CertificateOptions{CertFile: cf, KeyFile: kf, Metrics: newMetrics()})
	if err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, ServerOptions{Handler: okHandler, TLSConfig: TLSConfig(cert)})
	pool := x509.NewCertPool()
	pool.AddCert(a.cert)
	for _, version := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		var asked atomic.Int32
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pool, MinVersion: version, MaxVersion: version,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				asked.Add(1)
				return &tls.Certificate{}, nil // none to send
			},
		}}}
		res, err := client.Get("https://" + addr + "/")
		if err != nil {
			t.Fatalf("TLS %x: %v", version, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		client.CloseIdleConnections()
		if string(body) != "ok" {
			t.Errorf("TLS %x: served %q", version, body)
		}
		if asked.Load() != 1 {
			t.Errorf("TLS %x: the server asked for a client certificate %d times, want once per handshake", version, asked.Load())
		}
	}
}
