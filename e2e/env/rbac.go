package env

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// The gateway's RBAC is the chart's: the environment renders
// charts/gateway for karmada-apiserver (target=karmadaApiserver, the
// objects the hook Job of a host release applies) and applies them as that
// Job does. The member RBAC reaches the members as in a real install,
// through the chart's ClusterPropagationPolicy and Karmada's own
// propagation, so the environment exercises exactly what an operator gets,
// and a rule the chart lacks fails the e2e tests that need it.

// gatewayRelease names the rendered release. It contains the chart's name,
// so the chart's objects are named karmada-exec-gateway[-suffix].
const gatewayRelease = "karmada-exec-gateway"

// gatewayFieldManager is the field manager of the chart's hook Job
// (kubectl apply --server-side --field-manager=karmada-exec-gateway).
const gatewayFieldManager = "karmada-exec-gateway"

// gatewayChartValues are the values of an install whose identity is the
// environment's gateway user. Tests restart the one gateway in either auth
// mode, so the release is the superset: authorize mode with client
// certificates, the service proxy and direct member access on. A passthrough gateway needs less in
// karmada-apiserver and nothing in the members.
var gatewayChartValues = []string{
	"target=karmadaApiserver",
	"karmada.identity.user=" + UserGateway,
	"auth.mode=authorize",
	// The chart grants impersonation (certificate callers on non-pod
	// routes) when a client CA is configured. The environment hands the
	// gateway --client-ca-file itself; the name only switches the rules on.
	"auth.clientCA.secretName=e2e-ca",
	"serviceProxy.enabled=true",
	// Direct member access: the gateway reads the Secret member-trust
	// publishes; member-trust, with an identity of its own, the members'.
	"memberAccess.mode=direct",
	"memberAccess.memberTrust.identity.user=" + UserMemberTrust,
	"labeler.leaderElection.namespace=" + KarmadaSystem,
	// TestPodStatusFidelity installs the Pod status interpreter itself and
	// needs none before.
	"karmadaResources.podStatusInterpreter=false",
}

// ChartDir is the gateway's Helm chart in the root module.
func (e *Env) ChartDir() string { return filepath.Join(e.opts.Gateway.SourceDir, "charts", "gateway") }

// Helm is the helm binary `make tools` builds into BinDir.
func (e *Env) Helm() string { return filepath.Join(e.opts.BinDir, "helm") }

// applyGatewayRBAC renders the chart's karmada-apiserver objects, applies
// them, and waits until Karmada has propagated the member RBAC: through
// every member's cluster proxy the gateway's identity can list events, which
// takes its clusters/proxy binding, the impersonation Karmada's
// unified-auth controller derives from it, and the member ClusterRole and
// binding.
func (e *Env) applyGatewayRBAC(ctx context.Context) error {
	objs, err := renderChart(ctx, e.Helm(), e.ChartDir(), filepath.Join(e.workDir, "helm"), gatewayRelease, KarmadaSystem, gatewayChartValues)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	if err := serverSideApply(ctx, dyn, objs); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(e.KarmadaConfig(UserGateway))
	if err != nil {
		return err
	}
	rc := cs.CoreV1().RESTClient()
	for _, m := range e.opts.Members {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := e.ComponentErrors(); err != nil {
				return false, err
			}
			_, err := rc.Get().AbsPath(karmada.ClusterProxyPath(m, "/api/v1/namespaces/"+Namespace+"/events")).Param("limit", "1").DoRaw(ctx)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("wait for the chart's member RBAC in %s (as %s through the cluster proxy: %s): %w", m, UserGateway, last, err)
		}
	}
	return nil
}

// HelmCommand is helm with args, away from the user's helm configuration,
// cache, repositories and clusters: its state lives under home.
func HelmCommand(ctx context.Context, helm, home string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	return cmd
}

// renderChart runs helm template for release with values (--set) away from
// the user's helm configuration and clusters (state under home), and
// decodes every object.
func renderChart(ctx context.Context, helm, chart, home, release, namespace string, values []string) ([]*unstructured.Unstructured, error) {
	if _, err := os.Stat(helm); err != nil {
		return nil, fmt.Errorf("%s is missing (make tools builds it): %w", helm, err)
	}
	args := []string{"template", release, chart, "--namespace", namespace}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	cmd := HelmCommand(ctx, helm, home, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	for _, doc := range splitYAML(stdout.Bytes()) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("decode what helm rendered from %s: %w", chart, err)
		}
		if len(obj) == 0 {
			continue // only comments
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("helm rendered nothing from %s", chart)
	}
	return objs, nil
}

// serverSideApply applies every object as the chart's hook Job does
// (server-side, forcing conflicts, its field manager). A namespaced object
// carries its namespace, as the chart's karmada-apiserver objects do.
func serverSideApply(ctx context.Context, dyn dynamic.Interface, objs []*unstructured.Unstructured) error {
	for _, obj := range objs {
		gvr, _ := meta.UnsafeGuessKindToResource(obj.GroupVersionKind())
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if ns := obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		body, err := json.Marshal(obj.Object)
		if err != nil {
			return err
		}
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: gatewayFieldManager, Force: ptr.To(true)}); err != nil {
			return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}
