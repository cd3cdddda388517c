// Package images builds container images from what is on this machine,
// without a Docker daemon and without pulling anything: the gateway's
// release image (gateway.go), and the images the e2e environment's pods
// run: Kubernetes' own pause.c compiled with
// gcc -static, Debian's busybox-static with its applets linked, and the e2e
// module's test servers built with CGO_ENABLED=0. go-containerregistry packs
// them into one docker-save tarball that `ctr images import` loads into a
// containerd; nothing is ever pulled from a registry.
//
// The tarball is a cache keyed by the digest of every input, so an
// environment builds it once per change and starts without compiling.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images, by the names pods use. The .invalid domain (RFC 2606) can
// never resolve, so a pull of one fails at once instead of leaving the
// machine; pods use imagePullPolicy Never anyway.
const (
	// Pause is the pod sandbox image, containerd's sandbox_image.
	Pause = "e2e.invalid/pause:3.10"
	// Busybox has busybox-static as /bin/busybox with every applet linked
	// in /bin, a /tmp and an /etc/passwd: a shell and the usual tools.
	Busybox = "e2e.invalid/busybox:e2e"
	// Echo is Busybox plus the e2e test servers httpecho and tcpecho in
	// /usr/local/bin.
	Echo = "e2e.invalid/echo:e2e"
	// GitLabHelper is Busybox plus /usr/local/bin/gitlab-runner-helper, our
	// stand-in for GitLab's helper binary (not available here; it stands in
	// for no Kubernetes component): the read-logs command the kubernetes
	// executor execs in the helper container.
	GitLabHelper = "e2e.invalid/gitlab-runner-helper:e2e"
)

// gitlabRunnerHelper implements `gitlab-runner-helper read-logs --path P
// --offset N --wait-file-timeout D` as the kubernetes executor calls it:
// wait for the job log, then follow it from byte offset N.
const gitlabRunnerHelper = `#!/bin/sh
# Stand-in for GitLab Runner's gitlab-runner-helper binary: read-logs only.
set -eu
[ "${1:-}" = read-logs ] || { echo "gitlab-runner-helper stand-in: only read-logs is implemented" >&2; exit 2; }
shift
path= offset=0 wait=60
while [ $# -gt 0 ]; do
  case "$1" in
    --path) path=$2; shift 2;;
    --offset) offset=$2; shift 2;;
    --wait-file-timeout) wait=${2%%[!0-9]*}; shift 2;; # its leading number, as seconds
    *) echo "gitlab-runner-helper stand-in: unknown flag $1" >&2; exit 2;;
  esac
done
i=0
while [ ! -e "$path" ]; do
  [ $i -lt $((wait * 20)) ] || { echo "timed out waiting for $path" >&2; exit 1; }
  i=$((i + 1)); sleep 0.05
done
exec tail -f -c +$((offset + 1)) "$path"
`

// EchoBinDir is where the Echo image has the test servers.
const EchoBinDir = "/usr/local/bin"

// version changes when the layout of the images changes, so an old cache
// is not taken for a new one.
const version = "2"

// Options says where the inputs are.
type Options struct {
	// CacheDir receives images-<digest>.tar.
	CacheDir string
	// PauseSource is Kubernetes' build/pause/linux/pause.c.
	PauseSource string
	// Busybox is a statically linked busybox (default /bin/busybox, from
	// Debian's busybox-static).
	Busybox string
	// E2EModuleDir is the e2e module, whose cmd/httpecho and cmd/tcpecho
	// go into the Echo image.
	E2EModuleDir string
	// CC compiles pause.c (default gcc).
	CC string
	// Go builds the test servers (default go).
	Go string
}

// echoCommands are the e2e module's commands in the Echo image.
var echoCommands = []string{"httpecho", "tcpecho"}

