// Package upload ships finished session recordings from the gateway's
// recording directory to an S3-compatible bucket, where they outlive the
// replica that made them.
//
// The recording directory is the spool: pkg/recording renames a recording
// into place when its session ends, and the Uploader puts it in the bucket
// under Prefix plus its file name, then removes it from the directory. It
// removes nothing the bucket did not confirm: a failed upload leaves the
// file where it is, and the whole spool waits a backoff (doubling up to
// MaxBackoff) before it is tried again, oldest file first. A file the
// store refuses on its own (RejectedError) is set aside as
// <name>.rejected (kept, counted, alerted on, never sent again), so it
// holds neither the others nor the backoff. The spool keeps
// what the store cannot take for as long as the store is down, up to the
// recording directory's cap (--record-sessions-max-total-size), and across
// a restart of the gateway: the next start uploads what it finds. A
// directory lost with its pod (an emptyDir) loses what it still holds;
// shutdown therefore uploads what is left before the gateway exits
// (Drain).
//
// An object's key is the recording's name, so it is stored once however
// often it is put (a retry whose first answer was lost, two replicas
// sharing a directory): each upload holds the file's lock, and a replica
// that finds a file locked or gone leaves it. Each put carries the file's
// MD5 (Content-MD5), which the store checks before it answers. A recording
// kept incomplete (its marker says why) is stored with the metadata
// "incomplete" set to that reason, so readers of the bucket find partial
// recordings without opening them.
package upload

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording"
)

// Store keeps objects. Putting the same key and bytes again must be
// harmless: a put whose answer was lost is put again. An error wrapping
// *RejectedError says the store refused that object, not every put.
type Store interface {
	Put(ctx context.Context, obj Object) error
}

// RejectedError is a store's refusal of one object (too large, a request
// it finds malformed), which another object may not meet: the Uploader
// sets the file aside (RejectedSuffix), logged and counted, and goes on
// with the next one instead of holding the spool behind it.
type RejectedError struct{ Err error }

func (e *RejectedError) Error() string { return "the store refused the object: " + e.Err.Error() }
func (e *RejectedError) Unwrap() error { return e.Err }

// Object is one recording to store.
type Object struct {
	Key  string
	Body io.ReadSeeker
	Size int64
	// MD5 is the body's digest, which the store verifies.
	MD5      []byte
	Metadata map[string]string
}

// MetadataIncomplete is the metadata key of a recording kept incomplete;
// its value says why.
const MetadataIncomplete = "incomplete"

// RejectedSuffix ends the name of a recording the store refused: renamed
// so in the directory, it is kept (and counts against the recording cap)
// but never sent again, since the same bytes would be refused again.
const RejectedSuffix = ".rejected"

// Options configures an Uploader.
type Options struct {
	// Dir is the recording directory, the spool.
	Dir    string
	Prefix string
	Store  Store
	// Timeout is the deadline of one put.
	Timeout time.Duration
	// InitialBackoff is the wait after a failed put; it doubles at each
	// failure in a row, up to MaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// Rescan is how often the directory is read without being told of a
	// new recording: what another replica sharing it, or an operator,
	// left there.
	Rescan     time.Duration
	Registerer prometheus.Registerer
}

// Uploader moves finished recordings from Dir to Store.
type Uploader struct {
	opts Options
	now  func() time.Time
	wake chan struct{}
	// passMu keeps Run's passes and Drain's apart.
	passMu sync.Mutex

	uploads *prometheus.CounterVec
	bytes   prometheus.Counter
}

// Upload results, the result label of recording_uploads_total.
const (
	resultUploaded = "uploaded"
	resultFailed   = "failed"
	resultRejected = "rejected"
)

// New checks opts and registers the Uploader's metrics, the spool's among
// them (read from Dir at each scrape).
func New(opts Options) (*Uploader, error) {
	if opts.Dir == "" || opts.Store == nil || opts.Timeout <= 0 || opts.InitialBackoff <= 0 || opts.MaxBackoff < opts.InitialBackoff || opts.Rescan <= 0 {
		return nil, errors.New("upload: a directory, a store, a timeout, a rescan interval and backoffs (initial <= max) are required")
	}
	u := &Uploader{opts: opts, now: time.Now, wake: make(chan struct{}, 1),
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "karmada_gateway", Name: "recording_uploads_total",
			Help: "Puts of finished recordings to the bucket, by result (uploaded: stored and removed from the spool; failed: kept in the spool, retried; rejected: refused by the store, kept as <name>.rejected, not retried)."}, []string{"result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "karmada_gateway", Name: "recording_upload_bytes_total",
			Help: "Bytes of recordings stored in the bucket."}),
	}
	for _, result := range []string{resultUploaded, resultFailed, resultRejected} {
		u.uploads.WithLabelValues(result)
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(u.uploads, u.bytes, &spoolCollector{u: u})
	}
	return u, nil
}

