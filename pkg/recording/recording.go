// Package recording records exec and attach sessions the gateway relays as
// asciicast v2 files (the format asciinema plays), from the channels
// pkg/streamfollow decodes of SPDY and WebSocket (v4, v5) streams: stdout
// and stderr as output, the terminal's size and resizes, and stdin only
// when asked (it carries what users type, passwords included).
//
// Recording is opt-in: Mode none, tty (sessions with a terminal) or all,
// with per-namespace overrides. A recording starts before the session
// does: Start creates a hidden temporary file in Dir (0600, locked while
// the session runs) and writes the asciicast header (80x24; the client's
// terminal size follows as a resize event) before the upgrade is sent to
// the member, so a session that cannot be recorded is refused before its
// command runs. When the session ends, the file gets a marker event if it
// is incomplete and is renamed to its name; a reader never sees a file
// still being written.
//
// Nothing recorded is deleted here; pkg/upload removes a recording from
// the directory once a bucket stored it (OnFinished tells it of each new
// one). A recording that ends incomplete (its stream cut, the gateway
// shutting down, a cap reached, a write failed) is kept as far as it got,
// with an "m" marker event saying why when one can still be written
// (IncompleteReason reads it), and Result says what was kept. A recording
// left behind by a gateway that was killed is found by the next New on the
// directory, marked and renamed as such (its lock tells it from another
// replica's session in a shared directory).
//
// Each session is capped (MaxSessionBytes: later output is not recorded,
// the file says so) and so is the directory (MaxTotalBytes): every event
// reserves its bytes from the directory's count before it is buffered, and
// the marker a session may end with is reserved at its start, so sessions
// recording at once never take the directory past its cap. The count
// follows what the directory holds: at the cap it is read again, so what
// pkg/upload or an operator removed no longer counts.
//
// Events are written at least every flushDelay, so a gateway killed
// outright loses at most the last second of a session. When a recording
// cannot be made, FailClosed refuses the session before it starts (the
// member is offered only the protocols whose channels can be recorded: it
// starts the command at its 101, before the gateway could see which it
// chose), and ends it with a Status on its error channel when a write
// fails or a cap is reached midway (each event is then written as it
// comes, so a failure is seen while the session runs); otherwise the
// session goes on unrecorded, the failure is counted and its audit event
// says why.
package recording

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

// Mode says which sessions are recorded.
type Mode string

const (
	ModeNone Mode = "none"
	ModeTTY  Mode = "tty"
	ModeAll  Mode = "all"
)

// ParseMode reads a --record-sessions value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeNone, ModeTTY, ModeAll:
		return m, nil
	}
	return "", fmt.Errorf("recording mode %q is not none, tty or all", s)
}

// Options configures a Recorder.
type Options struct {
	Dir  string
	Mode Mode
	// Namespaces overrides Mode per namespace.
	Namespaces map[string]Mode
	// Stdin records what the client sends (as asciicast "i" events).
	Stdin           bool
	MaxSessionBytes int64
	MaxTotalBytes   int64
	FailClosed      bool
	Registerer      prometheus.Registerer
	// OnFinished, when set, is called each time a recording was renamed
	// into place; it must not block.
	OnFinished func()
}

// dirRemeasureInterval is how often, at most, the directory is read again
// at its cap when no file was added to it or removed from it: once per
// session start was a scan of every recording per exec, concurrently, for
// as long as the directory stayed full.
const dirRemeasureInterval = time.Second

// mtimeGranularity bounds the tick of the clock file systems stamp a
// directory's changes with (a jiffy: 10 ms at HZ=100).
const mtimeGranularity = 20 * time.Millisecond

// flushAt is how much a recording that does not fail closed buffers before
// it writes, and flushDelay how long at most; one that fails closed writes
// every event as it comes. A gateway killed outright loses at most the
// last flushDelay of a session's output.
const (
	flushAt    = 32 << 10
	flushDelay = time.Second
)

// markerReserve is what a session reserves at its start for the marker it
// may end with; a marker's text is bounded to fit.
const markerReserve = 512

// Failure reasons of recording_failures_total.
const (
	reasonStart = "start"
	reasonWrite = "write"
	reasonCap   = "cap"
)

