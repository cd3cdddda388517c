package chart

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test, relative to this package.
const chartDir = "../../charts/gateway"

// kubeVersion pins the capabilities helm renders against to the release the
// project uses, whatever client-go the helm tool module was built with.
const kubeVersion = "1.37.2"

// helmBin is bin/helm (or $HELM). A missing helm fails the suite: a chart
// test that skips would count as passing without rendering anything.
func helmBin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("HELM")
	if p == "" {
		p = "../../bin/helm"
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatalf("helm path %q: %v", p, err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("helm not found at %s (build it with `make helm`, or set HELM): %v", abs, err)
	}
	return abs
}

// runHelm runs helm with args and returns stdout, stderr and the error.
func runHelm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	// Keep helm away from the user's config, cache and repositories.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

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
