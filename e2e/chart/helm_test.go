package chart

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/helmtest"
)

// chartDir is the chart under test, relative to this package.
const chartDir = "../../charts/gateway"

// kubeVersion and runHelm are helmtest's, named for this package's tests.
const kubeVersion = helmtest.KubeVersion

var runHelm = helmtest.Run

// valuesFile writes v as a values file and returns its path. Not under
// t.TempDir: helm splits --values on commas, and subtest names have them.
func valuesFile(t *testing.T, v string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "chart-values-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// templateArgs is `helm template` for release gw in karmada-system with values.
func templateArgs(t *testing.T, values string) []string {
	return []string{"template", "gw", chartDir, "--namespace", "karmada-system",
		"--kube-version", kubeVersion, "--values", valuesFile(t, values)}
}

// render runs helm template and decodes every document.
func render(t *testing.T, values string) objects {
	t.Helper()
	out, stderr, err := runHelm(t, templateArgs(t, values)...)
	if err != nil {
		t.Fatalf("helm template failed: %v\n%s", err, stderr)
	}
	return decodeAll(t, out)
}

// renderError runs helm template expecting it to fail and returns stderr.
func renderError(t *testing.T, values string) string {
	t.Helper()
	out, stderr, err := runHelm(t, templateArgs(t, values)...)
	if err == nil {
		t.Fatalf("helm template accepted values that must be rejected:\n%s\nrendered:\n%s", values, out)
	}
	return stderr
}

// objects is a rendered release.
type objects []*unstructured.Unstructured

// decodeAll splits a multi-document stream and strictly decodes each
// document, so a value that renders broken YAML fails the test.
func decodeAll(t *testing.T, s string) objects {
	t.Helper()
	var objs objects
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("splitting rendered YAML: %v", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.UnmarshalStrict(doc, &m); err != nil {
			t.Fatalf("rendered document is not valid YAML: %v\n%s", err, doc)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			t.Fatalf("rendered document lacks apiVersion, kind or name:\n%s", doc)
		}
		objs = append(objs, u)
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// find returns the objects of kind, optionally with name.
func (o objects) find(kind, name string) objects {
	var out objects
	for _, u := range o {
		if u.GetKind() == kind && (name == "" || u.GetName() == name) {
			out = append(out, u)
		}
	}
	return out
}

// one returns the only object of kind and name, failing otherwise.
func (o objects) one(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	f := o.find(kind, name)
	if len(f) != 1 {
		t.Fatalf("want exactly one %s %q, got %d (rendered: %v)", kind, name, len(f), o.names())
	}
	return f[0]
}

func (o objects) names() []string {
	var n []string
	for _, u := range o {
		n = append(n, u.GetKind()+"/"+u.GetName())
	}
	return n
}

// convert turns a rendered object into a typed one, strictly: a field the
// API type does not know is a template bug.
func convert(t *testing.T, in any, out any) {
	t.Helper()
	decode(t, in, out, yaml.UnmarshalStrict)
}

// partial decodes the fields out names and ignores the rest.
func partial(t *testing.T, in any, out any) {
	t.Helper()
	decode(t, in, out, func(b []byte, o any, _ ...yaml.JSONOpt) error { return yaml.Unmarshal(b, o) })
}

func decode(t *testing.T, in, out any, unmarshal func([]byte, any, ...yaml.JSONOpt) error) {
	t.Helper()
	b, err := yaml.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := unmarshal(b, out); err != nil {
		t.Fatalf("decoding into %T: %v\n%s", out, err, b)
	}
}

// karmadaObjects decodes the karmada-apiserver manifest set that the hook
// ConfigMap carries, all of its keys.
func karmadaObjects(t *testing.T, all objects) objects {
	t.Helper()
	cm := all.one(t, "ConfigMap", "gw-karmada-exec-gateway-karmada-resources")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	var objs objects
	for _, k := range []string{"gateway-rbac.yaml", "pod-status-interpreter.yaml"} {
		if data[k] != "" {
			objs = append(objs, decodeAll(t, data[k])...)
		}
	}
	return objs
}
