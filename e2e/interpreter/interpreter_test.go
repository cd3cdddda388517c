package interpreter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestExecutorsWaitForever is the symptom and the fix, end to end through
// Karmada's pipeline: member pod -> status reflection -> binding item ->
// aggregation into the template -> the executor's wait predicate.
func TestExecutorsWaitForever(t *testing.T) {
	shipped := loadShipped(t)
	cases := []struct {
		name        string
		interpreter *Interpreter
		wantReady   bool
	}{
		{name: "built-in interpreter only", interpreter: NewInterpreter(), wantReady: false},
		{name: "nil interpreter is the built-in one", interpreter: nil, wantReady: false},
		{name: "with the shipped customization", interpreter: NewInterpreter(shipped), wantReady: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			member := podTemplate(runningStatus("10.244.1.5"))
			status, ok, err := tc.interpreter.ReflectStatus(member)
			if err != nil || !ok {
				t.Fatalf("ReflectStatus ok=%v err=%v", ok, err)
			}
			items := []StatusItem{{ClusterName: "member1", Applied: true, Health: "Healthy", Status: status}}
			out, err := tc.interpreter.AggregateStatus(podTemplate(nil), items)
			if err != nil {
				t.Fatalf("AggregateStatus: %v", err)
			}
			pod := toPod(t, out)
			if pod.Status.Phase != "Running" {
				t.Fatalf("phase = %q, both interpreters agree on Running", pod.Status.Phase)
			}
			if got := gitlabBuildReady(pod); got != tc.wantReady {
				t.Errorf("GitLab Runner (container \"build\" ready) = %v, want %v", got, tc.wantReady)
			}
			if got := fabric8PodReady(pod); got != tc.wantReady {
				t.Errorf("fabric8 (Ready condition True) = %v, want %v", got, tc.wantReady)
			}
		})
	}
}

func customization(t *testing.T, name, apiVersion, kind, aggregation string) *Customization {
	t.Helper()
	doc := "apiVersion: config.karmada.io/v1alpha1\nkind: ResourceInterpreterCustomization\nmetadata:\n  name: " + name +
		"\nspec:\n  target:\n    apiVersion: " + apiVersion + "\n    kind: " + kind + "\n  customizations:\n"
	if aggregation != "" {
		doc += "    statusAggregation:\n      luaScript: |\n"
		for _, line := range strings.Split(aggregation, "\n") {
			doc += "        " + line + "\n"
		}
	}
	c, err := Load([]byte(doc))
	if err != nil {
		t.Fatalf("Load %s: %v", name, err)
	}
	return c
}

const markAggregation = `function AggregateStatus(desiredObj, statusItems)
  desiredObj.status = { phase = "Succeeded", message = "%s" }
  return desiredObj
end`

func TestInterpreterDispatch(t *testing.T) {
	mark := func(m string) string { return strings.Replace(markAggregation, "%s", m, 1) }
	cases := []struct {
		name           string
		customizations []*Customization
		wantMessage    string // "" means the built-in aggregation ran
	}{
		{name: "none", wantMessage: ""},
		{name: "other kind only", customizations: []*Customization{customization(t, "deploy", "apps/v1", "Deployment", mark("deploy"))}},
		{name: "other version only", customizations: []*Customization{customization(t, "v2pod", "v2", "Pod", mark("v2"))}},
		{name: "pod", customizations: []*Customization{customization(t, "pod", "v1", "Pod", mark("pod"))}, wantMessage: "pod"},
		{name: "first name wins", customizations: []*Customization{
			customization(t, "b-second", "v1", "Pod", mark("b")), customization(t, "a-first", "v1", "Pod", mark("a"))}, wantMessage: "a"},
		{name: "a rule-less customization does not shadow", customizations: []*Customization{
			customization(t, "a-empty", "v1", "Pod", ""), customization(t, "b-real", "v1", "Pod", mark("b"))}, wantMessage: "b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := NewInterpreter(tc.customizations...)
			out, err := in.AggregateStatus(podTemplate(nil), []StatusItem{{ClusterName: "member1", Status: map[string]any{"phase": "Running"}}})
			if err != nil {
				t.Fatalf("AggregateStatus: %v", err)
			}
			pod := toPod(t, out)
			if pod.Status.Message != tc.wantMessage {
				t.Errorf("message = %q, want %q", pod.Status.Message, tc.wantMessage)
			}
			if tc.wantMessage == "" && pod.Status.Phase != "Running" {
				t.Errorf("built-in phase = %q", pod.Status.Phase)
			}
		})
	}

	if _, err := NewInterpreter().AggregateStatus(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d"}}}, nil); !errors.Is(err, ErrNotCustomized) {
		t.Errorf("Deployment without customization: err = %v, want ErrNotCustomized", err)
	}
	if _, err := customization(t, "none", "v1", "Pod", "").AggregateStatus(podTemplate(nil), nil); !errors.Is(err, ErrNotCustomized) {
		t.Errorf("no script: err = %v, want ErrNotCustomized", err)
	}
}