// Recorder starts recordings.
type Recorder struct {
	opts Options
	now  func() time.Time
	// total is the directory's bytes by the gateway's count: what its
	// files hold, plus open (what open sessions reserved or buffered and
	// did not write yet). Every byte is reserved from it before it is
	// buffered (reserve), so concurrent sessions never pass the cap.
	total, open atomic.Int64

	// measureMu guards what follows: a reading of Dir, and a session's
	// file joining or leaving the sessions' own (their start, their end).
	measureMu sync.Mutex
	// measuredAt is when total was last read from Dir (r.now), measuredWall
	// the same on the wall clock, measuredMtime Dir's modification time
	// then.
	measuredAt, measuredWall, measuredMtime time.Time
	// others is what total counts of the files that are no open session's
	// of this Recorder (finished recordings, another replica's), as last
	// read or since changed by a session's end; live names the open
	// sessions' files, whose bytes total counts as they are written and
	// a reading never measures: their writes go on meanwhile.
	others int64
	live   map[string]bool

	failures  *prometheus.CounterVec
	sessions  prometheus.Counter
	partial   prometheus.Counter
	recovered prometheus.Counter

	// wrapFile, when set (tests), wraps each recording's file once it is
	// created and locked.
	wrapFile func(*os.File) file
}

// New checks opts, keeps the recordings a killed gateway left in Dir
// (recoverLeftovers) and reads how much Dir holds.
func New(opts Options) (*Recorder, error) {
	if opts.Mode == "" {
		opts.Mode = ModeNone
	}
	if opts.Dir == "" || opts.MaxSessionBytes <= 0 || opts.MaxTotalBytes <= 0 {
		return nil, errors.New("recording: a directory and positive session and total caps are required")
	}
	r := &Recorder{opts: opts, now: time.Now, live: map[string]bool{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "karmada_gateway", Name: "recording_failures_total",
			Help: "Session recordings not made or not finished, by reason (start, write, cap); with fail-closed the session was refused or cut."}, []string{"reason"}),
		sessions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "karmada_gateway", Name: "recordings_total",
			Help: "Session recordings written, complete or not."}),
		partial: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "karmada_gateway", Name: "recordings_incomplete_total",
			Help: "Session recordings kept incomplete (the stream was cut or ended by the gateway, a cap was reached, a write failed); each ends with a marker saying why when one could be written."}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "karmada_gateway", Name: "recordings_recovered_total",
			Help: "Recordings a gateway left unfinished when it was killed, found in the directory at start, marked and kept."}),
	}
	for _, reason := range []string{reasonStart, reasonWrite, reasonCap} {
		r.failures.WithLabelValues(reason)
	}
	if opts.Registerer != nil {
		capBytes := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "karmada_gateway", Name: "recording_directory_max_bytes",
			Help: "Bytes the recording directory may hold (--record-sessions-max-total-size); new sessions are not recorded beyond it."})
		capBytes.Set(float64(opts.MaxTotalBytes))
		opts.Registerer.MustRegister(r.failures, r.sessions, r.partial, r.recovered, capBytes)
	}
	if err := r.recoverLeftovers(); err != nil {
		return nil, err
	}
	if err := r.measureDir(); err != nil {
		return nil, err
	}
	return r, nil
}

// measureDir brings total's count of the files that are no open session's
// (others) to what Dir holds of them now: uploads and an operator's
// deletions leave the count. The open sessions' own files are never
// measured: total follows them byte for byte, and their writes go on
// during a reading. It reads Dir again only when a file was added to it or
// removed from it since the last reading (its modification time changed)
// or dirRemeasureInterval passed: at the cap, every session's next event
// asks. Concurrent callers wait for one reading.
func (r *Recorder) measureDir() error {
	r.measureMu.Lock()
	defer r.measureMu.Unlock()
	now, wall := r.now(), time.Now()
	info, err := os.Stat(r.opts.Dir)
	if err != nil {
		return fmt.Errorf("recording directory: %w", err)
	}
	// A file system stamps a change with a coarse clock: a change in the
	// same tick as the last reading may leave the time as it was, so a
	// time that close to the reading proves nothing.
	unchanged := !r.measuredAt.IsZero() && info.ModTime().Equal(r.measuredMtime) &&
		r.measuredMtime.Before(r.measuredWall.Add(-mtimeGranularity))
	if unchanged && now.Sub(r.measuredAt) < dirRemeasureInterval {
		return nil
	}
	r.measuredAt, r.measuredMtime, r.measuredWall = now, info.ModTime(), wall
	entries, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		return fmt.Errorf("recording directory: %w", err)
	}
	var others int64
	for _, e := range entries {
		if r.live[e.Name()] {
			continue
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			others += info.Size()
		}
	}
	r.total.Add(others - r.others)
	r.others = others
	return nil
}

