package compat

import (
	"strings"
	"testing"
)

// jsonRun is go test -json output as test2json writes it (abridged).
const jsonRun = `{"Action":"start","Package":"e2e"}
{"Action":"run","Package":"e2e","Test":"TestSmoke"}
{"Action":"output","Package":"e2e","Test":"TestSmoke","Output":"=== RUN   TestSmoke\n"}
{"Action":"pass","Package":"e2e","Test":"TestSmoke","Elapsed":1.2}
{"Action":"run","Package":"e2e","Test":"TestStreams"}
{"Action":"run","Package":"e2e","Test":"TestStreams/exec"}
{"Action":"fail","Package":"e2e","Test":"TestStreams/exec","Elapsed":3}
{"Action":"fail","Package":"e2e","Test":"TestStreams","Elapsed":3}
{"Action":"run","Package":"e2e","Test":"TestLogs"}
{"Action":"skip","Package":"e2e","Test":"TestLogs","Elapsed":0}
{"Action":"run","Package":"e2e","Test":"TestAttach"}
{"Action":"run","Package":"e2e","Test":"TestAttach/tty"}
{"Action":"pass","Package":"e2e","Test":"TestAttach/tty","Elapsed":1}
{"Action":"pass","Package":"e2e","Test":"TestAttach","Elapsed":1}
{"Action":"output","Package":"e2e","Output":"FAIL\n"}
{"Action":"fail","Package":"e2e","Elapsed":95.4}
`

func TestParse(t *testing.T) {
	run, err := Parse("v1.18.2", strings.NewReader("make: entering\n"+jsonRun+"not json {\n{broken\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Result{"TestSmoke": Pass, "TestStreams": Fail, "TestLogs": Skip, "TestAttach": Pass}
	if len(run.Tests) != len(want) {
		t.Errorf("tests %v, want the top-level ones %v", run.Tests, want)
	}
	for name, res := range want {
		if run.Tests[name] != res {
			t.Errorf("%s = %q, want %q", name, run.Tests[name], res)
		}
	}
	if !run.PackageFailed || run.Elapsed.Seconds() != 95.4 || run.Err != "" {
		t.Errorf("package failed %v elapsed %v err %q; want true, 95.4s, none", run.PackageFailed, run.Elapsed, run.Err)
	}
}

func TestVerdict(t *testing.T) {
	all := []string{"TestA", "TestB"}
	for _, tc := range []struct {
		name string
		out  string
		want string // prefix
	}{
		{
			name: "every test passed",
			out: `{"Action":"run","Test":"TestA"}
{"Action":"pass","Test":"TestA"}
{"Action":"run","Test":"TestB"}
{"Action":"pass","Test":"TestB"}
{"Action":"pass","Elapsed":10}`,
			want: "pass",
		},
		{
			name: "a skip is not a pass",
			out: `{"Action":"pass","Test":"TestA"}
{"Action":"skip","Test":"TestB"}
{"Action":"pass"}`,
			want: "FAIL: TestB skip",
		},
		{
			name: "a test another version ran is missing",
			out: `{"Action":"pass","Test":"TestA"}
{"Action":"pass"}`,
			want: "FAIL: TestB not run",
		},
		{
			name: "killed by the timeout mid-test",
			out: `{"Action":"pass","Test":"TestA"}
{"Action":"run","Test":"TestB"}`,
			want: "FAIL: TestB FAIL (unfinished)",
		},
		{
			name: "tests passed, package failed after them",
			out: `{"Action":"pass","Test":"TestA"}
{"Action":"pass","Test":"TestB"}
{"Action":"fail"}`,
			want: "FAIL: the package failed outside the tests",
		},
		{
			name: "environment did not start",
			out: `{"Action":"output","Output":"FAIL: start e2e environment: ...\n"}
{"Action":"fail","Elapsed":60}`,
			want: "FAIL: the environment did not start, no test ran (FAIL: start e2e environment: ...)",
		},
		{
			name: "no output at all",
			out:  "karmada: build failed\n",
			want: "FAIL: no test output",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, err := Parse("v", strings.NewReader(tc.out))
			if err != nil {
				t.Fatal(err)
			}
			if got := run.Verdict(all); !strings.HasPrefix(got, tc.want) {
				t.Errorf("Verdict = %q, want %q...", got, tc.want)
			}
		})
	}
}

// TestTable: one row per test any version ran, a column per version, and a
// version that did not run a test another ran is not supported.
func TestTable(t *testing.T) {
	pinned, err := Parse("f8fdd02df", strings.NewReader(`{"Action":"pass","Test":"TestSmoke"}
{"Action":"pass","Test":"TestPull"}
{"Action":"pass","Elapsed":61}`))
	if err != nil {
		t.Fatal(err)
	}
	old, err := Parse("v1.16.8", strings.NewReader(`{"Action":"pass","Test":"TestSmoke"}
{"Action":"pass","Elapsed":58}`))
	if err != nil {
		t.Fatal(err)
	}
	got := Table([]Run{pinned, old})
	for _, want := range []string{
		"| test | f8fdd02df | v1.16.8 |\n|---|---|---|\n",
		"| TestPull | pass | not run |\n| TestSmoke | pass | pass |\n",
		"| f8fdd02df | 1m1s | pass |\n",
		"| v1.16.8 | 58s | FAIL: TestPull not run |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if Supported([]Run{pinned, old}) {
		t.Error("Supported = true with a version that did not run TestPull")
	}
	if !Supported([]Run{pinned}) {
		t.Error("Supported = false for one passing run")
	}
	if Supported(nil) {
		t.Error("Supported = true with no run at all")
	}
}
