package env

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultOptionsKarmadaVersion: E2E_KARMADA_VERSION moves both the
// binaries and the source tree to the release's directories that `make
// karmada KARMADA_VERSION=...` writes, so one variable switches the whole
// Karmada of a run (make compat relies on it); explicit directories win.
func TestDefaultOptionsKarmadaVersion(t *testing.T) {
	root, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name             string
		env              map[string]string
		opts             Options
		wantBin, wantSrc string
	}{
		{
			name:    "pinned commit by default",
			wantBin: filepath.Join(root, "bin", "karmada"),
			wantSrc: filepath.Join(root, "_output", "karmada-src"),
		},
		{
			name:    "a release",
			env:     map[string]string{"E2E_KARMADA_VERSION": "v1.18.2"},
			wantBin: filepath.Join(root, "bin", "karmada-v1.18.2"),
			wantSrc: filepath.Join(root, "_output", "karmada-src-v1.18.2"),
		},
		{
			name:    "a release under another E2E_BIN_DIR",
			env:     map[string]string{"E2E_KARMADA_VERSION": "v1.16.8", "E2E_BIN_DIR": "/opt/bin"},
			wantBin: "/opt/bin/karmada-v1.16.8",
			wantSrc: filepath.Join(root, "_output", "karmada-src-v1.16.8"),
		},
		{
			name:    "explicit directories win over the version",
			env:     map[string]string{"E2E_KARMADA_VERSION": "v1.16.8", "E2E_KARMADA_BIN_DIR": "/k/bin", "E2E_KARMADA_SRC": "/k/src"},
			wantBin: "/k/bin",
			wantSrc: "/k/src",
		},
		{
			name:    "options win over the environment",
			env:     map[string]string{"E2E_KARMADA_VERSION": "v1.16.8"},
			opts:    Options{KarmadaBinDir: "/o/bin", KarmadaSrcDir: "/o/src"},
			wantBin: "/o/bin",
			wantSrc: "/o/src",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"E2E_KARMADA_VERSION", "E2E_BIN_DIR", "E2E_KARMADA_BIN_DIR", "E2E_KARMADA_SRC", "E2E_CRD_DIR"} {
				t.Setenv(k, tc.env[k])
			}
			got := DefaultOptions(tc.opts)
			if got.KarmadaBinDir != tc.wantBin || got.KarmadaSrcDir != tc.wantSrc {
				t.Errorf("KarmadaBinDir, KarmadaSrcDir = %s, %s; want %s, %s", got.KarmadaBinDir, got.KarmadaSrcDir, tc.wantBin, tc.wantSrc)
			}
			if want := filepath.Join(tc.wantSrc, "charts", "karmada", "_crds", "bases"); got.CRDDir != want {
				t.Errorf("CRDDir = %s, want %s (the CRDs of the same Karmada)", got.CRDDir, want)
			}
		})
	}
}

// TestCheckKarmadaStamps: binaries of one Karmada with the source (CRDs,
// manifests) of another are refused before anything starts.
func TestCheckKarmadaStamps(t *testing.T) {
	for _, tc := range []struct {
		name, bin, src string // "" = no stamp
		wantErr        bool
	}{
		{name: "same commit", bin: "f8fdd02df", src: "f8fdd02df"},
		{name: "same release", bin: "v1.18.2\n", src: "v1.18.2\n"},
		{name: "release binaries, pinned source", bin: "v1.18.2", src: "f8fdd02df", wantErr: true},
		{name: "two releases", bin: "v1.16.8", src: "v1.18.2", wantErr: true},
		{name: "source without a stamp", bin: "v1.16.8"},
		{name: "binaries without a stamp", src: "v1.16.8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			binDir, srcDir := t.TempDir(), t.TempDir()
			for dir, stamp := range map[string]string{binDir: tc.bin, srcDir: tc.src} {
				if stamp != "" {
					if err := os.WriteFile(filepath.Join(dir, "COMMIT"), []byte(stamp), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			err := checkKarmadaStamps(binDir, srcDir)
			if (err != nil) != tc.wantErr {
				t.Fatalf("checkKarmadaStamps = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "E2E_KARMADA_VERSION") {
				t.Errorf("error %q does not say how to pick one Karmada", err)
			}
		})
	}
}