// Notify tells the Uploader a recording was finished: it is put now,
// unless a failed put's backoff runs.
func (u *Uploader) Notify() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// Run uploads the spool until ctx ends: at once, when notified, every
// Rescan, and after a failure once its backoff passed.
func (u *Uploader) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	backoff := u.backoff()
	failing := false
	for {
		err := u.pass(ctx)
		wake := u.wake
		wait := u.opts.Rescan
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				backoff = u.backoff()
			}
			failing = true
			wait = backoff.Step()
			// A recording finished meanwhile does not cut the backoff
			// short: the store is failing.
			wake = nil
			logger.Error(err, "Uploading recordings failed; the spool keeps them", "retryIn", wait.Round(time.Millisecond))
		case failing:
			failing = false
			logger.Info("Uploading recordings works again")
		}
		if !pause(ctx, wait, wake) {
			return
		}
	}
}

// pause waits d, or until wake (nil: never) says a recording was
// finished; false when ctx ended first.
func pause(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C:
	}
	return true
}

func (u *Uploader) backoff() wait.Backoff {
	return wait.Backoff{Duration: u.opts.InitialBackoff, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: u.opts.MaxBackoff}
}

// Drain uploads what the spool holds, retrying a failing store with
// backoff until ctx ends, and says what is left: at shutdown, what an
// emptyDir would lose with the pod.
func (u *Uploader) Drain(ctx context.Context) error {
	backoff := u.backoff()
	var storeErr error // the store's last answer, which a pass the drain's end cut would hide
	for {
		err := u.pass(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil && storeErr != nil {
			err = fmt.Errorf("%w; then the drain's time ran out", storeErr)
		} else {
			storeErr = err
		}
		if !pause(ctx, backoff.Step(), nil) {
			left, _ := u.spool()
			return fmt.Errorf("%d recordings left in the spool: %w", len(left), err)
		}
	}
}

// spooled is a finished recording waiting in the spool.
type spooled struct {
	name    string
	size    int64
	modTime time.Time
}

// spool lists the finished recordings in Dir, oldest first.
func (u *Uploader) spool() ([]spooled, error) {
	files, _, err := u.scan()
	return files, err
}

// scan is spool, and how many recordings the store refused are set aside.
func (u *Uploader) scan() (files []spooled, rejected int, err error) {
	entries, err := os.ReadDir(u.opts.Dir)
	if err != nil {
		return nil, 0, fmt.Errorf("recording directory: %w", err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), RejectedSuffix) {
			rejected++
		}
		if !e.Type().IsRegular() || !recording.Finished(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone since it was listed: uploaded by another replica
		}
		files = append(files, spooled{name: e.Name(), size: info.Size(), modTime: info.ModTime()})
	}
	slices.SortFunc(files, func(a, b spooled) int { return a.modTime.Compare(b.modTime) })
	return files, rejected, nil
}

// pass uploads the spool once, oldest first, and stops at the first put
// that fails (the store is down, or refuses the gateway's credentials): the
// next pass starts with the same file. A file the store rejected alone is
// passed over; it is tried again at the next pass, and the pass still
// reports the failure, so its backoff applies.
func (u *Uploader) pass(ctx context.Context) error {
	u.passMu.Lock()
	defer u.passMu.Unlock()
	files, err := u.spool()
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := u.upload(ctx, f.name)
		var re *RejectedError
		switch {
		case errors.As(err, &re):
			// Not the store's failure: the pass goes on, without backoff.
			u.quarantine(ctx, f.name, err)
		case err != nil:
			return err
		}
	}
	return nil
}

// quarantine renames a recording the store refused out of the spool.
func (u *Uploader) quarantine(ctx context.Context, name string, why error) {
	logger := klog.FromContext(ctx).WithValues("recording", name)
	path := filepath.Join(u.opts.Dir, name)
	if err := os.Rename(path, path+RejectedSuffix); err != nil {
		if !errors.Is(err, os.ErrNotExist) { // else another replica took it
			logger.Error(err, "The store refused a recording, which cannot be set aside; it is tried again", "refusal", why.Error())
		}
		return
	}
	u.uploads.WithLabelValues(resultRejected).Inc()
	logger.Error(why, "The store refused a recording: it is kept as "+name+RejectedSuffix+" in the recording directory and not sent again")
}

