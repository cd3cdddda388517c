package recording

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/streamfollow"
)

var v5 = streamfollow.ProtocolOf(http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}, "exec")

func execReq(ns, query string) *http.Request {
	return httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/p1/exec?command=sh&"+query, nil)
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
// every one, a namespace's override wins, port-forward and undecodable
// protocols never.
func TestModeSelectsSessions(t *testing.T) {
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
		{ModeAll, nil, "ci", "", "exec", streamfollow.ProtocolOf(http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"base64.channel.k8s.io"}}, "exec"), false},
	}
	for i, tc := range cases {
		r := newRecorder(t, Options{Mode: tc.mode, Namespaces: tc.namespaces})
		opts := streamfollow.Options{Protocol: tc.proto}
		name, err := r.Follow(execReq(tc.ns, tc.query), tc.ns, "p1", tc.sub, &opts, nil)
		if err != nil || (name != "") != tc.want || (opts.Observer != nil) != tc.want {
			t.Errorf("case %d: recording %q (%v), want recorded %v", i, name, err, tc.want)
		}
		if opts.OnEnd != nil {
			opts.OnEnd(streamfollow.Summary{})
		}
	}
}

// startSession starts a recording of an exec in ci and returns it and the
// function that ends it.
func startSession(t *testing.T, r *Recorder) (streamfollow.Observer, string, func()) {
	t.Helper()
	opts := streamfollow.Options{Protocol: v5}
	name, err := r.Follow(execReq("ci", "tty=true"), "ci", "p1", "exec", &opts, func() {})
	if err != nil || name == "" {
		t.Fatalf("not recorded: %v", err)
	}
	return opts.Observer, filepath.Join(r.opts.Dir, name), func() { opts.OnEnd(streamfollow.Summary{}) }
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
		obs, path, end := startSession(t, r)
		obs.Data(streamfollow.Stdin, []byte("s3cret\r"))
		obs.Data(streamfollow.Stdout, []byte("ok"))
		end()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), "s3cret"); got != stdin {
			t.Errorf("stdin recording %v: the file holds stdin %v:\n%s", stdin, got, b)
		}
	}
}

// TestCaps: a session past its cap stops being recorded and says so; a
// directory past its cap refuses new sessions, open or closed as asked.
func TestCaps(t *testing.T) {
	r := newRecorder(t, Options{Mode: ModeAll, MaxSessionBytes: 300, MaxTotalBytes: 400})
	obs, path, end := startSession(t, r)
	for range 20 {
		obs.Data(streamfollow.Stdout, []byte(strings.Repeat("x", 40)))
	}
	end()
	st, err := os.Stat(path)
	if err != nil || st.Size() > 300+200 {
		t.Fatalf("capped recording: %v, %d bytes", err, st.Size())
	}
	evs := events(t, path)
	if last := evs[len(evs)-1]; last[1] != "m" || !strings.Contains(last[2].(string), "truncated") {
		t.Errorf("last event %v, want a truncation marker", last)
	}
	// The directory is over 400 bytes with a second session.
	obs, _, end = startSession(t, r)
	obs.Data(streamfollow.Stdout, []byte(strings.Repeat("y", 200)))
	end()
	opts := streamfollow.Options{Protocol: v5}
	if name, err := r.Follow(execReq("ci", "tty=1"), "ci", "p1", "exec", &opts, nil); name != "" || err != nil {
		t.Errorf("over the total cap, fail-open: recording %q, %v; want none and no error", name, err)
	}
	r.opts.FailClosed = true
	if _, err := r.Follow(execReq("ci", "tty=1"), "ci", "p1", "exec", &opts, nil); err == nil {
		t.Error("over the total cap, fail-closed: the session was not refused")
	}
	if got := testutil.ToFloat64(r.failures.WithLabelValues("cap")); got < 3 {
		t.Errorf("cap failures counted %v, want the truncation and both refusals", got)
	}
	// Shipped elsewhere and deleted, the recordings count no more: the
	// directory has room again.
	casts, err := filepath.Glob(filepath.Join(r.opts.Dir, "*.cast"))
	if err != nil || len(casts) != 2 {
		t.Fatalf("recordings %v, %v; want the two sessions'", casts, err)
	}
	for _, c := range casts {
		if err := os.Remove(c); err != nil {
			t.Fatal(err)
		}
	}
	// The directory is read again at most once per dirRemeasureInterval,
	// not at every session start: within it the cap still refuses.
	now := time.Now()
	r.now = func() time.Time { return now }
	r.measuredAt = now
	if _, err := r.Follow(execReq("ci", "tty=1"), "ci", "p1", "exec", &opts, nil); err == nil {
		t.Error("at the cap, a session start read the directory again within dirRemeasureInterval of the last reading")
	}
	now = now.Add(dirRemeasureInterval)
	if name, err := r.Follow(execReq("ci", "tty=1"), "ci", "p1", "exec", &opts, nil); name == "" || err != nil {
		t.Errorf("after the recordings were removed: recording %q, %v; want a recording", name, err)
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
	opts := streamfollow.Options{Protocol: v5}
	if _, err := r.Follow(execReq("ci", ""), "ci", "p1", "exec", &opts, nil); err == nil || opts.Observer != nil {
		t.Errorf("unwritable directory, fail-closed: %v, observer %v; want the session refused", err, opts.Observer)
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
