package recording

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording/recordingtest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

var v5 = streamfollow.ProtocolOf(http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}, "exec")

// execReq is a WebSocket exec offering v5, as kubectl's.
func execReq(ns, query string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/p1/exec?command=sh&"+query, nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
	return r
}

func newRecorder(t *testing.T, opts Options) *Recorder {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.MaxSessionBytes == 0 {
		opts.MaxSessionBytes = 1 << 20
	}
	if opts.MaxTotalBytes == 0 {
		opts.MaxTotalBytes = 1 << 20
	}
	opts.Registerer = prometheus.NewRegistry()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestModeSelectsSessions: tty records sessions with a terminal only, all
// every one, a namespace's override wins, port-forward never; a protocol
// whose channels cannot be decoded leaves no recording, and the session
// says why.
func TestModeSelectsSessions(t *testing.T) {
	base64 := streamfollow.ProtocolOf(http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"base64.channel.k8s.io"}}, "exec")
	cases := []struct {
		mode       Mode
		namespaces map[string]Mode
		ns, query  string
		sub        string
		proto      streamfollow.Protocol
		want       bool
	}{
		{ModeTTY, nil, "ci", "tty=true", "exec", v5, true},
		{ModeTTY, nil, "ci", "stdin=true", "exec", v5, false},
		{ModeAll, nil, "ci", "stdin=true", "attach", v5, true},
		{ModeNone, map[string]Mode{"prod": ModeAll}, "prod", "", "exec", v5, true},
		{ModeNone, map[string]Mode{"prod": ModeAll}, "ci", "tty=1", "exec", v5, false},
		{ModeAll, map[string]Mode{"dev": ModeNone}, "dev", "tty=1", "exec", v5, false},
		{ModeAll, nil, "ci", "", "portforward", v5, false},
		{ModeAll, nil, "ci", "", "exec", base64, false},
	}
	for i, tc := range cases {
		r := newRecorder(t, Options{Mode: tc.mode, Namespaces: tc.namespaces})
		s, err := r.Start(execReq(tc.ns, tc.query), tc.ns, "p1", tc.sub)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		opts := streamfollow.Options{Protocol: tc.proto}
		if s != nil {
			if err := s.Attach(&opts, nil); err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
		}
		if recorded := s != nil && s.Recorded(); recorded != tc.want || (opts.Observer != nil) != tc.want {
			t.Errorf("case %d: recorded %v, want %v", i, recorded, tc.want)
		}
		if s != nil && !tc.want && !strings.Contains(s.Result().Incomplete, "not recorded") {
			t.Errorf("case %d: an unrecorded session says %q, want why", i, s.Result().Incomplete)
		}
		if opts.OnEnd != nil {
			opts.OnEnd(streamfollow.Summary{End: streamfollow.EndCompleted})
		}
		files, _ := os.ReadDir(r.opts.Dir)
		if want := map[bool]int{true: 1, false: 0}[tc.want]; len(files) != want {
			t.Errorf("case %d: %d files in the directory, want %d", i, len(files), want)
		}
	}
}

// session is a recording of an exec in ci started and attached.
type session struct {
	*Session
	path string
	end  func(streamfollow.End)
	// terminated is what the session ended its stream with, if it did.
	terminated *metav1.Status
}

func startSession(t *testing.T, r *Recorder) *session {
	t.Helper()
	s, err := r.Start(execReq("ci", "tty=true"), "ci", "p1", "exec")
	if err != nil || s == nil || !s.Recorded() {
		t.Fatalf("not recorded: %v", err)
	}
	out := &session{Session: s, path: filepath.Join(r.opts.Dir, s.Name())}
	opts := streamfollow.Options{Protocol: v5}
	if err := s.Attach(&opts, func(_ streamfollow.End, st metav1.Status) { out.terminated = &st }); err != nil {
		t.Fatal(err)
	}
	out.end = func(e streamfollow.End) { opts.OnEnd(streamfollow.Summary{End: e}) }
	return out
}

