// Package compat reads `go test -json` runs of the e2e compatibility subset,
// one run per Karmada version (hack/compat.sh, `make compat`), and renders
// them as a Markdown table of test by version with a verdict per version.
//
// Only a pass is a pass: a skipped test, a test one version ran and another
// did not, a test that never finished (a timeout kills the binary) and a
// run that produced no output at all (Karmada did not build, the
// environment did not start) all fail the version, so the table cannot
// call a version supported on less than the whole subset.
package compat

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Result of one top-level test in one run.
type Result string

// Results as the table prints them.
const (
	Pass       Result = "pass"
	Fail       Result = "FAIL"
	Skip       Result = "skip"
	Unfinished Result = "FAIL (unfinished)"
	NotRun     Result = "not run"
)

// Run is one version's run of the subset.
type Run struct {
	// Version labels the column, e.g. "v1.18.2".
	Version string
	// Tests holds each top-level test's result.
	Tests map[string]Result
	// PackageFailed is go test's verdict on the package (a TestMain that
	// could not start the environment fails it with no test results).
	PackageFailed bool
	// Elapsed is the package's time, as go test reports it.
	Elapsed time.Duration
	// Err says why there is no usable output (nothing was run).
	Err string
	// StartErr is TestMain's "FAIL: ..." line when the environment did
	// not start, so the table says why without opening the log.
	StartErr string
}

// event is the part of test2json's record this package reads.
type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

// maxStartErr bounds the start error quoted in a table cell.
const maxStartErr = 200

// Parse reads one run's `go test -json` output. Lines that are not test2json
// records (build errors, a make's chatter) are ignored; subtests are folded
// into their top-level test, whose own result go test reports.
func Parse(version string, r io.Reader) (Run, error) {
	run := Run{Version: version, Tests: map[string]Result{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	sawPackage := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			continue
		}
		if ev.Test == "" {
			if ev.Action == "output" && run.StartErr == "" && strings.HasPrefix(ev.Output, "FAIL: ") {
				run.StartErr = strings.TrimSpace(ev.Output)
				if len(run.StartErr) > maxStartErr {
					run.StartErr = run.StartErr[:maxStartErr] + "..."
				}
			}
			switch ev.Action {
			case "pass", "fail", "skip":
				sawPackage = true
				run.PackageFailed = ev.Action == "fail"
				run.Elapsed = time.Duration(ev.Elapsed * float64(time.Second))
			}
			continue
		}
		if strings.Contains(ev.Test, "/") {
			continue
		}
		switch ev.Action {
		case "run":
			if _, ok := run.Tests[ev.Test]; !ok {
				run.Tests[ev.Test] = Unfinished
			}
		case "pass":
			run.Tests[ev.Test] = Pass
		case "fail":
			run.Tests[ev.Test] = Fail
		case "skip":
			run.Tests[ev.Test] = Skip
		}
	}
	if err := sc.Err(); err != nil {
		return run, fmt.Errorf("read the test output of %s: %w", version, err)
	}
	if !sawPackage && len(run.Tests) == 0 {
		run.Err = "no test output (Karmada did not build or go test did not run; see its log)"
	} else if !sawPackage {
		// The binary died before go test could report the package.
		run.PackageFailed = true
	}
	return run, nil
}

// Verdict is "pass" when the run finished, its package passed and every test
// of want passed; else why not.
func (r Run) Verdict(want []string) string {
	if r.Err != "" {
		return "FAIL: " + r.Err
	}
	if r.PackageFailed && len(r.Tests) == 0 {
		if r.StartErr != "" {
			return "FAIL: the environment did not start, no test ran (" + strings.ReplaceAll(r.StartErr, "|", "/") + ")"
		}
		return "FAIL: the environment did not start, no test ran (see its log)"
	}
	var bad []string
	for _, t := range want {
		if res := r.result(t); res != Pass {
			bad = append(bad, t+" "+string(res))
		}
	}
	switch {
	case len(bad) > 0:
		return "FAIL: " + strings.Join(bad, ", ")
	case len(want) == 0:
		return "FAIL: no test ran"
	case r.PackageFailed:
		return "FAIL: the package failed outside the tests (TestMain, teardown)"
	}
	return string(Pass)
}

func (r Run) result(test string) Result {
	if res, ok := r.Tests[test]; ok {
		return res
	}
	return NotRun
}

// TestNames is every top-level test any run reported, sorted: the rows,
// and what each version must pass.
func TestNames(runs []Run) []string {
	var names []string
	for _, r := range runs {
		for t := range r.Tests {
			if !slices.Contains(names, t) {
				names = append(names, t)
			}
		}
	}
	slices.Sort(names)
	return names
}

// Table renders runs as Markdown: a row per test with a column per version,
// then each version's verdict and time. A version is supported when its
// verdict is pass.
func Table(runs []Run) string {
	tests := TestNames(runs)
	var b strings.Builder
	b.WriteString("| test |")
	for _, r := range runs {
		fmt.Fprintf(&b, " %s |", r.Version)
	}
	b.WriteString("\n|---|")
	for range runs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, t := range tests {
		fmt.Fprintf(&b, "| %s |", t)
		for _, r := range runs {
			fmt.Fprintf(&b, " %s |", r.result(t))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| Karmada | time | result |\n|---|---|---|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Version, r.Elapsed.Round(time.Second), r.Verdict(tests))
	}
	return b.String()
}

// Supported reports whether every run passed the whole subset.
func Supported(runs []Run) bool {
	tests := TestNames(runs)
	for _, r := range runs {
		if r.Verdict(tests) != string(Pass) {
			return false
		}
	}
	return len(runs) > 0
}