func TestCustomReflectStatus(t *testing.T) {
	doc := `apiVersion: config.karmada.io/v1alpha1
kind: ResourceInterpreterCustomization
metadata:
  name: reflect
spec:
  target: {apiVersion: v1, kind: Pod}
  customizations:
    statusReflection:
      luaScript: |
        function ReflectStatus(observedObj)
          local status = {}
          status.phase = observedObj.status.phase
          status.names = {}
          for i, cs in ipairs(observedObj.status.containerStatuses) do
            status.names[i] = cs.name
          end
          status.empty = {}
          status.restarts = observedObj.status.containerStatuses[1].restartCount + 1
          return status
        end
`
	c, err := Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	in := NewInterpreter(c)
	status, ok, err := in.ReflectStatus(podTemplate(runningStatus("10.244.1.5")))
	if err != nil || !ok {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	names, isList := status["names"].([]any)
	if !isList || len(names) != 2 || names[0] != "build" || names[1] != "helper" {
		t.Errorf("names = %#v", status["names"])
	}
	if _, present := status["empty"]; present {
		t.Errorf("empty table kept: %#v", status["empty"])
	}
	if status["restarts"] != int64(1) || status["phase"] != "Running" {
		t.Errorf("status = %#v", status)
	}
}

func TestLoadRejects(t *testing.T) {
	header := "apiVersion: config.karmada.io/v1alpha1\nkind: ResourceInterpreterCustomization\nmetadata: {name: x}\n"
	cases := map[string]string{
		"not yaml":            "::: [",
		"wrong kind":          "apiVersion: config.karmada.io/v1alpha1\nkind: ConfigMap\nmetadata: {name: x}\nspec: {target: {apiVersion: v1, kind: Pod}}\n",
		"no name":             "apiVersion: config.karmada.io/v1alpha1\nkind: ResourceInterpreterCustomization\nspec: {target: {apiVersion: v1, kind: Pod}}\n",
		"no target kind":      header + "spec: {target: {apiVersion: v1}}\n",
		"misspelt rule":       header + "spec:\n  target: {apiVersion: v1, kind: Pod}\n  customizations:\n    statusAgregation: {luaScript: x}\n",
		"syntax error":        header + "spec:\n  target: {apiVersion: v1, kind: Pod}\n  customizations:\n    statusAggregation: {luaScript: 'function AggregateStatus('}\n",
		"wrong function":      header + "spec:\n  target: {apiVersion: v1, kind: Pod}\n  customizations:\n    statusAggregation: {luaScript: 'function Aggregate(a, b) return a end'}\n",
		"reflection misnamed": header + "spec:\n  target: {apiVersion: v1, kind: Pod}\n  customizations:\n    statusReflection: {luaScript: 'function AggregateStatus(a, b) return a end'}\n",
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Load([]byte(doc)); err == nil {
				t.Fatal("Load accepted it")
			}
		})
	}
}

// sandboxScript wraps body as an AggregateStatus that must return desiredObj.
func runSandbox(body string) (*unstructured.Unstructured, error) {
	c := &Customization{Name: "sandbox", rules: rules{StatusAggregation: &luaRule{LuaScript: "function AggregateStatus(desiredObj, statusItems)\n" + body + "\nend"}}}
	return c.AggregateStatus(podTemplate(nil), []StatusItem{{ClusterName: "member1"}})
}

func TestSandbox(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		wantErr string // "" means it must succeed
	}{
		{name: "os.execute is absent", body: "os.execute('true') return desiredObj", wantErr: "attempt to call a non-function"},
		{name: "os.getenv is absent", body: "return os.getenv('HOME')", wantErr: "attempt to call a non-function"},
		{name: "io is absent", body: "io.write('x') return desiredObj", wantErr: "attempt to index a non-table"},
		{name: "load is refused", body: "load('return 1') return desiredObj", wantErr: "not supported in karmada"},
		{name: "setmetatable is refused", body: "setmetatable({}, {}) return desiredObj", wantErr: "not supported in karmada"},
		{name: "string.rep is refused", body: "local s = string.rep('x', 3) return desiredObj", wantErr: "string.rep"},
		{name: "method gsub is refused", body: "local s = ('abc'):gsub('a', 'b') return desiredObj", wantErr: "string.gsub"},
		{name: "require of a file is refused", body: "require('os2') return desiredObj", wantErr: "os2"},
		{name: "loadlib is refused", body: "package.loadlib('x', 'y') return desiredObj", wantErr: "loadlib"},
		{name: "non-table result", body: "return 1", wantErr: "table"},
		{name: "shared table cannot encode", body: "local t = {a = 1}\ndesiredObj.status = {x = t, y = t}\nreturn desiredObj", wantErr: "nested"},
		{name: "result without kind", body: "return {metadata = {name = 'x'}}", wantErr: "Kind"},
		{name: "runaway script hits the deadline", body: "while true do end", wantErr: "context deadline exceeded"},
		{name: "allowed libraries work", body: `
local kube = require("kube")
local sum = kube.resourceAdd("100m", "200m", nil)
local t = {}
table.insert(t, string.upper(string.format("%s-%d", "x", 1)))
desiredObj.status = { message = sum .. " " .. t[1] .. " " .. tostring(math.max(1, 2)) .. " " .. tostring(os.time() > 0) .. " " .. os.date("!%Y", 0) }
return desiredObj`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out, err := runSandbox(tc.body)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if msg := toPod(t, out).Status.Message; msg != "300m X-1 2 true 1970" {
					t.Errorf("message = %q", msg)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
			}
			if elapsed := time.Since(start); elapsed > 5*scriptTimeout {
				t.Errorf("took %v", elapsed)
			}
		})
	}
}
