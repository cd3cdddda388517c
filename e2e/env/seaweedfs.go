package env

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"k8s.io/apimachinery/pkg/util/wait"
)

// SeaweedFS is a real S3-compatible store: SeaweedFS's weed (make tools
// builds it into bin/weed) running master, volume server, filer and S3
// gateway in one process on Addr, its data in a directory that outlives a
// Stop, so Start brings back what it held.
type SeaweedFS struct {
	proc   *process
	addr   netip.Addr
	s3Port int
	domain string
	// Admin may do anything; Writer may only put objects into WriterBucket,
	// as the gateway's credentials should.
	Admin, Writer Credentials
	WriterBucket  string
}

// Credentials are an S3 access key pair.
type Credentials struct{ AccessKeyID, SecretAccessKey string }

// SeaweedFSOptions configures StartSeaweedFS.
type SeaweedFSOptions struct {
	// Bin is the weed binary.
	Bin string
	// Dir holds its data, configuration and log.
	Dir string
	// Addr is where it listens: loopback, or the host's address on a pod
	// network for pods to reach it.
	Addr netip.Addr
	// Domain, when set, has it serve virtual-hosted requests
	// (bucket.Domain), besides path-style ones.
	Domain string
	// WriterBucket is the only bucket the Writer credentials may put into.
	WriterBucket string
}

// StartSeaweedFS starts weed and waits until its S3 API answers the Admin.
func StartSeaweedFS(ctx context.Context, o SeaweedFSOptions) (*SeaweedFS, error) {
	if _, err := os.Stat(o.Bin); err != nil {
		return nil, fmt.Errorf("weed: %w (make tools builds it)", err)
	}
	var ports [8]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	sw := &SeaweedFS{addr: o.Addr, s3Port: ports[6], domain: o.Domain, WriterBucket: o.WriterBucket,
		Admin:  Credentials{"AKIAE2EADMIN", "e2e-admin-secret"},
		Writer: Credentials{"AKIAE2EGATEWAY", "e2e-gateway-secret"},
	}
	identities := map[string]any{"identities": []map[string]any{
		{"name": "admin", "credentials": []map[string]string{{"accessKey": sw.Admin.AccessKeyID, "secretKey": sw.Admin.SecretAccessKey}},
			"actions": []string{"Admin", "Read", "Write", "List", "Tagging"}},
		// PutObject into one bucket, nothing else: not even reading back
		// what it wrote (docs/security.md).
		{"name": "gateway", "credentials": []map[string]string{{"accessKey": sw.Writer.AccessKeyID, "secretKey": sw.Writer.SecretAccessKey}},
			"actions": []string{"Write:" + o.WriterBucket}},
	}}
	b, err := json.Marshal(identities)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(o.Dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	config := filepath.Join(o.Dir, "s3.json")
	if err := os.WriteFile(config, b, 0o600); err != nil {
		return nil, err
	}
	ip := o.Addr.String()
	args := []string{"server", "-dir=" + data, "-ip=" + ip, "-ip.bind=" + ip,
		"-master.port=" + strconv.Itoa(ports[0]), "-master.port.grpc=" + strconv.Itoa(ports[1]),
		"-volume.port=" + strconv.Itoa(ports[2]), "-volume.port.grpc=" + strconv.Itoa(ports[3]),
		"-filer.port=" + strconv.Itoa(ports[4]), "-filer.port.grpc=" + strconv.Itoa(ports[5]),
		"-s3", "-s3.port=" + strconv.Itoa(ports[6]), "-s3.port.grpc=" + strconv.Itoa(ports[7]), "-s3.config=" + config,
		// Small volumes, none preallocated: a test stores kilobytes.
		"-master.volumeSizeLimitMB=64", "-volume.max=32", "-metricsPort=0",
		// Its Iceberg and Lance servers listen on fixed ports, which
		// stores started at once would share; no statistics leave the
		// machine.
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
		// One master: after a restart it elects itself within a second,
		// not the default 10 s, before which no put is taken.
		"-master.electionTimeout=1s"}
	if o.Domain != "" {
		args = append(args, "-s3.domainName="+o.Domain)
	}
	sw.proc = &process{name: "seaweedfs", path: o.Bin, args: args, logPath: filepath.Join(o.Dir, "weed.log")}
	if err := sw.Start(ctx); err != nil {
		return nil, err
	}
	return sw, nil
}

// readinessBucket holds the object Start puts to know the store takes
// puts: its S3 API answers seconds before then (after a restart, puts
// hang for about 15 s while its master and volume server find each
// other again).
const readinessBucket = "e2e-readiness"

// Start starts weed again after Stop (or the first time), on the same
// ports and data, and waits until it stores an object.
func (sw *SeaweedFS) Start(ctx context.Context) error {
	if err := sw.proc.start(); err != nil {
		return err
	}
	client := sw.Client(sw.Admin)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if !sw.proc.running() {
			return false, fmt.Errorf("weed exited: %v; log: %s", sw.proc.exitErr(), lastLogLine(sw.proc.logPath))
		}
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		// Created at the first start; later an error, which the put tells apart.
		_, _ = client.CreateBucket(callCtx, &s3.CreateBucketInput{Bucket: aws.String(readinessBucket)})
		_, err := client.PutObject(callCtx, &s3.PutObjectInput{Bucket: aws.String(readinessBucket), Key: aws.String("probe"), Body: strings.NewReader("ready")})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("seaweedfs S3 API at %s: %w", sw.Endpoint(), err)
	}
	return nil
}

