package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/upload"
)

// recordingOptions are the session recording flags.
type recordingOptions struct {
	mode, dir, namespaces string
	stdin, failClosed     bool
	maxSessionMB          int
	maxTotalMB            int
	s3                    s3Options
}

// s3Options are the flags of the upload of recordings to a bucket.
type s3Options struct {
	endpoint, region, bucket, prefix     string
	caFile, accessKeyFile, secretKeyFile string
	pathStyle                            bool
	timeout, dialTimeout                 time.Duration
	initialBackoff, maxBackoff, rescan   time.Duration
	drain                                time.Duration
}

func bindRecordingFlags(fs *flag.FlagSet) *recordingOptions {
	o := &recordingOptions{}
	fs.StringVar(&o.mode, "record-sessions", "none", "record exec and attach sessions as asciicast v2 files: none, tty (sessions with a terminal) or all")
	fs.StringVar(&o.namespaces, "record-sessions-namespaces", "", "per-namespace overrides of --record-sessions, as namespace=mode,... (e.g. prod=all,dev=none)")
	fs.StringVar(&o.dir, "record-sessions-dir", "", "directory the recordings are written to (files 0600, renamed into place when the session ends); with --record-sessions-s3-bucket, the spool they wait in for the bucket")
	fs.BoolVar(&o.stdin, "record-sessions-stdin", false, "also record what clients send (asciicast input events); off by default: stdin carries what users type, secrets included")
	fs.IntVar(&o.maxSessionMB, "record-sessions-max-session-size", 100, "megabytes a recording may take; later output is not recorded (the file says so)")
	fs.IntVar(&o.maxTotalMB, "record-sessions-max-total-size", 10240, "megabytes the recording directory may hold; new sessions are not recorded beyond it")
	fs.BoolVar(&o.failClosed, "record-sessions-fail-closed", false, "refuse a session that cannot be recorded (and cut one whose recording fails or reaches a cap); by default it goes on unrecorded and karmada_gateway_recording_failures_total counts it")

	s := &o.s3
	fs.StringVar(&s.bucket, "record-sessions-s3-bucket", "", "upload each finished recording to this bucket of an S3-compatible store, then remove it from --record-sessions-dir; empty: recordings stay in the directory")
	fs.StringVar(&s.endpoint, "record-sessions-s3-endpoint", "", "URL of the S3-compatible store (https://host:port); empty: AWS S3 in --record-sessions-s3-region")
	fs.StringVar(&s.region, "record-sessions-s3-region", "us-east-1", "region the requests are signed for")
	fs.StringVar(&s.prefix, "record-sessions-s3-prefix", "", "prefix of the objects' keys (e.g. recordings/prod/); the key is the prefix and the recording's file name")
	fs.BoolVar(&s.pathStyle, "record-sessions-s3-path-style", false, "address the bucket in the URL's path (endpoint/bucket/key), as most S3-compatible stores want, not in the host name (bucket.endpoint, virtual-hosted)")
	fs.StringVar(&s.caFile, "record-sessions-s3-ca-file", "", "PEM CA certificates the endpoint's certificate is verified with; empty: the system's")
	fs.StringVar(&s.accessKeyFile, "record-sessions-s3-access-key-id-file", "", "file holding the access key ID (read at each upload: a rotated Secret needs no restart)")
	fs.StringVar(&s.secretKeyFile, "record-sessions-s3-secret-access-key-file", "", "file holding the secret access key (read at each upload)")
	fs.DurationVar(&s.timeout, "record-sessions-s3-timeout", 2*time.Minute, "deadline of one recording's upload")
	fs.DurationVar(&s.dialTimeout, "record-sessions-s3-dial-timeout", 10*time.Second, "deadline of connecting to the store, of its TLS handshake, and of its answer once an upload was sent")
	fs.DurationVar(&s.initialBackoff, "record-sessions-s3-initial-backoff", time.Second, "wait after a failed upload before the spool is tried again; it doubles at each failure in a row")
	fs.DurationVar(&s.maxBackoff, "record-sessions-s3-max-backoff", time.Minute, "longest wait between tries of a failing store")
	fs.DurationVar(&s.rescan, "record-sessions-s3-rescan-interval", time.Minute, "how often the directory is read for recordings not announced (another replica's in a shared directory); finished sessions are uploaded at once")
	fs.DurationVar(&s.drain, "record-sessions-s3-drain-timeout", 10*time.Second, "on shutdown, after the streams drained, how long the recordings still in the spool may take to be uploaded; what is left stays in the directory")
	return o
}

