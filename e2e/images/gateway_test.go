package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestGateway builds the gateway once and checks the image made of it: the
// same commit gives the same digest and archive, the layout matches the
// Dockerfile's, and a push to a registry pulls back the same digest.
func TestGateway(t *testing.T) {
	repo := filepath.Join("..", "..")
	rev, created, err := Commit(t.Context(), repo)
	if err != nil {
		t.Fatal(err)
	}
	build := func(t *testing.T) GatewayOptions {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "gateway")
		if err := BuildGatewayBinary(t.Context(), repo, "amd64", bin); err != nil {
			t.Fatal(err)
		}
		return GatewayOptions{Binary: bin, Revision: rev, Created: created, Version: "v0.0.0-test", Source: "https://example.invalid/gateway", Licenses: "NOASSERTION"}
	}
	opts := build(t)
	img, err := Gateway(opts)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("reproducible", func(t *testing.T) {
		// A second build of the binary, in another directory, and a
		// second archive: every byte must be the same.
		again, err := Gateway(build(t))
		if err != nil {
			t.Fatal(err)
		}
		if d, err := again.Digest(); err != nil || d != digest {
			t.Fatalf("second build's digest = %v, %v; want %v", d, err, digest)
		}
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
		for _, out := range []string{a, b} {
			if err := WriteLayoutArchive(img, "example.invalid/gateway:test", out); err != nil {
				t.Fatal(err)
			}
		}
		ab, _ := os.ReadFile(a)
		bb, _ := os.ReadFile(b)
		if len(ab) == 0 || !bytes.Equal(ab, bb) {
			t.Fatalf("two archives of one image differ (%d and %d bytes)", len(ab), len(bb))
		}
		// The archive is an OCI layout holding the image.
		if got := archivedDigest(t, a); got != digest {
			t.Fatalf("archive holds %v, want %v", got, digest)
		}
	})

	t.Run("layout", func(t *testing.T) {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/gateway" {
			t.Errorf("user %q entrypoint %q, want 65532:65532 and /gateway like the Dockerfile", cf.Config.User, cf.Config.Entrypoint)
		}
		if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(created) {
			t.Errorf("platform %s/%s created %v, want linux/amd64 at the commit time %v", cf.OS, cf.Architecture, cf.Created, created)
		}
		for k, want := range map[string]string{
			"title": "karmada-exec-gateway", "source": opts.Source, "revision": rev,
			"version": opts.Version, "licenses": opts.Licenses, "created": created.Format(time.RFC3339),
		} {
			if got := cf.Config.Labels["org.opencontainers.image."+k]; got != want {
				t.Errorf("label %s = %q, want %q", k, got, want)
			}
		}
		files := imageFiles(t, img)
		ca, err := os.ReadFile(CABundle)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(files["etc/ssl/certs/ca-certificates.crt"], ca) {
			t.Errorf("image's CA bundle differs from %s", CABundle)
		}
		bin, ok := files["gateway"]
		if !ok {
			t.Fatal("no /gateway in the image")
		}
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Error("/gateway has a program interpreter: not static")
			}
		}
		if f.Machine != elf.EM_X86_64 {
			t.Errorf("/gateway is for %v, want x86-64", f.Machine)
		}
	})

	t.Run("dynamic binary refused", func(t *testing.T) {
		// A dynamically linked program of this machine has PT_INTERP.
		if _, err := Gateway(GatewayOptions{Binary: "/bin/sh", Created: created}); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
			t.Fatalf("Gateway(/bin/sh) = %v, want a dynamically linked error", err)
		}
	})

	t.Run("push", func(t *testing.T) {
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		t.Cleanup(srv.Close)
		ref := strings.TrimPrefix(srv.URL, "http://") + "/karmada-exec-gateway:test"
		if err := Push(t.Context(), img, ref, name.Insecure); err != nil {
			t.Fatal(err)
		}
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := remote.Image(r, remote.WithContext(t.Context()))
		if err != nil {
			t.Fatal(err)
		}
		if d, err := pulled.Digest(); err != nil || d != digest {
			t.Fatalf("pulled %v, %v; pushed %v", d, err, digest)
		}
	})
}

// archivedDigest unpacks an OCI layout archive and returns the digest of
// its one image.
func archivedDigest(t *testing.T, archive string) v1.Hash {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("archive index has %d manifests, want 1", len(m.Manifests))
	}
	if _, err := idx.Image(m.Manifests[0].Digest); err != nil {
		t.Fatal(err)
	}
	return m.Manifests[0].Digest
}

// imageFiles is the content of every regular file of img's filesystem.
func imageFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[hdr.Name] = b
		}
	}
}

// TestGatewayRepositoryAgrees: the chart runs by default what make image
// and the release workflow publish.
func TestGatewayRepositoryAgrees(t *testing.T) {
	for file, want := range map[string]string{
		"charts/gateway/values.yaml":    "  repository: " + GatewayRepository + "\n",
		"Makefile":                      "IMAGE ?= " + GatewayRepository + ":$(VERSION)\n",
		".github/workflows/release.yml": `IMAGE="` + GatewayRepository + `:${TAG#v}"`,
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not have %q", file, want)
		}
	}
}
