package upload

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"k8s.io/klog/v2"
)

// S3Options configures an S3Store.
type S3Options struct {
	// Endpoint is the store's URL (https://s3.example:9000); empty for
	// AWS, whose endpoint follows from Region.
	Endpoint string
	Region   string
	Bucket   string
	// PathStyle addresses the bucket in the path (endpoint/bucket/key), as
	// most S3-compatible stores want; otherwise in the host name
	// (bucket.endpoint/key, virtual-hosted).
	PathStyle bool
	// CAFile, when set, holds the CA certificates the endpoint's serving
	// certificate is verified with, instead of the system's.
	CAFile string
	// AccessKeyIDFile and SecretAccessKeyFile hold the credentials. They
	// are read at each put, so a rotated Secret is used without a restart.
	AccessKeyIDFile, SecretAccessKeyFile string
	// DialTimeout bounds connecting and the TLS handshake, and how long a
	// put waits for the store's answer once its body was sent.
	DialTimeout time.Duration
	// Logger is told what NewS3Store warns of (a cleartext endpoint).
	Logger klog.Logger
}

// S3Store puts objects in one bucket of an S3-compatible store.
type S3Store struct {
	client *s3.Client
	bucket string
}

// NewS3Store checks o and builds the client. It does not reach the store:
// a store that is down at start only delays uploads.
func NewS3Store(o S3Options) (*S3Store, error) {
	if o.Bucket == "" || o.Region == "" || o.AccessKeyIDFile == "" || o.SecretAccessKeyFile == "" || o.DialTimeout <= 0 {
		return nil, errors.New("s3: a bucket, a region, credential files and a dial timeout are required")
	}
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("s3 endpoint %q is not an http(s) URL without credentials or query", o.Endpoint)
		}
		if u.Scheme == "http" {
			// Allowed, for a store on the pod's own network in a test; the
			// recordings hold whatever sessions printed.
			o.Logger.Info("WARNING: the S3 endpoint is http://: recordings, and what signs each upload, go to the store in cleartext; use https://", "endpoint", o.Endpoint)
		}
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("s3 CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("s3 CA file %s holds no PEM certificate", o.CAFile)
		}
		tlsConfig.RootCAs = pool
	}
	// Every phase of a put but sending its body has a deadline of its own;
	// the put as a whole has the Uploader's.
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   o.DialTimeout,
		ResponseHeaderTimeout: o.DialTimeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		id, err := readSecret(o.AccessKeyIDFile)
		if err != nil {
			return aws.Credentials{}, err
		}
		key, err := readSecret(o.SecretAccessKeyFile)
		if err != nil {
			return aws.Credentials{}, err
		}
		return aws.Credentials{AccessKeyID: id, SecretAccessKey: key, Source: "files"}, nil
	})
	s3opts := s3.Options{
		Region:       o.Region,
		Credentials:  creds,
		UsePathStyle: o.PathStyle,
		HTTPClient:   &http.Client{Transport: transport},
		// Content-MD5, which S3 checks and the compatible stores follow
		// (SeaweedFS: TestS3StoreAnswersOfARealStore), instead of the
		// SDK's newer checksums, which not all of them take.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if o.Endpoint != "" {
		s3opts.BaseEndpoint = aws.String(strings.TrimSuffix(o.Endpoint, "/"))
	}
	return &S3Store{client: s3.New(s3opts), bucket: o.Bucket}, nil
}

// readSecret is a credential file's value without its line end. Its error
// names the file, never what it holds.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("s3 credentials: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("s3 credentials: %s is empty", path)
	}
	return v, nil
}

// Put stores obj, which the store verifies against its MD5.
func (s *S3Store) Put(ctx context.Context, obj Object) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(obj.Key),
		Body:          obj.Body,
		ContentLength: aws.Int64(obj.Size),
		ContentMD5:    aws.String(base64.StdEncoding.EncodeToString(obj.MD5)),
		// asciinema's own server serves recordings so.
		ContentType: aws.String("application/x-asciicast"),
		Metadata:    asciiMetadata(obj.Metadata),
	})
	if err != nil {
		err = fmt.Errorf("s3 bucket %s: %w", s.bucket, err)
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) && rejectsTheObject(re.HTTPStatusCode()) {
			return &RejectedError{Err: err}
		}
		return err
	}
	return nil
}

// rejectsTheObject reports whether a put answered status was refused for
// what it carried: 400 (a malformed request, a digest that did not match,
// an object too large), 411 and 413. Every other status, 403 and 5xx
// among them, fails any put alike.
func rejectsTheObject(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusLengthRequired, http.StatusRequestEntityTooLarge:
		return true
	}
	return false
}

// asciiMetadata is m with what an HTTP header cannot carry replaced: user
// metadata travels as x-amz-meta-* headers.
func asciiMetadata(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = strings.Map(func(r rune) rune {
			if r < 0x20 || r > 0x7e {
				return '?'
			}
			return r
		}, v)
	}
	return out
}