// incompleteReason is IncompleteReason of the file at path.
func incompleteReason(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return IncompleteReason(f, st.Size())
}

func events(t *testing.T, path string) [][]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	var out [][]any
	for sc.Scan() {
		var ev []any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// TestStdinOnlyWhenAsked: stdin carries secrets; it is recorded only with
// Options.Stdin.
func TestStdinOnlyWhenAsked(t *testing.T) {
	for _, stdin := range []bool{false, true} {
		r := newRecorder(t, Options{Mode: ModeAll, Stdin: stdin})
		s := startSession(t, r)
		s.Data(streamfollow.Stdin, []byte("s3cret\r"))
		s.Data(streamfollow.Stdout, []byte("ok"))
		s.end(streamfollow.EndCompleted)
		b, err := os.ReadFile(s.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte("s3cret")); got != stdin {
			t.Errorf("stdin recorded %v with Stdin %v", got, stdin)
		}
	}
}

// TestHeaderBeforeTheSession: Start writes the header to the file, under
// its temporary name, before the session starts: a session that cannot be
// recorded is known before its command runs, and a gateway killed during
// it leaves a playable file.
func TestHeaderBeforeTheSession(t *testing.T) {
	r := newRecorder(t, Options{Mode: ModeAll})
	s, err := r.Start(execReq("ci", "command=ls"), "ci", "p1", "exec")
	if err != nil || s == nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(r.opts.Dir, tempName(s.Name())))
	var h map[string]any
	if err != nil || json.Unmarshal(bytes.TrimSpace(b), &h) != nil || h["version"] != 2.0 || h["title"] != "p1: sh ls" {
		t.Fatalf("temporary recording %q, %v: want the asciicast header", b, err)
	}
	// No 101: no session, no recording.
	s.Abandon()
	if files, _ := os.ReadDir(r.opts.Dir); len(files) != 0 {
		t.Fatalf("an abandoned recording left %d files", len(files))
	}
	if got := r.total.Load(); got != 0 {
		t.Fatalf("an abandoned recording still counts %d bytes", got)
	}
}

// TestIncompleteSessionsAreMarked: a recording whose stream did not end as
// its protocol ends it is kept, with a marker saying why, and its Result
// says so; a whole one has neither.
func TestIncompleteSessionsAreMarked(t *testing.T) {
	cases := []struct {
		end  streamfollow.End
		want string
	}{
		{streamfollow.EndCompleted, ""},
		{streamfollow.EndClientClosed, ""},
		{streamfollow.EndCutReported, "cut before the command's exit status"},
		{streamfollow.EndCutUnreported, "cut before the command's exit status"},
		{streamfollow.EndGatewayShutdown, "the gateway ended the session when it shut down"},
	}
	for _, tc := range cases {
		finished := 0
		r := newRecorder(t, Options{Mode: ModeAll, OnFinished: func() { finished++ }})
		s := startSession(t, r)
		s.Data(streamfollow.Stdout, []byte("out"))
		if finished != 0 {
			t.Errorf("%s: OnFinished called before the session ended", tc.end)
		}
		s.end(tc.end)
		if finished != 1 {
			t.Errorf("%s: OnFinished called %d times, want once when the recording was renamed into place", tc.end, finished)
		}
		if why := incompleteReason(t, s.path); (why == "") != (tc.want == "") || !strings.Contains(why, tc.want) {
			t.Errorf("%s: IncompleteReason %q, want it to say %q", tc.end, why, tc.want)
		}
		res := s.Result()
		if res.File != s.Name() || !strings.Contains(res.Incomplete, tc.want) || (tc.want == "") != (res.Incomplete == "") {
			t.Errorf("%s: result %+v, want %s kept and %q", tc.end, res, s.Name(), tc.want)
		}
		evs := events(t, s.path)
		last := evs[len(evs)-1]
		if marked := last[1] == "m"; marked != (tc.want != "") || marked && !strings.Contains(last[2].(string), tc.want) {
			t.Errorf("%s: last event %v", tc.end, last)
		}
	}
}

