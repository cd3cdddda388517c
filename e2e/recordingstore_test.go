package e2e

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/upload"
)

// startStore starts SeaweedFS on addr with an empty bucket the Writer
// credentials may put into, and writes those credentials to files as the
// chart mounts them.
func startStore(t *testing.T, e *env.Env, o env.SeaweedFSOptions) (sw *env.SeaweedFS, idFile, keyFile string) {
	t.Helper()
	o.Bin, o.Dir = filepath.Join(e.BinDir(), "weed"), t.TempDir()
	sw, err := env.StartSeaweedFS(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seaweedfs's last log line: %s", sw.LogTail())
		}
		sw.Stop()
	})
	if err := sw.CreateBucket(t.Context(), o.WriterBucket); err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	idFile, keyFile = filepath.Join(creds, "access-key-id"), filepath.Join(creds, "secret-access-key")
	writeFile(t, idFile, []byte(sw.Writer.AccessKeyID+"\n"))
	writeFile(t, keyFile, []byte(sw.Writer.SecretAccessKey+"\n"))
	return sw, idFile, keyFile
}

// waitObjects waits until bucket holds n objects, and returns them.
func waitObjects(t *testing.T, sw *env.SeaweedFS, bucket string, n int) map[string]env.StoredObject {
	t.Helper()
	var objs map[string]env.StoredObject
	var lastErr error
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		objs, lastErr = sw.Objects(ctx, bucket)
		return lastErr == nil && len(objs) >= n, nil
	})
	if err != nil || len(objs) != n {
		t.Fatalf("bucket %s holds %d objects (%v), want %d: %v", bucket, len(objs), lastErr, n, err)
	}
	return objs
}

// spoolFiles are the finished recordings waiting in dir.
func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.cast"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// waitSpoolsEmpty waits for the recordings stored to leave the spools:
// a gateway removes each once the store answered its put, so the bucket
// has it a moment before.
func waitSpoolsEmpty(ctx context.Context, t *testing.T, spools ...string) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		left = nil
		for _, dir := range spools {
			left = append(left, spoolFiles(t, dir)...)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("recordings in the bucket still in the spool: %v", left)
	}
}

