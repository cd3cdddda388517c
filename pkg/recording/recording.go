// Package recording records exec and attach sessions the gateway relays as
// asciicast v2 files (the format asciinema plays), from the channels
// pkg/streamfollow decodes of SPDY and WebSocket (v4, v5) streams: stdout
// and stderr as output, the terminal's size and resizes, and stdin only
// when asked (it carries what users type, passwords included).
//
// Recording is opt-in: Mode none, tty (sessions with a terminal) or all,
// with per-namespace overrides. A recording is written to a hidden
// temporary file in Dir and renamed to its name when the session ends, so
// a reader never sees half a file; files are 0600. Each session is capped
// (MaxSessionBytes: later output is not recorded, the file says so) and so
// is the directory (MaxTotalBytes: new sessions are not recorded). When a
// recording cannot be made, FailClosed refuses the session (or cuts it, if
// it fails midway); otherwise the session goes on unrecorded and the
// failure is counted.
package recording

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

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
}

// dirRemeasureInterval is how often, at most, the directory is read again
// at its cap: once per session start was a scan of every recording per
// exec, concurrently, for as long as the directory stayed full.
const dirRemeasureInterval = time.Second

// Recorder starts recordings.
type Recorder struct {
	opts  Options
	total atomic.Int64 // bytes of the recordings in Dir, written ones included, measured again at the cap
	now   func() time.Time

	measureMu  sync.Mutex
	measuredAt time.Time // when total was last read from Dir
	// Failures counts recordings that could not be made or finished.
	failures *prometheus.CounterVec
	sessions prometheus.Counter
}

// New checks opts and reads how much Dir already holds.
func New(opts Options) (*Recorder, error) {
	if opts.Mode == "" {
		opts.Mode = ModeNone
	}
	if opts.Dir == "" || opts.MaxSessionBytes <= 0 || opts.MaxTotalBytes <= 0 {
		return nil, errors.New("recording: a directory and positive session and total caps are required")
	}
	r := &Recorder{opts: opts, now: time.Now,
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "karmada_gateway", Name: "recording_failures_total",
			Help: "Session recordings not made or not finished, by reason (start, write, cap); with fail-closed the session was refused or cut."}, []string{"reason"}),
		sessions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "karmada_gateway", Name: "recordings_total",
			Help: "Session recordings written."}),
	}
	for _, reason := range []string{"start", "write", "cap"} {
		r.failures.WithLabelValues(reason)
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(r.failures, r.sessions)
	}
	if err := r.measureDir(); err != nil {
		return nil, err
	}
	return r, nil
}

// measureDir sets total to what Dir holds now, unless it was read less
// than dirRemeasureInterval ago. Open recordings count what they have
// flushed so far, at most their write buffer short. Concurrent callers
// wait for one reading.
func (r *Recorder) measureDir() error {
	r.measureMu.Lock()
	defer r.measureMu.Unlock()
	now := r.now()
	if !r.measuredAt.IsZero() && now.Sub(r.measuredAt) < dirRemeasureInterval {
		return nil
	}
	r.measuredAt = now
	entries, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		return fmt.Errorf("recording directory: %w", err)
	}
	var total int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			total += info.Size()
		}
	}
	r.total.Store(total)
	return nil
}

// Follow has the exec or attach stream req opened into pod ns/pod recorded,
// if the mode of ns says so and opts' protocol decodes channels: it sets
// opts.Observer and chains opts.OnEnd, which finishes the recording. abort
// cuts the stream (fail-closed, when a write fails midway). It returns the
// recording's file name ("" when not recorded), or an error when the
// session must be refused (fail-closed). ns and pod are passed, not read
// from req's path: the request the gateway sends is the cluster proxy's,
// /apis/cluster.karmada.io/.../clusters/<c>/proxy/api/v1/namespaces/...
func (r *Recorder) Follow(req *http.Request, ns, pod, subresource string, opts *streamfollow.Options, abort func()) (string, error) {
	if (subresource != "exec" && subresource != "attach") || !opts.Protocol.Decodes() {
		return "", nil
	}
	q := req.URL.Query()
	tty := queryBool(q, "tty")
	mode := r.opts.Mode
	if m, ok := r.opts.Namespaces[ns]; ok {
		mode = m
	}
	if mode == ModeNone || (mode == ModeTTY && !tty) {
		return "", nil
	}
	s, err := r.start(ns, pod, q, tty, abort)
	if err != nil {
		klog.FromContext(req.Context()).Error(err, "Session not recorded", "namespace", ns, "pod", pod, "failClosed", r.opts.FailClosed)
		if r.opts.FailClosed {
			return "", fmt.Errorf("the session cannot be recorded: %w", err)
		}
		return "", nil
	}
	opts.Observer = s
	end := opts.OnEnd
	opts.OnEnd = func(sum streamfollow.Summary) {
		s.finish()
		if end != nil {
			end(sum)
		}
	}
	return s.name, nil
}