// settle renames an ended session's file (the temporary name in Dir) to
// final, and moves its bytes from the open sessions' count to the
// others', in one step with respect to a reading: a reading in between
// would count them twice. The file stays under its temporary name, among
// the others, when the rename fails (the error).
func (r *Recorder) settle(temp, final string, bytes int64) error {
	r.measureMu.Lock()
	defer r.measureMu.Unlock()
	err := os.Rename(filepath.Join(r.opts.Dir, temp), filepath.Join(r.opts.Dir, final))
	delete(r.live, temp)
	r.others += bytes
	return err
}

// forget drops a discarded session's file from the open sessions', and
// removes it if the session made it (created): total no longer counts it.
func (r *Recorder) forget(temp string, created bool) {
	r.measureMu.Lock()
	defer r.measureMu.Unlock()
	if created {
		_ = os.Remove(filepath.Join(r.opts.Dir, temp))
	}
	delete(r.live, temp)
}

// reserve takes n bytes of the directory's cap, if it has them.
func (r *Recorder) reserve(n int64) bool {
	for {
		cur := r.total.Load()
		if cur+n > r.opts.MaxTotalBytes {
			return false
		}
		if r.total.CompareAndSwap(cur, cur+n) {
			r.open.Add(n)
			return true
		}
	}
}

// reserveOrRemeasure is reserve, measuring the directory again when the
// count says it is full: uploads (pkg/upload) and operators remove
// recordings, and what left the directory no longer counts. Without it a
// session was cut at a cap the directory was far from.
func (r *Recorder) reserveOrRemeasure(n int64) bool {
	if r.reserve(n) {
		return true
	}
	return r.measureDir() == nil && r.reserve(n)
}

// file is what a Session writes its recording to: an *os.File, which
// tests wrap to fail as a full disk does.
type file interface {
	io.Writer
	Sync() error
	Truncate(size int64) error
	Close() error
	Name() string
}

// Session is one recording, from Start to the end of its stream.
type Session struct {
	r      *Recorder
	name   string // the recording's file name, once renamed into place
	f      file
	start  time.Time
	tty    bool
	logger klog.Logger

	// unrecorded, when set, says why the session has no recording: it
	// failed to start and recording does not fail closed.
	unrecorded string

	mu       sync.Mutex
	attached bool
	// terminate ends the stream (Attach), for a write that fails closed.
	terminate func(streamfollow.End, metav1.Status)
	buf       []byte // events not yet written
	flushing  *time.Timer
	line      []byte // the event being encoded, reused
	carry     [3][]byte
	written   int64 // bytes of events taken, header included
	onDisk    int64 // bytes known written whole
	reserved  int64 // left of the start's reservation, for the end marker
	// incomplete says why the recording is not the whole session ("" if
	// it is); failed: writing failed, nothing more is written.
	incomplete  string
	truncated   bool
	failed      bool
	closed      bool
	result      Result
	lastEventAt float64
}

// Result is what a session's recording kept, once its stream ended.
type Result struct {
	// File is the recording's name in the directory, "" when nothing was
	// kept.
	File string
	// Incomplete says why the recording is not the whole session, or why
	// nothing was kept; "" for a whole one.
	Incomplete string
}

// RefusesUnrecorded reports whether a session in namespace ns (with a
// terminal or not) must be recorded or refused: its namespace's mode
// records it and recording fails closed. For what the gateway cannot
// record at all (a debug container's command), so that it is refused.
func (r *Recorder) RefusesUnrecorded(ns string, tty bool) bool {
	return r.opts.FailClosed && r.records(ns, tty)
}

// records reports whether the mode of namespace ns records a session with
// a terminal or without.
func (r *Recorder) records(ns string, tty bool) bool {
	mode := r.opts.Mode
	if m, ok := r.opts.Namespaces[ns]; ok {
		mode = m
	}
	return mode == ModeAll || (mode == ModeTTY && tty)
}