// TestCaps: a session past its cap stops being recorded and says so; a
// directory past its cap refuses new recordings: failing open, the session
// goes on unrecorded and says why; failing closed it is refused.
func TestCaps(t *testing.T) {
	r := newRecorder(t, Options{Mode: ModeAll, MaxSessionBytes: 300, MaxTotalBytes: 3000})
	s := startSession(t, r)
	for range 20 {
		s.Data(streamfollow.Stdout, []byte(strings.Repeat("x", 40)))
	}
	s.end(streamfollow.EndCompleted)
	st, err := os.Stat(s.path)
	if err != nil || st.Size() > 300+200 {
		t.Fatalf("capped recording: %v, %d bytes", err, st.Size())
	}
	evs := events(t, s.path)
	if last := evs[len(evs)-1]; last[1] != "m" || !strings.Contains(last[2].(string), "truncated") {
		t.Errorf("last event %v, want a truncation marker", last)
	}
	if res := s.Result(); !strings.Contains(res.Incomplete, "session cap") {
		t.Errorf("result %+v, want it to say the session cap was reached", res)
	}
	if why := incompleteReason(t, s.path); !strings.Contains(why, "truncated: the session cap") {
		t.Errorf("IncompleteReason %q, want the truncation", why)
	}
	// Two more sessions, and the directory has no room for a third's
	// header and end marker.
	for range 2 {
		s = startSession(t, r)
		s.Data(streamfollow.Stdout, []byte(strings.Repeat("y", 200)))
		s.end(streamfollow.EndCompleted)
	}
	r.opts.MaxTotalBytes = r.total.Load() + markerReserve
	unrecorded, err := r.Start(execReq("ci", "tty=1"), "ci", "p1", "exec")
	if err != nil || unrecorded == nil || unrecorded.Recorded() || !strings.Contains(unrecorded.unrecorded, "cap") {
		t.Errorf("over the total cap, fail-open: %+v, %v; want an unrecorded session saying why", unrecorded, err)
	}
	r.opts.FailClosed = true
	if _, err := r.Start(execReq("ci", "tty=1"), "ci", "p1", "exec"); !apierrors.IsServiceUnavailable(err) || strings.Contains(err.Error(), r.opts.Dir) {
		t.Errorf("over the total cap, fail-closed: %v; want a 503 naming no path", err)
	}
	if got := testutil.ToFloat64(r.failures.WithLabelValues("cap")); got < 3 {
		t.Errorf("cap failures counted %v, want the truncation and both refusals", got)
	}
	r.opts.FailClosed = false
	// Shipped elsewhere and deleted, the recordings count no more: the
	// directory has room again.
	casts, err := filepath.Glob(filepath.Join(r.opts.Dir, "*.cast"))
	if err != nil || len(casts) != 3 {
		t.Fatalf("recordings %v, %v; want the three sessions'", casts, err)
	}
	for _, c := range casts {
		if err := os.Remove(c); err != nil {
			t.Fatal(err)
		}
	}
	// With no file added or removed since the last reading (the
	// directory's time is as it was then, long before it), the directory
	// is read again at most once per dirRemeasureInterval, not at every
	// session start: within it the cap still refuses. (Removing a file
	// has it read at once: TestRemovedRecordingsLeaveTheCount.)
	past := time.Now().Add(-time.Minute)
	if err := os.Chtimes(r.opts.Dir, past, past); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(r.opts.Dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r.now = func() time.Time { return now }
	r.measuredAt, r.measuredWall, r.measuredMtime = now, time.Now(), info.ModTime()
	if s, _ := r.Start(execReq("ci", "tty=1"), "ci", "p1", "exec"); s.Recorded() {
		t.Error("at the cap, a session start read the unchanged directory again within dirRemeasureInterval of the last reading")
	}
	now = now.Add(dirRemeasureInterval)
	if s, err := r.Start(execReq("ci", "tty=1"), "ci", "p1", "exec"); err != nil || !s.Recorded() {
		t.Errorf("after the recordings were removed: %v; want a recording", err)
	}
}

// TestTotalCapHoldsUnderConcurrency: sessions recording at once, each far
// more than the directory holds, never take it past its cap: every event
// reserves its bytes before it is written.
func TestTotalCapHoldsUnderConcurrency(t *testing.T) {
	const capBytes = 3 << 20
	r := newRecorder(t, Options{Mode: ModeAll, MaxSessionBytes: 100 << 20, MaxTotalBytes: capBytes})
	// All six start before any writes: a session starting once the others
	// filled the directory would not be recorded at all.
	var sessions []*session
	for range 6 {
		sessions = append(sessions, startSession(t, r))
	}
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Go(func() {
			chunk := []byte(strings.Repeat("z", 8<<10))
			for range 256 { // 2 MiB each
				s.Data(streamfollow.Stdout, chunk)
			}
			s.end(streamfollow.EndCompleted)
		})
	}
	wg.Wait()
	var total int64
	entries, err := os.ReadDir(r.opts.Dir)
	if err != nil || len(entries) != 6 {
		t.Fatalf("%d files, %v; want the six sessions'", len(entries), err)
	}
	for _, e := range entries {
		info, _ := e.Info()
		total += info.Size()
	}
	if total > capBytes {
		t.Fatalf("the directory holds %d bytes, over its cap of %d", total, capBytes)
	}
	if total < capBytes-6*(8<<10+markerReserve) {
		t.Fatalf("the directory holds %d bytes, far under its cap of %d: reservations leaked", total, capBytes)
	}
	if got := r.total.Load(); got != total || r.open.Load() != 0 {
		t.Fatalf("counted %d bytes, %d open; the directory holds %d", got, r.open.Load(), total)
	}
}