// endSessions ends sessions from their side and waits for each.
func endSessions(t *testing.T, sessions []*recordedSession) {
	t.Helper()
	for _, s := range sessions {
		if _, err := io.WriteString(s.stdin, "bye\r"); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sessions {
		if err := <-s.done; err != nil {
			t.Errorf("session %s: %v", s.marker, err)
		}
	}
}

// TestRecordingsReachTheBucket: two gateway replicas record TTY execs on
// member1's kubelet into one bucket of a real SeaweedFS, path-style, with
// the least credentials (put into that bucket only):
//   - finished sessions are uploaded at once and leave the spool;
//   - with the store stopped, the recordings wait in the spool, the
//     failures counted and the spool's files and age exported; started
//     again, the store gets them all;
//   - a replica stopped (SIGTERM) with sessions open uploads the
//     recordings that end during and after its grace period before it
//     exits (its uploader's loop has stopped: only the shutdown drain
//     can), the cut ones stored marked incomplete;
//   - a replica stopped while the store hangs (frozen: connections are
//     accepted, never answered) exits at its drain's deadline, leaving its
//     recordings in the spool, and the next gateway on that directory
//     uploads them once the store answers again.
//
// In the end every session in the audit logs has exactly one object,
// which asciinema plays; the gateway's credentials cannot read it back.
func TestRecordingsReachTheBucket(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	player, err := exec.LookPath("asciinema")
	if err != nil {
		t.Fatal("asciinema is not installed: run make tools")
	}
	const bucket, prefix = "recordings", "fleet/"
	sw, idFile, keyFile := startStore(t, testEnv, env.SeaweedFSOptions{Addr: netip.MustParseAddr("127.0.0.1"), WriterBucket: bucket})
	const pod = "bucket-records"
	placePod(t, sleepPod(pod), []string{"member1"}, "member1")
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	const grace = 6 * time.Second
	dir := t.TempDir()
	var auditLogs []string
	start := func(name, recordings string, extra ...string) *env.ExtraGateway {
		t.Helper()
		logPath := filepath.Join(dir, name+".audit.log")
		auditLogs = append(auditLogs, logPath)
		args := append([]string{"--audit-log-path=" + logPath, "--record-sessions=tty", "--record-sessions-dir=" + recordings,
			fmt.Sprintf("--shutdown-grace-period=%s", grace),
			"--record-sessions-s3-bucket=" + bucket, "--record-sessions-s3-endpoint=" + sw.Endpoint(), "--record-sessions-s3-path-style",
			"--record-sessions-s3-prefix=" + prefix,
			"--record-sessions-s3-access-key-id-file=" + idFile, "--record-sessions-s3-secret-access-key-file=" + keyFile,
			"--record-sessions-s3-initial-backoff=200ms", "--record-sessions-s3-max-backoff=1s", "--record-sessions-s3-dial-timeout=2s",
			"--record-sessions-s3-drain-timeout=5s"}, extra...)
		gw, err := testEnv.StartExtraGateway(ctx, name, args...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gw.Stop)
		return gw
	}
	spoolA, spoolB := filepath.Join(dir, "spool-a"), filepath.Join(dir, "spool-b")
	for _, d := range []string{spoolA, spoolB} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	a, b := start("gateway-bucket-a", spoolA), start("gateway-bucket-b", spoolB)
	began := time.Now()
	since := func() time.Duration { return time.Since(began).Round(100 * time.Millisecond) }
	t.Logf("two replicas started")
	sessions := 0

	// Both replicas, the store up: each recording is in the bucket as
	// soon as its session ended.
	endSessions(t, append(openRecordedSessions(ctx, t, a, pod, "bucket-a", 2), openRecordedSessions(ctx, t, b, pod, "bucket-b", 2)...))
	sessions += 4
	waitObjects(t, sw, bucket, sessions)
	t.Logf("%d recordings of two replicas in the bucket (%s)", sessions, since())
	waitSpoolsEmpty(ctx, t, spoolA, spoolB)

	// The store down: recordings wait in the spool, and say so.
	sw.Kill()
	t.Logf("store killed (%s)", since())
	endSessions(t, append(openRecordedSessions(ctx, t, a, pod, "bucket-down-a", 2), openRecordedSessions(ctx, t, b, pod, "bucket-down-b", 2)...))
	sessions += 4
	for _, gw := range []*env.ExtraGateway{a, b} {
		var m string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			m = string(scrapeMetrics(t, gw.MetricsURL()))
			return metricValue(m, `karmada_gateway_recording_uploads_total{result="failed"}`) >= 2 &&
				metricValue(m, "karmada_gateway_recording_spool_files") == 2, nil
		})
		if err != nil {
			t.Fatalf("with the store down, the spool and failures are not exported: %v\n%s", err, grepLines(m, "recording_"))
		}
		if metricValue(m, "karmada_gateway_recording_spool_oldest_age_seconds") <= 0 || metricValue(m, "karmada_gateway_recording_spool_bytes") <= 0 {
			t.Errorf("spool age and bytes not exported:\n%s", grepLines(m, "recording_spool"))
		}
	}
	t.Logf("recordings wait in the spools (%s)", since())
	if err := sw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("store started (%s)", since())
	waitObjects(t, sw, bucket, sessions)
	t.Logf("%d recordings in the bucket (%s)", sessions, since())
	waitSpoolsEmpty(ctx, t, spoolA, spoolB)

	// A replica stopped with sessions open: one ends inside the grace
	// period, one is cut at its end; both are uploaded before it exits.
	open := openRecordedSessions(ctx, t, b, pod, "bucket-shutdown", 2)
	sessions += 2
	exited := terminating(b, grace+30*time.Second)
	waitDraining(ctx, t, b)
	if _, err := io.WriteString(open[0].stdin, "bye\r"); err != nil {
		t.Fatal(err)
	}
	if err := <-open[0].done; err != nil {
		t.Errorf("session ending in the grace period: %v", err)
	}
	if err := <-open[1].done; err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("session open past the grace period ended with %v; want the gateway's Failure", err)
	}
	if <-exited < 0 {
		t.Fatal("the replica did not exit by itself after SIGTERM")
	}
	t.Logf("replica b exited (%s)", since())
	if left := spoolFiles(t, spoolB); len(left) != 0 {
		t.Errorf("the replica exited with recordings in its spool: %v", left)
	}
	waitObjects(t, sw, bucket, sessions)

	// A replica stopped while the store hangs (it accepts connections and
	// never answers): its drain gives up at its deadline, and what it could
	// not upload stays in the spool, for the next gateway on the directory.
	thaw, err := sw.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	defer thaw()
	open = openRecordedSessions(ctx, t, a, pod, "bucket-stranded", 2)
	sessions += 2
	took := terminating(a, grace+30*time.Second)
	waitDraining(ctx, t, a)
	endSessions(t, open)
	// The sessions ended inside the grace period; the drain's deadline is
	// 5 s, each put's connection deadlines 2 s.
	if d := <-took; d < 0 || d > grace+15*time.Second {
		t.Fatalf("with the store hung, the replica took %v to exit after SIGTERM (-1: killed); want its drain's deadline to bound it", d)
	}
	t.Logf("replica a exited with the store hung (%s)", since())
	if left := spoolFiles(t, spoolA); len(left) != 2 {
		t.Fatalf("after a shutdown with the store hung the spool holds %v, want the 2 recordings", left)
	}
	thaw()
	start("gateway-bucket-a2", spoolA)
	objs := waitObjects(t, sw, bucket, sessions)
	t.Logf("%d recordings in the bucket after a restart on the spool (%s)", sessions, since())

	// Every session once, playable, marked when cut.
	var events []auditv1.Event
	for _, p := range auditLogs {
		events = append(events, readAuditLog(t, p)...)
	}
	fetched := t.TempDir()
	for key, o := range objs {
		name, ok := strings.CutPrefix(key, prefix)
		if !ok || strings.Contains(name, "/") {
			t.Errorf("object %s is not under %s", key, prefix)
			continue
		}
		writeFile(t, filepath.Join(fetched, name), o.Body)
	}
	sessionRecords{command: "bucket-", output: "bucket-", n: sessions, ends: map[string]int{"completed": sessions - 1, "gateway_shutdown": 1}}.
		check(t, player, events, fetched)
	for _, evs := range execEvents(events, "bucket-") {
		for _, ev := range evs {
			if ev.Stage != auditv1.StageResponseComplete {
				continue
			}
			name := ev.Annotations["gateway.karmada.io/recording"]
			incomplete := objs[prefix+name].Metadata["incomplete"]
			if want := ev.Annotations["gateway.karmada.io/recording-incomplete"]; (want == "") != (incomplete == "") {
				t.Errorf("%s: stored with incomplete=%q, its audit event says %q", name, incomplete, want)
			}
		}
	}

	// The gateway's credentials put; they do not read.
	var key string
	for key = range objs {
		break
	}
	_, err = sw.Client(sw.Writer).GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "AccessDenied" {
		t.Errorf("the gateway's credentials read %s back: %v; want AccessDenied", key, err)
	}
}

