package images

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The gateway image's layout; the Dockerfile builds the same one on
// distroless/static, so the chart runs either image unchanged.
const (
	// GatewayBinary is the gateway's path and the image's entrypoint.
	GatewayBinary = "/gateway"
	// GatewayUser is distroless' nonroot user, the chart's runAsUser.
	GatewayUser = "65532:65532"
	// CABundle is where Go's crypto/x509 looks first on Linux.
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
	// GatewayRepository is where releases are published: the chart's
	// default image.repository, make image's default and the release
	// workflow's target.
	GatewayRepository = "ghcr.io/karmada-exec-gateway/karmada-exec-gateway"
)

// GatewayOptions says what goes into the gateway image.
type GatewayOptions struct {
	// Binary is the gateway built by BuildGatewayBinary.
	Binary string
	// CABundle is the host's CA bundle (default Debian's ca-certificates
	// file at CABundle).
	CABundle string
	// Arch is the binary's GOARCH (default amd64).
	Arch string
	// Source, Revision, Version and Licenses become the OCI labels of the
	// same names.
	Source, Revision, Version, Licenses string
	// Created is the commit time: the image's creation time and the
	// labels', so one commit always gives one digest.
	Created time.Time
}

// BuildGatewayBinary builds the gateway of the module at repoDir into out,
// statically and without build ids or paths, so one commit gives one file.
func BuildGatewayBinary(ctx context.Context, repoDir, goarch, out string) error {
	if goarch == "" {
		goarch = "amd64"
	}
	env := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + goarch, "GOFLAGS="}
	return run(ctx, repoDir, env, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", out, "./cmd/gateway")
}

// Commit returns the revision and commit time of HEAD in repoDir.
func Commit(ctx context.Context, repoDir string) (string, time.Time, error) {
	cmd := exec.CommandContext(ctx, "git", "log", "-1", "--format=%H %ct")
	cmd.Dir = repoDir
	out, err := cmd.Output()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("git log in %s: %w", repoDir, err)
	}
	rev, ct, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	sec, err := strconv.ParseInt(ct, 10, 64)
	if !ok || err != nil {
		return "", time.Time{}, fmt.Errorf("git log in %s: unexpected %q", repoDir, out)
	}
	return rev, time.Unix(sec, 0).UTC(), nil
}

// Gateway is the gateway image: the binary, the CA bundle and distroless'
// passwd entries for nonroot, in one layer; no base image is pulled.
func Gateway(opts GatewayOptions) (v1.Image, error) {
	if opts.CABundle == "" {
		opts.CABundle = CABundle
	}
	if opts.Arch == "" {
		opts.Arch = "amd64"
	}
	if err := static(opts.Binary); err != nil {
		return nil, err
	}
	l, err := layer([]entry{
		{path: strings.TrimPrefix(GatewayBinary, "/"), mode: 0o755, file: opts.Binary},
		{path: "etc", mode: fs.ModeDir | 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{path: "etc/ssl", mode: fs.ModeDir | 0o755},
		{path: "etc/ssl/certs", mode: fs.ModeDir | 0o755},
		{path: strings.TrimPrefix(CABundle, "/"), mode: 0o644, file: opts.CABundle},
		{path: "home", mode: fs.ModeDir | 0o755},
		{path: "home/nonroot", mode: fs.ModeDir | 0o700, uid: 65532},
		{path: "tmp", mode: fs.ModeDir | fs.ModeSticky | 0o777},
	})
	if err != nil {
		return nil, err
	}
	created := opts.Created.UTC().Format(time.RFC3339)
	labels := map[string]string{
		"org.opencontainers.image.title":    "karmada-exec-gateway",
		"org.opencontainers.image.source":   opts.Source,
		"org.opencontainers.image.revision": opts.Revision,
		"org.opencontainers.image.version":  opts.Version,
		"org.opencontainers.image.created":  created,
		"org.opencontainers.image.licenses": opts.Licenses,
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", opts.Arch
	cf.Created = v1.Time{Time: opts.Created.UTC()}
	cf.History = nil
	cf.Config = v1.Config{
		Entrypoint:   []string{GatewayBinary},
		User:         GatewayUser,
		WorkingDir:   "/",
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CABundle},
		Labels:       labels,
		ExposedPorts: map[string]struct{}{"8443/tcp": {}, "8080/tcp": {}},
	}
	return mutate.ConfigFile(img, cf)
}

// static refuses a binary that needs a dynamic loader: the image has none.
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("gateway binary: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("gateway binary %s is dynamically linked (build it with CGO_ENABLED=0)", path)
		}
	}
	return nil
}

// WriteLayoutArchive writes img as a tar of an OCI image layout, tagged ref
// in its index, so `skopeo copy oci-archive:` or `docker load`-like tools
// take it. The tar is dated at the epoch like the layers.
func WriteLayoutArchive(img v1.Image, ref, out string) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	var entries []entry
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			entries = append(entries, entry{path: filepath.ToSlash(rel), mode: fs.ModeDir | 0o755})
		} else {
			entries = append(entries, entry{path: filepath.ToSlash(rel), mode: 0o644, file: path})
		}
		return nil
	})
	if err != nil {
		return err
	}
	tmp := out + ".partial"
	if err := writeTar(tmp, entries); err != nil {
		return errors.Join(fmt.Errorf("write %s", out), err)
	}
	return os.Rename(tmp, out)
}

// Push writes img to ref with the credentials of the default keychain
// (docker login's config, or the registry's own helpers).
func Push(ctx context.Context, img v1.Image, ref string, opts ...name.Option) error {
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.Write(r, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", r, err)
	}
	return nil
}