// recordings is what the recording flags build: nothing, a Recorder, or
// a Recorder whose directory an Uploader empties into a bucket.
type recordings struct {
	recorder *recording.Recorder
	uploader *upload.Uploader
	drain    time.Duration
}

// build is what the flags ask for; a zero recordings when nothing is
// recorded in any namespace.
func (o *recordingOptions) build(reg prometheus.Registerer) (recordings, error) {
	mode, err := recording.ParseMode(o.mode)
	if err != nil {
		return recordings{}, fmt.Errorf("--record-sessions: %w", err)
	}
	overrides := map[string]recording.Mode{}
	for _, kv := range strings.Split(o.namespaces, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		ns, m, ok := strings.Cut(kv, "=")
		if !ok || ns == "" {
			return recordings{}, fmt.Errorf("--record-sessions-namespaces: %q is not namespace=mode", kv)
		}
		if overrides[ns], err = recording.ParseMode(m); err != nil {
			return recordings{}, fmt.Errorf("--record-sessions-namespaces: %w", err)
		}
	}
	anyOn := mode != recording.ModeNone
	for _, m := range overrides {
		anyOn = anyOn || m != recording.ModeNone
	}
	if !anyOn {
		if o.s3.bucket != "" {
			return recordings{}, errors.New("--record-sessions-s3-bucket uploads recordings, but --record-sessions and its namespace overrides record none")
		}
		return recordings{}, nil
	}
	if o.dir == "" {
		return recordings{}, errors.New("--record-sessions-dir is required to record sessions")
	}
	var r recordings
	ropts := recording.Options{
		Dir: o.dir, Mode: mode, Namespaces: overrides, Stdin: o.stdin, FailClosed: o.failClosed, Registerer: reg,
		MaxSessionBytes: int64(o.maxSessionMB) << 20, MaxTotalBytes: int64(o.maxTotalMB) << 20,
	}
	if o.s3.bucket != "" {
		if r.uploader, err = o.s3.build(o.dir, reg); err != nil {
			return recordings{}, err
		}
		r.drain = o.s3.drain
		ropts.OnFinished = r.uploader.Notify
	}
	if r.recorder, err = recording.New(ropts); err != nil {
		return recordings{}, err
	}
	return r, nil
}

func (s *s3Options) build(dir string, reg prometheus.Registerer) (*upload.Uploader, error) {
	if s.accessKeyFile == "" || s.secretKeyFile == "" {
		return nil, errors.New("--record-sessions-s3-access-key-id-file and --record-sessions-s3-secret-access-key-file are required with --record-sessions-s3-bucket")
	}
	if s.timeout <= 0 || s.dialTimeout <= 0 || s.initialBackoff <= 0 || s.maxBackoff < s.initialBackoff || s.rescan <= 0 || s.drain < 0 {
		return nil, errors.New("--record-sessions-s3-* durations must be positive, the max backoff at least the initial one")
	}
	store, err := upload.NewS3Store(upload.S3Options{
		Endpoint: s.endpoint, Region: s.region, Bucket: s.bucket, PathStyle: s.pathStyle, CAFile: s.caFile,
		AccessKeyIDFile: s.accessKeyFile, SecretAccessKeyFile: s.secretKeyFile, DialTimeout: s.dialTimeout,
		Logger: klog.Background(),
	})
	if err != nil {
		return nil, fmt.Errorf("--record-sessions-s3-*: %w", err)
	}
	return upload.New(upload.Options{
		Dir: dir, Prefix: s.prefix, Store: store, Timeout: s.timeout,
		InitialBackoff: s.initialBackoff, MaxBackoff: s.maxBackoff, Rescan: s.rescan, Registerer: reg,
	})
}

// drainUploads, once the streams drained and their recordings finished,
// uploads what the spool still holds, for up to the drain timeout.
func (r recordings) drainUploads(logger klog.Logger) {
	if r.uploader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logger), r.drain)
	defer cancel()
	if err := r.uploader.Drain(ctx); err != nil {
		logger.Error(err, "Recordings not uploaded before the gateway exits; they stay in the recording directory")
		return
	}
	logger.Info("Recordings uploaded")
}
