package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Container logs are kept in the CRI log format, one record per line:
//
//	2016-10-06T00:17:09.669794202Z stdout F a complete line
//	2016-10-06T00:17:09.669794202Z stdout P a partial line without newline
//
// so they read like a real node's /var/log/pods and timestamps survive.
const (
	tagFull    = "F"
	tagPartial = "P"
	// timeFormatOut is kubelet's fixed-width RFC3339Nano for timestamps=true.
	timeFormatOut = "2006-01-02T15:04:05.000000000Z07:00"
)

// logWriter appends one container instance's output to its log file and
// wakes followers on every write.
type logWriter struct {
	mu      sync.Mutex
	f       *os.File
	changed chan struct{} // closed and replaced on every write and on close
	closed  bool
}

func newLogWriter(path string) (*logWriter, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &logWriter{f: f, changed: make(chan struct{})}, nil
}

// write records p as complete lines plus, for a trailing piece without a
// newline, a partial record: interactive output (a prompt) shows at once.
func (w *logWriter) write(stream string, p []byte) {
	ts := time.Now().UTC().Format(time.RFC3339Nano)
	var buf bytes.Buffer
	for len(p) > 0 {
		line, rest, full := bytes.Cut(p, []byte{'\n'})
		tag := tagPartial
		if full {
			tag = tagFull
		}
		buf.WriteString(ts)
		buf.WriteByte(' ')
		buf.WriteString(stream)
		buf.WriteByte(' ')
		buf.WriteString(tag)
		buf.WriteByte(' ')
		buf.Write(line)
		buf.WriteByte('\n')
		p = rest
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	_, _ = w.f.Write(buf.Bytes())
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *logWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	_ = w.f.Close()
	close(w.changed)
}

// watch returns a channel closed by the next write, and whether the log
// is complete already.
func (w *logWriter) watch() (<-chan struct{}, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed, w.closed
}

// logOptions are the kubelet /containerLogs query parameters (the v1
// PodLogOptions the apiserver forwards).
type logOptions struct {
	follow     bool
	previous   bool
	timestamps bool
	tailLines  *int64
	limitBytes *int64
	since      time.Time
	stream     string // "" = both, else "stdout" or "stderr"
}

func parseLogOptions(q url.Values, now time.Time) (logOptions, error) {
	var o logOptions
	var err error
	boolParam := func(name string) bool {
		v := q.Get(name)
		if v == "" || err != nil {
			return false
		}
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			err = fmt.Errorf("invalid %s %q", name, v)
		}
		return b
	}
	intParam := func(name string, min int64) *int64 {
		v := q.Get(name)
		if v == "" || err != nil {
			return nil
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < min {
			err = fmt.Errorf("invalid %s %q", name, v)
			return nil
		}
		return &n
	}
	o.follow = boolParam("follow")
	o.previous = boolParam("previous")
	o.timestamps = boolParam("timestamps")
	if tail := q.Get("tail"); tail != "" && q.Get("tailLines") == "" && tail != "all" {
		q = cloneValues(q)
		q.Set("tailLines", tail)
	}
	o.tailLines = intParam("tailLines", 0)
	o.limitBytes = intParam("limitBytes", 1)
	sinceSeconds := intParam("sinceSeconds", 1)
	if sinceSeconds != nil {
		o.since = now.Add(-time.Duration(*sinceSeconds) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" && err == nil {
		if sinceSeconds != nil {
			return o, errors.New("at most one of sinceTime or sinceSeconds may be specified")
		}
		t, perr := time.Parse(time.RFC3339, v)
		if perr != nil {
			return o, fmt.Errorf("invalid sinceTime %q", v)
		}
		o.since = t
	}
	switch s := q.Get("stream"); s {
	case "", v1.LogStreamAll:
	case v1.LogStreamStdout:
		o.stream = "stdout"
	case v1.LogStreamStderr:
		o.stream = "stderr"
	default:
		return o, fmt.Errorf("invalid stream type %q", s)
	}
	return o, err
}

func cloneValues(q url.Values) url.Values {
	c := make(url.Values, len(q))
	for k, v := range q {
		c[k] = append([]string(nil), v...)
	}
	return c
}

type logRecord struct {
	ts      time.Time
	stream  string
	partial bool
	content []byte
}

// parseRecord parses one CRI log line (without its newline).
func parseRecord(line []byte) (logRecord, error) {
	var r logRecord
	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return r, fmt.Errorf("malformed log line %q", line)
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return r, fmt.Errorf("malformed log timestamp %q: %w", ts, err)
	}
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return r, fmt.Errorf("malformed log line %q", line)
	}
	tag, content, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return r, fmt.Errorf("malformed log line %q", line)
	}
	r.ts, r.stream, r.partial, r.content = t, string(stream), string(tag) == tagPartial, content
	return r, nil
}