// fullDisk is a recording file that fails as a full disk does once it
// holds room bytes: the write that crosses it writes what fits and
// returns ENOSPC.
type fullDisk struct {
	*os.File
	room int64
}

func (f *fullDisk) Write(b []byte) (int, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	free := max(f.room-st.Size(), 0)
	if int64(len(b)) <= free {
		return f.File.Write(b)
	}
	n, _ := f.File.Write(b[:free])
	return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
}

// TestFullDiskKeepsThePartialRecording: a volume that fills mid-session
// keeps what was written, cut back to its last whole event so that
// asciinema plays it, renamed into place; the Result says what was kept
// and why, naming no server path. Failing closed, the session is ended
// with a Status saying so; failing open, it goes on.
func TestFullDiskKeepsThePartialRecording(t *testing.T) {
	player, err := exec.LookPath("asciinema")
	if err != nil {
		t.Fatal("asciinema is not installed: run make tools")
	}
	for _, failClosed := range []bool{false, true} {
		r := newRecorder(t, Options{Mode: ModeAll, FailClosed: failClosed})
		r.wrapFile = func(f *os.File) file { return &fullDisk{File: f, room: 40 << 10} }
		s := startSession(t, r)
		for i := range 100 {
			s.Data(streamfollow.Stdout, []byte(fmt.Sprintf("line %03d %s\r\n", i, strings.Repeat(".", 1000))))
		}
		s.end(streamfollow.EndCompleted)
		res := s.Result()
		if res.File != s.Name() || !strings.Contains(res.Incomplete, "no space left on device") || strings.Contains(res.Incomplete, r.opts.Dir) {
			t.Errorf("fail-closed %v: result %+v, want the file kept and the cause without a path", failClosed, res)
		}
		out, err := recordingtest.Cat(player, s.path)
		if err != nil || !strings.HasPrefix(string(out), "line 000") {
			t.Errorf("fail-closed %v: asciinema cat: %v: %.40q", failClosed, err, out)
		}
		switch {
		case failClosed && (s.terminated == nil || !strings.Contains(s.terminated.Message, "no space left on device") || strings.Contains(s.terminated.Message, r.opts.Dir)):
			t.Errorf("failing closed, the session was ended with %+v; want a Status naming the cause without a path", s.terminated)
		case !failClosed && s.terminated != nil:
			t.Errorf("failing open, the session was ended: %+v", s.terminated)
		}
		if got := r.total.Load(); got > 40<<10 || r.open.Load() != 0 {
			t.Errorf("fail-closed %v: counted %d bytes, %d open, after a full disk", failClosed, got, r.open.Load())
		}
	}
}

