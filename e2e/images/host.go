package images

import (
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// KubectlBinary is where the kubectl image has kubectl, as
// registry.k8s.io/kubectl has it: the chart's hook Job runs /bin/kubectl.
const KubectlBinary = "/bin/kubectl"

// Kubectl is an image of a static kubectl at KubectlBinary, its entrypoint,
// with a /tmp for $HOME and distroless' nonroot user: what the chart's hook
// Job needs of registry.k8s.io/kubectl, and nothing else (the Job runs no
// shell).
func Kubectl(binary string) (v1.Image, error) {
	if err := static(binary); err != nil {
		return nil, err
	}
	l, err := layer([]entry{
		{path: "bin", mode: fs.ModeDir | 0o755},
		{path: strings.TrimPrefix(KubectlBinary, "/"), mode: 0o755, file: binary},
		{path: "etc", mode: fs.ModeDir | 0o755},
		{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{path: "tmp", mode: fs.ModeDir | fs.ModeSticky | 0o777},
	})
	if err != nil {
		return nil, err
	}
	return image([]v1.Layer{l}, v1.Config{Entrypoint: []string{KubectlBinary}, User: GatewayUser})
}

// WriteTarball writes imgs, each under its reference, as one docker-save
// tarball for Import.
func WriteTarball(out string, imgs map[string]v1.Image) error {
	refs := map[name.Reference]v1.Image{}
	for ref, img := range imgs {
		tag, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("image reference %q: %w", ref, err)
		}
		refs[tag] = img
	}
	tmp := out + ".partial"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		return fmt.Errorf("write image tarball: %w", err)
	}
	return os.Rename(tmp, out)
}