var errLimitReached = errors.New("log limit reached")

// logPrinter turns records into what kubelet returns: content, newlines for
// complete records, optional timestamps at the start of each line.
type logPrinter struct {
	w       io.Writer
	opts    logOptions
	left    int64 // bytes left under limitBytes; <0 = unlimited
	midLine map[string]bool
}

func newLogPrinter(w io.Writer, opts logOptions) *logPrinter {
	p := &logPrinter{w: w, opts: opts, left: -1, midLine: map[string]bool{}}
	if opts.limitBytes != nil {
		p.left = *opts.limitBytes
	}
	return p
}

func (p *logPrinter) print(r logRecord) error {
	if p.opts.stream != "" && r.stream != p.opts.stream {
		return nil
	}
	if !p.opts.since.IsZero() && r.ts.Before(p.opts.since) {
		return nil
	}
	var buf bytes.Buffer
	if p.opts.timestamps && !p.midLine[r.stream] {
		buf.WriteString(r.ts.Format(timeFormatOut))
		buf.WriteByte(' ')
	}
	buf.Write(r.content)
	if !r.partial {
		buf.WriteByte('\n')
	}
	p.midLine[r.stream] = r.partial
	out := buf.Bytes()
	if p.left >= 0 {
		if int64(len(out)) >= p.left {
			out = out[:p.left]
			p.left = 0
			if _, err := p.w.Write(out); err != nil {
				return err
			}
			return errLimitReached
		}
		p.left -= int64(len(out))
	}
	_, err := p.w.Write(out)
	return err
}

// serveLog writes the log at path to w as opts ask. With follow it keeps
// streaming from live until that container instance's output has ended.
func serveLog(ctx context.Context, w io.Writer, flush func(), path string, live *logWriter, opts logOptions) error {
	var changed <-chan struct{}
	complete := true
	if live != nil {
		// Watch before reading, so no write between the read and the wait
		// is missed.
		changed, complete = live.watch()
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	printer := newLogPrinter(w, opts)

	// The first pass reads everything there is, so tailLines can pick the
	// last records (kubelet counts log file lines, i.e. records).
	var pending []byte
	var records []logRecord
	readRecords := func() ([]logRecord, error) {
		var out []logRecord
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 && line[len(line)-1] == '\n' {
				line = append(pending, line[:len(line)-1]...)
				pending = nil
				rec, perr := parseRecord(line)
				if perr != nil {
					return out, perr
				}
				out = append(out, rec)
				continue
			}
			// A record being written right now: keep it for the next read.
			pending = append(pending, line...)
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return out, err
			}
		}
	}
	records, err = readRecords()
	if err != nil {
		return err
	}
	if opts.tailLines != nil && int64(len(records)) > *opts.tailLines {
		records = records[int64(len(records))-*opts.tailLines:]
	}
	for {
		for _, rec := range records {
			if err := printer.print(rec); err != nil {
				if errors.Is(err, errLimitReached) {
					flush()
					return nil
				}
				return err
			}
		}
		flush()
		if !opts.follow || complete {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		changed, complete = live.watch()
		if records, err = readRecords(); err != nil {
			return err
		}
	}
}

// logPath is where instance n (the restart count) of a container logs.
// ".logs" cannot clash with a container directory: container names are DNS
// labels.
func (a *Agent) logPath(ns, pod, container string, n int32) string {
	return filepath.Join(a.rootDir, ns, pod, ".logs", container, strconv.Itoa(int(n))+".log")
}

// lastLogInstance finds the newest log instance on disk, for pods this agent
// process did not start (an earlier agent on the same member did).
func (a *Agent) lastLogInstance(ns, pod, container string) (int32, bool) {
	entries, err := os.ReadDir(filepath.Dir(a.logPath(ns, pod, container, 0)))
	if err != nil {
		return 0, false
	}
	best, found := int32(0), false
	for _, e := range entries {
		var n int32
		if _, err := fmt.Sscanf(e.Name(), "%d.log", &n); err == nil && (!found || n > best) {
			best, found = n, true
		}
	}
	return best, found
}
