package interpreter

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"sigs.k8s.io/yaml"
)

// crdDir follows e2e/env: E2E_CRD_DIR, else ../shared/karmada/crds next to
// the repository root.
func crdDir() string {
	if dir := os.Getenv("E2E_CRD_DIR"); dir != "" {
		return dir
	}
	return filepath.Join("..", "..", "..", "shared", "karmada", "crds")
}

// checkAgainstSchema walks value with the structural schema: every object key
// must be a declared property (unless unknown fields are preserved), required
// keys must be present, and declared types must match.
func checkAgainstSchema(path string, value any, schema map[string]any) []string {
	var problems []string
	switch want, _ := schema["type"].(string); want {
	case "string":
		if _, ok := value.(string); !ok {
			return []string{fmt.Sprintf("%s: want string, got %T", path, value)}
		}
	case "object":
		obj, ok := value.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want object, got %T", path, value)}
		}
		props, hasProps := schema["properties"].(map[string]any)
		preserve, _ := schema["x-kubernetes-preserve-unknown-fields"].(bool)
		for _, req := range asStrings(schema["required"]) {
			if _, ok := obj[req]; !ok {
				problems = append(problems, fmt.Sprintf("%s: required %q missing", path, req))
			}
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub, declared := props[k].(map[string]any)
			switch {
			case declared:
				problems = append(problems, checkAgainstSchema(path+"."+k, obj[k], sub)...)
			case hasProps && !preserve:
				problems = append(problems, fmt.Sprintf("%s: %q is not in the CRD schema", path, k))
			}
		}
	}
	return problems
}

func asStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, item := range list {
		if s, ok := item.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func TestShippedMatchesCRD(t *testing.T) {
	crdBytes, err := os.ReadFile(filepath.Join(crdDir(), "config.karmada.io_resourceinterpretercustomizations.yaml"))
	if err != nil {
		t.Fatalf("read CRD (set E2E_CRD_DIR): %v", err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(crdBytes, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd["spec"].(map[string]any)
	names := spec["names"].(map[string]any)
	var schema map[string]any
	for _, v := range spec["versions"].([]any) {
		version := v.(map[string]any)
		if version["name"] == "v1alpha1" {
			schema = version["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
		}
	}
	if schema == nil {
		t.Fatal("CRD has no v1alpha1 schema")
	}

	shipped, err := os.ReadFile(shippedPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(shipped, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["apiVersion"] != spec["group"].(string)+"/v1alpha1" || doc["kind"] != names["kind"] {
		t.Errorf("apiVersion/kind = %v %v, CRD serves %v/v1alpha1 %v", doc["apiVersion"], doc["kind"], spec["group"], names["kind"])
	}
	if spec["scope"] != "Cluster" {
		t.Errorf("CRD scope %v: the manifest assumes cluster scope", spec["scope"])
	} else if ns, ok := doc["metadata"].(map[string]any)["namespace"]; ok {
		t.Errorf("cluster-scoped object has metadata.namespace %v", ns)
	}
	for _, problem := range checkAgainstSchema("", doc, schema) {
		t.Error(problem)
	}
	// The walk above must have reached the script; guard against a schema
	// shape change making it vacuous.
	if problems := checkAgainstSchema("", map[string]any{"spec": map[string]any{"target": map[string]any{"kind": "Pod"},
		"customizations": map[string]any{"statusAgregation": map[string]any{}}}}, schema); len(problems) < 2 {
		t.Errorf("schema check accepts a misspelt rule and a missing target.apiVersion: %v", problems)
	}
}
