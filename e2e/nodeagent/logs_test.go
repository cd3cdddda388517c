package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func (ta *testAgent) getLogs(t *testing.T, ctx context.Context, path string, q url.Values) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ta.url(path, q).String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ta.httpClient().Do(req)
}

func TestContainerLogs(t *testing.T) {
	ta := startAgent(t)
	p := pod("logs", v1.RestartPolicyNever, "sh", "-c", "echo one; echo two; printf 'three'")
	// stdout and stderr are read independently (as by any runtime), so
	// their relative order is only tested per stream.
	p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "streams", Image: "busybox", Command: []string{"sh", "-c", "echo out; echo err >&2"}})
	ta.createPod(p)
	ta.waitPod("logs", "Succeeded", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })

	ts := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z `
	for _, tc := range []struct {
		name   string
		path   string // default: the main container
		query  url.Values
		want   string // exact, unless regexp is set
		regexp string
	}{
		{name: "everything", want: "one\ntwo\nthree"},
		{name: "both streams", path: "/containerLogs/ci/logs/streams", regexp: "^(out\nerr\n|err\nout\n)$"},
		{name: "stdout only", path: "/containerLogs/ci/logs/streams", query: url.Values{"stream": {"Stdout"}}, want: "out\n"},
		{name: "stderr only", path: "/containerLogs/ci/logs/streams", query: url.Values{"stream": {"Stderr"}}, want: "err\n"},
		{name: "tailLines", query: url.Values{"tailLines": {"2"}}, want: "two\nthree"},
		{name: "legacy tail", query: url.Values{"tail": {"1"}}, want: "three"},
		{name: "tailLines 0", query: url.Values{"tailLines": {"0"}}, want: ""},
		{name: "limitBytes", query: url.Values{"limitBytes": {"6"}}, want: "one\ntw"},
		{name: "timestamps", query: url.Values{"timestamps": {"true"}}, regexp: "^" + ts + "one\n" + ts + "two\n" + ts + "three$"},
		{name: "sinceSeconds keeps recent lines", query: url.Values{"sinceSeconds": {"3600"}}, want: "one\ntwo\nthree"},
		{name: "sinceTime in the future drops all", query: url.Values{"sinceTime": {time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/containerLogs/ci/logs/main"
			}
			resp, err := ta.getLogs(t, ta.ctx, path, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, body %q, err %v", resp.StatusCode, body, err)
			}
			if tc.regexp != "" {
				if !regexp.MustCompile(tc.regexp).Match(body) {
					t.Fatalf("body %q does not match %s", body, tc.regexp)
				}
			} else if string(body) != tc.want {
				t.Fatalf("body %q, want %q", body, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name  string
		path  string
		query url.Values
		code  int
	}{
		{"unknown container", "/containerLogs/ci/logs/nope", nil, http.StatusNotFound},
		{"unknown pod", "/containerLogs/ci/nope/main", nil, http.StatusNotFound},
		{"bad tailLines", "/containerLogs/ci/logs/main", url.Values{"tailLines": {"-1"}}, http.StatusBadRequest},
		{"no previous instance", "/containerLogs/ci/logs/main", url.Values{"previous": {"true"}}, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := ta.getLogs(t, ta.ctx, tc.path, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
		})
	}
}

func TestContainerLogsFollow(t *testing.T) {
	ta := startAgent(t)
	// The container waits for a file the test creates once it has seen the
	// first line through the follow stream.
	ta.createPod(pod("follow", v1.RestartPolicyNever, "sh", "-c",
		"echo first; while [ ! -e go ]; do sleep 0.02; done; echo second"))
	ta.waitRunning("follow")

	ctx, cancel := context.WithTimeout(ta.ctx, testTimeout)
	defer cancel()
	resp, err := ta.getLogs(t, ctx, "/containerLogs/ci/follow/main", url.Values{"follow": {"true"}, "timestamps": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasSuffix(line, " first\n") {
		t.Fatalf("first followed line %q, %v", line, err)
	}
	if err := os.WriteFile(filepath.Join(ta.root, "ci", "follow", "main", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The rest arrives and the response then ends cleanly (EOF, no error)
	// because the container exited.
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading followed log: %v (got %q)", err, rest)
	}
	if !bytes.HasSuffix(rest, []byte(" second\n")) || bytes.Count(rest, []byte("\n")) != 1 {
		t.Fatalf("rest of followed log %q, want one timestamped line 'second'", rest)
	}
}

func TestContainerLogsPreviousAfterRestart(t *testing.T) {
	ta := startAgent(t)
	// Each instance prints its number; the third one stays up.
	ta.createPod(pod("restarts", v1.RestartPolicyAlways, "sh", "-c",
		`n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; echo "run $n"; [ $n -ge 3 ] && exec sleep 600; exit 1`))
	p := ta.waitPod("restarts", "restarted twice and running", func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount == 2 && cs[0].State.Running != nil && p.Status.Phase == v1.PodRunning
	})
	if last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 1 || last.Reason != "Error" {
		t.Fatalf("lastState %+v, want terminated exit 1 Error", p.Status.ContainerStatuses[0].LastTerminationState)
	}
	logs := func(previous string) string {
		resp, err := ta.getLogs(t, ta.ctx, "/containerLogs/ci/restarts/main", url.Values{"previous": {previous}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	// Running says the process started, not that it has printed yet.
	ta.waitFor("third instance output", func() (bool, error) { return logs("false") == "run 3\n", nil })
	if got := logs("true"); got != "run 2\n" {
		t.Fatalf("previous=true: %q, want %q", got, "run 2\n")
	}
}

func TestParseRecordAndPrinter(t *testing.T) {
	lines := []string{
		"2024-01-02T03:04:05.123456789Z stdout P hel",
		"2024-01-02T03:04:05.223456789Z stderr F oops",
		"2024-01-02T03:04:05.323456789Z stdout F lo",
	}
	var recs []logRecord
	for _, l := range lines {
		r, err := parseRecord([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if _, err := parseRecord([]byte("garbage")); err == nil {
		t.Fatal("garbage parsed")
	}
	var out bytes.Buffer
	p := newLogPrinter(&out, logOptions{timestamps: true})
	for _, r := range recs {
		if err := p.print(r); err != nil {
			t.Fatal(err)
		}
	}
	// A partial record continues its stream's line: one timestamp per line.
	want := "2024-01-02T03:04:05.123456789Z hel2024-01-02T03:04:05.223456789Z oops\nlo\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}
