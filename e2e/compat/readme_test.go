package compat

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// TestReadmeNamesTheMatrix keeps the README's "Supported Karmada" section
// and hack/compat.sh (what `make compat` runs) telling the same story: a
// table row for every version the matrix runs (the pinned one by the
// Makefile's KARMADA_COMMIT) and every test of the subset named. Adding a
// version or a test to the script without the README fails here.
func TestReadmeNamesTheMatrix(t *testing.T) {
	root, err := env.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	script, makefile, readme := read("hack/compat.sh"), read("Makefile"), read("README.md")
	versions := scriptDefault(t, script, "COMPAT_VERSIONS")
	tests := scriptDefault(t, script, "COMPAT_TESTS")
	m := regexp.MustCompile(`(?m)^KARMADA_COMMIT := (\S+)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatal("Makefile has no KARMADA_COMMIT := line")
	}
	pinned := m[1]

	_, section, ok := strings.Cut(readme, "\n## Supported Karmada\n")
	if !ok {
		t.Fatal(`README.md has no "## Supported Karmada" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []string
	for line := range strings.SplitSeq(section, "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| Karmada ") {
			rows = append(rows, line)
		}
	}
	if len(rows) != len(versions) {
		t.Errorf("the README table has %d rows, the matrix runs %d versions (%v):\n%s", len(rows), len(versions), versions, strings.Join(rows, "\n"))
	}
	for _, v := range versions {
		want := v
		if v == "pinned" {
			want = pinned
		}
		found := false
		for _, row := range rows {
			first, _, _ := strings.Cut(strings.TrimPrefix(row, "| "), " |")
			if strings.Contains(first, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("no README table row names %s (version %q of hack/compat.sh)", want, v)
		}
	}
	for _, test := range tests {
		name := "`" + strings.ReplaceAll(test, ".*", "*") + "`"
		if !strings.Contains(section, name) {
			t.Errorf("the README's Supported Karmada section does not name %s, which make compat runs", name)
		}
	}
}

// scriptDefault is the default word list of VAR=${VAR:-...} in script.
func scriptDefault(t *testing.T, script, name string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `=\$\{` + name + `:-([^}]*)\}$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("hack/compat.sh has no %s=${%s:-...} line", name, name)
	}
	return strings.Fields(m[1])
}
