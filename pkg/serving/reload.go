package serving

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// DefaultReloadInterval is how often the files are read again. The kubelet
// takes up to a minute to project a renewed Secret, and cert-manager renews
// days before expiry, so a few seconds more cost nothing.
const DefaultReloadInterval = 5 * time.Second

// Names label the reload metrics and log lines.
const (
	NameServing  = "serving"
	NameClientCA = "client-ca"
)

// Results of metrics.CertificateReloadsTotal.
const (
	resultSuccess = "success"
	resultError   = "error"
)

// CertificateOptions configures NewCertificate.
type CertificateOptions struct {
	// CertFile and KeyFile are the PEM serving certificate (chain) and key.
	CertFile, KeyFile string
	// Interval between reads; zero is DefaultReloadInterval.
	Interval time.Duration
	// Metrics receives reload counts and the served certificate's expiry;
	// nil records nothing.
	Metrics *metrics.Metrics
}

// Certificate is a serving certificate re-read from disk by Run. A new pair
// that does not load is reported and the previous one stays in use.
type Certificate struct {
	r *reloader[tls.Certificate]
}

// NewCertificate loads the pair once; an error here is a startup error.
func NewCertificate(o CertificateOptions) (*Certificate, error) {
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("serving: a certificate file and a key file are required")
	}
	r, err := newReloader(NameServing, []string{o.CertFile, o.KeyFile}, o.Interval, o.Metrics, parseKeyPair)
	if err != nil {
		return nil, err
	}
	return &Certificate{r: r}, nil
}

// GetCertificate is tls.Config.GetCertificate: every handshake gets the
// pair loaded last.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.r.current.Load(), nil
}

// Run re-reads the files every interval until ctx ends.
func (c *Certificate) Run(ctx context.Context) { c.r.run(ctx) }

func parseKeyPair(contents [][]byte) (*tls.Certificate, time.Time, error) {
	// tls.X509KeyPair's errors name what is wrong, never the key material.
	cert, err := tls.X509KeyPair(contents[0], contents[1])
	if err != nil {
		return nil, time.Time{}, err
	}
	return &cert, cert.Leaf.NotAfter, nil
}

// ClientCAOptions configures NewClientCA.
type ClientCAOptions struct {
	// File is the PEM CA bundle that verifies client certificates.
	File string
	// Interval between reads; zero is DefaultReloadInterval.
	Interval time.Duration
	// Metrics receives reload counts and the bundle's first expiry; nil
	// records nothing.
	Metrics *metrics.Metrics
}

// ClientCA is a client CA bundle re-read from disk by Run. A new bundle that
// holds no certificate is reported and the previous one stays in use.
type ClientCA struct {
	r *reloader[x509.CertPool]
}

// NewClientCA loads the bundle once; an error here is a startup error.
func NewClientCA(o ClientCAOptions) (*ClientCA, error) {
	if o.File == "" {
		return nil, errors.New("serving: a client CA file is required")
	}
	r, err := newReloader(NameClientCA, []string{o.File}, o.Interval, o.Metrics, parseCABundle)
	if err != nil {
		return nil, err
	}
	return &ClientCA{r: r}, nil
}

// Pool is the bundle loaded last. Callers ask for it on every verification,
// so a rotated bundle applies from the next request on.
func (c *ClientCA) Pool() *x509.CertPool { return c.r.current.Load() }

// Run re-reads the file every interval until ctx ends.
func (c *ClientCA) Run(ctx context.Context) { c.r.run(ctx) }

// parseCABundle is stricter than CertPool.AppendCertsFromPEM, which skips
// what it cannot parse: a bundle truncated or corrupted by a bad rotation
// must not silently stop trusting some of the CAs.
func parseCABundle(contents [][]byte) (*x509.CertPool, time.Time, error) {
	pool := x509.NewCertPool()
	var first time.Time
	rest := contents[0]
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("CA bundle: %w", err)
		}
		pool.AddCert(c)
		if first.IsZero() || c.NotAfter.Before(first) {
			first = c.NotAfter
		}
	}
	if first.IsZero() {
		return nil, time.Time{}, errors.New("CA bundle holds no PEM certificate")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, time.Time{}, errors.New("CA bundle has trailing data that is not PEM")
	}
	return pool, first, nil
}