// Start begins the recording of the exec or attach req asks for on pod
// ns/pod, if the mode of ns says so, before anything is sent upstream: the
// file is created, locked and its header written (and synced, failing
// closed). It returns nil when the session is not recorded. An error means
// the session must be refused (failing closed); it is a 503 Status that
// names no server path.
func (r *Recorder) Start(req *http.Request, ns, pod, subresource string) (*Session, error) {
	if subresource != "exec" && subresource != "attach" {
		return nil, nil
	}
	q := req.URL.Query()
	tty := queryBool(q, "tty")
	if !r.records(ns, tty) {
		return nil, nil
	}
	logger := klog.FromContext(req.Context()).WithValues("namespace", ns, "pod", pod)
	if r.opts.FailClosed && !narrowToRecordable(req.Header) {
		// The member picks the protocol and starts the command at its 101:
		// a protocol the gateway cannot decode is found out only after the
		// command runs. So the member is offered only what can be recorded.
		r.failures.WithLabelValues(reasonStart).Inc()
		logger.Error(nil, "Session refused: it offers no protocol that can be recorded", "failClosed", true)
		return nil, apierrors.NewServiceUnavailable("the session cannot be recorded (it offers no protocol whose channels the gateway decodes: " +
			"SPDY/3.1 with X-Stream-Protocol-Version v4.channel.k8s.io, v3, v2 or channel.k8s.io, or WebSocket with the subprotocol " +
			"v5.channel.k8s.io, v4.channel.k8s.io or channel.k8s.io, without extensions) and recording fails closed (--record-sessions-fail-closed): it was not started")
	}
	s, err := r.start(ns, pod, q, tty, logger)
	if err != nil {
		logger.Error(err, "Session not recorded", "failClosed", r.opts.FailClosed)
		if r.opts.FailClosed {
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
				"the session cannot be recorded (%s) and recording fails closed (--record-sessions-fail-closed): it was not started", reasonText(err)))
		}
		// It goes on unrecorded, and its audit event says why.
		return &Session{r: r, logger: logger, unrecorded: "not recorded: " + reasonText(err)}, nil
	}
	return s, nil
}

// narrowToRecordable removes from an exec or attach upgrade request h the
// protocols it offers whose channels cannot be recorded (base64 WebSocket
// protocols, any the gateway does not know) and any WebSocket extension,
// keeping a WebSocket bearer token. It reports false when no recordable
// protocol is left, an offer of none included: a SPDY server then speaks
// channel.k8s.io without saying so in its 101, a WebSocket server the
// unnamed binary protocol, neither of which a 101 tells from another.
func narrowToRecordable(h http.Header) bool {
	upgrade := h.Get("Upgrade")
	switch {
	case strings.EqualFold(upgrade, "SPDY/3.1"):
		var kept []string
		for _, v := range h.Values("X-Stream-Protocol-Version") {
			if streamfollow.DecodesOffer(upgrade, v) {
				kept = append(kept, v)
			}
		}
		if len(kept) == 0 {
			return false
		}
		h["X-Stream-Protocol-Version"] = kept
		return true
	case strings.EqualFold(upgrade, "websocket"):
		h.Del("Sec-WebSocket-Extensions")
		var kept []string
		channels := false
		for _, v := range h.Values("Sec-WebSocket-Protocol") {
			for _, offer := range strings.Split(v, ",") {
				offer = strings.TrimSpace(offer)
				switch {
				case strings.HasPrefix(offer, identity.WebSocketBearerPrefix):
					kept = append(kept, offer)
				case streamfollow.DecodesOffer(upgrade, offer):
					kept, channels = append(kept, offer), true
				}
			}
		}
		if !channels {
			return false
		}
		h.Set("Sec-WebSocket-Protocol", strings.Join(kept, ", "))
		return true
	}
	return false
}

