package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// clientNodeProtocols is what @kubernetes/client-node 1.x offers for exec,
// newest first.
var clientNodeProtocols = []string{"v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"}

// clientNodeExecQuery builds the exec query as client-node's Exec does:
// stdout, stderr, stdin, tty, then one command= per argument, container.
func clientNodeExecQuery(container string, stdin bool, command ...string) string {
	b := func(v bool) string {
		if v {
			return "true"
		}
		return "false"
	}
	q := "stdout=true&stderr=true&stdin=" + b(stdin) + "&tty=false"
	for _, arg := range command {
		q += "&command=" + url.QueryEscape(arg)
	}
	return q + "&container=" + container
}

// TestExecutorGitHubRunnerHooks replays GitHub's runner-container-hooks in
// k8s mode (client-node, WebSocket): exec offering v5 down to v1 and
// getting v5, stdin ended with the v5 close message [255, 0], and the
// workspace copied into the job container and back with tar over
// stdin/stdout, every file checked by sha256.
func TestExecutorGitHubRunnerHooks(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name, member = "exec-github", "member2"
	pod := sleepPod(name)
	pod.Spec.Containers[0].Name = "job"
	// The hooks run the job in their work volume's mount point.
	pod.Spec.Containers[0].WorkingDir = "/__w"
	placePod(t, pod, []string{member}, member)
	jobDir := workingDir(pod, "job")
	execPath := "/api/v1/namespaces/" + env.Namespace + "/pods/" + name + "/exec"

	// The workspace: a tree with a large random file, a small one and an
	// empty one.
	files := map[string][]byte{
		"_work/README.md":           []byte("runner workspace\n"),
		"_work/src/blob.bin":        make([]byte, 3<<20+11),
		"_work/src/deeper/empty":    {},
		"_work/src/deeper/line.txt": []byte(strings.Repeat("a line of source\n", 1000)),
	}
	_, _ = rand.NewChaCha8([32]byte{'g', 'h'}).Read(files["_work/src/blob.bin"])
	archive := tarFiles(t, files)

	t.Run("stdin with the v5 close frame", func(t *testing.T) {
		execs := countRoute(t, metrics.RouteExec, "101")
		s := dialGatewayWS(t, env.UserExecOnly, execPath,
			clientNodeExecQuery("job", true, "sh", "-c", "cat; echo; echo stdin-closed-in; pwd"), clientNodeProtocols)
		if s.protocol != "v5.channel.k8s.io" {
			t.Fatalf("negotiated subprotocol %q from %v, want v5.channel.k8s.io (the offer must reach the member untouched)", s.protocol, clientNodeProtocols)
		}
		if err := s.send(chStdin, []byte("hooks-stdin")); err != nil {
			t.Fatal(err)
		}
		// Without the close message cat would wait for more forever.
		if err := s.send(chClose, []byte{chStdin}); err != nil {
			t.Fatal(err)
		}
		if err := s.waitClosed(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		if want := "hooks-stdin\nstdin-closed-in\n" + jobDir + "\n"; s.text(chStdout) != want {
			t.Errorf("stdout %q, want exactly %q", s.text(chStdout), want)
		}
		st, err := s.status()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkExitStatus(st, 0); err != nil {
			t.Error(err)
		}
		execs.check(t, 1)
	})

	t.Run("copy into the pod with tar", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		s := dialGatewayWS(t, env.UserExecOnly, execPath,
			clientNodeExecQuery("job", true, "tar", "xf", "-", "-C", "."), clientNodeProtocols)
		if s.protocol != "v5.channel.k8s.io" {
			t.Fatalf("negotiated subprotocol %q, want v5.channel.k8s.io", s.protocol)
		}
		if err := s.sendAll(chStdin, archive, 16<<10); err != nil {
			t.Fatal(err)
		}
		if err := s.send(chClose, []byte{chStdin}); err != nil {
			t.Fatal(err)
		}
		if err := s.waitFor(ctx, "the exit status", time.Minute, func() bool { return len(s.bytes(chError)) > 0 }); err != nil {
			t.Fatal(err)
		}
		st, err := s.status()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkExitStatus(st, 0); err != nil {
			t.Fatalf("tar xf: %v (stderr %q)", err, s.text(chStderr))
		}
		// The files are in the member's container, byte for byte: asked
		// of the member's own apiserver, past the gateway.
		for p, want := range files {
			got, err := testEnv.MemberExec(ctx, member, env.Namespace, name, "job", "sha256sum", path.Join(jobDir, p))
			if err != nil {
				t.Errorf("%s is not in %s's job container: %v", p, member, err)
				continue
			}
			if f := strings.Fields(got); len(f) == 0 || f[0] != fmt.Sprintf("%x", sha256.Sum256(want)) {
				t.Errorf("%s in the pod has sha256sum %q, want %x (%d bytes)", p, got, sha256.Sum256(want), len(want))
			}
		}
	})

	t.Run("copy out of the pod with tar", func(t *testing.T) {
		// The hooks write results next to the workspace; copy both back.
		if _, err := testEnv.MemberExec(t.Context(), member, env.Namespace, name, "job", "sh", "-c", "echo 'written in the pod' > _work/result.txt"); err != nil {
			t.Fatal(err)
		}
		s := dialGatewayWS(t, env.UserExecOnly, execPath,
			clientNodeExecQuery("job", false, "sh", "-c", "pwd >&2; tar cf - _work"), clientNodeProtocols)
		if s.protocol != "v5.channel.k8s.io" {
			t.Fatalf("negotiated subprotocol %q, want v5.channel.k8s.io", s.protocol)
		}
		if err := s.waitClosed(time.Minute); err != nil {
			t.Fatal(err)
		}
		st, err := s.status()
		if err != nil {
			t.Fatal(err)
		}
		if err := checkExitStatus(st, 0); err != nil {
			t.Fatalf("tar cf: %v (stderr %q)", err, s.text(chStderr))
		}
		if s.text(chStderr) != jobDir+"\n" {
			t.Errorf("stderr %q, want the member's job dir %q", s.text(chStderr), jobDir+"\n")
		}
		got := untarFiles(t, s.bytes(chStdout))
		want := map[string][]byte{"_work/result.txt": []byte("written in the pod\n")}
		for p, b := range files {
			want[p] = b
		}
		for p, b := range want {
			g, ok := got[p]
			if !ok {
				t.Errorf("%s missing from the tar copied out (got %d files)", p, len(got))
				continue
			}
			if sha256.Sum256(g) != sha256.Sum256(b) {
				t.Errorf("%s copied out has sha256 %x (%d bytes), want %x (%d bytes)", p, sha256.Sum256(g), len(g), sha256.Sum256(b), len(b))
			}
		}
		if len(got) != len(want) {
			t.Errorf("the tar copied out has %d files, want %d", len(got), len(want))
		}
	})
}

// tarFiles is a tar archive of files (directories implied by the paths).
func tarFiles(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for p := range files {
		for d := filepath.Dir(p); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	// Sorted, a parent comes before its children.
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	for p, data := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// untarFiles returns the regular files of a tar archive by path.
func untarFiles(t *testing.T, archive []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("the tar copied out of the pod (%d bytes) is corrupt after %d files: %v", len(archive), len(files), err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}
