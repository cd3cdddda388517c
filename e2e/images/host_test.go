package images

import (
	"bytes"
	"os"
	"slices"
	"testing"
)

// TestKubectl: the hook Job's image runs kubectl at /bin/kubectl as the
// chart's non-root user, with a writable /tmp for $HOME; a dynamically
// linked binary is refused (the image has no loader).
func TestKubectl(t *testing.T) {
	static, dynamic := "/bin/busybox", "/bin/ls" // Debian's busybox-static, coreutils
	for _, tc := range []struct {
		name, binary string
		wantErr      bool
	}{
		{"static binary", static, false},
		{"dynamic binary", dynamic, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := Kubectl(tc.binary)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Kubectl(%s) built an image of a dynamically linked binary", tc.binary)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cf.Config.Entrypoint, []string{KubectlBinary}) || cf.Config.User != GatewayUser {
				t.Errorf("entrypoint %q user %q, want [%s] %s", cf.Config.Entrypoint, cf.Config.User, KubectlBinary, GatewayUser)
			}
			want, err := os.ReadFile(tc.binary)
			if err != nil {
				t.Fatal(err)
			}
			if got := imageFiles(t, img)["bin/kubectl"]; !bytes.Equal(got, want) {
				t.Errorf("/bin/kubectl in the image is not %s (%d bytes)", tc.binary, len(got))
			}
		})
	}
}