func (r *Recorder) start(ns, pod string, q url.Values, tty bool, logger klog.Logger) (*Session, error) {
	now := r.now()
	title := pod
	if cmd := q["command"]; len(cmd) > 0 {
		title += ": " + strings.Join(cmd, " ")
	}
	header := headerLine(now, title)
	if !r.reserve(int64(len(header)) + markerReserve) {
		if err := r.measureDir(); err != nil {
			r.failures.WithLabelValues(reasonStart).Inc()
			return nil, err
		}
		if !r.reserve(int64(len(header)) + markerReserve) {
			r.failures.WithLabelValues(reasonCap).Inc()
			return nil, fmt.Errorf("the recording directory holds %d bytes, its cap", r.total.Load())
		}
	}
	name := fmt.Sprintf("%s_%s_%s_%d.cast", ns, pod, now.UTC().Format("20060102T150405Z"), now.UnixNano()%1e9)
	s := &Session{r: r, name: name, start: now, tty: tty, logger: logger.WithValues("recording", name), reserved: int64(len(header)) + markerReserve}
	r.measureMu.Lock()
	r.live[tempName(name)] = true // before the file exists: no reading counts it twice
	r.measureMu.Unlock()
	osf, err := os.OpenFile(filepath.Join(r.opts.Dir, tempName(name)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		s.f = osf
		// Locked while the session runs: a gateway starting on a shared
		// directory recovers only the recordings nobody holds.
		err = syscall.Flock(int(osf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if r.wrapFile != nil {
			s.f = r.wrapFile(osf)
		}
	}
	if err == nil {
		f := s.f
		s.reserved -= int64(len(header))
		s.r.open.Add(-int64(len(header)))
		var n int
		n, err = f.Write(header)
		s.written, s.onDisk = int64(n), int64(n)
		r.total.Add(-int64(len(header) - n))
		if err == nil && r.opts.FailClosed {
			err = f.Sync()
		}
	}
	if err != nil {
		r.failures.WithLabelValues(reasonStart).Inc()
		s.discard()
		return nil, err
	}
	return s, nil
}

// Name is the recording's file name once the session ends.
func (s *Session) Name() string { return s.name }

// Recorded reports whether the session has a recording (not one that
// failed to start, or whose protocol cannot be recorded).
func (s *Session) Recorded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unrecorded == ""
}

// Attach has the session record what the stream opts configures carries:
// it sets opts.Observer and chains opts.OnEnd, which finishes the
// recording before the previous OnEnd runs. terminate ends the stream,
// when a write fails and recording fails closed. A protocol whose channels
// cannot be decoded cannot be recorded: an error when failing closed (the
// stream is refused), else the recording is discarded and nil returned.
func (s *Session) Attach(opts *streamfollow.Options, terminate func(streamfollow.End, metav1.Status)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unrecorded == "" && !opts.Protocol.Decodes() {
		s.r.failures.WithLabelValues(reasonStart).Inc()
		s.logger.Error(nil, "Session not recorded: its protocol's channels cannot be decoded", "protocol", opts.Protocol.String(), "failClosed", s.r.opts.FailClosed)
		s.closed = true
		s.discard()
		if s.r.opts.FailClosed {
			return apierrors.NewServiceUnavailable(fmt.Sprintf("the session cannot be recorded (the channels of its protocol %q cannot be decoded) "+
				"and recording fails closed (--record-sessions-fail-closed)", opts.Protocol.String()))
		}
		s.unrecorded = fmt.Sprintf("not recorded: the channels of its protocol %q cannot be decoded", opts.Protocol.String())
	}
	s.attached, s.terminate = true, terminate
	if s.unrecorded != "" {
		s.result = Result{Incomplete: s.unrecorded}
		return nil
	}
	opts.Observer = s
	end := opts.OnEnd
	opts.OnEnd = func(sum streamfollow.Summary) {
		s.finish(sum)
		if end != nil {
			end(sum)
		}
	}
	return nil
}

// Attached reports whether the session's stream started (Attach).
func (s *Session) Attached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attached
}

// Abandon removes the recording of a session that never started:
// upstream did not switch protocols, so no command ran. A session
// attached to its stream is never abandoned.
func (s *Session) Abandon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attached || s.closed || s.unrecorded != "" {
		return
	}
	s.closed = true
	s.discard()
}

// discard closes and removes the file and gives back what the session
// took of the directory's count.
func (s *Session) discard() {
	if s.f != nil {
		_ = s.f.Close()
	}
	if s.name != "" {
		s.r.forget(tempName(s.name), s.f != nil)
	}
	s.r.total.Add(-(s.reserved + int64(len(s.buf)) + s.onDisk))
	s.r.open.Add(-(s.reserved + int64(len(s.buf))))
	s.reserved, s.buf = 0, nil
}

