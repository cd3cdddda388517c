// Command gateway-image builds the gateway's container image without a
// Docker daemon and without pulling a base image, writes it as an OCI
// layout archive and prints its digest; with -push it also writes it to a
// registry. `make image` runs it; see package images for the layout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

func main() {
	var (
		repo     = flag.String("repo", "..", "the gateway module's directory (a git checkout)")
		image    = flag.String("image", images.GatewayRepository+":dev", "the image reference: the archive's tag and the push target")
		out      = flag.String("out", "_output/image/karmada-exec-gateway.tar", "the OCI layout archive to write")
		arch     = flag.String("arch", "amd64", "the GOARCH to build for")
		version  = flag.String("version", "dev", "the org.opencontainers.image.version label")
		source   = flag.String("source", "https://github.com/karmada-exec-gateway/karmada-exec-gateway", "the org.opencontainers.image.source label")
		licenses = flag.String("licenses", "NOASSERTION", "the org.opencontainers.image.licenses label (an SPDX expression)")
		push     = flag.Bool("push", false, "also push the image to -image with the default keychain")
		binary   = flag.String("binary-only", "", "only build the image's static gateway binary into this path (hack/e2e.sh hands it to the Helm test's host cluster)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *binary != "" {
		if err := images.BuildGatewayBinary(ctx, *repo, *arch, *binary); err != nil {
			fmt.Fprintln(os.Stderr, "gateway-image:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, *repo, *image, *out, *push, images.GatewayOptions{
		Arch: *arch, Version: *version, Source: *source, Licenses: *licenses,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "gateway-image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, repo, ref, out string, push bool, opts images.GatewayOptions) error {
	rev, created, err := images.Commit(ctx, repo)
	if err != nil {
		return err
	}
	opts.Revision, opts.Created = rev, created
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	opts.Binary = filepath.Join(tmp, "gateway")
	if err := images.BuildGatewayBinary(ctx, repo, opts.Arch, opts.Binary); err != nil {
		return err
	}
	img, err := images.Gateway(opts)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if err := images.WriteLayoutArchive(img, ref, out); err != nil {
		return err
	}
	fmt.Printf("%s %s@%s\n", out, ref, digest)
	if push {
		if err := images.Push(ctx, img, ref); err != nil {
			return err
		}
		fmt.Printf("pushed %s@%s\n", ref, digest)
	}
	return nil
}