// waitDraining waits until gw's readiness says it is shutting down.
func waitDraining(ctx context.Context, t *testing.T, gw *env.ExtraGateway) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		res, err := http.Get(gw.MetricsURL() + "/readyz")
		if err != nil {
			return false, nil
		}
		res.Body.Close()
		return res.StatusCode == http.StatusServiceUnavailable, nil
	}); err != nil {
		t.Fatalf("the gateway never started draining: %v", err)
	}
}

// TestS3StoreAnswersOfARealStore: the gateway's S3 client against
// SeaweedFS (virtual-hosted addressing is the Helm test's, which can name
// the store): a put is stored with its metadata; a body that does not
// match its MD5 is refused by the store as that object's fault (the spool
// goes on past it); credentials the store does not know fail every put
// alike (the spool waits).
func TestS3StoreAnswersOfARealStore(t *testing.T) {
	t.Parallel()
	const bucket = "store-answers"
	sw, idFile, keyFile := startStore(t, testEnv, env.SeaweedFSOptions{Addr: netip.MustParseAddr("127.0.0.1"), WriterBucket: bucket})
	ctx := t.Context()
	newStore := func(id, key string) *upload.S3Store {
		t.Helper()
		s, err := upload.NewS3Store(upload.S3Options{Endpoint: sw.Endpoint(), Region: "us-east-1", Bucket: bucket, PathStyle: true,
			AccessKeyIDFile: id, SecretAccessKeyFile: key, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	object := func(key, body string, sum string) upload.Object {
		d := md5.Sum([]byte(sum))
		return upload.Object{Key: key, Body: strings.NewReader(body), Size: int64(len(body)), MD5: d[:], Metadata: map[string]string{"incomplete": "cut"}}
	}
	if err := newStore(idFile, keyFile).Put(ctx, object("stored.cast", "hello", "hello")); err != nil {
		t.Fatal(err)
	}
	objs, err := sw.Objects(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := objs["stored.cast"]; !ok || string(o.Body) != "hello" || o.Metadata["incomplete"] != "cut" {
		t.Errorf("stored as %+v (present %v)", o, ok)
	}
	var re *upload.RejectedError
	if err := newStore(idFile, keyFile).Put(ctx, object("bad-digest.cast", "hello", "other")); !errors.As(err, &re) {
		t.Errorf("a body that does not match its MD5: %v, want the store's refusal of that object", err)
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	writeFile(t, wrong, []byte("not-a-key"))
	if err := newStore(wrong, wrong).Put(ctx, object("unknown-key.cast", "hello", "hello")); err == nil || errors.As(err, &re) {
		t.Errorf("credentials the store does not know: %v, want a failure of every put, not of the object", err)
	}
}
