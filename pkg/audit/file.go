package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"k8s.io/klog/v2"
)

// FileOptions configures a FileSink.
type FileOptions struct {
	// Path is the log file; rotated files are Path.1 (newest) to
	// Path.MaxBackups.
	Path string
	// MaxSize is the size, in bytes, a file is rotated at; the log never
	// takes more than (MaxBackups+1)*MaxSize plus one event.
	MaxSize int64
	// MaxBackups is how many rotated files are kept (0: the log is started
	// afresh at MaxSize).
	MaxBackups int
	// Buffer is how many events wait for the writer at most; BufferBytes
	// how many bytes they take at most.
	Buffer      int
	BufferBytes int64
}

// FileSink writes events as JSON lines, kube-apiserver's --audit-log-format
// json, to a file of mode 0600 it rotates by size.
type FileSink struct {
	opts    FileOptions
	metrics *Metrics
	q       *queue
	f       *os.File
	size    int64
}

// NewFileSink opens (creates) the log, so a path that cannot be written
// fails at start, not at the first event.
func NewFileSink(opts FileOptions, m *Metrics) (*FileSink, error) {
	if opts.Path == "" || opts.MaxSize <= 0 || opts.MaxBackups < 0 || opts.Buffer <= 0 || opts.BufferBytes <= 0 {
		return nil, fmt.Errorf("audit log: path, a positive size and buffer, and backups >= 0 are required (got %+v)", opts)
	}
	s := &FileSink{opts: opts, metrics: m, q: newQueue(opts.Buffer, opts.BufferBytes)}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *FileSink) Name() string { return "log" }

func (s *FileSink) Enqueue(event []byte) bool { return s.q.push(event) }

// Run writes events as they come, one line each, until ctx ends, then
// those already enqueued (writing a file needs no more than drain allows).
func (s *FileSink) Run(ctx context.Context, _ time.Duration) {
	defer func() {
		if s.f != nil {
			_ = s.f.Close()
		}
	}()
	var line []byte
	write := func(ev []byte) {
		line = append(append(line[:0], ev...), '\n')
		s.write(line)
		s.q.done(len(ev))
		if cap(line) > 1<<20 { // one huge event should not stay
			line = nil
		}
	}
	for {
		select {
		case ev := <-s.q.ch:
			write(ev)
		case <-ctx.Done():
			for {
				select {
				case ev := <-s.q.ch:
					write(ev)
				default:
					return
				}
			}
		}
	}
}

func (s *FileSink) write(b []byte) {
	if s.size > 0 && s.size+int64(len(b)) > s.opts.MaxSize {
		if err := s.rotate(); err != nil {
			s.fail(err)
			return
		}
	}
	if s.f == nil {
		if err := s.open(); err != nil {
			s.fail(err)
			return
		}
	}
	n, err := s.f.Write(b)
	s.size += int64(n)
	if err != nil {
		s.fail(err)
	}
}

func (s *FileSink) fail(err error) {
	s.metrics.Errors.WithLabelValues(s.Name()).Inc()
	s.metrics.Dropped.WithLabelValues(s.Name()).Inc()
	klog.Background().Error(err, "Writing the audit log", "path", s.opts.Path)
}

func (s *FileSink) open() error {
	f, err := os.OpenFile(s.opts.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	// A log that existed keeps its mode through OpenFile: one an operator
	// or an older gateway made readable by others is narrowed now, not at
	// its next rotation.
	if st.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			_ = f.Close()
			return fmt.Errorf("audit log: %w", err)
		}
	}
	s.f, s.size = f, st.Size()
	return nil
}

// rotate shifts Path.i to Path.i+1, dropping the oldest, and starts a new
// Path.
func (s *FileSink) rotate() error {
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	name := func(i int) string {
		if i == 0 {
			return s.opts.Path
		}
		return s.opts.Path + "." + strconv.Itoa(i)
	}
	if err := os.Remove(name(s.opts.MaxBackups)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("audit log rotation: %w", err)
	}
	for i := s.opts.MaxBackups - 1; i >= 0; i-- {
		if err := os.Rename(name(i), name(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("audit log rotation: %w", err)
		}
	}
	return s.open()
}