// Result is what the recording kept, once the stream ended.
func (s *Session) Result() Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.result
}

func (s *Session) Data(ch streamfollow.Channel, p []byte) {
	if ch == streamfollow.Stdin && !s.r.opts.Stdin {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.failed {
		return
	}
	code := "o"
	if ch == streamfollow.Stdin {
		code = "i"
	}
	// Every byte of a recorded stream passes here on its copy path (#28's
	// cost): the frame is encoded as it is, joined to the previous one's
	// tail only when that split a UTF-8 sequence.
	b := p
	if len(s.carry[ch]) > 0 {
		b = append(s.carry[ch], p...)
	}
	// Keep a UTF-8 sequence split across frames for the next one.
	cut := len(b)
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if c := b[len(b)-i]; utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				cut = len(b) - i
			}
			break
		}
	}
	s.event(code, b[:cut])
	s.carry[ch] = append(s.carry[ch][:0], b[cut:]...)
}

func (s *Session) Resize(size streamfollow.TerminalSize) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.failed {
		return
	}
	s.event("r", []byte(strconv.Itoa(int(size.Width))+"x"+strconv.Itoa(int(size.Height))))
}

// headerLine is the asciicast v2 header. The terminal's size is not known
// before the session starts: the client's first resize follows as an "r"
// event.
func headerLine(start time.Time, title string) []byte {
	b, _ := json.Marshal(map[string]any{"version": 2, "width": 80, "height": 24, "timestamp": start.Unix(), "title": title})
	return append(b, '\n')
}

// event takes one asciicast event, [time, code, data] on a line; s.mu is
// held. It is encoded into s.line, not by json.Marshal of an []any, which
// copied every recorded byte three more times.
func (s *Session) event(code string, data []byte) {
	if len(data) == 0 || s.truncated {
		return
	}
	at := s.r.now().Sub(s.start).Seconds()
	line := append(s.line[:0], '[')
	line = strconv.AppendFloat(line, at, 'f', 6, 64)
	line = append(line, ',', '"')
	line = append(line, code...)
	line = append(line, '"', ',')
	line = appendJSONString(line, data)
	line = append(line, ']', '\n')
	s.line = line
	switch {
	case s.written+int64(len(line)) > s.r.opts.MaxSessionBytes:
		s.truncate("the session cap was reached")
		return
	case !s.r.reserveOrRemeasure(int64(len(line))):
		s.truncate("the recording directory's cap was reached")
		return
	}
	s.lastEventAt = at
	s.take(line)
}

// take buffers b, already reserved, and writes the buffer when it is full
// or, failing closed, at once.
func (s *Session) take(b []byte) {
	s.buf = append(s.buf, b...)
	s.written += int64(len(b))
	switch {
	case s.r.opts.FailClosed || len(s.buf) >= flushAt:
		s.flush()
	case s.flushing == nil:
		s.flushing = time.AfterFunc(flushDelay, s.timedFlush)
	}
}

// timedFlush writes what waited flushDelay in the buffer.
func (s *Session) timedFlush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushing = nil
	if !s.closed {
		s.flush()
	}
}

// truncate stops recording the session's events and marks the file.
// Failing closed, it ends the session: what it printed next would not be
// recorded, and a command could print a cap's worth first to run the rest
// unseen.
func (s *Session) truncate(why string) {
	s.truncated = true
	s.incomplete = markerTruncated + why
	s.r.failures.WithLabelValues(reasonCap).Inc()
	s.marker(s.incomplete)
	s.endFailingClosed()
}

// marker writes an "m" event with text, from the start's reservation.
func (s *Session) marker(text string) {
	if len(text) > markerReserve-64 {
		text = text[:markerReserve-64]
	}
	at := max(s.lastEventAt, s.r.now().Sub(s.start).Seconds())
	b, _ := json.Marshal([]any{json.Number(strconv.FormatFloat(at, 'f', 6, 64)), "m", text})
	b = append(b, '\n')
	if int64(len(b)) > s.reserved {
		return
	}
	s.reserved -= int64(len(b))
	s.take(b)
}

