package main

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReadmeFlagsTable: the README's Flags table names every flag the
// gateway has, with its default, and no flag it does not have: a flag
// added, renamed or re-defaulted without the table fails here.
func TestReadmeFlagsTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "### Flags")
	end := strings.Index(readme[start:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("no Flags section in the README")
	}
	table := readme[start : start+end]
	// Each row: | `--a`, `--b` | `default`, `default` | meaning |
	row := regexp.MustCompile("(?m)^\\| ((?:`-{1,2}[a-z0-9-]+`(?:, )?)+) \\|\\s*([^|]*?)\\s*\\|")
	flagName := regexp.MustCompile("`-{1,2}([a-z0-9-]+)`")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		names := flagName.FindAllStringSubmatch(m[1], -1)
		defaults := strings.Split(m[2], ", ")
		for i, n := range names {
			def := strings.TrimSpace(m[2])
			if len(defaults) == len(names) {
				def = strings.TrimSpace(defaults[i])
			}
			documented[n[1]] = strings.Trim(def, "`")
		}
	}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	bindFlags(fs)
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		def, ok := documented[f.Name]
		delete(documented, f.Name)
		switch {
		case !ok:
			missing = append(missing, f.Name)
		case !defaultMatches(f.DefValue, def):
			t.Errorf("--%s: the README says the default is %q, the flag's is %q", f.Name, def, f.DefValue)
		}
	})
	delete(documented, "v") // klog's, registered in main
	if len(missing) > 0 {
		t.Errorf("flags missing from the README's table: %v", missing)
	}
	if len(documented) > 0 {
		t.Errorf("the README's table names flags the gateway does not have: %v", slices.Sorted(func(yield func(string) bool) {
			for k := range documented {
				if !yield(k) {
					return
				}
			}
		}))
	}
}

// defaultMatches compares a flag's default as Go prints it with the
// README's: "" is shown as a blank or a word in parentheses, a duration
// in any form that parses to the same.
func defaultMatches(flagDefault, readme string) bool {
	switch {
	case flagDefault == readme:
		return true
	case flagDefault == "":
		return readme == "" || strings.HasPrefix(readme, "(")
	}
	a, errA := time.ParseDuration(flagDefault)
	b, errB := time.ParseDuration(readme)
	return errA == nil && errB == nil && a == b
}