func (r *Recorder) start(ns, pod string, q url.Values, tty bool, abort func()) (*session, error) {
	if r.total.Load() >= r.opts.MaxTotalBytes {
		// Operators ship recordings elsewhere and delete them: what left
		// the directory no longer counts, so measure it again before
		// refusing (only here, at the cap, where it matters, and at most
		// once per dirRemeasureInterval).
		if err := r.measureDir(); err != nil {
			r.failures.WithLabelValues("start").Inc()
			return nil, err
		}
	}
	if r.total.Load() >= r.opts.MaxTotalBytes {
		r.failures.WithLabelValues("cap").Inc()
		return nil, fmt.Errorf("the recording directory holds %d bytes, the cap", r.total.Load())
	}
	now := time.Now()
	name := fmt.Sprintf("%s_%s_%s_%d.cast", ns, pod, now.UTC().Format("20060102T150405Z"), now.UnixNano()%1e9)
	f, err := os.OpenFile(filepath.Join(r.opts.Dir, "."+name+".tmp"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		r.failures.WithLabelValues("start").Inc()
		return nil, err
	}
	title := pod
	if cmd := q["command"]; len(cmd) > 0 {
		title += ": " + strings.Join(cmd, " ")
	}
	return &session{r: r, name: name, f: f, w: bufio.NewWriterSize(f, 32<<10), start: now, title: title, tty: tty, abort: abort}, nil
}

// session is one recording; it implements streamfollow.Observer.
type session struct {
	r     *Recorder
	name  string
	f     *os.File
	w     *bufio.Writer
	start time.Time
	title string
	tty   bool
	abort func()

	mu        sync.Mutex
	header    bool
	written   int64
	truncated bool
	failed    bool
	carry     [3][]byte // an incomplete UTF-8 sequence per channel
	line      []byte    // the event being encoded, reused
}

func (s *session) Data(ch streamfollow.Channel, p []byte) {
	if ch == streamfollow.Stdin && !s.r.opts.Stdin {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
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

func (s *session) Resize(size streamfollow.TerminalSize) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.header {
		s.writeHeader(size)
		return
	}
	s.event("r", []byte(strconv.Itoa(int(size.Width))+"x"+strconv.Itoa(int(size.Height))))
}

// writeHeader starts the file; s.mu is held. The terminal's size is the
// client's first resize when it comes before any output, as kubectl sends
// it, else 80x24.
func (s *session) writeHeader(size streamfollow.TerminalSize) {
	s.header = true
	if size.Width == 0 || size.Height == 0 {
		size = streamfollow.TerminalSize{Width: 80, Height: 24}
	}
	h := map[string]any{"version": 2, "width": size.Width, "height": size.Height, "timestamp": s.start.Unix(), "title": s.title}
	b, _ := json.Marshal(h)
	s.write(append(b, '\n'))
}

// event writes one asciicast event, [time, code, data] on a line; s.mu is
// held. It is encoded into s.line, not by json.Marshal of an []any, which
// copied every recorded byte three more times.
func (s *session) event(code string, data []byte) {
	if len(data) == 0 || s.failed {
		return
	}
	if !s.header {
		s.writeHeader(streamfollow.TerminalSize{})
	}
	if s.truncated {
		return
	}
	at := time.Since(s.start).Seconds()
	line := append(s.line[:0], '[')
	line = strconv.AppendFloat(line, at, 'f', 6, 64)
	line = append(line, ',', '"')
	line = append(line, code...)
	line = append(line, '"', ',')
	line = appendJSONString(line, data)
	line = append(line, ']', '\n')
	s.line = line
	if s.written+int64(len(line)) > s.r.opts.MaxSessionBytes {
		s.truncated = true
		s.r.failures.WithLabelValues("cap").Inc()
		marker, _ := json.Marshal([]any{json.Number(strconv.FormatFloat(at, 'f', 6, 64)), "m", "recording truncated: the session cap was reached"})
		s.write(append(marker, '\n'))
		return
	}
	s.write(line)
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

func (s *session) write(b []byte) {
	if s.failed {
		return
	}
	if _, err := s.w.Write(b); err != nil {
		s.fail(err)
		return
	}
	s.written += int64(len(b))
	s.r.total.Add(int64(len(b)))
}

// fail gives the recording up; s.mu is held.
func (s *session) fail(err error) {
	s.failed = true
	s.r.failures.WithLabelValues("write").Inc()
	klog.Background().Error(err, "Session recording failed", "recording", s.name, "failClosed", s.r.opts.FailClosed)
	if s.r.opts.FailClosed && s.abort != nil {
		go s.abort() // not on the copy goroutine that called
	}
}

// finish flushes the recording and renames it into place.
func (s *session) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	tmp := s.f.Name()
	if !s.header {
		s.writeHeader(streamfollow.TerminalSize{})
	}
	err := errors.Join(s.w.Flush(), s.f.Sync(), s.f.Close())
	if err == nil && !s.failed {
		err = os.Rename(tmp, filepath.Join(s.r.opts.Dir, s.name))
	}
	if err != nil || s.failed {
		if err != nil {
			s.fail(err)
		}
		_ = os.Remove(tmp)
		return
	}
	s.r.sessions.Inc()
}

func queryBool(q url.Values, key string) bool {
	var on bool
	v, ok := q[key]
	return ok && runtime.Convert_Slice_string_To_bool(&v, &on, nil) == nil && on
}
