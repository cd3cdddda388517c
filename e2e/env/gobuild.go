package env

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
)

// GoBuild runs `go build args... -o out pkg` in dir. With LINK_CACHE set
// (make exports it: hack/link-cache-dir.sh), it links into
// LINK_CACHE/env/<cacheName> instead, where go build relinks only what
// changed, and copies that to out: the copy is what runs, so a later build
// never replaces a running file. cacheName must name one configuration
// (flags) of pkg.
func GoBuild(ctx context.Context, dir, pkg, out, cacheName string, args ...string) error {
	target := out
	if cache := os.Getenv("LINK_CACHE"); cache != "" {
		target = filepath.Join(cache, "env", cacheName)
	}
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, args...), "-o", target, pkg)...)
	cmd.Dir = dir
	if slices.Contains(args, "-race") {
		// The race detector needs cgo, which make turns off for every other
		// build (the Makefile says why).
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, output.String())
	}
	if target == out {
		return nil
	}
	return copyExecutable(target, out)
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, in); err != nil {
		f.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return f.Close()
}