// Stop stops weed (SIGTERM): the store is down until Start.
func (sw *SeaweedFS) Stop() { sw.proc.stop(10 * time.Second) }

// Kill kills weed (SIGKILL), as a crash: the store is down until Start.
func (sw *SeaweedFS) Kill() { sw.proc.kill() }

// Freeze stops weed with SIGSTOP: a hung store, which accepts connections
// and never answers, until thaw.
func (sw *SeaweedFS) Freeze() (thaw func(), err error) { return sw.proc.freeze() }

// Endpoint is the S3 API's URL by address.
func (sw *SeaweedFS) Endpoint() string {
	return "http://" + net.JoinHostPort(sw.addr.String(), strconv.Itoa(sw.s3Port))
}

// DomainEndpoint is the S3 API's URL by Domain, which clients must
// resolve to Addr themselves.
func (sw *SeaweedFS) DomainEndpoint() string {
	return "http://" + net.JoinHostPort(sw.domain, strconv.Itoa(sw.s3Port))
}

// Addr is where weed listens.
func (sw *SeaweedFS) Addr() netip.Addr { return sw.addr }

// LogTail is the last line of weed's log.
func (sw *SeaweedFS) LogTail() string { return lastLogLine(sw.proc.logPath) }

// Client is an S3 client of the store with creds, path-style (Endpoint
// names an address).
func (sw *SeaweedFS) Client(creds Credentials) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(sw.Endpoint()), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey}, nil
		}),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// CreateBucket creates bucket as the Admin.
func (sw *SeaweedFS) CreateBucket(ctx context.Context, bucket string) error {
	_, err := sw.Client(sw.Admin).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	return err
}

// StoredObject is an object read back from the store.
type StoredObject struct {
	Body     []byte
	Metadata map[string]string
}

// Objects reads every object of bucket as the Admin, by key.
func (sw *SeaweedFS) Objects(ctx context.Context, bucket string) (map[string]StoredObject, error) {
	client := sw.Client(sw.Admin)
	out := map[string]StoredObject{}
	p := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			got, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				return nil, err
			}
			body, err := io.ReadAll(got.Body)
			got.Body.Close()
			if err != nil {
				return nil, err
			}
			out[aws.ToString(o.Key)] = StoredObject{Body: body, Metadata: got.Metadata}
		}
	}
	return out, nil
}