// upload puts the recording name in the store and removes it from the
// spool. A file another replica holds or already removed is left alone.
func (u *Uploader) upload(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("recording", name)
	path := filepath.Join(u.opts.Dir, name)
	f, size, err := lockSpooled(path)
	switch {
	case f == nil && err == nil:
		return nil
	case err != nil:
		// It stays, logged at each pass, and holds no other back.
		logger.Error(err, "Recording in the spool cannot be read; it stays there")
		return nil
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
		logger.Error(err, "Recording in the spool cannot be read; it stays there")
		return nil
	}
	meta := map[string]string{}
	if why := recording.IncompleteReason(f, size); why != "" {
		meta[MetadataIncomplete] = why
	}
	putCtx, cancel := context.WithTimeout(ctx, u.opts.Timeout)
	defer cancel()
	err = u.opts.Store.Put(putCtx, Object{
		Key: u.opts.Prefix + name, Body: io.NewSectionReader(f, 0, size), Size: size, MD5: h.Sum(nil), Metadata: meta,
	})
	if err != nil {
		u.uploads.WithLabelValues(resultFailed).Inc()
		return fmt.Errorf("put %s: %w", name, err)
	}
	u.uploads.WithLabelValues(resultUploaded).Inc()
	u.bytes.Add(float64(size))
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		// Stored; it is put again (the same object) at the next pass.
		logger.Error(err, "Recording stored but not removed from the spool")
		return nil
	}
	logger.V(2).Info("Recording stored", "key", u.opts.Prefix+name, "bytes", size, "incomplete", meta[MetadataIncomplete])
	return nil
}

// lockSpooled opens path and takes its lock. It returns no file and no
// error when another replica holds the file or removed it: after the
// lock, path must still be the file opened.
func lockSpooled(path string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	opened, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	now, err := os.Stat(path)
	if err != nil || !os.SameFile(opened, now) {
		f.Close()
		return nil, 0, nil
	}
	return f, opened.Size(), nil
}

// spoolCollector reports the spool at each scrape: what waits for the
// bucket, and for how long the oldest has.
type spoolCollector struct{ u *Uploader }

var (
	spoolFilesDesc = prometheus.NewDesc("karmada_gateway_recording_spool_files",
		"Finished recordings in the recording directory waiting to be uploaded.", nil, nil)
	spoolBytesDesc = prometheus.NewDesc("karmada_gateway_recording_spool_bytes",
		"Bytes of finished recordings waiting to be uploaded.", nil, nil)
	spoolAgeDesc = prometheus.NewDesc("karmada_gateway_recording_spool_oldest_age_seconds",
		"How long the oldest recording waiting to be uploaded has waited since it was finished; 0 when none waits.", nil, nil)
	spoolErrorDesc = prometheus.NewDesc("karmada_gateway_recording_spool_read_errors",
		"1 when the recording directory could not be read at this scrape.", nil, nil)
	spoolRejectedDesc = prometheus.NewDesc("karmada_gateway_recording_spool_rejected_files",
		"Recordings the store refused, kept in the recording directory as <name>.rejected and not sent again.", nil, nil)
)

func (c *spoolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- spoolFilesDesc
	ch <- spoolBytesDesc
	ch <- spoolAgeDesc
	ch <- spoolErrorDesc
	ch <- spoolRejectedDesc
}

func (c *spoolCollector) Collect(ch chan<- prometheus.Metric) {
	files, rejected, err := c.u.scan()
	var bytes int64
	for _, f := range files {
		bytes += f.size
	}
	age := 0.0
	if len(files) > 0 {
		age = max(0, c.u.now().Sub(files[0].modTime).Seconds())
	}
	failed := 0.0
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(spoolFilesDesc, prometheus.GaugeValue, float64(len(files)))
	ch <- prometheus.MustNewConstMetric(spoolBytesDesc, prometheus.GaugeValue, float64(bytes))
	ch <- prometheus.MustNewConstMetric(spoolAgeDesc, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(spoolErrorDesc, prometheus.GaugeValue, failed)
	ch <- prometheus.MustNewConstMetric(spoolRejectedDesc, prometheus.GaugeValue, float64(rejected))
}
