package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// pauseSource finds pause.c in the tools module's k8s.io/kubernetes, as the
// environment does.
func pauseSource(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join("..", "..", "hack", "tools")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("find k8s.io/kubernetes in hack/tools (make tools downloads it): %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "build", "pause", "linux", "pause.c")
}

// TestEnsure builds every image from this machine's inputs, checks each tag
// has the files its pods run, and that a second call takes the cache.
func TestEnsure(t *testing.T) {
	opts := Options{CacheDir: t.TempDir(), PauseSource: pauseSource(t), E2EModuleDir: ".."}
	path, err := Ensure(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		Pause:        {"pause"},
		Busybox:      {"bin/busybox", "bin/sh", "bin/nc", "bin/sha256sum", "etc/passwd", "tmp"},
		Echo:         {"bin/sh", "usr/local/bin/httpecho", "usr/local/bin/tcpecho"},
		GitLabHelper: {"bin/sh", "bin/tail", "usr/local/bin/gitlab-runner-helper"},
	}
	for ref, files := range want {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		got := map[string]bool{}
		tr := tar.NewReader(mutate.Extract(img))
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			got[strings.TrimSuffix(hdr.Name, "/")] = true
		}
		for _, f := range files {
			if !got[f] {
				t.Errorf("%s lacks %s", ref, f)
			}
		}
	}
	again, err := Ensure(t.Context(), opts)
	if err != nil || again != path {
		t.Fatalf("second Ensure = %q, %v; want the cached %q", again, err, path)
	}
	entries, _ := os.ReadDir(opts.CacheDir)
	if len(entries) != 1 {
		t.Fatalf("cache holds %d entries, want the one tarball", len(entries))
	}
}

// TestLayerReproducible: the same entries in any order give one digest.
func TestLayerReproducible(t *testing.T) {
	f := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(f, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	digests := map[string]bool{}
	for _, entries := range [][]entry{
		{{path: "b/x", mode: 0o755, file: f}, {path: "a", mode: 0o644, data: []byte("a")}},
		{{path: "a", mode: 0o644, data: []byte("a")}, {path: "b/x", mode: 0o755, file: f}},
	} {
		l, err := layer(entries)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[d.String()] = true
	}
	if len(digests) != 1 {
		t.Fatalf("the same entries gave different layers: %v", digests)
	}
}