// TestFailClosedWritesEachEvent: failing closed, every event reaches the
// file as it comes, so a full disk is found while the session runs, not
// at its end; and a disk full at the start refuses the session, naming no
// path, before it starts.
func TestFailClosedWritesEachEvent(t *testing.T) {
	r := newRecorder(t, Options{Mode: ModeAll, FailClosed: true})
	s := startSession(t, r)
	tmp := filepath.Join(r.opts.Dir, tempName(s.Name()))
	for i := range 3 {
		before, _ := os.Stat(tmp)
		s.Data(streamfollow.Stdout, []byte("x"))
		after, _ := os.Stat(tmp)
		if after.Size() <= before.Size() {
			t.Fatalf("event %d was not written as it came", i)
		}
	}
	s.end(streamfollow.EndCompleted)

	r.wrapFile = func(f *os.File) file { return &fullDisk{File: f} }
	_, err := r.Start(execReq("ci", ""), "ci", "p1", "exec")
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "no space left on device") || strings.Contains(err.Error(), r.opts.Dir) {
		t.Fatalf("full disk at the start, failing closed: %v; want a 503 naming the cause without a path", err)
	}
	if files, _ := filepath.Glob(filepath.Join(r.opts.Dir, ".*.tmp")); len(files) != 0 {
		t.Fatalf("a refused session left %v", files)
	}
}

// TestFailClosedRefusesUnwritable: a directory the recording cannot be
// created in refuses the session when failing closed.
func TestFailClosedRefusesUnwritable(t *testing.T) {
	dir := t.TempDir()
	r := newRecorder(t, Options{Dir: dir, Mode: ModeAll, FailClosed: true})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if s, err := r.Start(execReq("ci", ""), "ci", "p1", "exec"); err == nil || s != nil || strings.Contains(err.Error(), dir) {
		t.Errorf("unwritable directory, fail-closed: %v; want the session refused, naming no path", err)
	}
}