// flush writes the buffer. Bytes a failed write did not write leave the
// count; a line written in part is cut off again, so the file stays
// readable as far as it got.
func (s *Session) flush() {
	if s.flushing != nil {
		s.flushing.Stop()
		s.flushing = nil
	}
	if len(s.buf) == 0 || s.failed {
		return
	}
	n, err := s.f.Write(s.buf)
	s.r.open.Add(-int64(len(s.buf)))
	if err == nil {
		s.onDisk += int64(n)
		s.buf = s.buf[:0]
		return
	}
	s.r.total.Add(-int64(len(s.buf) - n))
	if n > 0 {
		if terr := s.f.Truncate(s.onDisk); terr != nil {
			s.onDisk += int64(n)
		} else {
			s.r.total.Add(-int64(n))
		}
	}
	s.buf = s.buf[:0]
	s.fail(err)
}

// fail gives the recording up after a write failed; s.mu is held.
// Failing closed, it ends the session with a Status on its error channel.
func (s *Session) fail(err error) {
	s.failed = true
	s.incomplete = "writing the recording failed: " + reasonText(err)
	s.r.failures.WithLabelValues(reasonWrite).Inc()
	s.logger.Error(err, "Session recording failed", "failClosed", s.r.opts.FailClosed)
	s.endFailingClosed()
}

// endFailingClosed ends the session with a Status on its error channel
// saying why its recording stopped (s.incomplete), when recording fails
// closed; s.mu is held.
func (s *Session) endFailingClosed() {
	if s.r.opts.FailClosed && s.terminate != nil {
		s.terminate(streamfollow.EndRecordingFailed, metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
			Message: fmt.Sprintf("the gateway ended the session: %s, and recording fails closed (--record-sessions-fail-closed); "+
				"the command's outcome is unknown", s.incomplete),
		})
	}
}

// finish ends the recording when its stream ended: a marker if it is
// incomplete, the last write, then the file is synced, closed (which frees
// its lock) and renamed into place. Nothing is deleted.
func (s *Session) finish(sum streamfollow.Summary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if why := endIncomplete(sum.End); why != "" && s.incomplete == "" {
		s.incomplete = why
		s.marker(markerIncomplete + why)
	}
	s.flush()
	err := errors.Join(s.f.Sync(), s.f.Close())
	if err != nil && !s.failed {
		s.fail(err)
	}
	s.r.total.Add(-s.reserved)
	s.r.open.Add(-s.reserved)
	s.reserved = 0
	s.result = Result{File: s.name, Incomplete: s.incomplete}
	if err := s.r.settle(tempName(s.name), s.name, s.onDisk); err != nil {
		// Kept under its temporary name; the next start renames it.
		s.logger.Error(err, "Keeping the recording under its temporary name")
		s.result.Incomplete = strings.TrimPrefix(s.result.Incomplete+"; ", "; ") + "kept as " + tempName(s.name) + " until the gateway's next start"
	} else if s.r.opts.OnFinished != nil {
		s.r.opts.OnFinished()
	}
	s.r.sessions.Inc()
	if s.result.Incomplete != "" {
		s.r.partial.Inc()
	}
}

// endIncomplete says why a stream that ended so is not wholly recorded.
func endIncomplete(end streamfollow.End) string {
	switch end {
	case streamfollow.EndCutReported, streamfollow.EndCutUnreported:
		return "the stream was cut before the command's exit status"
	case streamfollow.EndGatewayShutdown:
		return "the gateway ended the session when it shut down"
	case streamfollow.EndRecordingFailed:
		return "the gateway ended the session: its recording failed"
	}
	return ""
}

// reasonText is err without a server path: an os.PathError's operation
// and cause, as "no space left on device".
func reasonText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err.Error()
	}
	return err.Error()
}

func tempName(name string) string { return "." + name + ".tmp" }

// recoverLeftovers keeps the recordings a killed gateway left unfinished
// in Dir: each temporary file nobody holds locked (another replica's open
// session is) is cut back to its last whole line, given a header if it has
// none and a marker saying it was recovered, and renamed into place.
func (r *Recorder) recoverLeftovers() error {
	entries, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		return fmt.Errorf("recording directory: %w", err)
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), "."), ".tmp")
		if !ok || !strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(name, ".cast") || !e.Type().IsRegular() {
			continue
		}
		switch err := r.recoverOne(e.Name(), name); {
		case errors.Is(err, syscall.EWOULDBLOCK):
		case err != nil:
			klog.Background().Error(err, "Recording left by a stopped gateway not recovered", "file", e.Name())
		default:
			r.recovered.Inc()
			klog.Background().Info("Kept the recording a stopped gateway left unfinished", "recording", name)
		}
	}
	return nil
}

