// Package helmtest runs the helm binary the tools build into bin/ for the e2e
// module's chart tests, away from the user's helm config, cache,
// repositories and clusters.
package helmtest

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// KubeVersion pins the capabilities helm renders against to the release the
// project uses, whatever client-go the helm tool module was built with.
const KubeVersion = "1.37.2"

// Bin is $HELM or <repo>/bin/helm. A missing helm fails the test: a chart
// test that skips would count as passing without rendering anything.
func Bin(t testing.TB) string {
	t.Helper()
	p := os.Getenv("HELM")
	if p == "" {
		root, err := env.FindRepoRoot()
		if err != nil {
			t.Fatalf("find bin/helm: %v", err)
		}
		p = filepath.Join(root, "bin", "helm")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatalf("helm path %q: %v", p, err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("helm not found at %s (build it with `make tools`, or set HELM): %v", abs, err)
	}
	return abs
}

// Run runs helm with args and returns stdout, stderr and the error.
func Run(t testing.TB, args ...string) (string, string, error) {
	t.Helper()
	cmd := env.HelmCommand(t.Context(), Bin(t), t.TempDir(), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// Readme is the repository's README.md, whose commands tests run as written.
func Readme(t testing.TB) string {
	t.Helper()
	root, err := env.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// ReadmeShBlocks returns the sh blocks of the root README's section titled
// title ("## <title>"), each as its non-empty lines as written (comments
// included): the commands a user copies.
func ReadmeShBlocks(t testing.TB, title string) [][]string {
	t.Helper()
	_, section, ok := strings.Cut(Readme(t), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", "## "+title)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks [][]string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		var lines []string
		for line := range strings.SplitSeq(m[1], "\n") {
			if line = strings.TrimSpace(line); line != "" {
				lines = append(lines, line)
			}
		}
		blocks = append(blocks, lines)
	}
	return blocks
}

// ReadmeHelmSection returns the lines of every sh block of the README's
// "Install with Helm" section.
func ReadmeHelmSection(t testing.TB) []string {
	t.Helper()
	var lines []string
	for _, b := range ReadmeShBlocks(t, "Install with Helm") {
		lines = append(lines, b...)
	}
	return lines
}

// ReadmeHelmCommands is ReadmeHelmSection without its comment lines.
func ReadmeHelmCommands(t testing.TB) []string {
	t.Helper()
	var cmds []string
	for _, line := range ReadmeHelmSection(t) {
		if !strings.HasPrefix(line, "#") {
			cmds = append(cmds, line)
		}
	}
	return cmds
}