// TestRecoverLeftovers: the recordings a killed gateway left under their
// temporary names (empty, whole lines, a line cut by the kill) are kept
// when a Recorder starts on the directory: cut back to whole lines, given
// a header if they had none and a marker saying what happened, renamed,
// counted, and playable. One a live session holds locked (another
// replica's, on a shared volume) is left alone.
func TestRecoverLeftovers(t *testing.T) {
	player, err := exec.LookPath("asciinema")
	if err != nil {
		t.Fatal("asciinema is not installed: run make tools")
	}
	dir := t.TempDir()
	header := `{"version":2,"width":80,"height":24,"timestamp":1,"title":"p"}` + "\n"
	leftovers := map[string]string{
		"ci_empty_1.cast": "",
		"ci_whole_2.cast": header + `[0.5,"o","hello\r\n"]` + "\n",
		"ci_cut_3.cast":   header + `[0.5,"o","hello\r\n"]` + "\n" + `[0.7,"o","wor`,
	}
	live := newRecorder(t, Options{Dir: dir, Mode: ModeAll})
	open := startSession(t, live)
	for name, content := range leftovers {
		if err := os.WriteFile(filepath.Join(dir, tempName(name)), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	r := newRecorder(t, Options{Dir: dir, Mode: ModeAll})
	if got := testutil.ToFloat64(r.recovered); got != 3 {
		t.Errorf("recovered %v recordings, want 3", got)
	}
	for name := range leftovers {
		path := filepath.Join(dir, name)
		out, err := recordingtest.Cat(player, path)
		if err != nil {
			t.Errorf("%s: asciinema cat: %v", name, err)
		}
		if strings.Contains(name, "whole") || strings.Contains(name, "cut") {
			if string(out) != "hello\r\n" {
				t.Errorf("%s plays %q", name, out)
			}
		}
		evs := events(t, path)
		if last := evs[len(evs)-1]; last[1] != "m" || !strings.Contains(last[2].(string), "the gateway stopped before the session ended") {
			t.Errorf("%s: last event %v, want the recovery marker", name, last)
		}
		if why := incompleteReason(t, path); !strings.Contains(why, "the gateway stopped before the session ended") {
			t.Errorf("%s: IncompleteReason %q, want the recovery", name, why)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, tempName(open.Name()))); err != nil {
		t.Fatalf("a live session's recording was taken: %v", err)
	}
	open.end(streamfollow.EndCompleted)
	if _, err := os.Stat(open.path); err != nil {
		t.Fatalf("the live session's recording: %v", err)
	}
}

// TestAppendJSONStringDecodesAsEncodingJSON checks the recorder's own JSON
// string encoder differentially: what it writes for a frame must decode,
// with encoding/json, to what json.Marshal of the same bytes decodes to
// (the encoder it replaced), whatever the bytes: text, controls, quotes,
// invalid or split UTF-8, U+2028. FuzzAppendJSONString runs the same check
// on generated frames.
func TestAppendJSONStringDecodesAsEncodingJSON(t *testing.T) {
	for _, in := range jsonStringSeeds {
		checkAppendJSONString(t, []byte(in))
	}
}

// TestAppendJSONStringEveryOffset puts each byte that must not be copied as
// it is at every offset of the eight-byte words appendJSONString tests at
// once, between runs of plain ASCII, so a word test that misses one fails.
func TestAppendJSONStringEveryOffset(t *testing.T) {
	for _, special := range []string{"\x00", "\n", "\x1f", "\"", "\\", "\x80", "\xff", "é", "\xe2\x80\xa8", "😀", "\x7f ~"} {
		for off := 0; off <= 17; off++ {
			checkAppendJSONString(t, []byte(strings.Repeat("a", off)+special+strings.Repeat("b", 20)))
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, in := range jsonStringSeeds {
		f.Add([]byte(in))
	}
	f.Fuzz(checkAppendJSONString)
}

var jsonStringSeeds = []string{
	"", "plain text", "line\r\n", "tab\tquote\"backslash\\", "\x00\x01\x1b[31mred\x1b[0m\x7f",
	"héllo wörld ✓ 😀", "\xff\xfe invalid", "split \xe2\x82", "\xe2\x80\xa8 and \xe2\x80\xa9", "<&>",
}

func checkAppendJSONString(t *testing.T, in []byte) {
	encoded := appendJSONString([]byte("prefix"), in)
	if !bytes.HasPrefix(encoded, []byte("prefix")) {
		t.Fatalf("%q: the destination's bytes were not kept: %q", in, encoded)
	}
	// encoding/json decodes raw invalid UTF-8 and U+2028 as it decodes their
	// escapes, so the file's own bytes are checked too: asciinema reads it
	// as UTF-8, and JavaScript players end a line at a raw U+2028.
	if s := encoded[len("prefix"):]; !utf8.Valid(s) || bytes.ContainsAny(s, "\u2028\u2029") {
		t.Fatalf("%q encoded as %q, which is not valid UTF-8 or holds a raw U+2028 or U+2029", in, encoded)
	}
	var got, want string
	if err := json.Unmarshal(encoded[len("prefix"):], &got); err != nil {
		t.Fatalf("%q encoded as %q, which is no JSON string: %v", in, encoded, err)
	}
	ref, err := json.Marshal(string(in))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(ref, &want); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("%q encoded as %q decodes to %q; encoding/json's %q decodes to %q", in, encoded, got, ref, want)
	}
}

// TestEventsReachTheFileWithinASecond: buffered events are written within
// flushDelay even when no more come, so a gateway killed outright loses at
// most the last second of a session.
func TestEventsReachTheFileWithinASecond(t *testing.T) {
	r := newRecorder(t, Options{Mode: ModeAll})
	s := startSession(t, r)
	tmp := filepath.Join(r.opts.Dir, tempName(s.Name()))
	s.Data(streamfollow.Stdout, []byte("started"))
	written := time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(tmp)
		return bytes.Contains(b, []byte("started")), err
	}); err != nil {
		t.Fatalf("a buffered event was not written: %v", err)
	}
	if took := time.Since(written); took > flushDelay+time.Second {
		t.Errorf("a buffered event reached the file after %s", took)
	}
	s.end(streamfollow.EndCompleted)
}

// TestRemovedRecordingsLeaveTheCount: recordings removed from the
// directory (shipped and deleted by an operator, or uploaded by
// pkg/upload) no longer count against its cap, for a session already
// running too: ten sessions of 3 KB, each removed when it ended, under a
// 4 KiB cap (seven times the cap in all) are each recorded whole. The
// count used to be read again only when a session's start found the
// directory full, so a session that started with room for its header was
// cut at a cap the directory was far from.
func TestRemovedRecordingsLeaveTheCount(t *testing.T) {
	r := newRecorder(t, Options{Mode: ModeAll, MaxTotalBytes: 4 << 10})
	for i := range 10 {
		s := startSession(t, r)
		for range 25 {
			s.Data(streamfollow.Stdout, []byte(strings.Repeat("x", 99)+"\n"))
		}
		s.end(streamfollow.EndCompleted)
		if res := s.Result(); res.File == "" || res.Incomplete != "" {
			t.Fatalf("session %d: %+v; want it recorded whole", i, res)
		}
		if err := os.Remove(s.path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFailClosedCapsEndTheSession: failing closed, a session whose
// recording reaches a cap (its own, or the directory's) is ended with a
// Status naming the cap, as one whose write failed: it would otherwise run
// on unrecorded, and a command could print a cap's worth first to do the
// rest unseen. Failing open it runs on, its recording marked.
func TestFailClosedCapsEndTheSession(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		opts       Options
	}{
		{"session cap", "the session cap was reached", Options{MaxSessionBytes: 2 << 10}},
		{"directory cap", "the recording directory's cap was reached", Options{MaxTotalBytes: 2 << 10}},
	} {
		for _, failClosed := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fail-closed=%v", tc.name, failClosed), func(t *testing.T) {
				opts := tc.opts
				opts.Mode, opts.FailClosed = ModeAll, failClosed
				s := startSession(t, newRecorder(t, opts))
				for range 30 {
					s.Data(streamfollow.Stdout, []byte(strings.Repeat("x", 99)+"\n"))
				}
				switch {
				case failClosed && (s.terminated == nil || !strings.Contains(s.terminated.Message, tc.want) ||
					!strings.Contains(s.terminated.Message, "recording fails closed")):
					t.Errorf("the session was ended with %+v; want a Status saying %q", s.terminated, tc.want)
				case !failClosed && s.terminated != nil:
					t.Errorf("failing open, the session was ended: %+v", s.terminated)
				}
				s.end(streamfollow.EndRecordingFailed)
				if res := s.Result(); !strings.Contains(res.Incomplete, tc.want) {
					t.Errorf("result %+v; want it to say %q", res, tc.want)
				}
			})
		}
	}
}