// reloader holds the value parsed from files and replaces it when their
// contents change and parse. Polling rather than inotify: Kubernetes
// projects Secret updates by swapping a `..data` symlink, which watches on
// the files themselves miss, and the files are a few KiB.
type reloader[T any] struct {
	name     string
	files    []string
	interval time.Duration
	metrics  *metrics.Metrics
	parse    func([][]byte) (*T, time.Time, error)

	current atomic.Pointer[T]

	mu sync.Mutex
	// seen is the digest of the contents tried last, loaded or not, so an
	// unchanged bad rotation is reported once, not on every tick.
	seen [sha256.Size]byte
	// failing is why the contents seen last did not load.
	failing error
	// unreadable is set while a file cannot be read, reported once.
	unreadable bool

	// afterCheck, when set (tests), is called after every periodic check.
	afterCheck func()
}

func newReloader[T any](name string, files []string, interval time.Duration, m *metrics.Metrics,
	parse func([][]byte) (*T, time.Time, error)) (*reloader[T], error) {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	r := &reloader[T]{name: name, files: files, interval: interval, metrics: m, parse: parse}
	contents, err := r.read()
	if err != nil {
		return nil, fmt.Errorf("serving: %s: %w", name, err)
	}
	v, notAfter, err := parse(contents)
	if err != nil {
		return nil, fmt.Errorf("serving: %s %v: %w", name, files, err)
	}
	r.current.Store(v)
	r.seen = digest(contents)
	r.setExpiry(notAfter)
	if m != nil {
		// Both results exist from the start: a series born at 1 on the
		// first failed reload shows Prometheus no increase, so the alert
		// on it would miss a single bad rotation.
		for _, res := range []string{resultSuccess, resultError} {
			m.CertificateReloadsTotal.WithLabelValues(name, res)
		}
	}
	return r, nil
}

func (r *reloader[T]) run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = r.check(ctx)
		if r.afterCheck != nil {
			r.afterCheck()
		}
	}
}

// check loads the files if their contents changed. It returns the error
// that kept the previous value in use, if any.
func (r *reloader[T]) check(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	logger := klog.FromContext(ctx).WithValues("name", r.name, "files", r.files)
	contents, err := r.read()
	if err != nil {
		// Reported once per outage, as an unchanged bad pair is.
		if !r.unreadable {
			r.unreadable = true
			r.count(resultError)
			logger.Error(err, "Could not read certificate files; still serving the previous ones")
		}
		return err
	}
	r.unreadable = false
	d := digest(contents)
	if d == r.seen {
		return r.failing
	}
	v, notAfter, err := r.parse(contents)
	// A kubelet swaps cert and key together, but a writer that replaces one
	// file and then the other can be caught in between: read again while
	// the contents keep changing rather than report that as an error.
	for i := 0; err != nil && i < 3; i++ {
		again, readErr := r.read()
		if readErr != nil || digest(again) == d {
			break
		}
		d = digest(again)
		v, notAfter, err = r.parse(again)
	}
	r.seen, r.failing = d, err
	if err != nil {
		r.count(resultError)
		logger.Error(err, "Changed certificate files do not load; still serving the previous ones")
		return err
	}
	r.current.Store(v)
	r.setExpiry(notAfter)
	r.count(resultSuccess)
	logger.Info("Reloaded certificate files", "notAfter", notAfter.UTC().Format(time.RFC3339))
	return nil
}

func (r *reloader[T]) read() ([][]byte, error) {
	contents := make([][]byte, len(r.files))
	for i, f := range r.files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		contents[i] = b
	}
	return contents, nil
}

func (r *reloader[T]) count(result string) {
	if r.metrics != nil {
		r.metrics.CertificateReloadsTotal.WithLabelValues(r.name, result).Inc()
	}
}

func (r *reloader[T]) setExpiry(notAfter time.Time) {
	if r.metrics != nil {
		r.metrics.CertificateExpiry.WithLabelValues(r.name).Set(float64(notAfter.Unix()))
	}
}

// digest identifies contents without keeping a second copy of key material.
func digest(contents [][]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, c := range contents {
		fmt.Fprintf(h, "%d:", len(c))
		h.Write(c)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}