func (r *Recorder) recoverOne(tmp, name string) error {
	path := filepath.Join(r.opts.Dir, tmp)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	whole := bytes.LastIndexByte(b, '\n') + 1
	var tail []byte
	last := 0.0
	if whole == 0 {
		info, err := f.Stat()
		if err != nil {
			return err
		}
		tail = headerLine(info.ModTime(), "(recovered)")
	} else if ev := lastEvent(b[:whole]); len(ev) > 0 {
		_ = json.Unmarshal(ev[0], &last)
	}
	marker, _ := json.Marshal([]any{json.Number(strconv.FormatFloat(last, 'f', 6, 64)), "m",
		markerIncomplete + "the gateway stopped before the session ended; kept when it started again"})
	tail = append(append(tail, marker...), '\n')
	if err := f.Truncate(int64(whole)); err != nil {
		return err
	}
	if _, err := f.WriteAt(tail, int64(whole)); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return os.Rename(path, filepath.Join(r.opts.Dir, name))
}

// appendJSONString appends data to dst as a JSON string, as encoding/json
// would decode it back: invalid UTF-8 becomes U+FFFD, control characters,
// quotes and backslashes are escaped, and so are U+2028 and U+2029, which
// JavaScript players would read as line ends.
func appendJSONString(dst, data []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(data); {
		// Terminal output is mostly printable ASCII, which is copied as it
		// is: test it eight bytes at a time, not byte by byte (#28's cost).
		if i+8 <= len(data) && plainASCII(binary.LittleEndian.Uint64(data[i:])) {
			i += 8
			continue
		}
		c := data[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, data[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, data[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, data[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, data[start:]...)
	return append(dst, '"')
}

// plainASCII reports whether none of the eight bytes in w needs escaping
// in a JSON string: none is a control character, a quote, a backslash or
// not ASCII. It uses the classic "has a byte less than n" and "has a zero
// byte" word tests, which may blame the wrong byte but never miss one.
func plainASCII(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	control := (w - ones*0x20) & ^w & highs
	return (w&highs | control | hasZero(w^(ones*'"')) | hasZero(w^(ones*'\\'))) == 0
}

func queryBool(q url.Values, key string) bool {
	var on bool
	v, ok := q[key]
	return ok && runtime.Convert_Slice_string_To_bool(&v, &on, nil) == nil && on
}

// Finished reports whether name, in the recording directory, is a
// recording renamed into place: not one still being written, nor a file
// that is no recording.
func Finished(name string) bool {
	return strings.HasSuffix(name, ".cast") && !strings.HasPrefix(name, ".")
}

// Marker texts that say a recording is not the whole session.
const (
	markerIncomplete = "recording incomplete: "
	markerTruncated  = "recording truncated: "
)

// IncompleteReason says why the finished recording r (of size bytes) is
// not its whole session, as its last event, a marker, says; "" for a whole
// recording. A recording whose writes failed may end without a marker.
func IncompleteReason(r io.ReaderAt, size int64) string {
	// A marker's line fits in what a session reserves for it.
	tail := make([]byte, min(size, markerReserve+64))
	if _, err := r.ReadAt(tail, size-int64(len(tail))); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	ev := lastEvent(tail)
	var code, text string
	if len(ev) != 3 || json.Unmarshal(ev[1], &code) != nil || code != "m" || json.Unmarshal(ev[2], &text) != nil {
		return ""
	}
	if strings.HasPrefix(text, markerIncomplete) || strings.HasPrefix(text, markerTruncated) {
		return text
	}
	return ""
}

// lastEvent is the last of the lines b ends with, as an asciicast event:
// [time, code, data]; nil when that line is none (the header, a torn
// line).
func lastEvent(b []byte) []json.RawMessage {
	b = bytes.TrimSuffix(b, []byte("\n"))
	var ev []json.RawMessage
	if json.Unmarshal(b[bytes.LastIndexByte(b, '\n')+1:], &ev) != nil {
		return nil
	}
	return ev
}