// Ensure returns the path of a tarball holding every image, building it
// first unless the cache already has one for the same inputs. Concurrent
// callers may both build; the rename makes either result the cache.
func Ensure(ctx context.Context, opts Options) (string, error) {
	if opts.Busybox == "" {
		opts.Busybox = "/bin/busybox"
	}
	if opts.CC == "" {
		opts.CC = "gcc"
	}
	if opts.Go == "" {
		opts.Go = "go"
	}
	key, err := inputDigest(opts)
	if err != nil {
		return "", err
	}
	out := filepath.Join(opts.CacheDir, "images-"+key[:16]+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(opts.CacheDir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(opts.CacheDir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	imgs, err := build(ctx, opts, tmp)
	if err != nil {
		return "", err
	}
	partial := filepath.Join(tmp, "images.tar")
	if err := tarball.MultiRefWriteToFile(partial, imgs); err != nil {
		return "", fmt.Errorf("write image tarball: %w", err)
	}
	if err := os.Rename(partial, out); err != nil {
		return "", err
	}
	return out, nil
}

// inputDigest hashes everything the images are made of.
func inputDigest(opts Options) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "version %s %s/%s\n", version, runtime.GOOS, runtime.GOARCH)
	files := []string{opts.PauseSource, opts.Busybox}
	for _, c := range echoCommands {
		dir := filepath.Join(opts.E2EModuleDir, "cmd", c)
		entries, err := os.ReadDir(dir)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", dir, err)
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".go") {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	files = append(files, filepath.Join(opts.E2EModuleDir, "go.sum"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("image input: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func build(ctx context.Context, opts Options, tmp string) (map[name.Reference]v1.Image, error) {
	pauseBin := filepath.Join(tmp, "pause")
	if err := run(ctx, "", nil, opts.CC, "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10-e2e", "-o", pauseBin, opts.PauseSource); err != nil {
		return nil, fmt.Errorf("compile pause.c: %w", err)
	}
	goEnv := []string{"CGO_ENABLED=0", "GOFLAGS=-trimpath -buildvcs=false"}
	for _, c := range echoCommands {
		if err := run(ctx, opts.E2EModuleDir, goEnv, opts.Go, "build", "-ldflags=-s -w", "-o", filepath.Join(tmp, c), "./cmd/"+c); err != nil {
			return nil, fmt.Errorf("build %s: %w", c, err)
		}
	}

	pauseLayer, err := layer([]entry{{path: "pause", mode: 0o755, file: pauseBin}})
	if err != nil {
		return nil, err
	}
	pause, err := image([]v1.Layer{pauseLayer}, v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"})
	if err != nil {
		return nil, err
	}
	busyboxLayer, err := busyboxLayer(ctx, opts.Busybox)
	if err != nil {
		return nil, err
	}
	shell := v1.Config{Cmd: []string{"sh"}, Env: []string{"PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	busybox, err := image([]v1.Layer{busyboxLayer}, shell)
	if err != nil {
		return nil, err
	}
	var echoEntries []entry
	for _, c := range echoCommands {
		echoEntries = append(echoEntries, entry{path: strings.TrimPrefix(EchoBinDir, "/") + "/" + c, mode: 0o755, file: filepath.Join(tmp, c)})
	}
	echoLayer, err := layer(echoEntries)
	if err != nil {
		return nil, err
	}
	echo, err := image([]v1.Layer{busyboxLayer, echoLayer}, shell)
	if err != nil {
		return nil, err
	}

	helperLayer, err := layer([]entry{{path: "usr/local/bin/gitlab-runner-helper", mode: 0o755, data: []byte(gitlabRunnerHelper)}})
	if err != nil {
		return nil, err
	}
	helper, err := image([]v1.Layer{busyboxLayer, helperLayer}, shell)
	if err != nil {
		return nil, err
	}

	out := map[name.Reference]v1.Image{}
	for ref, img := range map[string]v1.Image{Pause: pause, Busybox: busybox, Echo: echo, GitLabHelper: helper} {
		tag, err := name.NewTag(ref)
		if err != nil {
			return nil, err
		}
		out[tag] = img
	}
	return out, nil
}

// busyboxLayer is busybox-static with a /bin symlink per applet it lists.
func busyboxLayer(ctx context.Context, busybox string) (v1.Layer, error) {
	var list bytes.Buffer
	cmd := exec.CommandContext(ctx, busybox, "--list")
	cmd.Stdout = &list
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s --list (apt-get install busybox-static): %w", busybox, err)
	}
	entries := []entry{
		{path: "bin", mode: fs.ModeDir | 0o755},
		{path: "bin/busybox", mode: 0o755, file: busybox},
		{path: "etc", mode: fs.ModeDir | 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{path: "root", mode: fs.ModeDir | 0o700},
		{path: "tmp", mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{path: "usr", mode: fs.ModeDir | 0o755},
		{path: "usr/local", mode: fs.ModeDir | 0o755},
		{path: "usr/local/bin", mode: fs.ModeDir | 0o755},
	}
	for _, applet := range strings.Fields(list.String()) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		entries = append(entries, entry{path: "bin/" + applet, mode: fs.ModeSymlink | 0o777, link: "busybox"})
	}
	return layer(entries)
}

// entry is one file of a layer: a directory, a symlink to link, or a regular
// file with data or the content of file.
type entry struct {
	path string
	mode fs.FileMode
	file string
	data []byte
	link string
	// uid owns the entry (and gid the same); root when zero.
	uid int
}

// layer writes entries, sorted, owned by root and dated at the epoch, so the
// same inputs always give the same digest.
func layer(entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := tarEntries(&buf, entries); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// writeTar writes entries as the tar file out, like a layer.
func writeTar(out string, entries []entry) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := tarEntries(f, entries); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tarEntries writes entries sorted by path, dated at the epoch and without
// user names, so the bytes depend on the entries alone.
func tarEntries(w io.Writer, entries []entry) error {
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.path, Mode: int64(e.mode.Perm()), Uid: e.uid, Gid: e.uid, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if e.mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		data := e.data
		switch {
		case e.mode.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.path+"/"
		case e.mode&fs.ModeSymlink != 0:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.link
		default:
			if e.file != "" {
				var err error
				if data, err = os.ReadFile(e.file); err != nil {
					return err
				}
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// image is layers with cfg, for this machine's platform.
func image(layers []v1.Layer, cfg v1.Config) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = runtime.GOOS, runtime.GOARCH
	cf.Config = cfg
	cf.History = nil
	return mutate.ConfigFile(img, cf)
}

func run(ctx context.Context, dir string, env []string, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", path, strings.Join(args, " "), err, out)
	}
	return nil
}

// Import loads the tarball into the k8s.io namespace of the containerd at
// address with ctr, the client Debian's containerd package ships.
func Import(ctx context.Context, ctr, address, tarballPath string) error {
	if ctr == "" {
		ctr = "ctr"
	}
	err := run(ctx, "", nil, ctr, "--address", address, "--namespace", "k8s.io", "images", "import", tarballPath)
	if err != nil {
		return errors.Join(errors.New("import images into containerd"), err)
	}
	return nil
}
